// tools/lab/swiglu.cu — the SwiGLU gate, out = silu(gate) * up (kernels/swiglu.cu), against the
// CPU's emx_swiglu: one element-wise kernel (prefill, after the gate and up GEMMs). The decode
// step uses the gate/up matvec fused with it instead (emx_cuda_matvec_swiglu: the matvec lab's
// arithmetic plus this one; plain, fast_f32 and fast, the runtime's, whose int8 activations are
// checked against the CPU's integer dot products), so the lab shows those too. `make lab K=swiglu`.
#include "tools/lab/lab_weight.h"

#include "kernels/matvec.h"
#include "kernels/swiglu.h"

extern "C" {
#include "runtime/cpu/cpu_matmul.h"
#include "runtime/cpu/cpu_ops.h"
}

int main(int argc, char **argv) {
    Lab L;
    lab_init(&L, "swiglu", argc, argv, "--n --dim", "out[i] = gate[i] / (1 + exp(-gate[i])) * up[i]");
    // SmolLM2-135M's hidden size 1536 over 16 prompt rows; the fused matvec: 1536 x 576 (q8)
    const int n = lab_int(&L, "--n", 16 * 1536, 1, 1 << 26), dim = lab_int(&L, "--dim", 576, 32, 1 << 16);
    const int hidden = 1536;
    if (dim % 32) {
        fprintf(stderr, "lab swiglu: --dim %d: the fused matvec needs a multiple of 32\n", dim);
        exit(2);
    }
    std::vector<float> gate = lab_random(n, 31, -6.0f, 6.0f), up = lab_random(n, 32), want = gate;
    emx_swiglu(want.data(), up.data(), n);
    LabBuf<float> dg(gate), du(up), dout(n);
    char shape[96];
    snprintf(shape, sizeof shape, "n %d (--n); fused: %d x %d q8 (--dim)", n, hidden, dim);
    // the same f32 formula on both sides, exp within an ulp or two
    lab_header(&L, shape, "element-wise |gpu - cpu| <= 1e-6 * |cpu|; fused: gate and up within 1e-4 * sum|w x| each");
    lab_version(&L, "elementwise (runtime)", 12.0 * n, [&] { return emx_cuda_swiglu(dout.p, dg.p, du.p, n, L.stream); },
                [&] { return lab_compare(dout.get(), want, 1e-30, 1e-6); });

    // fused: silu(Wg x) * (Wu x), checked against the CPU's f32 twin on the double dot products;
    // the error bound propagates each dot product's (see tests/kernels/test_swiglu.cpp)
    LabWeight wg(EMX_Q8, hidden, dim, 33), wu(EMX_Q8, hidden, dim, 34);
    std::vector<float> x = lab_random(dim, 35, -2.0f, 2.0f);
    std::vector<double> want_f(hidden), tol(hidden);
    for (int r = 0; r < hidden; r++) {
        const std::vector<float> a = wg.row(r), b = wu.row(r);
        double g = 0, u = 0, mg = 0, mu = 0;
        for (int c = 0; c < dim; c++) {
            g += (double)a[c] * x[c];
            u += (double)b[c] * x[c];
            mg += fabs((double)a[c] * x[c]);
            mu += fabs((double)b[c] * x[c]);
        }
        const double silu = g / (1.0 + exp(-g));
        want_f[r] = silu * u;
        // plain (f32 activations) against the exact products: d silu/dg <= 1.1
        tol[r] = 1.1 * fabs(u) * mg + fabs(silu) * mu + 1e-2 * fabs(want_f[r]);
    }
    LabBuf<float> dx(x), dfo(hidden), xd(dim / 32);
    LabBuf<int8_t> xq(dim);
    LabBuf<int> xsum(dim / 32);
    LAB_CHECK(emx_cuda_quantize_acts(dx.p, dim, 1, xq.p, xd.p, xsum.p, L.stream));
    const EmxCudaActs acts = {dx.p, xq.p, xd.p, xsum.p};
    // fast: int8 activations, so its reference is silu and the product on the CPU's integer dots
    std::vector<int8_t> q(dim);
    std::vector<float> d(dim / 32), sums(dim / 32);
    emx_quantize_acts_scalar(x.data(), dim, q.data(), d.data(), sums.data());
    std::vector<double> want_i(hidden);
    for (int r = 0; r < hidden; r++) {
        const double g = wg.int_dot(r, q.data(), d.data(), sums.data()), u = wu.int_dot(r, q.data(), d.data(), sums.data());
        want_i[r] = g / (1.0 + exp(-g)) * u;
    }
    const double bytes = wg.bytes() + wu.bytes() + dim * 4.0 + hidden * 4.0;
    const struct { int variant; const char *name; } versions[] = {{EMX_MATVEC_PLAIN, "fused matvec (plain)"},
                                                                 {EMX_MATVEC_FAST_F32, "fused matvec (fast_f32)"},
                                                                 {EMX_MATVEC_FAST, "fused matvec (fast)"}};
    for (const auto &v : versions) {
        LAB_CHECK(cudaMemset(dfo.p, 0, dfo.n * 4));
        lab_version(&L, v.name, bytes,
                    [&] { return emx_cuda_matvec_swiglu(v.variant, &wg.w, &wu.w, &acts, 1, dfo.p, L.stream); },
                    [&] { return lab_compare_scaled(dfo.get(), v.variant == EMX_MATVEC_FAST ? want_i : want_f, tol, 1e-4); });
    }
    return lab_finish(&L);
}
