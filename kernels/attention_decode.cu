// attention_decode.cu — the decode step's attention (one query row) with the bias, per-head
// RMSNorm and RoPE of q and of the new key, the new key and value's write into the KV cache, and
// SPLIT's combine, all in one kernel: in the graph path these are a kernel before it
// (kernels/rope.cu's rope_kv, whose output the attention reads back) and one after it (SPLIT's
// combine kernel, kernels/attention_gqa.cuh).
//
//   q_h = rope(norm(q_h + bq_h)),  k_new = rope(norm(k + bk)),  v_new = v + bv
//   cache[pos] = (k_new, v_new);  then SPLIT_GQA's attention over keys 0..pos (attention.cu):
//   per chunk c the partial (m_c, l_c, acc_c, statistics), out_h = Σ_c e^{m_c-M} acc_c / Σ_c e^{m_c-M} l_c
//
// Threads: grid (chunks, n_kv_heads, rows), 128 threads a block, as SPLIT_GQA: block (c, kvh, r)
// takes chunk c of row r's keys for the `group` query heads of KV head kvh. Every block first
// rotates its group's queries into shared memory (a thread per pair of a head; each head's norm a
// reduction over its pairs); the block of the last chunk, whose last key is the new one, also
// rotates the new key of KV head kvh and keeps it and the new value in shared memory (rounded to
// the cache's type, so they are the values the cache will hold) and writes both into cache row
// pos. Then the chunk runs SPLIT_GQA's code (attention_gqa.cuh's gqa_chunk) with key pos read
// from shared memory (FreshRows), which leaves the chunk's partials in the workspace. Last, the
// block arrives at its KV head's counter (grid_sync.cuh's emx_grid_arrive_last: a barrier, a
// fence, an atomicAdd); the block that arrives last of the row's chunks of kvh, whichever chunk
// it is, combines the group's heads (combine_head, the combine kernel's code: the same bits) and
// sets the counter back to 0 for the next launch. No block waits for another.
// One row (emx_cuda_attention_decode: the decode step) or several, each over its own cache
// (emx_cuda_attention_decode_rows: several states' rows in one step, each row's cache, position,
// score rows, workspace and counters from a device table; row r's result is the one it gets
// alone: the same blocks do the same work, the grid's z only selects the row).
// Why no block reads a row another block is still writing: row pos of KV head kvh's slice is
// written by block (last chunk, kvh) alone, and read by no block from memory: the last chunk reads
// it from its own shared memory, the other chunks of kvh end before key pos (chunks are disjoint
// and the new key is the last of the last one), and the blocks of other KV heads read only their
// own heads' slices of any row. The next kernel that reads the row (the next step's attention) is
// a later launch on the same stream. The partials of kvh's heads are read only by the block that
// arrived last, after every chunk of kvh has published them.
// Bytes per row: the attention's (attention.cu: the cache rows read once per KV head, the score
// rows written, the partials written and read back once), plus q (q_dim * 4) read by every
// chunk's blocks, k and v (kv_dim * 4 each) read and the new cache row written once, and a
// counter's atomic per block; against rope_kv + attention + combine, q is not written back and
// read again (q_dim * 8) and there are two launches fewer.
// Why fused: a launch at decode costs 2.5-5 µs on an H200, mostly ramp-up, and rope_kv moves a few
// KB, the combine a few more (docs/cuda.md). The per-head norm's sum is added in rope_kv's block
// order (common.cuh's emx_block_sum_as) and the pair's arithmetic is rope_pair.cuh's, so the
// results are bitwise the graph path's (tests/kernels/test_attention_decode.cpp).
#include "kernels/attention_decode.h"

#include <limits.h>
#include <stdio.h>

#include "kernels/attention_decode.cuh"
#include "kernels/launch.cuh"

namespace {

// One row: its position (and key count, for a graph) read from device memory.
template <typename KV>
__global__ void __launch_bounds__(ATTN_BLOCK, 4)
attention_decode_kernel(const DecodeRope rp, const DecodeShape sh, DecodeRow<KV> row, const int *pos_dev,
                        const int *n_keys_dev) {
    extern __shared__ float smem[];
    __shared__ float red_f[ATTN_BLOCK];
    __shared__ FixedMaxSumsT red_s[ATTN_BLOCK];
    __shared__ float inv[ATTN_MAX_GROUP];
    __shared__ int last;
    // PDL (kernels/launch.cuh): trigger and wait only. Everything the kernel reads first (the
    // position, q, the new k and v) is an earlier kernel's or the step's input, and its weights (the
    // q/k norms, biases, RoPE frequencies) are a few hundred bytes not worth a prefetch. The next
    // kernel's wait covers this one's end, the last block's combine included.
    emx_pdl_trigger();
    emx_pdl_wait();
    row.pos = *pos_dev;
    if (n_keys_dev) row.n_keys = *n_keys_dev;
    decode_block(rp, sh, row, blockIdx.x, blockIdx.y, smem, red_f, red_s, inv, &last);
}

// Row blockIdx.z of a table: its state's buffers at `layer`, q, k, v and out at row z of theirs.
template <typename KV>
__global__ void __launch_bounds__(ATTN_BLOCK, 4)
attention_decode_rows_kernel(const DecodeRope rp, const DecodeShape sh, const EmxAttnDecodeRow *table, int layer,
                             const float *q, const float *k, const float *v, float *out) {
    extern __shared__ float smem[];
    __shared__ float red_f[ATTN_BLOCK];
    __shared__ FixedMaxSumsT red_s[ATTN_BLOCK];
    __shared__ float inv[ATTN_MAX_GROUP];
    __shared__ int last;
    // PDL as the one-row kernel's (the table is the step's input, copied before its first kernel)
    emx_pdl_trigger();
    emx_pdl_wait();
    const int r = blockIdx.z, q_dim = sh.n_heads * sh.head_dim, kv_dim = sh.n_kv_heads * sh.head_dim;
    const EmxAttnDecodeRow t = table[r];
    const EmxKvLayer at = t.layers[layer];  // this layer's rows in the row's state
    const size_t cache_at = (size_t)at.row0 * kv_dim;
    DecodeRow<KV> row;
    row.q = q + (size_t)r * q_dim;
    row.k = k + (size_t)r * kv_dim;
    row.v = v + (size_t)r * kv_dim;
    row.k_cache = (KV *)t.k_cache + cache_at;
    row.v_cache = (KV *)t.v_cache + cache_at;
    row.ring = at.rows < t.ctx ? at.rows : 0;
    row.pos = t.pos;
    row.n_keys = t.pos + 1;
    row.out = out + (size_t)r * q_dim;
    row.scores = t.scores ? t.scores + (size_t)layer * sh.n_heads * t.ctx : nullptr;
    row.score_stride = t.ctx;
    row.head_stats = t.head_stats ? t.head_stats + (size_t)layer * sh.n_heads : nullptr;
    row.max_chunks = (t.ctx + sh.chunk - 1) / sh.chunk;
    row.ws = split_ws(t.workspace, sh.n_heads, row.max_chunks, 1);
    row.arrivals = t.arrivals;
    decode_block(rp, sh, row, blockIdx.x, blockIdx.y, smem, red_f, red_s, inv, &last);
}

// The fields every row shares, from the call.
DecodeRope rope_of(const EmxAttnDecodeArgs *d) {
    const DecodeRope rp = {d->inv_freq, d->q_norm, d->k_norm, d->bq, d->bk, d->bv, d->eps, d->style};
    return rp;
}

DecodeShape shape_of(const EmxAttentionArgs *a) {
    return decode_shape(a->n_heads, a->n_kv_heads, a->head_dim, a->keys_per_block, a->scale, a->window);
}

size_t smem_of(const EmxAttentionArgs *a, int kv_bytes) {
    return decode_smem(a->n_heads / a->n_kv_heads, a->head_dim, chunk_of(a), kv_bytes);
}

template <typename KV>
cudaError_t launch_decode(const EmxAttnDecodeArgs *d, cudaStream_t stream) {
    const EmxAttentionArgs *a = &d->attn;
    const DecodeShape sh = shape_of(a);
    DecodeRow<KV> row;
    row.q = a->q, row.k = d->k, row.v = d->v;
    row.k_cache = (KV *)a->k_cache, row.v_cache = (KV *)a->v_cache;
    row.ring = a->cache_rows;
    row.pos = 0, row.n_keys = a->n_keys;  // pos: read on the device
    row.out = a->out;
    row.scores = a->scores, row.score_stride = a->score_stride, row.head_stats = a->head_stats;
    row.max_chunks = (a->n_keys + sh.chunk - 1) / sh.chunk;
    row.ws = split_ws(a->workspace, a->n_heads, row.max_chunks, 1);
    row.arrivals = d->arrivals;
    const DecodeRope rp = rope_of(d);
    const size_t shmem = smem_of(a, (int)sizeof(KV));
    const dim3 grid(row.max_chunks, a->n_kv_heads, 1);
    return EMX_LAUNCH(d->pdl, grid, ATTN_BLOCK, shmem, stream, attention_decode_kernel<KV>, rp, sh, row, d->pos,
                      a->n_keys_dev);
}

template <typename KV>
cudaError_t launch_rows(const EmxAttnDecodeArgs *d, const EmxAttnDecodeRow *rows, int n_rows, int layer,
                        cudaStream_t stream) {
    const EmxAttentionArgs *a = &d->attn;
    const DecodeShape sh = shape_of(a);
    const DecodeRope rp = rope_of(d);
    const size_t shmem = smem_of(a, (int)sizeof(KV));
    const dim3 grid((a->n_keys + sh.chunk - 1) / sh.chunk, a->n_kv_heads, n_rows);
    return EMX_LAUNCH(d->pdl, grid, ATTN_BLOCK, shmem, stream, attention_decode_rows_kernel<KV>, rp, sh, rows, layer,
                      a->q, d->k, d->v, a->out);
}

// NULL when the fields every call reads are right, else what is wrong with them.
const char *bad_common(const EmxAttnDecodeArgs *d) {
    if (!d) return "no arguments";
    const EmxAttentionArgs *a = &d->attn;
    if (!emx_cuda_attention_decode_fits(a->n_heads, a->n_kv_heads, a->head_dim, a->keys_per_block, a->kv_dtype))
        return "a shape the fused kernel does not take (emx_cuda_attention_decode_fits)";
    if (a->n_keys < 1 || a->n_rows > 1 || a->tail_k || a->tail_v || a->tail_branch_stride)
        return "not one query row a call over the cache (n_keys < 1, n_rows > 1 or a tail)";
    if (!a->q || !a->out) return "q or out is NULL";
    if (a->window < 0 || !(a->scale >= 0 && isfinite(a->scale))) return "window < 0 or a bad scale";
    if (a->cache_rows < 0 || (a->cache_rows && (!a->window || a->window > a->cache_rows)))
        return "cache_rows: a ring without a window, or shorter than it";
    if (!d->k || !d->v || !d->inv_freq) return "k, v or inv_freq is NULL";
    if (!d->q_norm != !d->k_norm || !d->bq != !d->bk || !d->bq != !d->bv) return "q/k norms or biases given in part";
    if (d->style != EMX_ROPE_INTERLEAVED && d->style != EMX_ROPE_HALF) return "unknown rope style";
    return nullptr;
}

// NULL when the one-row call can run, else what is wrong with it.
const char *bad_decode(const EmxAttnDecodeArgs *d) {
    const char *why = bad_common(d);
    if (why) return why;
    const EmxAttentionArgs *a = &d->attn;
    if (!a->k_cache || !a->v_cache || !a->workspace) return "a cache or the workspace is NULL";
    if (a->scores && a->score_stride < a->n_keys) return "score_stride < n_keys";
    if (!d->pos || !d->arrivals) return "pos or arrivals is NULL";
    return nullptr;
}

}  // namespace

extern "C" int emx_cuda_attention_decode_fits(int n_heads, int n_kv_heads, int head_dim, int keys_per_block,
                                              int kv_dtype) {
    if (n_heads < 1 || n_kv_heads < 1 || n_heads % n_kv_heads || n_heads / n_kv_heads > ATTN_MAX_GROUP) return 0;
    if (head_dim < 2 || head_dim % 2 || head_dim > ATTN_MAX_HEAD_DIM) return 0;
    if (keys_per_block < 0 || keys_per_block > ATTN_MAX_CHUNK) return 0;
    if (kv_dtype != EMX_KV_F32 && kv_dtype != EMX_KV_F16) return 0;
    const int chunk = keys_per_block > 0 ? keys_per_block : ATTN_DEFAULT_CHUNK;
    return decode_smem(n_heads / n_kv_heads, head_dim, chunk, kv_dtype == EMX_KV_F16 ? 2 : 4) <= ATTN_STATIC_SMEM_MAX;
}

extern "C" cudaError_t emx_cuda_attention_decode(const EmxAttnDecodeArgs *d, cudaStream_t stream) {
    const char *why = bad_decode(d);
    if (why) {
        fprintf(stderr, "emx_cuda_attention_decode: %s\n", why);
        return cudaErrorInvalidValue;
    }
    return d->attn.kv_dtype == EMX_KV_F16 ? launch_decode<__half>(d, stream) : launch_decode<float>(d, stream);
}

extern "C" cudaError_t emx_cuda_attention_decode_rows(const EmxAttnDecodeArgs *d, const EmxAttnDecodeRow *rows,
                                                      int n_rows, int layer, cudaStream_t stream) {
    const char *why = bad_common(d);
    if (!why && (!rows || n_rows < 1 || n_rows > ATTN_MAX_ROWS || layer < 0))
        why = "no rows, n_rows not in 1..65535 or layer < 0";
    if (why) {
        fprintf(stderr, "emx_cuda_attention_decode_rows: %s\n", why);
        return cudaErrorInvalidValue;
    }
    return d->attn.kv_dtype == EMX_KV_F16 ? launch_rows<__half>(d, rows, n_rows, layer, stream)
                                          : launch_rows<float>(d, rows, n_rows, layer, stream);
}
