// test_rmsnorm.cpp — kernels/rmsnorm.cu against the CPU's emx_rmsnorm.
//
// Tolerance: the CPU sums the squares in double, the kernel in f32 (per thread, then a tree): the
// relative error of the sum is at most ~n * 2^-24 (n <= 1000: 6e-5), halved by the square root,
// plus a few roundings of the products: |out - cpu| <= 5e-5 * |cpu| + 1e-7. The residual add itself
// is one f32 addition on both sides: x must come back bit-identical.
#include "dense_test_util.h"

#include "kernels/rmsnorm.h"

static void check_rows(const std::vector<float> &got, const std::vector<float> &want, const char *what, int n) {
    for (size_t i = 0; i < want.size(); i++)
        cr_assert(fabsf(got[i] - want[i]) <= 5e-5f * fabsf(want[i]) + 1e-7f, "%s n %d: [%zu] = %.9g, CPU %.9g", what,
                  n, i, got[i], want[i]);
}

Test(rmsnorm, matches_cpu) {
    const float eps = 1e-5f;
    for (int n : {37, 577, 1000}) {
        const int rows = 3;
        std::vector<float> x = random_floats((size_t)rows * n, n, -4.0f, 4.0f);
        std::vector<float> w = random_floats((size_t)n, n + 1, 0.5f, 1.5f);
        DevBuf<float> dx(x), dw(w), dout((size_t)rows * n);
        CUDA_OK(emx_cuda_rmsnorm(dout.p, dx.p, dw.p, n, rows, eps, nullptr));
        std::vector<float> want((size_t)rows * n);
        for (int r = 0; r < rows; r++) emx_rmsnorm(&want[(size_t)r * n], &x[(size_t)r * n], w.data(), n, eps);
        check_rows(dout.download(), want, "rmsnorm", n);
        // in place (out == x), as the CPU allows
        CUDA_OK(emx_cuda_rmsnorm(dx.p, dx.p, dw.p, n, rows, eps, nullptr));
        check_rows(dx.download(), want, "rmsnorm in place", n);
    }
}

Test(rmsnorm, residual_fused_matches_add_then_cpu_norm) {
    const float eps = 1e-6f;
    for (int n : {37, 577, 1000}) {
        const int rows = 2;
        std::vector<float> x = random_floats((size_t)rows * n, 10 + n, -4.0f, 4.0f);
        std::vector<float> res = random_floats((size_t)rows * n, 20 + n, -1.0f, 1.0f);
        std::vector<float> w = random_floats((size_t)n, 30 + n, 0.5f, 1.5f);
        DevBuf<float> dx(x), dres(res), dw(w), dout((size_t)rows * n);
        CUDA_OK(emx_cuda_residual_rmsnorm(dx.p, dres.p, dw.p, dout.p, n, rows, eps, nullptr));
        std::vector<float> sum((size_t)rows * n), want((size_t)rows * n);
        for (size_t i = 0; i < sum.size(); i++) sum[i] = x[i] + res[i];
        for (int r = 0; r < rows; r++) emx_rmsnorm(&want[(size_t)r * n], &sum[(size_t)r * n], w.data(), n, eps);
        std::vector<float> gx = dx.download();
        for (size_t i = 0; i < sum.size(); i++) cr_assert_eq(gx[i], sum[i], "x[%zu] after the residual add", i);
        check_rows(dout.download(), want, "residual+rmsnorm", n);
    }
}

Test(rmsnorm, rejects_bad_arguments) {
    DevBuf<float> a(64), b(64), w(64);
    cr_assert_eq(emx_cuda_rmsnorm(a.p, b.p, w.p, 0, 1, 1e-5f, nullptr), cudaErrorInvalidValue);
    cr_assert_eq(emx_cuda_residual_rmsnorm(a.p, b.p, w.p, a.p, 64, 1, 1e-5f, nullptr), cudaErrorInvalidValue);
}
