// rope_pair.cuh — one pair of a head through Qwen3's per-head RMSNorm and RoPE: the arithmetic
// of kernels/rope.cu's rope_kv_kernel, shared with the fused decode attention
// (kernels/attention_decode.cu), which rotates q and the new key itself. One copy, and every
// multiply-add an explicit fmaf: left to the compiler, `x0 * x0 + x1 * x1` may be contracted as
// fmaf(x0, x0, x1 * x1) in one kernel and fmaf(x1, x1, x0 * x0) in the other, and the fused
// step would then differ from the graph path in the last bit.
#ifndef ENTROPIX_KERNELS_ROPE_PAIR_CUH
#define ENTROPIX_KERNELS_ROPE_PAIR_CUH

#include <math.h>

#include "kernels/common.cuh"

// The elements of pair i: (2i, 2i + 1) interleaved (EMX_ROPE_INTERLEAVED), else (i, i + half).
__device__ __forceinline__ void emx_rope_pair_index(int style, int i, int half, int *ia, int *ib) {
    *ia = style == EMX_ROPE_INTERLEAVED ? 2 * i : i;
    *ib = style == EMX_ROPE_INTERLEAVED ? 2 * i + 1 : i + half;
}

// The pair's share of the head's sum of squares (the per-head norm's block sum adds these).
__device__ __forceinline__ float emx_rope_pair_ss(float x0, float x1) { return fmaf(x0, x0, x1 * x1); }

// (x0, x1) rotated by pos * inv_freq, the angle in double as the CPU's emx_rope_angles.
__device__ __forceinline__ void emx_rope_rotate(float x0, float x1, int pos, double inv_freq, float *y0, float *y1) {
    const double angle = (double)pos * inv_freq;
    const float c = (float)cos(angle), s = (float)sin(angle);
    *y0 = fmaf(x0, c, -(x1 * s));
    *y1 = fmaf(x0, s, x1 * c);
}

#endif
