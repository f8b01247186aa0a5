// tools/lab/gemm.cu — weight matrix x activation matrix, the prefill matmuls (kernels/gemm.cu),
// against the dequantised weights times the activations in double: naive (a thread per output
// element over the dequantised f32 weights, kernels/gemm_naive.cu), tiled (16 x 16 tiles of W and
// x in shared memory, W read as stored), cublas_f16 and cublas_bf16 (W dequantised to 16 bits, then
// cublasGemmEx with f32 accumulation on tensor cores). `make lab K=gemm`.
#include "tools/lab/lab_weight.h"

#include <cublas_v2.h>

#include "kernels/gemm.h"
#include "kernels/naive.h"

int main(int argc, char **argv) {
    Lab L;
    lab_init(&L, "gemm", argc, argv, "--rows --cols --tokens --dtype", "out[t][r] = W[r] . x[t], t < tokens");
    const int rows = lab_int(&L, "--rows", 576, 1, 1 << 16), cols = lab_int(&L, "--cols", 576, 32, 1 << 16);
    const int n = lab_int(&L, "--tokens", 32, 1, 1 << 16);
    const uint32_t dtype = lab_dtype(&L, "q8");
    LabWeight w(dtype, rows, cols, 51);
    std::vector<float> x = lab_random((size_t)n * cols, 52, -2.0f, 2.0f);
    std::vector<double> want((size_t)n * rows), mag((size_t)n * rows);
    std::vector<float> wf((size_t)rows * cols);  // the naive version's f32 copy of W
    for (int r = 0; r < rows; r++) {
        const std::vector<float> wr = w.row(r);
        std::copy(wr.begin(), wr.end(), wf.begin() + (size_t)r * cols);
        for (int t = 0; t < n; t++) {
            double s = 0, m = 0;
            for (int c = 0; c < cols; c++) {
                s += (double)wr[c] * x[(size_t)t * cols + c];
                m += fabs((double)wr[c] * x[(size_t)t * cols + c]);
            }
            want[(size_t)t * rows + r] = s;
            mag[(size_t)t * rows + r] = m;
        }
    }
    LabBuf<float> dwf(wf), dx(x), dout((size_t)n * rows);
    cublasHandle_t handle;
    if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "lab gemm: cublasCreate failed\n");
        exit(1);
    }
    char shape[96];
    snprintf(shape, sizeof shape, "%s %d x %d, %d tokens (--dtype --rows --cols --tokens)", emx_dtype_name(dtype),
             rows, cols, n);
    // the rounding of the inputs each version works with: f32 sums (1e-4), f16's 11 bits
    // (1.1e-3), bf16's 8 bits (4.3e-3), each relative to sum |w x| (tests/kernels/test_gemm.cpp)
    lab_header(&L, shape, "|gpu - cpu| <= tol * sum|w x|: naive and tiled 1e-4, cublas_f16 1.1e-3, cublas_bf16 4.3e-3");
    const double bytes = w.bytes() + (double)n * cols * 4 + (double)n * rows * 4;
    lab_version(&L, "naive (thread/element)", (double)rows * cols * 4 + (double)n * (cols + rows) * 4,
                [&] { return emx_cuda_gemm_naive(dwf.p, dx.p, dout.p, rows, cols, n, L.stream); },
                [&] { return lab_compare_scaled(dout.get(), want, mag, 1e-4); });
    const struct { int variant; double tol; } versions[] = {
        {EMX_GEMM_TILED, 1e-4}, {EMX_GEMM_CUBLAS_F16, 1.1e-3}, {EMX_GEMM_CUBLAS_BF16, 4.3e-3}};
    for (const auto &v : versions) {
        LabBuf<uint8_t> scratch(emx_cuda_gemm_scratch_bytes(v.variant, rows, cols, n));
        LAB_CHECK(cudaMemset(dout.p, 0, dout.n * 4));
        lab_version(&L, emx_gemm_variant_name(v.variant), bytes,
                    [&] { return emx_cuda_gemm(v.variant, handle, &w.w, dx.p, n, dout.p, 0, scratch.p, L.stream); },
                    [&] { return lab_compare_scaled(dout.get(), want, mag, v.tol); });
    }
    cublasDestroy(handle);
    return lab_finish(&L);
}
