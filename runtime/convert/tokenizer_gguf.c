// tokenizer_gguf.c — TokenizerData from a GGUF file's tokenizer.ggml.* metadata.
//
// GGUF keeps no normalizer and no ignore_merges flag; llama.cpp derives them from the
// pre-tokeniser name, and so do we: "qwen2" means the Qwen tokenizer.json, whose normalizer is
// NFC; "llama-bpe"/"llama3" means Llama 3, whose model has ignore_merges = true.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/convert/tok_builder.h"
#include "runtime/convert/tokenizer_gguf.h"
#include "base/errmsg.h"
#include "runtime/convert/msg_esc.h"


static int str_is(const char *s, size_t len, const char *lit) {
    return s && len == strlen(lit) && memcmp(s, lit, len) == 0;
}

static int32_t get_id(const GGUFFile *g, const char *key, uint32_t n_vocab) {
    int64_t v;
    if (gguf_get_i64(g, key, &v) != 0 || v < 0 || v >= (int64_t)n_vocab) return -1;
    return (int32_t)v;
}

static int get_bool(const GGUFFile *g, const char *key, int dflt) {
    int64_t v;
    return gguf_get_i64(g, key, &v) == 0 ? v != 0 : dflt;
}

// Pre-tokeniser names as llama.cpp's converter writes them.
static int pre_from_name(const char *s, size_t len, uint32_t *pre, uint32_t *flags) {
    if (str_is(s, len, "qwen2")) *pre = EMX_PRE_QWEN2, *flags |= EMX_TOKF_NFC;
    else if (str_is(s, len, "llama-bpe") || str_is(s, len, "llama3"))
        *pre = EMX_PRE_LLAMA3, *flags |= EMX_TOKF_IGNORE_MERGES;
    else if (str_is(s, len, "smollm") || str_is(s, len, "starcoder") || str_is(s, len, "refact"))
        *pre = EMX_PRE_SMOLLM;
    else if (str_is(s, len, "gpt2") || str_is(s, len, "gpt-2") || str_is(s, len, "default"))
        *pre = EMX_PRE_GPT2;
    else return -1;
    return 0;
}

// The arrays a GGUF tokenizer is read from, checked for presence and agreeing lengths.
typedef struct {
    uint32_t kind, n_tok, n_vocab;
    const GGUFKV *tokens, *types, *scores;  // types and scores may be NULL
} GgufTokArrays;

static int find_arrays(const GGUFFile *g, const char *path, uint32_t n_vocab, GgufTokArrays *a, char *err,
                       size_t errlen) {
    size_t mlen = 0;
    const char *model = gguf_get_str(g, "tokenizer.ggml.model", &mlen);
    if (str_is(model, mlen, "gpt2")) a->kind = EMX_TOK_BPE_BYTELEVEL;
    else if (str_is(model, mlen, "llama")) a->kind = EMX_TOK_SPM;
    else {
        emx_seterr(err, errlen, "%s: tokenizer.ggml.model = \"%s\" is not supported (gpt2, llama)",
               path, model ? ESCN(model, mlen < 40 ? mlen : 40) : "(missing)");
        return -1;
    }
    const GGUFKV *tokens = gguf_find(g, "tokenizer.ggml.tokens");
    if (!tokens || tokens->type != GGUF_ARRAY || tokens->arr_type != GGUF_STRING ||
        tokens->arr_n == 0 || tokens->arr_n >= (1u << 30)) {
        emx_seterr(err, errlen, "%s: tokenizer.ggml.tokens missing or not a string array", path);
        return -1;
    }
    uint32_t n_tok = (uint32_t)tokens->arr_n;
    if (n_vocab == 0) n_vocab = n_tok;
    if (n_tok > n_vocab) {
        emx_seterr(err, errlen, "%s: tokenizer.ggml.tokens has %u tokens, more than n_vocab = %u", path,
               n_tok, n_vocab);
        return -1;
    }
    const GGUFKV *types = gguf_find(g, "tokenizer.ggml.token_type");
    const GGUFKV *scores = gguf_find(g, "tokenizer.ggml.scores");
    if (types && (types->type != GGUF_ARRAY || types->arr_n != n_tok)) {
        emx_seterr(err, errlen, "%s: tokenizer.ggml.token_type has %llu entries, tokens has %u", path,
               (unsigned long long)(types->type == GGUF_ARRAY ? types->arr_n : 0), n_tok);
        return -1;
    }
    if (scores && (scores->type != GGUF_ARRAY || scores->arr_n != n_tok)) {
        emx_seterr(err, errlen, "%s: tokenizer.ggml.scores has %llu entries, tokens has %u", path,
               (unsigned long long)(scores->type == GGUF_ARRAY ? scores->arr_n : 0), n_tok);
        return -1;
    }
    if (a->kind == EMX_TOK_SPM && !scores) {
        emx_seterr(err, errlen, "%s: tokenizer.ggml.scores missing for a llama (SPM) tokenizer", path);
        return -1;
    }
    a->n_tok = n_tok, a->n_vocab = n_vocab, a->tokens = tokens, a->types = types, a->scores = scores;
    return 0;
}

static int oom(char *err, size_t errlen) {
    emx_seterr(err, errlen, "tokenizer: out of memory");
    return -1;
}

// Every token's piece, type and score into b, then the piece index.
static int add_pieces(TokBuilder *b, const GgufTokArrays *a, const char *path, char *err, size_t errlen) {
    for (uint32_t i = 0; i < a->n_tok; i++) {
        int64_t t = EMX_TOKT_NORMAL;
        double sc = 0;
        if (a->types && gguf_arr_i64(a->types, i, &t) != 0) {
            emx_seterr(err, errlen, "%s: tokenizer.ggml.token_type[%u] is not a number", path, i);
            return -1;
        }
        if (t == 0) t = EMX_TOKT_NORMAL;  // "undefined" in old files
        if (t < EMX_TOKT_NORMAL || t > EMX_TOKT_BYTE) {
            emx_seterr(err, errlen, "%s: tokenizer.ggml.token_type[%u] = %lld is not a token type", path,
                   i, (long long)t);
            return -1;
        }
        if (a->scores && gguf_arr_f64(a->scores, i, &sc) != 0) {
            emx_seterr(err, errlen, "%s: tokenizer.ggml.scores[%u] is not a number", path, i);
            return -1;
        }
        // Padding rows ("[PAD151669]" in Qwen GGUFs) have no text in the HF tokenizer.
        uint64_t len = t == EMX_TOKT_UNUSED ? 0 : a->tokens->arr_str_lens[i];
        if (tb_set_piece(b, i, (const char *)a->tokens->arr_strings[i], len, (uint8_t)t, (float)sc))
            return oom(err, errlen);
    }
    if (tb_index(b) != 0) return oom(err, errlen);
    return 0;
}

// tokenizer.ggml.merges ("a b" strings) as pairs of token ids; a, b and "ab" must all be tokens.
static int add_merges(TokBuilder *b, const GGUFFile *g, const char *path, char *err, size_t errlen) {
    const GGUFKV *merges = gguf_find(g, "tokenizer.ggml.merges");
    if (!merges || merges->type != GGUF_ARRAY || merges->arr_type != GGUF_STRING) {
        emx_seterr(err, errlen, "%s: tokenizer.ggml.merges missing for a gpt2 tokenizer", path);
        return -1;
    }
    char tmp[1024];
    for (uint64_t i = 0; i < merges->arr_n; i++) {
        const char *s = (const char *)merges->arr_strings[i];
        size_t len = merges->arr_str_lens[i];
        const char *sp = memchr(s, ' ', len);
        int32_t ia = -1, ib = -1, im = -1;
        if (sp) {
            size_t la = (size_t)(sp - s), lb = len - la - 1;
            ia = tb_find(b, s, la);
            ib = tb_find(b, sp + 1, lb);
            if (la + lb < sizeof tmp) {
                memcpy(tmp, s, la);
                memcpy(tmp + la, sp + 1, lb);
                im = tb_find(b, tmp, la + lb);
            }
        }
        if (ia < 0 || ib < 0 || im < 0) {
            emx_seterr(err, errlen, "%s: tokenizer.ggml.merges[%llu] = \"%s\": a part or the merged piece is not a token",
                   path, (unsigned long long)i, ESCN(s, len < 60 ? len : 60));
            return -1;
        }
        if (tb_add_merge(b, ia, ib) != 0) return oom(err, errlen);
    }
    return 0;
}

// Special ids, the BOS / space-prefix flags (added to flags) and the stop tokens.
static void set_specials(TokBuilder *b, const GGUFFile *g, uint32_t kind, uint32_t n_vocab, uint32_t flags) {
    b->meta.bos_id = get_id(g, "tokenizer.ggml.bos_token_id", n_vocab);
    b->meta.eos_id = get_id(g, "tokenizer.ggml.eos_token_id", n_vocab);
    b->meta.pad_id = get_id(g, "tokenizer.ggml.padding_token_id", n_vocab);
    b->meta.unk_id = get_id(g, "tokenizer.ggml.unknown_token_id", n_vocab);
    // llama.cpp's defaults: SPM adds BOS and a space prefix unless told otherwise.
    int spm = kind == EMX_TOK_SPM;
    if (get_bool(g, "tokenizer.ggml.add_bos_token", spm) && b->meta.bos_id >= 0)
        flags |= EMX_TOKF_ADD_BOS;
    if (spm && get_bool(g, "tokenizer.ggml.add_space_prefix", 1)) flags |= EMX_TOKF_ADD_SPACE_PREFIX;
    b->meta.flags = flags;
    tb_add_stop(b, b->meta.eos_id);
    tb_add_stop(b, get_id(g, "tokenizer.ggml.eot_token_id", n_vocab));
    tb_add_stop(b, get_id(g, "tokenizer.ggml.eom_token_id", n_vocab));
    tb_add_known_stops(b);
}

int tokdata_from_gguf(const GGUFFile *g, uint32_t n_vocab, TokenizerData *out, char *err,
                      size_t errlen) {
    memset(out, 0, sizeof *out);
    const char *path = g->path ? g->path : "gguf";
    GgufTokArrays a;
    if (find_arrays(g, path, n_vocab, &a, err, errlen)) return -1;
    n_vocab = a.n_vocab;
    TokBuilder b;
    if (tb_init(&b, n_vocab) != 0) return oom(err, errlen);
    b.meta.kind = a.kind;
    uint32_t flags = 0;
    if (a.kind == EMX_TOK_BPE_BYTELEVEL) {
        size_t plen = 0;
        const char *pre = gguf_get_str(g, "tokenizer.ggml.pre", &plen);
        if (!pre) pre = "default", plen = 7;
        if (pre_from_name(pre, plen, &b.meta.pre, &flags) != 0) {
            emx_seterr(err, errlen, "%s: tokenizer.ggml.pre = \"%s\" is not supported", path,
                   ESCN(pre, plen < 40 ? plen : 40));
            goto fail;
        }
    } else {
        b.meta.pre = EMX_PRE_NONE;
    }
    if (add_pieces(&b, &a, path, err, errlen)) goto fail;
    if (a.kind == EMX_TOK_BPE_BYTELEVEL && add_merges(&b, g, path, err, errlen)) goto fail;
    set_specials(&b, g, a.kind, n_vocab, flags);
    int rc = tb_finish(&b, out, err, errlen);
    tb_free(&b);
    return rc;
fail:
    tb_free(&b);
    return -1;
}
