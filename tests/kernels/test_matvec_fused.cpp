// test_matvec_fused.cpp — kernels/matvec_fused.cu against the graph path's two launches and the
// CPU.
//
// References and tolerances:
//  - the graph path (emx_cuda_rmsnorm or emx_cuda_rmsnorm_quantize, or emx_cuda_quantize_acts,
//    then emx_cuda_matvec / _set / _swiglu, EMX_MATVEC_FAST, one row): BITWISE. The fused kernel
//    adds the norm's squares in the order of the norm kernel's block (its thread v adds columns
//    v, v + T, ... with T = 96 or 256 here, then the same shuffle trees), quantises with the same
//    code and runs the same row code; the fused step relies on it (test_forward_cuda_fused.cpp).
//  - the CPU: emx_rmsnorm (f32, its sum in double), then the CPU's dot products (float weights:
//    f64 over dequantised weights; quantised: the CPU's int8 scheme on the CPU-normed row) as
//    test_matvec.cpp. Float weights: 1e-4 * sum|w_j x_j|, as there (the norm's f32 sum adds
//    ~n * 2^-24 relative). Quantised: the two norms differ in the last bits, which can move an
//    activation across a rounding boundary of its int8 step: one step (d_g = max|x|/127 of its
//    group) on a few activations; allowed: 1e-4 * sum|w_j x_j| + 2 * max_g d_g * max_j |w_j|.
//  - under both schedules of the emulator (blocks and threads forward, then reversed): bitwise.
// Sizes are not multiples of the block (4 rows / 128 threads): rows 37, 13 (the set's k and v),
// 200, 577; cols 96, 288, 544, 2080 (the norm's block of 96 or 256 threads, a thread adding 1 to
// 9 columns); every dtype.
#include "dense_test_util.h"

#include "kernels/matvec.h"
#include "kernels/matvec_fused.h"
#include "kernels/rmsnorm.h"

namespace {

const float kEps = 1e-5f;

struct Case {
    int rows, cols;
};
const Case kCases[] = {{37, 96}, {200, 288}, {577, 544}, {41, 2080}};

enum Mode { NORM_SET, QUANT_ACCUMULATE, NORM_SWIGLU };

// The graph path's launches for one row: the input made (norm / quantisation) by its own kernel,
// then the matvec. outs: one buffer per matrix (accumulate: holding `init`).
void graph_path(Mode mode, const std::vector<TestWeight *> &w, const float *x, const float *norm_w, int cols,
                const std::vector<float *> &outs) {
    DevBuf<float> xb(cols);
    DevBuf<int8_t> xq(cols);
    DevBuf<float> xd(cols / 32);
    DevBuf<int> xsum(cols / 32);
    const bool q = is_quantised(w[0]->dtype);
    EmxCudaActs a = {mode == QUANT_ACCUMULATE ? x : xb.p, xq.p, xd.p, xsum.p};
    if (mode == QUANT_ACCUMULATE) {
        if (q) CUDA_OK(emx_cuda_quantize_acts(x, cols, 1, xq.p, xd.p, xsum.p, nullptr));
    } else if (q) {
        CUDA_OK(emx_cuda_rmsnorm_quantize(xb.p, x, norm_w, cols, 1, kEps, xq.p, xd.p, xsum.p, nullptr));
    } else {
        CUDA_OK(emx_cuda_rmsnorm(xb.p, x, norm_w, cols, 1, kEps, nullptr));
    }
    if (mode == NORM_SET) {
        const EmxCudaWeight *ws[3] = {&w[0]->w, &w[1]->w, &w[2]->w};
        CUDA_OK(emx_cuda_matvec_set(EMX_MATVEC_FAST, ws, outs.data(), 3, &a, 1, nullptr));
    } else if (mode == NORM_SWIGLU) {
        CUDA_OK(emx_cuda_matvec_swiglu(EMX_MATVEC_FAST, &w[0]->w, &w[1]->w, &a, 1, outs[0], nullptr));
    } else {
        CUDA_OK(emx_cuda_matvec(EMX_MATVEC_FAST, &w[0]->w, &a, 1, outs[0], 1, nullptr));
    }
    CUDA_OK(cudaDeviceSynchronize());
}

void fused_path(Mode mode, const std::vector<TestWeight *> &w, const float *x, const float *norm_w,
                const std::vector<float *> &outs) {
    const EmxFusedInput in = {x, mode == QUANT_ACCUMULATE ? nullptr : norm_w, kEps, 0};
    if (mode == NORM_SET) {
        const EmxCudaWeight *ws[3] = {&w[0]->w, &w[1]->w, &w[2]->w};
        CUDA_OK(emx_cuda_matvec_fused(&in, ws, outs.data(), 3, 0, nullptr));
    } else if (mode == NORM_SWIGLU) {
        CUDA_OK(emx_cuda_matvec_fused_swiglu(&in, &w[0]->w, &w[1]->w, outs[0], nullptr));
    } else {
        const EmxCudaWeight *ws[1] = {&w[0]->w};
        CUDA_OK(emx_cuda_matvec_fused(&in, ws, outs.data(), 1, 1, nullptr));
    }
    CUDA_OK(cudaDeviceSynchronize());
}

// The CPU's W[r] · input (input: the CPU-normed row), its tolerance (see the top).
double cpu_dot(const TestWeight &tw, int r, const float *in, double *tol) {
    double mag;
    const double f = ref_dot(tw, r, in, &mag);
    *tol = 1e-4 * mag + 1e-12;
    if (!is_quantised(tw.dtype)) return f;
    const int n = tw.cols, G = n / 32;
    std::vector<int8_t> q(n);
    std::vector<float> d(G), s(G);
    emx_quantize_acts_scalar(in, n, q.data(), d.data(), s.data());
    std::vector<float> row(n);
    emx_dequantize_row(tw.dtype, tw.file.data(), (uint64_t)tw.rows, (uint64_t)tw.cols, (uint64_t)r, row.data());
    float dmax = 0.0f, wmax = 0.0f;
    for (int g = 0; g < G; g++) dmax = fmaxf(dmax, d[g]);
    for (int j = 0; j < n; j++) wmax = fmaxf(wmax, fabsf(row[j]));
    *tol += 2.0 * dmax * wmax;
    switch (tw.dtype) {
    case EMX_Q8: return emx_dot_q8_scalar((const int8_t *)tw.quants(r), tw.scales(r), q.data(), d.data(), n);
    case EMX_Q4: return emx_dot_q4_scalar(tw.quants(r), tw.scales(r), q.data(), d.data(), s.data(), n);
    case EMX_Q4_1F:
        return emx_dot_q4_1f_scalar(tw.quants(r), tw.scales32(r), tw.mins32(r), q.data(), d.data(), s.data(), n);
    default: return emx_dot_q4_1_scalar(tw.quants(r), tw.scales(r), tw.mins(r), q.data(), d.data(), s.data(), n);
    }
}

void check(Mode mode, uint32_t dtype, const Case &c, uint64_t seed) {
    const int n_mats = mode == NORM_SET ? 3 : mode == NORM_SWIGLU ? 2 : 1;
    const int rows[3] = {c.rows, mode == NORM_SET ? 13 : c.rows, 13};
    std::vector<TestWeight *> w;
    for (int i = 0; i < n_mats; i++) w.push_back(new TestWeight(dtype, rows[i], c.cols, seed + 11 * i));
    const std::vector<float> hx = random_floats(c.cols, seed + 5, -3.0f, 3.0f);
    const std::vector<float> hn = random_floats(c.cols, seed + 6, 0.5f, 1.5f);
    const std::vector<float> init = random_floats(c.rows, seed + 9);
    DevBuf<float> x(hx), norm_w(hn);
    const int n_out = mode == NORM_SET ? 3 : 1;
    auto run = [&](bool fused) {
        std::vector<DevBuf<float> *> bufs;
        std::vector<float *> outs;
        for (int i = 0; i < n_out; i++) {
            bufs.push_back(new DevBuf<float>(rows[i]));
            if (mode == QUANT_ACCUMULATE) bufs.back()->upload(init);
            outs.push_back(bufs.back()->p);
        }
        if (fused)
            fused_path(mode, w, x.p, norm_w.p, outs);
        else
            graph_path(mode, w, x.p, norm_w.p, c.cols, outs);
        std::vector<float> all;
        for (auto *b : bufs) {
            const std::vector<float> h = b->download();
            all.insert(all.end(), h.begin(), h.end());
            delete b;
        }
        return all;
    };
    const auto both = run_two_schedules([&] { return run(true); });
    const char *dn = emx_dtype_name(dtype);
    cr_assert(same_bytes(both.first, both.second), "mode %d %s %dx%d: the schedules differ", mode, dn, c.rows, c.cols);
    const std::vector<float> graph = run(false);
    cr_assert(same_bytes(both.first, graph), "mode %d %s %dx%d: fused differs from the graph path's launches", mode,
              dn, c.rows, c.cols);
    // the CPU
    std::vector<float> in(c.cols);
    if (mode == QUANT_ACCUMULATE)
        in = hx;
    else
        emx_rmsnorm(in.data(), hx.data(), hn.data(), c.cols, kEps);
    size_t at = 0;
    for (int i = 0; i < n_out; i++)
        for (int r = 0; r < rows[i]; r++, at++) {
            double tol, want = cpu_dot(*w[i], r, in.data(), &tol);
            if (mode == NORM_SWIGLU) {  // silu(g) * u: the tolerance of g and u scaled by |u| and |silu|
                double tu;
                const double u = cpu_dot(*w[1], r, in.data(), &tu), g = want;
                const double sg = g / (1.0 + exp(-g));
                want = sg * u;
                tol = tol * (fabs(u) * 1.1 + 0.1) + tu * (fabs(sg) + 0.1);
            } else if (mode == QUANT_ACCUMULATE) {
                want += init[r];
            }
            cr_assert(fabs(both.first[at] - want) <= tol, "mode %d %s %dx%d: out[%d][%d] = %.9g, CPU %.9g (tol %.3g)",
                      mode, dn, c.rows, c.cols, i, r, both.first[at], want, tol);
        }
    for (auto *t : w) delete t;
}

}  // namespace

Test(matvec_fused, norm_then_qkv_set_equals_graph_path) {
    uint64_t seed = 100;
    for (uint32_t dt : kAllDtypes)
        for (const Case &c : kCases) check(NORM_SET, dt, c, seed += 31);
}

Test(matvec_fused, quantised_input_with_residual_add_equals_graph_path) {
    uint64_t seed = 200;
    for (uint32_t dt : kAllDtypes)
        for (const Case &c : kCases) check(QUANT_ACCUMULATE, dt, c, seed += 31);
}

Test(matvec_fused, norm_then_swiglu_equals_graph_path) {
    uint64_t seed = 300;
    for (uint32_t dt : kAllDtypes)
        for (const Case &c : kCases) check(NORM_SWIGLU, dt, c, seed += 31);
}

// What the fused kernels refuse, before launching: widths that are not a multiple of 32 or whose
// input does not fit in shared memory, mixed dtypes, a missing input.
Test(matvec_fused, refuses_what_it_does_not_take) {
    cr_assert_eq(emx_cuda_matvec_fused_fits(EMX_Q8, 96), 1);
    cr_assert_eq(emx_cuda_matvec_fused_fits(EMX_Q8, 100), 0, "not a multiple of 32");
    cr_assert_eq(emx_cuda_matvec_fused_fits(EMX_F32, 12288), 1, "48 KiB of f32");
    cr_assert_eq(emx_cuda_matvec_fused_fits(EMX_F32, 12320), 0, "over 48 KiB of f32");
    cr_assert_eq(emx_cuda_matvec_fused_fits(EMX_Q4, 39296), 1, "1.25 bytes a column");
    cr_assert_eq(emx_cuda_matvec_fused_fits(EMX_Q4, 39328), 0);
    TestWeight a(EMX_Q8, 8, 64, 1), b(EMX_Q4, 8, 64, 2);
    DevBuf<float> x(64), out(8);
    const EmxFusedInput in = {x.p, nullptr, kEps, 0}, none = {nullptr, nullptr, kEps, 0};
    const EmxCudaWeight *mixed[2] = {&a.w, &b.w};
    float *outs[2] = {out.p, out.p};
    cr_assert_eq(emx_cuda_matvec_fused(&in, mixed, outs, 2, 0, nullptr), cudaErrorInvalidValue);
    cr_assert_eq(emx_cuda_matvec_fused(&none, mixed, outs, 1, 0, nullptr), cudaErrorInvalidValue);
    cr_assert_eq(emx_cuda_matvec_fused_swiglu(&in, &a.w, &b.w, out.p, nullptr), cudaErrorInvalidValue);
}
