// test_embedding.cpp — kernels/embedding.cu against the CPU's emx_dequantize_row.
//
// Tolerance: the per-weight dequantisation is one multiply (q8, q4) or one conversion (f16,
// bf16, f32), exactly as on the CPU, so those rows must be bit-identical. q4_1 computes
// nib * d + m: nvcc may fuse it into one FMA (one rounding instead of two), so q4_1 may differ by
// one rounding of the product: 2^-23 relative to |nib * d| <= 16 |d|; we allow 2^-22 * (|w| + 16|d|)
// in the form 1e-6 * (|w| + |ref row max|).
#include "dense_test_util.h"

#include "kernels/embedding.h"

Test(embedding, every_dtype_matches_cpu_dequantisation) {
    const int vocab = 37, dim = 288;  // neither a multiple of the 256-thread block
    const std::vector<int> tokens = {0, 36, 5, 5, 17, 1};
    for (uint32_t dt : kAllDtypes) {
        TestWeight tw(dt, vocab, dim, 900 + dt);
        DevBuf<int> tok(tokens);
        DevBuf<float> out(tokens.size() * dim);
        CUDA_OK(emx_cuda_embedding(&tw.w, tok.p, (int)tokens.size(), out.p, nullptr));
        std::vector<float> got = out.download();
        for (size_t i = 0; i < tokens.size(); i++) {
            std::vector<float> want = tw.row(tokens[i]);
            float row_max = 0;
            for (float v : want) row_max = fmaxf(row_max, fabsf(v));
            for (int c = 0; c < dim; c++) {
                const float g = got[i * dim + c], w = want[c];
                const float tol = has_min(dt) ? 1e-6f * (fabsf(w) + row_max) : 0.0f;
                cr_assert(fabsf(g - w) <= tol, "%s: token %d col %d: %.9g, CPU %.9g", emx_dtype_name(dt), tokens[i], c,
                          g, w);
            }
        }
    }
}

Test(embedding, out_of_range_token_gives_zeros) {
    TestWeight tw(EMX_Q8, 10, 64, 3);
    const std::vector<int> tokens = {-1, 10, 9};
    DevBuf<int> tok(tokens);
    DevBuf<float> out(3 * 64);
    CUDA_OK(emx_cuda_embedding(&tw.w, tok.p, 3, out.p, nullptr));
    std::vector<float> got = out.download();
    std::vector<float> last = tw.row(9);
    for (int c = 0; c < 64; c++) {
        cr_assert_eq(got[c], 0.0f);
        cr_assert_eq(got[64 + c], 0.0f);
        cr_assert_eq(got[128 + c], last[c]);
    }
}

Test(embedding, rejects_bad_dtype) {
    TestWeight tw(EMX_F32, 4, 32, 3);
    EmxCudaWeight bad = tw.w;
    bad.dtype = 42;
    DevBuf<int> tok(std::vector<int>{0});
    DevBuf<float> out(32);
    cr_assert_eq(emx_cuda_embedding(&bad, tok.p, 1, out.p, nullptr), cudaErrorInvalidValue);
}
