// cpu_ops.h — the element-wise and per-head operations of the CPU forward pass: RMSNorm, RoPE,
// softmax, SwiGLU (attention for one query head: cpu_attention.h). Matrix products are in cpu_matmul.h.
#ifndef ENTROPIX_CPU_OPS_H
#define ENTROPIX_CPU_OPS_H

#include <stddef.h>

#include "base/kv_type.h"
#include "runtime/cpu/cpu_attention.h"

// out[i] = x[i] / sqrt(mean(x²) + eps) * w[i], i < n (out may equal x).
void emx_rmsnorm(float *out, const float *x, const float *w, int n, float eps);

// inv_freq[i] = theta^(-2i/head_dim) / factors[i] (factors may be NULL), i < head_dim/2,
// in double: the angle pos * inv_freq must be exact at long positions.
void emx_rope_inv_freq(double *inv_freq, int head_dim, double theta, const float *factors);
// cos/sin [head_dim/2] of the angles pos * inv_freq[i], computed in double.
void emx_rope_angles(float *cos_out, float *sin_out, const double *inv_freq, int half, int pos);
// Rotates every head of v [n_heads][head_dim] in place by the angles of one position:
// pairs (2i, 2i+1) for EMX_ROPE_INTERLEAVED, (i, i + head_dim/2) for EMX_ROPE_HALF.
void emx_rope(float *v, int n_heads, int head_dim, int style, const float *cos_a, const float *sin_a);

// x[i] = exp(x[i] - max) / sum, in place, n >= 1.
void emx_softmax(float *x, int n);

// gate[i] = silu(gate[i]) * up[i] = gate / (1 + exp(-gate)) * up.
void emx_swiglu(float *gate, const float *up, int n);
// gate[i] = gelu_tanh(gate[i]) * up[i] (Gemma's GeGLU): 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g³))) * up.
void emx_geglu(float *gate, const float *up, int n);

// KV cache rows of either element type (EMX_KV_F32: float, EMX_KV_F16: IEEE half as
// uint16_t). Store: dst [n] = src rounded to the cache's type (f16: emx_f32_to_f16, to nearest
// even; f32: a copy). Load: dst [n] = the cache's values as f32 (f16: widened exactly).
void emx_kv_store(void *dst, EmxKvType type, const float *src, size_t n);
void emx_kv_load(float *dst, const void *src, EmxKvType type, size_t n);

// Attention of one query head (emx_attention_head, emx_attention_head_spans): cpu_attention.h.
#endif
