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
// The sandwich norm (Gemma 3, EmxFusedResidual): the graph path is emx_cuda_rmsnorm of delta,
// emx_cuda_residual_rmsnorm into a copy of x (then emx_cuda_quantize_acts), BITWISE in the outputs
// and the residual row h written to x_out; the CPU normalises delta, adds, normalises h (h itself
// within 1e-5 * (|x| + |normed delta|)). GeGLU: the graph path is the gate and up matvecs, then
// emx_cuda_geglu; the CPU's emx_geglu, the tolerance of g and u scaled by |u| and |gelu(g)|.
// Sizes are not multiples of the block (4 rows / 128 threads): rows 37, 13 (the set's k and v),
// 200, 577; cols 96, 288, 544, 2080 (the norm's block of 96 or 256 threads, a thread adding 1 to
// 9 columns); every dtype. Several input rows (EmxFusedInput.rows: 3 of 2080 columns, 8 of 288,
// each row its own values): the graph path's launches for as many rows (one norm block a row,
// the batched matvec), bitwise, and the CPU row by row.
#include "dense_test_util.h"

#include "kernels/geglu.h"
#include "kernels/matvec.h"
#include "kernels/matvec_fused.h"
#include "kernels/rmsnorm.h"

namespace {

const float kEps = 1e-5f;

struct Case {
    int rows, cols;
};
const Case kCases[] = {{37, 96}, {200, 288}, {577, 544}, {41, 2080}};

enum Mode { NORM_SET, QUANT_ACCUMULATE, NORM_SWIGLU, RESIDUAL_SET, NORM_GEGLU, RESIDUAL_GEGLU };

bool residual(Mode m) { return m == RESIDUAL_SET || m == RESIDUAL_GEGLU; }
bool geglu(Mode m) { return m == NORM_GEGLU || m == RESIDUAL_GEGLU; }
bool set3(Mode m) { return m == NORM_SET || m == RESIDUAL_SET; }

// The sandwich norm's inputs: delta and its norm's weight; h: where the residual row goes (the
// graph path: a copy of x, updated in place; the fused path: x_out).
struct Sandwich {
    const float *delta, *post_w;
    float *h;
};

// The gate and up matvecs into their own rows, then the GeGLU kernel (nb input rows).
void graph_geglu(const std::vector<TestWeight *> &w, const EmxCudaActs &a, int nb, float *out) {
    const int rows = w[0]->rows;
    DevBuf<float> g((size_t)nb * rows), u((size_t)nb * rows);
    CUDA_OK(emx_cuda_matvec(EMX_MATVEC_FAST, &w[0]->w, &a, nb, g.p, 0, nullptr));
    CUDA_OK(emx_cuda_matvec(EMX_MATVEC_FAST, &w[1]->w, &a, nb, u.p, 0, nullptr));
    CUDA_OK(emx_cuda_geglu(out, g.p, u.p, nb * rows, nullptr));
    CUDA_OK(cudaDeviceSynchronize());
}

// The graph path's launches for nb rows: the input made (norm / quantisation) by its own kernel,
// then the matvec. outs: one buffer per matrix (accumulate: holding `init`).
void graph_path(Mode mode, const std::vector<TestWeight *> &w, const float *x, const float *norm_w, int cols, int nb,
                const std::vector<float *> &outs, const Sandwich &sw) {
    const size_t n = (size_t)nb * cols;
    DevBuf<float> xb(n), dn(n);
    DevBuf<int8_t> xq(n);
    DevBuf<float> xd(n / 32);
    DevBuf<int> xsum(n / 32);
    const bool q = is_quantised(w[0]->dtype);
    EmxCudaActs a = {mode == QUANT_ACCUMULATE ? x : xb.p, xq.p, xd.p, xsum.p};
    if (mode == QUANT_ACCUMULATE) {
        if (q) CUDA_OK(emx_cuda_quantize_acts(x, cols, nb, xq.p, xd.p, xsum.p, nullptr));
    } else if (residual(mode)) {  // as cuda_attn_block_out with sandwich norms
        CUDA_OK(cudaMemcpy(sw.h, x, n * sizeof(float), cudaMemcpyDeviceToDevice));
        CUDA_OK(emx_cuda_rmsnorm(dn.p, sw.delta, sw.post_w, cols, nb, kEps, nullptr));
        CUDA_OK(emx_cuda_residual_rmsnorm(sw.h, dn.p, norm_w, xb.p, cols, nb, kEps, nullptr));
        if (q) CUDA_OK(emx_cuda_quantize_acts(xb.p, cols, nb, xq.p, xd.p, xsum.p, nullptr));
    } else if (q) {
        CUDA_OK(emx_cuda_rmsnorm_quantize(xb.p, x, norm_w, cols, nb, kEps, xq.p, xd.p, xsum.p, nullptr));
    } else {
        CUDA_OK(emx_cuda_rmsnorm(xb.p, x, norm_w, cols, nb, kEps, nullptr));
    }
    if (set3(mode)) {
        const EmxCudaWeight *ws[3] = {&w[0]->w, &w[1]->w, &w[2]->w};
        CUDA_OK(emx_cuda_matvec_set(EMX_MATVEC_FAST, ws, outs.data(), 3, &a, nb, nullptr));
    } else if (geglu(mode)) {
        graph_geglu(w, a, nb, outs[0]);
    } else if (mode == NORM_SWIGLU) {
        CUDA_OK(emx_cuda_matvec_swiglu(EMX_MATVEC_FAST, &w[0]->w, &w[1]->w, &a, nb, outs[0], nullptr));
    } else {
        CUDA_OK(emx_cuda_matvec(EMX_MATVEC_FAST, &w[0]->w, &a, nb, outs[0], 1, nullptr));
    }
    CUDA_OK(cudaDeviceSynchronize());
}

void fused_path(Mode mode, const std::vector<TestWeight *> &w, const float *x, const float *norm_w, int nb,
                const std::vector<float *> &outs, const Sandwich &sw) {
    const EmxFusedInput in = {x, mode == QUANT_ACCUMULATE ? nullptr : norm_w, kEps, 0, nb};
    const EmxFusedResidual res = {sw.delta, sw.post_w, sw.h};
    const EmxCudaWeight *ws[3] = {&w[0]->w, set3(mode) ? &w[1]->w : nullptr, set3(mode) ? &w[2]->w : nullptr};
    if (mode == NORM_SET) {
        CUDA_OK(emx_cuda_matvec_fused(&in, ws, outs.data(), 3, 0, nullptr));
    } else if (mode == RESIDUAL_SET) {
        CUDA_OK(emx_cuda_matvec_fused_residual(&in, &res, ws, outs.data(), 3, nullptr));
    } else if (geglu(mode)) {
        const EmxFusedResidual *r = residual(mode) ? &res : nullptr;
        CUDA_OK(emx_cuda_matvec_fused_geglu(&in, r, &w[0]->w, &w[1]->w, outs[0], nullptr));
    } else if (mode == NORM_SWIGLU) {
        CUDA_OK(emx_cuda_matvec_fused_swiglu(&in, &w[0]->w, &w[1]->w, outs[0], nullptr));
    } else {
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

// The CPU's input row: x normed (or as it is), or with the sandwich norm h = x + rmsnorm(delta)
// normed (h into *h).
std::vector<float> cpu_input(Mode mode, const std::vector<float> &hx, const std::vector<float> &hn,
                             const std::vector<float> &hd, const std::vector<float> &hp, std::vector<float> *h) {
    const int n = (int)hx.size();
    std::vector<float> in(n);
    *h = hx;
    if (residual(mode)) {
        std::vector<float> dn(n);
        emx_rmsnorm(dn.data(), hd.data(), hp.data(), n, kEps);
        for (int i = 0; i < n; i++) (*h)[i] = hx[i] + dn[i];
    }
    if (mode == QUANT_ACCUMULATE) return hx;
    emx_rmsnorm(in.data(), h->data(), hn.data(), n, kEps);
    return in;
}

// nb input rows (each its own x, delta, init: row b of each buffer).
void check(Mode mode, uint32_t dtype, const Case &c, uint64_t seed, int nb = 1) {
    const int n_mats = set3(mode) ? 3 : mode == QUANT_ACCUMULATE ? 1 : 2;
    const int rows[3] = {c.rows, set3(mode) ? 13 : c.rows, 13};
    std::vector<TestWeight *> w;
    for (int i = 0; i < n_mats; i++) w.push_back(new TestWeight(dtype, rows[i], c.cols, seed + 11 * i));
    const size_t n = (size_t)nb * c.cols;
    const std::vector<float> hx = random_floats(n, seed + 5, -3.0f, 3.0f);
    const std::vector<float> hn = random_floats(c.cols, seed + 6, 0.5f, 1.5f);
    const std::vector<float> init = random_floats((size_t)nb * c.rows, seed + 9);
    const std::vector<float> hd = random_floats(n, seed + 7, -40.0f, 40.0f);  // a block output
    const std::vector<float> hp = random_floats(c.cols, seed + 8, 0.5f, 1.5f);
    DevBuf<float> x(hx), norm_w(hn), delta(hd), post_w(hp);
    const int n_out = set3(mode) ? 3 : 1;
    auto run = [&](bool fused) {
        std::vector<DevBuf<float> *> bufs;
        std::vector<float *> outs;
        for (int i = 0; i < n_out; i++) {
            bufs.push_back(new DevBuf<float>((size_t)nb * rows[i]));
            if (mode == QUANT_ACCUMULATE) bufs.back()->upload(init);
            outs.push_back(bufs.back()->p);
        }
        DevBuf<float> h(n);
        const Sandwich sw = {delta.p, post_w.p, h.p};
        if (fused)
            fused_path(mode, w, x.p, norm_w.p, nb, outs, sw);
        else
            graph_path(mode, w, x.p, norm_w.p, c.cols, nb, outs, sw);
        std::vector<float> all;
        for (auto *b : bufs) {
            const std::vector<float> o = b->download();
            all.insert(all.end(), o.begin(), o.end());
            delete b;
        }
        if (residual(mode)) {  // the residual rows last
            const std::vector<float> o = h.download();
            all.insert(all.end(), o.begin(), o.end());
        }
        return all;
    };
    const auto both = run_two_schedules([&] { return run(true); });
    const char *dn = emx_dtype_name(dtype);
    cr_assert(same_bytes(both.first, both.second), "mode %d %s %dx%d, %d rows: the schedules differ", mode, dn, c.rows,
              c.cols, nb);
    const std::vector<float> graph = run(false);
    cr_assert(same_bytes(both.first, graph), "mode %d %s %dx%d, %d rows: fused differs from the graph path's launches",
              mode, dn, c.rows, c.cols, nb);
    // the CPU, row by row
    size_t at = 0;
    std::vector<std::vector<float>> hs(nb);
    for (int i = 0; i < n_out; i++)
        for (int b = 0; b < nb; b++) {
            const size_t row = (size_t)b * c.cols;
            auto slice = [&](const std::vector<float> &v) {
                return std::vector<float>(v.begin() + (long)row, v.begin() + (long)(row + c.cols));
            };
            const std::vector<float> in = cpu_input(mode, slice(hx), hn, slice(hd), hp, &hs[b]);
            for (int r = 0; r < rows[i]; r++, at++) {
                double tol, want = cpu_dot(*w[i], r, in.data(), &tol);
                if (mode == NORM_SWIGLU || geglu(mode)) {  // act(g) * u: the tolerance of g and u scaled
                    double tu;
                    const double u = cpu_dot(*w[1], r, in.data(), &tu), g = want;
                    float ag = (float)g, one = 1.0f;
                    if (geglu(mode)) emx_geglu(&ag, &one, 1);  // gelu_tanh(g)
                    const double sg = geglu(mode) ? (double)ag : g / (1.0 + exp(-g));
                    want = sg * u;
                    // (gelu's slope reaches 1.13, silu's 1.1; tanhf: a few ulp)
                    tol = tol * (fabs(u) * (geglu(mode) ? 1.2 : 1.1) + 0.1) + tu * (fabs(sg) + 0.1) +
                          (geglu(mode) ? 1e-6 * fabs(want) : 0.0);
                } else if (mode == QUANT_ACCUMULATE) {
                    want += init[(size_t)b * c.rows + r];
                }
                cr_assert(fabs(both.first[at] - want) <= tol,
                          "mode %d %s %dx%d: out[%d][%d][%d] = %.9g, CPU %.9g (tol %.3g)", mode, dn, c.rows, c.cols, i,
                          b, r, both.first[at], want, tol);
            }
        }
    if (residual(mode))
        for (int b = 0; b < nb; b++)
            for (int i = 0; i < c.cols; i++, at++) {
                const float x0 = hx[(size_t)b * c.cols + i], h = hs[b][i];
                cr_assert(fabs(both.first[at] - h) <= 1e-5 * (fabs(x0) + fabs(h - x0)) + 1e-7,
                          "mode %d %s %dx%d: h[%d][%d] = %.9g, CPU %.9g", mode, dn, c.rows, c.cols, b, i,
                          both.first[at], h);
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

Test(matvec_fused, sandwich_residual_then_qkv_set_equals_graph_path) {
    uint64_t seed = 400;
    for (uint32_t dt : kAllDtypes)
        for (const Case &c : kCases) check(RESIDUAL_SET, dt, c, seed += 31);
}

Test(matvec_fused, norm_then_geglu_equals_graph_path) {
    uint64_t seed = 500;
    for (uint32_t dt : kAllDtypes)
        for (const Case &c : kCases) check(NORM_GEGLU, dt, c, seed += 31);
}

Test(matvec_fused, sandwich_residual_then_geglu_equals_graph_path) {
    uint64_t seed = 600;
    for (uint32_t dt : kAllDtypes)
        for (const Case &c : kCases) check(RESIDUAL_GEGLU, dt, c, seed += 31);
}

// Several input rows (the rows of several sequences in one step), every mode: 8 rows (the most) of 288
// columns and 3 of 2080 (the input's shared memory a row's times the rows), bitwise the graph
// path's launches for as many rows, each row within the CPU's tolerance of its own result.
Test(matvec_fused, several_rows_equal_the_graph_paths_batch) {
    const Mode modes[] = {NORM_SET, QUANT_ACCUMULATE, NORM_SWIGLU, RESIDUAL_SET, NORM_GEGLU, RESIDUAL_GEGLU};
    const struct {
        Case c;
        int nb;
    } shapes[] = {{{200, 288}, EMX_FUSED_MAX_ROWS}, {{41, 2080}, 3}};
    uint64_t seed = 800;
    for (Mode m : modes)
        for (uint32_t dt : kAllDtypes)
            for (const auto &sh : shapes) check(m, dt, sh.c, seed += 31, sh.nb);
}

// The residual row alone (after the last sandwich layer): bitwise the norm of delta and the add
// (emx_cuda_rmsnorm, emx_cuda_residual_rmsnorm) under both schedules, within 1e-5 of the CPU's.
Test(matvec_fused, sandwich_residual_alone_equals_graph_path) {
    uint64_t seed = 700;
    for (const Case &c : kCases) {
        const std::vector<float> hx = random_floats(c.cols, seed += 31, -3.0f, 3.0f);
        const std::vector<float> hd = random_floats(c.cols, seed + 1, -40.0f, 40.0f);
        const std::vector<float> hp = random_floats(c.cols, seed + 2, 0.5f, 1.5f);
        DevBuf<float> x(hx), delta(hd), post_w(hp), dn(c.cols), xb(c.cols), graph(hx);
        auto run = [&] {
            DevBuf<float> h(c.cols);
            const EmxFusedInput in = {x.p, nullptr, kEps, 0, 1};
            const EmxFusedResidual res = {delta.p, post_w.p, h.p};
            CUDA_OK(emx_cuda_fused_residual(&in, &res, c.cols, nullptr));
            CUDA_OK(cudaDeviceSynchronize());
            return h.download();
        };
        const auto both = run_two_schedules(run);
        cr_assert(same_bytes(both.first, both.second), "%d cols: the schedules differ", c.cols);
        CUDA_OK(emx_cuda_rmsnorm(dn.p, delta.p, post_w.p, c.cols, 1, kEps, nullptr));
        CUDA_OK(emx_cuda_residual_rmsnorm(graph.p, dn.p, post_w.p, xb.p, c.cols, 1, kEps, nullptr));
        cr_assert(same_bytes(both.first, graph.download()), "%d cols: differs from the graph path's launches", c.cols);
        std::vector<float> want(c.cols);
        emx_rmsnorm(want.data(), hd.data(), hp.data(), c.cols, kEps);
        for (int i = 0; i < c.cols; i++) {
            want[i] += hx[i];
            cr_assert(fabs(both.first[i] - want[i]) <= 1e-5 * (fabs(hx[i]) + fabs(want[i] - hx[i])) + 1e-7,
                      "%d cols: h[%d] = %.9g, CPU %.9g", c.cols, i, both.first[i], want[i]);
        }
    }
}

// What the fused kernels refuse, before launching: widths that are not a multiple of 32 or whose
// input does not fit in shared memory, mixed dtypes, a missing input; a sandwich norm without the
// input's norm, or whose residual row would overwrite what the other blocks read.
Test(matvec_fused, refuses_what_it_does_not_take) {
    cr_assert_eq(emx_cuda_matvec_fused_fits(EMX_Q8, 96, 1), 1);
    cr_assert_eq(emx_cuda_matvec_fused_fits(EMX_Q8, 100, 1), 0, "not a multiple of 32");
    cr_assert_eq(emx_cuda_matvec_fused_fits(EMX_F32, 12288, 1), 1, "48 KiB of f32");
    cr_assert_eq(emx_cuda_matvec_fused_fits(EMX_F32, 12320, 1), 0, "over 48 KiB of f32");
    cr_assert_eq(emx_cuda_matvec_fused_fits(EMX_Q4, 39296, 1), 1, "1.25 bytes a column");
    cr_assert_eq(emx_cuda_matvec_fused_fits(EMX_Q4, 39328, 1), 0);
    cr_assert_eq(emx_cuda_matvec_fused_residual_fits(EMX_Q4, 9344, 1), 1, "5.25 bytes a column");
    cr_assert_eq(emx_cuda_matvec_fused_residual_fits(EMX_Q4, 9376, 1), 0);
    cr_assert_eq(emx_cuda_matvec_fused_residual_fits(EMX_F32, 12288, 1), 1, "the f32 input normed in place");
    cr_assert_eq(emx_cuda_matvec_fused_fits(EMX_Q8, 4896, 8), 1, "8 rows of 1.25 bytes a column: 48,960 bytes");
    cr_assert_eq(emx_cuda_matvec_fused_fits(EMX_Q8, 4928, 8), 0, "49,280 bytes");
    cr_assert_eq(emx_cuda_matvec_fused_fits(EMX_F32, 1536, 8), 1, "8 rows of 6 KiB");
    cr_assert_eq(emx_cuda_matvec_fused_fits(EMX_F32, 1568, 8), 0);
    cr_assert_eq(emx_cuda_matvec_fused_residual_fits(EMX_Q4, 1152, 8), 1, "8 rows of 5.25 bytes a column");
    cr_assert_eq(emx_cuda_matvec_fused_residual_fits(EMX_Q4, 1184, 8), 0);
    cr_assert_eq(emx_cuda_matvec_fused_fits(EMX_Q8, 96, 0), 0, "no rows");
    cr_assert_eq(emx_cuda_matvec_fused_fits(EMX_Q8, 96, EMX_FUSED_MAX_ROWS + 1), 0, "beyond the batch");
    TestWeight a(EMX_Q8, 8, 64, 1), b(EMX_Q4, 8, 64, 2);
    DevBuf<float> x(64), out(8);
    const EmxFusedInput in = {x.p, nullptr, kEps, 0, 1}, none = {nullptr, nullptr, kEps, 0, 1};
    const EmxCudaWeight *mixed[2] = {&a.w, &b.w};
    float *outs[2] = {out.p, out.p};
    cr_assert_eq(emx_cuda_matvec_fused(&in, mixed, outs, 2, 0, nullptr), cudaErrorInvalidValue);
    cr_assert_eq(emx_cuda_matvec_fused(&none, mixed, outs, 1, 0, nullptr), cudaErrorInvalidValue);
    cr_assert_eq(emx_cuda_matvec_fused_swiglu(&in, &a.w, &b.w, out.p, nullptr), cudaErrorInvalidValue);
    DevBuf<float> d(64), pw(64), h(64);
    const EmxCudaWeight *one[1] = {&a.w};
    const EmxFusedInput normed = {x.p, pw.p, kEps, 0, 1};
    const EmxFusedResidual res = {d.p, pw.p, h.p}, onto_x = {d.p, pw.p, x.p}, onto_delta = {d.p, pw.p, d.p};
    cr_assert_eq(emx_cuda_matvec_fused_residual(&in, &res, one, outs, 1, nullptr), cudaErrorInvalidValue, "no norm_w");
    cr_assert_eq(emx_cuda_matvec_fused_residual(&normed, nullptr, one, outs, 1, nullptr), cudaErrorInvalidValue);
    cr_assert_eq(emx_cuda_matvec_fused_residual(&normed, &onto_x, one, outs, 1, nullptr), cudaErrorInvalidValue);
    cr_assert_eq(emx_cuda_matvec_fused_geglu(&normed, &onto_delta, &a.w, &a.w, out.p, nullptr), cudaErrorInvalidValue);
    cr_assert_eq(emx_cuda_fused_residual(&normed, &onto_x, 64, nullptr), cudaErrorInvalidValue);
    cr_assert_eq(emx_cuda_matvec_fused_geglu(&in, nullptr, &a.w, &a.w, out.p, nullptr), cudaErrorInvalidValue,
                 "GeGLU's pair without its norm");
    const EmxFusedInput too_many = {x.p, nullptr, kEps, 0, EMX_FUSED_MAX_ROWS + 1};
    const EmxFusedInput negative = {x.p, nullptr, kEps, 0, -1};
    cr_assert_eq(emx_cuda_matvec_fused(&too_many, one, outs, 1, 0, nullptr), cudaErrorInvalidValue, "17 rows");
    cr_assert_eq(emx_cuda_matvec_fused(&negative, one, outs, 1, 0, nullptr), cudaErrorInvalidValue, "-1 rows");
    cr_assert_eq(emx_cuda_fused_residual(&too_many, &res, 64, nullptr), cudaErrorInvalidValue, "17 rows");
}
