// forward_cuda.c — the CUDA backend of forward.h: the same forward pass as forward_cpu.c, with
// the weights, activations and KV cache in one GPU's memory and every step made of the
// launchers of kernels/*.h (host code, C11; the kernels are CUDA C++).
//
// Per layer, for n rows (a chunk of at most 16 prompt tokens, one decode token, one token of
// each lookahead branch, or one token of each of several states: emx_forward_multi, whose rows'
// rope_kv and attention run per row on each state's own cache):
//   rmsnorm(x) -> xb;  int8 xb (q8/q4 weights);  q, k, v = matvec(Wq/Wk/Wv, xb)
//   rope_kv: q/k per-head norm, RoPE, k and v into the KV cache
//   attention (split flash-decoding, GQA-aware; the last row writes the score rows and per-head
//     softmax statistics the entropix metrics read)
//   x += Wo att (the matvec accumulates: the residual add is free);  rmsnorm(x) -> xb
//   hb = silu(Wg xb) * (Wu xb) (one fused matvec);  x += Wd hb
// Gemma 3 (EmxConfigExt) adds: the embedding times embed_scale; scores times attn_scale; a
// local layer's RoPE base and its window of keys (attention.h's window), whose cache is a ring
// of rows (runtime/kv_ring.h: the kernels' cache_rows); the global layers' RoPE positions / the linear
// factor; sandwich norms (x += rmsnorm(Wo att) * post_attn_norm, the same after the FFN, through
// tmp); GeGLU (gate and up matvecs, then kernels/geglu.h) in place of the fused SwiGLU.
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
// attention metrics, the entropix decision and its sampling (kernels/sampling/sampling.cu), so the host
// receives the token id and the decision, never the logits. The next step can be queued before
// the host reads that id, the device feeding it (emx_forward_decide_ahead, forward_cuda_ahead.c).
//
// Prefill runs the same kernels on chunks of 16 rows (the batched matvec reads each weight once
// per chunk; one attention launch covers the chunk's rows). Prompts longer than GEMM_MIN_PROMPT
// (forward_cuda_state.h) run in chunks of up to 256 rows with every projection a GEMM
// (kernels/gemm.h: cuBLAS, bf16 tensor cores for quantised weights, f32 for float weights), the
// attention 16 rows a launch as before, the classifier on the last row only. Memory: weights as in the file
// (q4_1 repacked, kernels/weights.h), the KV cache in f32 (the CPU's layout, so rows travel
// between backends unchanged).
//
// This file uploads the weights, makes and frees the state and holds the backend table; the
// pass is forward_cuda_layers.c (the layers), forward_cuda_step.c (the steps, graphs, branch
// passes), forward_cuda_tail.c (the choice, proposals), forward_cuda_ahead.c (the decision's
// steps, queued ahead) and forward_cuda_multi.c; the extension
// for the agent pool and the branching decoder (runtime/pool/pool_backend.h) is
// forward_cuda_agents.c (proposals, rounds, branches, KV rows, and its table) and
// forward_cuda_pair.c (the critic's pass, emx_forward_pair); what they share is
// forward_cuda_state.h.
#include <math.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "base/errmsg.h"
#include "kernels/logits_metrics.h"
#include "kernels/matvec_fused.h"
#include "runtime/cpu/cpu_ops.h"
#include "runtime/cuda/forward_cuda_state.h"

static const EmxBackend CUDA_BACKEND;

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
    cudaFree(w->inv_freq_local);
    for (uint32_t l = 0; w->layers && l < c->n_layers; l++) {
        CudaLayer *L = &w->layers[l];
        const EmxCudaWeight *mats[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->gate, &L->up, &L->down};
        for (size_t i = 0; i < sizeof mats / sizeof *mats; i++) cudaFree((void *)mats[i]->data);
        cudaFree(L->attn_norm);
        cudaFree(L->ffn_norm);
        cudaFree(L->q_norm);
        cudaFree(L->k_norm);
        cudaFree(L->bq);
        cudaFree(L->bk);
        cudaFree(L->bv);
        cudaFree(L->post_attn_norm);
        cudaFree(L->post_ffn_norm);
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
    // Gemma 3 (as forward_cpu.c): the global layers' frequencies divided by the linear factor
    // (1: none), the local layers' from their own base, unscaled
    for (int i = 0; i < half; i++) inv_freq[i] /= m->ext.rope_linear_global;
    if (dev_alloc(s, (void **)&w->inv_freq, (size_t)half * sizeof(double), "RoPE frequencies")) return -1;
    CU(cudaMemcpy(w->inv_freq, inv_freq, (size_t)half * sizeof(double), cudaMemcpyHostToDevice));
    if (m->ext.sliding_window) {
        emx_rope_inv_freq(inv_freq, (int)c->head_dim, m->ext.rope_theta_local > 0 ? m->ext.rope_theta_local : c->rope_theta,
                          NULL);
        if (dev_alloc(s, (void **)&w->inv_freq_local, (size_t)half * sizeof(double), "RoPE frequencies")) return -1;
        CU(cudaMemcpy(w->inv_freq_local, inv_freq, (size_t)half * sizeof(double), cudaMemcpyHostToDevice));
    }
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
        if (s->m->ext.qkv_bias && (upload_f32(s, &L->bq, &g->bq, what) || upload_f32(s, &L->bk, &g->bk, what) ||
                                   upload_f32(s, &L->bv, &g->bv, what)))
            return -1;
        if (s->m->ext.sandwich_norms && (upload_f32(s, &L->post_attn_norm, &g->post_attn_norm, what) ||
                                         upload_f32(s, &L->post_ffn_norm, &g->post_ffn_norm, what)))
            return -1;
    }
    return 0;
}

// ---------------------------------------------------------------------------------------------
// State

static void cuda_state_free(EmxState *st) {
    CudaState *s = (CudaState *)st;
    cudaSetDevice(s->device);
    cuda_settle_quiet(s);
    for (int t = 0; t < N_TAILS; t++)
        if (s->step_graph[t]) cudaGraphExecDestroy(s->step_graph[t]);
    for (int i = 0; i < 2; i++)
        if (s->fed_graph[i]) cudaGraphExecDestroy(s->fed_graph[i]);
    if (s->multi_graph) cudaGraphExecDestroy(s->multi_graph);
    for (int i = 0; i < 3; i++)
        if (s->out_ready[i]) cudaEventDestroy(s->out_ready[i]);
    cuda_pair_free(s);
    if (s->blas) cublasDestroy(s->blas);
    void *dev[] = {s->x, s->xb, s->tmp, s->q, s->att, s->k, s->v, s->hb, s->hb2, s->xq, s->xd, s->xsum, s->in_d, s->rows_d,
                   s->gin_d, s->gemm_ws, s->key, s->value, s->layers_d, s->scores, s->head_stats, s->attn_ws, s->attn_arrivals,
                   s->logits, s->br_key, s->br_value,
                   s->out_d, s->estate_d, s->estate_saved_d, s->lm_ws, s->am_ws, s->sample_ws, s->agents_d, s->props_d, s->pick_d,
                   s->agents_ws, s->bin_d, s->step_layers_d, s->step_sync, s->step_clocks};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++) cudaFree(dev[i]);
    cudaFreeHost(s->in_h);
    cudaFreeHost(s->rows_h);
    cudaFreeHost(s->gin_h);
    cudaFreeHost(s->logits_h);
    cudaFreeHost(s->out_h);
    cudaFreeHost(s->props_h);
    cudaFreeHost(s->bin_h);
    free(s->step_clocks_h);
    free(s->scores_h);
    free(s->key_h);
    free(s->value_h);
    free(s->layers);
    weights_release(s->w);
    cuda_phase_clock_free(s->clock);
    if (s->stream) cudaStreamDestroy(s->stream);
    free(s);
}

// Bytes of the keys (or of the values): every layer's rows, a local layer's ring included.
static size_t cache_bytes(const CudaState *s) { return (size_t)s->kv_rows * s->kv_dim * s->kv_esize; }

static size_t attn_ws_bytes(const CudaState *s, int n_keys) {
    const EmxConfig *c = &s->m->cfg;
    return emx_cuda_attention_workspace_bytes_rows(ATTN_KERNEL, (int)c->n_heads, (int)c->head_dim, n_keys, 0, CHUNK);
}

// The GEMM scratch (emx_cuda_gemm_scratch_bytes) of the layer matrix that needs the most at
// gemm_rows rows; f32 weights need none (cublas_f32 reads them in place).
static size_t gemm_ws_bytes(const CudaState *s) {
    size_t most = 0;
    for (uint32_t l = 0; s->gemm_rows && l < s->m->cfg.n_layers; l++) {
        const EmxLayer *L = &s->m->layers[l];
        const EmxTensor *mats[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < sizeof mats / sizeof *mats; i++) {
            const EmxTensor *t = mats[i];
            const size_t b = t->dtype == EMX_F32 ? 0
                             : emx_cuda_gemm_scratch_bytes(gemm_variant(t->dtype), (int)t->rows, (int)t->cols, s->gemm_rows);
            most = b > most ? b : most;
        }
    }
    return most;
}

// Rows of the activation buffers: a batched chunk's or a GEMM chunk's.
static uint64_t act_rows(const CudaState *s) { return s->gemm_rows > CHUNK ? (uint64_t)s->gemm_rows : CHUNK; }

// Rows of tmp: a block's output before its post-norm (sandwich norms: any chunk's rows), else
// CHUNK.
static uint64_t tmp_rows(const CudaState *s) { return s->m->ext.sandwich_norms ? act_rows(s) : CHUNK; }

// Device bytes of one state's own buffers (not the weights).
static uint64_t state_bytes(const CudaState *s) {
    const EmxConfig *c = &s->m->cfg;
    const uint64_t B = CHUNK, R = act_rows(s), L = c->n_layers;
    uint64_t b = R * (2 * (uint64_t)c->dim + 2 * (uint64_t)s->q_dim + 2 * (uint64_t)s->kv_dim + 2 * (uint64_t)c->hidden_dim) * 4;
    b += tmp_rows(s) * (uint64_t)c->dim * 4;  // tmp
    b += B * (uint64_t)s->widest * (1 + 2 * 4 / 32) + sizeof(StepInput) + B * sizeof(EmxAttnDecodeRow);
    if (s->gemm_rows) b += 2 * (uint64_t)s->gemm_rows * sizeof(int) + gemm_ws_bytes(s) + CUBLAS_WORKSPACE_BYTES;
    b += 2 * (uint64_t)cache_bytes(s) + L * sizeof(EmxKvLayer);  // KV cache
    b += L * c->n_heads * ((uint64_t)s->ctx * 4 + sizeof(EmxSoftmaxStats)); // score rows, stats
    b += attn_ws_bytes(s, s->ctx) + c->n_kv_heads * sizeof(unsigned) + B * (uint64_t)s->vocab * 4;
    b += sizeof(DecideOut) + emx_cuda_logits_metrics_workspace_bytes(s->vocab) +
         emx_cuda_attn_metrics_workspace_bytes((int)L) + emx_cuda_sample_workspace_bytes(s->vocab);
    return b;
}

static int state_alloc(CudaState *s) {
    const EmxConfig *c = &s->m->cfg;
    const size_t B = CHUNK, R = act_rows(s), L = c->n_layers, f = sizeof(float);
    struct {
        void **p;
        size_t bytes;
        const char *what;
    } bufs[] = {
        {(void **)&s->x, R * c->dim * f, "activations"},
        {(void **)&s->xb, R * c->dim * f, "activations"},
        {(void **)&s->tmp, tmp_rows(s) * c->dim * f, "activations"},
        {(void **)&s->q, R * s->q_dim * f, "activations"},
        {(void **)&s->att, R * s->q_dim * f, "activations"},
        {(void **)&s->k, R * s->kv_dim * f, "activations"},
        {(void **)&s->v, R * s->kv_dim * f, "activations"},
        {(void **)&s->hb, R * c->hidden_dim * f, "activations"},
        {(void **)&s->hb2, R * c->hidden_dim * f, "activations"},
        {(void **)&s->xq, B * s->widest, "int8 activations"},
        {(void **)&s->xd, B * (s->widest / 32 + 1) * f, "int8 activations"},
        {(void **)&s->xsum, B * (s->widest / 32 + 1) * sizeof(int), "int8 activations"},
        {(void **)&s->in_d, sizeof(StepInput), "step input"},
        {(void **)&s->rows_d, B * sizeof(EmxAttnDecodeRow), "step input"},
        {(void **)&s->key, cache_bytes(s), "the KV cache"},
        {(void **)&s->value, cache_bytes(s), "the KV cache"},
        {(void **)&s->layers_d, L * sizeof(EmxKvLayer), "the KV cache"},
        {(void **)&s->scores, L * c->n_heads * s->ctx * f, "attention score rows"},
        {(void **)&s->head_stats, L * c->n_heads * sizeof(EmxSoftmaxStats), "attention statistics"},
        {(void **)&s->attn_ws, attn_ws_bytes(s, s->ctx), "attention workspace"},
        {(void **)&s->attn_arrivals, c->n_kv_heads * sizeof(unsigned), "attention workspace"},
        {(void **)&s->logits, B * s->vocab * f, "logits"},
        {(void **)&s->out_d, sizeof(DecideOut), "the sampler's result"},
        {(void **)&s->estate_d, sizeof(EmxEntropixState), "the entropix state"},
        {(void **)&s->estate_saved_d, sizeof(EmxEntropixState), "the entropix state"},
        {&s->lm_ws, emx_cuda_logits_metrics_workspace_bytes(s->vocab), "sampler workspace"},
        {&s->am_ws, emx_cuda_attn_metrics_workspace_bytes((int)L), "sampler workspace"},
        {&s->sample_ws, emx_cuda_sample_workspace_bytes(s->vocab), "sampler workspace"},
    };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        if (dev_alloc(s, bufs[i].p, bufs[i].bytes, bufs[i].what)) return -1;
    if (s->gemm_rows) {  // the cuBLAS handle waits for the first long prompt (its workspace is counted)
        if (dev_alloc(s, (void **)&s->gin_d, 2 * (size_t)s->gemm_rows * sizeof(int), "step input") ||
            dev_alloc(s, &s->gemm_ws, gemm_ws_bytes(s), "GEMM scratch"))
            return -1;
        CU(cudaMallocHost((void **)&s->gin_h, 2 * (size_t)s->gemm_rows * sizeof(int)));
    }
    // zeros: positions past the last one fed are never read, but a fresh cache is clean anyway
    CU(cudaMemset(s->key, 0, cache_bytes(s)));
    CU(cudaMemset(s->value, 0, cache_bytes(s)));
    CU(cudaMemcpy(s->layers_d, s->layers, L * sizeof(EmxKvLayer), cudaMemcpyHostToDevice));
    CU(cudaMemset(s->scores, 0, L * c->n_heads * s->ctx * f));
    CU(cudaMemset(s->attn_arrivals, 0, c->n_kv_heads * sizeof(unsigned)));  // the kernel keeps them zero
    CU(cudaMallocHost((void **)&s->in_h, sizeof(StepInput)));
    CU(cudaMallocHost((void **)&s->rows_h, B * sizeof(EmxAttnDecodeRow)));
    CU(cudaMallocHost((void **)&s->logits_h, (size_t)s->vocab * f));
    CU(cudaMallocHost((void **)&s->out_h, 3 * sizeof(DecideOut)));  // a slot each: the host's step, two ahead
    for (int i = 0; i < 3; i++) CU(cudaEventCreateWithFlags(&s->out_ready[i], cudaEventDisableTiming));
    CU(cudaMemset(s->estate_d, 0, sizeof(EmxEntropixState)));
    memset(s->in_h, 0, sizeof(StepInput));
    return 0;
}

// EMX_CUDA_FUSED in the environment, read once, when the state is made: the most rows a step
// through the fused decode layer takes. Unset or empty: EMX_FUSED_MAX_ROWS (one row of a
// sequence, or up to that many states' rows in one step); 0: never (the separate kernels, the
// reference path); 1: one row only (several states' steps on the separate kernels, to compare
// the two paths).
static int fused_rows_of_env(CudaState *s) {
    const char *env = getenv("EMX_CUDA_FUSED");
    s->fused = EMX_FUSED_MAX_ROWS;
    if (!env || !*env) return 0;  // (set empty: as unset)
    char *end;
    const long v = strtol(env, &end, 10);
    if (end == env || *end || v < 0 || v > EMX_FUSED_MAX_ROWS) {
        snprintf(s->err, sizeof s->err, "EMX_CUDA_FUSED=%.32s: not a number of rows from 0 to %d", env,
                 EMX_FUSED_MAX_ROWS);
        return -1;
    }
    s->fused = (int)v;
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

// kernels/kernels.mk passes the architectures of the nvcc build ("sm_80 sm_90");
// tests/cuda_emu/emu.mk passes "emulated".
#ifndef EMX_CUDA_ARCHS
#define EMX_CUDA_ARCHS "(architectures not recorded)"
#endif
const char *emx_cuda_backend_name(void) { return "cuda " EMX_CUDA_ARCHS; }

EmxState *emx_cuda_state_new(const EmxModel *m, const EmxStateOptions *opt, int device, char *err, size_t errlen) {
    const EmxConfig *c = &m->cfg;
    const int ctx = emx_state_resolve_ctx(m, opt, err, errlen);
    if (ctx < 0) return NULL;
    int n_dev = 0;
    const cudaError_t count_err = cudaGetDeviceCount(&n_dev);
    if (count_err != cudaSuccess) {
        cudaGetLastError();
        n_dev = 0;
    }
    if (device >= n_dev) {
        // the runtime's reason names what is missing: no driver, or a driver without a GPU
        if (n_dev) emx_seterr(err, errlen, "device cuda:%d: no such GPU (%d present)", device, n_dev);
        else emx_seterr(err, errlen, "device cuda:%d: no GPU found (cudaGetDeviceCount: %s)", device,
                        count_err != cudaSuccess ? cudaGetErrorString(count_err) : "0 devices");
        return NULL;
    }
    if (c->head_dim > 512 || c->head_dim / 2 > 512) {
        emx_seterr(err, errlen, "cuda:%d: head_dim %u: the kernels take at most 512", device, c->head_dim);
        return NULL;
    }
    const CudaState *share = opt && opt->share_weights && opt->share_weights->backend == &CUDA_BACKEND
                                 ? (const CudaState *)opt->share_weights : NULL;
    if (share && (share->m != m || share->device != device)) {
        emx_seterr(err, errlen, "cuda:%d: share_weights names a state of another model or device", device);
        return NULL;
    }
    CudaState *s = calloc(1, sizeof *s);
    if (!s) {
        emx_seterr(err, errlen, "cuda:%d: out of host memory", device);
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
    if (opt && opt->phase_timeline) s->no_graphs = 1;  // timed steps are direct launches (phase_clock.h)
    if (fused_rows_of_env(s)) goto fail;
    const EmxKvType cache = emx_kv_type_resolve(opt ? opt->cache_type : EMX_KV_AUTO, m, 1);
    s->kv_type = cache;
    s->kv_esize = emx_kv_type_size(cache);
    s->last_pos = -1;
    s->gemm_rows = ctx > GEMM_MIN_PROMPT ? (ctx < GEMM_ROWS ? ctx : GEMM_ROWS) : 0;
    // each layer's rows: ctx, or a local layer's ring of its window and the most rows a pass
    // writes before it reads them (a GEMM chunk's or a batched chunk's)
    if (!(s->layers = malloc(c->n_layers * sizeof *s->layers))) {
        snprintf(s->err, sizeof s->err, "cuda:%d: out of host memory", device);
        goto fail;
    }
    s->kv_rows = emx_kv_layout(&m->ext, c->n_layers, ctx, (int)act_rows(s), s->layers, &s->ring);
    if (cu(s, cudaSetDevice(device), "cudaSetDevice")) goto fail;
    // PDL where the device has it (sm_90 on: emx_pdl_wait is nothing before); read once, here
    int cc_major = 0;
    if (cu(s, cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, device),
           "cudaDeviceGetAttribute (compute capability)"))
        goto fail;
    const char *pdl = getenv("EMX_CUDA_PDL");
    // (not in a timed step's direct launches: an event between phases ends any overlap anyway)
    s->pdl = cc_major >= 9 && !(pdl && strcmp(pdl, "0") == 0) && !(opt && opt->phase_timeline);
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
    const char *persistent = getenv("EMX_CUDA_PERSISTENT");  // read once, here, as EMX_CUDA_FUSED
    const int ask = (opt && opt->persistent) || (persistent && strcmp(persistent, "1") == 0);
    if (opt && opt->phase_timeline && !(s->clock = cuda_phase_clock_new((int)c->n_layers, s->err, sizeof s->err)))
        goto fail;
    if (cuda_persistent_init(s, ask)) goto fail;  // (after the clock: a timed state's stamps)
    return &s->base;
fail:
    emx_seterr(err, errlen, "%s", s->err);
    cuda_state_free(&s->base);
    return NULL;
}

static int cuda_state_ctx(const EmxState *st) { return ((const CudaState *)st)->ctx; }
static const char *cuda_device(const EmxState *st) { return ((const CudaState *)st)->device_name; }
static void cuda_set_threads(EmxState *st, int n) {
    (void)st;  // the GPU's parallelism is not the caller's to set
    (void)n;
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
    info->decode_graph_nodes = s->step_graph_nodes[TAIL_LOGITS];
    info->uses_graphs = !s->no_graphs;
    info->weight_bytes_on_device = s->w->bytes;
    info->cache_type = s->kv_type;
    info->kv_cache_bytes = 2 * (uint64_t)cache_bytes(s);
    info->kv_ring_rows = s->ring.rows;
    info->vocab = s->vocab;
    if (s->clock) info->phases = s->clock->total;
    info->decode_path = s->decode_path;
    info->persistent_blocks = s->persistent ? s->step.blocks : 0;
    for (int n = 0; n <= PAIR_GRAPH_ROWS; n++) info->pair_graphs += s->pair_graph[n] != NULL;
    info->multi_graph_nodes = s->multi_graph ? s->multi_graph_nodes : 0;
    info->multi_captures = s->multi_captures;
}

static const EmxBackend CUDA_BACKEND = {
    .name = "cuda",
    .free = cuda_state_free,
    .ctx = cuda_state_ctx,
    .device = cuda_device,
    .set_threads = cuda_set_threads,
    .error = cuda_error,
    .info = cuda_info,
    .forward = emx_cuda_state_forward,
    .forward_decide = emx_cuda_state_forward_decide,
    .forward_multi = emx_cuda_state_forward_multi,
    .forward_all_logits = emx_cuda_state_forward_all_logits,
    .attention_scores = emx_cuda_state_attention_scores,
    .kv_cache = emx_cuda_state_kv_cache,
    .pool = &emx_cuda_pool_backend,
};
