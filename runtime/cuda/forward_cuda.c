// forward_cuda.c — the CUDA backend of forward.h: the same forward pass as forward_cpu.c, with
// the weights, activations and KV cache in one GPU's memory and every step made of the
// launchers of kernels/*.h (host code, C11; the kernels are CUDA C++).
//
// Per layer, for n rows (a chunk of at most 16 prompt tokens, one decode token, or one token of
// each lookahead branch):
//   rmsnorm(x) -> xb;  int8 xb (q8/q4 weights);  q, k, v = matvec(Wq/Wk/Wv, xb)
//   rope_kv: q/k per-head norm, RoPE, k and v into the KV cache
//   attention (split flash-decoding, GQA-aware; the last row writes the score rows and per-head
//     softmax statistics the entropix metrics read)
//   x += Wo att (the matvec accumulates: the residual add is free);  rmsnorm(x) -> xb
//   hb = silu(Wg xb) * (Wu xb) (one fused matvec);  x += Wd hb
// then the final norm and the classifier on the rows whose logits are wanted. Bytes a decode
// step reads: every weight once (emx_model_weight_bytes_per_token) plus the KV rows attended,
// 2 * n_layers * kv_dim * 4 per key; the activations (a few KB) stay in L2.
//
// Decode (n = 1) is captured once into a CUDA graph and replayed: the token, its position and
// the number of keys live in device memory (a copy node at the start of the graph fills them
// from a pinned host buffer), so one graph serves every position. A graph launch costs one
// call instead of ~10 per layer, which is what keeps a 0.6B model's decode step (~0.3 ms on an
// H100) from being bound by launch latency.
//
// The choice of the next token can run in the same graph (emx_forward_decide): logits and
// attention metrics, the entropix decision and its sampling (kernels/sampling.cu), so the host
// receives the token id and the decision, never the logits.
//
// Prefill runs the same kernels on chunks of 16 rows (the batched matvec reads each weight once
// per chunk; one attention launch covers the chunk's rows). Memory: weights as in the file
// (q4_1 repacked, kernels/weights.h), the KV cache in f32 (the CPU's layout, so rows travel
// between backends unchanged).
#include <math.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "kernels/agent_pool.h"
#include "kernels/attention.h"
#include "kernels/attn_metrics.h"
#include "runtime/cpu/cpu_matmul.h"
#include "runtime/cpu/cpu_ops.h"
#include "base/dtype.h"
#include "kernels/embedding.h"
#include "kernels/logits_metrics.h"
#include "runtime/forward.h"
#include "runtime/forward_backend.h"
#include "kernels/matvec.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/sampling.h"
#include "kernels/swiglu.h"
#include "kernels/weights.h"

#define CHUNK EMX_MATVEC_MAX_BATCH  // rows per batched pass: the batched matvec's limit
#define ATTN_KERNEL EMX_ATTN_SPLIT_GQA

typedef struct {
    EmxCudaWeight wq, wk, wv, wo, gate, up, down;
    float *attn_norm, *ffn_norm;  // [dim]
    float *q_norm, *k_norm;       // [head_dim] (Qwen3) or NULL
} CudaLayer;

// The uploaded model, shared by the states of one device that ask for it (share_weights).
typedef struct {
    atomic_int refs;
    int device;
    const EmxModel *m;
    EmxCudaWeight emb, out;  // out.data == emb.data when the classifier is tied
    float *norm;             // [dim]
    double *inv_freq;        // [head_dim/2]
    CudaLayer *layers;       // [n_layers]
    uint64_t bytes;
} CudaWeights;

// What the host writes before each pass: one copy of it to the device per call.
typedef struct {
    int tokens[CHUNK];  // the rows' token ids
    int pos[CHUNK];     // their positions (RoPE angles)
    int rows[CHUNK];    // cache rows their k and v go to (branches: tail rows)
    int n_keys;         // keys the last row attends (decode graph: read on the device)
    uint64_t rng_step;  // emx_forward_decide: the position of the token being chosen
} StepInput;

// What emx_forward_decide brings back: the token and decision first, so that without
// --metrics the copy stops before the metrics.
typedef struct {
    int token;
    EmxDecision decision;
    double score;
    EmxMetrics metrics;
} DecideOut;

typedef struct {
    EmxState base;
    const EmxModel *m;
    int device;
    char device_name[24];
    char err[320];
    int ctx, q_dim, kv_dim, widest, vocab;
    int no_graphs;
    cudaStream_t stream;
    CudaWeights *w;
    // activations, device, one row per token of the chunk
    float *x, *xb, *tmp;    // [CHUNK][dim]
    float *q, *att;         // [CHUNK][q_dim]
    float *k, *v;           // [CHUNK][kv_dim] (rope_kv copies them into the cache)
    float *hb, *hb2;        // [CHUNK][hidden_dim]
    int8_t *xq;             // [CHUNK][widest] int8 activations
    float *xd;              // [CHUNK][widest/32] their scales
    int *xsum;              // [CHUNK][widest/32] their integer group sums
    StepInput *in_d, *in_h; // device / pinned host
    float *key, *value;     // [n_layers][ctx][kv_dim] KV cache, f32
    float *scores;          // [n_layers][n_heads][ctx] the last row's score rows
    EmxSoftmaxStats *head_stats; // [n_layers][n_heads]
    void *attn_ws;          // attention workspace (ctx keys)
    float *logits;          // [CHUNK][vocab] device
    float *logits_h;        // [vocab] pinned host: what emx_forward returns
    float *scores_h;        // [n_layers][n_heads][ctx] host copy, made when asked for
    float *key_h, *value_h; // host copies for emx_state_kv_cache
    int last_pos;
    int logits_fresh;       // logits row 0 holds the latest emx_forward's, unchanged (emx_state_propose)
    // branches: tails [n_layers][br_tail][br_max][kv_dim], as the CPU's
    int br_max, br_tail;
    float *br_key, *br_value;
    // the decode step's graph (captured on the first single-token call)
    cudaGraphExec_t decode_graph;
    int graph_nodes;
    // emx_forward_decide: the spec the decide graph was captured with, the device side of the
    // choice (metrics, the entropix insert-once state, workspaces) and the result's copies
    EmxDecideSpec spec;
    int have_spec;
    cudaGraphExec_t decide_graph;
    int decide_graph_nodes;
    DecideOut *out_d, *out_h;
    EmxEntropixState *estate_d;
    void *lm_ws, *am_ws, *sample_ws;
    // emx_state_propose: the agents, their proposals and the kernel's workspace (grown on demand)
    int agents_cap;
    EmxAgentParams *agents_d;
    EmxProposal *props_d;
    int *pick_d;  // [2] the winner's token and index (the host picks among all workers' proposals)
    void *agents_ws;
} CudaState;

static const EmxBackend CUDA_BACKEND;

// ---------------------------------------------------------------------------------------------
// Errors: every CUDA call goes through cu(), which keeps a message naming the call.

static int cu(CudaState *s, cudaError_t e, const char *call) {
    if (e == cudaSuccess) return 0;
    snprintf(s->err, sizeof s->err, "%s: %s: %s", s->device_name, call, cudaGetErrorString(e));
    return -1;
}
#define CU(call)                                       \
    do {                                               \
        if (cu(s, (call), #call)) return -1;           \
    } while (0)

static int dev_alloc(CudaState *s, void **p, size_t bytes, const char *what) {
    cudaError_t e = cudaMalloc(p, bytes ? bytes : 1);
    if (e == cudaSuccess) return 0;
    *p = NULL;
    snprintf(s->err, sizeof s->err, "%s: cudaMalloc of %.1f MiB for %s: %s", s->device_name,
             (double)bytes / (1 << 20), what, cudaGetErrorString(e));
    return -1;
}

static const char *cuda_error(const EmxState *st) { return ((const CudaState *)st)->err; }

// ---------------------------------------------------------------------------------------------
// Weights

static uint64_t tensor_bytes(const EmxTensor *t) { return emx_cuda_weight_bytes(t->dtype, t->rows, t->cols); }

// Bytes the weights take on the device (the fit check, before anything is allocated).
static uint64_t weights_bytes(const EmxModel *m) {
    const EmxConfig *c = &m->cfg;
    uint64_t b = tensor_bytes(&m->tok_embeddings) + (c->tied_output ? 0 : tensor_bytes(&m->output));
    b += (uint64_t)c->dim * 4 + (uint64_t)c->head_dim / 2 * 8;
    for (uint32_t l = 0; l < c->n_layers; l++) {
        const EmxLayer *L = &m->layers[l];
        b += tensor_bytes(&L->wq) + tensor_bytes(&L->wk) + tensor_bytes(&L->wv) + tensor_bytes(&L->wo) +
             tensor_bytes(&L->w_gate) + tensor_bytes(&L->w_up) + tensor_bytes(&L->w_down) + 2 * (uint64_t)c->dim * 4;
        if (c->qk_norm) b += 2 * (uint64_t)c->head_dim * 4;
    }
    return b;
}

static int upload(CudaState *s, const EmxTensor *t, EmxCudaWeight *w, const char *what) {
    cudaError_t e = emx_cuda_upload_weight(t->dtype, t->data, (int)t->rows, (int)t->cols, w);
    if (e == cudaSuccess) return 0;
    snprintf(s->err, sizeof s->err, "%s: uploading %s (%s [%llu, %llu], %.1f MiB): %s", s->device_name, what,
             emx_dtype_name(t->dtype), (unsigned long long)t->rows, (unsigned long long)t->cols,
             (double)tensor_bytes(t) / (1 << 20), cudaGetErrorString(e));
    return -1;
}

static int upload_f32(CudaState *s, const EmxTensor *t, float **out, const char *what) {
    const size_t bytes = (size_t)t->rows * t->cols * sizeof(float);
    if (dev_alloc(s, (void **)out, bytes, what)) return -1;
    CU(cudaMemcpy(*out, t->data, bytes, cudaMemcpyHostToDevice));
    return 0;
}

static void weights_release(CudaWeights *w) {
    if (!w || atomic_fetch_sub(&w->refs, 1) != 1) return;
    const EmxConfig *c = &w->m->cfg;
    if (w->out.data != w->emb.data) cudaFree((void *)w->out.data);
    cudaFree((void *)w->emb.data);
    cudaFree(w->norm);
    cudaFree(w->inv_freq);
    for (uint32_t l = 0; w->layers && l < c->n_layers; l++) {
        CudaLayer *L = &w->layers[l];
        const EmxCudaWeight *mats[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->gate, &L->up, &L->down};
        for (size_t i = 0; i < sizeof mats / sizeof *mats; i++) cudaFree((void *)mats[i]->data);
        cudaFree(L->attn_norm);
        cudaFree(L->ffn_norm);
        cudaFree(L->q_norm);
        cudaFree(L->k_norm);
    }
    free(w->layers);
    free(w);
}

static int weights_upload(CudaState *s) {
    const EmxModel *m = s->m;
    const EmxConfig *c = &m->cfg;
    CudaWeights *w = calloc(1, sizeof *w);
    if (!w) return snprintf(s->err, sizeof s->err, "%s: out of host memory", s->device_name), -1;
    atomic_init(&w->refs, 1);
    w->device = s->device;
    w->m = m;
    w->bytes = weights_bytes(m);
    s->w = w;
    w->layers = calloc(c->n_layers, sizeof *w->layers);
    if (!w->layers) return snprintf(s->err, sizeof s->err, "%s: out of host memory", s->device_name), -1;
    if (upload(s, &m->tok_embeddings, &w->emb, "tok_embeddings")) return -1;
    if (c->tied_output) w->out = w->emb;
    else if (upload(s, &m->output, &w->out, "output")) return -1;
    if (upload_f32(s, &m->norm, &w->norm, "norm")) return -1;
    const int half = (int)c->head_dim / 2;
    double inv_freq[512];
    emx_rope_inv_freq(inv_freq, (int)c->head_dim, c->rope_theta,
                      c->rope_freq_factors ? (const float *)m->rope_freq_factors.data : NULL);
    if (dev_alloc(s, (void **)&w->inv_freq, (size_t)half * sizeof(double), "RoPE frequencies")) return -1;
    CU(cudaMemcpy(w->inv_freq, inv_freq, (size_t)half * sizeof(double), cudaMemcpyHostToDevice));
    for (uint32_t l = 0; l < c->n_layers; l++) {
        const EmxLayer *L = &m->layers[l];
        CudaLayer *g = &w->layers[l];
        char what[64];
        snprintf(what, sizeof what, "layer %u", l);
        if (upload(s, &L->wq, &g->wq, what) || upload(s, &L->wk, &g->wk, what) || upload(s, &L->wv, &g->wv, what) ||
            upload(s, &L->wo, &g->wo, what) || upload(s, &L->w_gate, &g->gate, what) ||
            upload(s, &L->w_up, &g->up, what) || upload(s, &L->w_down, &g->down, what) ||
            upload_f32(s, &L->attn_norm, &g->attn_norm, what) || upload_f32(s, &L->ffn_norm, &g->ffn_norm, what))
            return -1;
        if (c->qk_norm && (upload_f32(s, &L->q_norm, &g->q_norm, what) || upload_f32(s, &L->k_norm, &g->k_norm, what)))
            return -1;
    }
    return 0;
}

// ---------------------------------------------------------------------------------------------
// State

static void cuda_state_free(EmxState *st) {
    CudaState *s = (CudaState *)st;
    cudaSetDevice(s->device);
    if (s->decode_graph) cudaGraphExecDestroy(s->decode_graph);
    if (s->decide_graph) cudaGraphExecDestroy(s->decide_graph);
    void *dev[] = {s->x, s->xb, s->tmp, s->q, s->att, s->k, s->v, s->hb, s->hb2, s->xq, s->xd, s->xsum, s->in_d,
                   s->key, s->value, s->scores, s->head_stats, s->attn_ws, s->logits, s->br_key, s->br_value,
                   s->out_d, s->estate_d, s->lm_ws, s->am_ws, s->sample_ws, s->agents_d, s->props_d, s->pick_d,
                   s->agents_ws};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++) cudaFree(dev[i]);
    cudaFreeHost(s->in_h);
    cudaFreeHost(s->logits_h);
    cudaFreeHost(s->out_h);
    free(s->scores_h);
    free(s->key_h);
    free(s->value_h);
    weights_release(s->w);
    if (s->stream) cudaStreamDestroy(s->stream);
    free(s);
}

static size_t attn_ws_bytes(const CudaState *s, int n_keys) {
    const EmxConfig *c = &s->m->cfg;
    return emx_cuda_attention_workspace_bytes_rows(ATTN_KERNEL, (int)c->n_heads, (int)c->head_dim, n_keys, 0, CHUNK);
}

// Device bytes of one state's own buffers (not the weights).
static uint64_t state_bytes(const CudaState *s) {
    const EmxConfig *c = &s->m->cfg;
    const uint64_t B = CHUNK, L = c->n_layers;
    uint64_t b = B * (3 * (uint64_t)c->dim + 2 * (uint64_t)s->q_dim + 2 * (uint64_t)s->kv_dim + 2 * (uint64_t)c->hidden_dim) * 4;
    b += B * (uint64_t)s->widest * (1 + 2 * 4 / 32) + sizeof(StepInput);
    b += 2 * L * s->ctx * s->kv_dim * 4;                             // KV cache
    b += L * c->n_heads * ((uint64_t)s->ctx * 4 + sizeof(EmxSoftmaxStats)); // score rows, stats
    b += attn_ws_bytes(s, s->ctx) + B * (uint64_t)s->vocab * 4;
    b += sizeof(DecideOut) + emx_cuda_logits_metrics_workspace_bytes(s->vocab) +
         emx_cuda_attn_metrics_workspace_bytes((int)L) + emx_cuda_sample_workspace_bytes(s->vocab);
    return b;
}

static int state_alloc(CudaState *s) {
    const EmxConfig *c = &s->m->cfg;
    const size_t B = CHUNK, L = c->n_layers, f = sizeof(float);
    struct {
        void **p;
        size_t bytes;
        const char *what;
    } bufs[] = {
        {(void **)&s->x, B * c->dim * f, "activations"},
        {(void **)&s->xb, B * c->dim * f, "activations"},
        {(void **)&s->tmp, B * c->dim * f, "activations"},
        {(void **)&s->q, B * s->q_dim * f, "activations"},
        {(void **)&s->att, B * s->q_dim * f, "activations"},
        {(void **)&s->k, B * s->kv_dim * f, "activations"},
        {(void **)&s->v, B * s->kv_dim * f, "activations"},
        {(void **)&s->hb, B * c->hidden_dim * f, "activations"},
        {(void **)&s->hb2, B * c->hidden_dim * f, "activations"},
        {(void **)&s->xq, B * s->widest, "int8 activations"},
        {(void **)&s->xd, B * (s->widest / 32 + 1) * f, "int8 activations"},
        {(void **)&s->xsum, B * (s->widest / 32 + 1) * sizeof(int), "int8 activations"},
        {(void **)&s->in_d, sizeof(StepInput), "step input"},
        {(void **)&s->key, L * s->ctx * s->kv_dim * f, "the KV cache"},
        {(void **)&s->value, L * s->ctx * s->kv_dim * f, "the KV cache"},
        {(void **)&s->scores, L * c->n_heads * s->ctx * f, "attention score rows"},
        {(void **)&s->head_stats, L * c->n_heads * sizeof(EmxSoftmaxStats), "attention statistics"},
        {(void **)&s->attn_ws, attn_ws_bytes(s, s->ctx), "attention workspace"},
        {(void **)&s->logits, B * s->vocab * f, "logits"},
        {(void **)&s->out_d, sizeof(DecideOut), "the sampler's result"},
        {(void **)&s->estate_d, sizeof(EmxEntropixState), "the entropix state"},
        {&s->lm_ws, emx_cuda_logits_metrics_workspace_bytes(s->vocab), "sampler workspace"},
        {&s->am_ws, emx_cuda_attn_metrics_workspace_bytes((int)L), "sampler workspace"},
        {&s->sample_ws, emx_cuda_sample_workspace_bytes(s->vocab), "sampler workspace"},
    };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        if (dev_alloc(s, bufs[i].p, bufs[i].bytes, bufs[i].what)) return -1;
    // zeros: positions past the last one fed are never read, but a fresh cache is clean anyway
    CU(cudaMemset(s->key, 0, L * s->ctx * s->kv_dim * f));
    CU(cudaMemset(s->value, 0, L * s->ctx * s->kv_dim * f));
    CU(cudaMemset(s->scores, 0, L * c->n_heads * s->ctx * f));
    CU(cudaMallocHost((void **)&s->in_h, sizeof(StepInput)));
    CU(cudaMallocHost((void **)&s->logits_h, (size_t)s->vocab * f));
    CU(cudaMallocHost((void **)&s->out_h, sizeof(DecideOut)));
    CU(cudaMemset(s->estate_d, 0, sizeof(EmxEntropixState)));
    memset(s->in_h, 0, sizeof(StepInput));
    return 0;
}

int emx_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();  // no driver or no GPU: not an error for "auto", just none
        return 0;
    }
    return n;
}

EmxState *emx_cuda_state_new(const EmxModel *m, const EmxStateOptions *opt, int device, char *err, size_t errlen) {
    const EmxConfig *c = &m->cfg;
    const int ctx = emx_state_resolve_ctx(m, opt, err, errlen);
    if (ctx < 0) return NULL;
    const int n_dev = emx_cuda_device_count();
    if (device >= n_dev) {
        snprintf(err, errlen, "device cuda:%d: %s", device,
                 n_dev ? "no such GPU" : "no GPU found (cudaGetDeviceCount reports none)");
        if (n_dev) snprintf(err + strlen(err), errlen - strlen(err), " (%d present)", n_dev);
        return NULL;
    }
    if (c->head_dim > 512 || c->head_dim / 2 > 512) {
        snprintf(err, errlen, "cuda:%d: head_dim %u: the kernels take at most 512", device, c->head_dim);
        return NULL;
    }
    const CudaState *share = opt && opt->share_weights && opt->share_weights->backend == &CUDA_BACKEND
                                 ? (const CudaState *)opt->share_weights : NULL;
    if (share && (share->m != m || share->device != device)) {
        snprintf(err, errlen, "cuda:%d: share_weights names a state of another model or device", device);
        return NULL;
    }
    CudaState *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "cuda:%d: out of host memory", device);
        return NULL;
    }
    s->base.backend = &CUDA_BACKEND;
    s->m = m;
    s->device = device;
    snprintf(s->device_name, sizeof s->device_name, "cuda:%d", device);
    s->ctx = ctx;
    s->q_dim = (int)(c->n_heads * c->head_dim);
    s->kv_dim = (int)(c->n_kv_heads * c->head_dim);
    s->widest = (int)c->dim > s->q_dim ? (int)c->dim : s->q_dim;
    s->widest = s->widest > (int)c->hidden_dim ? s->widest : (int)c->hidden_dim;
    s->vocab = (int)c->vocab_size;
    s->no_graphs = opt ? opt->no_graphs : 0;
    s->last_pos = -1;
    if (cu(s, cudaSetDevice(device), "cudaSetDevice")) goto fail;
    // Does it fit? Said before the first allocation, with the figures.
    size_t free_b = 0, total_b = 0;
    if (cu(s, cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo")) goto fail;
    const uint64_t need = state_bytes(s) + (share ? 0 : weights_bytes(m));
    if (need > free_b) {
        snprintf(s->err, sizeof s->err,
                 "%s: the model does not fit: it needs %.1f MiB (weights %.1f, KV cache and activations %.1f at ctx %d), "
                 "the GPU has %.1f MiB free of %.1f (a smaller --ctx-size or a smaller quantisation may)",
                 s->device_name, need / 1048576.0, share ? 0.0 : weights_bytes(m) / 1048576.0,
                 state_bytes(s) / 1048576.0, ctx, free_b / 1048576.0, total_b / 1048576.0);
        goto fail;
    }
    if (cu(s, cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags")) goto fail;
    if (share) {
        s->w = share->w;
        atomic_fetch_add(&s->w->refs, 1);
    } else if (weights_upload(s)) {
        goto fail;
    }
    if (state_alloc(s)) goto fail;
    return &s->base;
fail:
    snprintf(err, errlen, "%s", s->err);
    cuda_state_free(&s->base);
    return NULL;
}

static int cuda_state_ctx(const EmxState *st) { return ((const CudaState *)st)->ctx; }
static const char *cuda_device(const EmxState *st) { return ((const CudaState *)st)->device_name; }
static void cuda_set_threads(EmxState *st, int n) {
    (void)st;  // the GPU's parallelism is not the caller's to set
    (void)n;
}

// ---------------------------------------------------------------------------------------------
// The pass

// out[n][w.rows] (+)= W in[n][w.cols]. The fast matvec (a warp per row) reads int8 activations
// for q8/q4/q4_1, as the CPU does; widths that are not a multiple of 32 take the plain one.
static int matvec(CudaState *s, const EmxCudaWeight *w, const float *in, int n, float *out, int accumulate,
                  int quantised) {
    const int fast = w->cols % 32 == 0;
    EmxCudaActs a = {in, s->xq, s->xd, s->xsum};
    if (fast && emx_dtype_wants_q8_acts(w->dtype) && !quantised)
        CU(emx_cuda_quantize_acts(in, w->cols, n, s->xq, s->xd, s->xsum, s->stream));
    CU(emx_cuda_matvec(fast ? EMX_MATVEC_FAST : EMX_MATVEC_PLAIN, w, &a, n, out, accumulate, s->stream));
    return 0;
}

// Activations quantised once for the matrices that share them (q/k/v, gate/up).
static int quantise_for(CudaState *s, const EmxCudaWeight *w, const float *in, int n) {
    if (w->cols % 32 == 0 && emx_dtype_wants_q8_acts(w->dtype))
        CU(emx_cuda_quantize_acts(in, w->cols, n, s->xq, s->xd, s->xsum, s->stream));
    return 0;
}

// Where a pass's rows sit (as forward_cpu.c's RowLayout): a sequence's rows at pos.. attend
// keys 0..pos+i; branch rows all sit at prefix+step and attend the prefix, then their tail.
typedef struct {
    int is_branches, prefix, step;
    int device_positions;  // decode graph: the key count is read from in_d->n_keys
} Rows;

static void attention_args(const CudaState *s, int l, EmxAttentionArgs *a) {
    const EmxConfig *c = &s->m->cfg;
    const size_t kvl = (size_t)s->ctx * s->kv_dim;
    memset(a, 0, sizeof *a);
    a->k_cache = s->key + l * kvl;
    a->v_cache = s->value + l * kvl;
    a->kv_dtype = EMX_KV_F32;
    a->n_heads = (int)c->n_heads;
    a->n_kv_heads = (int)c->n_kv_heads;
    a->head_dim = (int)c->head_dim;
    a->workspace = s->attn_ws;
}

// The last row's score rows and softmax statistics go where the samplers read them.
static void record_scores(const CudaState *s, int l, EmxAttentionArgs *a) {
    const EmxConfig *c = &s->m->cfg;
    a->scores = s->scores + (size_t)l * c->n_heads * s->ctx;
    a->score_stride = s->ctx;
    a->head_stats = s->head_stats + (size_t)l * c->n_heads;
}

static int attention(CudaState *s, int l, int n, int pos, const Rows *r, int record_last) {
    EmxAttentionArgs a;
    if (!r->is_branches) {  // n rows at pos..pos+n-1, causal: one launch (rows on the grid)
        attention_args(s, l, &a);
        a.q = s->q;
        a.out = s->att;
        a.n_rows = n;
        a.n_keys = pos + n;
        if (r->device_positions) {  // graph: sized for the whole cache, the real count read on the device
            a.n_keys = s->ctx;
            a.n_keys_dev = &s->in_d->n_keys;
        }
        if (record_last) record_scores(s, l, &a);
        CU(emx_cuda_attention(ATTN_KERNEL, &a, s->stream));
        return 0;
    }
    // Branches: row i attends the shared prefix in the cache, then its own tail (interleaved
    // with the other branches': a row of the tail holds one step of every branch).
    const size_t tail_row = (size_t)s->br_max * s->kv_dim, tail_layer = (size_t)l * s->br_tail * tail_row;
    for (int i = 0; i < n; i++) {
        attention_args(s, l, &a);
        a.q = s->q + (size_t)i * s->q_dim;
        a.out = s->att + (size_t)i * s->q_dim;
        a.n_keys = r->prefix + r->step + 1;
        a.tail_k = s->br_key + tail_layer + (size_t)i * s->kv_dim;
        a.tail_v = s->br_value + tail_layer + (size_t)i * s->kv_dim;
        a.tail_start = r->prefix;
        a.tail_row_stride = (int)tail_row;
        CU(emx_cuda_attention(ATTN_KERNEL, &a, s->stream));
    }
    return 0;
}

// Runs n rows (n <= CHUNK; in_d already on the device) through every layer; leaves the final
// hidden states, before the output norm, in x.
static int run_layers(CudaState *s, int n, int pos, const Rows *r, int record_last) {
    const EmxConfig *c = &s->m->cfg;
    const CudaWeights *w = s->w;
    const float eps = c->norm_eps;
    const int dim = (int)c->dim;
    CU(emx_cuda_embedding(&w->emb, s->in_d->tokens, n, s->x, s->stream));
    for (int l = 0; l < (int)c->n_layers; l++) {
        const CudaLayer *L = &w->layers[l];
        CU(emx_cuda_rmsnorm(s->xb, s->x, L->attn_norm, dim, n, eps, s->stream));
        if (quantise_for(s, &L->wq, s->xb, n) || matvec(s, &L->wq, s->xb, n, s->q, 0, 1) ||
            matvec(s, &L->wk, s->xb, n, s->k, 0, 1) || matvec(s, &L->wv, s->xb, n, s->v, 0, 1))
            return -1;
        EmxRopeArgs a;
        memset(&a, 0, sizeof a);
        a.q = s->q;
        a.k = s->k;
        a.v = s->v;
        if (r->is_branches) {  // this step's rows of every branch's tail
            const size_t at = ((size_t)l * s->br_tail + r->step) * s->br_max * s->kv_dim;
            a.k_cache = s->br_key + at;
            a.v_cache = s->br_value + at;
            a.cache_row = s->in_d->rows;
        } else {
            a.k_cache = s->key + (size_t)l * s->ctx * s->kv_dim;
            a.v_cache = s->value + (size_t)l * s->ctx * s->kv_dim;
        }
        a.kv_dtype = EMX_KV_F32;
        a.pos = s->in_d->pos;
        a.inv_freq = w->inv_freq;
        a.q_norm = L->q_norm;
        a.k_norm = L->k_norm;
        a.eps = eps;
        a.batch = n;
        a.n_heads = (int)c->n_heads;
        a.n_kv_heads = (int)c->n_kv_heads;
        a.head_dim = (int)c->head_dim;
        a.style = (int)c->rope_style;
        CU(emx_cuda_rope_kv(&a, s->stream));
        if (attention(s, l, n, pos, r, record_last)) return -1;
        if (matvec(s, &L->wo, s->att, n, s->x, 1, 0)) return -1;  // x += Wo att
        CU(emx_cuda_rmsnorm(s->xb, s->x, L->ffn_norm, dim, n, eps, s->stream));
        if (L->gate.cols % 32 == 0) {
            if (quantise_for(s, &L->gate, s->xb, n)) return -1;
            EmxCudaActs act = {s->xb, s->xq, s->xd, s->xsum};
            CU(emx_cuda_matvec_swiglu(EMX_MATVEC_FAST, &L->gate, &L->up, &act, n, s->hb, s->stream));
        } else {
            EmxCudaActs act = {s->xb, NULL, NULL, NULL};
            CU(emx_cuda_matvec_swiglu(EMX_MATVEC_PLAIN, &L->gate, &L->up, &act, n, s->hb, s->stream));
        }
        if (matvec(s, &L->down, s->hb, n, s->x, 1, 0)) return -1;  // x += Wd h
    }
    return 0;
}

// Output norm and classifier of rows [first, first + n) of x into logits [n][vocab] (device).
static int classify(CudaState *s, int first, int n) {
    const EmxConfig *c = &s->m->cfg;
    CU(emx_cuda_rmsnorm(s->xb, s->x + (size_t)first * c->dim, s->w->norm, (int)c->dim, n, c->norm_eps, s->stream));
    return matvec(s, &s->w->out, s->xb, n, s->logits, 0, 0);
}

static int check_tokens(CudaState *s, const int *tokens, int n) {
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= s->vocab) {
            snprintf(s->err, sizeof s->err, "%s: token id %d out of range [0, %d)", s->device_name, tokens[i], s->vocab);
            return -1;
        }
    return 0;
}

static int check_call(CudaState *s, const int *tokens, int n, int pos) {
    if (n < 1 || pos < 0 || pos > s->ctx - n) {
        snprintf(s->err, sizeof s->err, "%s: positions %d..%d outside the context of %d", s->device_name, pos,
                 pos + n - 1, s->ctx);
        return -1;
    }
    return check_tokens(s, tokens, n);
}

// Fills the pinned input: rows at pos.. (same_pos: all at pos, the branches).
static void fill_input(CudaState *s, const int *tokens, int n, int pos, int same_pos) {
    for (int i = 0; i < n; i++) {
        s->in_h->tokens[i] = tokens[i];
        s->in_h->pos[i] = same_pos ? pos : pos + i;
        s->in_h->rows[i] = i;
    }
    s->in_h->n_keys = pos + n;
}

// Fills the pinned input and queues its copy to the device.
static int send_input(CudaState *s, const int *tokens, int n, int pos, int same_pos) {
    fill_input(s, tokens, n, pos, same_pos);
    CU(cudaMemcpyAsync(s->in_d, s->in_h, sizeof(StepInput), cudaMemcpyHostToDevice, s->stream));
    return 0;
}

// The choice of the next token from logits row 0 (emx_forward_decide), on the device, and the
// copy of its result to out_h. valid_len: keys of the last position (graph: read from in_d).
static int decide_kernels(CudaState *s, int valid_len, int graph) {
    const EmxConfig *c = &s->m->cfg;
    const EmxDecideSpec *sp = &s->spec;
    DecideOut *o = s->out_d;
    const uint64_t step = s->in_h->rng_step;
    const uint64_t *step_dev = graph ? &s->in_d->rng_step : NULL;
    const int *valid_dev = graph ? &s->in_d->n_keys : NULL;
    const int layer = sp->kind == EMX_DECIDE_ENTROPIX ? sp->profile.attn_layer : EMX_ATTN_LAYER_LAST;
    const int metrics = sp->kind == EMX_DECIDE_ENTROPIX || sp->want_metrics;
    if (metrics || sp->kind == EMX_DECIDE_GREEDY)
        CU(emx_cuda_logits_metrics(s->logits, s->vocab, &o->metrics, sp->kind == EMX_DECIDE_GREEDY ? &o->token : NULL,
                                   NULL, s->lm_ws, s->stream));
    if (metrics)
        CU(emx_cuda_attn_metrics(s->scores, s->head_stats, (int)c->n_layers, (int)c->n_heads, s->ctx,
                                 graph ? s->ctx : valid_len, valid_dev, layer, &o->metrics, s->am_ws, s->stream));
    if (sp->kind == EMX_DECIDE_SAMPLE)
        CU(emx_cuda_sample(s->logits, s->vocab, &sp->params, sp->seed, step, step_dev, 0, &o->token, s->sample_ws,
                           s->stream));
    if (sp->kind == EMX_DECIDE_ENTROPIX)
        CU(emx_cuda_entropix_step(s->logits, s->vocab, &o->metrics, &sp->profile, s->estate_d, sp->pause_token,
                                  sp->seed, step, step_dev, &o->token, &o->decision, &o->score, s->sample_ws,
                                  s->stream));
    const size_t bytes = sp->want_metrics ? sizeof(DecideOut) : offsetof(DecideOut, metrics);
    CU(cudaMemcpyAsync(s->out_h, s->out_d, bytes, cudaMemcpyDeviceToHost, s->stream));
    return 0;
}

// The end of a step: the logits to the host (emx_forward) or the choice (emx_forward_decide).
static int step_tail(CudaState *s, int decide, int valid_len, int graph) {
    if (decide) return decide_kernels(s, valid_len, graph);
    CU(cudaMemcpyAsync(s->logits_h, s->logits, (size_t)s->vocab * sizeof(float), cudaMemcpyDeviceToHost, s->stream));
    return 0;
}

// One decode step (in_h filled): captured into a graph on the first call, replayed after (the
// input copy is the graph's first node: it reads in_h at replay time). no_graphs: the same
// launches made directly.
static int decode_step(CudaState *s, int pos, int decide) {
    if (s->no_graphs) {
        const Rows direct_rows = {0, 0, 0, 0};
        CU(cudaMemcpyAsync(s->in_d, s->in_h, sizeof(StepInput), cudaMemcpyHostToDevice, s->stream));
        if (run_layers(s, 1, pos, &direct_rows, 1) || classify(s, 0, 1)) return -1;
        return step_tail(s, decide, pos + 1, 0);
    }
    cudaGraphExec_t *exec = decide ? &s->decide_graph : &s->decode_graph;
    if (!*exec) {
        const Rows graph_rows = {0, 0, 0, 1};
        cudaGraph_t g = NULL;
        CU(cudaStreamBeginCapture(s->stream, cudaStreamCaptureModeThreadLocal));
        int bad = cu(s, cudaMemcpyAsync(s->in_d, s->in_h, sizeof(StepInput), cudaMemcpyHostToDevice, s->stream),
                     "cudaMemcpyAsync") ||
                  run_layers(s, 1, pos, &graph_rows, 1) || classify(s, 0, 1) || step_tail(s, decide, pos + 1, 1);
        cudaError_t end = cudaStreamEndCapture(s->stream, &g);
        if (bad) {
            if (g) cudaGraphDestroy(g);
            return -1;
        }
        CU(end);
        size_t nodes = 0;
        cudaError_t e = cudaGraphGetNodes(g, NULL, &nodes);
        if (e == cudaSuccess) e = cudaGraphInstantiate(exec, g, 0);
        cudaGraphDestroy(g);
        CU(e);
        *(decide ? &s->decide_graph_nodes : &s->graph_nodes) = (int)nodes;
    }
    CU(cudaGraphLaunch(*exec, s->stream));
    return 0;
}

// Runs tokens at pos.. and ends with step_tail; the stream is synchronised on return.
static int run_step(CudaState *s, const int *tokens, int n, int pos, int decide) {
    if (check_call(s, tokens, n, pos)) return -1;
    CU(cudaSetDevice(s->device));
    s->in_h->rng_step = (uint64_t)(pos + n);
    if (n == 1) {
        fill_input(s, tokens, 1, pos, 0);  // decode_step copies it (in the graph: its first node)
        if (decode_step(s, pos, decide)) return -1;
    } else {
        const Rows rows = {0, 0, 0, 0};
        for (int done = 0; done < n;) {
            const int chunk = n - done < CHUNK ? n - done : CHUNK, last = done + chunk == n;
            // the pinned input is read by the copy when it runs: finish the previous chunk first
            if (done) CU(cudaStreamSynchronize(s->stream));
            if (send_input(s, tokens + done, chunk, pos + done, 0) || run_layers(s, chunk, pos + done, &rows, last))
                return -1;
            done += chunk;
            if (last && (classify(s, chunk - 1, 1) || step_tail(s, decide, pos + n, 0))) return -1;
        }
    }
    CU(cudaStreamSynchronize(s->stream));
    s->last_pos = pos + n - 1;
    s->logits_fresh = 1;
    return 0;
}

static const float *cuda_forward(EmxState *st, const int *tokens, int n, int pos) {
    CudaState *s = (CudaState *)st;
    return run_step(s, tokens, n, pos, 0) ? NULL : s->logits_h;
}

static int cuda_forward_decide(EmxState *st, const int *tokens, int n, int pos, const EmxDecideSpec *spec,
                               EmxDecideResult *out) {
    CudaState *s = (CudaState *)st;
    if (!s->have_spec || memcmp(&s->spec, spec, sizeof *spec) != 0) {  // a new sampler: a new graph
        if (s->decide_graph) cudaGraphExecDestroy(s->decide_graph);
        s->decide_graph = NULL;
        s->spec = *spec;
        s->have_spec = 1;
        CU(cudaSetDevice(s->device));
        CU(cudaMemset(s->estate_d, 0, sizeof(EmxEntropixState)));
    }
    if (run_step(s, tokens, n, pos, 1)) return -1;
    memset(out, 0, sizeof *out);
    out->token = s->out_h->token;
    out->score = NAN;
    if (spec->kind == EMX_DECIDE_ENTROPIX) {
        out->decision = s->out_h->decision;
        out->score = s->out_h->score;
    }
    if (spec->want_metrics) out->metrics = s->out_h->metrics;
    if (out->token < 0 || out->token >= s->vocab) {
        snprintf(s->err, sizeof s->err, "%s: the device sampler chose no token (%d)", s->device_name, out->token);
        return -1;
    }
    return 1;
}

static int cuda_propose(EmxState *st, const EmxAgentParams *agents, int n_agents, uint64_t seed, uint64_t step,
                        uint32_t first_lane, int ban, EmxProposal *proposals) {
    CudaState *s = (CudaState *)st;
    if (n_agents < 1 || n_agents > 65535 || ban >= s->vocab) {
        snprintf(s->err, sizeof s->err, "%s: propose: %d agents, ban %d", s->device_name, n_agents, ban);
        return -1;
    }
    if (!s->logits_fresh) {
        snprintf(s->err, sizeof s->err, "%s: propose: no logits of an emx_forward to propose from (a branch pass, "
                 "all-logits pass or banned token came after it)", s->device_name);
        return -1;
    }
    CU(cudaSetDevice(s->device));
    if (n_agents > s->agents_cap) {
        cudaFree(s->agents_d);
        cudaFree(s->props_d);
        cudaFree(s->pick_d);
        cudaFree(s->agents_ws);
        s->agents_d = NULL, s->props_d = NULL, s->pick_d = NULL, s->agents_ws = NULL;
        s->agents_cap = 0;
        if (dev_alloc(s, (void **)&s->agents_d, (size_t)n_agents * sizeof(EmxAgentParams), "agents") ||
            dev_alloc(s, (void **)&s->props_d, (size_t)n_agents * sizeof(EmxProposal), "proposals") ||
            dev_alloc(s, (void **)&s->pick_d, 2 * sizeof(int), "proposals") ||
            dev_alloc(s, &s->agents_ws, emx_cuda_agents_workspace_bytes(s->vocab, n_agents), "the agents' workspace"))
            return -1;
        s->agents_cap = n_agents;
    }
    // logits row 0 is the latest emx_forward's; the banned token is removed there (the row is
    // rewritten by the next pass anyway)
    static const float minus_inf = -INFINITY;
    if (ban >= 0) {
        CU(cudaMemcpyAsync(s->logits + ban, &minus_inf, sizeof(float), cudaMemcpyHostToDevice, s->stream));
        s->logits_fresh = 0;
    }
    CU(cudaMemcpyAsync(s->agents_d, agents, (size_t)n_agents * sizeof(EmxAgentParams), cudaMemcpyHostToDevice,
                       s->stream));
    CU(emx_cuda_agents_step(s->logits, s->vocab, s->agents_d, n_agents, seed, step, NULL, first_lane, s->pick_d,
                            s->pick_d + 1, s->props_d, s->agents_ws, s->stream));
    CU(cudaMemcpyAsync(proposals, s->props_d, (size_t)n_agents * sizeof(EmxProposal), cudaMemcpyDeviceToHost,
                       s->stream));
    CU(cudaStreamSynchronize(s->stream));
    return 1;
}

static int cuda_forward_all_logits(EmxState *st, const int *tokens, int n, int pos, float *logits) {
    CudaState *s = (CudaState *)st;
    if (check_call(s, tokens, n, pos)) return -1;
    CU(cudaSetDevice(s->device));
    s->logits_fresh = 0;
    const Rows rows = {0, 0, 0, 0};
    for (int done = 0; done < n;) {
        const int chunk = n - done < CHUNK ? n - done : CHUNK;
        if (send_input(s, tokens + done, chunk, pos + done, 0) || run_layers(s, chunk, pos + done, &rows, done + chunk == n) ||
            classify(s, 0, chunk))
            return -1;
        CU(cudaMemcpyAsync(logits + (size_t)done * s->vocab, s->logits, (size_t)chunk * s->vocab * sizeof(float),
                           cudaMemcpyDeviceToHost, s->stream));
        CU(cudaStreamSynchronize(s->stream));
        done += chunk;
    }
    memcpy(s->logits_h, logits + (size_t)(n - 1) * s->vocab, (size_t)s->vocab * sizeof(float));
    s->last_pos = pos + n - 1;
    return 0;
}

// Score rows are copied to the host only when asked for (the device samplers read them where
// they are). const in forward.h: the copy is a cache of device state, not a change of it.
static const float *cuda_attention_scores(const EmxState *cst, int *last_pos) {
    CudaState *s = (CudaState *)cst;
    const EmxConfig *c = &s->m->cfg;
    const size_t n = (size_t)c->n_layers * c->n_heads * s->ctx;
    if (last_pos) *last_pos = s->last_pos;
    if (!s->scores_h && !(s->scores_h = malloc(n * sizeof(float)))) return NULL;
    if (cu(s, cudaSetDevice(s->device), "cudaSetDevice") ||
        cu(s, cudaMemcpy(s->scores_h, s->scores, n * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy (scores)"))
        return NULL;
    return s->scores_h;
}

// A host copy of the cache, made now: writes to it do not reach the device.
static void cuda_kv_cache(EmxState *st, float **key, float **value, int *kv_dim) {
    CudaState *s = (CudaState *)st;
    const size_t n = (size_t)s->m->cfg.n_layers * s->ctx * s->kv_dim;
    if (!s->key_h) s->key_h = malloc(n * sizeof(float));
    if (!s->value_h) s->value_h = malloc(n * sizeof(float));
    int ok = s->key_h && s->value_h && !cu(s, cudaSetDevice(s->device), "cudaSetDevice") &&
             !cu(s, cudaMemcpy(s->key_h, s->key, n * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy (keys)") &&
             !cu(s, cudaMemcpy(s->value_h, s->value, n * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy (values)");
    if (key) *key = ok ? s->key_h : NULL;
    if (value) *value = ok ? s->value_h : NULL;
    if (kv_dim) *kv_dim = s->kv_dim;
}

// ---------------------------------------------------------------------------------------------
// Branches (forward.h): the tails on the device, the attention reading the prefix from the
// cache and the rest from the branch's tail (EmxAttentionArgs tail_k/tail_v).

static int cuda_branches_reserve(EmxState *st, int max_branches, int tail_cap, char *err, size_t errlen) {
    CudaState *s = (CudaState *)st;
    if (max_branches < 1 || max_branches > CHUNK || tail_cap < 1 || tail_cap > s->ctx) {
        snprintf(err, errlen, "branches: %d branches of %d positions do not fit (at most %d branches, ctx %d)",
                 max_branches, tail_cap, CHUNK, s->ctx);
        return -1;
    }
    if (max_branches <= s->br_max && tail_cap <= s->br_tail) return 0;
    const size_t n = (size_t)s->m->cfg.n_layers * tail_cap * max_branches * s->kv_dim * sizeof(float);
    float *k = NULL, *v = NULL;
    if (cu(s, cudaSetDevice(s->device), "cudaSetDevice") || dev_alloc(s, (void **)&k, n, "branch KV tails") ||
        dev_alloc(s, (void **)&v, n, "branch KV tails")) {
        cudaFree(k);
        snprintf(err, errlen, "branches: %s", s->err);
        return -1;
    }
    cudaFree(s->br_key);
    cudaFree(s->br_value);
    s->br_key = k;
    s->br_value = v;
    s->br_max = max_branches;
    s->br_tail = tail_cap;
    return 0;
}

static int cuda_forward_branches(EmxState *st, const int *tokens, int n, int prefix, int step, float *logits) {
    CudaState *s = (CudaState *)st;
    if (n < 1 || n > s->br_max || step < 0 || step >= s->br_tail || prefix < 1 || prefix + step >= s->ctx) {
        snprintf(s->err, sizeof s->err, "%s: branches: bad call (n %d, prefix %d, step %d)", s->device_name, n, prefix,
                 step);
        return -1;
    }
    if (check_tokens(s, tokens, n)) return -1;
    CU(cudaSetDevice(s->device));
    s->logits_fresh = 0;
    const Rows rows = {1, prefix, step, 0};
    if (send_input(s, tokens, n, prefix + step, 1) || run_layers(s, n, prefix + step, &rows, 0) || classify(s, 0, n))
        return -1;
    CU(cudaMemcpyAsync(logits, s->logits, (size_t)n * s->vocab * sizeof(float), cudaMemcpyDeviceToHost, s->stream));
    CU(cudaStreamSynchronize(s->stream));
    return 0;
}

static int cuda_branch_commit(EmxState *st, int branch, int n_steps, int prefix) {
    CudaState *s = (CudaState *)st;
    if (branch < 0 || branch >= s->br_max || n_steps < 0 || n_steps > s->br_tail || prefix < 0 ||
        prefix + n_steps > s->ctx) {
        snprintf(s->err, sizeof s->err, "%s: branch commit: bad call", s->device_name);
        return -1;
    }
    CU(cudaSetDevice(s->device));
    const size_t kv = (size_t)s->kv_dim, bytes = kv * sizeof(float);
    for (int l = 0; l < (int)s->m->cfg.n_layers; l++)
        for (int j = 0; j < n_steps; j++) {
            const size_t from = (((size_t)l * s->br_tail + j) * s->br_max + branch) * kv;
            const size_t to = ((size_t)l * s->ctx + prefix + j) * kv;
            CU(cudaMemcpyAsync(s->key + to, s->br_key + from, bytes, cudaMemcpyDeviceToDevice, s->stream));
            CU(cudaMemcpyAsync(s->value + to, s->br_value + from, bytes, cudaMemcpyDeviceToDevice, s->stream));
        }
    CU(cudaStreamSynchronize(s->stream));
    return 0;
}

static size_t cuda_kv_rows_bytes(const EmxState *st, int n) {
    const CudaState *s = (const CudaState *)st;
    return 2 * (size_t)s->m->cfg.n_layers * n * s->kv_dim * sizeof(float);
}

// buf: keys then values, each [n_layers][n][kv_dim] (the CPU backend's packing).
static int kv_rows_copy(CudaState *s, int pos, int n, float *buf, int to_cache) {
    if (pos < 0 || n < 0 || pos + n > s->ctx) {
        snprintf(s->err, sizeof s->err, "%s: KV rows %d..%d outside the context", s->device_name, pos, pos + n - 1);
        return -1;
    }
    CU(cudaSetDevice(s->device));
    const size_t row = (size_t)n * s->kv_dim, layers = s->m->cfg.n_layers, bytes = row * sizeof(float);
    const enum cudaMemcpyKind kind = to_cache ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
    for (size_t l = 0; l < layers; l++) {
        float *k = s->key + (l * s->ctx + pos) * s->kv_dim, *v = s->value + (l * s->ctx + pos) * s->kv_dim;
        float *bk = buf + l * row, *bv = buf + (layers + l) * row;
        CU(cudaMemcpyAsync(to_cache ? k : bk, to_cache ? bk : k, bytes, kind, s->stream));
        CU(cudaMemcpyAsync(to_cache ? v : bv, to_cache ? bv : v, bytes, kind, s->stream));
    }
    CU(cudaStreamSynchronize(s->stream));
    return 0;
}

static int cuda_kv_rows_read(EmxState *st, int pos, int n, void *buf) {
    return kv_rows_copy((CudaState *)st, pos, n, buf, 0);
}
static int cuda_kv_rows_write(EmxState *st, int pos, int n, const void *buf) {
    return kv_rows_copy((CudaState *)st, pos, n, (float *)buf, 1);
}

// Peak memory bandwidth from the device's properties: memory clock (kHz) x 2 (double data
// rate) x bus width (bits) / 8.
static double peak_gbps(int device) {
    int clock_khz = 0, bus_bits = 0;
    if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return 2.0 * clock_khz * 1e3 * bus_bits / 8 / 1e9;
}

static void cuda_info(const EmxState *st, EmxStateInfo *info) {
    const CudaState *s = (const CudaState *)st;
    struct cudaDeviceProp p;
    memset(info, 0, sizeof *info);
    info->device = s->device_name;
    if (cudaGetDeviceProperties(&p, s->device) == cudaSuccess)
        snprintf(info->device_desc, sizeof info->device_desc, "%.127s", p.name);
    else
        cudaGetLastError();
    info->peak_gbps = peak_gbps(s->device);
    info->decode_graph_nodes = s->graph_nodes;
    info->uses_graphs = !s->no_graphs;
    info->weight_bytes_on_device = s->w->bytes;
}

static const EmxBackend CUDA_BACKEND = {
    .name = "cuda",
    .free = cuda_state_free,
    .ctx = cuda_state_ctx,
    .device = cuda_device,
    .set_threads = cuda_set_threads,
    .error = cuda_error,
    .info = cuda_info,
    .forward = cuda_forward,
    .forward_decide = cuda_forward_decide,
    .propose = cuda_propose,
    .forward_all_logits = cuda_forward_all_logits,
    .attention_scores = cuda_attention_scores,
    .kv_cache = cuda_kv_cache,
    .branches_reserve = cuda_branches_reserve,
    .forward_branches = cuda_forward_branches,
    .branch_commit = cuda_branch_commit,
    .kv_rows_bytes = cuda_kv_rows_bytes,
    .kv_rows_read = cuda_kv_rows_read,
    .kv_rows_write = cuda_kv_rows_write,
};
