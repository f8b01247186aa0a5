// test_tokenizer_util.h — helpers for the tokenizer tests: building tokenizers from the shared
// reference data, and reading the golden JSONL lines (with their NUL-containing strings, which
// cJSON cannot represent, decoded by hand).
#ifndef ENTROPIX_TEST_TOKENIZER_UTIL_H
#define ENTROPIX_TEST_TOKENIZER_UTIL_H

#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/convert/gguf.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"
#include "tools/convert/tokenizer_build.h"

// A tokenizer together with the data it was built from.
typedef struct {
    TokenizerData data;
    EmxTokenizer *tk;
} TestTok;

static inline void testtok_free(TestTok *t) {
    emx_tokenizer_free(t->tk);
    tokdata_free(&t->data);
}

static inline void testtok_make(TestTok *t) {
    char err[512] = "";
    t->tk = emx_tokenizer_new(&t->data, err, sizeof err);
    cr_assert(t->tk, "emx_tokenizer_new: %s", err);
}

// From ../shared/testdata/<rel> (an HF directory); n_vocab 0 = as the tokenizer says.
static inline void testtok_hf(TestTok *t, const char *rel, uint32_t n_vocab) {
    char path[1024], err[512] = "";
    test_shared_path(path, sizeof path, rel);
    int rc = tokdata_from_hf_dir(path, n_vocab, &t->data, err, sizeof err);
    cr_assert_eq(rc, 0, "tokdata_from_hf_dir(%s): %s", path, err);
    testtok_make(t);
}

// From a GGUF file's metadata (absolute or relative path).
static inline void testtok_gguf_path(TestTok *t, const char *path) {
    char err[512] = "";
    GGUFFile g;
    cr_assert_eq(gguf_open(&g, path, err, sizeof err), 0, "gguf_open: %s", err);
    int rc = tokdata_from_gguf(&g, 0, &t->data, err, sizeof err);
    gguf_close(&g);
    cr_assert_eq(rc, 0, "tokdata_from_gguf(%s): %s", path, err);
    testtok_make(t);
}

static inline void testtok_gguf(TestTok *t, const char *rel) {
    char path[1024];
    testtok_gguf_path(t, test_shared_path(path, sizeof path, rel));
}

// Decodes the JSON string value of "key" in a one-object line into a malloc'd buffer (NULs
// kept, lone surrogates as U+FFFD). NULL if the key is absent.
static inline char *json_str(const char *line, const char *key, size_t *len) {
    char pat[128];
    snprintf(pat, sizeof pat, "\"%s\": \"", key);
    const char *p = strstr(line, pat);
    if (!p) {
        snprintf(pat, sizeof pat, "\"%s\":\"", key);
        p = strstr(line, pat);
    }
    if (!p) return NULL;
    p += strlen(pat);
    char *out = malloc(strlen(p) * 3 + 1);
    size_t o = 0;
    while (*p && *p != '"') {
        if (*p != '\\') {
            out[o++] = *p++;
            continue;
        }
        p++;
        char c = *p++;
        switch (c) {
        case 'n': out[o++] = '\n'; break;
        case 't': out[o++] = '\t'; break;
        case 'r': out[o++] = '\r'; break;
        case 'b': out[o++] = '\b'; break;
        case 'f': out[o++] = '\f'; break;
        case 'u': {
            unsigned cp = 0;
            sscanf(p, "%4x", &cp);
            p += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && p[0] == '\\' && p[1] == 'u') {
                unsigned lo = 0;
                sscanf(p + 2, "%4x", &lo);
                if (lo >= 0xDC00 && lo < 0xE000) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    p += 6;
                }
            }
            if (cp >= 0xD800 && cp < 0xE000) cp = 0xFFFD;
            unsigned char *u = (unsigned char *)out + o;
            if (cp < 0x80) u[0] = (unsigned char)cp, o += 1;
            else if (cp < 0x800) u[0] = 0xC0 | (cp >> 6), u[1] = 0x80 | (cp & 63), o += 2;
            else if (cp < 0x10000)
                u[0] = 0xE0 | (cp >> 12), u[1] = 0x80 | ((cp >> 6) & 63), u[2] = 0x80 | (cp & 63), o += 3;
            else
                u[0] = 0xF0 | (cp >> 18), u[1] = 0x80 | ((cp >> 12) & 63),
                u[2] = 0x80 | ((cp >> 6) & 63), u[3] = 0x80 | (cp & 63), o += 4;
            break;
        }
        default: out[o++] = c; break;  // \" \\ \/
        }
    }
    out[o] = 0;
    *len = o;
    return out;
}

// Integer array "key" of a parsed line; malloc'd, *n set (NULL if absent).
static inline int *json_ids(const cJSON *obj, const char *key, size_t *n) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsArray(a)) return NULL;
    *n = (size_t)cJSON_GetArraySize(a);
    int *v = malloc((*n ? *n : 1) * sizeof *v);
    size_t i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a) v[i++] = e->valueint;
    return v;
}

// Streams ids through the decoder; malloc'd result, *len set.
static inline char *decode_stream(const EmxTokenizer *tk, const int *ids, size_t n, int skip,
                                  size_t *len) {
    size_t step = emx_decoder_max_out(tk), cap = step * (n + 1) + 1, o = 0;
    char *out = malloc(cap);
    EmxDecoder d;
    emx_decoder_init(&d, tk, skip);
    for (size_t i = 0; i < n; i++) o += emx_decoder_push(&d, ids[i], out + o, step);
    o += emx_decoder_flush(&d, out + o, step);
    out[o] = 0;
    *len = o;
    return out;
}

#endif
