// forward_cuda_multi.c — several states' rows in one CUDA step (emx_forward_multi).
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

// Several states in one step (emx_forward_multi): states[0]'s scratch runs the n rows through
// the fused decode layer (forward_cuda_fused.c): every matvec takes all rows in one launch (each
// weight read once for all, each row normed and quantised on its own in the prologue); RoPE, the
// KV writes and the attention of all rows are one launch a layer (forward_cuda_layers.c's
// cuda_multi_attention, emx_cuda_attention_decode_rows: grid z the row, each row over its own
// state's cache, position, score rows, workspace and counters, from a table the step copies to
// the device once): five launches a layer, each row bitwise its state's own decode step. More
// rows than the fused layer takes (EMX_CUDA_FUSED, EMX_FUSED_MAX_ROWS by default; 1 keeps every
// such step off it) run the separate kernels as one batch (about a dozen launches a layer) with
// the same one-launch attention; where that attention does not apply (EMX_CUDA_FUSED=0, a shape
// it does not take, rows with caches of different types), rope_kv and the attention run per row
// (forward_cuda_layers.c's rope_multi, attention_multi).
// A server's busy slots run the same rows step after step (their generations' tokens): when a
// call has the rows of the call before, its step is captured into a graph (multi_step below),
// which later calls with those rows replay.

// Row i's entry of the step's attention table: states[i]'s buffers (layer 0's) and position.
static EmxAttnDecodeRow attention_row(const CudaState *o, int pos) {
    const EmxAttnDecodeRow row = {o->key,           o->value,         o->layers_d, o->scores, o->head_stats,
                                  o->attn_ws,       o->attn_arrivals, o->ctx,      pos};
    return row;
}

// Why states[0..n) cannot run as one step led by s (its err set), or 0 when they can.
static int multi_refused(CudaState *s, EmxState *const *states, const int *tokens, const int *pos, int n) {
    const char *d = s->device_name;
    if (n < 1 || n > CHUNK)
        return snprintf(s->err, sizeof s->err, "%s: forward_multi: %d rows (1..%d a step)", d, n, CHUNK), -1;
    for (int i = 0; i < n; i++) {
        CudaState *r = (CudaState *)states[i];
        if (r->base.backend == s->base.backend && cuda_settle(r))  // its step queued ahead, on its own stream
            return snprintf(s->err, sizeof s->err, "%s", r->err), -1;
        if (r->base.backend != s->base.backend || r->w != s->w)
            return snprintf(s->err, sizeof s->err, "%s: forward_multi: row %d's state (%s) does not share the first "
                            "state's uploaded weights (another model or device, or made without share_weights)",
                            d, i, r->base.backend == s->base.backend ? r->device_name : "not CUDA"), -1;
        for (int j = 0; j < i; j++)
            if (states[j] == states[i])
                return snprintf(s->err, sizeof s->err, "%s: forward_multi: rows %d and %d are one state", d, j, i), -1;
        if (pos[i] < 0 || pos[i] >= r->ctx)
            return snprintf(s->err, sizeof s->err, "%s: forward_multi: row %d: position %d outside the context of %d",
                            d, i, pos[i], r->ctx), -1;
        if (tokens[i] < 0 || tokens[i] >= s->vocab)
            return snprintf(s->err, sizeof s->err, "%s: forward_multi: row %d: token id %d out of range [0, %d)", d,
                            i, tokens[i], s->vocab), -1;
        const char *gone = emx_kv_ring_refusal(&r->ring, pos[i]);
        if (gone) return snprintf(s->err, sizeof s->err, "%s: forward_multi: row %d: %s", d, i, gone), -1;
    }
    for (int i = 0; i < n; i++) emx_kv_ring_wrote(&((CudaState *)states[i])->ring, pos[i]);  // written from here on
    return 0;
}

// The step's launches once the host tables (in_h, rows_h) are filled: their copies, the layers,
// the classifier and each row's logits into its state, on the device and on the host. graph:
// being captured: the attention's grid covers the rows' whole contexts, each row's position
// read from the table at each replay. The layers and the classifier are programmatic launches
// where the state has PDL (s->pdl_now, as a decode step's: the fused kernels carry it, the
// embedding after the copies does not).
static int multi_launches(CudaState *s, EmxState *const *states, const int *pos, int n, int graph) {
    CU(cudaMemcpyAsync(s->in_d, s->in_h, sizeof(StepInput), cudaMemcpyHostToDevice, s->stream));
    CU(cudaMemcpyAsync(s->rows_d, s->rows_h, (size_t)n * sizeof *s->rows_h, cudaMemcpyHostToDevice, s->stream));
    const Rows rows = {.multi = (CudaState *const *)states, .multi_pos = pos, .device_positions = graph};
    s->pdl_now = s->pdl;
    const int bad = cuda_run_layers(s, n, 0, &rows, 1) || cuda_classify(s, 0, n);
    s->pdl_now = 0;
    if (bad) return -1;
    const size_t row_bytes = (size_t)s->vocab * sizeof(float);
    for (int i = 0; i < n; i++) {
        CudaState *r = (CudaState *)states[i];
        const float *mine = s->logits + (size_t)i * s->vocab;
        // into the state's own logits row 0 too: emx_state_propose reads them there
        if (i) CU(cudaMemcpyAsync(r->logits, mine, row_bytes, cudaMemcpyDeviceToDevice, s->stream));
        CU(cudaMemcpyAsync(r->logits_h, mine, row_bytes, cudaMemcpyDeviceToHost, s->stream));
    }
    return 0;
}

// The rows as a graph's key (MultiKey): a state freed and another made at its address either has
// other buffers (another key) or the same ones, which the graph then writes as rightly.
static void multi_key_of(EmxState *const *states, int n, MultiKey *k) {
    memset(k, 0, sizeof *k);
    k->n = n;
    for (int i = 0; i < n; i++) {
        const CudaState *r = (const CudaState *)states[i];
        k->rows[i][0] = r, k->rows[i][1] = r->logits, k->rows[i][2] = r->logits_h;
    }
}

// The step: replayed when the rows are the graph's; captured when the call before had these rows
// too (a set of rows seen once runs its launches directly: a capture costs more than one step).
// Direct launches always where a row's position would be baked into a launch (the rows' separate
// kernels: EMX_CUDA_FUSED=0, a shape or caches the one-launch attention does not take), and
// without graphs (no_graphs, a timeline).
static int multi_step(CudaState *s, EmxState *const *states, const int *pos, int n) {
    const Rows rows = {.multi = (CudaState *const *)states, .multi_pos = pos};
    MultiKey key;
    multi_key_of(states, n, &key);
    const int again = memcmp(&key, &s->multi_last, sizeof key) == 0;
    s->multi_last = key;
    if (s->no_graphs || s->clock || !cuda_multi_attention_fused(s, n, &rows))
        return multi_launches(s, states, pos, n, 0);
    if (!s->multi_graph || memcmp(&key, &s->multi_key, sizeof key) != 0) {
        if (!again) return multi_launches(s, states, pos, n, 0);
        if (s->multi_graph) cudaGraphExecDestroy(s->multi_graph);
        s->multi_graph = NULL, s->multi_graph_nodes = 0;
        CU(cudaStreamBeginCapture(s->stream, cudaStreamCaptureModeThreadLocal));
        if (cuda_capture_end(s, multi_launches(s, states, pos, n, 1), &s->multi_graph, &s->multi_graph_nodes))
            return -1;
        s->multi_key = key;
        s->multi_captures++;
    }
    CU(cudaGraphLaunch(s->multi_graph, s->stream));
    return 0;
}

int emx_cuda_state_forward_multi(EmxState *const *states, const int *tokens, const int *pos, int n,
                                 const float **logits) {
    CudaState *s = (CudaState *)states[0];
    if (multi_refused(s, states, tokens, pos, n)) return -1;
    CU(cudaSetDevice(s->device));
    for (int i = 0; i < n; i++) {
        s->in_h->tokens[i] = tokens[i];
        s->in_h->pos[i] = pos[i];
        s->in_h->rows[i] = i;
        s->rows_h[i] = attention_row((const CudaState *)states[i], pos[i]);
    }
    if (multi_step(s, states, pos, n)) return -1;
    CU(cudaStreamSynchronize(s->stream));
    for (int i = 0; i < n; i++) {
        CudaState *r = (CudaState *)states[i];
        r->last_pos = pos[i];
        r->logits_fresh = 1;
        logits[i] = r->logits_h;
    }
    return 0;
}
