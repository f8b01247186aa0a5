// attention_decode.h — the decode step's attention with what came before it in its own kernel
// (kernels/rope.cu's rope_kv) done inside: Qwen2's q/k/v biases, Qwen3's per-head q/k RMSNorm,
// RoPE and the write of the new key and value into the KV cache (kernels/attention_decode.cu).
#ifndef ENTROPIX_KERNELS_ATTENTION_DECODE_H
#define ENTROPIX_KERNELS_ATTENTION_DECODE_H

#include <cuda_runtime.h>

#include "kernels/attention.h"

#ifdef __cplusplus
extern "C" {
#endif

// One query row at position *pos attending keys 0..*pos (a sliding window: the last `window` of
// them). attn: as emx_cuda_attention's (scores, head_stats, workspace, scale, window, n_keys or
// n_keys_dev, which must be *pos + 1 when the kernel runs), except that attn.q is the q row as
// the matvec left it (before bias, norm and RoPE), the cache row *pos is written here, and one
// query row only (n_rows 0 or 1, no tail, no branch rows). The rope fields are EmxRopeArgs's
// (kernels/rope.h) for one row: k and v the new key and value as the matvecs left them.
// Bitwise emx_cuda_rope_kv then emx_cuda_attention(EMX_ATTN_SPLIT_GQA): outputs, score rows,
// statistics and the cache row. attn.q is not changed (rope_kv rotates q in place).
typedef struct {
    EmxAttentionArgs attn;
    const float *k, *v;        // [n_kv_heads * head_dim]
    const int *pos;            // device int
    const double *inv_freq;    // [head_dim / 2]
    const float *q_norm, *k_norm;  // [head_dim] or NULL (both or neither)
    const float *bq, *bk, *bv; // or NULL (all three or none)
    float eps;
    int style;                 // enum emx_rope_style
    int pdl;                   // the chunk kernel with programmatic dependent launch (kernels/launch.cuh)
} EmxAttnDecodeArgs;

// Whether the fused kernel takes this shape (a group of at most 8 query heads per KV head, an
// even head_dim up to 512, its shared memory within 48 KiB); else the caller keeps rope_kv and
// emx_cuda_attention. keys_per_block as EmxAttentionArgs's (0: the default).
int emx_cuda_attention_decode_fits(int n_heads, int n_kv_heads, int head_dim, int keys_per_block, int kv_dtype);

// Two launches: the chunk kernel (a block per KV head and chunk of keys) and SPLIT's combine.
// Bad arguments: cudaErrorInvalidValue (a line on stderr naming it), nothing launched.
cudaError_t emx_cuda_attention_decode(const EmxAttnDecodeArgs *a, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
