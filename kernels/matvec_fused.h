// matvec_fused.h — the decode step's matvecs with their input made in the kernel's prologue
// (kernels/matvec_fused.cu): one activation row, read from global memory by every block, made
// into the matrices' input in shared memory (the RMSNorm of x and/or the int8 groups), then the
// fast matvec's rows. The separate norm or quantisation launch before each matvec goes away.
#ifndef ENTROPIX_KERNELS_MATVEC_FUSED_H
#define ENTROPIX_KERNELS_MATVEC_FUSED_H

#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/matvec.h"
#include "kernels/weights.h"

#ifdef __cplusplus
extern "C" {
#endif

// The input row of a fused matvec, device pointers.
//   x      [cols] f32: the row as it is in memory (the residual stream x, att or hb)
//   norm_w [cols]: RMSNorm weight, or NULL: x is the input as it is. With it the input is
//          x / sqrt(mean(x²) + eps) * norm_w, bitwise emx_cuda_rmsnorm's (its sum of squares in
//          the order of that kernel's block)
// Quantised weights (q8/q4/q4_1/q4_1f) read the input's int8 groups, made as emx_cuda_quantize_acts
// makes them (bitwise); float weights (f32/f16/bf16) read it as f32.
//   pdl    launch with programmatic dependent launch (kernels/launch.cuh): the kernel may start
//          before the kernel before it on the stream ends (it waits for it before reading x);
//          0 after a copy or memset, or before sm_90
typedef struct {
    const float *x;
    const float *norm_w;
    float eps;
    int pdl;
} EmxFusedInput;

// Whether the fused matvecs take matrices of this dtype and width: cols % 32 == 0 (the fast
// matvec's rows) and the input in 48 KiB of shared memory (int8 groups: 1.25 bytes a column;
// f32: 4). Otherwise the caller keeps the separate launches.
int emx_cuda_matvec_fused_fits(uint32_t dtype, int cols);

// out[i][r] (+)= W_i[r] · input for i < n (1..EMX_MATVEC_SET_MAX matrices of one dtype and width:
// q, k, v; or wo, w_down, the classifier alone), each out[i] [w[i]->rows]. accumulate != 0 adds
// to out (the residual add). Bitwise emx_cuda_rmsnorm(_quantize) / emx_cuda_quantize_acts followed
// by emx_cuda_matvec(_set) (EMX_MATVEC_FAST, one row). Bad arguments (a matrix the fast matvec or
// emx_cuda_matvec_fused_fits refuses, mixed dtypes or widths, out == x with accumulate... ):
// cudaErrorInvalidValue before launching.
cudaError_t emx_cuda_matvec_fused(const EmxFusedInput *in, const EmxCudaWeight *const *w, float *const *out, int n,
                                  int accumulate, cudaStream_t stream);

// The gate/up pair with SwiGLU: out[r] = silu(gate_r · input) * (up_r · input), bitwise the norm
// (or quantisation) then emx_cuda_matvec_swiglu (EMX_MATVEC_FAST, one row). out [gate->rows].
cudaError_t emx_cuda_matvec_fused_swiglu(const EmxFusedInput *in, const EmxCudaWeight *gate, const EmxCudaWeight *up,
                                         float *out, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
