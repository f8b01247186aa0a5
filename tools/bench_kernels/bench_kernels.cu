// bench_kernels.cu — times every kernel family at the shapes of SmolLM2-135M and Qwen3-0.6B and
// prints time, bytes moved and GB/s (and, on a GPU, the fraction of the device's peak memory
// bandwidth: decode kernels are bandwidth-bound, so that fraction is their figure of merit).
//
//   make bench-kernels        nvcc build, on a GPU
//   make bench-kernels-emu    the same program through the CPU emulation layer (tests/cuda_emu):
//                             it runs, so the launch paths are exercised, but its timings are
//                             those of CPU fibers, not of a GPU; it says so, and uses reduced
//                             sizes (--emu) so that it finishes in seconds.
// Options: --emu (reduced sizes, 1 iteration), --iters N, --only SUBSTRING (rows whose name
// contains it), --keys-per-block N (attention's chunk, for a sweep; 0: the kernel's default).
// Bytes are the compulsory traffic of one call (each input read once, each output written once:
// weights + activations for a matvec; the valid keys and values + score rows for attention; the
// logits for the metrics and sampling), so GB/s is the effective bandwidth the kernel achieves.
// Timing: cudaEvents around `iters` back-to-back launches after 2 warm-up calls; the mean is
// printed. Inputs are filled with a fixed pattern (the speed of these kernels does not depend on
// the values, except sampling, which gets random logits).
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "kernels/attention.h"
#include "kernels/attn_metrics.h"
#include "kernels/embedding.h"
#include "kernels/gemm.h"
#include "kernels/logits_metrics.h"
#include "kernels/matvec.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/sampling/sampling.h"
#include "kernels/swiglu.h"
#include "kernels/weights.h"

extern "C" {
#include "runtime/cpu/cpu_ops.h"
#include "base/model_format.h"
#include "sampler/profile.h"
}

#ifdef EMX_BENCH_EMULATED
static const int kEmulated = 1;
#else
static const int kEmulated = 0;
#endif

#define CHECK(call)                                                                               \
    do {                                                                                          \
        cudaError_t e_ = (call);                                                                  \
        if (e_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "bench_kernels: %s:%d: %s: %s\n", __FILE__, __LINE__, #call,         \
                    cudaGetErrorString(e_));                                                      \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

typedef struct {
    const char *name;
    int dim, hidden, n_heads, n_kv_heads, head_dim, vocab;
} ModelShape;

// SmolLM2-135M and Qwen3-0.6B (config.json of each). --emu shrinks the vocabulary and contexts.
static const ModelShape kModels[] = {
    {"smollm2-135m", 576, 1536, 9, 3, 64, 49152},
    {"qwen3-0.6b", 1024, 3072, 16, 8, 128, 151936},
};

typedef struct {
    int iters;
    const char *only;
    int keys_per_block;  // attention's chunk (0: the kernel's default)
    double peak_gbs;     // 0: unknown
    cudaStream_t stream;
} Bench;

static void *dev_alloc(size_t bytes, int pattern) {
    void *p = NULL;
    CHECK(cudaMalloc(&p, bytes ? bytes : 1));
    CHECK(cudaMemset(p, pattern, bytes ? bytes : 1));
    return p;
}

// A device float array of n values, all `v` (a memset pattern would give odd floats).
static float *dev_floats(size_t n, float v) {
    float *h = (float *)malloc(n * sizeof(float)), *d = (float *)dev_alloc(n * sizeof(float), 0);
    for (size_t i = 0; i < n; i++) h[i] = v;
    CHECK(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
    free(h);
    return d;
}

// Runs `launch` (returns the launcher's status) and prints one row.
typedef cudaError_t (*LaunchFn)(void *ctx, cudaStream_t s);

static void run_row(Bench *b, const char *name, const char *shape, double bytes, LaunchFn fn, void *ctx) {
    if (b->only && !strstr(name, b->only)) return;
    for (int i = 0; i < 2; i++) CHECK(fn(ctx, b->stream));
    cudaEvent_t t0, t1;
    CHECK(cudaEventCreate(&t0));
    CHECK(cudaEventCreate(&t1));
    CHECK(cudaEventRecord(t0, b->stream));
    for (int i = 0; i < b->iters; i++) CHECK(fn(ctx, b->stream));
    CHECK(cudaEventRecord(t1, b->stream));
    CHECK(cudaEventSynchronize(t1));
    float ms = 0.0f;
    CHECK(cudaEventElapsedTime(&ms, t0, t1));
    CHECK(cudaEventDestroy(t0));
    CHECK(cudaEventDestroy(t1));
    const double us = 1000.0 * ms / b->iters, gbs = bytes / (us * 1e-6) / 1e9;
    char peak[32] = "";
    if (b->peak_gbs > 0 && !kEmulated) snprintf(peak, sizeof peak, "%6.1f%%", 100.0 * gbs / b->peak_gbs);
    printf("%-34s %-28s %11.2f %12.0f %9.2f %s\n", name, shape, us, bytes, gbs, peak);
    fflush(stdout);
}

// ---------------------------------------------------------------------------------------------
// KA's kernels

typedef struct {
    int variant, batch;
    EmxCudaWeight w;
    EmxCudaActs a;
    float *out;
} MatvecCtx;
static cudaError_t matvec_launch(void *c, cudaStream_t s) {
    MatvecCtx *m = (MatvecCtx *)c;
    return emx_cuda_matvec(m->variant, &m->w, &m->a, m->batch, m->out, 0, s);
}

static const char *dtype_name(uint32_t dt) {
    static const char *names[] = {"f32", "f16", "bf16", "q8", "q4", "q4_1"};
    return dt < 6 ? names[dt] : "?";
}

static void bench_matvec(Bench *b, const ModelShape *m, int emu) {
    struct { const char *what; int rows, cols; } mats[] = {
        {"w_gate", m->hidden, m->dim}, {"w_down", m->dim, m->hidden}, {"classifier", emu ? 4096 : m->vocab, m->dim}};
    const uint32_t dtypes[] = {EMX_Q8, EMX_Q4, EMX_Q4_1, EMX_BF16};
    for (size_t mi = 0; mi < sizeof mats / sizeof mats[0]; mi++) {
        const int rows = mats[mi].rows, cols = mats[mi].cols;
        float *x = dev_floats(cols, 0.5f), *out = (float *)dev_alloc((size_t)rows * 4, 0);
        int8_t *xq = (int8_t *)dev_alloc(cols, 0);
        float *xd = (float *)dev_alloc((size_t)cols / 32 * 4, 0);
        int *xsum = (int *)dev_alloc((size_t)cols / 32 * 4, 0);
        CHECK(emx_cuda_quantize_acts(x, cols, 1, xq, xd, xsum, b->stream));
        for (size_t di = 0; di < sizeof dtypes / sizeof dtypes[0]; di++) {
            const uint64_t wbytes = emx_cuda_weight_bytes(dtypes[di], rows, cols);
            void *w = dev_alloc(wbytes, 0x11);  // 0x11: small finite f16/bf16 scales and weights
            for (int v = 0; v < EMX_MATVEC_VARIANTS; v++) {
                if (emu && v == EMX_MATVEC_PLAIN && mi == 2) continue;  // thread per row: too slow emulated
                MatvecCtx c = {v, 1, {dtypes[di], rows, cols, w}, {x, xq, xd, xsum}, out};
                char name[64], shape[64];
                snprintf(name, sizeof name, "matvec %s %s %s", emx_matvec_variant_name(v), dtype_name(dtypes[di]), mats[mi].what);
                snprintf(shape, sizeof shape, "%s %dx%d", m->name, rows, cols);
                run_row(b, name, shape, (double)wbytes + cols * 4.0 + rows * 4.0, matvec_launch, &c);
            }
            CHECK(cudaFree(w));
        }
        CHECK(cudaFree(x));
        CHECK(cudaFree(out));
        CHECK(cudaFree(xq));
        CHECK(cudaFree(xd));
        CHECK(cudaFree(xsum));
    }
}

typedef struct {
    int variant, batch;
    EmxCudaWeight gate, up;
    EmxCudaActs a;
    float *out;
} SwigluMvCtx;
static cudaError_t matvec_swiglu_launch(void *c, cudaStream_t s) {
    SwigluMvCtx *m = (SwigluMvCtx *)c;
    return emx_cuda_matvec_swiglu(m->variant, &m->gate, &m->up, &m->a, m->batch, m->out, s);
}

// The batched matvec (B = 16 sequences reading each weight once) and the gate/up matvec fused
// with SwiGLU, q8, fast variant.
static void bench_matvec_extra(Bench *b, const ModelShape *m) {
    const int rows = m->hidden, cols = m->dim, B = EMX_MATVEC_MAX_BATCH;
    const uint64_t wbytes = emx_cuda_weight_bytes(EMX_Q8, rows, cols);
    void *wg = dev_alloc(wbytes, 0x11), *wu = dev_alloc(wbytes, 0x11);
    float *x = dev_floats((size_t)B * cols, 0.5f), *out = (float *)dev_alloc((size_t)B * rows * 4, 0);
    int8_t *xq = (int8_t *)dev_alloc((size_t)B * cols, 0);
    float *xd = (float *)dev_alloc((size_t)B * cols / 32 * 4, 0);
    int *xsum = (int *)dev_alloc((size_t)B * cols / 32 * 4, 0);
    CHECK(emx_cuda_quantize_acts(x, cols, B, xq, xd, xsum, b->stream));
    char shape[64];
    MatvecCtx c = {EMX_MATVEC_FAST, B, {EMX_Q8, rows, cols, wg}, {x, xq, xd, xsum}, out};
    snprintf(shape, sizeof shape, "%s %dx%d B=%d", m->name, rows, cols, B);
    run_row(b, "matvec fast q8 w_gate batched", shape, (double)wbytes + (double)B * (cols + rows) * 4, matvec_launch, &c);
    SwigluMvCtx sc = {EMX_MATVEC_FAST, 1, {EMX_Q8, rows, cols, wg}, {EMX_Q8, rows, cols, wu}, {x, xq, xd, xsum}, out};
    snprintf(shape, sizeof shape, "%s 2x %dx%d", m->name, rows, cols);
    run_row(b, "matvec+swiglu fast q8 gate/up", shape, 2.0 * wbytes + cols * 4.0 + rows * 4.0, matvec_swiglu_launch, &sc);
    CHECK(cudaFree(wg));
    CHECK(cudaFree(wu));
    CHECK(cudaFree(x));
    CHECK(cudaFree(out));
    CHECK(cudaFree(xq));
    CHECK(cudaFree(xd));
    CHECK(cudaFree(xsum));
}

typedef struct {
    EmxCudaWeight emb;
    const int *tokens;
    float *out;
} EmbedCtx;
static cudaError_t embedding_launch(void *c, cudaStream_t s) {
    EmbedCtx *e = (EmbedCtx *)c;
    return emx_cuda_embedding(&e->emb, e->tokens, 1, e->out, s);
}

static void bench_embedding(Bench *b, const ModelShape *m, int vocab) {
    const uint64_t tbytes = emx_cuda_weight_bytes(EMX_Q8, vocab, m->dim);
    int tok = vocab / 2, *d_tok = (int *)dev_alloc(sizeof(int), 0);
    CHECK(cudaMemcpy(d_tok, &tok, sizeof tok, cudaMemcpyHostToDevice));
    EmbedCtx e = {{EMX_Q8, vocab, m->dim, dev_alloc(tbytes, 0x11)}, d_tok, (float *)dev_alloc((size_t)m->dim * 4, 0)};
    char shape[64];
    snprintf(shape, sizeof shape, "%s q8 row of %d", m->name, m->dim);
    run_row(b, "embedding (1 token)", shape, (double)tbytes / vocab + m->dim * 4.0, embedding_launch, &e);
    CHECK(cudaFree((void *)e.emb.data));
    CHECK(cudaFree(d_tok));
    CHECK(cudaFree(e.out));
}

typedef struct {
    float *out, *x, *w;
    int n;
    int8_t *xq;  // the int8 groups of out (quantize acts, rmsnorm+quantize)
    float *xd;
    int *xsum;
} NormCtx;
static cudaError_t rmsnorm_launch(void *c, cudaStream_t s) {
    NormCtx *r = (NormCtx *)c;
    return emx_cuda_rmsnorm(r->out, r->x, r->w, r->n, 1, 1e-5f, s);
}
static cudaError_t quantize_launch(void *c, cudaStream_t s) {
    NormCtx *r = (NormCtx *)c;
    return emx_cuda_quantize_acts(r->out, r->n, 1, r->xq, r->xd, r->xsum, s);
}
static cudaError_t rmsnorm_quantize_launch(void *c, cudaStream_t s) {
    NormCtx *r = (NormCtx *)c;
    return emx_cuda_rmsnorm_quantize(r->out, r->x, r->w, r->n, 1, 1e-5f, r->xq, r->xd, r->xsum, s);
}
static cudaError_t swiglu_launch(void *c, cudaStream_t s) {
    NormCtx *r = (NormCtx *)c;
    return emx_cuda_swiglu(r->out, r->x, r->w, r->n, s);
}

static void bench_elementwise(Bench *b, const ModelShape *m) {
    char shape[64];
    NormCtx r = {(float *)dev_alloc((size_t)m->hidden * 4, 0), dev_floats(m->hidden, 0.5f), dev_floats(m->hidden, 1.0f), m->dim,
                 (int8_t *)dev_alloc((size_t)m->dim, 0), (float *)dev_alloc((size_t)m->dim / 32 * 4, 0),
                 (int *)dev_alloc((size_t)m->dim / 32 * 4, 0)};
    snprintf(shape, sizeof shape, "%s n=%d", m->name, m->dim);
    run_row(b, "rmsnorm", shape, 3.0 * m->dim * 4, rmsnorm_launch, &r);
    // the decode step's norms before q/k/v and gate/up: alone + quantize acts, or fused
    const double groups = m->dim * (1.0 + 8.0 / 32);  // xq, xd and xsum written
    run_row(b, "quantize acts", shape, m->dim * 4.0 + groups, quantize_launch, &r);
    run_row(b, "rmsnorm+quantize (fused)", shape, 3.0 * m->dim * 4 + groups, rmsnorm_quantize_launch, &r);
    r.n = m->hidden;
    snprintf(shape, sizeof shape, "%s n=%d", m->name, m->hidden);
    run_row(b, "swiglu", shape, 3.0 * m->hidden * 4, swiglu_launch, &r);
    CHECK(cudaFree(r.out));
    CHECK(cudaFree(r.x));
    CHECK(cudaFree(r.w));
    CHECK(cudaFree(r.xq));
    CHECK(cudaFree(r.xd));
    CHECK(cudaFree(r.xsum));
}

static cudaError_t rope_launch(void *c, cudaStream_t s) { return emx_cuda_rope_kv((const EmxRopeArgs *)c, s); }

static void bench_rope(Bench *b, const ModelShape *m, int ctx) {
    const int q_dim = m->n_heads * m->head_dim, kv_dim = m->n_kv_heads * m->head_dim, half = m->head_dim / 2;
    double *inv_freq_h = (double *)malloc(half * sizeof(double));
    emx_rope_inv_freq(inv_freq_h, m->head_dim, 1e6, NULL);
    double *inv_freq = (double *)dev_alloc(half * sizeof(double), 0);
    CHECK(cudaMemcpy(inv_freq, inv_freq_h, half * sizeof(double), cudaMemcpyHostToDevice));
    free(inv_freq_h);
    int pos_h = ctx - 1, *pos = (int *)dev_alloc(sizeof(int), 0);
    CHECK(cudaMemcpy(pos, &pos_h, sizeof pos_h, cudaMemcpyHostToDevice));
    EmxRopeArgs a;
    memset(&a, 0, sizeof a);
    a.q = dev_floats(q_dim, 0.5f);
    a.k = dev_floats(kv_dim, 0.5f);
    a.v = dev_floats(kv_dim, 0.5f);
    a.k_cache = dev_alloc((size_t)ctx * kv_dim * 4, 0);
    a.v_cache = dev_alloc((size_t)ctx * kv_dim * 4, 0);
    a.kv_dtype = EMX_KV_F32;
    a.pos = pos;
    a.inv_freq = inv_freq;
    a.eps = 1e-6f;
    a.batch = 1;
    a.n_heads = m->n_heads;
    a.n_kv_heads = m->n_kv_heads;
    a.head_dim = m->head_dim;
    a.style = EMX_ROPE_HALF;
    char shape[64];
    snprintf(shape, sizeof shape, "%s q%d kv%d", m->name, q_dim, kv_dim);
    run_row(b, "rope+kv write f32", shape, (2.0 * q_dim + 2.0 * kv_dim) * 4 + (q_dim + 2.0 * kv_dim) * 4, rope_launch, &a);
    CHECK(cudaFree(a.q));
    CHECK(cudaFree((void *)a.k));
    CHECK(cudaFree((void *)a.v));
    CHECK(cudaFree(a.k_cache));
    CHECK(cudaFree(a.v_cache));
    CHECK(cudaFree(pos));
    CHECK(cudaFree(inv_freq));
}

typedef struct {
    int variant, n;
    cublasHandle_t h;
    EmxCudaWeight w;
    float *x, *out;
    void *scratch;
} GemmCtx;
static cudaError_t gemm_launch(void *c, cudaStream_t s) {
    GemmCtx *g = (GemmCtx *)c;
    return emx_cuda_gemm(g->variant, g->h, &g->w, g->x, g->n, g->out, 0, g->scratch, s);
}

static void bench_gemm(Bench *b, const ModelShape *m, int n_tokens) {
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "bench_kernels: cublasCreate failed; gemm rows skipped\n");
        return;
    }
    const int rows = m->hidden, cols = m->dim;
    const uint64_t wbytes = emx_cuda_weight_bytes(EMX_Q8, rows, cols);
    GemmCtx g = {0, n_tokens, h, {EMX_Q8, rows, cols, dev_alloc(wbytes, 0x11)}, dev_floats((size_t)n_tokens * cols, 0.5f),
                 (float *)dev_alloc((size_t)n_tokens * rows * 4, 0), NULL};
    for (int v = 0; v < EMX_GEMM_VARIANTS; v++) {
        g.variant = v;
        size_t sb = emx_cuda_gemm_scratch_bytes(v, rows, cols, n_tokens);
        g.scratch = sb ? dev_alloc(sb, 0) : NULL;
        char name[64], shape[64];
        snprintf(name, sizeof name, "gemm %s q8 w_gate", emx_gemm_variant_name(v));
        snprintf(shape, sizeof shape, "%s %dx%d n=%d", m->name, rows, cols, n_tokens);
        run_row(b, name, shape, (double)wbytes + (double)n_tokens * (cols + rows) * 4, gemm_launch, &g);
        if (g.scratch) CHECK(cudaFree(g.scratch));
    }
    CHECK(cudaFree((void *)g.w.data));
    CHECK(cudaFree(g.x));
    CHECK(cudaFree(g.out));
    cublasDestroy(h);
}

// ---------------------------------------------------------------------------------------------
// KB's kernels

typedef struct {
    int kernel;
    EmxAttentionArgs a;
} AttnCtx;
static cudaError_t attention_launch(void *c, cudaStream_t s) {
    AttnCtx *t = (AttnCtx *)c;
    return emx_cuda_attention(t->kernel, &t->a, s);
}

static void bench_attention(Bench *b, const ModelShape *m, int n_keys) {
    const int kv_dim = m->n_kv_heads * m->head_dim;
    for (int dt = EMX_KV_F32; dt <= EMX_KV_F16; dt++) {
        const size_t esz = dt == EMX_KV_F16 ? 2 : 4;
        void *kc = dev_alloc((size_t)n_keys * kv_dim * esz, 0x22), *vc = dev_alloc((size_t)n_keys * kv_dim * esz, 0x22);
        float *q = dev_floats((size_t)m->n_heads * m->head_dim, 0.1f), *out = (float *)dev_alloc((size_t)m->n_heads * m->head_dim * 4, 0);
        float *scores = (float *)dev_alloc((size_t)m->n_heads * n_keys * 4, 0);
        EmxSoftmaxStats *stats = (EmxSoftmaxStats *)dev_alloc((size_t)m->n_heads * sizeof(EmxSoftmaxStats), 0);
        for (int k = EMX_ATTN_PLAIN; k <= EMX_ATTN_SPLIT_GQA; k++) {
            AttnCtx c;
            memset(&c, 0, sizeof c);
            c.kernel = k;
            c.a.q = q;
            c.a.k_cache = kc;
            c.a.v_cache = vc;
            c.a.kv_dtype = dt;
            c.a.n_heads = m->n_heads;
            c.a.n_kv_heads = m->n_kv_heads;
            c.a.head_dim = m->head_dim;
            c.a.n_keys = n_keys;
            c.a.out = out;
            c.a.scores = scores;
            c.a.score_stride = n_keys;
            c.a.head_stats = stats;
            c.a.keys_per_block = b->keys_per_block;
            void *ws = dev_alloc(emx_cuda_attention_workspace_bytes(k, m->n_heads, m->head_dim, n_keys, b->keys_per_block), 0);
            c.a.workspace = ws;
            char name[64], shape[64];
            static const char *const kernel_names[] = {"plain", "split", "split_gqa"};
            snprintf(name, sizeof name, "attention %s kv %s", kernel_names[k], dt == EMX_KV_F16 ? "f16" : "f32");
            snprintf(shape, sizeof shape, "%s keys=%d", m->name, n_keys);
            // K and V once (what L2 serves to GQA's sibling heads is not counted twice), the scores
            run_row(b, name, shape, 2.0 * n_keys * kv_dim * esz + (double)m->n_heads * n_keys * 4, attention_launch, &c);
            CHECK(cudaFree(ws));
        }
        CHECK(cudaFree(kc));
        CHECK(cudaFree(vc));
        CHECK(cudaFree(q));
        CHECK(cudaFree(out));
        CHECK(cudaFree(scores));
        CHECK(cudaFree(stats));
    }
}

typedef struct {
    const float *logits;
    int n;
    EmxMetrics *m;
    int *argmax;
    void *ws;
} LogitsCtx;
static cudaError_t logits_launch(void *c, cudaStream_t s) {
    LogitsCtx *l = (LogitsCtx *)c;
    return emx_cuda_logits_metrics(l->logits, l->n, l->m, l->argmax, NULL, l->ws, s, 0);
}

typedef struct {
    const float *scores;
    int n_heads, n_keys;
    EmxMetrics *m;
    void *ws;
} AttnMetricsCtx;
static cudaError_t attn_metrics_launch(void *c, cudaStream_t s) {
    AttnMetricsCtx *a = (AttnMetricsCtx *)c;
    return emx_cuda_attn_metrics(a->scores, NULL, 1, a->n_heads, a->n_keys, a->n_keys, NULL, EMX_ATTN_LAYER_LAST, a->m, a->ws, s);
}

typedef struct {
    const float *logits;
    int n;
    EmxSamplerParams sp;
    int *token;
    void *ws;
    uint64_t step;
    const EmxMetrics *metrics;
    const EmxProfile *prof;
    EmxEntropixState *state;
} SampleCtx;
static cudaError_t sample_launch(void *c, cudaStream_t s) {
    SampleCtx *t = (SampleCtx *)c;
    return emx_cuda_sample(t->logits, t->n, &t->sp, 1234, t->step++, NULL, 0, t->token, t->ws, s, 0);
}
static cudaError_t entropix_launch(void *c, cudaStream_t s) {
    SampleCtx *t = (SampleCtx *)c;
    return emx_cuda_entropix_step(t->logits, t->n, t->metrics, t->prof, t->state, -1, 1234, t->step++, NULL, t->token, NULL, NULL, t->ws, s, 0);
}

static EmxSamplerParams sampler_params(float t, int k, float p, float min_p) {
    EmxSamplerParams sp;
    sp.temperature = t;
    sp.top_k = k;
    sp.top_p = p;
    sp.min_p = min_p;
    sp.temperature_first = 0;
    return sp;
}

static void bench_decision(Bench *b, const ModelShape *m, int vocab, int n_keys) {
    // random logits with a model-like spread (normal, sd 3)
    float *h = (float *)malloc((size_t)vocab * 4);
    uint64_t r = 88172645463325252ull;
    for (int i = 0; i < vocab; i++) {
        double acc = 0;
        for (int j = 0; j < 4; j++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            acc += (double)(r >> 11) / 9007199254740992.0;
        }
        h[i] = (float)((acc - 2.0) * 3.0 * 1.732);  // Irwin-Hall(4), variance 1/3 -> sd ~3
    }
    float *logits = (float *)dev_alloc((size_t)vocab * 4, 0);
    CHECK(cudaMemcpy(logits, h, (size_t)vocab * 4, cudaMemcpyHostToDevice));
    free(h);
    EmxMetrics *met = (EmxMetrics *)dev_alloc(sizeof(EmxMetrics), 0);
    int *tok = (int *)dev_alloc(sizeof(int), 0);
    char shape[64];
    snprintf(shape, sizeof shape, "%s vocab=%d", m->name, vocab);

    LogitsCtx lc = {logits, vocab, met, tok, dev_alloc(emx_cuda_logits_metrics_workspace_bytes(vocab), 0)};
    run_row(b, "logits metrics (H, V, lse, argmax)", shape, vocab * 4.0, logits_launch, &lc);

    float *scores = dev_floats((size_t)m->n_heads * n_keys, 0.25f);
    AttnMetricsCtx ac = {scores, m->n_heads, n_keys, met, dev_alloc(emx_cuda_attn_metrics_workspace_bytes(1), 0)};
    char shape2[64];
    snprintf(shape2, sizeof shape2, "%s heads=%d keys=%d", m->name, m->n_heads, n_keys);
    run_row(b, "attention metrics (1 layer)", shape2, 2.0 * m->n_heads * n_keys * 4, attn_metrics_launch, &ac);

    EmxProfile prof;
    emx_profile_classic(&prof);
    EmxEntropixState *state = (EmxEntropixState *)dev_alloc(sizeof(EmxEntropixState), 0);
    SampleCtx sc = {logits, vocab, sampler_params(0.8f, 40, 0.95f, 0.05f), tok, dev_alloc(emx_cuda_sample_workspace_bytes(vocab), 0), 0, met, &prof, state};
    run_row(b, "sample T.8 k40 p.95 minp.05", shape, vocab * 4.0, sample_launch, &sc);
    sc.sp = sampler_params(1.0f, 0, 0.9f, 0.0f);
    run_row(b, "sample top-p .9 alone", shape, vocab * 4.0, sample_launch, &sc);
    sc.sp = sampler_params(1.0f, 0, 1.0f, 0.1f);
    run_row(b, "sample min-p .1 alone", shape, vocab * 4.0, sample_launch, &sc);
    sc.sp = sampler_params(1.0f, 0, 1.0f, 0.0f);
    run_row(b, "sample temperature alone (no filter)", shape, vocab * 4.0, sample_launch, &sc);
    // metrics as the logits metrics left them, the attention ones as attn metrics left them
    run_row(b, "entropix step (decide + carry out)", shape, vocab * 4.0, entropix_launch, &sc);

    CHECK(cudaFree(logits));
    CHECK(cudaFree(met));
    CHECK(cudaFree(tok));
    CHECK(cudaFree(lc.ws));
    CHECK(cudaFree(scores));
    CHECK(cudaFree(ac.ws));
    CHECK(cudaFree(state));
    CHECK(cudaFree(sc.ws));
}

// ---------------------------------------------------------------------------------------------

// Peak memory bandwidth: 2 (double data rate) × memory clock × bus width. CUDA 13 dropped the
// clock from cudaDeviceProp, so both come from attribute queries.
static double peak_bandwidth_gbs(int dev) {
    int clock_khz = 0, bus_bits = 0;
    if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, dev) != cudaSuccess)
        return 0.0;
    return 2.0 * clock_khz * 1e3 * (bus_bits / 8.0) / 1e9;
}

int main(int argc, char **argv) {
    int emu = kEmulated, iters = 0;
    Bench b = {0, NULL, 0, 0.0, 0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--emu")) {
            emu = 1;
        } else if (!strcmp(argv[i], "--iters") && i + 1 < argc) {
            iters = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--only") && i + 1 < argc) {
            b.only = argv[++i];
        } else if (!strcmp(argv[i], "--keys-per-block") && i + 1 < argc) {
            b.keys_per_block = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: %s [--emu] [--iters N] [--only SUBSTRING] [--keys-per-block N]\n", argv[0]);
            return 2;
        }
    }
    b.iters = iters > 0 ? iters : emu ? 1 : 50;
    int dev = 0, n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev < 1) {
        fprintf(stderr, "bench_kernels: no CUDA device\n");
        return 1;
    }
    CHECK(cudaSetDevice(dev));
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, dev));
    b.peak_gbs = peak_bandwidth_gbs(dev);
    CHECK(cudaStreamCreate(&b.stream));
    if (kEmulated) {
        printf("*** EMULATION: these are CPU emulation timings (tests/cuda_emu), NOT GPU timings. ***\n"
               "*** They show that every launch path runs; they say nothing about GPU speed.      ***\n");
    }
    printf("device: %s, %d SMs, %.1f GiB, peak memory bandwidth %.0f GB/s%s\n", prop.name, prop.multiProcessorCount,
           prop.totalGlobalMem / 1073741824.0, b.peak_gbs, kEmulated ? " (as the emulator reports it)" : "");
    printf("iterations per row: %d%s\n\n", b.iters, emu ? "; reduced sizes (--emu): vocab 4096, contexts 256" : "");
    printf("%-34s %-28s %11s %12s %9s %s\n", "kernel", "shape", "time (us)", "bytes", "GB/s", kEmulated ? "" : "of peak");

    for (size_t mi = 0; mi < sizeof kModels / sizeof kModels[0]; mi++) {
        const ModelShape *m = &kModels[mi];
        printf("-- %s: dim %d, hidden %d, heads %d/%d x %d, vocab %d\n", m->name, m->dim, m->hidden, m->n_heads,
               m->n_kv_heads, m->head_dim, m->vocab);
        bench_embedding(&b, m, emu ? 4096 : m->vocab);
        bench_matvec(&b, m, emu);
        bench_matvec_extra(&b, m);
        bench_elementwise(&b, m);
        bench_rope(&b, m, emu ? 256 : 4096);
        bench_gemm(&b, m, emu ? 16 : 128);
        const int ctxs[] = {emu ? 37 : 512, emu ? 256 : 4096};
        for (int c = 0; c < 2; c++) bench_attention(&b, m, ctxs[c]);
        bench_decision(&b, m, emu ? 4096 : m->vocab, emu ? 256 : 4096);
    }
    printf("\nnot benchmarked apart: Qwen3's q/k norm (fused into rope+kv write), residual+rmsnorm.\n");
    if (kEmulated) printf("*** EMULATION timings above: not GPU timings. ***\n");
    CHECK(cudaStreamDestroy(b.stream));
    return 0;
}
