// rope.h — rotary position embedding of q and k, fused with Qwen3's per-head q/k RMSNorm before
// it and the KV-cache write after it (kernels/rope.cu).
#ifndef ENTROPIX_KERNELS_ROPE_H
#define ENTROPIX_KERNELS_ROPE_H

#include <cuda_runtime.h>

#include "base/kv_type.h"

#ifdef __cplusplus
extern "C" {
#endif

// One call per layer, for `batch` rows (at most 65535) (a prompt's tokens, or one token of each of several
// sequences). All pointers are device pointers.
typedef struct {
    float *q;                  // [batch][n_heads * head_dim]: normed and rotated in place
    const float *k, *v;        // [batch][n_kv_heads * head_dim]: the rows' new keys and values
    void *k_cache, *v_cache;   // this layer's caches [rows][n_kv_heads * head_dim] of kv_dtype
    int kv_dtype;              // EmxKvType (base/kv_type.h): EMX_KV_F32, or EMX_KV_F16 (__half)
    const int *pos;            // [batch] position of each row: its rotation angle
    const int *cache_row;      // [batch] cache row each row's k and v go to; NULL: the position
    int cache_rows;            // 0; or the cache is a local layer's ring of cache_rows rows, and
                               // that row (the position, or cache_row's) goes to row % cache_rows
    const double *inv_freq;    // [head_dim/2] from emx_rope_inv_freq (Llama 3 factors included)
    const float *q_norm;       // [head_dim] Qwen3's per-head RMSNorm weight of q, or NULL (none)
    const float *k_norm;       // [head_dim] the same for k (NULL exactly when q_norm is)
    const float *bq, *bk, *bv; // [n_heads * head_dim], [n_kv_heads * head_dim] x 2: Qwen2's biases,
                               // added first; or NULL (none; all three or none)
    float eps;                 // of the per-head norm
    int batch, n_heads, n_kv_heads, head_dim;  // head_dim even, <= 512
    int style;                 // enum emx_rope_style: pairs (2i, 2i+1) or (i, i + head_dim/2)
} EmxRopeArgs;

// q_h = rope(norm(q_h)) for every query head; k_cache[row] = rope(norm(k_h)), v_cache[row] = v_h
// for every KV head. The angle of pair i at position p is p * inv_freq[i], computed in double as
// the CPU's emx_rope_angles does. Returns cudaErrorInvalidValue on bad sizes.
cudaError_t emx_cuda_rope_kv(const EmxRopeArgs *a, cudaStream_t stream);

// KV rows moved inside the device: for l < n_layers and j < n_rows, row_bytes bytes from
// src + l * src_layer + j * src_row (byte offsets) to the cache row of position dst_pos + j of
// layer l: dst + emx_kv_row(dst_layers[l], dst_pos + j) * row_bytes, dst_layers a device table
// (base/kv_type.h: a local layer's ring wraps). Offsets, pointers and row_bytes multiples of 4.
// A committed lookahead branch's tail rows into the cache (keys, then values): one launch instead
// of a copy per layer and row. Regions must not overlap. Returns cudaErrorInvalidValue on bad
// sizes; n_rows or n_layers 0: nothing.
cudaError_t emx_cuda_kv_rows_copy(void *dst, const EmxKvLayer *dst_layers, int dst_pos, const void *src,
                                  size_t src_layer, size_t src_row, size_t row_bytes, int n_rows, int n_layers,
                                  cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
