// test_convert_util.h — what the converter tests (test_convert.c, test_convert_cli.c) decode
// independently of the converter: element decoders (F16/BF16 by hand), our model's tensors by
// name, the sources read by the test (llama2.c float32 at offsets from its header, safetensors
// parsed with cJSON, GGUF through the reader) and the comparisons of a converted tensor with its
// source (bit-exact f32, round-to-nearest-even bf16, per-group q8/q4/q4_1 bounds). Header-only,
// with Criterion assertions.
#ifndef ENTROPIX_TEST_CONVERT_UTIL_H
#define ENTROPIX_TEST_CONVERT_UTIL_H

#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "runtime/model.h"
#include "runtime/convert/gguf.h"
#include "test_util.h"

// ---------------------------------------------------------------------------------------------
// Independent element decoders.

static inline float half_to_float(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m + 1024), e - 25);
    return (h & 0x8000) ? -v : v;
}

static inline float bf16_to_float(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// f32 -> bf16 rounding to nearest, ties to even (finite inputs).
static inline uint16_t float_to_bf16_rne(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t hi = u >> 16, lo = u & 0xffff;
    if (lo > 0x8000 || (lo == 0x8000 && (hi & 1))) hi++;
    return (uint16_t)hi;
}

// Source element i of data stored as "F32" / "F16" / "BF16".
static inline float src_elem(const char *dtype, const uint8_t *p, uint64_t i) {
    if (!strcmp(dtype, "F32")) {
        float f;
        memcpy(&f, p + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    return !strcmp(dtype, "F16") ? half_to_float(h) : bf16_to_float(h);
}

// ---------------------------------------------------------------------------------------------
// Our model's tensors by name.

static const EmxTensor *model_tensor(const EmxModel *m, const char *name) {
    if (!strcmp(name, "tok_embeddings")) return &m->tok_embeddings;
    if (!strcmp(name, "norm")) return &m->norm;
    if (!strcmp(name, "output")) return &m->output;
    if (!strcmp(name, "rope_freq_factors")) return &m->rope_freq_factors;
    unsigned l;
    char suffix[32];
    cr_assert_eq(sscanf(name, "layers.%u.%31s", &l, suffix), 2, "bad name %s", name);
    cr_assert_lt(l, m->cfg.n_layers);
    const EmxLayer *L = &m->layers[l];
    const struct { const char *s; const EmxTensor *t; } t[] = {
        {"attn_norm", &L->attn_norm}, {"wq", &L->wq}, {"wk", &L->wk}, {"wv", &L->wv}, {"wo", &L->wo},
        {"q_norm", &L->q_norm}, {"k_norm", &L->k_norm}, {"ffn_norm", &L->ffn_norm}, {"w_gate", &L->w_gate},
        {"w_up", &L->w_up}, {"w_down", &L->w_down},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(suffix, t[i].s)) return t[i].t;
    cr_assert_fail("unknown tensor %s", name);
    return NULL;
}

static const char *const layer_suffixes[] = {"attn_norm", "wq", "wk", "wv", "wo", "q_norm", "k_norm",
                                             "ffn_norm", "w_gate", "w_up", "w_down"};

// Calls fn for every tensor name the model has (per the test's own list of names).
typedef void (*TensorFn)(const EmxModel *m, const char *name, void *ctx);
static inline int for_each_tensor(const EmxModel *m, TensorFn fn, void *ctx) {
    int n = 0;
    fn(m, "tok_embeddings", ctx), n++;
    fn(m, "norm", ctx), n++;
    if (!m->cfg.tied_output) fn(m, "output", ctx), n++;
    for (uint32_t l = 0; l < m->cfg.n_layers; l++)
        for (size_t i = 0; i < sizeof layer_suffixes / sizeof layer_suffixes[0]; i++) {
            int qk = !strcmp(layer_suffixes[i], "q_norm") || !strcmp(layer_suffixes[i], "k_norm");
            if (qk && !m->cfg.qk_norm) continue;
            char name[64];
            snprintf(name, sizeof name, "layers.%u.%s", l, layer_suffixes[i]);
            fn(m, name, ctx), n++;
        }
    return n;
}

static inline void open_model(EmxModel *m, const char *rel) {
    char p[512], err[512];
    test_build_path(p, sizeof p, rel);
    cr_assert_eq(emx_model_open(m, p, err, sizeof err), 0, "%s (run `make test-models` first)", err);
}

// ---------------------------------------------------------------------------------------------
// Sources decoded by the test.

// A source tensor: dtype "F32"/"F16"/"BF16", [rows, cols], data.
typedef struct {
    const char *dtype;
    uint64_t rows, cols;
    const uint8_t *data;
} SrcT;

// llama2.c v0 checkpoint: 7 x int32 header, then float32 in run.c's order.
typedef struct {
    char *buf;
    size_t len;
    int32_t dim, hidden, layers, heads, kv_heads, vocab, seq;
} L2c;

static inline void l2c_load(L2c *c) {
    char p[512];
    test_shared_path(p, sizeof p, "testdata/stories260K/stories260K.bin");
    c->buf = test_read_file(p, &c->len);
    cr_assert_not_null(c->buf, "cannot read %s", p);
    int32_t h[7];
    memcpy(h, c->buf, sizeof h);
    c->dim = h[0], c->hidden = h[1], c->layers = h[2], c->heads = h[3], c->kv_heads = h[4];
    c->vocab = abs(h[5]), c->seq = h[6];
}

// Our name -> its place in the llama2.c file.
static inline SrcT l2c_tensor(const L2c *c, const char *name) {
    uint64_t d = (uint64_t)c->dim, hd = d / (uint64_t)c->heads, kv = hd * (uint64_t)c->kv_heads, L = (uint64_t)c->layers;
    uint64_t hid = (uint64_t)c->hidden, V = (uint64_t)c->vocab;
    // Sections in order: name, rows, cols, per layer.
    const struct { const char *s; uint64_t r, cl; int per_layer; } sec[] = {
        {"tok_embeddings", V, d, 0}, {"attn_norm", d, 1, 1}, {"wq", d, d, 1}, {"wk", kv, d, 1}, {"wv", kv, d, 1},
        {"wo", d, d, 1}, {"ffn_norm", d, 1, 1}, {"w_gate", hid, d, 1}, {"w_down", d, hid, 1}, {"w_up", hid, d, 1},
        {"norm", d, 1, 0},
    };
    unsigned layer = 0;
    char suffix[32];
    const char *want = name;
    if (sscanf(name, "layers.%u.%31s", &layer, suffix) == 2) want = suffix;
    if (!strcmp(name, "output")) want = "tok_embeddings";  // shared classifier
    uint64_t off = 28;
    for (size_t i = 0; i < sizeof sec / sizeof sec[0]; i++) {
        uint64_t n = sec[i].r * sec[i].cl;
        if (!strcmp(sec[i].s, want)) {
            off += (sec[i].per_layer ? layer * n : 0) * 4;
            cr_assert_leq(off + n * 4, c->len);
            return (SrcT){"F32", sec[i].r, sec[i].cl, (const uint8_t *)c->buf + off};
        }
        off += (sec[i].per_layer ? L : 1) * n * 4;
    }
    cr_assert_fail("no llama2.c tensor for %s", name);
    return (SrcT){0};
}

// The tiny models' safetensors (under ../shared).
#define QWEN3_ST "testdata/tiny/qwen3-tiny/hf/model.safetensors"
#define LLAMA3_ST "testdata/tiny/llama3-tiny/hf/model.safetensors"

// safetensors: u64 header length, JSON header, data.
typedef struct {
    char *buf;
    size_t len;
    cJSON *hdr;
    const uint8_t *data;
} StFile;

static inline void st_load(StFile *s, const char *rel) {
    char p[512];
    test_shared_path(p, sizeof p, rel);
    s->buf = test_read_file(p, &s->len);
    cr_assert_not_null(s->buf, "cannot read %s", p);
    uint64_t n;
    memcpy(&n, s->buf, 8);
    cr_assert_leq(n + 8, s->len);
    s->hdr = cJSON_ParseWithLength(s->buf + 8, n);
    cr_assert_not_null(s->hdr);
    s->data = (const uint8_t *)s->buf + 8 + n;
}

static inline void st_free(StFile *s) {
    cJSON_Delete(s->hdr);
    free(s->buf);
}

// Our name -> HF name.
static inline void hf_name(const char *ours, char *out, size_t cap) {
    if (!strcmp(ours, "tok_embeddings")) snprintf(out, cap, "model.embed_tokens.weight");
    else if (!strcmp(ours, "norm")) snprintf(out, cap, "model.norm.weight");
    else if (!strcmp(ours, "output")) snprintf(out, cap, "lm_head.weight");
    else {
        static const char *const map[][2] = {
            {"attn_norm", "input_layernorm"}, {"wq", "self_attn.q_proj"}, {"wk", "self_attn.k_proj"},
            {"wv", "self_attn.v_proj"}, {"wo", "self_attn.o_proj"}, {"q_norm", "self_attn.q_norm"},
            {"k_norm", "self_attn.k_norm"}, {"ffn_norm", "post_attention_layernorm"}, {"w_gate", "mlp.gate_proj"},
            {"w_up", "mlp.up_proj"}, {"w_down", "mlp.down_proj"},
        };
        unsigned l;
        char suffix[32];
        cr_assert_eq(sscanf(ours, "layers.%u.%31s", &l, suffix), 2);
        for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
            if (!strcmp(suffix, map[i][0])) {
                snprintf(out, cap, "model.layers.%u.%s.weight", l, map[i][1]);
                return;
            }
        cr_assert_fail("no HF name for %s", ours);
    }
}

static inline SrcT st_tensor(const StFile *s, const char *ours) {
    char name[128];
    if (!strcmp(ours, "output")) ours = "tok_embeddings";  // tied test models
    hf_name(ours, name, sizeof name);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(s->hdr, name);
    cr_assert_not_null(e, "safetensors has no %s", name);
    const cJSON *shape = cJSON_GetObjectItem(e, "shape"), *offs = cJSON_GetObjectItem(e, "data_offsets");
    SrcT t = {cJSON_GetObjectItem(e, "dtype")->valuestring, (uint64_t)cJSON_GetArrayItem(shape, 0)->valuedouble, 1,
              s->data + (uint64_t)cJSON_GetArrayItem(offs, 0)->valuedouble};
    if (cJSON_GetArraySize(shape) == 2) t.cols = (uint64_t)cJSON_GetArrayItem(shape, 1)->valuedouble;
    return t;
}

// Our name -> GGUF name.
static inline void gguf_name(const char *ours, char *out, size_t cap) {
    if (!strcmp(ours, "tok_embeddings")) snprintf(out, cap, "token_embd.weight");
    else if (!strcmp(ours, "norm")) snprintf(out, cap, "output_norm.weight");
    else if (!strcmp(ours, "output")) snprintf(out, cap, "output.weight");
    else if (!strcmp(ours, "rope_freq_factors")) snprintf(out, cap, "rope_freqs.weight");
    else {
        static const char *const map[][2] = {
            {"attn_norm", "attn_norm"}, {"wq", "attn_q"}, {"wk", "attn_k"}, {"wv", "attn_v"}, {"wo", "attn_output"},
            {"q_norm", "attn_q_norm"}, {"k_norm", "attn_k_norm"}, {"ffn_norm", "ffn_norm"}, {"w_gate", "ffn_gate"},
            {"w_up", "ffn_up"}, {"w_down", "ffn_down"},
        };
        unsigned l;
        char suffix[32];
        cr_assert_eq(sscanf(ours, "layers.%u.%31s", &l, suffix), 2);
        for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
            if (!strcmp(suffix, map[i][0])) {
                snprintf(out, cap, "blk.%u.%s.weight", l, map[i][1]);
                return;
            }
        cr_assert_fail("no GGUF name for %s", ours);
    }
}

static inline SrcT gguf_tensor(const GGUFFile *g, const char *ours) {
    char name[128];
    gguf_name(ours, name, sizeof name);
    const GGUFTensor *t = gguf_find_tensor(g, name);
    cr_assert_not_null(t, "GGUF has no %s", name);
    const char *dt = t->type == GGML_F32 ? "F32" : t->type == GGML_F16 ? "F16" : t->type == GGML_BF16 ? "BF16" : NULL;
    cr_assert_not_null(dt, "%s: unexpected ggml type %u", name, t->type);
    return (SrcT){dt, t->n_dims == 1 ? t->ne[0] : t->ne[1], t->n_dims == 1 ? 1 : t->ne[0], t->data};
}

static inline void gguf_load(GGUFFile *g, const char *rel) {
    char p[512], err[512];
    test_shared_path(p, sizeof p, rel);
    cr_assert_eq(gguf_open(g, p, err, sizeof err), 0, "%s", err);
}

// ---------------------------------------------------------------------------------------------
// Comparisons.

// Our tensor `name` against `src`; `row_of(r)` maps our row to the source row (permutations).
typedef uint64_t (*RowMap)(const EmxModel *m, const char *name, uint64_t r);

typedef struct {
    SrcT (*source)(const void *src, const char *name);
    const void *src;
    RowMap row_map;
    int checked;
} Compare;

// Squared error of llama.cpp-style plain q4 over one group (as Q4_0): d = maxv / -8 (maxv the
// largest-magnitude weight, d rounded to f16), levels round(w/d) clamped to [-8, 7].
static inline double plain_q4_sq_err(const float *w) {
    float maxv = 0;
    for (int j = 0; j < 32; j++)
        if (fabsf(w[j]) > fabsf(maxv)) maxv = w[j];
    float d = half_to_float(emx_f32_to_f16(maxv / -8.0f));
    double err = 0;
    for (int j = 0; j < 32; j++) {
        double l = d != 0 ? fmin(7, fmax(-8, nearbyint((double)w[j] / d))) : 0, e = w[j] - l * d;
        err += e * e;
    }
    return err;
}

// Squared error of plain asymmetric 4-bit over one group (as Q4_1): m = min, d = (max-min)/15,
// both rounded to f16, levels round((w-m)/d) clamped to [0, 15].
static inline double plain_q4_1_sq_err(const float *w, float *step) {
    float mn = w[0], mx = w[0];
    for (int j = 1; j < 32; j++) mn = fminf(mn, w[j]), mx = fmaxf(mx, w[j]);
    float d = half_to_float(emx_f32_to_f16((mx - mn) / 15.0f)), m = half_to_float(emx_f32_to_f16(mn));
    *step = (mx - mn) / 15.0f;
    double err = 0;
    for (int j = 0; j < 32; j++) {
        double l = d != 0 ? fmin(15, fmax(0, nearbyint(((double)w[j] - m) / d))) : 0, e = w[j] - (l * d + m);
        err += e * e;
    }
    return err;
}

// One row of a q8/q4/q4_1 tensor (`got`, dequantised) against its source (`want`), per group:
// q8: scale <= max|w|/127 and every weight within d/2.
// q4 (scale searched near max|w|/-8 for the least squared error): |d| <= max|w|/6.5 (the search
// tries max|w|/7.1 .. max|w|/8.9, but the least-squares refit of d to the chosen levels can step
// past that grid: up to max|w|/6.82 was seen on the tiny models), every weight within 2|d| (one
// opposite to the extreme may clamp at +7; seen up to 1.32|d|), and -- the property the search
// is for -- the group's squared error no more than plain max|w|/-8 quantisation leaves
// (computed here).
// q4_1: the group's squared error no more than plain min/range quantisation leaves, and so no
// weight further than sqrt(32)/2 plain steps from its source.
// (Slack: a scale rounded to f16 moves by up to 2^-11 of itself.)
static inline void check_quant_row(const char *name, const EmxTensor *t, uint64_t r, const float *want, const float *got) {
    const uint8_t *base = t->data;
    uint64_t ng = t->cols / 32, qbytes = t->dtype == EMX_Q8 ? t->rows * t->cols : t->rows * t->cols / 2;
    for (uint64_t g = 0; g < ng; g++) {
        const float *w = want + 32 * g, *q = got + 32 * g;
        uint16_t dh;
        memcpy(&dh, base + qbytes + 2 * (r * ng + g), 2);
        float d = fabsf(half_to_float(dh)), amax = 0;
        double err = 0, maxe = 0;
        for (int j = 0; j < 32; j++) {
            amax = fmaxf(amax, fabsf(w[j]));
            double e = fabs((double)q[j] - w[j]);
            err += e * e;
            maxe = fmax(maxe, e);
        }
        if (t->dtype == EMX_Q8) {
            cr_assert_leq(d, amax / 127.0f * (1 + 1.0f / 1024) + 1e-12f, "%s row %llu group %llu: scale %g > max|w|/127",
                          name, (unsigned long long)r, (unsigned long long)g, d);
            cr_assert_leq(maxe, 0.5 * d * (1 + 1e-3) + 1e-7, "%s row %llu group %llu: error %g > d/2 (d %g)", name,
                          (unsigned long long)r, (unsigned long long)g, maxe, d);
        } else if (t->dtype == EMX_Q4) {
            double plain = plain_q4_sq_err(w);
            cr_assert_leq(d, amax / 6.5f * (1 + 1.0f / 1024) + 1e-12f, "%s row %llu group %llu: scale %g > max|w|/6.5",
                          name, (unsigned long long)r, (unsigned long long)g, d);
            cr_assert_leq(maxe, 2.0 * d * (1 + 1e-3) + 1e-7, "%s row %llu group %llu: error %g > 2d (d %g)", name,
                          (unsigned long long)r, (unsigned long long)g, maxe, d);
            cr_assert_leq(err, plain * (1 + 2e-3) + 32.0 * (d * 1e-3) * (d * 1e-3),
                          "%s row %llu group %llu: squared error %g > plain max|w|/-8's %g", name, (unsigned long long)r,
                          (unsigned long long)g, err, plain);
        } else {
            float step;
            double plain = plain_q4_1_sq_err(w, &step);
            cr_assert_leq(err, plain * (1 + 2e-3) + 32.0 * (step * 1e-3) * (step * 1e-3) + 1e-14,
                          "%s row %llu group %llu: squared error %g > plain min/range's %g", name, (unsigned long long)r,
                          (unsigned long long)g, err, plain);
            cr_assert_leq(maxe, 2.9 * step + 1e-7, "%s row %llu group %llu: error %g > 2.9 plain steps (%g)", name,
                          (unsigned long long)r, (unsigned long long)g, maxe, step);
        }
    }
}

static inline void compare_tensor(const EmxModel *m, const char *name, void *vctx) {
    Compare *c = vctx;
    const EmxTensor *t = model_tensor(m, name);
    SrcT s = c->source(c->src, name);
    cr_assert_not_null(t->data, "%s: absent", name);
    cr_assert_eq(t->rows, s.rows, "%s: rows %llu vs source %llu", name, (unsigned long long)t->rows,
                 (unsigned long long)s.rows);
    cr_assert_eq(t->cols, s.cols, "%s: cols", name);
    int is_vector = t->cols == 1;
    if (is_vector) cr_assert_eq(t->dtype, EMX_F32, "%s: vectors must be f32", name);
    float *row = malloc(t->cols * sizeof *row), *srow = malloc(t->cols * sizeof *srow);
    for (uint64_t r = 0; r < t->rows; r++) {
        emx_dequantize_row(t->dtype, t->data, t->rows, t->cols, r, row);
        uint64_t sr = c->row_map ? c->row_map(m, name, r) : r;
        for (uint64_t j = 0; j < t->cols; j++) srow[j] = src_elem(s.dtype, s.data, sr * s.cols + j);
        if (t->dtype == EMX_Q8 || t->dtype == EMX_Q4 || t->dtype == EMX_Q4_1) {
            check_quant_row(name, t, r, srow, row);
            continue;
        }
        for (uint64_t j = 0; j < t->cols; j++) {
            float want = srow[j], got = row[j];
            if (t->dtype == EMX_BF16) want = bf16_to_float(float_to_bf16_rne(want));
            else cr_assert_eq(t->dtype, EMX_F32, "%s: unexpected dtype %s", name, emx_dtype_name(t->dtype));
            if (memcmp(&got, &want, 4) != 0)
                cr_assert_fail("%s[%llu, %llu] = %.9g, source %.9g (%s must be %s)", name, (unsigned long long)r,
                               (unsigned long long)j, got, srow[j], emx_dtype_name(t->dtype),
                               t->dtype == EMX_F32 ? "bit-exact" : "its round-to-nearest-even");
        }
    }
    free(srow);
    free(row);
    c->checked++;
}

static inline SrcT from_l2c(const void *src, const char *name) { return l2c_tensor(src, name); }
static inline SrcT from_st(const void *src, const char *name) { return st_tensor(src, name); }
static inline SrcT from_gguf(const void *src, const char *name) { return gguf_tensor(src, name); }

#endif
