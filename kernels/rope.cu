// rope.cu — Qwen2's q/k/v biases, per-head q/k RMSNorm (Qwen3), RoPE, and the write of k and v into the KV cache, in
// one kernel between the q/k/v matvec and the attention.
//
// For each row b and head h: (biases) x += b; (qk_norm) x = x / sqrt(mean(x²) + eps) * norm_w; then pair i of the
// head, (x[2i], x[2i+1]) for INTERLEAVED or (x[i], x[i+hd/2]) for HALF, is rotated by the angle
// pos[b] * inv_freq[i]. Query heads are written back in place; key heads go to the cache row
// (f32 or f16), and the value head is copied beside them.
// Threads: grid (n_heads + n_kv_heads, batch): one block per head of a row, one thread per pair
// (head_dim/2 threads rounded up to whole warps). The norm is a block reduction over the pairs.
// Bytes per call: batch * (q_dim + 2 * kv_dim) * 4 read (q, k, v), batch * (q_dim * 4 + 2 *
// kv_dim * kv_bytes) written (q in place, k and v into the cache), plus the small tables. Why fast: the CPU does norm, rotate and cache copy as three
// passes; here the head is read once into registers, and k/v never go back to a scratch buffer.
// The angles are computed per thread in double (exact at long positions, like the CPU) instead
// of from a table: a few thousand sin/cos per layer, hidden behind the loads. The pair's
// arithmetic is rope_pair.cuh's, which the fused decode attention (attention_decode.cu) shares.
// emx_cuda_kv_rows_copy, beside it, moves finished KV rows (a committed branch's tail into the
// cache): grid (rows, layers), 128 threads copying a row's 4-byte words; bytes: 2 x row_bytes
// per row.
#include "kernels/rope.h"

#include <math.h>
#include <stdint.h>

#include "kernels/common.cuh"
#include "kernels/rope_pair.cuh"

template <int KV>
__device__ __forceinline__ void store_kv(void *cache, size_t i, float v) {
    if constexpr (KV == 0)
        ((float *)cache)[i] = v;
    else
        ((__half *)cache)[i] = __float2half(v);
}

template <int KV>
__global__ void __launch_bounds__(256) rope_kv_kernel(const EmxRopeArgs a) {
    const int hd = a.head_dim, half = hd / 2, i = threadIdx.x, b = blockIdx.y;
    const bool is_q = (int)blockIdx.x < a.n_heads;
    const int h = is_q ? blockIdx.x : blockIdx.x - a.n_heads;
    const size_t q_off = ((size_t)b * a.n_heads + h) * hd;
    const size_t kv_dim = (size_t)a.n_kv_heads * hd, kv_off = (size_t)b * kv_dim + (size_t)h * hd;
    const float *src = is_q ? a.q + q_off : a.k + kv_off;
    const bool active = i < half;  // threads past the last pair only help the reduction
    int ia, ib;
    emx_rope_pair_index(a.style, i, half, &ia, &ib);
    float x0 = active ? src[ia] : 0.0f, x1 = active ? src[ib] : 0.0f;
    const float *bias = is_q ? a.bq : a.bk;
    if (bias && active) {
        x0 += bias[h * hd + ia];
        x1 += bias[h * hd + ib];
    }

    const float *norm_w = is_q ? a.q_norm : a.k_norm;
    if (norm_w) {  // the same for the whole block: the barrier inside is reached by all
        const float inv = 1.0f / sqrtf(emx_block_sum(emx_rope_pair_ss(x0, x1)) / (float)hd + a.eps);
        if (active) {
            x0 = x0 * inv * norm_w[ia];
            x1 = x1 * inv * norm_w[ib];
        }
    }
    if (!active) return;

    float y0, y1;
    emx_rope_rotate(x0, x1, a.pos[b], a.inv_freq[i], &y0, &y1);
    if (is_q) {
        a.q[q_off + ia] = y0;
        a.q[q_off + ib] = y1;
        return;
    }
    const int at = a.cache_row ? a.cache_row[b] : a.pos[b];
    const size_t row = (size_t)(a.cache_rows ? at % a.cache_rows : at);
    const size_t dst = row * kv_dim + (size_t)h * hd;
    store_kv<KV>(a.k_cache, dst + ia, y0);
    store_kv<KV>(a.k_cache, dst + ib, y1);
    const float v0 = a.v[kv_off + ia] + (a.bv ? a.bv[h * hd + ia] : 0.0f);
    const float v1 = a.v[kv_off + ib] + (a.bv ? a.bv[h * hd + ib] : 0.0f);
    store_kv<KV>(a.v_cache, dst + ia, v0);
    store_kv<KV>(a.v_cache, dst + ib, v1);
}

extern "C" cudaError_t emx_cuda_rope_kv(const EmxRopeArgs *a, cudaStream_t stream) {
    if (!a || a->batch < 0 || a->batch > 65535 ||  // batch is gridDim.y
        a->n_heads < 1 || a->n_kv_heads < 1 || a->head_dim < 2 || a->head_dim % 2 ||
        a->head_dim > 512 || (a->style != EMX_ROPE_INTERLEAVED && a->style != EMX_ROPE_HALF) ||
        (a->kv_dtype != EMX_KV_F32 && a->kv_dtype != EMX_KV_F16) || !a->q_norm != !a->k_norm || !a->bq != !a->bk ||
        !a->bq != !a->bv || a->cache_rows < 0)
        return cudaErrorInvalidValue;
    if (a->batch == 0) return cudaSuccess;
    const dim3 grid(a->n_heads + a->n_kv_heads, a->batch);
    const int threads = emx_round_to_warps(a->head_dim / 2, 256);
    if (a->kv_dtype == EMX_KV_F32)
        rope_kv_kernel<0><<<grid, threads, 0, stream>>>(*a);
    else
        rope_kv_kernel<1><<<grid, threads, 0, stream>>>(*a);
    return cudaGetLastError();
}

// Block (j, l) copies row j of layer l, a 4-byte word per thread at a time.
__global__ void kv_rows_copy_kernel(char *dst, const EmxKvLayer *dst_layers, int dst_pos, const char *src,
                                    size_t src_layer, size_t src_row, size_t words) {
    const size_t j = blockIdx.x, l = blockIdx.y;
    const EmxKvLayer at = dst_layers[l];
    const size_t row = (size_t)(at.row0 + (dst_pos + (int)j) % at.rows);  // emx_kv_row
    uint32_t *d = (uint32_t *)(dst + row * words * 4);
    const uint32_t *s = (const uint32_t *)(src + l * src_layer + j * src_row);
    for (size_t i = threadIdx.x; i < words; i += blockDim.x) d[i] = s[i];
}

extern "C" cudaError_t emx_cuda_kv_rows_copy(void *dst, const EmxKvLayer *dst_layers, int dst_pos, const void *src,
                                             size_t src_layer, size_t src_row, size_t row_bytes, int n_rows,
                                             int n_layers, cudaStream_t stream) {
    if (!dst || !dst_layers || !src || dst_pos < 0 || n_rows < 0 || n_layers < 0 || n_rows > 65535 ||
        n_layers > 65535 || ((src_layer | src_row | row_bytes | (size_t)dst | (size_t)src) & 3))
        return cudaErrorInvalidValue;
    if (n_rows == 0 || n_layers == 0 || row_bytes == 0) return cudaSuccess;
    kv_rows_copy_kernel<<<dim3(n_rows, n_layers), 128, 0, stream>>>((char *)dst, dst_layers, dst_pos,
                                                                   (const char *)src, src_layer, src_row,
                                                                   row_bytes / 4);
    return cudaGetLastError();
}
