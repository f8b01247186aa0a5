// attention.h — attention of one decoding position over the KV cache (launchers of attention.cu).
//
// For every query head h (GQA: KV head h / (n_heads / n_kv_heads)):
//   S_h[t] = q_h · k_t / sqrt(head_dim),  t < n_keys (= pos + 1: the token's own key included)
//   out_h  = Σ_t softmax(S_h)[t] · v_t
// and, when asked, the raw scores S_h (the rows the attention metrics read) and the per-head
// softmax statistics (metrics.h's EmxSoftmaxStats: entropy and varentropy of each head for free).
// The CPU twin is emx_attention_head (runtime/cpu_ops.h); the cache layout is the CPU's:
// [ctx][n_kv_heads][head_dim] per layer, f32, or f16 (same layout, half the bytes), the current
// position's key and value already written (kernels/rope.h's emx_cuda_rope_kv does that).
// Which kernel: SPLIT_GQA for speed (SPLIT when a group exceeds 8 heads), PLAIN to read.
#ifndef ENTROPIX_KERNELS_ATTENTION_H
#define ENTROPIX_KERNELS_ATTENTION_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

// (sampler/ headers inside the C linkage block: they declare C functions)
#include "metrics.h"

typedef enum {
    EMX_ATTN_PLAIN = 0,  // one block per head, three passes over its keys (the teaching version)
    EMX_ATTN_SPLIT = 1,  // flash-decoding: blocks per (head, key chunk), then a combine kernel
    EMX_ATTN_SPLIT_GQA = 2,  // SPLIT with blocks per (KV head, key chunk): K/V read once per group
} EmxAttnKernel;

typedef enum {
    EMX_KV_F32 = 0,
    EMX_KV_F16 = 1,  // __half
} EmxKvDtype;

// Everything one call needs; pointers are device pointers.
typedef struct {
    const float *q;       // [n_heads][head_dim] the position's queries (after RoPE)
    const void *k_cache;  // this layer's keys   [>= n_keys][n_kv_heads][head_dim], kv_dtype
    const void *v_cache;  // this layer's values [>= n_keys][n_kv_heads][head_dim], kv_dtype
    int kv_dtype;         // EmxKvDtype
    int n_heads, n_kv_heads, head_dim;  // n_heads % n_kv_heads == 0, 1 <= head_dim <= 512
    int n_keys;           // keys 0..n_keys-1 are attended (pos + 1); with n_keys_dev: the most
    const int *n_keys_dev;  // NULL, or a device int holding n_keys (<= n_keys), read when the
                            // kernel runs: a captured CUDA graph replays with a new position
    float *out;           // [n_heads][head_dim]
    float *scores;        // NULL, or [n_heads][score_stride]: S_h[t] for t < n_keys
    int score_stride;     // >= n_keys when scores != NULL
    EmxSoftmaxStats *head_stats;  // NULL, or [n_heads]: statistics of each row S_h
    int keys_per_block;   // SPLIT, SPLIT_GQA: keys per chunk (0: 256; at most 2048)
    void *workspace;      // emx_cuda_attention_workspace_bytes() bytes (device); PLAIN needs it
                          // only when scores == NULL (its score rows go there instead)
} EmxAttentionArgs;

// Workspace bytes for a call of `kernel` with these sizes (n_keys: the largest to be used).
size_t emx_cuda_attention_workspace_bytes(int kernel, int n_heads, int head_dim, int n_keys,
                                          int keys_per_block);

// Launches the attention (one or two kernels on `stream`). Returns cudaErrorInvalidValue on bad
// sizes, else the launch status.
cudaError_t emx_cuda_attention(int kernel, const EmxAttentionArgs *a, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
