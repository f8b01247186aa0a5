// test_convert.c — the converter against independent decodings of its sources.
//
// The converted test models (build/models/, `make test-models`) are opened with
// emx_model_open and every tensor is compared with the source tensor decoded here, by code of
// this file: llama2.c float32 read at offsets computed from its header, safetensors parsed
// with cJSON (BF16 -> f32 by shift, F16 by ldexp), GGUF F32/F16/BF16 data. f32 outputs must be
// bit-exact; bf16 must be the round-to-nearest-even of the source; q8 must be within half a
// quantisation step of the source in every 32-weight group, q4/q4_1 groups must leave no more
// squared error than plain llama.cpp-style quantisation (computed here) would (check_quant_row).
// SmolLM2's Q4_1 GGUF converted to q4_1 must be bit-exact (blocks repacked).
// The ggml block dequantiser is checked against gguf-py's (tools/gen_dequant_reference.py).
// Error paths run the converter binary and check exit status, the one-line message and that
// no output (or .tmp) file is left.
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/dtype.h"
#include "tools/convert/ggml_dequant.h"
#include "tools/convert/gguf.h"
#include "runtime/model.h"
#include "test_util.h"

// ---------------------------------------------------------------------------------------------
// Independent element decoders.

static float half_to_float(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m + 1024), e - 25);
    return (h & 0x8000) ? -v : v;
}

static float bf16_to_float(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// f32 -> bf16 rounding to nearest, ties to even (finite inputs).
static uint16_t float_to_bf16_rne(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t hi = u >> 16, lo = u & 0xffff;
    if (lo > 0x8000 || (lo == 0x8000 && (hi & 1))) hi++;
    return (uint16_t)hi;
}

// Source element i of data stored as "F32" / "F16" / "BF16".
static float src_elem(const char *dtype, const uint8_t *p, uint64_t i) {
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
static int for_each_tensor(const EmxModel *m, TensorFn fn, void *ctx) {
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

static void open_model(EmxModel *m, const char *rel) {
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

static void l2c_load(L2c *c) {
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
static SrcT l2c_tensor(const L2c *c, const char *name) {
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

// safetensors: u64 header length, JSON header, data.
typedef struct {
    char *buf;
    size_t len;
    cJSON *hdr;
    const uint8_t *data;
} StFile;

static void st_load(StFile *s, const char *rel) {
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

static void st_free(StFile *s) {
    cJSON_Delete(s->hdr);
    free(s->buf);
}

// Our name -> HF name.
static void hf_name(const char *ours, char *out, size_t cap) {
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

static SrcT st_tensor(const StFile *s, const char *ours) {
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
static void gguf_name(const char *ours, char *out, size_t cap) {
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

static SrcT gguf_tensor(const GGUFFile *g, const char *ours) {
    char name[128];
    gguf_name(ours, name, sizeof name);
    const GGUFTensor *t = gguf_find_tensor(g, name);
    cr_assert_not_null(t, "GGUF has no %s", name);
    const char *dt = t->type == GGML_F32 ? "F32" : t->type == GGML_F16 ? "F16" : t->type == GGML_BF16 ? "BF16" : NULL;
    cr_assert_not_null(dt, "%s: unexpected ggml type %u", name, t->type);
    return (SrcT){dt, t->n_dims == 1 ? t->ne[0] : t->ne[1], t->n_dims == 1 ? 1 : t->ne[0], t->data};
}

static void gguf_load(GGUFFile *g, const char *rel) {
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
static double plain_q4_sq_err(const float *w) {
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
static double plain_q4_1_sq_err(const float *w, float *step) {
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
static void check_quant_row(const char *name, const EmxTensor *t, uint64_t r, const float *want, const float *got) {
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

static void compare_tensor(const EmxModel *m, const char *name, void *vctx) {
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

static SrcT from_l2c(const void *src, const char *name) { return l2c_tensor(src, name); }
static SrcT from_st(const void *src, const char *name) { return st_tensor(src, name); }
static SrcT from_gguf(const void *src, const char *name) { return gguf_tensor(src, name); }

// ---------------------------------------------------------------------------------------------
// f32 conversions: bit-exact.

Test(convert, stories260K_llama2c_f32_bit_exact) {
    L2c src;
    l2c_load(&src);
    EmxModel m;
    open_model(&m, "models/stories260K.f32.bin");
    cr_assert_eq(m.cfg.dim, (uint32_t)src.dim);
    cr_assert_eq(m.cfg.max_seq_len, (uint32_t)src.seq);
    Compare c = {from_l2c, &src, NULL, 0};
    int n = for_each_tensor(&m, compare_tensor, &c);
    cr_assert_eq(n, 2 + 5 * 9);
    emx_model_close(&m);
    free(src.buf);
}

// llama.cpp's GGUF of stories260K holds the same floats (q/k already interleaved: no
// permutation) and a separate copy of the embeddings as output.
Test(convert, stories260K_gguf_f32_equals_llama2c) {
    L2c src;
    l2c_load(&src);
    EmxModel m;
    open_model(&m, "models/stories260K.gguf.f32.bin");
    cr_assert_eq(m.cfg.rope_style, EMX_ROPE_INTERLEAVED);
    cr_assert_eq(m.cfg.tied_output, 0);
    cr_assert_eq(m.cfg.n_kv_heads, 4);
    cr_assert_eq(m.tok.n_vocab, 512);
    Compare c = {from_l2c, &src, NULL, 0};
    cr_assert_eq(for_each_tensor(&m, compare_tensor, &c), 3 + 5 * 9);
    emx_model_close(&m);
    free(src.buf);
}

Test(convert, qwen3_tiny_hf_f32_bit_exact) {
    StFile st;
    st_load(&st, "testdata/tiny/qwen3-tiny/hf/model.safetensors");
    EmxModel m;
    open_model(&m, "models/qwen3-tiny.f32.bin");
    const EmxConfig *cf = &m.cfg;
    cr_assert_eq(cf->arch, EMX_ARCH_QWEN3);
    cr_assert_eq(cf->qk_norm, 1);
    cr_assert_eq(cf->head_dim, 32);
    cr_assert_eq(cf->n_heads, 4);
    cr_assert_eq(cf->n_kv_heads, 2);
    cr_assert_eq(cf->vocab_size, 151936);
    cr_assert_eq(cf->rope_style, EMX_ROPE_HALF);
    cr_assert_eq(cf->rope_freq_factors, 0);
    cr_assert_eq(cf->tied_output, 1);
    cr_assert_eq(cf->max_seq_len, 40960);
    cr_assert_float_eq(cf->rope_theta, 1e6f, 1e-3);
    cr_assert_float_eq(cf->norm_eps, 1e-6f, 1e-12);
    cr_assert_eq(cf->chat_template, EMX_CHAT_QWEN3);
    Compare c = {from_st, &st, NULL, 0};
    cr_assert_eq(for_each_tensor(&m, compare_tensor, &c), 2 + 3 * 11);
    emx_model_close(&m);
    st_free(&st);
}

// The divisors llama.cpp's converter stored for this config (testdata README, 3.2).
static const float llama3_tiny_factors[8] = {1, 1, 1, 1, 3.2922626f, 32, 32, 32};

Test(convert, llama3_tiny_hf_f32_bit_exact_and_rope_factors) {
    StFile st;
    st_load(&st, "testdata/tiny/llama3-tiny/hf/model.safetensors");
    EmxModel m;
    open_model(&m, "models/llama3-tiny.f32.bin");
    const EmxConfig *cf = &m.cfg;
    cr_assert_eq(cf->arch, EMX_ARCH_LLAMA);
    cr_assert_eq(cf->qk_norm, 0);
    cr_assert_eq(cf->head_dim, 16);
    cr_assert_eq(cf->rope_style, EMX_ROPE_HALF);
    cr_assert_eq(cf->rope_freq_factors, 1);
    cr_assert_eq(cf->chat_template, EMX_CHAT_LLAMA3);
    cr_assert_float_eq(cf->rope_theta, 500000.0f, 1e-3);
    Compare c = {from_st, &st, NULL, 0};
    cr_assert_eq(for_each_tensor(&m, compare_tensor, &c), 2 + 3 * 9);
    // HF's _compute_llama3_parameters, as divisors, against llama.cpp's converter's values.
    GGUFFile g;
    gguf_load(&g, "testdata/tiny/llama3-tiny/llama3-tiny.f16.gguf");
    SrcT gf = gguf_tensor(&g, "rope_freq_factors");
    cr_assert_eq(m.rope_freq_factors.rows, 8);
    const float *f = m.rope_freq_factors.data;
    for (int i = 0; i < 8; i++) {
        float want = src_elem(gf.dtype, gf.data, (uint64_t)i);
        cr_assert_float_eq(f[i], want, 2e-6f * want, "factor %d: %.9g vs GGUF %.9g", i, f[i], want);
        cr_assert_float_eq(f[i], llama3_tiny_factors[i], 2e-6f * want, "factor %d: %.9g", i, f[i]);
    }
    gguf_close(&g);
    emx_model_close(&m);
    st_free(&st);
}

// qwen3 GGUF: NEOX rope, q/k not permuted: every tensor equals the HF one.
Test(convert, qwen3_tiny_gguf_f32_equals_hf) {
    StFile st;
    st_load(&st, "testdata/tiny/qwen3-tiny/hf/model.safetensors");
    EmxModel m;
    open_model(&m, "models/qwen3-tiny.gguf.f32.bin");
    cr_assert_eq(m.cfg.rope_style, EMX_ROPE_HALF);
    cr_assert_eq(m.cfg.qk_norm, 1);
    cr_assert_eq(m.cfg.head_dim, 32);
    cr_assert_eq(m.cfg.chat_template, EMX_CHAT_QWEN3);
    Compare c = {from_st, &st, NULL, 0};
    cr_assert_eq(for_each_tensor(&m, compare_tensor, &c), 2 + 3 * 11);
    emx_model_close(&m);
    st_free(&st);
}

// llama GGUF: llama.cpp's converter permuted q/k rows of each head from rotate-half order into
// interleaved pairs: GGUF row h*hd + 2j + t holds HF row h*hd + t*hd/2 + j.
static uint64_t unpermute_qk(const EmxModel *m, const char *name, uint64_t r) {
    size_t n = strlen(name);
    if (n < 3 || (strcmp(name + n - 3, ".wq") && strcmp(name + n - 3, ".wk"))) return r;
    uint64_t hd = m->cfg.head_dim, h = r / hd, i = r % hd, j = i / 2, t = i % 2;
    return h * hd + t * (hd / 2) + j;
}

Test(convert, llama3_tiny_gguf_f32_is_hf_permuted) {
    StFile st;
    st_load(&st, "testdata/tiny/llama3-tiny/hf/model.safetensors");
    EmxModel m;
    open_model(&m, "models/llama3-tiny.gguf.f32.bin");
    cr_assert_eq(m.cfg.rope_style, EMX_ROPE_INTERLEAVED);
    cr_assert_eq(m.cfg.rope_freq_factors, 1);
    cr_assert_eq(m.cfg.chat_template, EMX_CHAT_LLAMA3);
    Compare c = {from_st, &st, unpermute_qk, 0};
    cr_assert_eq(for_each_tensor(&m, compare_tensor, &c), 2 + 3 * 9);
    const float *f = m.rope_freq_factors.data;
    for (int i = 0; i < 8; i++) cr_assert_float_eq(f[i], llama3_tiny_factors[i], 1e-6f * llama3_tiny_factors[i]);
    // Without the permutation the comparison must fail: wq differs from HF's q_proj row order.
    const EmxTensor *wq = &m.layers[0].wq;
    SrcT s = st_tensor(&st, "layers.0.wq");
    float row1[64];
    emx_dequantize_row(wq->dtype, wq->data, wq->rows, wq->cols, 1, row1);
    cr_assert_neq(row1[0], src_elem(s.dtype, s.data, 1 * 64), "GGUF q rows look unpermuted");
    emx_model_close(&m);
    st_free(&st);
}

// The GGUF copy of llama3-tiny, read as GGUF by the test, against our conversion of the HF
// files: both decodings of the same weights (independent writer: gguf-py).
Test(convert, llama3_tiny_gguf_source_matches_conversion) {
    GGUFFile g;
    gguf_load(&g, "testdata/tiny/llama3-tiny/llama3-tiny.f16.gguf");
    EmxModel m;
    open_model(&m, "models/llama3-tiny.gguf.f32.bin");
    Compare c = {from_gguf, &g, NULL, 0};
    cr_assert_eq(for_each_tensor(&m, compare_tensor, &c), 2 + 3 * 9);
    emx_model_close(&m);
    gguf_close(&g);
}

// ---------------------------------------------------------------------------------------------
// bf16 / q8 / q4.

static void check_lossy(const char *model_rel, const char *st_rel, uint32_t dtype, uint32_t emb_dtype) {
    StFile st;
    st_load(&st, st_rel);
    EmxModel m;
    open_model(&m, model_rel);
    cr_assert_eq(m.tok_embeddings.dtype, emb_dtype, "%s: embeddings are %s", model_rel,
                 emx_dtype_name(m.tok_embeddings.dtype));
    cr_assert_eq(m.layers[0].wq.dtype, dtype);
    cr_assert_eq(m.layers[m.cfg.n_layers - 1].w_down.dtype, dtype);
    cr_assert_eq(m.layers[0].attn_norm.dtype, EMX_F32);
    Compare c = {from_st, &st, NULL, 0};
    cr_assert_gt(for_each_tensor(&m, compare_tensor, &c), 10);
    emx_model_close(&m);
    st_free(&st);
}

#define QWEN3_ST "testdata/tiny/qwen3-tiny/hf/model.safetensors"
#define LLAMA3_ST "testdata/tiny/llama3-tiny/hf/model.safetensors"

Test(convert, qwen3_tiny_bf16_exact) { check_lossy("models/qwen3-tiny.bf16.bin", QWEN3_ST, EMX_BF16, EMX_BF16); }
Test(convert, llama3_tiny_bf16_rounds_to_nearest_even) {
    check_lossy("models/llama3-tiny.bf16.bin", LLAMA3_ST, EMX_BF16, EMX_BF16);
}
Test(convert, qwen3_tiny_q8_within_half_step) { check_lossy("models/qwen3-tiny.q8.bin", QWEN3_ST, EMX_Q8, EMX_Q8); }
Test(convert, llama3_tiny_q8_within_half_step) { check_lossy("models/llama3-tiny.q8.bin", LLAMA3_ST, EMX_Q8, EMX_Q8); }
// q4 files keep the embeddings at q8 by default (--keep-embeddings-q8).
Test(convert, qwen3_tiny_q4_within_step) { check_lossy("models/qwen3-tiny.q4.bin", QWEN3_ST, EMX_Q4, EMX_Q8); }
Test(convert, llama3_tiny_q4_within_step) { check_lossy("models/llama3-tiny.q4.bin", LLAMA3_ST, EMX_Q4, EMX_Q8); }
Test(convert, qwen3_tiny_q4_1_beats_plain) { check_lossy("models/qwen3-tiny.q4_1.bin", QWEN3_ST, EMX_Q4_1, EMX_Q8); }
Test(convert, llama3_tiny_q4_1_beats_plain) { check_lossy("models/llama3-tiny.q4_1.bin", LLAMA3_ST, EMX_Q4_1, EMX_Q8); }

// stories260K at q8: w_down has 172 columns (not a multiple of 32) and stays f32, bit-exact.
Test(convert, stories260K_q8_keeps_odd_width_f32) {
    L2c src;
    l2c_load(&src);
    EmxModel m;
    open_model(&m, "models/stories260K.q8.bin");
    cr_assert_eq(m.layers[0].w_down.dtype, EMX_F32);
    cr_assert_eq(m.layers[0].w_gate.dtype, EMX_Q8);
    cr_assert_eq(m.tok_embeddings.dtype, EMX_Q8);
    Compare c = {from_l2c, &src, NULL, 0};
    for_each_tensor(&m, compare_tensor, &c);
    emx_model_close(&m);
    free(src.buf);
}

// ---------------------------------------------------------------------------------------------
// GGUF block formats against gguf-py's dequantize().

static void check_dequant_file(const char *type_name) {
    char p[256];
    snprintf(p, sizeof p, "tests/data/dequant/%s.bin", type_name);
    size_t len;
    char *buf = test_read_file(p, &len);
    cr_assert_not_null(buf, "cannot read %s (run the tests from the repository root)", p);
    uint32_t h[4];
    memcpy(h, buf, sizeof h);
    uint32_t type = h[0], rows = h[1], cols = h[2], row_bytes = h[3];
    cr_assert_str_eq(ggml_type_name(type), type_name);
    cr_assert_eq(ggml_row_bytes(type, cols), row_bytes);
    cr_assert_eq(len, 16 + (size_t)rows * row_bytes + (size_t)rows * cols * 4);
    const uint8_t *raw = (const uint8_t *)buf + 16;
    const uint8_t *ref = raw + (size_t)rows * row_bytes;
    float *out = malloc((size_t)rows * cols * sizeof *out);
    // All rows at once, then each row alone (row offsets).
    cr_assert_eq(ggml_dequantize_rows(type, raw, cols, 0, rows, out), 0);
    for (uint32_t i = 0; i < rows * cols; i++) {
        float want;
        memcpy(&want, ref + 4 * i, 4);
        cr_assert_float_eq(out[i], want, 1e-6f * fmaxf(1.0f, fabsf(want)), "%s element %u: %.9g vs gguf-py %.9g",
                           type_name, i, out[i], want);
    }
    cr_assert_eq(ggml_dequantize_rows(type, raw, cols, rows - 1, 1, out), 0);
    float last;
    memcpy(&last, ref + 4 * ((size_t)(rows - 1) * cols + 5), 4);
    cr_assert_float_eq(out[5], last, 1e-6f * fmaxf(1.0f, fabsf(last)));
    free(out);
    free(buf);
}

Test(convert, dequant_q4_0) { check_dequant_file("Q4_0"); }
Test(convert, dequant_q4_1) { check_dequant_file("Q4_1"); }
Test(convert, dequant_q5_0) { check_dequant_file("Q5_0"); }
Test(convert, dequant_q5_1) { check_dequant_file("Q5_1"); }
Test(convert, dequant_q8_0) { check_dequant_file("Q8_0"); }
Test(convert, dequant_q4_k) { check_dequant_file("Q4_K"); }
Test(convert, dequant_q5_k) { check_dequant_file("Q5_K"); }
Test(convert, dequant_q6_k) { check_dequant_file("Q6_K"); }

// Rows of the real SmolLM2-135M-Instruct Q4_1 GGUF (Q8_0 embeddings, Q4_1 matrices).
Test(convert, dequant_smollm2_rows) {
    const char *path = getenv("EMX_SMOLLM2_GGUF");
    if (!path || !*path) path = "weights/download/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (access(path, R_OK) != 0) cr_skip_test("%s not present (weights/ fetch script, or set EMX_SMOLLM2_GGUF)", path);
    size_t len;
    char *buf = test_read_file("tests/data/dequant/smollm2_rows.bin", &len);
    cr_assert_not_null(buf);
    uint64_t file_bytes;
    uint32_t n;
    memcpy(&file_bytes, buf, 8);
    memcpy(&n, buf + 8, 4);
    GGUFFile g;
    char err[512];
    cr_assert_eq(gguf_open(&g, path, err, sizeof err), 0, "%s", err);
    if (g.map_size != file_bytes) {
        gguf_close(&g);
        free(buf);
        cr_skip_test("%s has %zu bytes, the reference was made from a %llu-byte file", path, g.map_size,
                     (unsigned long long)file_bytes);
    }
    size_t off = 12;
    int types_seen[64] = {0};
    for (uint32_t e = 0; e < n; e++) {
        char name[65] = {0};
        uint32_t h[3];
        memcpy(name, buf + off, 64);
        memcpy(h, buf + off + 64, 12);
        off += 76;
        const GGUFTensor *t = gguf_find_tensor(&g, name);
        cr_assert_not_null(t, "%s", name);
        cr_assert_eq(t->type, h[0]);
        cr_assert_eq(t->ne[0], h[2]);
        types_seen[h[0] & 63] = 1;
        float *out = malloc(h[2] * sizeof *out);
        cr_assert_eq(ggml_dequantize_rows(t->type, t->data, h[2], h[1], 1, out), 0);
        for (uint32_t j = 0; j < h[2]; j++) {
            float want;
            memcpy(&want, buf + off + 4 * j, 4);
            cr_assert_float_eq(out[j], want, 1e-6f * fmaxf(1.0f, fabsf(want)), "%s row %u col %u: %.9g vs %.9g", name,
                               h[1], j, out[j], want);
        }
        off += 4 * (size_t)h[2];
        free(out);
    }
    cr_assert(types_seen[GGML_Q8_0] && types_seen[GGML_Q4_1]);
    gguf_close(&g);
    free(buf);
}

// ---------------------------------------------------------------------------------------------
// The converter binary: errors are one line, a non-zero exit, and no file left behind.

typedef struct {
    char dir[64];
    char out[128];
    char err[2048];
    int status;
} Run;

static void run_setup(Run *r) {
    snprintf(r->dir, sizeof r->dir, "/tmp/emx-test-convert-XXXXXX");
    cr_assert_not_null(mkdtemp(r->dir));
    snprintf(r->out, sizeof r->out, "%s/out.bin", r->dir);
}

static void run_cleanup(Run *r) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", r->dir);
    cr_assert_eq(system(cmd), 0);
}

// Runs `convert <args> <r->out>`-style command line built by the caller; captures stderr.
static void run_convert(Run *r, const char *args) {
    char conv[512], cmd[4096], errp[160];
    test_build_path(conv, sizeof conv, "tools/convert");
    cr_assert_eq(access(conv, X_OK), 0, "no converter binary at %s", conv);
    snprintf(errp, sizeof errp, "%s/stderr.txt", r->dir);
    snprintf(cmd, sizeof cmd, "'%s' %s >/dev/null 2>'%s'", conv, args, errp);
    int st = system(cmd);
    cr_assert(WIFEXITED(st), "converter did not exit normally (%d)", st);
    r->status = WEXITSTATUS(st);
    size_t n = 0;
    char *e = test_read_file(errp, &n);
    snprintf(r->err, sizeof r->err, "%s", e ? e : "");
    free(e);
    unlink(errp);
}

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s", path);
    cr_assert_eq(fwrite(p, 1, n, f), n);
    fclose(f);
}

// The run failed with one line containing `needle`, and left neither out nor out.tmp.
static void expect_clean_failure(const Run *r, const char *needle) {
    cr_assert_neq(r->status, 0, "converter succeeded; expected \"%s\"", needle);
    size_t n = strlen(r->err);
    cr_assert(n > 0 && r->err[n - 1] == '\n' && strchr(r->err, '\n') == r->err + n - 1,
              "stderr is not exactly one line: \"%s\"", r->err);
    cr_assert_not_null(strstr(r->err, needle), "message lacks \"%s\": %s", needle, r->err);
    char tmp[160];
    snprintf(tmp, sizeof tmp, "%s.tmp", r->out);
    cr_assert_neq(access(r->out, F_OK), 0, "output file left behind");
    cr_assert_neq(access(tmp, F_OK), 0, ".tmp file left behind");
}

// A safetensors file with one tensor.
static void write_safetensors(const char *path, const char *name, const char *dtype, int rows, int cols, size_t nbytes) {
    char hdr[512];
    int n = snprintf(hdr, sizeof hdr, "{\"%s\":{\"dtype\":\"%s\",\"shape\":[%d,%d],\"data_offsets\":[0,%zu]}}", name,
                     dtype, rows, cols, nbytes);
    while (n % 8) hdr[n++] = ' ';
    uint64_t len = (uint64_t)n;
    size_t total = 8 + (size_t)n + nbytes;
    char *buf = calloc(1, total);
    memcpy(buf, &len, 8);
    memcpy(buf + 8, hdr, (size_t)n);
    write_bytes(path, buf, total);
    free(buf);
}

static void copy_config(const char *dir, const char *shared_rel) {
    char p[512], q[256];
    size_t n = 0;
    test_shared_path(p, sizeof p, shared_rel);
    char *text = test_read_file(p, &n);
    cr_assert_not_null(text, "%s", p);
    snprintf(q, sizeof q, "%s/config.json", dir);
    write_bytes(q, text, n);
    free(text);
}

Test(convert, error_unsupported_safetensors_dtype) {
    Run r;
    run_setup(&r);
    char p[256], args[512];
    copy_config(r.dir, "testdata/tiny/llama3-tiny/hf/config.json");
    snprintf(p, sizeof p, "%s/model.safetensors", r.dir);
    write_safetensors(p, "model.embed_tokens.weight", "I8", 4, 4, 16);
    snprintf(args, sizeof args, "'%s' '%s' --dtype f32", r.dir, r.out);
    run_convert(&r, args);
    expect_clean_failure(&r, "dtype I8");
    cr_assert_not_null(strstr(r.err, "model.embed_tokens.weight"), "%s", r.err);
    run_cleanup(&r);
}

Test(convert, error_unsupported_architecture) {
    Run r;
    run_setup(&r);
    char p[256], args[512];
    snprintf(p, sizeof p, "%s/config.json", r.dir);
    const char *cfg = "{\"architectures\": [\"GPT2LMHeadModel\"], \"model_type\": \"gpt2\"}";
    write_bytes(p, cfg, strlen(cfg));
    snprintf(args, sizeof args, "'%s' '%s'", r.dir, r.out);
    run_convert(&r, args);
    expect_clean_failure(&r, "GPT2LMHeadModel");
    run_cleanup(&r);
}

Test(convert, error_unsupported_gguf_architecture) {
    Run r;
    run_setup(&r);
    char p[256], args[512];
    // GGUF v3, 0 tensors, 1 key: general.architecture = "gpt2".
    uint8_t g[128];
    size_t n = 0;
    uint32_t v3 = 3, tstr = GGUF_STRING;
    uint64_t zero = 0, one = 1, klen = 20, vlen = 4;
    memcpy(g + n, "GGUF", 4), n += 4;
    memcpy(g + n, &v3, 4), n += 4;
    memcpy(g + n, &zero, 8), n += 8;
    memcpy(g + n, &one, 8), n += 8;
    memcpy(g + n, &klen, 8), n += 8;
    memcpy(g + n, "general.architecture", 20), n += 20;
    memcpy(g + n, &tstr, 4), n += 4;
    memcpy(g + n, &vlen, 8), n += 8;
    memcpy(g + n, "gpt2", 4), n += 4;
    snprintf(p, sizeof p, "%s/m.gguf", r.dir);
    write_bytes(p, g, n);
    snprintf(args, sizeof args, "'%s' '%s'", p, r.out);
    run_convert(&r, args);
    expect_clean_failure(&r, "\"gpt2\"");
    run_cleanup(&r);
}

Test(convert, error_missing_tensor) {
    Run r;
    run_setup(&r);
    char p[256], args[512], src[512], real[4096];
    copy_config(r.dir, "testdata/tiny/llama3-tiny/hf/config.json");
    snprintf(p, sizeof p, "%s/model.safetensors", r.dir);
    write_safetensors(p, "model.norm.weight", "F32", 64, 1, 64 * 4);  // [64, 1]: stored 2-D, but only this one
    // The tokenizer files of llama3 (the converter reads them before checking tensors).
    const char *files[] = {"tokenizer.json", "tokenizer_config.json"};
    for (int i = 0; i < 2; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "testdata/tokenizers/llama3/%s", files[i]);
        test_shared_path(src, sizeof src, rel);
        cr_assert_not_null(realpath(src, real), "%s", src);
        snprintf(p, sizeof p, "%s/%s", r.dir, files[i]);
        cr_assert_eq(symlink(real, p), 0);
    }
    snprintf(args, sizeof args, "'%s' '%s'", r.dir, r.out);
    run_convert(&r, args);
    expect_clean_failure(&r, "tok_embeddings");
    cr_assert_not_null(strstr(r.err, "missing"), "%s", r.err);
    run_cleanup(&r);
}

Test(convert, error_truncated_sources) {
    Run r;
    run_setup(&r);
    char p[256], args[1024], tok[512];
    L2c src;
    l2c_load(&src);
    snprintf(p, sizeof p, "%s/s.bin", r.dir);
    write_bytes(p, src.buf, src.len - 1000);
    test_shared_path(tok, sizeof tok, "testdata/stories260K/tok512.bin");
    snprintf(args, sizeof args, "'%s' '%s' --tokenizer '%s'", p, r.out, tok);
    run_convert(&r, args);
    expect_clean_failure(&r, "truncated");
    // A safetensors whose data ends early.
    copy_config(r.dir, "testdata/tiny/llama3-tiny/hf/config.json");
    snprintf(p, sizeof p, "%s/model.safetensors", r.dir);
    write_safetensors(p, "model.embed_tokens.weight", "F16", 128256, 64, 1000);
    snprintf(args, sizeof args, "'%s' '%s'", r.dir, r.out);
    run_convert(&r, args);
    expect_clean_failure(&r, "model.embed_tokens.weight");
    free(src.buf);
    run_cleanup(&r);
}

// A NaN weight is found while writing: the half-written .tmp must be removed.
Test(convert, error_while_writing_leaves_nothing) {
    Run r;
    run_setup(&r);
    char p[256], args[1024], tok[512];
    L2c src;
    l2c_load(&src);
    SrcT wq = l2c_tensor(&src, "layers.3.wq");
    float nan = NAN;
    memcpy((char *)wq.data + 4 * 70, &nan, 4);
    snprintf(p, sizeof p, "%s/s.bin", r.dir);
    write_bytes(p, src.buf, src.len);
    test_shared_path(tok, sizeof tok, "testdata/stories260K/tok512.bin");
    snprintf(args, sizeof args, "'%s' '%s' --tokenizer '%s' --dtype q8", p, r.out, tok);
    run_convert(&r, args);
    expect_clean_failure(&r, "layers.3.wq");
    free(src.buf);
    run_cleanup(&r);
}

Test(convert, error_bad_options) {
    Run r;
    run_setup(&r);
    char args[2048], bin[512];
    test_shared_path(bin, sizeof bin, "testdata/stories260K/stories260K.bin");
    snprintf(args, sizeof args, "'%s' '%s' --dtype q3", bin, r.out);
    run_convert(&r, args);
    expect_clean_failure(&r, "q3");
    snprintf(args, sizeof args, "'%s' '%s'", bin, r.out);  // llama2.c without --tokenizer
    run_convert(&r, args);
    expect_clean_failure(&r, "--tokenizer");
    run_cleanup(&r);
}

Test(convert, chat_template_override) {
    Run r;
    run_setup(&r);
    char args[2048], bin[512], tok[512];
    test_shared_path(bin, sizeof bin, "testdata/stories260K/stories260K.bin");
    test_shared_path(tok, sizeof tok, "testdata/stories260K/tok512.bin");
    snprintf(args, sizeof args, "'%s' '%s' --tokenizer '%s' --dtype f32 --chat-template chatml", bin, r.out, tok);
    run_convert(&r, args);
    cr_assert_eq(r.status, 0, "%s", r.err);
    EmxModel m;
    char err[512];
    cr_assert_eq(emx_model_open(&m, r.out, err, sizeof err), 0, "%s", err);
    cr_assert_eq(m.cfg.chat_template, EMX_CHAT_CHATML);
    emx_model_close(&m);
    snprintf(args, sizeof args, "'%s' '%s' --tokenizer '%s' --chat-template jinja", bin, r.out, tok);
    run_convert(&r, args);
    cr_assert_neq(r.status, 0);
    run_cleanup(&r);
}

// ---------------------------------------------------------------------------------------------
// Other source layouts, crafted from the test data.

static void append_l2c(char *buf, size_t *n, const L2c *src, const char *name) {
    SrcT t = l2c_tensor(src, name);
    memcpy(buf + *n, t.data, t.rows * t.cols * 4);
    *n += t.rows * t.cols * 4;
}

// llama2.c's "ak42" version 1 export: 256-byte header, then all norms, the embedding and the
// matrices grouped by kind. Built from the v0 file's tensors; the conversion must hold them
// bit for bit.
Test(convert, llama2c_v1_export) {
    Run r;
    run_setup(&r);
    L2c src;
    l2c_load(&src);
    char *buf = calloc(1, src.len + 256);
    uint32_t magic = 0x616b3432;
    int32_t version = 1, hdr[7] = {src.dim, src.hidden, src.layers, src.heads, src.kv_heads, src.vocab, src.seq};
    memcpy(buf, &magic, 4);
    memcpy(buf + 4, &version, 4);
    memcpy(buf + 8, hdr, sizeof hdr);
    buf[36] = 1;  // shared classifier
    size_t n = 256;
    char name[64];
    const char *groups[2][4] = {{"attn_norm", "ffn_norm", NULL, NULL}, {"wq", "wk", "wv", "wo"}};
    for (int k = 0; groups[0][k]; k++)
        for (int l = 0; l < src.layers; l++) snprintf(name, sizeof name, "layers.%d.%s", l, groups[0][k]), append_l2c(buf, &n, &src, name);
    append_l2c(buf, &n, &src, "norm");
    append_l2c(buf, &n, &src, "tok_embeddings");
    for (int k = 0; k < 4; k++)
        for (int l = 0; l < src.layers; l++) snprintf(name, sizeof name, "layers.%d.%s", l, groups[1][k]), append_l2c(buf, &n, &src, name);
    const char *ffn[3] = {"w_gate", "w_down", "w_up"};  // llama2.c w1, w2, w3
    for (int k = 0; k < 3; k++)
        for (int l = 0; l < src.layers; l++) snprintf(name, sizeof name, "layers.%d.%s", l, ffn[k]), append_l2c(buf, &n, &src, name);
    char p[256], tok[512], args[2048];
    snprintf(p, sizeof p, "%s/v1.bin", r.dir);
    write_bytes(p, buf, n);
    free(buf);
    test_shared_path(tok, sizeof tok, "testdata/stories260K/tok512.bin");
    snprintf(args, sizeof args, "'%s' '%s' --tokenizer '%s' --dtype f32", p, r.out, tok);
    run_convert(&r, args);
    cr_assert_eq(r.status, 0, "%s", r.err);
    EmxModel m;
    char err[512];
    cr_assert_eq(emx_model_open(&m, r.out, err, sizeof err), 0, "%s", err);
    cr_assert_eq(m.cfg.tied_output, 1);
    Compare c = {from_l2c, &src, NULL, 0};
    cr_assert_eq(for_each_tensor(&m, compare_tensor, &c), 2 + 5 * 9);
    emx_model_close(&m);
    free(src.buf);
    run_cleanup(&r);
}

// A HuggingFace directory whose weights are split over two shards listed in
// model.safetensors.index.json (llama3-tiny's tensors, split in file order).
Test(convert, hf_sharded_safetensors) {
    Run r;
    run_setup(&r);
    StFile st;
    st_load(&st, LLAMA3_ST);
    copy_config(r.dir, "testdata/tiny/llama3-tiny/hf/config.json");
    const char *files[] = {"tokenizer.json", "tokenizer_config.json"};
    char p[512], src[512], real[4096];
    for (int i = 0; i < 2; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "testdata/tokenizers/llama3/%s", files[i]);
        test_shared_path(src, sizeof src, rel);
        cr_assert_not_null(realpath(src, real), "%s", src);
        snprintf(p, sizeof p, "%s/%s", r.dir, files[i]);
        cr_assert_eq(symlink(real, p), 0);
    }
    int total = cJSON_GetArraySize(st.hdr), idx = 0;
    cJSON *shard_hdr[2] = {cJSON_CreateObject(), cJSON_CreateObject()}, *map = cJSON_CreateObject();
    uint64_t shard_len[2] = {0, 0};
    const cJSON *e;
    // First pass: headers with offsets rebased inside each shard.
    cJSON_ArrayForEach(e, st.hdr) {
        if (!strcmp(e->string, "__metadata__")) continue;
        int k = idx++ < total / 2 ? 0 : 1;
        const cJSON *offs = cJSON_GetObjectItem(e, "data_offsets");
        uint64_t b0 = (uint64_t)cJSON_GetArrayItem(offs, 0)->valuedouble, b1 = (uint64_t)cJSON_GetArrayItem(offs, 1)->valuedouble;
        cJSON *t = cJSON_Duplicate(e, 1);
        cJSON *no = cJSON_CreateArray();
        cJSON_AddItemToArray(no, cJSON_CreateNumber((double)shard_len[k]));
        cJSON_AddItemToArray(no, cJSON_CreateNumber((double)(shard_len[k] + b1 - b0)));
        cJSON_ReplaceItemInObject(t, "data_offsets", no);
        cJSON_AddItemToObject(shard_hdr[k], e->string, t);
        cJSON_AddStringToObject(map, e->string, k ? "model-00002-of-00002.safetensors" : "model-00001-of-00002.safetensors");
        shard_len[k] += b1 - b0;
    }
    // Second pass: each shard's header then its tensors' bytes in the same order.
    for (int k = 0; k < 2; k++) {
        char *h = cJSON_PrintUnformatted(shard_hdr[k]);
        uint64_t hl = strlen(h);
        snprintf(p, sizeof p, "%s/model-0000%d-of-00002.safetensors", r.dir, k + 1);
        FILE *f = fopen(p, "wb");
        cr_assert_not_null(f);
        fwrite(&hl, 8, 1, f);
        fwrite(h, 1, hl, f);
        const cJSON *t;
        cJSON_ArrayForEach(t, shard_hdr[k]) {
            const cJSON *orig = cJSON_GetObjectItemCaseSensitive(st.hdr, t->string);
            const cJSON *offs = cJSON_GetObjectItem(orig, "data_offsets");
            uint64_t b0 = (uint64_t)cJSON_GetArrayItem(offs, 0)->valuedouble, b1 = (uint64_t)cJSON_GetArrayItem(offs, 1)->valuedouble;
            cr_assert_eq(fwrite(st.data + b0, 1, b1 - b0, f), b1 - b0);
        }
        fclose(f);
        free(h);
        cJSON_Delete(shard_hdr[k]);
    }
    cJSON *index = cJSON_CreateObject();
    cJSON_AddItemToObject(index, "weight_map", map);
    char *text = cJSON_Print(index);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", r.dir);
    write_bytes(p, text, strlen(text));
    free(text);
    cJSON_Delete(index);

    char args[2048];
    snprintf(args, sizeof args, "'%s' '%s' --dtype f32", r.dir, r.out);
    run_convert(&r, args);
    cr_assert_eq(r.status, 0, "%s", r.err);
    EmxModel m;
    char err[512];
    cr_assert_eq(emx_model_open(&m, r.out, err, sizeof err), 0, "%s", err);
    Compare c = {from_st, &st, NULL, 0};
    cr_assert_eq(for_each_tensor(&m, compare_tensor, &c), 2 + 3 * 9);
    emx_model_close(&m);
    st_free(&st);
    run_cleanup(&r);
}

// ---------------------------------------------------------------------------------------------
// llama.cpp Q4_1 -> q4_1: the blocks are copied, so every weight is bit-exact against the GGUF's
// own dequantised values (ggml_dequantize_rows, checked against gguf-py above).

#define SMOLLM2_Q4_1 "weights/download/SmolLM2-135M-Instruct.Q4_1.gguf"

Test(convert, smollm2_q4_1_gguf_repacks_bit_exact, .timeout = 300) {
    if (access(SMOLLM2_Q4_1, R_OK) != 0) cr_skip_test("%s absent (weights/get-default.sh downloads it)", SMOLLM2_Q4_1);
    Run r;
    run_setup(&r);
    char args[512];
    snprintf(args, sizeof args, "'%s' '%s' --dtype q4_1", SMOLLM2_Q4_1, r.out);
    run_convert(&r, args);
    cr_assert_eq(r.status, 0, "convert failed: %s", r.err);
    GGUFFile g;
    char err[512];
    cr_assert_eq(gguf_open(&g, SMOLLM2_Q4_1, err, sizeof err), 0, "%s", err);
    EmxModel m;
    cr_assert_eq(emx_model_open(&m, r.out, err, sizeof err), 0, "%s", err);
    int n_q4_1 = 0;
    for (uint32_t l = 0; l < m.cfg.n_layers; l++)
        for (size_t i = 0; i < sizeof layer_suffixes / sizeof layer_suffixes[0]; i++) {
            char ours[64], gname[128];
            snprintf(ours, sizeof ours, "layers.%u.%s", l, layer_suffixes[i]);
            const EmxTensor *t = model_tensor(&m, ours);
            if (!t->data) continue;  // q_norm/k_norm: not in a llama model
            gguf_name(ours, gname, sizeof gname);
            const GGUFTensor *gt = gguf_find_tensor(&g, gname);
            cr_assert_not_null(gt, "GGUF has no %s", gname);
            if (gt->type != GGML_Q4_1) continue;
            cr_assert_eq(t->dtype, EMX_Q4_1, "%s: %s, expected q4_1", ours, emx_dtype_name(t->dtype));
            cr_assert(gt->n_dims == 2 && gt->ne[0] == t->cols && gt->ne[1] == t->rows, "%s: shape", ours);
            float *got = malloc(t->cols * sizeof *got), *want = malloc(t->cols * sizeof *want);
            for (uint64_t row = 0; row < t->rows; row++) {
                emx_dequantize_row(t->dtype, t->data, t->rows, t->cols, row, got);
                cr_assert_eq(ggml_dequantize_rows(GGML_Q4_1, gt->data, t->cols, row, 1, want), 0);
                for (uint64_t j = 0; j < t->cols; j++)
                    if (memcmp(&got[j], &want[j], 4) != 0)
                        cr_assert_fail("%s[%llu, %llu] = %.9g, GGUF %.9g: not bit-exact", ours, (unsigned long long)row,
                                       (unsigned long long)j, got[j], want[j]);
            }
            free(got);
            free(want);
            n_q4_1++;
        }
    cr_assert_eq(n_q4_1, 7 * (int)m.cfg.n_layers, "%d Q4_1 matrices checked", n_q4_1);
    emx_model_close(&m);
    gguf_close(&g);
    run_cleanup(&r);
}
