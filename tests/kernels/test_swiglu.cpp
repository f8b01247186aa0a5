// test_swiglu.cpp — kernels/swiglu.cu and the fused gate/up matvec (emx_cuda_matvec_swiglu)
// against the CPU's emx_swiglu.
//
// Element-wise: the same expression g / (1 + exp(-g)) * u on both sides; the device expf is
// within 2 ulp, so |out - cpu| <= 1e-6 * |cpu| + 1e-30.
// Fused: gate and up are dot products checked like test_matvec.cpp (error <= 1e-4 * sum|w x|,
// call it e_g and e_u); silu' is at most 1.1 in size, so |out - cpu| <= 1.1 |u| e_g +
// |silu(g)| e_u + 1e-6 |cpu|.
#include "dense_test_util.h"

#include "kernels/matvec.h"
#include "kernels/swiglu.h"

Test(swiglu, elementwise_matches_cpu) {
    const int n = 1001;  // odd: the float4 loop leaves a tail
    std::vector<float> g = random_floats(n + 1, 1, -8.0f, 8.0f), u = random_floats(n + 1, 2, -3.0f, 3.0f);
    for (int offset : {0, 1}) {  // offset 1: pointers not 16-byte aligned, the scalar path
        DevBuf<float> dg(g), du(u), dout(n + 1);
        CUDA_OK(emx_cuda_swiglu(dout.p + offset, dg.p + offset, du.p + offset, n, nullptr));
        std::vector<float> want(g.begin() + offset, g.begin() + offset + n);
        emx_swiglu(want.data(), u.data() + offset, n);
        std::vector<float> got = dout.download();
        for (int i = 0; i < n; i++)
            cr_assert(fabsf(got[offset + i] - want[i]) <= 1e-6f * fabsf(want[i]) + 1e-30f,
                      "offset %d: [%d] = %.9g, CPU %.9g", offset, i, got[offset + i], want[i]);
        // in place over gate, as the CPU does it
        CUDA_OK(emx_cuda_swiglu(dg.p + offset, dg.p + offset, du.p + offset, n, nullptr));
        got = dg.download();
        for (int i = 0; i < n; i++) cr_assert(fabsf(got[offset + i] - want[i]) <= 1e-6f * fabsf(want[i]) + 1e-30f);
    }
}

Test(swiglu, fused_matvec_matches_cpu) {
    const int rows = 37, cols = 288;
    for (int variant = 0; variant < EMX_MATVEC_VARIANTS; variant++)
        for (uint32_t dt : kAllDtypes)
            for (int batch : {1, 3}) {
                TestWeight gate(dt, rows, cols, 500 + dt), up(dt, rows, cols, 600 + dt);
                std::vector<float> hx = random_floats((size_t)batch * cols, 700 + batch, -2.0f, 2.0f);
                DevBuf<float> x(hx), out((size_t)batch * rows);
                DevBuf<int8_t> xq((size_t)batch * cols);
                DevBuf<float> xd((size_t)batch * cols / 32);
                DevBuf<int> xsum((size_t)batch * cols / 32);
                CUDA_OK(emx_cuda_quantize_acts(x.p, cols, batch, xq.p, xd.p, xsum.p, nullptr));
                EmxCudaActs a = {x.p, xq.p, xd.p, xsum.p};
                CUDA_OK(emx_cuda_matvec_swiglu(variant, &gate.w, &up.w, &a, batch, out.p, nullptr));
                std::vector<float> got = out.download();
                for (int b = 0; b < batch; b++) {
                    const float *xb = hx.data() + (size_t)b * cols;
                    std::vector<int8_t> q(cols);
                    std::vector<float> d(cols / 32), s(cols / 32);
                    emx_quantize_acts_scalar(xb, cols, q.data(), d.data(), s.data());
                    for (int r = 0; r < rows; r++) {
                        double mg, mu;
                        float g = (float)ref_dot(gate, r, xb, &mg), u = (float)ref_dot(up, r, xb, &mu);
                        if (variant == EMX_MATVEC_FAST && dt == EMX_Q8) {
                            g = emx_dot_q8_scalar((const int8_t *)gate.quants(r), gate.scales(r), q.data(), d.data(), cols);
                            u = emx_dot_q8_scalar((const int8_t *)up.quants(r), up.scales(r), q.data(), d.data(), cols);
                        } else if (variant == EMX_MATVEC_FAST && dt == EMX_Q4) {
                            g = emx_dot_q4_scalar(gate.quants(r), gate.scales(r), q.data(), d.data(), s.data(), cols);
                            u = emx_dot_q4_scalar(up.quants(r), up.scales(r), q.data(), d.data(), s.data(), cols);
                        } else if (variant == EMX_MATVEC_FAST && dt == EMX_Q4_1F) {
                            g = emx_dot_q4_1f_scalar(gate.quants(r), gate.scales32(r), gate.mins32(r), q.data(),
                                                     d.data(), s.data(), cols);
                            u = emx_dot_q4_1f_scalar(up.quants(r), up.scales32(r), up.mins32(r), q.data(), d.data(),
                                                     s.data(), cols);
                        } else if (variant == EMX_MATVEC_FAST && dt == EMX_Q4_1) {
                            g = emx_dot_q4_1_scalar(gate.quants(r), gate.scales(r), gate.mins(r), q.data(), d.data(),
                                                    s.data(), cols);
                            u = emx_dot_q4_1_scalar(up.quants(r), up.scales(r), up.mins(r), q.data(), d.data(),
                                                    s.data(), cols);
                        }
                        float want = g;
                        emx_swiglu(&want, &u, 1);
                        const float silu = g / (1.0f + expf(-g));
                        const double tol = 1.1 * fabs(u) * 1e-4 * mg + fabs(silu) * 1e-4 * mu + 1e-6 * fabs(want);
                        const float got_v = got[(size_t)b * rows + r];
                        cr_assert(fabs(got_v - want) <= tol, "%s %s batch %d: [%d][%d] = %.9g, CPU %.9g",
                                  emx_matvec_variant_name(variant), emx_dtype_name(dt), batch, b, r, got_v, want);
                    }
                }
            }
}

Test(swiglu, fused_rejects_mismatched_matrices) {
    TestWeight gate(EMX_Q4, 8, 64, 1), up(EMX_Q8, 8, 64, 2);
    DevBuf<float> x(64), out(8);
    EmxCudaActs a = {x.p, nullptr, nullptr, nullptr};
    cr_assert_eq(emx_cuda_matvec_swiglu(EMX_MATVEC_PLAIN, &gate.w, &up.w, &a, 1, out.p, nullptr), cudaErrorInvalidValue);
}
