// attention_decode.cu — the decode step's attention (one query row) with the bias, per-head
// RMSNorm and RoPE of q and of the new key, and the new key and value's write into the KV cache,
// inside it: in the graph path these are a kernel of their own (kernels/rope.cu's rope_kv) whose
// output the attention reads back.
//
//   q_h = rope(norm(q_h + bq_h)),  k_new = rope(norm(k + bk)),  v_new = v + bv
//   cache[pos] = (k_new, v_new);  then SPLIT_GQA's attention over keys 0..pos (attention.cu)
//
// Threads: grid (chunks, n_kv_heads), 128 threads a block, as SPLIT_GQA: block (c, kvh) takes
// chunk c of the keys for the `group` query heads of KV head kvh. Every block first rotates its
// group's queries into shared memory (a thread per pair of a head; each head's norm a reduction
// over its pairs); the block of the last chunk, whose last key is the new one, also rotates the
// new key of KV head kvh and keeps it and the new value in shared memory (rounded to the cache's
// type, so they are the values the cache will hold) and writes both into cache row pos. Then the
// chunk runs SPLIT_GQA's code (attention_gqa.cuh's gqa_chunk) with key pos read from shared
// memory (FreshRows), and SPLIT's combine kernel follows.
// Why no block reads a row another block is still writing: row pos of KV head kvh's slice is
// written by block (last chunk, kvh) alone, and read by no block from memory: the last chunk reads
// it from its own shared memory, the other chunks of kvh end before key pos (chunks are disjoint
// and the new key is the last of the last one), and the blocks of other KV heads read only their
// own heads' slices of any row. The next kernel that reads the row (the next step's attention) is
// a later launch on the same stream.
// Bytes per call: the attention's (attention.cu: the cache rows read once per KV head, the score
// rows and partials written), plus q (q_dim * 4) read by every chunk's blocks, k and v (kv_dim * 4
// each) read and the new cache row written once; against rope_kv + attention, q is not written
// back and read again (q_dim * 8) and there is one launch fewer.
// Why fused: a launch at decode costs 2.5-5 µs on an H200, mostly ramp-up, and rope_kv moves a few
// KB (docs/cuda.md). The per-head norm's sum is added in rope_kv's block order (common.cuh's
// emx_block_sum_as) and the pair's arithmetic is rope_pair.cuh's, so the results are bitwise the
// graph path's (tests/kernels/test_attention_decode.cpp).
#include "kernels/attention_decode.h"

#include <stdio.h>

#include "kernels/attention_gqa.cuh"
#include "kernels/grid_sync.cuh"
#include "kernels/launch.cuh"
#include "kernels/rope_pair.cuh"

namespace {

template <typename KV>
__device__ __forceinline__ KV to_kv(float v);
template <>
__device__ __forceinline__ float to_kv<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half to_kv<__half>(float v) { return __float2half(v); }

// The rope fields of the call (EmxAttnDecodeArgs's), by value into the kernel.
struct DecodeRope {
    const float *q, *k, *v;
    const int *pos;
    const double *inv_freq;
    const float *q_norm, *k_norm, *bq, *bk, *bv;
    float eps;
    int style;
};

// n_h heads [n_h][hd] of src (+ bias) into dst (shared), each normed (norm_w) and rotated as
// rope_kv_kernel does: its block of emx_round_to_warps(hd / 2, 256) threads, a pair each, adds the
// pairs' squares, and so does emx_block_sum_as here. ss: shared scratch [n_h][hd / 2]; inv:
// shared [n_h]. Every thread calls it (barriers inside).
__device__ void rope_heads(const float *src, const float *bias, const float *norm_w, int n_h, int hd, int style,
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
        const int T = half <= 32 ? 32 : half >= 256 ? 256 : (half + 31) / 32 * 32;  // emx_round_to_warps(half, 256)
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
size_t decode_smem(int group, int head_dim, int chunk, int kv_bytes) {
    const int gqa_red = head_dim > 2 * ATTN_BLOCK ? head_dim : 2 * ATTN_BLOCK;
    return (size_t)2 * head_dim * kv_bytes +
           ((size_t)group * (head_dim + chunk + gqa_red) + head_dim + (size_t)group * (head_dim / 2)) * sizeof(float);
}

template <typename KV>
__global__ void __launch_bounds__(ATTN_BLOCK, 4)
attention_decode_kernel(const DecodeRope rp, KvRows<KV> k_rows, KvRows<KV> v_rows, KV *k_cache, KV *v_cache,
                        int n_heads, int n_kv_heads, int head_dim, int n_keys_arg, const int *n_keys_dev,
                        QueryRows rows, int chunk, float *scores, int score_stride, int want_stats, SplitWs ws,
                        int max_chunks) {
    extern __shared__ float smem[];
    __shared__ float red_f[ATTN_BLOCK];
    __shared__ FixedMaxSumsT red_s[ATTN_BLOCK];
    __shared__ float inv[ATTN_MAX_GROUP];
    // PDL (kernels/launch.cuh): trigger and wait only. Everything the kernel reads first (the key
    // count, q, the new k and v) is an earlier kernel's or the step's input, and its weights (the
    // q/k norms, biases, RoPE frequencies) are a few hundred bytes not worth a prefetch.
    emx_pdl_trigger();
    emx_pdl_wait();
    const int c = blockIdx.x, kvh = blockIdx.y, tid = threadIdx.x;
    const int group = n_heads / n_kv_heads, h0 = kvh * group, hd = head_dim;
    const int n_keys = n_keys_dev ? *n_keys_dev : n_keys_arg;
    const int first = row_first(rows, n_keys), t0 = first + c * chunk;
    if (c == 0 && scores)
        for (int g = 0; g < group; g++) mask_before(scores + (size_t)(h0 + g) * score_stride, first);
    if (t0 >= n_keys) return;
    const int t1 = min(t0 + chunk, n_keys), pos = *rp.pos;
    const bool fresh = t1 == n_keys;  // the last chunk: its last key, n_keys - 1 = pos, is the new one
    KV *fresh_k = (KV *)smem, *fresh_v = fresh_k + hd;
    float *qs = (float *)(fresh_v + hd), *s = qs + group * hd;
    float *red = s + group * chunk, *kf = red + group * (hd > 2 * ATTN_BLOCK ? hd : 2 * ATTN_BLOCK);
    float *ss = kf + hd;

    rope_heads(rp.q + (size_t)h0 * hd, rp.bq ? rp.bq + (size_t)h0 * hd : nullptr, rp.q_norm, group, hd, rp.style,
               rp.eps, pos, rp.inv_freq, qs, ss, inv);
    if (fresh) {  // block-uniform: the barriers inside are reached by all
        const size_t at = (size_t)kvh * hd, row = (size_t)pos * n_kv_heads * hd + at;
        rope_heads(rp.k + at, rp.bk ? rp.bk + at : nullptr, rp.k_norm, 1, hd, rp.style, rp.eps, pos, rp.inv_freq, kf,
                   ss, inv);
        for (int d = tid; d < hd; d += blockDim.x) {
            fresh_k[d] = to_kv<KV>(kf[d]);
            fresh_v[d] = to_kv<KV>(rp.v[at + d] + (rp.bv ? rp.bv[at + d] : 0.0f));  // rope_kv's expression
            k_cache[row + d] = fresh_k[d];
            v_cache[row + d] = fresh_v[d];
        }
        __syncthreads();
    }
    const FreshRows<KV> k = {head_slice(k_rows, kvh, hd), fresh_k, fresh ? pos : -1};
    const FreshRows<KV> v = {head_slice(v_rows, kvh, hd), fresh_v, fresh ? pos : -1};
    gqa_chunk(qs, k, v, t0, t1, group, hd, h0, n_heads, 0, c, true, want_stats, rows.scale, s, chunk, red, scores,
              score_stride, ws, max_chunks, red_f, red_s);
}

template <typename KV>
cudaError_t launch_decode(const EmxAttnDecodeArgs *d, cudaStream_t stream) {
    const EmxAttentionArgs *a = &d->attn;
    KvRows<KV> k, v;
    kv_rows_of(a, &k, &v);
    const int q_dim = a->n_heads * a->head_dim, chunk = chunk_of(a), max_chunks = (a->n_keys + chunk - 1) / chunk;
    QueryRows rows;
    rows.n = 1;
    rows.q_stride = rows.out_stride = q_dim;
    rows.scale = a->scale > 0 ? a->scale : 1.0f / sqrtf((float)a->head_dim);
    rows.window = a->window;
    const SplitWs ws = split_ws(a->workspace, a->n_heads, max_chunks, 1);
    const DecodeRope rp = {a->q, d->k, d->v, d->pos, d->inv_freq, d->q_norm, d->k_norm, d->bq, d->bk, d->bv, d->eps, d->style};
    const size_t shmem = decode_smem(a->n_heads / a->n_kv_heads, a->head_dim, chunk, (int)sizeof(KV));
    const dim3 grid(max_chunks, a->n_kv_heads, 1);
    cudaError_t e = EMX_LAUNCH(d->pdl, grid, ATTN_BLOCK, shmem, stream, attention_decode_kernel<KV>, rp, k, v, (KV *)a->k_cache, (KV *)a->v_cache, a->n_heads, a->n_kv_heads, a->head_dim, a->n_keys, a->n_keys_dev, rows, chunk, a->scores, a->score_stride, a->head_stats != 0, ws, max_chunks);
    if (e != cudaSuccess) return e;
    // pdl 0: the combine (attention_gqa.cuh's, shared with the separate attention) has no wait
    return EMX_LAUNCH(0, dim3(a->n_heads, 1, 1), ATTN_BLOCK, 0, stream, attention_combine_kernel<false>, a->n_heads, a->head_dim, a->n_keys, a->n_keys_dev, rows, chunk, a->out, a->head_stats, ws, max_chunks);
}

// NULL when the call can run, else what is wrong with it.
const char *bad_decode(const EmxAttnDecodeArgs *d) {
    if (!d) return "no arguments";
    const EmxAttentionArgs *a = &d->attn;
    if (!emx_cuda_attention_decode_fits(a->n_heads, a->n_kv_heads, a->head_dim, a->keys_per_block, a->kv_dtype))
        return "a shape the fused kernel does not take (emx_cuda_attention_decode_fits)";
    if (a->n_keys < 1 || a->n_rows > 1 || a->tail_k || a->tail_v || a->tail_branch_stride)
        return "not one query row over the cache (n_keys < 1, n_rows > 1 or a tail)";
    if (!a->q || !a->k_cache || !a->v_cache || !a->out || !a->workspace) return "q, a cache, out or workspace is NULL";
    if (a->scores && a->score_stride < a->n_keys) return "score_stride < n_keys";
    if (a->window < 0 || !(a->scale >= 0 && isfinite(a->scale))) return "window < 0 or a bad scale";
    if (!d->k || !d->v || !d->pos || !d->inv_freq) return "k, v, pos or inv_freq is NULL";
    if (!d->q_norm != !d->k_norm || !d->bq != !d->bk || !d->bq != !d->bv) return "q/k norms or biases given in part";
    if (d->style != EMX_ROPE_INTERLEAVED && d->style != EMX_ROPE_HALF) return "unknown rope style";
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
