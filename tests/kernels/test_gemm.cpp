// test_gemm.cpp — kernels/gemm.cu (prefill matmuls) against CPU dot products in double of the
// weights as emx_dequantize_row gives them.
//
// Tolerances, relative to sum|w_j x_j| of each output:
//  - tiled: f32 products and sums, 1e-4 (the f32 summation bound n * 2^-24 is 1.7e-5 at n = 288).
//  - cublas_bf16: w and x are each rounded to bf16 (8 significant bits, relative error <= 2^-9),
//    so each product is off by at most 2^-8 relative: 2^-8 * 1.1 = 4.3e-3.
//  - cublas_f16: 11 significant bits, 2^-10 * 1.1 = 1.1e-3.
//  - cublas_f32: f32 throughout, as tiled: 1e-4.
// An indexing or transposition mistake gives errors near |out| itself, ~ sum|w x| / sqrt(cols),
// an order of magnitude above the widest of these.
// Dequantisation to 16 bits must round exactly as the CPU's emx_f32_to_bf16 / emx_f32_to_f16 do
// (round to nearest even): checked bit for bit.
#include "dense_test_util.h"

#include "kernels/gemm.h"

static double gemm_tol(int variant) {
    return variant == EMX_GEMM_TILED || variant == EMX_GEMM_CUBLAS_F32 ? 1e-4 : variant == EMX_GEMM_CUBLAS_BF16 ? 4.3e-3 : 1.1e-3;
}

static void check_gemm(cublasHandle_t h, int variant, uint32_t dt, int rows, int cols, int n, int accumulate) {
    TestWeight tw(dt, rows, cols, 40 + dt + rows);
    std::vector<float> hx = random_floats((size_t)n * cols, 50 + n, -2.0f, 2.0f);
    std::vector<float> base = random_floats((size_t)n * rows, 60, -5.0f, 5.0f);
    DevBuf<float> x(hx), out(base);
    DevBuf<uint8_t> scratch(emx_cuda_gemm_scratch_bytes(variant, rows, cols, n));
    // cublas_f32 reads f32 weights in place: no scratch (the runtime gives none)
    void *ws = variant == EMX_GEMM_CUBLAS_F32 && dt == EMX_F32 ? nullptr : scratch.p;
    CUDA_OK(emx_cuda_gemm(variant, h, &tw.w, x.p, n, out.p, accumulate, ws, nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<float> got = out.download();
    for (int t = 0; t < n; t++)
        for (int r = 0; r < rows; r++) {
            double mag;
            double want = ref_dot(tw, r, &hx[(size_t)t * cols], &mag);
            if (accumulate) want += base[(size_t)t * rows + r];
            const float g = got[(size_t)t * rows + r];
            cr_assert(fabs(g - want) <= gemm_tol(variant) * mag + 1e-5 * fabs(want) + 1e-9,
                      "%s %s %dx%d n %d: out[%d][%d] = %.9g, CPU %.9g (sum|wx| %.3g)", emx_gemm_variant_name(variant),
                      emx_dtype_name(dt), rows, cols, n, t, r, g, want, mag);
        }
}

Test(gemm, every_variant_and_dtype_matches_cpu) {
    cublasHandle_t h;
    cr_assert_eq(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    for (int variant = 0; variant < EMX_GEMM_VARIANTS; variant++)
        for (uint32_t dt : kAllDtypes) {
            check_gemm(h, variant, dt, 37, 96, 7, 0);    // neither rows nor tokens a multiple of 16
            check_gemm(h, variant, dt, 200, 288, 19, 0);
        }
    cublasDestroy(h);
}

Test(gemm, accumulate_adds_to_out) {
    cublasHandle_t h;
    cr_assert_eq(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    for (int variant = 0; variant < EMX_GEMM_VARIANTS; variant++) check_gemm(h, variant, EMX_Q4_1, 45, 64, 5, 1);
    cublasDestroy(h);
}

Test(gemm, dequant16_rounds_like_the_cpu) {
    for (uint32_t dt : kAllDtypes)
        for (int f16 : {0, 1}) {
            const int rows = 21, cols = 96;
            TestWeight tw(dt, rows, cols, 77 + dt);
            DevBuf<uint16_t> out((size_t)rows * cols);
            CUDA_OK(emx_cuda_dequant16(&tw.w, f16, out.p, nullptr));
            std::vector<uint16_t> got = out.download();
            for (int r = 0; r < rows; r++) {
                std::vector<float> w = tw.row(r);
                for (int c = 0; c < cols; c++) {
                    const uint16_t want = f16 ? emx_f32_to_f16(w[c]) : emx_f32_to_bf16(w[c]);
                    const uint16_t g = got[(size_t)r * cols + c];
                    // q4_1's (q4_1f's) nib * d + m may be one FMA on a GPU: allow the neighbouring value there
                    const int diff = (int)g - (int)want;
                    cr_assert(diff == 0 || (has_min(dt) && (diff == 1 || diff == -1)),
                              "%s -> %s: [%d][%d] = 0x%04x, CPU 0x%04x", emx_dtype_name(dt), f16 ? "f16" : "bf16", r, c,
                              g, want);
                }
            }
        }
}

Test(gemm, names_and_bad_arguments) {
    for (int v = 0; v < EMX_GEMM_VARIANTS; v++) cr_assert_eq(emx_gemm_variant_from_name(emx_gemm_variant_name(v)), v);
    cr_assert_eq(emx_gemm_variant_from_name("cublas"), -1);
    cr_assert_eq(emx_cuda_gemm_scratch_bytes(EMX_GEMM_TILED, 10, 64, 3), 0u);
    cr_assert_eq(emx_cuda_gemm_scratch_bytes(EMX_GEMM_CUBLAS_BF16, 10, 64, 3), 1280u + 512u);
    cr_assert_eq(emx_cuda_gemm_scratch_bytes(EMX_GEMM_CUBLAS_F32, 10, 64, 3), 2560u);
    TestWeight tw(EMX_Q8, 8, 64, 1);
    DevBuf<float> x(64), out(8);
    // cuBLAS variants need a handle and scratch
    cr_assert_eq(emx_cuda_gemm(EMX_GEMM_CUBLAS_F16, nullptr, &tw.w, x.p, 1, out.p, 0, nullptr, nullptr),
                 cudaErrorInvalidValue);
    cublasHandle_t h;
    cr_assert_eq(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);  // cublas_f32 needs scratch unless W is f32
    cr_assert_eq(emx_cuda_gemm(EMX_GEMM_CUBLAS_F32, h, &tw.w, x.p, 1, out.p, 0, nullptr, nullptr), cudaErrorInvalidValue);
    cublasDestroy(h);
    cr_assert_eq(emx_cuda_gemm(5, nullptr, &tw.w, x.p, 1, out.p, 0, nullptr, nullptr), cudaErrorInvalidValue);
}

// Float weights may have any number of columns (the tiled kernel's last column tile is partial).
Test(gemm, float_weights_with_odd_cols) {
    cublasHandle_t h;
    cr_assert_eq(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    for (int variant = 0; variant < EMX_GEMM_VARIANTS; variant++)
        for (uint32_t dt : {EMX_F32, EMX_BF16}) check_gemm(h, variant, dt, 33, 45, 5, 0);
    cublasDestroy(h);
}
