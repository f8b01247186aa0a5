// attention_decode.cuh — the device side of the one-kernel decode attention
// (kernels/attention_decode.cu, whose header comment says what it computes, how blocks map to
// chunks of keys and KV heads, and the bytes it moves): a block's work for chunk c of KV head kvh
// of one query row (decode_block), for the attention kernels and for the persistent decode
// kernel (kernels/persistent/decode_persistent.cu), which runs the same blocks' work as a phase of one
// launch, each block looping over (chunk, KV head) items.
#ifndef ENTROPIX_KERNELS_ATTENTION_DECODE_CUH
#define ENTROPIX_KERNELS_ATTENTION_DECODE_CUH

#include <limits.h>

#include "kernels/attention_gqa.cuh"
#include "kernels/grid_sync.cuh"
#include "kernels/rope_pair.cuh"

namespace {

template <typename KV>
__device__ __forceinline__ KV to_kv(float v);
template <>
__device__ __forceinline__ float to_kv<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half to_kv<__half>(float v) { return __float2half(v); }

// The rope fields every row shares (EmxAttnDecodeArgs's), by value into the kernel.
struct DecodeRope {
    const double *inv_freq;
    const float *q_norm, *k_norm, *bq, *bk, *bv;
    float eps;
    int style;
};

// n_h heads [n_h][hd] of src (+ bias) into dst (shared), each normed (norm_w) and rotated as
// rope_kv_kernel does: its block of emx_round_to_warps(hd / 2, 256) threads, a pair each, adds the
// pairs' squares, and so does emx_block_sum_as here. ss: shared scratch [n_h][hd / 2]; inv:
// shared [n_h]. Every thread calls it (barriers inside).
__device__ inline void rope_heads(const float *src, const float *bias, const float *norm_w, int n_h, int hd, int style,
                           float eps, int pos, const double *inv_freq, float *dst, float *ss, float *inv) {
    const int half = hd / 2;
    for (int j = threadIdx.x; j < n_h * half; j += blockDim.x) {
        const int g = j / half, i = j % half;
        int ia, ib;
        emx_rope_pair_index(style, i, half, &ia, &ib);
        float x0 = src[g * hd + ia], x1 = src[g * hd + ib];
        if (bias) {
            x0 += bias[g * hd + ia];
            x1 += bias[g * hd + ib];
        }
        dst[g * hd + ia] = x0;
        dst[g * hd + ib] = x1;
        ss[j] = emx_rope_pair_ss(x0, x1);
    }
    __syncthreads();
    if (norm_w) {  // the same for the whole block: every thread reaches the barriers inside
        const int T = emx_round_to_warps(half, 256);
        for (int g = 0; g < n_h; g++) {
            const float *sg = ss + g * half;
            const float sum = emx_block_sum_as(T, [&](int v) { return v < half ? sg[v] : 0.0f; });
            if (threadIdx.x == 0) inv[g] = 1.0f / sqrtf(sum / (float)hd + eps);
        }
        __syncthreads();
    }
    for (int j = threadIdx.x; j < n_h * half; j += blockDim.x) {
        const int g = j / half, i = j % half;
        int ia, ib;
        emx_rope_pair_index(style, i, half, &ia, &ib);
        float x0 = dst[g * hd + ia], x1 = dst[g * hd + ib];
        if (norm_w) {
            x0 = x0 * inv[g] * norm_w[ia];
            x1 = x1 * inv[g] * norm_w[ib];
        }
        emx_rope_rotate(x0, x1, pos, inv_freq[i], &dst[g * hd + ia], &dst[g * hd + ib]);
    }
    __syncthreads();
}

// Dynamic shared memory: fresh_k, fresh_v [head_dim] of KV; qs [group][head_dim], s [group][chunk],
// red [group][max(2 · 128, head_dim)] (SPLIT_GQA's), kf [head_dim], ss [group][head_dim / 2].
inline size_t decode_smem(int group, int head_dim, int chunk, int kv_bytes) {
    const int gqa_red = head_dim > 2 * ATTN_BLOCK ? head_dim : 2 * ATTN_BLOCK;
    return (size_t)2 * head_dim * kv_bytes +
           ((size_t)group * (head_dim + chunk + gqa_red) + head_dim + (size_t)group * (head_dim / 2)) * sizeof(float);
}

// The launch's shape, every row's: heads, chunk length, scale and window (QueryRows of one row).
struct DecodeShape {
    int n_heads, n_kv_heads, head_dim, chunk;
    QueryRows rows;
};

// The shape of one query row's launch: keys_per_block 0 is the default chunk, scale 0 is
// 1 / sqrt(head_dim) (EmxAttentionArgs's conventions). Host (the attention kernels' launchers) and
// device (the persistent kernel, from its step's fields).
__host__ __device__ inline DecodeShape decode_shape(int n_heads, int n_kv_heads, int head_dim, int keys_per_block,
                                                    float scale, int window) {
    DecodeShape sh;
    sh.n_heads = n_heads;
    sh.n_kv_heads = n_kv_heads;
    sh.head_dim = head_dim;
    sh.chunk = keys_per_block > 0 ? keys_per_block : ATTN_DEFAULT_CHUNK;
    sh.rows.n = 1;
    sh.rows.q_stride = sh.rows.out_stride = n_heads * head_dim;
    sh.rows.scale = scale > 0 ? scale : 1.0f / sqrtf((float)head_dim);
    sh.rows.window = window;
    return sh;
}

// One query row as its blocks see it: its inputs, this layer's cache, outputs and workspace.
template <typename KV>
struct DecodeRow {
    const float *q, *k, *v;       // [n_heads][hd] as the matvec left it; the new key, value [n_kv_heads][hd]
    KV *k_cache, *v_cache;        // this layer's [>= n_keys][n_kv_heads][hd], or a ring of `ring` rows
    int ring;                     // 0, or key t in row t % ring (attention.h's cache_rows)
    int pos, n_keys;              // n_keys = pos + 1
    float *out;                   // [n_heads][hd]
    float *scores;                // [n_heads][score_stride], or NULL
    int score_stride;
    EmxSoftmaxStats *head_stats;  // [n_heads], or NULL
    SplitWs ws;                   // one row's, max_chunks slots a head
    int max_chunks;
    unsigned *arrivals;           // [n_kv_heads]: zero when the launch starts, and when it ends
};

// The cache as KvRows without a tail (kv_rows_of's), before head_slice.
template <typename KV>
__device__ __forceinline__ KvRows<KV> cache_rows(const KV *cache, int kv_dim, int ring) {
    KvRows<KV> r;
    r.cache = r.tail = cache;
    r.stride = r.tail_stride = kv_dim;
    r.tail_start = INT_MAX;
    r.tail_start_dev = nullptr;
    r.ring = ring;
    return r;
}

// Block (c, kvh) of a row: the header comment's steps (c, kvh: the block's grid x and y in the
// attention kernels, an item of the attention phase in the persistent one). The kernels' shared memory: smem (dynamic,
// decode_smem), red_f, red_s (the reductions'), inv [ATTN_MAX_GROUP], last (the arrival's answer).
template <typename KV>
__device__ __forceinline__ void decode_block(const DecodeRope &rp, const DecodeShape &sh, const DecodeRow<KV> &row,
                                             int c, int kvh, float *smem, float *red_f, FixedMaxSumsT *red_s,
                                             float *inv, int *last) {
    const int tid = threadIdx.x;
    const int n_heads = sh.n_heads, n_kv_heads = sh.n_kv_heads, hd = sh.head_dim, chunk = sh.chunk;
    const int group = n_heads / n_kv_heads, h0 = kvh * group;
    const int n_keys = row.n_keys, pos = row.pos;
    const int first = row_first(sh.rows, n_keys), t0 = first + c * chunk;
    if (c == 0 && row.scores)
        for (int g = 0; g < group; g++) mask_before(row.scores + (size_t)(h0 + g) * row.score_stride, first);
    if (t0 >= n_keys) return;  // past the row's keys: not one of its chunks, arrives nowhere
    const int t1 = min(t0 + chunk, n_keys);
    const bool fresh = t1 == n_keys;  // the last chunk: its last key, n_keys - 1 = pos, is the new one
    KV *fresh_k = (KV *)smem, *fresh_v = fresh_k + hd;
    float *qs = (float *)(fresh_v + hd), *s = qs + group * hd;
    float *red = s + group * chunk, *kf = red + group * (hd > 2 * ATTN_BLOCK ? hd : 2 * ATTN_BLOCK);
    float *ss = kf + hd;

    rope_heads(row.q + (size_t)h0 * hd, rp.bq ? rp.bq + (size_t)h0 * hd : nullptr, rp.q_norm, group, hd, rp.style,
               rp.eps, pos, rp.inv_freq, qs, ss, inv);
    if (fresh) {  // block-uniform: the barriers inside are reached by all
        const size_t at = (size_t)kvh * hd, at_row = (size_t)(row.ring ? pos % row.ring : pos) * n_kv_heads * hd + at;
        rope_heads(row.k + at, rp.bk ? rp.bk + at : nullptr, rp.k_norm, 1, hd, rp.style, rp.eps, pos, rp.inv_freq, kf,
                   ss, inv);
        for (int d = tid; d < hd; d += blockDim.x) {
            fresh_k[d] = to_kv<KV>(kf[d]);
            fresh_v[d] = to_kv<KV>(row.v[at + d] + (rp.bv ? rp.bv[at + d] : 0.0f));  // rope_kv's expression
            row.k_cache[at_row + d] = fresh_k[d];
            row.v_cache[at_row + d] = fresh_v[d];
        }
        __syncthreads();
    }
    const int kv_dim = n_kv_heads * hd;
    const FreshRows<KV> k = {head_slice(cache_rows<KV>(row.k_cache, kv_dim, row.ring), kvh, hd), fresh_k, fresh ? pos : -1};
    const FreshRows<KV> v = {head_slice(cache_rows<KV>(row.v_cache, kv_dim, row.ring), kvh, hd), fresh_v, fresh ? pos : -1};
    gqa_chunk(qs, k, v, t0, t1, group, hd, h0, n_heads, 0, c, true, row.head_stats != nullptr, sh.rows.scale, s, chunk,
              red, row.scores, row.score_stride, row.ws, row.max_chunks, red_f, red_s);
    // The partials are out; the last of kvh's chunks to arrive merges the group's heads.
    const int n_chunks = row_chunks(sh.rows, n_keys, chunk);
    if (!emx_grid_arrive_last(row.arrivals + kvh, (unsigned)n_chunks, last)) return;
    for (int g = 0; g < group; g++)
        combine_head(h0 + g, 0, n_chunks, n_heads, hd, row.out, row.head_stats, row.ws, row.max_chunks);
}

}  // namespace

#endif
