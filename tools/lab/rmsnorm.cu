// tools/lab/rmsnorm.cu — the RMSNorm family (kernels/rmsnorm.cu, kernels/rmsnorm_naive.cu) against
// the CPU's emx_rmsnorm: naive (a thread per row), fast (a block per row), fused (the residual
// add and the norm in one pass), quantised (the norm and its output's int8 groups in one pass: the
// decode step's, before the quantised matvecs). `make lab K=rmsnorm`, docs/kernel-lab.md.
#include "tools/lab/lab.h"

#include "kernels/naive.h"
#include "kernels/rmsnorm.h"

extern "C" {
#include "runtime/cpu/cpu_matmul.h"
#include "runtime/cpu/cpu_ops.h"
}

int main(int argc, char **argv) {
    Lab L;
    lab_init(&L, "rmsnorm", argc, argv, "--n --rows", "out = x / sqrt(mean(x^2) + eps) * w per row");
    const int n = lab_int(&L, "--n", 576, 1, 1 << 20), rows = lab_int(&L, "--rows", 16, 1, 1 << 16);
    const float eps = 1e-5f;
    const size_t nx = (size_t)rows * n;
    std::vector<float> x = lab_random(nx, 1, -4.0f, 4.0f), res = lab_random(nx, 2), w = lab_random(n, 3, 0.5f, 1.5f);
    std::vector<float> want(nx), sum(nx), want_fused(nx);
    for (int r = 0; r < rows; r++) emx_rmsnorm(&want[(size_t)r * n], &x[(size_t)r * n], w.data(), n, eps);
    for (size_t i = 0; i < nx; i++) sum[i] = x[i] + res[i];
    for (int r = 0; r < rows; r++) emx_rmsnorm(&want_fused[(size_t)r * n], &sum[(size_t)r * n], w.data(), n, eps);
    LabBuf<float> dx(x), dres(res), dw(w), dout(nx), dxf(x);

    char shape[96];
    snprintf(shape, sizeof shape, "rows %d x n %d (--rows, --n)", rows, n);
    // f32 sums in the kernels, double in the CPU twin: relative error ~ n * 2^-24 of the sum,
    // halved by the square root, plus a few roundings of the products.
    lab_header(&L, shape, "|gpu - cpu| <= 1e-7 + (2e-7 + n * 6e-8) * |cpu| (f32 sum of squares vs double)");
    const double rel = 2e-7 + n * 6e-8;
    const double bytes = (double)nx * 8 + n * 4.0;
    auto check = [&] { return lab_compare(dout.get(), want, 1e-7, rel); };
    lab_version(&L, "naive (thread/row)", bytes,
                [&] { return emx_cuda_rmsnorm_naive(dout.p, dx.p, dw.p, n, rows, eps, L.stream); }, check);
    lab_version(&L, "fast (block/row)", bytes,
                [&] { return emx_cuda_rmsnorm(dout.p, dx.p, dw.p, n, rows, eps, L.stream); }, check);
    // fused: x += residual in place; checked after the first launch (x fresh), then the timed
    // launches keep adding (harmless: only the time is measured)
    lab_version(&L, "fused (+residual)", (double)nx * 16 + n * 4.0,
                [&] { return emx_cuda_residual_rmsnorm(dxf.p, dres.p, dw.p, dout.p, n, rows, eps, L.stream); },
                [&] { return lab_both(lab_compare(dout.get(), want_fused, 1e-7, rel), lab_compare(dxf.get(), sum, 0, 0)); });
    if (n % 32 == 0) {
        // out as fast's; the int8 groups of the kernel's own out, bit for bit, as the CPU's
        // quantiser makes them (the matvecs' activation scheme)
        const int G = n / 32;
        LabBuf<int8_t> xq(nx);
        LabBuf<float> xd(nx / 32);
        LabBuf<int> xs(nx / 32);
        lab_version(&L, "quantised (+int8)", bytes + nx * (1.0 + 8.0 / 32),
                    [&] { return emx_cuda_rmsnorm_quantize(dout.p, dx.p, dw.p, n, rows, eps, xq.p, xd.p, xs.p, L.stream); },
                    [&] {
                        const std::vector<float> o = dout.get(), d = xd.get();
                        const std::vector<int8_t> q = xq.get();
                        const std::vector<int> sum = xs.get();
                        // the CPU's groups of each row of the kernel's out, and the kernel's as numbers
                        std::vector<int8_t> cq(nx);
                        std::vector<float> cd(nx / 32), cs(nx / 32), qf(q.begin(), q.end()), cqf(nx), ds(nx / 32);
                        for (int r = 0; r < rows; r++)
                            emx_quantize_acts_scalar(&o[(size_t)r * n], n, &cq[(size_t)r * n], &cd[(size_t)r * G],
                                                     &cs[(size_t)r * G]);
                        for (size_t i = 0; i < nx; i++) cqf[i] = cq[i];
                        for (size_t g = 0; g < nx / 32; g++) ds[g] = d[g] * (float)sum[g];  // the CPU keeps d * sum
                        return lab_both(lab_both(lab_compare(o, want, 1e-7, rel), lab_compare(qf, cqf, 0, 0)),
                                        lab_both(lab_compare(d, cd, 0, 0), lab_compare(ds, cs, 0, 0)));
                    });
    }
    return lab_finish(&L);
}
