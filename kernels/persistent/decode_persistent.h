// decode_persistent.h — the decode step of a Llama-, Qwen- or Gemma-3-shaped model in one
// persistent kernel (kernels/persistent/decode_persistent.cu): the embedding, every layer's five fused phases
// and the classifier as phases of one cooperative launch, its blocks waiting on each other at a
// grid barrier between phases instead of ending a kernel. The same arithmetic as the fused graph path
// (kernels/matvec_fused.cu, kernels/attention_decode.cu): the logits, score rows and KV rows are
// bitwise that path's.
#ifndef ENTROPIX_KERNELS_DECODE_PERSISTENT_H
#define ENTROPIX_KERNELS_DECODE_PERSISTENT_H

#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/attention.h"
#include "kernels/attn_metrics.h"
#include "kernels/sampling/sampling.h"

#ifdef __cplusplus
extern "C" {
#endif

// One layer, device pointers (a device table of them: EmxDecodeStep.layers). Every matrix of the
// step's dtype, rows of `cols` weights as kernels/weights.h stores them:
//   wq [q_dim][dim], wk, wv [kv_dim][dim], wo [dim][q_dim], gate, up [hidden_dim][dim],
//   down [dim][hidden_dim]   (q_dim = n_heads * head_dim, kv_dim = n_kv_heads * head_dim)
typedef struct {
    const void *wq, *wk, *wv, *wo, *gate, *up, *down;
    const float *attn_norm, *ffn_norm;  // [dim]
    const float *post_attn_norm, *post_ffn_norm;  // [dim] Gemma 3's sandwich norms (with sandwich)
    const float *q_norm, *k_norm;       // [head_dim] (Qwen3's per-head norms), or NULL (both or neither)
    const float *bq, *bk, *bv;          // [q_dim], [kv_dim], [kv_dim] (Qwen2's biases), or NULL (all or none)
    const double *inv_freq;             // [head_dim / 2] the layer's RoPE frequencies
    void *k_cache, *v_cache;            // the layer's rows of kv_dtype [rows][kv_dim]
    int cache_rows;                     // 0 (ctx rows), or the rows of its ring (attention.h)
    int window;                         // 0, or the sliding window of keys it attends
    float *scores;                      // [n_heads][ctx] the step's score rows, or NULL
    EmxSoftmaxStats *head_stats;        // [n_heads] (with scores), or NULL
} EmxDecodeLayer;

// The decision's statistics, made in the launch after the classifier (EmxDecodeStep.metrics):
// the logits' entropy, varentropy, log-sum-exp and argmax as emx_cuda_logits_metrics writes them,
// and the attention metrics of layers [attn_first, attn_first + attn_layers) as
// emx_cuda_attn_metrics_window does from the same score rows (each layer's table entry: its
// scores, head_stats and window: the scores must be recorded for those layers), bitwise those
// kernels' results. Device pointers.
typedef struct {
    EmxMetrics *out;            // NULL: none (the launch ends with the logits); else its logits_*
                                // fields, and its attn_* fields with attn_layers
    int *argmax;                // the logits' argmax (emx_sample_argmax's: greedy's token), or NULL
    void *logits_ws;            // emx_cuda_logits_metrics_workspace_bytes(vocab) bytes
    void *attn_ws;              // emx_cuda_attn_metrics_workspace_bytes(attn_layers) bytes
    int attn_first, attn_layers;  // 0 layers: the logits' metrics alone
} EmxDecodeMetrics;

// The choice of the token, made in the launch after the classifier (EmxDecodeStep.choice): its
// passes over the vocabulary as emx_cuda_entropix_step's or emx_cuda_sample's many-block passes make
// them (kernels/sampling/sampling_mb.cuh: the scan of each 2048-logit chunk, z for top-p, three
// levels of the radix select of the first batch, the gather of its keys), bitwise, each block
// deriving the entropix decision from the step's metrics and the state, or taking the fixed
// parameters; then the last block to finish takes the choice as those functions' last kernel does
// (entropix: sorts the batch, walks the filters, draws, updates the state; fixed: builds the
// distribution and draws), a block of 128 threads where that kernel has 1024: the same token,
// decision, score and state. Device pointers.
typedef struct {
    void *sample_ws;          // NULL: none; else emx_cuda_sample_workspace_bytes(vocab) bytes,
                              // vocab >= 8192 (emx_cuda_sample_grid(vocab) > 1)
    int fixed;                // 0: the entropix decision (reads the metrics' attention); 1: a draw
                              // with params, as emx_cuda_sample's
    EmxSamplerParams params;  // (fixed) temperature > 0 and top_k > 1: the passes' draw (with top-k
                              // off emx_cuda_sample takes its wide draw, which the launch does not make)
    EmxEntropixState *state;  // (entropix) the switch's state: read by every block, updated by the decision
    EmxProfile profile;       // (entropix) the decision's profile (by value)
    int pause_token;          // (entropix)
    uint64_t seed, step;      // the draws: emx_uniform_f64(seed, step, lane 0), as those functions'
    const uint64_t *step_dev; // device: the step read in the launch (a graph's replays), or NULL: step
    int *token;               // the chosen id
    EmxDecision *decision;    // (entropix) the decision, or NULL
    double *score;            // (entropix) the best-of-N score (NAN otherwise), or NULL
} EmxDecodeChoice;

// The step: shapes, weights, activations and the step's input, device pointers.
typedef struct {
    int n_layers, dim, hidden_dim, n_heads, n_kv_heads, head_dim, vocab, ctx;
    uint32_t dtype;        // every layer's matrices' (enum emx_dtype)
    uint32_t emb_dtype, out_dtype;  // emb's and out's: dtype, or EMX_Q8 beside 4-bit layers (a q4
                           // export keeps them at q8: emx_cuda_decode_persistent_takes)
    int kv_dtype;          // EMX_KV_F32 or EMX_KV_F16
    float eps;             // the RMSNorms'
    float attn_scale;      // 0: 1 / sqrt(head_dim)
    float embed_scale;     // the embedding row's factor (1, or Gemma's sqrt(dim))
    int rope_style;        // enum emx_rope_style
    int sandwich;          // 0: Llama/Qwen layers (x += Wo att; SwiGLU; x += Wdown hb); 1: Gemma 3's
                           // (each block's output normed before the add, GeGLU), every layer
    int keys_per_block;    // the attention's chunk of keys (0: the default, attention.h)
    size_t warm_bytes;     // 0, or the most bytes of wo, gate, up and down the blocks without an
                           // attention item ask L2 for while that phase runs (sm_90)
    const EmxDecodeLayer *layers;  // [n_layers]
    const void *emb;       // [vocab][dim], or NULL: x holds the step's embedding already
    const void *out;       // the classifier [vocab][dim], or NULL: the launch ends after the layers
    const float *out_norm; // [dim] the output norm (with out)
    float *x;              // [dim] the residual stream
    float *q, *k, *v;      // [q_dim], [kv_dim], [kv_dim]
    float *att;            // [q_dim]
    float *hb;             // [hidden_dim]
    float *xb, *tmp;       // [dim] (sandwich) the residual row's other half, a block's output
    float *logits;         // [vocab] (with out)
    void *attn_ws;         // emx_cuda_attention_workspace_bytes(EMX_ATTN_SPLIT_GQA, n_heads, head_dim,
                           // ctx, keys_per_block) bytes
    unsigned *arrivals;    // [n_kv_heads] the attention's counters: zero before the first launch
    unsigned *sync;        // [2] the grid barrier's counters: zero before the first launch
    const int *token;      // device int: the step's token id (with emb)
    const int *pos;        // device int: its position; keys 0..pos attended, cache row pos written
    EmxDecodeMetrics metrics;  // with out: the decision's statistics in the same launch, or none
    EmxDecodeChoice choice;    // with out: the token chosen after them (entropix: with the metrics
                               // and their attention's), or none
    long long *clocks;     // NULL, or the timeline: [phases + 1][blocks][2] (phases:
                           // emx_cuda_decode_persistent_phases) of each block's clock (an SM's
                           // cycles: only one block's differences mean anything): slot 0 its start
                           // (both), slot k + 1 phase k's end [0] (after the block's arrival at the
                           // barrier) and its departure [1] (the wait over); the last phase's two
                           // stamps its end. Phases in order: the embedding (with emb), five a layer
                           // (q/k/v, attention, wo, gate/up, down), the classifier when the metrics
                           // or the choice follow it, the metrics (and the passes' scan) when the
                           // choice follows them (then four: z, three levels), then what follows
                           // the last barrier (the metrics, the gather and the choice, the
                           // classifier, or nothing): the last block's end stamp follows its merge
                           // or choice
    int blocks;            // the grid: 0 for emx_cuda_decode_persistent_blocks's, else at most that
} EmxDecodeStep;

// 1 when the launch takes an embedding or a classifier of dtype `edge` beside layers of `dtype`:
// the same dtype, or q8 beside 4-bit layers (q4, q4_1, q4_1f: the converter keeps a q4 export's
// embeddings at q8). Else 0: the runtime gives them launches of their own.
int emx_cuda_decode_persistent_takes(uint32_t dtype, uint32_t edge);

// NULL when the step's shapes can run as one persistent launch, else why not (one line: a width
// that is not a multiple of 32, an input beyond 48 KiB of shared memory, an attention shape the
// decode attention does not take, a dtype it is not built for).
const char *emx_cuda_decode_persistent_refusal(const EmxDecodeStep *a);

// The phases a launch of the step stamps in its timeline (EmxDecodeStep.clocks).
int emx_cuda_decode_persistent_phases(const EmxDecodeStep *a);

// The most blocks of the step's kernel that are resident at once on the current device (the
// occupancy API x the SM count): the grid a launch takes when a->blocks is 0. 0 (with
// cudaSuccess) when not one fits.
cudaError_t emx_cuda_decode_persistent_blocks(const EmxDecodeStep *a, int *blocks);

// One decode step: x = emb[*token] * embed_scale; every layer; logits = out rmsnorm(x); the
// metrics (a->metrics, with out: its items spread over the grid, merged by the last block, or,
// with a->choice, by every block for the passes' decision and by block 0 into a->metrics.out);
// the choice (a->choice: its passes, then the last block decides and draws). One
// cooperative launch (CUDA refuses a grid whose blocks cannot all be resident: every block
// waits for every other at each phase's end). Leaves arrivals and sync zero, so a captured graph
// replays it. Bad arguments (emx_cuda_decode_persistent_refusal, NULL pointers, blocks beyond
// what fits): cudaErrorInvalidValue, a line on stderr naming it, nothing launched.
cudaError_t emx_cuda_decode_persistent(const EmxDecodeStep *a, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
