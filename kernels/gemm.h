// gemm.h — weight matrix × activation matrix for prefill (kernels/gemm.cu): a prompt's n tokens
// through one matrix, out[t][r] = sum_c W[r][c] * x[t][c]. Variants selectable by name:
//   "tiled"        a plain shared-memory tiled kernel in f32 (the readable twin; any dtype)
//   "cublas_bf16"  W dequantised to bf16 in a scratch buffer, x converted to bf16, cublasGemmEx
//                  with f32 accumulation (tensor cores); bf16 keeps f32's range, so large
//                  activations (the down projection's input) cannot overflow
//   "cublas_f16"   the same in f16: 3 more mantissa bits, but overflow above 65504
//   "cublas_f32"   cublasGemmEx in f32 throughout (no tensor cores, no TF32): f32 weights read in
//                  place, other dtypes dequantised to an f32 scratch copy. Exact up to summation
//                  order, as the CPU is for f32/bf16/f16 weights (which it reads with f32
//                  activations): the runtime's prefill for those dtypes
#ifndef ENTROPIX_KERNELS_GEMM_H
#define ENTROPIX_KERNELS_GEMM_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stddef.h>

#include "kernels/weights.h"

#ifdef __cplusplus
extern "C" {
#endif

enum emx_gemm_variant {
    EMX_GEMM_TILED = 0,
    EMX_GEMM_CUBLAS_BF16 = 1,
    EMX_GEMM_CUBLAS_F16 = 2,
    EMX_GEMM_CUBLAS_F32 = 3,
    EMX_GEMM_VARIANTS
};

// "tiled" / "cublas_bf16" / "cublas_f16" / "cublas_f32"; NULL if unknown. From name: the variant, or -1.
const char *emx_gemm_variant_name(int variant);
int emx_gemm_variant_from_name(const char *name);

// Device scratch a call needs: the 16-bit copies of W [rows][cols] and x [n][cols], each at a
// 256-byte boundary (0 for "tiled"); "cublas_f32": the f32 copy of W, which f32 weights do not
// need (they are read in place: scratch may then be NULL). A runtime sizes it once for its
// largest matrix and batch.
size_t emx_cuda_gemm_scratch_bytes(int variant, int rows, int cols, int n);

// W (device layout of weights.h, any dtype) -> out [rows][cols] bf16 (f16 == 0) or f16 (f16 != 0).
cudaError_t emx_cuda_dequant16(const EmxCudaWeight *w, int f16, void *out, cudaStream_t stream);

// out[t][r] (+)= sum_c W[r][c] * x[t][c], t < n, r < w->rows; x device [n][cols], out device
// [n][rows]; accumulate != 0 adds to out (the residual). handle: for the cuBLAS variants (its
// stream is set to `stream`), ignored by "tiled"; scratch: emx_cuda_gemm_scratch_bytes bytes.
// Returns cudaErrorInvalidValue for bad arguments, cudaErrorUnknown if cuBLAS fails.
cudaError_t emx_cuda_gemm(int variant, cublasHandle_t handle, const EmxCudaWeight *w, const float *x, int n,
                          float *out, int accumulate, void *scratch, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
