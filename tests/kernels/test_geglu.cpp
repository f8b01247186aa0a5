// test_geglu.cpp — kernels/geglu.cu and kernels/geglu_naive.cu against the CPU's emx_geglu and
// against GELU-tanh values computed in double by Python's math.tanh:
//   0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z³))) for z = 1, -1, 2, -3, 0.5, 5, 0.
// Tolerance: the device tanhf is within 2 ulp (~2.4e-7 absolute near ±1), and 1 + tanh cancels
// for negative z, so the error is bounded by 0.5 |z| |u| 2.4e-7 plus rounding of the products:
// |out - want| <= 1e-6 |want| + 4e-7 |z| |u| + 1e-30.
#include "dense_test_util.h"

#include "kernels/geglu.h"
#include "kernels/naive.h"

typedef cudaError_t (*GegluFn)(float *, const float *, const float *, int, cudaStream_t);

static double tolerance(double want, double z, double u) { return 1e-6 * fabs(want) + 4e-7 * fabs(z) * fabs(u) + 1e-30; }

static void check_against_cpu(GegluFn fn, const char *name) {
    const int n = 1001;  // odd: the float4 loop leaves a tail
    std::vector<float> g = random_floats(n + 1, 11, -8.0f, 8.0f), u = random_floats(n + 1, 12, -3.0f, 3.0f);
    for (int offset : {0, 1}) {  // offset 1: pointers not 16-byte aligned, the scalar path
        DevBuf<float> dg(g), du(u), dout(n + 1);
        CUDA_OK(fn(dout.p + offset, dg.p + offset, du.p + offset, n, nullptr));
        std::vector<float> want(g.begin() + offset, g.begin() + offset + n);
        emx_geglu(want.data(), u.data() + offset, n);
        std::vector<float> got = dout.download();
        for (int i = 0; i < n; i++)
            cr_assert(fabs(got[offset + i] - want[i]) <= tolerance(want[i], g[offset + i], u[offset + i]),
                      "%s offset %d: [%d] = %.9g, CPU %.9g", name, offset, i, got[offset + i], want[i]);
        // in place over gate, as the forward pass calls it
        CUDA_OK(fn(dg.p + offset, dg.p + offset, du.p + offset, n, nullptr));
        got = dg.download();
        for (int i = 0; i < n; i++)
            cr_assert(fabs(got[offset + i] - want[i]) <= tolerance(want[i], g[offset + i], u[offset + i]),
                      "%s in place, offset %d: [%d] = %.9g, CPU %.9g", name, offset, i, got[offset + i], want[i]);
    }
}

Test(geglu, fast_matches_cpu) { check_against_cpu(emx_cuda_geglu, "geglu"); }
Test(geglu, naive_matches_cpu) { check_against_cpu(emx_cuda_geglu_naive, "geglu_naive"); }

Test(geglu, matches_python_table) {
    // (z, gelu_tanh(z)) from Python's math in double; up = 1 and 2 (the product by up)
    const double table[][2] = {{1, 0.8411919906082768}, {-1, -0.15880800939172324}, {2, 1.954597694087775},
                               {-3, -0.0036373920817729943}, {0.5, 0.34571400982514394}, {5, 4.999999770820381},
                               {0, 0.0}};
    const int n = (int)(sizeof table / sizeof table[0]);
    std::vector<float> g(2 * n), u(2 * n);
    for (int i = 0; i < 2 * n; i++) g[i] = (float)table[i % n][0], u[i] = i < n ? 1.0f : 2.0f;
    for (GegluFn fn : {emx_cuda_geglu, emx_cuda_geglu_naive}) {
        DevBuf<float> dg(g), du(u), dout(2 * n);
        CUDA_OK(fn(dout.p, dg.p, du.p, 2 * n, nullptr));
        std::vector<float> got = dout.download();
        for (int i = 0; i < 2 * n; i++) {
            const double want = table[i % n][1] * u[i];
            cr_assert(fabs(got[i] - want) <= tolerance(want, g[i], u[i]), "gelu_tanh(%g) * %g = %.9g, Python %.17g",
                      g[i], u[i], got[i], want);
        }
    }
}

Test(geglu, rejects_negative_length) {
    DevBuf<float> d(4);
    cr_assert_eq(emx_cuda_geglu(d.p, d.p, d.p, -1, nullptr), cudaErrorInvalidValue);
    cr_assert_eq(emx_cuda_geglu_naive(d.p, d.p, d.p, -1, nullptr), cudaErrorInvalidValue);
    cr_assert_eq(emx_cuda_geglu(d.p, d.p, d.p, 0, nullptr), cudaSuccess);
}
