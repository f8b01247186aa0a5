// attention_gqa.cuh — what kernels/attention.cu's kernels share with the fused decode attention
// (kernels/attention_decode.cu): where a key lives (KvRows, kv_row), the query rows of a call
// (QueryRows, row_first, mask_before), SPLIT's workspace, SPLIT_GQA's score and value loops
// (gqa_scores, gqa_values) and the combine (combine_head, the kernel and the decode attention's
// last block both run it). attention.cu's header comment explains them;
// one copy of the code, so both kernels compute the same bits.
//
// gqa_scores and gqa_values read a key's row through kv_row(rows, t), overloaded on the rows'
// type: KvRows (the cache and a branch tail) or FreshRows (attention_decode.cu: the new key's
// row from shared memory, the others from the cache).
#ifndef ENTROPIX_KERNELS_ATTENTION_GQA_CUH
#define ENTROPIX_KERNELS_ATTENTION_GQA_CUH

#include <limits.h>
#include <math.h>
#include <stdint.h>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/attention.h"
#include "kernels/common.cuh"
#include "kernels/reduce.cuh"

#define ATTN_BLOCK 128           // threads per block: 4 warps
#define ATTN_DEFAULT_CHUNK 64    // keys per SPLIT block: short chunks keep many blocks busy at decode
#define ATTN_MAX_CHUNK 2048
#define ATTN_MAX_HEAD_DIM 512
#define ATTN_MAX_GROUP 8         // SPLIT_GQA: query heads per KV head it handles (more: SPLIT)
#ifndef GQA_KEYS
#define GQA_KEYS 4  // SPLIT_GQA: keys (or values) whose loads a warp (thread) keeps in flight
#endif
#define ATTN_STATIC_SMEM_MAX 49152  // dynamic shared memory without an opt-in attribute
#define ATTN_MAX_ROWS 65535      // gridDim.z

namespace {

typedef emxr::FixedMaxSums FixedMaxSumsT;  // one-word type names for __shared__ declarations

__device__ __forceinline__ float kv_load(const float *p, size_t i) { return p[i]; }
__device__ __forceinline__ float kv_load(const __half *p, size_t i) { return __half2float(p[i]); }

// Where the keys (or values) are: rows t < tail_start in `cache` (stride `stride`; with a ring,
// key t in row t % ring), the others in `tail` (stride `tail_stride`). Without a tail, tail_start
// is INT_MAX and tail = cache (never read; not NULL, so no arithmetic on a null pointer).
// tail_start_dev: tail_start is read from device memory when the kernel starts (head_slice), for
// graphs replayed at a new prefix. ring: 0, or a local layer's ring of rows (attention.h's
// cache_rows).
template <typename KV>
struct KvRows {
    typedef KV Elem;
    const KV *cache, *tail;
    int stride, tail_start, tail_stride;
    const int *tail_start_dev;
    int ring;
};

// THE address of key t's row (of this KV head, once head_slice has offset the pointers): every
// key and value read goes through here.
template <typename KV>
__device__ __forceinline__ const KV *kv_row(const KvRows<KV> &r, int t) {
    if (t >= r.tail_start) return r.tail + (size_t)(t - r.tail_start) * r.tail_stride;
    return r.cache + (size_t)(r.ring ? t % r.ring : t) * r.stride;
}

// The same rows restricted to KV head kvh: both storages keep a row's heads at kvh · head_dim.
// Every kernel starts with it, so it also reads a device-held tail_start, once per thread.
template <typename KV>
__device__ __forceinline__ KvRows<KV> head_slice(KvRows<KV> r, int kvh, int head_dim) {
    if (r.tail_start_dev) r.tail_start = *r.tail_start_dev;
    r.cache += (size_t)kvh * head_dim;
    r.tail += (size_t)kvh * head_dim;
    return r;
}

// The query rows of one call: row r (blockIdx.z) reads q + r·q_stride, writes out + r·out_stride.
// scale: the scores' factor (attention.h's scale, resolved); window: 0, or each row sees only
// its last `window` keys (row_first).
struct QueryRows {
    int n, q_stride, out_stride;
    float scale;
    int window;
};

// Every kernel below is instantiated twice: BRANCHES false for causal rows (decode, prefill),
// true for branch rows (attention.h), which take their branch stride as the kernel's last
// argument, so the causal kernels compile to the code they had before branch rows existed. (A
// branch stride in QueryRows, tested at run time, took blockIdx.z out of the uniform registers
// in the SASS, and a Qwen3-0.6B-shaped decode step was 10% slower on an H200.)

// Keys that row r attends: causal rows, the last one all n_keys; branch rows, all of them each
// (n_keys: of the call, or n_keys_dev).
template <bool BRANCHES>
__device__ __forceinline__ int row_keys(int n_keys_arg, const int *n_keys_dev, const QueryRows &rows, int r) {
    if (BRANCHES) return n_keys_dev ? *n_keys_dev : n_keys_arg;
    return (n_keys_dev ? *n_keys_dev : n_keys_arg) - rows.n + r + 1;
}

// The first key a row of n_keys keys sees: 0, or with a sliding window the oldest of its last
// `window` keys (the row's query sits at key n_keys - 1: it sees keys n_keys - window .. n_keys - 1).
__device__ __forceinline__ int row_first(const QueryRows &rows, int n_keys) {
    return rows.window > 0 && n_keys > rows.window ? n_keys - rows.window : 0;
}

// Keys before a row's window take no probability: their scores are -inf in the kept row.
__device__ __forceinline__ void mask_before(float *score_row, int first) {
    if (score_row)
        for (int t = threadIdx.x; t < first; t += blockDim.x) score_row[t] = -INFINITY;
}

// Row r's keys restricted to KV head kvh: head_slice, with a branch row's own tail.
template <bool BRANCHES, typename KV>
__device__ __forceinline__ KvRows<KV> row_slice(KvRows<KV> k, int branch_stride, int r, int kvh, int head_dim) {
    if (BRANCHES) k.tail += (size_t)r * branch_stride;
    return head_slice(k, kvh, head_dim);
}

// The rows of a decode step whose new key (or value) is not in the cache yet: key fresh_t's row
// is `fresh` (shared memory, this KV head's slice), the others those of `rows`.
template <typename KV>
struct FreshRows {
    typedef KV Elem;
    KvRows<KV> rows;
    const KV *fresh;
    int fresh_t;
};

template <typename KV>
__device__ __forceinline__ const KV *kv_row(const FreshRows<KV> &r, int t) {
    return t == r.fresh_t ? r.fresh : kv_row(r.rows, t);
}

// ---------------------------------------------------------------------------------------------
// The workspace of SPLIT: per (head, chunk) of the last row the statistics, per (row, head,
// chunk) (m, l) and acc[head_dim].
struct SplitWs {
    EmxSoftmaxStats *stats;  // [n_heads][max_chunks] (the last row's: only its statistics are kept)
    float *ml;               // [n_rows][n_heads][max_chunks][2]
    float *acc;              // [n_rows][n_heads][max_chunks][head_dim]
};

__host__ __device__ inline size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

__host__ __device__ inline SplitWs split_ws(void *base, int n_heads, int max_chunks, int n_rows) {
    char *p = (char *)base;
    size_t n = (size_t)n_heads * max_chunks;
    SplitWs w;
    w.stats = (EmxSoftmaxStats *)p;
    p += align256(n * sizeof(EmxSoftmaxStats));
    w.ml = (float *)p;
    p += align256(n * n_rows * 2 * sizeof(float));
    w.acc = (float *)p;
    return w;
}

inline size_t split_ws_bytes(int n_heads, int head_dim, int max_chunks, int n_rows) {
    size_t n = (size_t)n_heads * max_chunks;
    return align256(n * sizeof(EmxSoftmaxStats)) + align256(n * n_rows * 2 * sizeof(float)) +
           n * n_rows * head_dim * sizeof(float);
}

// Elements i and i + 1 (i even) in one load: 8 bytes of an f32 row, 4 of an f16 one (rows start
// at an even element: head_dim is even where SPLIT_GQA runs).
__device__ __forceinline__ float2 kv_load2(const float *p, size_t i) { return *(const float2 *)(p + i); }
__device__ __forceinline__ float2 kv_load2(const __half *p, size_t i) {
    return __half22float2(*(const __half2 *)(p + i));
}

// SPLIT_GQA's scores: s[g][t - t0] = q_g · k_t · scale for the chunk's keys t0..t1-1 and the
// group's heads (qs: their queries in shared memory), also into the score rows when kept.
// A warp per key, GQA_KEYS keys at a time (t, t + n_warps, ...) so that their loads are in
// flight together: one key at a time, each key cost the warp a full memory latency, and a
// chunk's keys were a serial chain. Each key's sum runs over d in the same order as one key
// alone, so the scores are bitwise those of the one-key loop. A lane takes two consecutive
// elements per load (d = 2p, 2p + 1 for p = lane, lane + 32, ...): a warp's load moves 256
// bytes of an f32 row, 128 of an f16 one (one element a lane moved 128 and 64: an f16 cache
// halved the bytes, not the loads, and decoded slower than f32). Both types add the same
// products in the same order, so an f16 cache gives the bits of an f32 cache of its values.
template <typename Rows>
__device__ __forceinline__ void gqa_scores(const float *qs, const Rows &k, int t0, int t1, int group,
                                           int head_dim, float scale, float *s, int chunk, float *score_rows,
                                           int score_stride, int h0) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
    for (int tb = t0 + warp; tb < t1; tb += GQA_KEYS * n_warps) {
        float acc[GQA_KEYS][ATTN_MAX_GROUP];
#pragma unroll
        for (int u = 0; u < GQA_KEYS; u++)
#pragma unroll
            for (int g = 0; g < ATTN_MAX_GROUP; g++) acc[u][g] = 0.0f;
        const typename Rows::Elem *kt[GQA_KEYS];
#pragma unroll
        for (int u = 0; u < GQA_KEYS; u++) kt[u] = kv_row(k, min(tb + u * n_warps, t1 - 1));  // past t1: not kept
        for (int d = 2 * lane; d < head_dim; d += 64) {
            float2 kd[GQA_KEYS];
#pragma unroll
            for (int u = 0; u < GQA_KEYS; u++) kd[u] = kv_load2(kt[u], d);
#pragma unroll
            for (int g = 0; g < ATTN_MAX_GROUP; g++) {  // a constant bound keeps acc[][] in registers
                if (g >= group) continue;
                const float2 qq = *(const float2 *)(qs + g * head_dim + d);  // 8-byte shared loads: no bank conflict
#pragma unroll
                for (int u = 0; u < GQA_KEYS; u++) {
                    acc[u][g] += qq.x * kd[u].x;
                    acc[u][g] += qq.y * kd[u].y;
                }
            }
        }
#pragma unroll
        for (int u = 0; u < GQA_KEYS; u++) {
            const int t = tb + u * n_warps;
#pragma unroll
            for (int g = 0; g < ATTN_MAX_GROUP; g++) {
                if (g >= group) continue;
                const float sc = emx_warp_sum(acc[u][g]) * scale;  // every lane takes part: t < t1 below
                if (lane == 0 && t < t1) {
                    s[g * chunk + t - t0] = sc;
                    if (score_rows) score_rows[(size_t)(h0 + g) * score_stride + t] = sc;
                }
            }
        }
    }
}

// SPLIT_GQA's weighted values: red[g][part · head_dim + d] = Σ_i s[g][i] v[t0+i][d] over this
// thread's part of the chunk's len keys (a thread per (part, pair of elements d, d + 1), one
// load each: 8 bytes of f32, 4 of f16; parts = blockDim / (head_dim / 2) when half a head is
// narrower than the block: 2 at head_dim 128). Each value is loaded once and used by every head.
// GQA_KEYS values are loaded before any is used, so their reads overlap (one load at a time
// made a thread's walk over its keys a chain of latencies); the sum still adds i in increasing
// order, bitwise the one-at-a-time result. red holds parts · head_dim <= 2 · blockDim floats
// per head (or head_dim).
template <typename Rows>
__device__ __forceinline__ void gqa_values(const float *s, const Rows &v, int t0, int len, int group,
                                           int head_dim, int chunk, int parts, float *red) {
    const int half = head_dim / 2, width = parts * head_dim;
    for (int j = threadIdx.x; j < parts * half; j += blockDim.x) {
        const int d = 2 * (j % half), part = j / half;
        float acc[ATTN_MAX_GROUP][2];
#pragma unroll
        for (int g = 0; g < ATTN_MAX_GROUP; g++) acc[g][0] = acc[g][1] = 0.0f;
        int i = part;
        for (; i + (GQA_KEYS - 1) * parts < len; i += GQA_KEYS * parts) {
            float2 vv[GQA_KEYS];
#pragma unroll
            for (int u = 0; u < GQA_KEYS; u++) vv[u] = kv_load2(kv_row(v, t0 + i + u * parts), d);
#pragma unroll
            for (int u = 0; u < GQA_KEYS; u++)
#pragma unroll
                for (int g = 0; g < ATTN_MAX_GROUP; g++) {  // a constant bound keeps acc[] in registers
                    if (g >= group) continue;
                    const float w = s[g * chunk + i + u * parts];
                    acc[g][0] += w * vv[u].x;
                    acc[g][1] += w * vv[u].y;
                }
        }
        for (; i < len; i += parts) {
            const float2 vv = kv_load2(kv_row(v, t0 + i), d);
#pragma unroll
            for (int g = 0; g < ATTN_MAX_GROUP; g++) {
                if (g >= group) continue;
                acc[g][0] += s[g * chunk + i] * vv.x;
                acc[g][1] += s[g * chunk + i] * vv.y;
            }
        }
#pragma unroll
        for (int g = 0; g < ATTN_MAX_GROUP; g++)
            if (g < group) {
                red[g * width + part * head_dim + d] = acc[g][0];
                red[g * width + part * head_dim + d + 1] = acc[g][1];
            }
    }
}

// SPLIT_GQA's chunk once the group's queries are in qs (shared): the scores of keys t0..t1-1, per
// head the chunk's max, statistics (last row, when wanted) and weights, the weighted values, and
// the partials into the workspace (slot (r, h0 + g, c)). s: [group][chunk], red: [group][max(2 ·
// blockDim, head_dim)] shared; red_f, red_s: the block reductions' scratch. attention.cu's
// SPLIT_GQA and attention_decode.cu's fused kernel both end with it: the same bits.
template <typename Rows>
__device__ __forceinline__ void gqa_chunk(const float *qs, const Rows &k, const Rows &v, int t0, int t1, int group,
                                          int head_dim, int h0, int n_heads, int r, int c, bool last, int want_stats,
                                          float scale, float *s, int chunk, float *red, float *score_rows,
                                          int score_stride, SplitWs ws, int max_chunks, float *red_f,
                                          FixedMaxSumsT *red_s) {
    const int tid = threadIdx.x, len = t1 - t0;
    const int half = head_dim / 2, parts = half < (int)blockDim.x ? (int)blockDim.x / half : 1;
    const int width = parts * head_dim;
    gqa_scores(qs, k, t0, t1, group, head_dim, scale, s, chunk, score_rows, score_stride, h0);
    __syncthreads();
    // per head: the chunk's max, statistics and weights, as SPLIT
    for (int g = 0; g < group; g++) {
        float *sg = s + g * chunk;
        float mx = -INFINITY;
        for (int i = tid; i < len; i += blockDim.x)
            if (emxr::is_finite_f(sg[i])) mx = fmaxf(mx, sg[i]);
        mx = emxr::block_reduce(mx, red_f, emxr::MaxOp());
        const size_t slot = ((size_t)r * n_heads + h0 + g) * max_chunks + c;
        if (want_stats && last) {
            emxr::FixedMaxSums sums = emxr::fixed_max_sums_zero();
            for (int i = tid; i < len; i += blockDim.x) emxr::fixed_max_add(sums, sg[i], (double)mx);
            sums = emxr::block_reduce(sums, red_s, emxr::FixedMaxSumsOp());
            if (tid == 0) ws.stats[(size_t)(h0 + g) * max_chunks + c] = emxr::fixed_max_to_stats(sums, mx);
        }
        __syncthreads();
        float l = 0.0f;
        for (int i = tid; i < len; i += blockDim.x) {
            sg[i] = expf(sg[i] - mx);
            l += sg[i];
        }
        l = emxr::block_reduce(l, red_f, emxr::SumOp());
        if (tid == 0) {
            ws.ml[2 * slot] = mx;
            ws.ml[2 * slot + 1] = l;
        }
    }
    gqa_values(s, v, t0, len, group, head_dim, chunk, parts, red);
    __syncthreads();
    for (int i = tid; i < group * head_dim; i += blockDim.x) {
        const int g = i / head_dim, d = i % head_dim;
        float a = 0.0f;
        for (int part = 0; part < parts; part++) a += red[g * width + part * head_dim + d];
        ws.acc[(((size_t)r * n_heads + h0 + g) * max_chunks + c) * head_dim + d] = a;
    }
}

// SPLIT, part 2, for head h of row r: out_row[h] = Σ_c e^{m_c-M} acc_c / Σ_c e^{m_c-M} l_c over
// the row's n_chunks chunks, and with head_stats (the row whose statistics are kept) the merge of
// the chunks' statistics into head_stats[h]. Every thread of the block calls it (no barrier
// inside): thread i takes elements i, i + blockDim, ... The combine kernel below and the decode
// attention's last block (attention_decode.cu) both run it: the same bits.
__device__ __forceinline__ void combine_head(int h, int r, int n_chunks, int n_heads, int head_dim, float *out_row,
                                             EmxSoftmaxStats *head_stats, const SplitWs &ws, int max_chunks) {
    const int tid = threadIdx.x;
    const size_t first = ((size_t)r * n_heads + h) * max_chunks;  // slot of chunk 0
    const float *ml = ws.ml + first * 2;
    float M = -INFINITY;
    for (int c = 0; c < n_chunks; c++) M = fmaxf(M, ml[2 * c]);
    float L = 0.0f;
    for (int c = 0; c < n_chunks; c++) L += expf(ml[2 * c] - M) * ml[2 * c + 1];
    const float inv_L = 1.0f / L;
    const float *acc = ws.acc + first * head_dim;
    for (int d = tid; d < head_dim; d += blockDim.x) {
        float a = 0.0f;
        for (int c = 0; c < n_chunks; c++) a += expf(ml[2 * c] - M) * acc[(size_t)c * head_dim + d];
        out_row[(size_t)h * head_dim + d] = a * inv_L;
    }
    if (head_stats && tid == 0) {  // a few chunks: one thread merges them in order
        EmxSoftmaxStats st = emx_softmax_stats_empty();
        const EmxSoftmaxStats *cs = ws.stats + (size_t)h * max_chunks;
        for (int c = 0; c < n_chunks; c++) st = emx_softmax_stats_merge(st, cs[c]);
        emxr::store_stats(head_stats + h, st);
    }
}

// The chunks of keys a row of n_keys keys is split into (from its first key, row_first).
__device__ __forceinline__ int row_chunks(const QueryRows &rows, int n_keys, int chunk) {
    return (n_keys - row_first(rows, n_keys) + chunk - 1) / chunk;
}

// SPLIT, part 2: block (h, 1, r) merges the chunks of head h, row r (combine_head).
template <bool BRANCHES>
__global__ void __launch_bounds__(ATTN_BLOCK)
attention_combine_kernel(int n_heads, int head_dim, int n_keys_arg, const int *n_keys_dev, QueryRows rows,
                         int chunk, float *__restrict__ out, EmxSoftmaxStats *head_stats, SplitWs ws,
                         int max_chunks) {
    const int h = blockIdx.x, r = blockIdx.z;
    const int n_keys = row_keys<BRANCHES>(n_keys_arg, n_keys_dev, rows, r);
    combine_head(h, r, row_chunks(rows, n_keys, chunk), n_heads, head_dim, out + (size_t)r * rows.out_stride,
                 r == rows.n - 1 ? head_stats : nullptr, ws, max_chunks);
}

inline int chunk_of(const EmxAttentionArgs *a) {
    return a->keys_per_block > 0 ? a->keys_per_block : ATTN_DEFAULT_CHUNK;
}

// The key and value storage of a call (see KvRows).
template <typename KV>
inline void kv_rows_of(const EmxAttentionArgs *a, KvRows<KV> *k, KvRows<KV> *v) {
    const int kv_stride = a->n_kv_heads * a->head_dim;
    const bool tail = a->tail_k != 0;
    k->cache = (const KV *)a->k_cache;
    v->cache = (const KV *)a->v_cache;
    k->tail = tail ? (const KV *)a->tail_k : k->cache;
    v->tail = tail ? (const KV *)a->tail_v : v->cache;
    k->stride = v->stride = kv_stride;
    k->tail_start = v->tail_start = tail ? a->tail_start : INT_MAX;
    k->tail_stride = v->tail_stride = tail ? a->tail_row_stride : kv_stride;
    k->tail_start_dev = v->tail_start_dev = tail ? a->tail_start_dev : NULL;
    k->ring = v->ring = a->cache_rows;
}


}  // namespace

#endif
