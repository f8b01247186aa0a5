// matvec.h — weight matrix × activation vector(s) for decoding (kernels/matvec.cu): one vector,
// a batch of up to 16 (several sequences, each weight read once for all), and the gate/up pair
// fused with SwiGLU. Variants selectable by name: "plain" (one thread per row, f32
// dequantisation, the readable twin), "fast" (a warp per row, 16-byte loads, __dp4a against int8
// activations for q8/q4/q4_1: the one to use) and "fast_f32" (fast's loads, quantised weights
// dequantised in registers against f32 activations: the measured alternative). Weights are in
// the device layout of weights.h.
#ifndef ENTROPIX_KERNELS_MATVEC_H
#define ENTROPIX_KERNELS_MATVEC_H

#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/weights.h"

#ifdef __cplusplus
extern "C" {
#endif

enum emx_matvec_variant {
    EMX_MATVEC_PLAIN = 0,  // thread per row, f32 activations, weights dequantised to f32
    EMX_MATVEC_FAST = 1,   // warp per row; int8 activations for quantised weights
    EMX_MATVEC_FAST_F32 = 2, // warp per row; quantised weights dequantised in registers, f32 acts
    EMX_MATVEC_VARIANTS
};
#define EMX_MATVEC_MAX_BATCH 16

// "plain" / "fast" / "fast_f32"; NULL for an unknown variant. From name: the variant, or -1.
const char *emx_matvec_variant_name(int variant);
int emx_matvec_variant_from_name(const char *name);

// The activations of one matvec call, device pointers, `batch` rows of `cols`:
//   x    [batch][cols] f32: read by plain and fast_f32, and by fast for f32/f16/bf16 weights
//   xq   [batch][cols] int8, xd [batch][cols/32] f32 scales, xsum [batch][cols/32] int sums of
//        each group's xq: read by the fast variant for q8/q4/q4_1 (emx_cuda_quantize_acts)
// Unused members may be NULL.
typedef struct {
    const float *x;
    const int8_t *xq;
    const float *xd;
    const int *xsum;
} EmxCudaActs;

// x [batch][cols] -> xq, xd, xsum: int8 per group of 32, d = max|x| / 127, q = round-to-even(x / d)
// exactly as the CPU's emx_quantize_acts_scalar (xsum is the CPU's s / d: the integer sum).
// cols % 32 == 0. Quantise once per input, share among the matrices that read it (q/k/v).
cudaError_t emx_cuda_quantize_acts(const float *x, int cols, int batch, int8_t *xq, float *xd, int *xsum,
                                   cudaStream_t stream);

// out[b][r] (+)= sum_c W[r][c] * x[b][c] for b < batch (1..16), r < w->rows; out [batch][w->rows].
// accumulate != 0 adds to out (the residual add of wo / w_down for free), else overwrites.
// The fast variants need w->cols % 32 == 0 for every dtype, and w->data and the activation array
// they read (x, or xq for fast with quantised weights) 16-byte aligned (cudaMalloc'd, or offset
// by a multiple of 16 bytes). Invalid arguments (variant, batch,
// shapes, a needed activation pointer missing) return cudaErrorInvalidValue before launching.
cudaError_t emx_cuda_matvec(int variant, const EmxCudaWeight *w, const EmxCudaActs *a, int batch, float *out,
                            int accumulate, cudaStream_t stream);

// Up to EMX_MATVEC_SET_MAX matrices of one dtype and width that read the same activations (q, k
// and v) in one launch: out[i][b][r] = W_i[r] · x_b for i < n, each out[i] [batch][w[i]->rows],
// overwritten. Bitwise what emx_cuda_matvec gives for each matrix alone (the same row code). The
// fast variant only (the decode step's); another variant, mixed dtypes or widths, or any argument
// emx_cuda_matvec would refuse: cudaErrorInvalidValue before launching.
#define EMX_MATVEC_SET_MAX 3
cudaError_t emx_cuda_matvec_set(int variant, const EmxCudaWeight *const *w, float *const *out, int n,
                                const EmxCudaActs *a, int batch, cudaStream_t stream);

// SwiGLU fused into the gate/up matvec: out[b][r] = silu(gate_r · x_b) * (up_r · x_b), silu(g) =
// g / (1 + exp(-g)); each warp (fast) or thread (plain) computes both rows, so the gate and up
// outputs never go to memory. gate and up: same dtype and shape. out [batch][gate->rows].
cudaError_t emx_cuda_matvec_swiglu(int variant, const EmxCudaWeight *gate, const EmxCudaWeight *up,
                                   const EmxCudaActs *a, int batch, float *out, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
