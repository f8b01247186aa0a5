// test_rmsnorm.cpp — kernels/rmsnorm.cu against the CPU's emx_rmsnorm.
//
// Tolerance: the CPU sums the squares in double, the kernel in f32 (per thread, then a tree): the
// relative error of the sum is at most ~n * 2^-24 (n <= 1000: 6e-5), halved by the square root,
// plus a few roundings of the products: |out - cpu| <= 5e-5 * |cpu| + 1e-7. The residual add itself
// is one f32 addition on both sides: x must come back bit-identical.
#include "dense_test_util.h"

#include "kernels/matvec.h"
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

// The norm with its output's int8 groups in one launch = the norm, then emx_cuda_quantize_acts of
// its output (the path it replaces in the decode step), bit for bit: out, xq, xd and xsum. Widths:
// fewer columns than threads (64), warps left idle on the last trip (576: 2.25 trips of 256),
// several trips (1024, 2048); rows of all zeros (d = 0), a large outlier and a row that overflows
// nothing but dominates its groups.
Test(rmsnorm, quantized_equals_norm_then_quantize) {
    const float eps = 1e-6f;
    for (int n : {64, 576, 1024, 2048}) {
        for (int rows : {1, 3, 16}) {
            const size_t N = (size_t)rows * n, G = N / 32;
            std::vector<float> x = random_floats(N, 40 + n + rows, -3.0f, 3.0f);
            std::vector<float> w = random_floats((size_t)n, 50 + n, 0.25f, 2.0f);
            if (rows > 1)
                for (int i = 0; i < n; i++) x[(size_t)n + i] = 0.0f;  // row 1: all zeros
            x[5] = 1e4f;                                                // row 0: an outlier
            DevBuf<float> dx(x), dw(w), want(N), got(N), xd(G), wd(G);
            DevBuf<int8_t> xq(N), wq(N);
            DevBuf<int> xs(G), ws(G);
            CUDA_OK(emx_cuda_rmsnorm(want.p, dx.p, dw.p, n, rows, eps, nullptr));
            CUDA_OK(emx_cuda_quantize_acts(want.p, n, rows, wq.p, wd.p, ws.p, nullptr));
            CUDA_OK(emx_cuda_rmsnorm_quantize(got.p, dx.p, dw.p, n, rows, eps, xq.p, xd.p, xs.p, nullptr));
            const std::vector<float> o = got.download(), wo = want.download(), d = xd.download(), e = wd.download();
            const std::vector<int8_t> q = xq.download(), wqh = wq.download();
            const std::vector<int> sg = xs.download(), wsg = ws.download();
            cr_assert(memcmp(o.data(), wo.data(), N * 4) == 0, "n %d rows %d: out differs from the plain norm", n, rows);
            for (size_t i = 0; i < N; i++)
                cr_assert_eq(q[i], wqh[i], "n %d rows %d: xq[%zu] %d, separately %d", n, rows, i, q[i], wqh[i]);
            for (size_t g = 0; g < G; g++) {
                cr_assert(memcmp(&d[g], &e[g], 4) == 0, "n %d rows %d: xd[%zu] %.9g, separately %.9g", n, rows, g,
                          d[g], e[g]);
                cr_assert_eq(sg[g], wsg[g], "n %d rows %d: xsum[%zu] %d, separately %d", n, rows, g, sg[g], wsg[g]);
            }
        }
    }
}

Test(rmsnorm, rejects_bad_arguments) {
    DevBuf<float> a(64), b(64), w(64);
    cr_assert_eq(emx_cuda_rmsnorm(a.p, b.p, w.p, 0, 1, 1e-5f, nullptr), cudaErrorInvalidValue);
    cr_assert_eq(emx_cuda_residual_rmsnorm(a.p, b.p, w.p, a.p, 64, 1, 1e-5f, nullptr), cudaErrorInvalidValue);
    DevBuf<int8_t> q(64);
    DevBuf<float> d(2);
    DevBuf<int> s(2);
    // the quantised norm: a width that is not whole groups of 32, a missing output
    cr_assert_eq(emx_cuda_rmsnorm_quantize(a.p, b.p, w.p, 37, 1, 1e-5f, q.p, d.p, s.p, nullptr), cudaErrorInvalidValue);
    cr_assert_eq(emx_cuda_rmsnorm_quantize(a.p, b.p, w.p, 64, 1, 1e-5f, nullptr, d.p, s.p, nullptr),
                 cudaErrorInvalidValue);
    cr_assert_eq(emx_cuda_rmsnorm_quantize(a.p, b.p, w.p, 64, 1, 1e-5f, q.p, d.p, nullptr, nullptr),
                 cudaErrorInvalidValue);
}
