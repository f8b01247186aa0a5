// cpu_ops.h — the element-wise and per-head operations of the CPU forward pass: RMSNorm, RoPE,
// softmax, SwiGLU, and attention for one query head. Matrix products are in cpu_matmul.h.
#ifndef ENTROPIX_CPU_OPS_H
#define ENTROPIX_CPU_OPS_H

#include <stddef.h>

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

// Attention of one query head over n_keys cached positions. k and v point at this head's
// slice of position 0 of the caches; position t is at k + t * stride.
//   scores[t] = q·k_t * scale           (pre-softmax, kept when probs != scores)
//   probs = softmax(scores)             (probs may equal scores: computed in place)
//   out[d] = sum_t probs[t] * v_t[d]    out [head_dim]
void emx_attention_head(float *out, const float *q, const float *k, const float *v, size_t stride,
                        int n_keys, int head_dim, float scale, float *scores, float *probs);

// Keys (and values) in several pieces: the attention of a branch reads the shared prefix from
// the sequence's cache and its last few positions from its own tail. Same result, bitwise, as
// one span holding the same keys in the same order.
typedef struct {
    const float *k, *v;  // this head's slice of the span's first position
    size_t stride;       // floats from one position to the next
    int n;               // positions in the span
} EmxKeySpan;
void emx_attention_head_spans(float *out, const float *q, const EmxKeySpan *spans, int n_spans, int head_dim,
                              float scale, float *scores, float *probs);

#endif
