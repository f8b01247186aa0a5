// cublas_v2.h (CUDA emulator) — the cuBLAS subset entropix uses, computed on the CPU by
// tests/cuda_emu/src/cublas.cpp.
//
// cublasGemmEx: C = alpha * op(A) * op(B) + beta * C, column-major, op = N or T; A and B are
// f32, f16 or bf16 (the same type), C is f32, f16 or bf16, compute CUBLAS_COMPUTE_32F (or the
// _FAST_ variants, computed the same way): products and sums in float, in k order, and the
// result rounded to C's type once. alpha and beta are host floats (the default pointer mode).
// With beta == 0, C is not read (it may hold NaN), as in cuBLAS. The work goes to the handle's
// stream, so it is captured into graphs like a kernel.
#ifndef EMU_CUBLAS_V2_H
#define EMU_CUBLAS_V2_H

#include "cuda_runtime.h"
#include "library_types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_ARCH_MISMATCH = 8,
    CUBLAS_STATUS_MAPPING_ERROR = 11,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_INTERNAL_ERROR = 14,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
} cublasStatus_t;

typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 } cublasOperation_t;

typedef enum {
    CUBLAS_DEFAULT_MATH = 0,
    CUBLAS_TENSOR_OP_MATH = 1,
    CUBLAS_PEDANTIC_MATH = 2,
    CUBLAS_TF32_TENSOR_OP_MATH = 3,
    CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION = 16,
} cublasMath_t;

typedef enum {
    CUBLAS_COMPUTE_16F = 64,
    CUBLAS_COMPUTE_32F = 68,
    CUBLAS_COMPUTE_32F_FAST_16F = 74,
    CUBLAS_COMPUTE_32F_FAST_16BF = 75,
    CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
} cublasComputeType_t;

typedef enum { CUBLAS_GEMM_DEFAULT = -1, CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99 } cublasGemmAlgo_t;

typedef struct cublasContext *cublasHandle_t;

cublasStatus_t cublasCreate(cublasHandle_t *handle);
cublasStatus_t cublasDestroy(cublasHandle_t handle);
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream);
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode);
const char *cublasGetStatusString(cublasStatus_t status);
cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void *alpha, const void *A, cudaDataType Atype, int lda, const void *B,
                            cudaDataType Btype, int ldb, const void *beta, void *C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t algo);

#ifdef __cplusplus
}
#endif

// cublas_v2.h also brings in the half types, as the real one does.
#include "cuda_bf16.h"
#include "cuda_fp16.h"

#endif
