// rmsnorm.h — RMSNorm, alone and fused with the residual add (kernels/rmsnorm.cu).
#ifndef ENTROPIX_KERNELS_RMSNORM_H
#define ENTROPIX_KERNELS_RMSNORM_H

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// For each of `rows` rows of n floats: out = x / sqrt(mean(x²) + eps) * w (out may equal x).
// x, out: device [rows][n]; w: device [n]. The CPU twin is emx_rmsnorm.
cudaError_t emx_cuda_rmsnorm(float *out, const float *x, const float *w, int n, int rows, float eps,
                             cudaStream_t stream);

// emx_cuda_rmsnorm, and out quantised to int8 groups of 32 in the same pass: xq [rows][n], xd and
// xsum [rows][n/32], bitwise what emx_cuda_quantize_acts (matvec.h) makes of out, for the fast
// quantised matvecs. n % 32 == 0 (else, or a null xq/xd/xsum: cudaErrorInvalidValue).
cudaError_t emx_cuda_rmsnorm_quantize(float *out, const float *x, const float *w, int n, int rows, float eps,
                                      int8_t *xq, float *xd, int *xsum, cudaStream_t stream);

// The residual add and the next norm in one pass: x += residual; out = rmsnorm(x) * w.
// x: device [rows][n] (updated), residual: device [rows][n], out: device [rows][n] (not x).
cudaError_t emx_cuda_residual_rmsnorm(float *x, const float *residual, const float *w, float *out, int n, int rows,
                                      float eps, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
