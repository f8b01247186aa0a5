// attention.cu — attention of one decoding position (or of several consecutive positions: causal
// prefill) over the KV cache, with the score rows and per-head softmax statistics the entropix
// metrics need (API and math in attention.h):
//   S_h[t] = q_h · k_t / sqrt(head_dim),  out_h = Σ_t softmax(S_h)[t] v_t,  t < n_keys
//
// Read kernels/attention_naive.cu first: the same formula with one block per head, a thread per
// key and four parameters of shape. The kernels here add, one idea each: a warp per key, so a
// key row is read as consecutive words (PLAIN); the keys split over many blocks, then a combine
// (SPLIT, flash-decoding); one block for all the query heads of a KV head, so each key is read
// once (SPLIT_GQA, what the runtime launches). And what the runtime needs of all three: an f16
// cache (the KV template), keys in two storages (the lookahead branches' tail: kv_row), several
// query rows (prefill) or branch rows (the BRANCHES template), key counts read from device memory
// (n_keys_dev: CUDA graphs replayed at a new length), the score rows and the double statistics;
// Gemma 3's scale (QueryRows.scale, used in place of 1/sqrt(head_dim)) and sliding window (a row
// whose last key is p reads keys from row_first = p - window + 1 on: SPLIT's chunks start there,
// so no block reads a key before the window; the kept score row holds -inf before it).
//
// At decode there is one query per head, so attention is a matrix-vector product twice over:
// S = K q (n_keys × head_dim) and out = softmaxᵀ V. Every cached key and value is read once;
// that read is the cost: bytes per call ≈ 2 · n_keys · n_kv_heads · head_dim · sizeof(kv) ·
// (n_heads / n_kv_heads, less what the L2 cache serves to the heads sharing a KV head)
// + n_heads · n_keys · 4 for the score rows written. With n_rows query rows, row r is that same
// computation over its own n_keys - n_rows + r + 1 keys (the rows share the grid's z dimension:
// one launch, plus the combine, for the whole prefill). The rows read the same keys, so K and V
// come from memory about once and the repeats from L2 (while a layer's K and V fit in it); each
// row adds its query and output (2 · n_heads · head_dim · 4 bytes) and its partials, written to
// the workspace and read back (SPLIT: n_heads · chunks · (head_dim + 2) · 4; PLAIN: its score
// rows, n_heads · n_keys · 4).
//
// Where a key lives: kv_row() (attention_gqa.cuh, with what else these kernels share with the
// fused decode attention, attention_decode.cu) is the one place that turns a key index into a row
// address.
// Keys before tail_start are cache rows (stride n_kv_heads · head_dim), the rest rows of a
// separate tail with its own stride (the agent pool's interleaved lookahead branches; with branch
// rows, row r's tail starts r·tail_branch_stride further: row_slice). Every
// kernel reads the same values in the same order either way, so split storage is bitwise the
// contiguous result.
//
// Two versions, selected by EmxAttnKernel:
//   PLAIN: grid (n_heads, 1, n_rows), one block of 128 threads per (head, row), three passes
//     over its row:
//     (1) scores (one warp per key: lanes split head_dim, a shuffle sum), written to the score
//     row in global memory; (2) the row's max and Σ e^{s-max} (+ the double statistics);
//     (3) out[d] = Σ_t e^{s_t-max} v_t[d] / Σe, a thread per d. Simple, but at long contexts
//     only n_heads blocks run (9 or 16 of the GPU's 132 SMs): most of the memory bandwidth idles.
//   SPLIT (flash-decoding): grid (chunks, n_heads, n_rows), a block per (head, chunk of
//     keys_per_block keys, row) does (1)-(3) on its chunk relative to the chunk's own max m_c and
//     leaves the partial (m_c, l_c = Σ e^{s-m_c}, acc_c = Σ e^{s-m_c} v, EmxSoftmaxStats_c) in
//     the workspace; a combine kernel (a block per (head, row)) rescales each chunk to the
//     global max M:
//       out = Σ_c e^{m_c-M} acc_c / Σ_c e^{m_c-M} l_c,  stats = merge of the chunk statistics
//     (metrics.h's emx_softmax_stats_merge: the same combinable statistic as the CPU's).
//     n_heads · chunks blocks keep every SM streaming keys; the combine reads only
//     chunks · (head_dim + 2) floats per head. A row's chunks are the ones it would have alone
//     (blocks past its last key return at once), hence bitwise the single-row result.
//   SPLIT_GQA: SPLIT with a block per (KV head, chunk, row) computing all the query heads that
//     share that KV head (2 for Qwen3-0.6B, 3 for SmolLM2-135M), so every key and value is read
//     from memory once instead of once per query head (SPLIT relies on the L2 cache for that); the
//     same partials and combine. Groups over 8, or too large for 48 KB of shared memory, run SPLIT.
//     Its two loops over keys keep GQA_KEYS loads in flight (gqa_scores, gqa_values): at decode a
//     chunk is a few dozen keys and latency, not bandwidth, sets the time (measured on an H200:
//     docs/cuda.md#measured-on-a-gpu); each load takes two consecutive elements (float2 /
//     __half2), so an f16 cache halves the loads' bytes without doubling their count.
// Scores are computed in float (as the CPU twin), the softmax statistics in double from those
// float scores (as metrics.c), the weights of V in float with expf. Scores and statistics are
// kept for the last row only (the position the sampler decides).
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/attention.h"
#include "kernels/attention_gqa.cuh"
#include "kernels/reduce.cuh"


namespace {

// Scores of keys [t0, t1) for head h: s[t - t0] = (q · k_t) * scale, one warp per key (lanes
// stride over head_dim, so a warp reads a key row as consecutive words). Also writes them to
// the global score row when asked.
template <typename KV>
__device__ void scores_range(const float *qs, const KvRows<KV> &k, int head_dim, int t0, int t1,
                             float scale, float *s, float *score_row) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
    for (int t = t0 + warp; t < t1; t += n_warps) {
        const KV *kt = kv_row(k, t);
        float acc = 0.0f;
        for (int d = lane; d < head_dim; d += 32) acc += qs[d] * kv_load(kt, d);
        acc = emx_warp_sum(acc) * scale;
        if (lane == 0) {
            s[t - t0] = acc;
            if (score_row) score_row[t] = acc;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// PLAIN: one block per (head, row). The score row lives in global memory (the output row for
// the last query row when asked, else the workspace: [n_rows][n_heads][n_keys_arg]).
template <typename KV, bool BRANCHES>
__global__ void __launch_bounds__(ATTN_BLOCK)
attention_plain_kernel(const float *__restrict__ q, KvRows<KV> k_rows, KvRows<KV> v_rows, int n_heads,
                       int n_kv_heads, int head_dim, int n_keys_arg, const int *n_keys_dev, QueryRows rows,
                       float *__restrict__ out, float *scores, int score_stride,
                       EmxSoftmaxStats *head_stats, float *ws_rows, int branch_stride) {
    __shared__ float qs[ATTN_MAX_HEAD_DIM];
    __shared__ float red_f[ATTN_BLOCK];
    __shared__ FixedMaxSumsT red_s[ATTN_BLOCK];
    const int h = blockIdx.x, r = blockIdx.z, tid = threadIdx.x;
    const int n_keys = row_keys<BRANCHES>(n_keys_arg, n_keys_dev, rows, r);
    const bool last = r == rows.n - 1, stats = head_stats && last;
    const int kvh = h / (n_heads / n_kv_heads);
    const KvRows<KV> k = row_slice<BRANCHES>(k_rows, branch_stride, r, kvh, head_dim), v = row_slice<BRANCHES>(v_rows, branch_stride, r, kvh, head_dim);
    float *row = scores && last ? scores + (size_t)h * score_stride
                                : ws_rows + ((size_t)r * n_heads + h) * n_keys_arg;
    const int first = row_first(rows, n_keys);  // keys [first, n_keys) are seen
    q += (size_t)r * rows.q_stride;
    out += (size_t)r * rows.out_stride;

    for (int d = tid; d < head_dim; d += blockDim.x) qs[d] = q[(size_t)h * head_dim + d];
    mask_before(row, first);
    __syncthreads();
    // (1) scores, straight into the global row (s = row + first: the same addresses)
    scores_range(qs, k, head_dim, first, n_keys, rows.scale, row + first, (float *)0);
    __syncthreads();  // the row's global writes are visible to the whole block after this

    // (2) max and sum of the weights
    float mx = -INFINITY;
    for (int t = first + tid; t < n_keys; t += blockDim.x)
        if (emxr::is_finite_f(row[t])) mx = fmaxf(mx, row[t]);  // the statistics' max: finite
    mx = emxr::block_reduce(mx, red_f, emxr::MaxOp());
    float l = 0.0f;
    emxr::FixedMaxSums sums = emxr::fixed_max_sums_zero();
    for (int t = first + tid; t < n_keys; t += blockDim.x) {
        l += expf(row[t] - mx);
        if (stats) emxr::fixed_max_add(sums, row[t], (double)mx);
    }
    l = emxr::block_reduce(l, red_f, emxr::SumOp());
    if (stats) {  // the same for the whole block: every thread reaches the barriers inside
        sums = emxr::block_reduce(sums, red_s, emxr::FixedMaxSumsOp());
        if (tid == 0) emxr::store_stats(head_stats + h, emxr::fixed_max_to_stats(sums, mx));
    }

    // (3) out = Σ p_t v_t, a thread per output element: the threads of a warp read one value
    // row as consecutive words
    const float inv_l = 1.0f / l;
    for (int d = tid; d < head_dim; d += blockDim.x) {
        float acc = 0.0f;
        for (int t = first; t < n_keys; t++) acc += expf(row[t] - mx) * kv_load(kv_row(v, t), d);
        out[(size_t)h * head_dim + d] = acc * inv_l;
    }
}

// ---------------------------------------------------------------------------------------------
// SPLIT, part 1: block (c, h, r) handles keys [c·chunk, min((c+1)·chunk, n_keys_r)) of head h
// for query row r. Dynamic shared memory: s[chunk] scores then weights, red[max(blockDim, head_dim)].
template <typename KV, bool BRANCHES>
__global__ void __launch_bounds__(ATTN_BLOCK)
attention_split_kernel(const float *__restrict__ q, KvRows<KV> k_rows, KvRows<KV> v_rows, int n_heads,
                       int n_kv_heads, int head_dim, int n_keys_arg, const int *n_keys_dev, QueryRows rows,
                       int chunk, float *scores, int score_stride, int want_stats, SplitWs ws,
                       int max_chunks, int branch_stride) {
    extern __shared__ float smem[];
    __shared__ float qs[ATTN_MAX_HEAD_DIM];
    __shared__ float red_f[ATTN_BLOCK];
    __shared__ FixedMaxSumsT red_s[ATTN_BLOCK];
    const int c = blockIdx.x, h = blockIdx.y, r = blockIdx.z, tid = threadIdx.x;
    const int n_keys = row_keys<BRANCHES>(n_keys_arg, n_keys_dev, rows, r);
    const int first = row_first(rows, n_keys), t0 = first + c * chunk;  // chunks from the row's first key
    const bool last = r == rows.n - 1;
    if (c == 0 && scores && last) mask_before(scores + (size_t)h * score_stride, first);
    if (t0 >= n_keys) return;  // past the row's keys (graph replays and earlier rows need fewer chunks)
    const int t1 = min(t0 + chunk, n_keys), len = t1 - t0;
    const int kvh = h / (n_heads / n_kv_heads);
    const KvRows<KV> k = row_slice<BRANCHES>(k_rows, branch_stride, r, kvh, head_dim), v = row_slice<BRANCHES>(v_rows, branch_stride, r, kvh, head_dim);
    float *s = smem, *red = smem + chunk;
    const float scale = rows.scale;
    q += (size_t)r * rows.q_stride;

    for (int d = tid; d < head_dim; d += blockDim.x) qs[d] = q[(size_t)h * head_dim + d];
    __syncthreads();
    scores_range(qs, k, head_dim, t0, t1, scale, s,
                 scores && last ? scores + (size_t)h * score_stride : (float *)0);
    __syncthreads();

    float mx = -INFINITY;
    for (int i = tid; i < len; i += blockDim.x)
        if (emxr::is_finite_f(s[i])) mx = fmaxf(mx, s[i]);
    mx = emxr::block_reduce(mx, red_f, emxr::MaxOp());
    const size_t slot = ((size_t)r * n_heads + h) * max_chunks + c;
    if (want_stats && last) {
        emxr::FixedMaxSums sums = emxr::fixed_max_sums_zero();
        for (int i = tid; i < len; i += blockDim.x) emxr::fixed_max_add(sums, s[i], (double)mx);
        sums = emxr::block_reduce(sums, red_s, emxr::FixedMaxSumsOp());
        if (tid == 0) ws.stats[(size_t)h * max_chunks + c] = emxr::fixed_max_to_stats(sums, mx);
    }
    float l = 0.0f;
    __syncthreads();  // every thread has read s[] as scores before it becomes the weights
    for (int i = tid; i < len; i += blockDim.x) {
        s[i] = expf(s[i] - mx);
        l += s[i];
    }
    l = emxr::block_reduce(l, red_f, emxr::SumOp());  // (its barriers publish s[])

    // acc[d] = Σ_i s[i] v[t0+i][d]. With head_dim < blockDim, `parts` groups of head_dim threads
    // take every parts-th key, so no thread idles; red[] then sums the groups.
    const int parts = head_dim < (int)blockDim.x ? (int)blockDim.x / head_dim : 1;
    for (int j = tid; j < parts * head_dim; j += blockDim.x) {
        const int d = j % head_dim, part = j / head_dim;
        float acc = 0.0f;
        for (int i = part; i < len; i += parts) acc += s[i] * kv_load(kv_row(v, t0 + i), d);
        red[j] = acc;
    }
    __syncthreads();
    float *acc_out = ws.acc + slot * head_dim;
    for (int d = tid; d < head_dim; d += blockDim.x) {
        float a = 0.0f;
        for (int part = 0; part < parts; part++) a += red[part * head_dim + d];
        acc_out[d] = a;
    }
    if (tid == 0) {
        ws.ml[2 * slot] = mx;
        ws.ml[2 * slot + 1] = l;
    }
}

// SPLIT_GQA, part 1: block (c, kvh, r) does chunk c of query row r for the `group` query heads
// that share KV head kvh, so each key and value row is read from memory once for all of them
// (SPLIT reads it once per query head and counts on the L2 cache for the repeats). Writes the
// same partials as SPLIT, so the same combine kernel follows. Dynamic shared memory:
// qs[group][head_dim], s[group][chunk], red[group][max(2 · blockDim, head_dim)].
// Launch bounds: at least 4 blocks an SM (at most 128 registers a thread). Without the second
// bound ptxas (CUDA 13.0, sm_80) gave the f16 kernel 72 registers and 8 bytes of spills; with it,
// 79-80 registers and none on sm_80 and sm_90 (the resource report checks it).
template <typename KV, bool BRANCHES>
__global__ void __launch_bounds__(ATTN_BLOCK, 4)
attention_split_gqa_kernel(const float *__restrict__ q, KvRows<KV> k_rows, KvRows<KV> v_rows, int n_heads,
                           int n_kv_heads, int head_dim, int n_keys_arg, const int *n_keys_dev,
                           QueryRows rows, int chunk, float *scores, int score_stride, int want_stats,
                           SplitWs ws, int max_chunks, int branch_stride) {
    extern __shared__ float smem[];
    __shared__ float red_f[ATTN_BLOCK];
    __shared__ FixedMaxSumsT red_s[ATTN_BLOCK];
    const int c = blockIdx.x, kvh = blockIdx.y, r = blockIdx.z, tid = threadIdx.x;
    const int group = n_heads / n_kv_heads, h0 = kvh * group;  // query heads h0 .. h0+group-1
    const int n_keys = row_keys<BRANCHES>(n_keys_arg, n_keys_dev, rows, r);
    const int first = row_first(rows, n_keys), t0 = first + c * chunk;  // chunks from the row's first key
    const bool last = r == rows.n - 1;
    if (c == 0 && scores && last)
        for (int g = 0; g < group; g++) mask_before(scores + (size_t)(h0 + g) * score_stride, first);
    if (t0 >= n_keys) return;
    const int t1 = min(t0 + chunk, n_keys);
    const KvRows<KV> k = row_slice<BRANCHES>(k_rows, branch_stride, r, kvh, head_dim), v = row_slice<BRANCHES>(v_rows, branch_stride, r, kvh, head_dim);
    float *qs = smem, *s = qs + group * head_dim, *red = s + group * chunk;
    float *score_rows = scores && last ? scores : (float *)0;
    const float scale = rows.scale;
    q += (size_t)r * rows.q_stride;

    for (int i = tid; i < group * head_dim; i += blockDim.x) qs[i] = q[(size_t)h0 * head_dim + i];
    __syncthreads();
    gqa_chunk(qs, k, v, t0, t1, group, head_dim, h0, n_heads, r, c, last, want_stats, scale, s, chunk, red, score_rows,
              score_stride, ws, max_chunks, red_f, red_s);
}

int rows_of(const EmxAttentionArgs *a) { return a->n_rows > 1 ? a->n_rows : 1; }

template <typename KV, bool BRANCHES>
cudaError_t launch(int kernel, const EmxAttentionArgs *a, cudaStream_t stream) {
    KvRows<KV> k, v;
    kv_rows_of(a, &k, &v);
    const int n_rows = rows_of(a), q_dim = a->n_heads * a->head_dim;
    QueryRows rows;
    rows.n = n_rows;
    rows.q_stride = a->q_row_stride > 0 ? a->q_row_stride : q_dim;
    rows.out_stride = a->out_row_stride > 0 ? a->out_row_stride : q_dim;
    rows.scale = a->scale > 0 ? a->scale : 1.0f / sqrtf((float)a->head_dim);
    rows.window = a->window;
    const int bs = a->tail_branch_stride;
    if (kernel == EMX_ATTN_PLAIN) {
        dim3 grid(a->n_heads, 1, n_rows);
        attention_plain_kernel<KV, BRANCHES><<<grid, ATTN_BLOCK, 0, stream>>>(a->q, k, v, a->n_heads, a->n_kv_heads, a->head_dim, a->n_keys, a->n_keys_dev, rows, a->out, a->scores, a->score_stride, a->head_stats, (float *)a->workspace, bs);
        return cudaGetLastError();
    }
    const int chunk = chunk_of(a), max_chunks = (a->n_keys + chunk - 1) / chunk;
    SplitWs ws = split_ws(a->workspace, a->n_heads, max_chunks, n_rows);
    const int red = a->head_dim > ATTN_BLOCK ? a->head_dim : ATTN_BLOCK;
    const int group = a->n_heads / a->n_kv_heads, gqa_red = a->head_dim > 2 * ATTN_BLOCK ? a->head_dim : 2 * ATTN_BLOCK;
    const size_t gqa_shmem = (size_t)group * (a->head_dim + chunk + gqa_red) * sizeof(float);
    // SPLIT_GQA loads element pairs: an even head_dim (every supported model's)
    if (kernel == EMX_ATTN_SPLIT_GQA && group <= ATTN_MAX_GROUP && a->head_dim % 2 == 0 &&
        gqa_shmem <= ATTN_STATIC_SMEM_MAX) {
        dim3 grid(max_chunks, a->n_kv_heads, n_rows);
        attention_split_gqa_kernel<KV, BRANCHES><<<grid, ATTN_BLOCK, gqa_shmem, stream>>>(a->q, k, v, a->n_heads, a->n_kv_heads, a->head_dim, a->n_keys, a->n_keys_dev, rows, chunk, a->scores, a->score_stride, a->head_stats != 0, ws, max_chunks, bs);
    } else {  // SPLIT, and SPLIT_GQA's fallback for groups too large for its shared memory
        const size_t shmem = (size_t)(chunk + red) * sizeof(float);
        dim3 grid(max_chunks, a->n_heads, n_rows);
        attention_split_kernel<KV, BRANCHES><<<grid, ATTN_BLOCK, shmem, stream>>>(a->q, k, v, a->n_heads, a->n_kv_heads, a->head_dim, a->n_keys, a->n_keys_dev, rows, chunk, a->scores, a->score_stride, a->head_stats != 0, ws, max_chunks, bs);
    }
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    dim3 grid(a->n_heads, 1, n_rows);
    attention_combine_kernel<BRANCHES><<<grid, ATTN_BLOCK, 0, stream>>>(a->n_heads, a->head_dim, a->n_keys, a->n_keys_dev, rows, chunk, a->out, a->head_stats, ws, max_chunks);
    return cudaGetLastError();
}

template <typename KV>
cudaError_t launch_kv(int kernel, const EmxAttentionArgs *a, cudaStream_t stream) {
    return a->tail_branch_stride ? launch<KV, true>(kernel, a, stream) : launch<KV, false>(kernel, a, stream);
}

// NULL when the call can run, else what is wrong with it (written into buf).
const char *bad_args(int kernel, const EmxAttentionArgs *a, char *buf, size_t n) {
    if (!a) return "no arguments";
    const long kv_dim = (long)a->n_kv_heads * a->head_dim, q_dim = (long)a->n_heads * a->head_dim;
    if (kernel < EMX_ATTN_PLAIN || kernel > EMX_ATTN_SPLIT_GQA) snprintf(buf, n, "kernel %d unknown", kernel);
    else if (a->n_heads < 1 || a->n_kv_heads < 1 || a->n_heads % a->n_kv_heads != 0)
        snprintf(buf, n, "n_heads %d is not a multiple of n_kv_heads %d >= 1", a->n_heads, a->n_kv_heads);
    else if (a->head_dim < 1 || a->head_dim > ATTN_MAX_HEAD_DIM)
        snprintf(buf, n, "head_dim %d not in 1..%d", a->head_dim, ATTN_MAX_HEAD_DIM);
    else if (a->n_keys < 1) snprintf(buf, n, "n_keys %d < 1", a->n_keys);
    else if (a->kv_dtype != EMX_KV_F32 && a->kv_dtype != EMX_KV_F16) snprintf(buf, n, "kv_dtype %d unknown", a->kv_dtype);
    else if (!a->q || !a->k_cache || !a->v_cache || !a->out) snprintf(buf, n, "q, k_cache, v_cache or out is NULL");
    else if (a->scores && a->score_stride < a->n_keys)
        snprintf(buf, n, "score_stride %d < n_keys %d", a->score_stride, a->n_keys);
    else if (a->keys_per_block < 0 || a->keys_per_block > ATTN_MAX_CHUNK)
        snprintf(buf, n, "keys_per_block %d not in 0..%d", a->keys_per_block, ATTN_MAX_CHUNK);
    else if (!a->tail_k != !a->tail_v) snprintf(buf, n, "tail_k and tail_v must be both set or both NULL");
    else if (a->window < 0) snprintf(buf, n, "window %d < 0", a->window);
    else if (a->cache_rows < 0 || (a->cache_rows && (!a->window || a->window + (a->tail_branch_stride ? 1 : rows_of(a)) - 1 > a->cache_rows)))
        snprintf(buf, n, "cache_rows %d: a ring needs a window and window %d + causal rows %d - 1 rows at least",
                 a->cache_rows, a->window, a->tail_branch_stride ? 1 : rows_of(a));
    else if (!(a->scale >= 0 && isfinite(a->scale))) snprintf(buf, n, "scale %g is not 0 or a positive number", (double)a->scale);
    else if (a->tail_start_dev && !a->tail_k) snprintf(buf, n, "tail_start_dev without a tail (tail_k, tail_v)");
    else if (a->tail_k && (a->tail_start < 0 || a->tail_row_stride < kv_dim))
        snprintf(buf, n, "tail_start %d < 0 or tail_row_stride %d < n_kv_heads * head_dim %ld", a->tail_start,
                 a->tail_row_stride, kv_dim);
    else if (a->tail_branch_stride && (!a->tail_k || a->tail_branch_stride < kv_dim))
        snprintf(buf, n, "tail_branch_stride %d without a tail or < n_kv_heads * head_dim %ld", a->tail_branch_stride,
                 kv_dim);
    else if (a->n_rows < 0 || a->n_rows > ATTN_MAX_ROWS || (!a->tail_branch_stride && a->n_rows > a->n_keys))
        snprintf(buf, n, "n_rows %d not in 0..min(n_keys %d, %d)", a->n_rows, a->n_keys, ATTN_MAX_ROWS);
    else if ((a->q_row_stride && a->q_row_stride < q_dim) || (a->out_row_stride && a->out_row_stride < q_dim))
        snprintf(buf, n, "q_row_stride %d or out_row_stride %d < n_heads * head_dim %ld", a->q_row_stride,
                 a->out_row_stride, q_dim);
    else if (!a->workspace && (kernel != EMX_ATTN_PLAIN || !a->scores || rows_of(a) > 1))
        snprintf(buf, n, "workspace is NULL (kernel %d, scores %s, n_rows %d)", kernel, a->scores ? "set" : "NULL",
                 rows_of(a));
    else return (const char *)0;
    return buf;
}

}  // namespace

extern "C" size_t emx_cuda_attention_workspace_bytes_rows(int kernel, int n_heads, int head_dim, int n_keys,
                                                          int keys_per_block, int n_rows) {
    if (n_heads < 1 || head_dim < 1 || n_keys < 1 || n_rows < 0) return 0;
    if (n_rows < 1) n_rows = 1;
    if (kernel == EMX_ATTN_PLAIN) return (size_t)n_rows * n_heads * n_keys * sizeof(float);
    const int chunk = keys_per_block > 0 ? keys_per_block : ATTN_DEFAULT_CHUNK;
    return split_ws_bytes(n_heads, head_dim, (n_keys + chunk - 1) / chunk, n_rows);
}

extern "C" size_t emx_cuda_attention_workspace_bytes(int kernel, int n_heads, int head_dim, int n_keys,
                                                     int keys_per_block) {
    return emx_cuda_attention_workspace_bytes_rows(kernel, n_heads, head_dim, n_keys, keys_per_block, 1);
}

extern "C" cudaError_t emx_cuda_attention(int kernel, const EmxAttentionArgs *a, cudaStream_t stream) {
    char buf[160];
    const char *why = bad_args(kernel, a, buf, sizeof buf);
    if (why) {
        fprintf(stderr, "emx_cuda_attention: %s\n", why);
        return cudaErrorInvalidValue;
    }
    return a->kv_dtype == EMX_KV_F16 ? launch_kv<__half>(kernel, a, stream)
                                     : launch_kv<float>(kernel, a, stream);
}
