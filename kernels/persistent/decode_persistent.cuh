// decode_persistent.cuh — the persistent decode kernel's device code: its phases, the kernel
// template, its occupancy and its launch (what it computes, how its threads map to the data and
// the bytes it moves: decode_persistent.cu's opening). Included by the two files that compile its
// instantiations: decode_persistent.cu (Llama's and Qwen's layers, and the public entry points)
// and decode_persistent_sandwich.cu (Gemma 3's sandwich layers), 8 kernels each (7 weight dtypes
// with the f16 cache, f32 weights with the f32 one: kind_blocks). Two files so that two cores
// compile them at once: each is still the longest single step of a CUDA build (~10 s of ptxas a
// kernel and arch on the 2-core build machine).
#ifndef ENTROPIX_KERNELS_DECODE_PERSISTENT_CUH
#define ENTROPIX_KERNELS_DECODE_PERSISTENT_CUH

#include "kernels/persistent/decode_persistent.h"

#include "kernels/attention_decode.cuh"
#include "kernels/attention_decode.h"
#include "kernels/attn_metrics.cuh"
#include "kernels/logits_metrics.cuh"
#include "kernels/matvec_fused.cuh"
#include "kernels/matvec_fused.h"
#include "kernels/rope.h"
#include "kernels/sampling/sampling_mb.cuh"
#include "kernels/weights.h"

#define PERSIST_THREADS FUSED_THREADS
static_assert(FUSED_THREADS == ATTN_BLOCK, "one block size serves the matvec and attention phases");
static_assert(2 * PERSIST_THREADS == LM_BLOCK && 2 * PERSIST_THREADS == AM_BLOCK && 2 * PERSIST_THREADS == MB_THREADS,
              "a thread of the metrics and passes phases is two lanes of those kernels' blocks");

namespace {

using namespace emx_fused;

// The grid barrier: `target` is what the counter reads once every block has finished the phases
// so far. arrive() publishes the block's writes; wait() returns when all blocks have arrived.
// With the timeline's stamps (EmxDecodeStep.clocks, which thread 0 keeps in shared memory: held
// in registers across the kernel the pointer cost an f32 instantiation a third of its blocks),
// thread 0 stamps slot k + 1's pair for phase k (target / blocks phases ended before it): [0] after
// its block's arrival, [1] when it leaves the wait; slot 0 holds the block's start, the last slot
// its end (stamp_end).
struct GridBarrier {
    unsigned *counter;
    unsigned target;
    long long *const &clocks;  // thread 0's copy in shared memory (its address a constant)
    __device__ __forceinline__ void stamp(unsigned slot, int which) const {
        if (!emx_grid_leader()) return;
        long long *c = clocks;
        if (c) c[(slot * gridDim.x + blockIdx.x) * 2u + which] = emx_clock();  // (32-bit: < 2^31 stamps)
    }
    __device__ __forceinline__ void arrive() {
        target += gridDim.x;
        emx_grid_signal(counter, 1);
        stamp(target / gridDim.x, 0);
    }
    __device__ __forceinline__ void wait() const {
        emx_grid_wait(counter, target);
        stamp(target / gridDim.x, 1);
    }
    // The start (slot 0), and the end of the launch's last phase, which no barrier closes.
    __device__ __forceinline__ void stamp_start() const { stamp(0, 0), stamp(0, 1); }
    __device__ __forceinline__ void stamp_end() const {
        stamp(target / gridDim.x + 1, 0), stamp(target / gridDim.x + 1, 1);
    }
};

// The dtype the embedding and the classifier may have beside layers of `dt` other than dt: q8
// beside 4-bit layers (the converter keeps a q4 export's embeddings at q8), else dt itself (no
// second instantiation of their phases in the kernel).
__host__ __device__ constexpr int edge_dtype(int dt) {
    return dt == EMX_Q4 || dt == EMX_Q4_1 || dt == EMX_Q4_1F ? (int)EMX_Q8 : dt;
}

// The first row each of this block's warps takes in a matvec phase over [W_0; W_1; W_2] (and W2),
// into L2. Nothing under the emulator or before sm_90 (emx_prefetch_l2).
template <int DT, int GLU>
__device__ __forceinline__ void prefetch_phase(const MatvecSet &set, const void *W2, int cols) {
    const int g = (int)blockIdx.x * FUSED_WARPS + (int)(threadIdx.x >> 5);
    if (g >= set.rows[0] + set.rows[1] + set.rows[2]) return;
    const SetRow row = set_row(set, g);
    prefetch_row<DT>(row.W, cols, row.r);
    if constexpr (GLU != GLU_NONE) prefetch_row<DT>(W2, cols, row.r);
}

// L2 warmed while the attention phase runs. Its items are few at short contexts (a 64-key chunk
// of a KV head each: 16 items at 100 positions with 8 KV heads, on a grid of hundreds of blocks),
// so the blocks it leaves without one ask L2 for the weights the next phases read: wo, gate, up,
// down, in that order, a.warm_bytes of them at most. Idle block i of n takes the i-th slice of
// each matrix (16-byte aligned, a multiple of 16 bytes: one bulk prefetch a matrix, by thread 0).
template <int DT>
__device__ __forceinline__ void warm_next_phases(const EmxDecodeStep &a, const EmxDecodeLayer *L, int items) {
    const int idle = (int)gridDim.x - items, i = (int)blockIdx.x - items;
    if (a.warm_bytes == 0 || i < 0 || !emx_grid_leader()) return;
    const void *W[4] = {L->wo, L->gate, L->up, L->down};
    const size_t ffn = emx_tensor_bytes(DT, a.hidden_dim, a.dim);  // (base/model_format.h)
    const size_t bytes[4] = {emx_tensor_bytes(DT, a.dim, a.n_heads * a.head_dim), ffn, ffn,
                             emx_tensor_bytes(DT, a.dim, a.hidden_dim)};
    size_t left = a.warm_bytes;
    for (int m = 0; m < 4 && left > 0; m++) {
        const size_t n = bytes[m] < left ? bytes[m] : left;  // of this matrix, from its start
        left -= n;
        const size_t slice = (n / (size_t)idle + 16) & ~(size_t)15, at = (size_t)i * slice;
        if (at >= n || (uintptr_t)W[m] % 16 != 0) continue;
        size_t len = (n - at < slice ? n - at : slice) & ~(size_t)15;  // (a last tail < 16 bytes: not asked)
        len = len < (1u << 30) ? len : (1u << 30);
        if (len > 0) emx_prefetch_l2_bulk((const char *)W[m] + at, (unsigned)len);
    }
}

// A set of up to three matrices and their outputs, rows each.
__device__ __forceinline__ MatvecSet set_of(const void *W0, float *o0, int n0, const void *W1 = nullptr,
                                            float *o1 = nullptr, int n1 = 0, const void *W2 = nullptr,
                                            float *o2 = nullptr, int n2 = 0) {
    MatvecSet s;
    s.W[0] = W0, s.W[1] = W1, s.W[2] = W2;
    s.out[0] = o0, s.out[1] = o1, s.out[2] = o2;
    s.rows[0] = n0, s.rows[1] = n1, s.rows[2] = n2;
    return s;
}

// A matvec phase: the set's rows against the input, by the blocks that have rows (a block with
// none skips the prologue: block-uniform, so the barriers inside are skipped by all its threads).
template <int DT, int GLU, int INPUT>
__device__ __forceinline__ void matvec_phase(const MatvecSet &set, const void *W2, int cols, const FusedIn &in,
                                             int accumulate, float *smem) {
    if ((int)blockIdx.x * FUSED_WARPS >= set.rows[0] + set.rows[1] + set.rows[2]) return;
    fused_rows<DT, GLU, INPUT>(set, W2, cols, in, accumulate, smem);
}

// Phase 0: x = emb[token] * scale, embedding_kernel's expression, columns spread over the grid.
template <int DT>
__device__ __forceinline__ void embed_phase(const EmxDecodeStep &a) {
    const int tok = *a.token;
    const bool valid = tok >= 0 && tok < a.vocab;
    for (int c = (int)(blockIdx.x * blockDim.x + threadIdx.x); c < a.dim; c += (int)(gridDim.x * blockDim.x))
        a.x[c] = valid ? emx_weight_at<DT>(a.emb, a.vocab, a.dim, tok, c) * a.embed_scale : 0.0f;
}

// The attention's shared memory beside the dynamic one (the attention kernels' statics).
struct AttnShared {
    float red_f[ATTN_BLOCK];
    FixedMaxSumsT red_s[ATTN_BLOCK];
    float inv[ATTN_MAX_GROUP];
    int last;
};

// Phase 2 of layer L: the block's (chunk, KV head) items of the one query row at pos. Returns
// the phase's items (all blocks').
template <typename KV>
__device__ __forceinline__ int attention_phase(const EmxDecodeStep &a, const EmxDecodeLayer *L, int pos,
                                               float *smem, AttnShared &sh_mem) {
    const DecodeRope rp = {L->inv_freq, L->q_norm, L->k_norm, L->bq, L->bk, L->bv, a.eps, a.rope_style};
    const DecodeShape sh = decode_shape(a.n_heads, a.n_kv_heads, a.head_dim, a.keys_per_block, a.attn_scale, L->window);
    DecodeRow<KV> row;
    row.q = a.q, row.k = a.k, row.v = a.v;
    row.k_cache = (KV *)L->k_cache, row.v_cache = (KV *)L->v_cache;
    row.ring = L->cache_rows;
    row.pos = pos, row.n_keys = pos + 1;
    row.out = a.att;
    row.scores = L->scores, row.score_stride = a.ctx, row.head_stats = L->head_stats;
    row.max_chunks = (a.ctx + sh.chunk - 1) / sh.chunk;  // the workspace's layout: the graph path's
    row.ws = split_ws(a.attn_ws, a.n_heads, row.max_chunks, 1);
    row.arrivals = a.arrivals;
    const int items = row_chunks(sh.rows, row.n_keys, sh.chunk) * a.n_kv_heads;
    for (int it = (int)blockIdx.x; it < items; it += (int)gridDim.x)
        decode_block(rp, sh, row, it / a.n_kv_heads, it % a.n_kv_heads, smem, sh_mem.red_f, sh_mem.red_s,
                     sh_mem.inv, &sh_mem.last);
    return items;
}

// Layer l's five phases, each ended by the barrier (the next phase's weights asked for between
// the block's arrival and its wait).
template <int DT, typename KV>
__device__ __forceinline__ void layer_phases(const EmxDecodeStep &a, const EmxDecodeLayer *L, int pos,
                                             GridBarrier &bar, float *smem, AttnShared &sh_mem) {
    const int q_dim = a.n_heads * a.head_dim, kv_dim = a.n_kv_heads * a.head_dim;
    const MatvecSet wo = set_of(L->wo, a.x, a.dim), down = set_of(L->down, a.x, a.dim);
    const MatvecSet gate = set_of(L->gate, a.hb, a.hidden_dim);
    matvec_phase<DT, GLU_NONE, IN_NORM>(set_of(L->wq, a.q, q_dim, L->wk, a.k, kv_dim, L->wv, a.v, kv_dim), nullptr,
                                        a.dim, plain_input(a.x, L->attn_norm, a.eps, a.dim), 0, smem);
    bar.arrive();
    bar.wait();
    const int items = attention_phase<KV>(a, L, pos, smem, sh_mem);
    bar.arrive();
    prefetch_phase<DT, GLU_NONE>(wo, nullptr, q_dim);  // few attention items: most blocks wait here
    prefetch_phase<DT, GLU_SILU>(gate, L->up, a.dim);
    warm_next_phases<DT>(a, L, items);
    bar.wait();
    matvec_phase<DT, GLU_NONE, IN_AS_IS>(wo, nullptr, q_dim, plain_input(a.att, nullptr, a.eps, q_dim), 1, smem);
    bar.arrive();
    bar.wait();
    matvec_phase<DT, GLU_SILU, IN_NORM>(gate, L->up, a.dim, plain_input(a.x, L->ffn_norm, a.eps, a.dim), 0, smem);
    bar.arrive();
    prefetch_phase<DT, GLU_NONE>(down, nullptr, a.hidden_dim);
    bar.wait();
    matvec_phase<DT, GLU_NONE, IN_AS_IS>(down, nullptr, a.hidden_dim,
                                         plain_input(a.hb, nullptr, a.eps, a.hidden_dim), 1, smem);
    bar.arrive();
}

// The metrics' and the decision's shared memory in the dynamic one (the logits' chunk and scratch,
// a layer's heads, the passes' scratch, or the deciding block's batch and scratch).
size_t metrics_smem(int n_heads) {
    const size_t b[4] = {emx_lm::smem_bytes(PERSIST_THREADS), emx_am::smem_bytes(n_heads, PERSIST_THREADS),
                         mb_smem_bytes(PERSIST_THREADS), block_smem_bytes(PERSIST_THREADS)};
    size_t most = 0;
    for (size_t x : b) most = x > most ? x : most;
    return most;
}

// The metrics phase (a.metrics): the logits' chunks, then the attention's layers, as items over
// the grid, each a block function of the metrics kernels run as two of their threads a thread,
// then (a.choice) the passes' scan of each chunk: the scan alone for a fixed draw without the
// metrics. The score rows of a layer from its first visible
// key (its window's, as the metrics kernel's).
__device__ EMX_NOINLINE void metrics_phase(const EmxDecodeStep &a, int pos, float *smem) {
    const EmxDecodeMetrics &m = a.metrics;
    const int parts = m.out ? emx_lm::parts_of(a.vocab) : 0, layers = m.out ? m.attn_layers : 0, n_keys = pos + 1;
    const MbWs w = a.choice.sample_ws ? sample_ws_passes(a.choice.sample_ws, a.vocab) : MbWs{};
    for (int it = (int)blockIdx.x; it < parts + layers + w.G; it += (int)gridDim.x) {
        if (it >= parts + layers) {
            mb_scan_chunk(a.logits, a.vocab, w, it - parts - layers, 0, mb_smem_at(smem, PERSIST_THREADS));
            continue;
        }
        if (it < parts) {
            emx_lm::partial_block<2>(a.logits, a.vocab, it, (emx_lm::Partial *)m.logits_ws + it,
                                     emx_lm::Smem{smem, smem + LM_CHUNK});
            continue;
        }
        const int i = it - parts;
        const EmxDecodeLayer *L = a.layers + m.attn_first + i;
        const int k0 = L->window > 0 && n_keys > L->window ? n_keys - L->window : 0;
        emx_am::layer_block<2>(L->scores + k0, L->head_stats, a.n_heads, a.ctx, n_keys - k0,
                               (EmxAttnLayerMetrics *)m.attn_ws + i, emx_am::smem_at(smem, a.n_heads));
    }
}

// The merge of the metrics phase's items into *out (and the argmax, where asked), by a block that
// has seen every block's writes (the last to leave, or any after the next barrier).
__device__ EMX_NOINLINE void metrics_merge(const EmxDecodeStep &a, float *smem, EmxMetrics *out, int *argmax) {
    const EmxDecodeMetrics &m = a.metrics;
    emx_lm::merge_block<2>((const emx_lm::Partial *)m.logits_ws, emx_lm::parts_of(a.vocab), out, argmax, nullptr, smem);
    if (m.attn_layers > 0 && threadIdx.x == 0)
        emx_am::average((const EmxAttnLayerMetrics *)m.attn_ws, m.attn_layers, out);
}

// The choice's passes (a.choice) after the metrics phase's barrier, as mb_launch's kernels make
// them, a chunk of the logits an item in each phase: every block merges the metrics, where the
// launch makes them (block 0 into a.metrics.out, the others into `mine`: the same bits), and
// derives the entropix decision from them, or takes the fixed parameters, and each level's state
// from the phase before, the same way; block 0 stores the states for the choice (decide_choice).
// The last phase (the gather) ends at the launch's last counter.
__device__ __forceinline__ void passes_phases(const EmxDecodeStep &a, GridBarrier &bar, float *smem,
                                              EmxMetrics *mine) {
    EmxMetrics *mt = blockIdx.x == 0 ? a.metrics.out : mine;
    if (a.metrics.out) {
        metrics_merge(a, smem, mt, blockIdx.x == 0 ? a.metrics.argmax : nullptr);
        __syncthreads();  // thread 0's average, for every thread's decision
    }
    const EmxDecodeChoice &c = a.choice;
    ParamSrc ps = {};
    ps.kind = c.fixed ? PS_FIXED : PS_ENTROPIX;
    ps.sp = c.params;
    ps.metrics = mt;
    ps.prof = c.profile;
    ps.state = c.state;
    ps.pause_token = c.pause_token;
    const MbWs w = sample_ws_passes(c.sample_ws, a.vocab);
    const MbSmem sm = mb_smem_at(smem, PERSIST_THREADS);
    const int G = w.G, b0 = (int)blockIdx.x, step = (int)gridDim.x;
    const RowSetup r = row_setup_of(ps, w, 0, sm);
    if (r.need_z)  // (the same for every thread)
        for (int c = b0; c < G; c += step) mb_z_chunk<2>(a.logits, a.vocab, r, w, c, 0, sm);
    bar.arrive();
    bar.wait();
    for (int level = 0; level < MB_LEVELS; level++) {
        const MbState s = mb_level_state<2>(ps, w, 0, level, sm);
        if (b0 == 0 && threadIdx.x == 0) *mb_slot(w, 0, level) = s;
        if (!s.stop)
            for (int c = b0; c < G; c += step) mb_hist_chunk(a.logits, a.vocab, w, 0, level, s, c, sm);
        bar.arrive();
        bar.wait();
    }
    const MbState s = mb_next_state<2>(w, 0, MB_LEVELS, sm);  // the final state
    if (b0 == 0 && threadIdx.x == 0) *mb_slot(w, 0, MB_LEVELS) = s;
    if (s.filtered && s.stop)  // else nothing to walk, or the tail resumes the select
        for (int c = b0; c < G; c += step) mb_gather_chunk(a.logits, a.vocab, w, 0, s, c);
}

// The choice by the last block to finish (every block's passes seen), as the last kernel of
// emx_cuda_entropix_step (entropix_block) or of emx_cuda_sample (sample_kernel: the distribution
// from the passes' batch, then the draw with lane 0's number) takes it, at 128 threads, its
// scratch in the dynamic shared memory.
__device__ EMX_NOINLINE void decide_choice(const EmxDecodeStep &a, float *smem) {
    const EmxDecodeChoice &c = a.choice;
    const uint64_t step = c.step_dev ? *c.step_dev : c.step;
    const Smem sm = block_smem_at(smem, PERSIST_THREADS);
    const KeptList kl = kept_list(c.sample_ws, a.vocab);
    const MbRow mb = mb_row(sample_ws_passes(c.sample_ws, a.vocab), 0);
    if (c.fixed) {
        const int m = distribution_block(a.logits, a.vocab, c.params, sm, kl, mb);
        if (threadIdx.x == 0) *c.token = draw(kl, m, emx_uniform_f64(c.seed, step, 0));
        return;
    }
    const EmxProfile prof = c.profile;
    const EntropixOut out = {c.token, c.decision, c.score};
    entropix_block(a.logits, a.vocab, a.metrics.out, &prof, c.state, c.pause_token, c.seed, step, sm, kl, mb, out);
}

// Gemma 3's layer l (prev: layer l - 1, or NULL), its five phases each ended by the barrier: the
// residual add and the sandwich norm of each block's output in the next phase's prologue.
template <int DT, typename KV>
__device__ __forceinline__ void sandwich_phases(const EmxDecodeStep &a, const EmxDecodeLayer *L,
                                                const EmxDecodeLayer *prev, int pos, GridBarrier &bar, float *smem,
                                                AttnShared &sh_mem) {
    const int q_dim = a.n_heads * a.head_dim, kv_dim = a.n_kv_heads * a.head_dim;
    const MatvecSet qkv = set_of(L->wq, a.q, q_dim, L->wk, a.k, kv_dim, L->wv, a.v, kv_dim);
    const MatvecSet wo = set_of(L->wo, a.tmp, a.dim), down = set_of(L->down, a.tmp, a.dim);
    const MatvecSet gate = set_of(L->gate, a.hb, a.hidden_dim);
    if (prev)  // x = xb + rmsnorm(tmp) * post_ffn_norm of the layer before, then the attention norm
        matvec_phase<DT, GLU_NONE, IN_RESIDUAL>(
            qkv, nullptr, a.dim, residual_input(a.xb, L->attn_norm, a.eps, a.dim, a.tmp, prev->post_ffn_norm, a.x), 0,
            smem);
    else
        matvec_phase<DT, GLU_NONE, IN_NORM>(qkv, nullptr, a.dim, plain_input(a.x, L->attn_norm, a.eps, a.dim), 0, smem);
    bar.arrive();
    bar.wait();
    const int items = attention_phase<KV>(a, L, pos, smem, sh_mem);
    bar.arrive();
    prefetch_phase<DT, GLU_NONE>(wo, nullptr, q_dim);
    prefetch_phase<DT, GLU_GELU>(gate, L->up, a.dim);
    warm_next_phases<DT>(a, L, items);
    bar.wait();
    matvec_phase<DT, GLU_NONE, IN_AS_IS>(wo, nullptr, q_dim, plain_input(a.att, nullptr, a.eps, q_dim), 0, smem);
    bar.arrive();
    bar.wait();
    // h = x + rmsnorm(tmp) * post_attn_norm into xb, its FFN norm the pair's input
    matvec_phase<DT, GLU_GELU, IN_RESIDUAL>(
        gate, L->up, a.dim, residual_input(a.x, L->ffn_norm, a.eps, a.dim, a.tmp, L->post_attn_norm, a.xb), 0, smem);
    bar.arrive();
    prefetch_phase<DT, GLU_NONE>(down, nullptr, a.hidden_dim);
    bar.wait();
    matvec_phase<DT, GLU_NONE, IN_AS_IS>(down, nullptr, a.hidden_dim, plain_input(a.hb, nullptr, a.eps, a.hidden_dim),
                                         0, smem);
    bar.arrive();
}

// The classifier phase; Gemma 3's makes x = xb + rmsnorm(tmp) * post_ffn_norm of the last layer in
// its prologue first.
template <int DT, bool SANDWICH>
__device__ __forceinline__ void classifier_phase(const EmxDecodeStep &a, const MatvecSet &cls, float *smem) {
    if constexpr (SANDWICH) {
        const float *post = a.layers[a.n_layers - 1].post_ffn_norm;
        matvec_phase<DT, GLU_NONE, IN_RESIDUAL>(cls, nullptr, a.dim,
                                                residual_input(a.xb, a.out_norm, a.eps, a.dim, a.tmp, post, a.x), 0, smem);
    } else {
        matvec_phase<DT, GLU_NONE, IN_NORM>(cls, nullptr, a.dim, plain_input(a.x, a.out_norm, a.eps, a.dim), 0, smem);
    }
}

template <int DT, typename KV, bool SANDWICH>
__global__ void __launch_bounds__(PERSIST_THREADS, 1) decode_persistent_kernel(const __grid_constant__ EmxDecodeStep a) {
    extern __shared__ float smem[];
    __shared__ AttnShared sh_mem;
    __shared__ long long *clocks;
    __shared__ EmxMetrics mine;  // the passes' metrics (passes_phases)
    if (emx_grid_leader()) clocks = a.clocks;  // (read by thread 0 alone: no barrier needed)
    GridBarrier bar = {a.sync, 0, clocks};
    bar.stamp_start();
    const int pos = *a.pos;
    constexpr int EDGE = edge_dtype(DT);  // a q8 embedding or classifier beside 4-bit layers
    if (a.emb) {
        if (EDGE != DT && a.emb_dtype != DT) embed_phase<EDGE>(a);
        else embed_phase<DT>(a);
        bar.arrive();
    }
    for (int l = 0; l < a.n_layers; l++) {
        const EmxDecodeLayer *L = a.layers + l;
        if (l > 0 || a.emb) {  // the q/k/v rows first, then the wait for the phase before
            prefetch_phase<DT, GLU_NONE>(set_of(L->wq, a.q, a.n_heads * a.head_dim), nullptr, a.dim);
            bar.wait();
        }
        if constexpr (SANDWICH) sandwich_phases<DT, KV>(a, L, l > 0 ? L - 1 : nullptr, pos, bar, smem, sh_mem);
        else layer_phases<DT, KV>(a, L, pos, bar, smem, sh_mem);
    }
    if (a.out) {
        const MatvecSet cls = set_of(a.out, a.logits, a.vocab);
        if (EDGE != DT && a.out_dtype != DT) {
            prefetch_phase<EDGE, GLU_NONE>(cls, nullptr, a.dim);
            bar.wait();
            classifier_phase<EDGE, SANDWICH>(a, cls, smem);
        } else {
            prefetch_phase<DT, GLU_NONE>(cls, nullptr, a.dim);
            bar.wait();
            classifier_phase<DT, SANDWICH>(a, cls, smem);
        }
        if (a.metrics.out || a.choice.sample_ws) {  // every logit first
            bar.arrive();
            bar.wait();
            metrics_phase(a, pos, smem);
            if (a.choice.sample_ws) {  // every item merged first
                bar.arrive();
                bar.wait();
                passes_phases(a, bar, smem, &mine);
            }
        }
    } else {
        bar.wait();  // x is complete when the launch ends (Gemma 3's: its residual add by one block)
        if (SANDWICH && blockIdx.x == 0)
            residual_row(a.dim, residual_input(a.xb, nullptr, a.eps, a.dim, a.tmp,
                                               a.layers[a.n_layers - 1].post_ffn_norm, a.x));
    }
    // Every block is past its last wait once it arrives here: the last one sets the barrier back,
    // and merges the metrics' items or takes the choice from the passes' results.
    if (emx_grid_arrive_last(a.sync + 1, gridDim.x, &sh_mem.last)) {
        if (emx_grid_leader()) a.sync[0] = 0;
        if (a.out && a.choice.sample_ws) decide_choice(a, smem);
        else if (a.out && a.metrics.out) metrics_merge(a, smem, a.metrics.out, a.metrics.argmax);
    }
    bar.stamp_end();
}

// Dynamic shared memory: the largest phase's (the matvecs' inputs, the attention's).
size_t step_smem(const EmxDecodeStep *a) {
    const int q_dim = a->n_heads * a->head_dim;
    const int chunk = decode_shape(a->n_heads, a->n_kv_heads, a->head_dim, a->keys_per_block, 0, 0).chunk;
    size_t b = decode_smem(a->n_heads / a->n_kv_heads, a->head_dim, chunk, a->kv_dtype == EMX_KV_F16 ? 2 : 4);
    const int in_dim = a->sandwich ? IN_RESIDUAL : IN_NORM;
    const size_t m[4] = {smem_bytes((int)a->dtype, a->dim, in_dim), smem_bytes((int)a->dtype, q_dim, IN_AS_IS),
                         smem_bytes((int)a->dtype, a->hidden_dim, IN_AS_IS),
                         a->out ? smem_bytes((int)a->out_dtype, a->dim, in_dim) : 0};
    for (int i = 0; i < 4; i++) b = m[i] > b ? m[i] : b;
    const size_t mt = metrics_smem(a->n_heads);  // asked for or not: one occupancy for every launch
    return mt > b ? mt : b;
}

// The most resident blocks of the step's kernel (emx_max_resident_blocks).
template <int DT, typename KV, bool SANDWICH>
cudaError_t resident_blocks(size_t shmem, int *blocks) {
    return emx_max_resident_blocks(decode_persistent_kernel<DT, KV, SANDWICH>, PERSIST_THREADS, shmem, blocks);
}

// The cooperative launch (every block resident, or no launch) of the step's kernel.
template <int DT, typename KV, bool SANDWICH>
cudaError_t launch_step(const EmxDecodeStep *a, int blocks, size_t shmem, cudaStream_t stream) {
    cudaLaunchAttribute attr = {};
    attr.id = cudaLaunchAttributeCooperative;
    attr.val.cooperative = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(blocks);
    cfg.blockDim = dim3(PERSIST_THREADS);
    cfg.dynamicSmemBytes = shmem;
    cfg.stream = stream;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, decode_persistent_kernel<DT, KV, SANDWICH>, *a);
}

// The resident blocks and the launch of the kernels of one kind of layer (SANDWICH: Gemma 3's),
// for the step's dtype and cache. The kernels built: every dtype with the f16 cache, and f32
// weights with the f32 cache as well (what `auto` gives each on a GPU: emx_kv_type_resolve). Each
// instantiation is ~10 s of ptxas an arch, so the six pairs no default makes (16-bit or quantised
// weights beside an f32 cache) are not built: emx_cuda_decode_persistent_refusal, which both
// callers ask first, sends them to the graph path, which says so.
template <bool SANDWICH>
cudaError_t kind_blocks(const EmxDecodeStep *a, int *blocks) {
    const size_t shmem = step_smem(a);
    if (a->kv_dtype == EMX_KV_F32) return resident_blocks<EMX_F32, float, SANDWICH>(shmem, blocks);
    EMX_DISPATCH_DTYPE(a->dtype, return resident_blocks<DT, __half, SANDWICH>(shmem, blocks));
    return cudaSuccess;
}

template <bool SANDWICH>
cudaError_t kind_launch(const EmxDecodeStep *a, int blocks, cudaStream_t stream) {
    const size_t shmem = step_smem(a);
    if (a->kv_dtype == EMX_KV_F32) return launch_step<EMX_F32, float, SANDWICH>(a, blocks, shmem, stream);
    EMX_DISPATCH_DTYPE(a->dtype, return launch_step<DT, __half, SANDWICH>(a, blocks, shmem, stream));
    return cudaSuccess;
}

}  // namespace

// Gemma 3's kernels (a->sandwich), compiled in decode_persistent_sandwich.cu: kind_blocks<true>
// and kind_launch<true> there.
namespace emx_persistent {
cudaError_t sandwich_blocks(const EmxDecodeStep *a, int *blocks);
cudaError_t sandwich_launch(const EmxDecodeStep *a, int blocks, cudaStream_t stream);
}  // namespace emx_persistent

#endif
