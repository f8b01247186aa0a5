// cublas.cpp — cublasGemmEx on the CPU (see include/cublas_v2.h for what is modelled).
//
// A naive triple loop: every C element is one float dot product over k in order, then
// alpha * dot + beta * C rounded once to C's type. Arguments are checked like cuBLAS does
// (leading dimensions, types, operations) and every matrix must lie inside one device
// allocation for its whole extent; a bad call returns CUBLAS_STATUS_INVALID_VALUE or
// NOT_SUPPORTED with a message on stderr.
#include <stdint.h>
#include <stdio.h>

#include <string>

#include "../include/cublas_v2.h"
#include "../include/emu/launch.h"
#include "runtime_internal.h"

struct cublasContext {
    cudaStream_t stream;
    cublasMath_t math;
};

namespace {

cublasStatus_t fail(cublasStatus_t st, const std::string &msg) {
    fprintf(stderr, "EMU: cublasGemmEx: %s\n", msg.c_str());
    return st;
}

size_t type_size(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }
bool float_type(cudaDataType t) { return t == CUDA_R_32F || t == CUDA_R_16F || t == CUDA_R_16BF; }

float load(const void *p, cudaDataType t, size_t i) {
    switch (t) {
    case CUDA_R_16F: return emu_half_bits_to_float(((const uint16_t *)p)[i]);
    case CUDA_R_16BF: return emu_bf16_bits_to_float(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

void store(void *p, cudaDataType t, size_t i, float v) {
    switch (t) {
    case CUDA_R_16F: ((uint16_t *)p)[i] = emu_float_to_half_bits(v); break;
    case CUDA_R_16BF: ((uint16_t *)p)[i] = emu_float_to_bf16_bits(v); break;
    default: ((float *)p)[i] = v; break;
    }
}

// A column-major rows x cols matrix with leading dimension ld spans ld * (cols - 1) + rows
// elements.
bool fits(const void *p, cudaDataType t, int rows, int cols, int ld) {
    if (rows == 0 || cols == 0) return true;
    size_t elems = (size_t)ld * (size_t)(cols - 1) + (size_t)rows;
    return emu::device_range(p, elems * type_size(t));
}

struct Gemm {
    cublasOperation_t ta, tb;
    int m, n, k;
    float alpha, beta;
    const void *A, *B;
    void *C;
    cudaDataType at, bt, ct;
    int lda, ldb, ldc;

    void run() const {
        for (int j = 0; j < n; j++) {
            for (int i = 0; i < m; i++) {
                float dot = 0.0f;
                for (int l = 0; l < k; l++) {
                    size_t ai = ta == CUBLAS_OP_N ? (size_t)i + (size_t)l * lda : (size_t)l + (size_t)i * lda;
                    size_t bi = tb == CUBLAS_OP_N ? (size_t)l + (size_t)j * ldb : (size_t)j + (size_t)l * ldb;
                    dot += load(A, at, ai) * load(B, bt, bi);
                }
                size_t ci = (size_t)i + (size_t)j * ldc;
                float c = alpha * dot;
                if (beta != 0.0f) c += beta * load(C, ct, ci); // beta == 0: C is not read
                store(C, ct, ci, c);
            }
        }
    }
};

} // namespace

extern "C" {

cublasStatus_t cublasCreate(cublasHandle_t *handle) {
    if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
    *handle = new cublasContext{nullptr, CUBLAS_DEFAULT_MATH};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t handle) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->stream = stream;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusString(cublasStatus_t status) {
    switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void *alpha, const void *A, cudaDataType Atype, int lda, const void *B,
                            cudaDataType Btype, int ldb, const void *beta, void *C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
    (void)algo;
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (transa == CUBLAS_OP_C) transa = CUBLAS_OP_T; // real matrices: conjugate = transpose
    if (transb == CUBLAS_OP_C) transb = CUBLAS_OP_T;
    if ((transa != CUBLAS_OP_N && transa != CUBLAS_OP_T) || (transb != CUBLAS_OP_N && transb != CUBLAS_OP_T))
        return fail(CUBLAS_STATUS_INVALID_VALUE, "bad operation");
    if (m < 0 || n < 0 || k < 0) return fail(CUBLAS_STATUS_INVALID_VALUE, "negative size");
    int a_rows = transa == CUBLAS_OP_N ? m : k, a_cols = transa == CUBLAS_OP_N ? k : m;
    int b_rows = transb == CUBLAS_OP_N ? k : n, b_cols = transb == CUBLAS_OP_N ? n : k;
    if (lda < (a_rows > 1 ? a_rows : 1) || ldb < (b_rows > 1 ? b_rows : 1) || ldc < (m > 1 ? m : 1))
        return fail(CUBLAS_STATUS_INVALID_VALUE, "lda " + std::to_string(lda) + " / ldb " + std::to_string(ldb) +
                                                     " / ldc " + std::to_string(ldc) + " smaller than the rows of A / B / C");
    if (!float_type(Atype) || Atype != Btype || !float_type(Ctype))
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, "types: A and B must be the same of f32/f16/bf16, C one of them");
    if (computeType != CUBLAS_COMPUTE_32F && computeType != CUBLAS_COMPUTE_32F_FAST_16F &&
        computeType != CUBLAS_COMPUTE_32F_FAST_16BF && computeType != CUBLAS_COMPUTE_32F_FAST_TF32)
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, "compute type " + std::to_string((int)computeType) + " (use CUBLAS_COMPUTE_32F)");
    if (!alpha || !beta) return fail(CUBLAS_STATUS_INVALID_VALUE, "null alpha or beta");
    Gemm g{transa, transb, m, n, k, *(const float *)alpha, *(const float *)beta, A, B, C, Atype, Btype, Ctype, lda, ldb, ldc};
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    if (k > 0 && (!fits(A, Atype, a_rows, a_cols, lda) || !fits(B, Btype, b_rows, b_cols, ldb)))
        return fail(CUBLAS_STATUS_INVALID_VALUE, "A or B is not device memory for its whole extent (lda * cols)");
    if (!fits(C, Ctype, m, n, ldc))
        return fail(CUBLAS_STATUS_INVALID_VALUE, "C is not device memory for its whole extent (ldc * n)");
    cudaError_t err = emu::submit(handle->stream, "cublasGemmEx", [g]() {
        g.run();
        return cudaSuccess;
    });
    return err == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

} // extern "C"
