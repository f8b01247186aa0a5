// forward_cuda_step.c — the CUDA backend's steps (forward_cuda.c has the header comment: the
// layers, the decode graph, the on-device choice, prefill in chunks): the call's checks and input,
// a chunk, the decode step's graphs, long prompts through the GEMMs, emx_forward and
// emx_forward_all_logits, the host copies of the score rows and the cache, and a lookahead
// branch pass. The layers are forward_cuda_layers.c's, a step's end on the device
// forward_cuda_tail.c's, several states in one step forward_cuda_multi.c's, emx_forward_decide
// and its steps queued ahead forward_cuda_ahead.c's; the agents' and the branches' entry points
// are forward_cuda_agents.c's.
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "base/errmsg.h"
#include "kernels/embedding.h"
#include "kernels/logits_metrics.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "runtime/cpu/cpu_matmul.h"
#include "runtime/cpu/cpu_ops.h"
#include "runtime/cuda/forward_cuda_pass.h"
#include "runtime/cuda/forward_cuda_state.h"

static int check_tokens(CudaState *s, const int *tokens, int n) {
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= s->vocab) {
            snprintf(s->err, sizeof s->err, "%s: token id %d out of range [0, %d)", s->device_name, tokens[i], s->vocab);
            return -1;
        }
    return 0;
}

int cuda_step_check(CudaState *s, const int *tokens, int n, int pos) {
    if (cuda_settle(s)) return -1;  // a step queued ahead is dropped by any other step
    if (n < 1 || pos < 0 || pos > s->ctx - n) {
        snprintf(s->err, sizeof s->err, "%s: positions %d..%d outside the context of %d", s->device_name, pos,
                 pos + n - 1, s->ctx);
        return -1;
    }
    if (check_tokens(s, tokens, n) || cuda_ring_check(s, pos)) return -1;
    emx_kv_ring_wrote(&s->ring, pos + n - 1);  // the call writes these rows from here on
    return 0;
}

int cuda_ring_check(CudaState *s, int pos) {
    const char *gone = emx_kv_ring_refusal(&s->ring, pos);
    if (gone) snprintf(s->err, sizeof s->err, "%s: %s", s->device_name, gone);
    return gone ? -1 : 0;
}

void cuda_fill_rows(StepInput *in, const int *tokens, int n, int pos, int same_pos) {
    for (int i = 0; i < n; i++) {
        in->tokens[i] = tokens[i];
        in->pos[i] = same_pos ? pos : pos + i;
        in->rows[i] = i;
    }
    in->n_keys = pos + n;
}

// Fills the pinned input (cuda_fill_rows into in_h).
static void fill_input(CudaState *s, const int *tokens, int n, int pos, int same_pos) {
    cuda_fill_rows(s->in_h, tokens, n, pos, same_pos);
}

// Fills the pinned input and queues its copy to the device.
static int send_input(CudaState *s, const int *tokens, int n, int pos, int same_pos) {
    fill_input(s, tokens, n, pos, same_pos);
    CU(cudaMemcpyAsync(s->in_d, s->in_h, sizeof(StepInput), cudaMemcpyHostToDevice, s->stream));
    return 0;
}

int cuda_chunk_pass(CudaState *s, int n, int pos, const StepInput *in, int graph, int tail) {
    const Rows rows = {.device_positions = graph, .in = in};
    if (cuda_run_layers(s, n, pos, &rows, tail >= 0)) return -1;
    if (tail < 0) return 0;
    return cuda_classify(s, n - 1, 1) || cuda_step_tail(s, tail, pos + n, graph) ? -1 : 0;
}

int cuda_capture_end(CudaState *s, int bad, cudaGraphExec_t *exec, int *nodes) {
    cudaGraph_t g = NULL;
    cudaError_t end = cudaStreamEndCapture(s->stream, &g);
    if (bad) {
        if (g) cudaGraphDestroy(g);
        return -1;
    }
    CU(end);
    size_t n = 0;
    cudaError_t e = cudaGraphGetNodes(g, NULL, &n);
    if (e == cudaSuccess) e = cudaGraphInstantiate(exec, g, 0);
    cudaGraphDestroy(g);
    CU(e);
    if (nodes) *nodes = (int)n;
    return 0;
}

// The decode step's launches after its input copy: the layers and the classifier, with PDL where
// the state has it (s->pdl_now: the fused kernels then carry the attribute, the embedding, which
// follows the copy, and the separate kernels not), then the tail, whose kernels take PDL too
// (they follow the classifier: cuda_step_tail, forward_cuda_tail.c). With the persistent kernel
// (s->persistent) the layers and the classifier are its one launch, and with it the decision's
// statistics where the tail is a decision (the tail then does not make them).
// graph: positions and key count read on the device.
int cuda_decode_launches(CudaState *s, int pos, int tail, int graph) {
    const Rows rows = {.device_positions = graph};
    s->pdl_now = s->pdl;
    const int bad = s->persistent ? cuda_persistent_step(s, tail, graph)
                                  : cuda_run_layers(s, 1, pos, &rows, 1) || cuda_classify(s, 0, 1);
    s->pdl_now = 0;
    const int rc = bad || cuda_phase(s, EMX_PHASE_CLASSIFIER) || cuda_step_tail(s, tail, pos + 1, graph) ||
                           cuda_phase(s, EMX_PHASE_TAIL)
                       ? -1
                       : 0;
    s->metrics_in_step = s->decision_in_step = 0;
    return rc;
}

// One decode step (in_h filled) with its tail: captured into that tail's graph on the first
// call, replayed after (the input copy is the graph's first node: it reads in_h at replay
// time). no_graphs: the same launches made directly.
static int decode_step(CudaState *s, int pos, int tail) {
    if (s->no_graphs) {  // with a phase timeline, an event at the start and after each phase
        CU(cuda_phase_start(s->clock, s->stream));
        CU(cudaMemcpyAsync(s->in_d, s->in_h, sizeof(StepInput), cudaMemcpyHostToDevice, s->stream));
        if (cuda_decode_launches(s, pos, tail, 0)) {
            if (s->clock) s->clock->running = 0;  // a failed step is not timed
            return -1;
        }
        return 0;
    }
    cudaGraphExec_t *exec = &s->step_graph[tail];
    if (!*exec) {
        CU(cudaStreamBeginCapture(s->stream, cudaStreamCaptureModeThreadLocal));
        int bad = cu(s, cudaMemcpyAsync(s->in_d, s->in_h, sizeof(StepInput), cudaMemcpyHostToDevice, s->stream),
                     "cudaMemcpyAsync") ||
                  cuda_decode_launches(s, pos, tail, 1);
        if (cuda_capture_end(s, bad, exec, &s->step_graph_nodes[tail])) return -1;
    }
    CU(cudaGraphLaunch(*exec, s->stream));
    return 0;
}

// A long prompt (n > GEMM_MIN_PROMPT) at pos..: chunks of equal size up to gemm_rows (a 300-row
// prompt is two of 150, not 256 and 44: each chunk dequantises every matrix once, whatever its
// rows), every projection a GEMM, the classifier on the last row only; ends with step_tail.
static int prefill_gemm(CudaState *s, const int *tokens, int n, int pos, int tail) {
    if (!s->blas && cublasCreate(&s->blas) != CUBLAS_STATUS_SUCCESS) {
        s->blas = NULL;
        snprintf(s->err, sizeof s->err, "%s: cublasCreate failed (the prompt's GEMMs need a cuBLAS handle)",
                 s->device_name);
        return -1;
    }
    const Rows rows = {.gemm = 1};
    const int n_chunks = (n + s->gemm_rows - 1) / s->gemm_rows, size = (n + n_chunks - 1) / n_chunks;
    for (int done = 0; done < n;) {
        const int chunk = n - done < size ? n - done : size, last = done + chunk == n;
        // the pinned input is read by the copy when it runs: finish the previous chunk first
        if (done) CU(cudaStreamSynchronize(s->stream));
        for (int i = 0; i < chunk; i++) {  // gin: [0][chunk] token ids, [1][chunk] positions
            s->gin_h[i] = tokens[done + i];
            s->gin_h[s->gemm_rows + i] = pos + done + i;
        }
        CU(cudaMemcpyAsync(s->gin_d, s->gin_h, 2 * (size_t)s->gemm_rows * sizeof(int), cudaMemcpyHostToDevice,
                           s->stream));
        if (cuda_run_layers(s, chunk, pos + done, &rows, last)) return -1;
        done += chunk;
        if (last && (cuda_classify(s, chunk - 1, 1) || cuda_step_tail(s, tail, pos + n, 0))) return -1;
    }
    return 0;
}

int cuda_step_queue(CudaState *s, const int *tokens, int n, int pos, int tail) {
    if (cuda_step_check(s, tokens, n, pos)) return -1;
    CU(cudaSetDevice(s->device));
    // emx_forward_propose and emx_forward_lookahead_propose set their own
    if (tail != TAIL_PROPOSE && tail != TAIL_LOOKAHEAD) s->in_h->rng_step = (uint64_t)(pos + n);
    if (n == 1) {
        fill_input(s, tokens, 1, pos, 0);  // decode_step copies it (in the graph: its first node)
        if (decode_step(s, pos, tail)) return -1;
    } else if (n > GEMM_MIN_PROMPT && s->gemm_rows) {
        if (prefill_gemm(s, tokens, n, pos, tail)) return -1;
    } else {
        const Rows rows = {.is_branches = 0};
        for (int done = 0; done < n;) {
            const int chunk = n - done < CHUNK ? n - done : CHUNK, last = done + chunk == n;
            // the pinned input is read by the copy when it runs: finish the previous chunk first
            if (done) CU(cudaStreamSynchronize(s->stream));
            if (send_input(s, tokens + done, chunk, pos + done, 0) || cuda_run_layers(s, chunk, pos + done, &rows, last))
                return -1;
            done += chunk;
            if (last && (cuda_classify(s, chunk - 1, 1) || cuda_step_tail(s, tail, pos + n, 0))) return -1;
        }
    }
    return 0;
}

int cuda_step_run(CudaState *s, const int *tokens, int n, int pos, int tail) {
    if (cuda_step_queue(s, tokens, n, pos, tail)) return -1;
    CU(cudaStreamSynchronize(s->stream));
    if (cuda_persistent_timeline(s)) return -1;
    CU(cuda_phase_collect(s->clock));  // a timed decode step's phases (no-op otherwise)
    s->last_pos = pos + n - 1;
    s->logits_fresh = tail == TAIL_LOGITS;  // a proposal round leaves its logits on the device only
    return 0;
}

const float *emx_cuda_state_forward(EmxState *st, const int *tokens, int n, int pos) {
    CudaState *s = (CudaState *)st;
    return cuda_step_run(s, tokens, n, pos, TAIL_LOGITS) ? NULL : s->logits_h;
}

int emx_cuda_state_forward_all_logits(EmxState *st, const int *tokens, int n, int pos, float *logits) {
    CudaState *s = (CudaState *)st;
    if (cuda_step_check(s, tokens, n, pos)) return -1;
    CU(cudaSetDevice(s->device));
    s->logits_fresh = 0;
    const Rows rows = {.is_branches = 0};
    for (int done = 0; done < n;) {
        const int chunk = n - done < CHUNK ? n - done : CHUNK;
        if (send_input(s, tokens + done, chunk, pos + done, 0) || cuda_run_layers(s, chunk, pos + done, &rows, done + chunk == n) ||
            cuda_classify(s, 0, chunk))
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
const float *emx_cuda_state_attention_scores(const EmxState *cst, int *last_pos) {
    CudaState *s = (CudaState *)cst;
    const EmxConfig *c = &s->m->cfg;
    const size_t n = (size_t)c->n_layers * c->n_heads * s->ctx;
    cuda_settle_quiet(s);  // (the copy below is on the legacy stream: the state's must be idle)
    if (last_pos) *last_pos = s->last_pos;
    if (!s->scores_h && !(s->scores_h = malloc(n * sizeof(float)))) return NULL;
    if (cu(s, cudaSetDevice(s->device), "cudaSetDevice") ||
        cu(s, cudaMemcpy(s->scores_h, s->scores, n * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy (scores)"))
        return NULL;
    return s->scores_h;
}

// A host copy of the cache, made now: writes to it do not reach the device. f32 whatever the
// cache's type: an f16 cache comes over as it is and is widened here (exactly).
static int cache_to_host(CudaState *s, float *dst, const void *src, size_t n) {
    if (s->kv_type == EMX_KV_F32)
        return cu(s, cudaMemcpy(dst, src, n * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy (KV cache)");
    uint16_t *h = malloc(n * sizeof(uint16_t));
    int rc = !h || cu(s, cudaMemcpy(h, src, n * sizeof(uint16_t), cudaMemcpyDeviceToHost), "cudaMemcpy (KV cache)");
    if (!rc) emx_dequantize_row(EMX_F16, h, 1, n, 0, dst);
    free(h);
    return rc;
}

// A cache's rows (kv_rows of them, f32 in `rows`) laid out as [n_layers][ctx][kv_dim] in out: a
// ring layer's positions it no longer holds, or not yet written, as zeros (the CPU's as well).
static void cache_by_position(const CudaState *s, const float *rows, float *out) {
    const size_t kv = (size_t)s->kv_dim;
    for (int l = 0; l < (int)s->m->cfg.n_layers; l++)
        for (int p = 0; p < s->ctx; p++) {
            float *to = out + ((size_t)l * s->ctx + p) * kv;
            if (cuda_layer_ring(s, l) && !emx_kv_ring_has(&s->ring, p)) memset(to, 0, kv * sizeof(float));
            else memcpy(to, rows + (size_t)emx_kv_row(s->layers[l], p) * kv, kv * sizeof(float));
        }
}

void emx_cuda_state_kv_cache(EmxState *st, float **key, float **value, int *kv_dim) {
    CudaState *s = (CudaState *)st;
    const size_t n = (size_t)s->m->cfg.n_layers * s->ctx * s->kv_dim, have = (size_t)s->kv_rows * s->kv_dim;
    cuda_settle_quiet(s);
    if (!s->key_h) s->key_h = malloc(n * sizeof(float));
    if (!s->value_h) s->value_h = malloc(n * sizeof(float));
    float *rows = have < n ? malloc(have * sizeof(float)) : NULL;  // with rings: the rows as the device holds them
    int ok = s->key_h && s->value_h && (have == n || rows) && !cu(s, cudaSetDevice(s->device), "cudaSetDevice");
    for (int kv = 0; kv < 2 && ok; kv++) {
        float *h = kv ? s->value_h : s->key_h;
        ok = !cache_to_host(s, rows ? rows : h, kv ? s->value : s->key, have);
        if (ok && rows) cache_by_position(s, rows, h);
    }
    free(rows);
    if (key) *key = ok ? s->key_h : NULL;
    if (value) *value = ok ? s->value_h : NULL;
    if (kv_dim) *kv_dim = s->kv_dim;
}

// ---------------------------------------------------------------------------------------------
// Branches (forward.h): the tails on the device, the attention reading the prefix from the
// cache and the rest from the branch's tail (EmxAttentionArgs tail_k/tail_v).

int cuda_branch_pass(CudaState *s, const int *tokens, int n, int prefix, int step) {
    if (cuda_settle(s)) return -1;
    if (n < 1 || n > s->br_max || step < 0 || step >= s->br_tail || prefix < 1 || prefix + step >= s->ctx) {
        snprintf(s->err, sizeof s->err, "%s: branches: bad call (n %d, prefix %d, step %d)", s->device_name, n, prefix,
                 step);
        return -1;
    }
    if (check_tokens(s, tokens, n) || cuda_ring_check(s, prefix + step)) return -1;
    CU(cudaSetDevice(s->device));
    s->logits_fresh = 0;
    const Rows rows = {.is_branches = 1, .prefix = prefix, .step = step};
    if (send_input(s, tokens, n, prefix + step, 1) || cuda_run_layers(s, n, prefix + step, &rows, 0) || cuda_classify(s, 0, n))
        return -1;
    return 0;
}
