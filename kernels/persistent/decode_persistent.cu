// decode_persistent.cu — one decode step of a Llama-, Qwen- or Gemma-3-shaped model in one
// launch: a persistent kernel whose blocks run the fused graph path's kernels one after the other
// as phases, waiting for each other at a grid barrier where that path ends a kernel.
//
//   phase 0            x = emb[token] * embed_scale                    (embedding.cu's expression)
//   per layer l:  1    q, k, v = Wq|Wk|Wv rmsnorm(x)                   (matvec_fused.cuh, IN_NORM)
//                 2    att = attention(rope(q), cache + rope(k), v)    (attention_decode.cuh's blocks)
//                 3    x += Wo att                                     (IN_AS_IS, accumulate)
//                 4    hb = silu(Wg rmsnorm(x)) * (Wu rmsnorm(x))      (IN_NORM, GLU_SILU)
//                 5    x += Wdown hb                                   (IN_AS_IS, accumulate)
//   last               logits = Wout rmsnorm(x)                        (IN_NORM)
// The embedding and the classifier have the layers' dtype, or q8 beside 4-bit layers (a q4
// export's: the q4 kernels hold a q8 embedding and classifier phase too, so such a model's step
// is one launch as well).
// Gemma 3's layers (sandwich: each block's output normed before its residual add, which needs the
// whole output row) move the norm and the add into the next phase's prologue, as the fused path
// does (runtime/cuda/forward_cuda_fused.c), x and xb alternating as the residual row:
//   per layer l:  1    q, k, v = Wq|Wk|Wv rmsnorm(x)        x = xb + rmsnorm(tmp) * post_ffn_norm
//                                                           of layer l - 1 first (IN_RESIDUAL)
//                 2    the attention                        as above
//                 3    tmp = Wo att                         (IN_AS_IS)
//                 4    hb = gelu(Wg h) * (Wu h)             h = rmsnorm(x + rmsnorm(tmp) *
//                                                           post_attn_norm), written to xb
//                 5    tmp = Wdown hb                       (IN_AS_IS)
//   last               logits = Wout rmsnorm(x)             x = xb + rmsnorm(tmp) * post_ffn_norm
//                                                           of the last layer first
//   metrics (asked)    the logits' H, V, lse, argmax; the attention metrics of the layers asked
//                      (logits_metrics.cuh, attn_metrics.cuh: items over the grid, then the last
//                      block to finish merges them: the decision's inputs without a launch)
//   choice (asked)     the choice's passes over the logits (sampling/sampling_mb.cuh: the scan
//                      beside the metrics' items; then z, three levels of the radix select and
//                      the gather, a phase each, a 2048-logit chunk an item), each block deriving
//                      the entropix decision from the metrics it merged itself, or taking the
//                      fixed sampler's parameters; then the last block to finish sorts the
//                      batch, walks the filters and draws (entropix_block, or distribution_block
//                      and draw: sampling/sampling_device.cuh): the token chosen in the launch
//
// Threads: a grid of G blocks of 128 threads (4 warps), G = the blocks the device holds at once
// (occupancy x SMs: emx_cuda_decode_persistent_blocks), each phase's work spread over them as the
// fused kernels spread it over their own grids: a matvec phase's warp g takes rows g, g + 4G, ...
// (every block runs the prologue that makes the input in its shared memory first); the attention
// phase's block b takes items b, b + G, ... of (chunk of keys, KV head), item = chunk *
// n_kv_heads + kvh, each decode_block's work (the last block of a KV head's chunks combines its
// heads, as in the one-kernel attention). The phases' results are the fused kernels' bits: a row
// is computed by the same code whatever the grid.
// The barrier: a counter in global memory that only grows (grid_sync.cuh): at the end of phase k
// every block signals (+1) and waits until it reads k * G. Every phase needs all of the one
// before (each matvec row reads the whole input row; the attention's KV head h needs only heads of
// q, k and v, but the q/k/v phase's rows are spread over every block): one barrier a phase, five a
// layer. At the end the last block to arrive at a second counter sets the barrier back to zero
// (every other block is past its last wait), so the next launch, or a graph's replay, starts at 0;
// it has seen every block's writes, so it also merges the metrics or takes the decision.
// Weights before activations: between its signal and its wait a block asks L2 for the first rows
// its warps take in the next phase (emx_prefetch_l2; the attention phase, whose items are few at
// short contexts, for the two phases after it), so that the weights stream while it waits. The
// blocks the attention phase leaves without an item go further (EmxDecodeStep.warm_bytes, sm_90):
// each asks L2 for a slice of wo, gate, up and down with one bulk prefetch a matrix
// (emx_prefetch_l2_bulk), so that the four phases after the attention read their weights from L2.
// Residency: every block waits for every other, so all G must be resident at once: a cooperative
// launch (CUDA refuses a grid that does not fit rather than letting it hang), G from the occupancy
// API and the device's SM count, never a fixed number.
// The timeline (EmxDecodeStep.clocks): each block's clock at its start, at each phase's arrival
// and departure, and at its end; the runtime turns them into each phase's share of the launch.
// Bytes per step: the fused path's (the weights once, the activations from L2), without the
// launches: one instead of 1 + 5 n_layers + 1, and a barrier (G atomics and G polls of one
// counter) where each launch's ramp-up was.
// The code: decode_persistent.cuh (the phases and the kernel); here the checks and the entry
// points, and the instantiations for Llama's and Qwen's layers; Gemma 3's in
// decode_persistent_sandwich.cu.
#include "kernels/persistent/decode_persistent.cuh"

#include <stdio.h>

namespace {

const char *bad_arguments(const EmxDecodeStep *a) {
    if (!a->layers || !a->x || !a->q || !a->k || !a->v || !a->att || !a->hb || !a->attn_ws || !a->arrivals ||
        !a->sync || !a->pos)
        return "a layer table, activation, workspace, counter or the position is NULL";
    if (a->emb && !a->token) return "an embedding without the token";
    if (a->sandwich && (!a->xb || !a->tmp)) return "sandwich layers without xb or tmp";
    if (a->out && (!a->out_norm || !a->logits)) return "a classifier without its norm or the logits";
    const EmxDecodeMetrics &m = a->metrics;
    const EmxDecodeChoice &p = a->choice;
    if ((m.out || p.sample_ws) && !a->out) return "metrics or a choice without the classifier in the launch";
    if (m.out) {
        if (!m.logits_ws || (m.attn_layers > 0 && !m.attn_ws)) return "metrics without their workspace";
        if (m.attn_layers < 0 || m.attn_first < 0 || m.attn_first + m.attn_layers > a->n_layers)
            return "attention metrics of layers outside the model";
        if (m.attn_layers > 0 && a->n_heads > EMX_CUDA_ATTN_METRICS_MAX_HEADS)
            return "attention metrics of more heads than EMX_CUDA_ATTN_METRICS_MAX_HEADS";
    }
    if (!p.sample_ws) return nullptr;
    if (!p.token) return "a choice without its token's place";
    if (mb_chunks(a->vocab) == 0) return "a choice for a vocabulary below 8192 (no passes to spread)";
    if (p.fixed)  // emx_cuda_sample's passes: a draw with top-k on (off: its wide draw; greedy: one block)
        return p.params.temperature > 0.0f && p.params.top_k > 1 ? nullptr
                                                                  : "a fixed draw without temperature > 0 and top-k > 1";
    if (!m.out || m.attn_layers < 1) return "the entropix decision without the attention metrics it reads";
    if (!p.state) return "the entropix decision without its state";
    return nullptr;
}

}  // namespace

extern "C" int emx_cuda_decode_persistent_takes(uint32_t dtype, uint32_t edge) {
    return dtype <= EMX_Q4_1F && (edge == dtype || (uint32_t)edge_dtype((int)dtype) == edge);
}

extern "C" const char *emx_cuda_decode_persistent_refusal(const EmxDecodeStep *a) {
    if (!a) return "no arguments";
    if (a->n_layers < 1 || a->dim < 1 || a->hidden_dim < 1 || a->vocab < 1 || a->ctx < 1)
        return "a size below 1 (layers, dim, hidden_dim, vocab or ctx)";
    if (a->dtype > EMX_Q4_1F) return "a weight dtype the kernel is not built for";
    if (a->kv_dtype != EMX_KV_F16 && (a->kv_dtype != EMX_KV_F32 || a->dtype != EMX_F32))
        return "a cache it is not built for (the f16 cache, or f32 beside f32 weights: what auto gives)";
    const int q_dim = a->n_heads * a->head_dim;
    if (!emx_cuda_matvec_fused_fits(a->dtype, a->dim, 1) || !emx_cuda_matvec_fused_fits(a->dtype, q_dim, 1) ||
        !emx_cuda_matvec_fused_fits(a->dtype, a->hidden_dim, 1))
        return "dim, n_heads * head_dim or hidden_dim is not a multiple of 32 or its input does not fit in 48 KiB";
    if (!emx_cuda_attention_decode_fits(a->n_heads, a->n_kv_heads, a->head_dim, a->keys_per_block, a->kv_dtype))
        return "an attention shape the decode attention does not take (emx_cuda_attention_decode_fits)";
    if (a->rope_style != EMX_ROPE_INTERLEAVED && a->rope_style != EMX_ROPE_HALF) return "unknown rope style";
    if (a->sandwich && !emx_cuda_matvec_fused_residual_fits(a->dtype, a->dim, 1))
        return "sandwich layers whose residual row and input do not fit in 48 KiB (emx_cuda_matvec_fused_residual_fits)";
    if ((a->emb && !emx_cuda_decode_persistent_takes(a->dtype, a->emb_dtype)) ||
        (a->out && !emx_cuda_decode_persistent_takes(a->dtype, a->out_dtype)))
        return "an embedding or classifier dtype the launch does not take beside the layers' "
               "(emx_cuda_decode_persistent_takes)";
    if (a->out && (a->sandwich ? !emx_cuda_matvec_fused_residual_fits(a->out_dtype, a->dim, 1)
                               : !emx_cuda_matvec_fused_fits(a->out_dtype, a->dim, 1)))
        return "a classifier whose input does not fit in 48 KiB";
    return nullptr;
}

extern "C" int emx_cuda_decode_persistent_phases(const EmxDecodeStep *a) {
    const int passes = a->out && a->choice.sample_ws, after = passes || (a->out && a->metrics.out);
    return (a->emb ? 1 : 0) + 5 * a->n_layers + after + (passes ? 2 + MB_LEVELS : 0) + 1;
}

extern "C" cudaError_t emx_cuda_decode_persistent_blocks(const EmxDecodeStep *a, int *blocks) {
    *blocks = 0;
    if (emx_cuda_decode_persistent_refusal(a)) return cudaErrorInvalidValue;
    return a->sandwich ? emx_persistent::sandwich_blocks(a, blocks) : kind_blocks<false>(a, blocks);
}

extern "C" cudaError_t emx_cuda_decode_persistent(const EmxDecodeStep *a, cudaStream_t stream) {
    const char *why = emx_cuda_decode_persistent_refusal(a);
    if (!why) why = bad_arguments(a);
    int fit = 0;
    if (!why && emx_cuda_decode_persistent_blocks(a, &fit) != cudaSuccess) why = "the occupancy query failed";
    if (!why && (fit < 1 || a->blocks < 0 || a->blocks > fit)) why = "blocks < 0, or more than are resident at once";
    if (why) {
        fprintf(stderr, "emx_cuda_decode_persistent: %s\n", why);
        return cudaErrorInvalidValue;
    }
    const int blocks = a->blocks > 0 ? a->blocks : fit;
    return a->sandwich ? emx_persistent::sandwich_launch(a, blocks, stream) : kind_launch<false>(a, blocks, stream);
}
