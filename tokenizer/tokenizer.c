// tokenizer.c — building the runtime tokenizer's tables from a TokenizerData, encode()
// (special tokens, normalisation, dispatch to the BPE or SPM encoder) and token lookups.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_byte_level.h"
#include "tokenizer/tok_utf8.h"
#include "tokenizer/tokenizer_internal.h"
#include "base/errmsg.h"


// Split regexes, HF tokenizer.json spelling (PCRE2 reads them the same way under UTF+UCP).
static const char *pre_regex(uint32_t pre) {
    switch (pre) {
    case EMX_PRE_GPT2:
    case EMX_PRE_SMOLLM:  // digits are split off first (tok_bpe.c), then the GPT-2 rules
        return "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
    case EMX_PRE_LLAMA3:
        return "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|"
               " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    case EMX_PRE_QWEN2:
        return "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|"
               " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    default:
        return NULL;
    }
}

static const char *raw_key(const void *ctx, int32_t id, uint32_t *len) {
    const EmxTokenizer *tk = ctx;
    *len = tk->raw_off[id + 1] - tk->raw_off[id];
    return tk->raw + tk->raw_off[id];
}

static const char *piece_key(const void *ctx, int32_t id, uint32_t *len) {
    const EmxTokenizer *tk = ctx;
    *len = tk->td.piece_offsets[id + 1] - tk->td.piece_offsets[id];
    return tk->td.piece_bytes + tk->td.piece_offsets[id];
}

static int byte_piece_value(const char *s, size_t len) {
    if (len != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10
              : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

// Raw bytes of each token: what decoding it produces.
static int build_raw(EmxTokenizer *tk) {
    const TokenizerData *t = &tk->td;
    uint32_t n = t->n_vocab;
    tk->raw_off = malloc(((size_t)n + 1) * sizeof *tk->raw_off);
    // Raw never exceeds the spelling (unspelling and "▁" -> " " only shrink).
    tk->raw = malloc(t->piece_offsets[n] ? t->piece_offsets[n] : 1);
    if (!tk->raw_off || !tk->raw) return -1;
    uint32_t pos = 0;
    for (uint32_t i = 0; i < n; i++) {
        tk->raw_off[i] = pos;
        const char *p = t->piece_bytes + t->piece_offsets[i];
        uint32_t len = t->piece_offsets[i + 1] - t->piece_offsets[i];
        char *o = tk->raw + pos;
        uint8_t type = t->types[i];
        int bv = byte_piece_value(p, len);
        if (type == EMX_TOKT_UNUSED) {
            len = 0;
        } else if (type == EMX_TOKT_BYTE && bv >= 0) {
            o[0] = (char)bv;
            len = 1;
        } else if (type == EMX_TOKT_CONTROL || (type == EMX_TOKT_USER_DEFINED && t->kind != EMX_TOK_SPM)) {
            memcpy(o, p, len);  // added tokens are stored as their text; SPM's user-defined
                                // ones ("▁▁" runs) print "▁" as a space, as HF and llama.cpp do
        } else if (t->kind == EMX_TOK_BPE_BYTELEVEL) {
            int r = bytelevel_unspell(p, len, o);
            if (r >= 0) len = (uint32_t)r;
            else memcpy(o, p, len);  // not in the alphabet: keep the text as it is
        } else {
            uint32_t k = 0, j = 0;
            while (j < len) {
                if (j + 3 <= len && memcmp(p + j, "\xE2\x96\x81", 3) == 0) o[k++] = ' ', j += 3;
                else o[k++] = p[j++];
            }
            len = k;
        }
        pos += len;
        if (len > tk->max_raw_len) tk->max_raw_len = len;
    }
    tk->raw_off[n] = pos;
    return 0;
}

static int build_special(EmxTokenizer *tk) {
    const TokenizerData *t = &tk->td;
    if (strmap_init(&tk->special, t->n_vocab, piece_key, tk) != 0) return -1;
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        uint8_t type = t->types[i];
        uint32_t len = t->piece_offsets[i + 1] - t->piece_offsets[i];
        if ((type != EMX_TOKT_CONTROL && type != EMX_TOKT_USER_DEFINED) || len == 0) continue;
        if (strmap_put(&tk->special, (int32_t)i) != 0) continue;  // duplicate text: first id
        tk->special_first[(uint8_t)t->piece_bytes[t->piece_offsets[i]]] = 1;
        if (tk->n_special_lens < 0) continue;
        int k;
        for (k = 0; k < tk->n_special_lens && tk->special_lens[k] != len; k++) {}
        if (k < tk->n_special_lens) continue;
        if (tk->n_special_lens == 64) tk->n_special_lens = -1;  // many lengths: try them all
        else tk->special_lens[tk->n_special_lens++] = len;
    }
    // Longest first: at each position the longest added token wins (HF leftmost-longest).
    for (int a = 0; a < tk->n_special_lens; a++)
        for (int b = a + 1; b < tk->n_special_lens; b++)
            if (tk->special_lens[b] > tk->special_lens[a]) {
                uint32_t x = tk->special_lens[a];
                tk->special_lens[a] = tk->special_lens[b];
                tk->special_lens[b] = x;
            }
    return 0;
}

static int build_bpe(EmxTokenizer *tk, char *err, size_t errlen) {
    const TokenizerData *t = &tk->td;
    if (strmap_init(&tk->vocab, t->n_vocab, raw_key, tk) != 0) return -1;
    // Loading is bound by cache misses in the big tables: work in batches, prefetching each
    // batch's slots before touching them.
    enum { BATCH = 32 };
    uint32_t hb[BATCH];
    int32_t ib[BATCH];
    for (uint32_t i0 = 0; i0 < t->n_vocab; i0 += BATCH) {
        int nb = 0;
        for (uint32_t i = i0; i < t->n_vocab && i < i0 + BATCH; i++) {
            uint8_t type = t->types[i];
            if (type != EMX_TOKT_NORMAL && type != EMX_TOKT_BYTE) continue;
            if (tk->raw_off[i + 1] == tk->raw_off[i]) continue;
            ib[nb] = (int32_t)i;
            hb[nb] = tok_hash_bytes(tk->raw + tk->raw_off[i], tk->raw_off[i + 1] - tk->raw_off[i]);
            __builtin_prefetch(strmap_slot_addr(&tk->vocab, hb[nb]), 1);
            nb++;
        }
        for (int k = 0; k < nb; k++) strmap_put_h(&tk->vocab, ib[k], hb[k]);
    }
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        tk->byte_id[b] = strmap_get(&tk->vocab, &c, 1);
    }
    if (pairmap_init(&tk->pairs, t->n_merges ? t->n_merges : 1) != 0) return -1;
    // The merged token is the one whose raw bytes are the concatenation of the two parts.
    size_t stride = 2 * (size_t)tk->max_raw_len + 8;
    char *cat = malloc(BATCH * stride);
    if (!cat) return -1;
    uint32_t lb[BATCH];
    int32_t mb[BATCH];
    for (uint32_t r0 = 0; r0 < t->n_merges; r0 += BATCH) {
        uint32_t nb = t->n_merges - r0 < BATCH ? t->n_merges - r0 : BATCH;
        for (uint32_t k = 0; k < nb; k++) {
            int32_t a = t->merges[2 * (r0 + k)], b = t->merges[2 * (r0 + k) + 1];
            uint32_t la = tk->raw_off[a + 1] - tk->raw_off[a];
            uint32_t lbb = tk->raw_off[b + 1] - tk->raw_off[b];
            char *c = cat + k * stride;
            memcpy(c, tk->raw + tk->raw_off[a], la);
            memcpy(c + la, tk->raw + tk->raw_off[b], lbb);
            lb[k] = la + lbb;
            hb[k] = tok_hash_bytes(c, lb[k]);
            __builtin_prefetch(strmap_slot_addr(&tk->vocab, hb[k]), 0);
        }
        for (uint32_t k = 0; k < nb; k++) {
            mb[k] = strmap_get_h(&tk->vocab, cat + k * stride, lb[k], hb[k]);
            int32_t a = t->merges[2 * (r0 + k)], b = t->merges[2 * (r0 + k) + 1];
            __builtin_prefetch(&tk->pairs.slot[pairmap_index(&tk->pairs, a, b)], 1);
        }
        for (uint32_t k = 0; k < nb; k++)
            if (mb[k] >= 0)
                pairmap_put(&tk->pairs, t->merges[2 * (r0 + k)], t->merges[2 * (r0 + k) + 1],
                            r0 + k, mb[k]);
    }
    free(cat);
    const char *re = pre_regex(t->pre);
    if (!re) {
        emx_seterr(err, errlen, "tokenizer: pre = %u has no split regex for byte-level BPE", t->pre);
        return -2;
    }
    int ecode;
    PCRE2_SIZE eoff;
    tk->re = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &ecode,
                           &eoff, NULL);
    if (!tk->re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ecode, msg, sizeof msg);
        emx_seterr(err, errlen, "tokenizer: split regex does not compile at %zu: %s", (size_t)eoff,
               (const char *)msg);
        return -2;
    }
    tk->re_jit = pcre2_jit_compile(tk->re, PCRE2_JIT_COMPLETE) == 0;
    tk->mctx = pcre2_match_context_create(NULL);
    if (!tk->mctx) return -1;
    pcre2_set_match_limit(tk->mctx, UINT32_MAX);
    pcre2_set_depth_limit(tk->mctx, UINT32_MAX);
    pcre2_set_heap_limit(tk->mctx, UINT32_MAX);
    return 0;
}

static int build_spm(EmxTokenizer *tk) {
    const TokenizerData *t = &tk->td;
    if (strmap_init(&tk->vocab, t->n_vocab, piece_key, tk) != 0) return -1;
    for (int b = 0; b < 256; b++) tk->byte_id[b] = t->unk_id;
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        uint8_t type = t->types[i];
        uint32_t len = t->piece_offsets[i + 1] - t->piece_offsets[i];
        if (type == EMX_TOKT_BYTE) {
            int v = byte_piece_value(t->piece_bytes + t->piece_offsets[i], len);
            if (v >= 0 && tk->byte_id[v] == t->unk_id) tk->byte_id[v] = (int32_t)i;
        } else if ((type == EMX_TOKT_NORMAL || type == EMX_TOKT_USER_DEFINED) && len) {
            strmap_put(&tk->vocab, (int32_t)i);
        }
    }
    if (!(t->flags & EMX_TOKF_MERGE_BY_RANK)) return 0;
    // HF BPE (byte_fallback): the pair (a, b) of rank r merges into the piece spelled a + b.
    if (pairmap_init(&tk->pairs, t->n_merges ? t->n_merges : 1) != 0) return -1;
    char *cat = malloc(2 * (size_t)t->max_piece_len + 8);
    if (!cat) return -1;
    for (uint32_t r = 0; r < t->n_merges; r++) {
        int32_t a = t->merges[2 * r], b = t->merges[2 * r + 1];
        uint32_t la = t->piece_offsets[a + 1] - t->piece_offsets[a];
        uint32_t lb = t->piece_offsets[b + 1] - t->piece_offsets[b];
        memcpy(cat, t->piece_bytes + t->piece_offsets[a], la);
        memcpy(cat + la, t->piece_bytes + t->piece_offsets[b], lb);
        int32_t m = strmap_get(&tk->vocab, cat, la + lb);
        if (m >= 0) pairmap_put(&tk->pairs, a, b, r, m);  // a repeated pair keeps its first rank
    }
    free(cat);
    return 0;
}

EmxTokenizer *emx_tokenizer_new(const TokenizerData *t, char *err, size_t errlen) {
    if (!t || !t->piece_offsets || !t->types || t->n_vocab == 0) {
        emx_seterr(err, errlen, "tokenizer: empty tokenizer data");
        return NULL;
    }
    if (t->kind != EMX_TOK_BPE_BYTELEVEL && t->kind != EMX_TOK_SPM) {
        emx_seterr(err, errlen, "tokenizer: kind = %u is not supported", t->kind);
        return NULL;
    }
    EmxTokenizer *tk = calloc(1, sizeof *tk);
    if (!tk) {
        emx_seterr(err, errlen, "tokenizer: out of memory");
        return NULL;
    }
    tk->td = *t;
    tk->td.owned = NULL;
    tk->n_vocab = t->n_vocab;
    int rc = build_raw(tk);
    if (rc == 0) rc = build_special(tk);
    if (rc == 0) rc = t->kind == EMX_TOK_BPE_BYTELEVEL ? build_bpe(tk, err, errlen) : build_spm(tk);
    if (rc == 0 && (t->flags & EMX_TOKF_NFC)) rc = tok_nfc_init(tk);
    if (rc != 0) {
        if (rc == -1) emx_seterr(err, errlen, "tokenizer: out of memory building tables");
        emx_tokenizer_free(tk);
        return NULL;
    }
    return tk;
}

void emx_tokenizer_free(EmxTokenizer *tk) {
    if (!tk) return;
    free(tk->raw_off);
    free(tk->raw);
    free(tk->nfc_safe);
    strmap_free(&tk->vocab);
    strmap_free(&tk->special);
    pairmap_free(&tk->pairs);
    if (tk->re) pcre2_code_free(tk->re);
    if (tk->mctx) pcre2_match_context_free(tk->mctx);
    free(tk);
}

// Longest added token starting at text[i], or -1.
static int32_t match_special(const EmxTokenizer *tk, const char *text, size_t n, size_t i,
                             uint32_t *len) {
    if (!tk->special_first[(uint8_t)text[i]]) return -1;
    int all = tk->n_special_lens < 0;
    int nl = all ? (int)tk->td.max_piece_len : tk->n_special_lens;
    for (int k = 0; k < nl; k++) {
        uint32_t l = all ? tk->td.max_piece_len - (uint32_t)k : tk->special_lens[k];
        if (l > n - i) continue;
        int32_t id = strmap_get(&tk->special, text + i, l);
        if (id >= 0) {
            *len = l;
            return id;
        }
    }
    return -1;
}

// One stretch of ordinary text (between added tokens).
static int encode_segment(const EmxTokenizer *tk, EncScratch *s, const char *text, size_t n,
                          int after_special_or_start, IdVec *out, char *err, size_t errlen) {
    if (n == 0) return 0;
    if (tk->td.kind == EMX_TOK_SPM) {
        // llama.cpp adds the dummy prefix to the first text and to text after a special token.
        int prefix = (tk->td.flags & EMX_TOKF_ADD_SPACE_PREFIX) && after_special_or_start;
        if (spm_encode_segment(tk, s, text, n, prefix, out) != 0) {
            emx_seterr(err, errlen, "tokenizer: out of memory");
            return -1;
        }
        return 0;
    }
    if (tk->td.flags & EMX_TOKF_NFC) {
        char *nfc = NULL;
        size_t m = 0;
        if (tok_nfc_normalize(tk, text, n, &nfc, &m) != 0) {
            emx_seterr(err, errlen, "tokenizer: out of memory normalising %zu bytes", n);
            return -1;
        }
        if (nfc) {
            const char *base = s->base;
            s->base_off = (size_t)(text - base), s->base = nfc;  // dropped bytes: offsets from here
            int rc = bpe_encode_segment(tk, s, nfc, m, out, err, errlen);
            s->base = base, s->base_off = 0;
            free(nfc);
            return rc;
        }
    }
    return bpe_encode_segment(tk, s, text, n, out, err, errlen);
}

int emx_encode(const EmxTokenizer *tk, const char *text, size_t len, int flags, int **ids,
               size_t *n_ids, char *err, size_t errlen) {
    return emx_encode_ex(tk, text, len, flags, ids, n_ids, NULL, err, errlen);
}

int emx_encode_ex(const EmxTokenizer *tk, const char *text, size_t len, int flags, int **ids,
                  size_t *n_ids, EmxEncodeDrops *drops, char *err, size_t errlen) {
    *ids = NULL;
    *n_ids = 0;
    if (drops) memset(drops, 0, sizeof *drops);
    IdVec out = {0};
    EncScratch s = {0};
    size_t n = 0;
    char *clean = tok_utf8_sanitize(text ? text : "", text ? len : 0, &n);
    int rc = -1;
    if (!clean) {
        emx_seterr(err, errlen, "tokenizer: out of memory for a %zu-byte text", len);
        goto done;
    }
    s.base = clean;
    if ((flags & EMX_ENC_BOS) && (tk->td.flags & EMX_TOKF_ADD_BOS) && tk->td.bos_id >= 0)
        if (idvec_push(&out, tk->td.bos_id) != 0) goto oom;
    size_t seg = 0;
    int after_special = 1;
    if (flags & EMX_ENC_SPECIAL) {
        for (size_t i = 0; i < n;) {
            uint32_t l;
            int32_t id = match_special(tk, clean, n, i, &l);
            if (id < 0) {
                i++;
                continue;
            }
            if (encode_segment(tk, &s, clean + seg, i - seg, after_special, &out, err, errlen))
                goto done;
            if (idvec_push(&out, id) != 0) goto oom;
            i += l;
            seg = i;
            after_special = 1;
        }
    }
    if (encode_segment(tk, &s, clean + seg, n - seg, after_special, &out, err, errlen)) goto done;
    // A text that starts with the BOS token itself (a rendered chat template) gets no second
    // one, as llama.cpp and the project's reference prompts do.
    if ((flags & EMX_ENC_BOS) && (tk->td.flags & EMX_TOKF_ADD_BOS) && tk->td.bos_id >= 0 &&
        out.n >= 2 && out.v[1] == tk->td.bos_id) {
        memmove(out.v, out.v + 1, (out.n - 1) * sizeof *out.v);
        out.n--;
    }
    if (!out.v && idvec_push(&out, 0) == 0) out.n = 0;  // non-NULL result for an empty text
    if (!out.v) goto oom;
    *ids = out.v;
    *n_ids = out.n;
    out.v = NULL;
    if (drops) *drops = (EmxEncodeDrops){s.n_dropped, s.drop_off, s.drop_byte};
    rc = 0;
    goto done;
oom:
    emx_seterr(err, errlen, "tokenizer: out of memory");
done:
    free(out.v);
    free(clean);
    enc_scratch_free(&s);
    return rc;
}

const char *emx_token_bytes_ref(const EmxTokenizer *tk, int id, size_t *len) {
    if (id < 0 || (uint32_t)id >= tk->n_vocab) {
        *len = 0;
        return NULL;
    }
    *len = tk->raw_off[id + 1] - tk->raw_off[id];
    return tk->raw + tk->raw_off[id];
}

size_t emx_token_bytes(const EmxTokenizer *tk, int id, char *buf, size_t cap) {
    size_t len;
    const char *p = emx_token_bytes_ref(tk, id, &len);
    if (!p) return 0;
    if (buf && cap) memcpy(buf, p, len < cap ? len : cap);
    return len;
}

int emx_is_stop(const EmxTokenizer *tk, int id) {
    for (uint32_t i = 0; i < tk->td.n_stop; i++)
        if (tk->td.stop_ids[i] == id) return 1;
    return 0;
}

int emx_is_control(const EmxTokenizer *tk, int id) {
    if (id < 0 || (uint32_t)id >= tk->n_vocab) return 0;
    return tk->td.types[id] == EMX_TOKT_CONTROL || tk->td.types[id] == EMX_TOKT_UNUSED;
}

int emx_tokenizer_bos(const EmxTokenizer *tk) { return tk->td.bos_id; }
int emx_tokenizer_n_vocab(const EmxTokenizer *tk) { return (int)tk->n_vocab; }
const TokenizerData *emx_tokenizer_data(const EmxTokenizer *tk) { return &tk->td; }

int emx_token_find(const EmxTokenizer *tk, const char *piece_text) {
    size_t len = strlen(piece_text);
    int32_t id = strmap_get(&tk->special, piece_text, len);
    if (id >= 0) return id;
    if (tk->td.kind == EMX_TOK_SPM) {
        id = strmap_get(&tk->vocab, piece_text, len);
        if (id >= 0) return id;
    }
    // Anything else (byte-level spellings, <unk>, <0x0A>): compare the stored spellings.
    const TokenizerData *t = &tk->td;
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        uint32_t l = t->piece_offsets[i + 1] - t->piece_offsets[i];
        if (l == len && t->types[i] != EMX_TOKT_UNUSED &&
            memcmp(t->piece_bytes + t->piece_offsets[i], piece_text, len) == 0)
            return (int)i;
    }
    return -1;
}
