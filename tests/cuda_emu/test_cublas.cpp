// test_cublas.cpp — cublasGemmEx against a naive double-precision loop, for every N/T
// combination, f32/f16/bf16 inputs and outputs, leading dimensions larger than the rows,
// alpha/beta, and capture into a graph.
//
// Tolerance: the emulated GEMM sums k float products in float; the reference sums the same
// (already rounded) inputs in double. |error| <= k * 2^-24 * sum |a*b| (+ one rounding of the
// output: half's 2^-11 or bf16's 2^-8 relative), with k = 37 and values in [-1, 1].
#include <criterion/criterion.h>
#include <cublas_v2.h>

#include <math.h>

#include <vector>

#include "emu_test.h"

extern "C" {
#include "base/dtype.h"
}

static float round_to(cudaDataType t, float x) {
    if (t == CUDA_R_16F) return emx_f16_to_f32(emx_f32_to_f16(x));
    if (t == CUDA_R_16BF) return emx_bf16_to_f32(emx_f32_to_bf16(x));
    return x;
}

// Device copy of a host float matrix stored as type t.
static void *upload(const std::vector<float> &v, cudaDataType t) {
    size_t es = t == CUDA_R_32F ? 4 : 2;
    std::vector<unsigned char> bytes(v.size() * es);
    for (size_t i = 0; i < v.size(); i++) {
        if (t == CUDA_R_32F) memcpy(&bytes[i * 4], &v[i], 4);
        else {
            uint16_t h = t == CUDA_R_16F ? emx_f32_to_f16(v[i]) : emx_f32_to_bf16(v[i]);
            memcpy(&bytes[i * 2], &h, 2);
        }
    }
    void *d;
    cr_assert_eq(cudaMalloc(&d, bytes.size()), cudaSuccess);
    cr_assert_eq(cudaMemcpy(d, bytes.data(), bytes.size(), cudaMemcpyHostToDevice), cudaSuccess);
    return d;
}

static std::vector<float> download(const void *d, size_t n, cudaDataType t) {
    size_t es = t == CUDA_R_32F ? 4 : 2;
    std::vector<unsigned char> bytes(n * es);
    cr_assert_eq(cudaMemcpy(bytes.data(), d, bytes.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    std::vector<float> out(n);
    for (size_t i = 0; i < n; i++) {
        if (t == CUDA_R_32F) memcpy(&out[i], &bytes[i * 4], 4);
        else {
            uint16_t h;
            memcpy(&h, &bytes[i * 2], 2);
            out[i] = t == CUDA_R_16F ? emx_f16_to_f32(h) : emx_bf16_to_f32(h);
        }
    }
    return out;
}

static std::vector<float> random_matrix(size_t n, unsigned seed, cudaDataType t) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        v[i] = round_to(t, (float)((seed >> 8) % 20001) / 10000.0f - 1.0f);
    }
    return v;
}

static void check_gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, cudaDataType in, cudaDataType out) {
    const int m = 19, n = 13, k = 37;
    int a_rows = ta == CUBLAS_OP_N ? m : k, a_cols = ta == CUBLAS_OP_N ? k : m;
    int b_rows = tb == CUBLAS_OP_N ? k : n, b_cols = tb == CUBLAS_OP_N ? n : k;
    int lda = a_rows + 3, ldb = b_rows + 1, ldc = m + 2; // padded leading dimensions
    std::vector<float> A = random_matrix((size_t)lda * a_cols, 1, in), B = random_matrix((size_t)ldb * b_cols, 2, in);
    std::vector<float> C = random_matrix((size_t)ldc * n, 3, out);
    void *dA = upload(A, in), *dB = upload(B, in), *dC = upload(C, out);
    float alpha = 0.75f, beta = -0.5f;
    cr_assert_eq(cublasGemmEx(h, ta, tb, m, n, k, &alpha, dA, in, lda, dB, in, ldb, &beta, dC, out, ldc,
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 CUBLAS_STATUS_SUCCESS);
    std::vector<float> got = download(dC, C.size(), out);
    for (int j = 0; j < n; j++) {
        for (int i = 0; i < m; i++) {
            double dot = 0, mag = 0;
            for (int l = 0; l < k; l++) {
                double a = ta == CUBLAS_OP_N ? A[i + (size_t)l * lda] : A[l + (size_t)i * lda];
                double b = tb == CUBLAS_OP_N ? B[l + (size_t)j * ldb] : B[j + (size_t)l * ldb];
                dot += a * b;
                mag += fabs(a * b);
            }
            double want = alpha * dot + beta * C[i + (size_t)j * ldc];
            double rel = out == CUDA_R_16F ? 1.0 / 2048 : out == CUDA_R_16BF ? 1.0 / 256 : 0.0;
            double tol = k * ldexp(1.0, -24) * (mag + 1.0) + rel * fabs(want);
            float g = got[i + (size_t)j * ldc];
            cr_assert(fabs(g - want) <= tol, "op %d%d in %d out %d C(%d,%d) = %.7g, want %.7g", ta, tb, in, out, i, j,
                      g, want);
        }
        for (int i = m; i < ldc; i++) // padding rows are not written
            cr_assert_eq(got[i + (size_t)j * ldc], C[i + (size_t)j * ldc]);
    }
    cudaFree(dA);
    cudaFree(dB);
    cudaFree(dC);
}

Test(emu_cublas, gemm_every_op_and_type_matches_naive_loop) {
    cublasHandle_t h;
    cr_assert_eq(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    cr_assert_eq(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), CUBLAS_STATUS_SUCCESS);
    for (cublasOperation_t ta : {CUBLAS_OP_N, CUBLAS_OP_T})
        for (cublasOperation_t tb : {CUBLAS_OP_N, CUBLAS_OP_T})
            for (cudaDataType in : {CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF}) {
                check_gemm(h, ta, tb, in, CUDA_R_32F);
                check_gemm(h, ta, tb, in, in);
            }
    cr_assert_eq(cublasDestroy(h), CUBLAS_STATUS_SUCCESS);
}

Test(emu_cublas, beta_zero_ignores_nan_in_c_and_capture_replays) {
    cublasHandle_t h;
    cudaStream_t s;
    cr_assert_eq(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    cr_assert_eq(cudaStreamCreate(&s), cudaSuccess);
    cr_assert_eq(cublasSetStream(h, s), CUBLAS_STATUS_SUCCESS);
    std::vector<float> a = {1, 2, 3, 4}, b = {1, 0, 0, 1}, c(4, NAN); // 2x2, B = I
    DeviceBuffer<float> da(a), db(b), dc(c);
    float one = 1.0f, zero = 0.0f;
    cr_assert_eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    cr_assert_eq(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, da.ptr, CUDA_R_32F, 2, db.ptr, CUDA_R_32F, 2,
                              &zero, dc.ptr, CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 CUBLAS_STATUS_SUCCESS);
    cudaGraph_t g;
    cudaGraphExec_t e;
    cr_assert_eq(cudaStreamEndCapture(s, &g), cudaSuccess);
    for (float x : dc.to_host()) cr_assert(isnan(x), "captured, not run");
    cr_assert_eq(cudaGraphInstantiate(&e, g, 0), cudaSuccess);
    cr_assert_eq(cudaGraphLaunch(e, s), cudaSuccess);
    std::vector<float> got = dc.to_host();
    for (int i = 0; i < 4; i++) cr_assert_eq(got[i], a[i]);
    // A bad leading dimension is refused.
    cr_assert_eq(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, da.ptr, CUDA_R_32F, 1, db.ptr, CUDA_R_32F, 2,
                              &zero, dc.ptr, CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 CUBLAS_STATUS_INVALID_VALUE);
    cudaGraphExecDestroy(e);
    cudaGraphDestroy(g);
    cudaStreamDestroy(s);
    cublasDestroy(h);
}
