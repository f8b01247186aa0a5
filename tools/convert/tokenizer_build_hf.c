// tokenizer_build_hf.c — TokenizerData from a HuggingFace model directory: tokenizer.json
// (byte-level BPE, or BPE with byte_fallback in Gemma's form), tokenizer_config.json and
// config.json (special ids).
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/convert/tok_builder.h"
#include "tools/convert/tokenizer_build.h"
#include "base/errmsg.h"
#include "runtime/convert/msg_esc.h"

// The split regexes of the supported pre-tokenisers, exactly as tokenizer.json spells them.
static const char QWEN2_REGEX[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char LLAMA3_REGEX[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";


int tokdata_link_stub(const char *text, size_t n, const char *name, char *target, size_t cap) {
    while (n && (text[n - 1] == '\n' || text[n - 1] == '\r' || text[n - 1] == ' ')) n--;
    if (n == 0 || n > TOKDATA_STUB_MAX || n >= cap || text[0] == '/') return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)text[i] < 0x20 || text[i] == 0x7f) return 0;  // NUL, newline, any control byte
    // The last component must be the file's own name: a stub links a file to its twin elsewhere,
    // never to an arbitrary file ("../../../../etc/passwd" is refused).
    const char *base = text;
    for (size_t i = 0; i < n; i++)
        if (text[i] == '/') base = text + i + 1;
    size_t bl = (size_t)(text + n - base);
    if (bl != strlen(name) || memcmp(base, name, bl) != 0) return 0;
    memcpy(target, text, n);
    target[n] = 0;
    return 1;
}

// Parses dir/name; NULL with *missing = 1 if the file does not exist, NULL with err if bad.
static cJSON *read_json_at(const char *dir, const char *name, int *missing, char *err,
                          size_t errlen, int depth) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    *missing = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        *missing = 1;
        emx_seterr(err, errlen, "%s: cannot open", path);
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        fclose(f);
        free(buf);
        emx_seterr(err, errlen, "%s: read error", path);
        return NULL;
    }
    fclose(f);
    buf[n] = 0;
    // A symlink stored as a plain file holding its target (a checkout or copy without
    // symlink support): followed once, relative to dir. Anything else is parsed as JSON.
    char target[TOKDATA_STUB_MAX + 1];
    if (depth == 0 && tokdata_link_stub(buf, (size_t)n, name, target, sizeof target)) {
        free(buf);
        char *slash = strrchr(target, '/');
        char tdir[4096];
        if (slash) snprintf(tdir, sizeof tdir, "%s/%.*s", dir, (int)(slash - target), target);
        else snprintf(tdir, sizeof tdir, "%s", dir);
        return read_json_at(tdir, slash ? slash + 1 : target, missing, err, errlen, 1);
    }
    cJSON *j = cJSON_ParseWithLength(buf, (size_t)n);
    if (!j) {
        const char *at = cJSON_GetErrorPtr();
        emx_seterr(err, errlen, "%s: invalid JSON at byte %ld", path,
               at && at >= buf && at <= buf + n ? (long)(at - buf) : -1L);
    }
    free(buf);
    return j;
}

static cJSON *read_json(const char *dir, const char *name, int *missing, char *err,
                        size_t errlen) {
    return read_json_at(dir, name, missing, err, errlen, 0);
}

static const char *jstr(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int jbool(const cJSON *o, const char *key, int dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsBool(v)) return cJSON_IsTrue(v);
    return dflt;
}

// A special token in tokenizer_config.json: "text" or {"content": "text", ...}.
static const char *config_token_text(const cJSON *cfg, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (cJSON_IsString(v)) return v->valuestring;
    if (cJSON_IsObject(v)) return jstr(v, "content");
    return NULL;
}

// Pre-tokeniser and its settings, from tokenizer.json's pre_tokenizer.
static int parse_pre(const cJSON *pre, uint32_t *out, char *err, size_t errlen) {
    const char *type = jstr(pre, "type");
    if (!type) {
        emx_seterr(err, errlen, "tokenizer.json: pre_tokenizer is missing (not a byte-level BPE)");
        return -1;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        if (jbool(pre, "add_prefix_space", 0)) {
            emx_seterr(err, errlen, "tokenizer.json: pre_tokenizer.add_prefix_space = true is not supported");
            return -1;
        }
        if (!jbool(pre, "use_regex", 1)) {
            emx_seterr(err, errlen, "tokenizer.json: pre_tokenizer ByteLevel without regex is not supported");
            return -1;
        }
        *out = EMX_PRE_GPT2;
        return 0;
    }
    if (strcmp(type, "Sequence") != 0) {
        emx_seterr(err, errlen, "tokenizer.json: pre_tokenizer.type = \"%s\" is not supported", ESC(type));
        return -1;
    }
    const cJSON *seq = cJSON_GetObjectItemCaseSensitive(pre, "pretokenizers");
    int split = -1, digits = 0, bytelevel = 0, bytelevel_regex = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, seq) {
        const char *t = jstr(p, "type");
        if (!t) t = "(none)";
        if (strcmp(t, "Split") == 0) {
            const cJSON *pat = cJSON_GetObjectItemCaseSensitive(p, "pattern");
            const char *re = jstr(pat, "Regex");
            const char *beh = jstr(p, "behavior");
            if (!re || (beh && strcmp(beh, "Isolated") != 0) || jbool(p, "invert", 0)) {
                emx_seterr(err, errlen,
                       "tokenizer.json: pre_tokenizer Split (behavior \"%s\") is not supported",
                       ESC(beh ? beh : "?"));
                return -1;
            }
            if (strcmp(re, QWEN2_REGEX) == 0) split = EMX_PRE_QWEN2;
            else if (strcmp(re, LLAMA3_REGEX) == 0) split = EMX_PRE_LLAMA3;
            else {
                emx_seterr(err, errlen, "tokenizer.json: pre_tokenizer Split regex \"%.80s\" is not a known one",
                       ESC(re));
                return -1;
            }
        } else if (strcmp(t, "Digits") == 0) {
            if (!jbool(p, "individual_digits", 0)) {
                emx_seterr(err, errlen, "tokenizer.json: pre_tokenizer Digits individual_digits = false is not supported");
                return -1;
            }
            digits = 1;
        } else if (strcmp(t, "ByteLevel") == 0) {
            if (jbool(p, "add_prefix_space", 0)) {
                emx_seterr(err, errlen, "tokenizer.json: pre_tokenizer.add_prefix_space = true is not supported");
                return -1;
            }
            bytelevel = 1;
            bytelevel_regex = jbool(p, "use_regex", 1);
        } else {
            emx_seterr(err, errlen, "tokenizer.json: pre_tokenizer type \"%s\" in Sequence is not supported", ESC(t));
            return -1;
        }
    }
    if (!bytelevel) {
        emx_seterr(err, errlen, "tokenizer.json: pre_tokenizer has no ByteLevel step (not a byte-level BPE)");
        return -1;
    }
    if (split >= 0 && !digits && !bytelevel_regex) *out = (uint32_t)split;
    else if (split < 0 && digits && bytelevel_regex) *out = EMX_PRE_SMOLLM;
    else if (split < 0 && !digits && bytelevel_regex) *out = EMX_PRE_GPT2;
    else {
        emx_seterr(err, errlen, "tokenizer.json: pre_tokenizer Sequence combination is not supported");
        return -1;
    }
    return 0;
}

static int parse_normalizer(const cJSON *norm, uint32_t *flags, char *err, size_t errlen) {
    if (!norm || cJSON_IsNull(norm)) return 0;
    const char *type = jstr(norm, "type");
    if (type && strcmp(type, "NFC") == 0) {
        *flags |= EMX_TOKF_NFC;
        return 0;
    }
    if (type && strcmp(type, "Sequence") == 0) {
        const cJSON *n;
        cJSON_ArrayForEach(n, cJSON_GetObjectItemCaseSensitive(norm, "normalizers")) {
            if (parse_normalizer(n, flags, err, errlen) != 0) return -1;
        }
        return 0;
    }
    emx_seterr(err, errlen, "tokenizer.json: normalizer.type = \"%s\" is not supported",
           ESC(type ? type : "?"));
    return -1;
}

// Llama 3: post_processor TemplateProcessing whose "single" starts with a special token.
static const cJSON *find_template(const cJSON *pp) {
    const char *type = jstr(pp, "type");
    if (!type) return NULL;
    if (strcmp(type, "TemplateProcessing") == 0) return pp;
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *p;
        cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(pp, "processors")) {
            const cJSON *t = find_template(p);
            if (t) return t;
        }
    }
    return NULL;
}

static int32_t find_text(const TokBuilder *b, const char *s) {
    return s ? tb_find(b, s, strlen(s)) : -1;
}

// model.vocab, model.merges and added_tokens of a byte-level BPE tokenizer.json; the
// pre-tokeniser and the normalizer / ignore_merges flags it asks for.
typedef struct {
    const cJSON *model, *vocab, *merges, *added;
    uint32_t pre, flags;
    int spm;  // BPE with byte_fallback: pieces spelled with "▁", <0xNN> byte pieces
} HfParts;

static int is_string_pattern(const cJSON *o, const char *s) {
    const char *p = jstr(cJSON_GetObjectItemCaseSensitive(o, "pattern"), "String");
    return p && strcmp(p, s) == 0;
}

// BPE with byte_fallback, as Gemma's tokenizer.json has it: normalizer Replace " " -> "▁" (no
// Prepend: no dummy prefix), no pre-tokeniser or Gemma's Split on " " (a no-op once spaces are
// "▁"), so the text between added tokens is one word merged by rank. Other forms (Llama 2's
// Prepend, Metaspace) split or prefix differently and are refused.
static int parse_spm_form(const char *dir, const cJSON *tj, const cJSON *model, char *err, size_t errlen) {
    if (jbool(model, "ignore_merges", 0)) {  // the whole text would be looked up as one token first
        emx_seterr(err, errlen, "%s/tokenizer.json: model.byte_fallback = true with ignore_merges = true is not supported", dir);
        return -1;
    }
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(tj, "normalizer");
    const char *nt = jstr(norm, "type");
    const char *content = jstr(norm, "content");
    if (!nt || strcmp(nt, "Replace") != 0 || !is_string_pattern(norm, " ") || !content ||
        strcmp(content, "\xE2\x96\x81") != 0) {
        emx_seterr(err, errlen,
                   "%s/tokenizer.json: model.byte_fallback = true needs normalizer Replace \" \" -> U+2581 "
                   "(Gemma's form), not \"%s\"; convert from GGUF",
                   dir, ESC(nt ? nt : "(none)"));
        return -1;
    }
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(tj, "pre_tokenizer");
    if (pre && !cJSON_IsNull(pre)) {
        const char *pt = jstr(pre, "type"), *beh = jstr(pre, "behavior");
        if (!pt || strcmp(pt, "Split") != 0 || !is_string_pattern(pre, " ") || !beh ||
            strcmp(beh, "MergedWithPrevious") != 0 || jbool(pre, "invert", 0)) {
            emx_seterr(err, errlen,
                       "%s/tokenizer.json: model.byte_fallback = true with pre_tokenizer \"%s\" is not "
                       "supported (none, or Split \" \" MergedWithPrevious)",
                       dir, ESC(pt ? pt : "?"));
            return -1;
        }
    }
    return 0;
}

static int find_parts(const char *dir, const cJSON *tj, HfParts *h, char *err, size_t errlen) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(tj, "model");
    const char *mtype = jstr(model, "type");
    if (!model || (mtype && strcmp(mtype, "BPE") != 0)) {
        emx_seterr(err, errlen, "%s/tokenizer.json: model.type = \"%s\" is not supported (byte-level BPE only)",
               dir, ESC(mtype ? mtype : "(missing)"));
        return -1;
    }
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(tj, "added_tokens");
    if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges)) {
        emx_seterr(err, errlen, "%s/tokenizer.json: model.vocab / model.merges missing", dir);
        return -1;
    }
    h->model = model, h->vocab = vocab, h->merges = merges, h->added = added;
    if (jbool(model, "byte_fallback", 0)) {
        h->spm = 1, h->pre = EMX_PRE_NONE, h->flags = EMX_TOKF_MERGE_BY_RANK;
        return parse_spm_form(dir, tj, model, err, errlen);
    }
    uint32_t pre = 0, flags = 0;
    if (parse_pre(cJSON_GetObjectItemCaseSensitive(tj, "pre_tokenizer"), &pre, err, errlen) ||
        parse_normalizer(cJSON_GetObjectItemCaseSensitive(tj, "normalizer"), &flags, err, errlen)) {
        char tmp[512];
        snprintf(tmp, sizeof tmp, "%s/%s", dir, err);
        emx_seterr(err, errlen, "%s", tmp);
        return -1;
    }
    if (jbool(model, "ignore_merges", 0)) flags |= EMX_TOKF_IGNORE_MERGES;
    h->spm = 0, h->pre = pre, h->flags = flags;
    return 0;
}

// The tokenizer's size: n_vocab when given (every id must fit), else the largest id + 1 (ids
// need not be dense).
static int vocab_size(const char *dir, const cJSON *vocab, const cJSON *added, uint32_t n_vocab, uint32_t *out,
                      char *err, size_t errlen) {
    double max_id = -1;
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= (1 << 30)) {
            emx_seterr(err, errlen, "%s/tokenizer.json: model.vocab[\"%.40s\"] is not a valid id", dir,
                   ESC(e->string));
            return -1;
        }
        if (e->valuedouble > max_id) max_id = e->valuedouble;
    }
    cJSON_ArrayForEach(e, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= (1 << 30) ||
            !jstr(e, "content")) {
            emx_seterr(err, errlen, "%s/tokenizer.json: added_tokens entry without a valid id/content", dir);
            return -1;
        }
        if (id->valuedouble > max_id) max_id = id->valuedouble;
    }
    uint32_t need = (uint32_t)(max_id + 1);
    // Without the model's n_vocab the ids size the tokenizer: they may leave gaps, but an id far
    // past the number of entries ("2E8" among a few hundred) is an error, not an allocation.
    uint64_t entries = (uint64_t)cJSON_GetArraySize(vocab) + (uint64_t)cJSON_GetArraySize(added);
    if (n_vocab == 0 && need > 2 * entries + 65536) {
        emx_seterr(err, errlen, "%s/tokenizer.json: token id %u is far past the %llu entries (sparse ids)", dir,
                   need - 1, (unsigned long long)entries);
        return -1;
    }
    if (n_vocab == 0) n_vocab = need;
    if (n_vocab < need) {
        emx_seterr(err, errlen, "%s/tokenizer.json: token id %u does not fit n_vocab = %u", dir,
               need - 1, n_vocab);
        return -1;
    }
    *out = n_vocab;
    return 0;
}

// "<0xNN>": a byte-fallback piece.
static int is_byte_piece(const char *s) {
    static const char hex[] = "0123456789ABCDEF";
    return strlen(s) == 6 && memcmp(s, "<0x", 3) == 0 && strchr(hex, s[3]) && strchr(hex, s[4]) &&
           s[5] == '>';  // strlen 6: s[3], s[4] are not the terminator strchr would find
}

// Every vocab entry (normal; with byte_fallback "<0xNN>" is a byte piece) and added token
// (control if special, else user-defined), then the piece index; -1 only when out of memory.
static int add_pieces(TokBuilder *b, const cJSON *vocab, const cJSON *added, int spm) {
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab) {
        uint8_t type = spm && is_byte_piece(e->string) ? EMX_TOKT_BYTE : EMX_TOKT_NORMAL;
        if (tb_set_piece(b, (uint32_t)e->valuedouble, e->string, strlen(e->string), type, 0) != 0)
            return -1;
    }
    cJSON_ArrayForEach(e, added) {
        const char *content = jstr(e, "content");
        uint32_t id = (uint32_t)cJSON_GetObjectItemCaseSensitive(e, "id")->valuedouble;
        uint8_t type = jbool(e, "special", 0) ? EMX_TOKT_CONTROL : EMX_TOKT_USER_DEFINED;
        if (tb_set_piece(b, id, content, strlen(content), type, 0) != 0) return -1;
    }
    if (tb_index(b) != 0) return -1;
    return 0;
}

// Merges: "a b" strings (older files) or ["a", "b"] pairs, in rank order; both parts and the
// merged piece must be in the vocab.
static int add_merges(TokBuilder *b, const char *dir, const cJSON *merges, char *err, size_t errlen) {
    const cJSON *e;
    char tmp[1024];
    int rank = 0;
    cJSON_ArrayForEach(e, merges) {
        const char *a = NULL, *bb = NULL;
        size_t la = 0, lb = 0;
        if (cJSON_IsString(e)) {
            const char *sp = strchr(e->valuestring, ' ');
            if (sp) a = e->valuestring, la = (size_t)(sp - a), bb = sp + 1, lb = strlen(bb);
        } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 &&
                   cJSON_IsString(cJSON_GetArrayItem(e, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(e, 1))) {
            a = cJSON_GetArrayItem(e, 0)->valuestring, la = strlen(a);
            bb = cJSON_GetArrayItem(e, 1)->valuestring, lb = strlen(bb);
        }
        if (!a) {
            emx_seterr(err, errlen, "%s/tokenizer.json: model.merges[%d] is not \"a b\" or [a, b]", dir,
                   rank);
            return -1;
        }
        int32_t ia = tb_find(b, a, la), ib = tb_find(b, bb, lb), im = -1;
        if (la + lb < sizeof tmp) {
            memcpy(tmp, a, la);
            memcpy(tmp + la, bb, lb);
            im = tb_find(b, tmp, la + lb);
        }
        if (ia < 0 || ib < 0 || im < 0) {
            emx_seterr(err, errlen, "%s/tokenizer.json: model.merges[%d] = \"%s\" \"%s\": a part or the merged piece is not in the vocab",
                   dir, rank, ESCN(a, la < 40 ? la : 40), ESCN(bb, lb < 40 ? lb : 40));
            return -1;
        }
        if (tb_add_merge(b, ia, ib) != 0) {
            emx_seterr(err, errlen, "tokenizer: out of memory");
            return -1;
        }
        rank++;
    }
    return 0;
}

// Special ids: unk from the model; BOS from the post-processor template; the rest from
// tokenizer_config.json, then config.json (the model's own view wins for eos/bos).
static void set_specials(TokBuilder *b, const cJSON *tj, const cJSON *model, const cJSON *tcfg, const cJSON *cfg,
                         uint32_t n_vocab) {
    b->meta.unk_id = find_text(b, jstr(model, "unk_token"));
    const cJSON *tmpl = find_template(cJSON_GetObjectItemCaseSensitive(tj, "post_processor"));
    if (tmpl) {
        const cJSON *first = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(tmpl, "single"), 0);
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(first, "SpecialToken");
        int32_t id = find_text(b, jstr(st, "id"));
        if (id >= 0) {
            b->meta.bos_id = id;
            b->meta.flags |= EMX_TOKF_ADD_BOS;
        }
    }
    if (tcfg) {
        int32_t id;
        if ((id = find_text(b, config_token_text(tcfg, "bos_token"))) >= 0) b->meta.bos_id = id;
        if ((id = find_text(b, config_token_text(tcfg, "eos_token"))) >= 0) b->meta.eos_id = id;
        if ((id = find_text(b, config_token_text(tcfg, "pad_token"))) >= 0) b->meta.pad_id = id;
        if ((id = find_text(b, config_token_text(tcfg, "unk_token"))) >= 0) b->meta.unk_id = id;
        const cJSON *ab = cJSON_GetObjectItemCaseSensitive(tcfg, "add_bos_token");
        if (cJSON_IsTrue(ab)) b->meta.flags |= EMX_TOKF_ADD_BOS;
    }
    if (cfg) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, "bos_token_id");
        if (cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < n_vocab)
            b->meta.bos_id = (int32_t)v->valuedouble;
        v = cJSON_GetObjectItemCaseSensitive(cfg, "eos_token_id");
        if (cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < n_vocab) {
            if (b->meta.eos_id < 0) b->meta.eos_id = (int32_t)v->valuedouble;
            tb_add_stop(b, (int32_t)v->valuedouble);
        } else if (cJSON_IsArray(v)) {
            const cJSON *x;
            cJSON_ArrayForEach(x, v) {
                if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble >= n_vocab) continue;
                if (b->meta.eos_id < 0) b->meta.eos_id = (int32_t)x->valuedouble;
                tb_add_stop(b, (int32_t)x->valuedouble);
            }
        }
    }
}

static int build(const char *dir, const cJSON *tj, const cJSON *tcfg, const cJSON *cfg,
                 uint32_t n_vocab, TokenizerData *out, char *err, size_t errlen) {
    HfParts h;
    if (find_parts(dir, tj, &h, err, errlen) || vocab_size(dir, h.vocab, h.added, n_vocab, &n_vocab, err, errlen))
        return -1;
    TokBuilder b;
    if (tb_init(&b, n_vocab) != 0) {
        emx_seterr(err, errlen, "tokenizer: out of memory");
        return -1;
    }
    b.meta.kind = h.spm ? EMX_TOK_SPM : EMX_TOK_BPE_BYTELEVEL;
    b.meta.pre = h.pre;
    if (add_pieces(&b, h.vocab, h.added, h.spm) != 0) {
        emx_seterr(err, errlen, "tokenizer: out of memory");
        goto fail;
    }
    if (add_merges(&b, dir, h.merges, err, errlen)) goto fail;
    set_specials(&b, tj, h.model, tcfg, cfg, n_vocab);
    if (b.meta.bos_id < 0) b.meta.flags &= ~(uint32_t)EMX_TOKF_ADD_BOS;
    b.meta.flags |= h.flags;
    tb_add_stop(&b, b.meta.eos_id);
    tb_add_known_stops(&b);
    int rc = tb_finish(&b, out, err, errlen);
    tb_free(&b);
    return rc;
fail:
    tb_free(&b);
    return -1;
}

int tokdata_from_hf_dir(const char *dir, uint32_t n_vocab, TokenizerData *out, char *err,
                        size_t errlen) {
    memset(out, 0, sizeof *out);
    int missing;
    cJSON *tj = read_json(dir, "tokenizer.json", &missing, err, errlen);
    if (!tj) return -1;
    char err2[512];
    cJSON *tcfg = read_json(dir, "tokenizer_config.json", &missing, err2, sizeof err2);
    if (!tcfg && !missing) {
        emx_seterr(err, errlen, "%s", err2);
        cJSON_Delete(tj);
        return -1;
    }
    cJSON *cfg = read_json(dir, "config.json", &missing, err2, sizeof err2);
    if (!cfg && !missing) {
        emx_seterr(err, errlen, "%s", err2);
        cJSON_Delete(tj);
        cJSON_Delete(tcfg);
        return -1;
    }
    int rc = -1;
    if (!cJSON_IsObject(tj)) emx_seterr(err, errlen, "%s/tokenizer.json: not a JSON object", dir);
    else if (tcfg && !cJSON_IsObject(tcfg)) emx_seterr(err, errlen, "%s/tokenizer_config.json: not a JSON object", dir);
    else rc = build(dir, tj, tcfg, cfg, n_vocab, out, err, errlen);
    cJSON_Delete(tj);
    cJSON_Delete(tcfg);
    cJSON_Delete(cfg);
    return rc;
}
