// tools/lab/matvec_fused.cu — the fused decode layer's matvec (kernels/matvec_fused.cu) against the
// separate kernels it replaces and the CPU: `make lab K=matvec_fused`, docs/kernel-lab.md.
//
//   out[r] = res[r] + W[r] · rmsnorm(x),   rmsnorm(x) = x / sqrt(mean(x²) + eps) * norm_w
// W [rows][cols] of --dtype, x and norm_w [cols], res and out [rows]: one row of a decode step.
// The runtime's fused layer (runtime/cuda/forward_cuda_fused.c) puts the norm in the prologue of
// the q/k/v and gate/up matvecs and the residual add in the epilogue of wo and w_down; this
// program runs both in one call (the kernel's accumulate with a norm), so each version shows the
// whole idea: what was three launches becomes one.
//
// Versions, and how their threads map to the data:
//   naive (3 launches)  rmsnorm_naive (one thread does the row: sum of squares, then the scale),
//                       matvec_naive (a thread per output row over the dequantised f32 W), then
//                       add_naive (a thread per element: out += the matvec's result)
//   separate (2)        what the runtime launches outside the fused path: emx_cuda_rmsnorm_quantize
//                       (a block for the row; the int8 groups of the normed row, a warp's 32 lanes
//                       to a group) or emx_cuda_rmsnorm for float weights, then the fast matvec
//                       (a warp per row, 16-byte loads, __dp4a) adding its rows to out
//   fused (runtime: 1)  emx_cuda_matvec_fused: every block (4 warps) recomputes the norm's sum of
//                       squares and the int8 groups (or the normed f32 row) into shared memory in
//                       its prologue, then its warps take rows as the fast matvec does and add
//                       them to out
// Bytes each version moves (cols = c, rows = r, W as stored = |W|):
//   naive:    the f32 W (4rc) + x and norm_w (8c) + out read and written (8r), and between its
//             launches the normed row written and read (8c) and the matvec's result (8r)
//   separate: |W| + 8c + 8r, and between its launches the normed row written (4c) and, quantised,
//             its int8 groups written and read (2 × 1.25c; float weights read the row, 4c)
//   fused:    |W| + 8c + 8r, and x and norm_w read again by every block from L2 (8c a block)
// The bytes column is the compulsory traffic (each input once, out read and written once): the
// same for separate and fused, so GB/s shows what the extra launch and round trip cost.
//
// CPU twin: the runtime's CPU code, emx_rmsnorm then, for quantised weights, its integer scheme
// (emx_quantize_acts_scalar and the emx_dot_q*_scalar dot products) or, for float weights and the
// naive version's f32 W, the dot products in double; res added.
#include "tools/lab/lab_weight.h"

#include "kernels/matvec.h"
#include "kernels/matvec_fused.h"
#include "kernels/naive.h"
#include "kernels/rmsnorm.h"

extern "C" {
#include "runtime/cpu/cpu_ops.h"
}

namespace {

// The references of out, and each row's error scale (see the tolerance in main).
struct Want {
    std::vector<double> f, i;  // f: f32 activations (naive; float weights), i: the int8 scheme
    std::vector<double> mag;   // Σ_c |W[r][c] xn[c]| + |res[r]|: the f32 rounding's scale
    std::vector<double> flip;  // Σ over the columns whose int8 rounding may flip: d_g |W[r][c]|
    int flippable = 0;         // how many columns those are
};

// CPU: xn = emx_rmsnorm(x); want.f = res + W · xn in double; for quantised weights want.i = res +
// the CPU's integer dot products of W with xn's int8 groups. The kernels' f32 sum of squares
// differs from the CPU's in the last bits (at most rel of xn: the rmsnorm family's bound), so a
// column whose xn / d lies within that of a rounding boundary (k + 0.5) may get the other int8
// neighbour on the GPU, which moves out[r] by d |W[r][c]|: such columns are allowed that much.
Want cpu_twin(const LabWeight &w, const std::vector<float> &x, const std::vector<float> &norm_w,
              const std::vector<float> &res, float eps, bool quant, double rel) {
    const int rows = w.rows, cols = w.cols;
    std::vector<float> xn(cols), d(cols / 32), s(cols / 32);
    std::vector<int8_t> q(cols);
    emx_rmsnorm(xn.data(), x.data(), norm_w.data(), cols, eps);
    emx_quantize_acts_scalar(xn.data(), cols, q.data(), d.data(), s.data());
    std::vector<char> may_flip(cols, 0);
    Want want{std::vector<double>(rows), std::vector<double>(rows), std::vector<double>(rows),
              std::vector<double>(rows, 0.0), 0};
    for (int c = 0; c < cols && quant; c++) {
        const double dg = d[c / 32], v = dg > 0 ? xn[c] / dg : 0.0;
        const double to_half = fabs(fabs(v - trunc(v)) - 0.5);
        may_flip[c] = dg > 0 && to_half <= 2 * rel * fabs(v) + 1e-7 / dg;
        want.flippable += may_flip[c];
    }
    for (int r = 0; r < rows; r++) {
        const std::vector<float> wr = w.row(r);
        double acc = 0, m = 0;
        for (int c = 0; c < cols; c++) {
            acc += (double)wr[c] * xn[c];
            m += fabs((double)wr[c] * xn[c]);
            if (may_flip[c]) want.flip[r] += d[c / 32] * fabs((double)wr[c]);
        }
        want.f[r] = res[r] + acc;
        want.mag[r] = m + fabs(res[r]);
        if (quant) want.i[r] = res[r] + w.int_dot(r, q.data(), d.data(), s.data());
    }
    return want;
}

}  // namespace

int main(int argc, char **argv) {
    Lab L;
    lab_init(&L, "matvec_fused", argc, argv, "--rows --cols --dtype",
             "out[r] = res[r] + W[r] . rmsnorm(x): the norm, the matvec and the residual add of a decode step");
    // SmolLM2-135M's width (the o projection's 576 x 576), q8
    const int rows = lab_int(&L, "--rows", 576, 1, 1 << 20), cols = lab_int(&L, "--cols", 576, 32, 1 << 16);
    const uint32_t dtype = lab_dtype_int_dot(&L, "q8");
    const bool quant = dtype == EMX_Q8 || dtype == EMX_Q4 || dtype == EMX_Q4_1;
    if (!emx_cuda_matvec_fused_fits(dtype, cols, 1)) {
        fprintf(stderr, "lab matvec_fused: --cols %d: the fused matvec needs a multiple of 32 whose input fits in "
                "48 KiB of shared memory\n", cols);
        exit(2);
    }
    const float eps = 1e-5f;
    LabWeight w(dtype, rows, cols, 31);
    const std::vector<float> x = lab_random(cols, 32, -4.0f, 4.0f), norm_w = lab_random(cols, 33, 0.5f, 1.5f);
    const std::vector<float> res = lab_random(rows, 34);
    const double rel = 2e-7 + cols * 6e-8;  // the norm's relative error: tools/lab/rmsnorm.cu's bound
    const Want want = cpu_twin(w, x, norm_w, res, eps, quant, rel);
    std::vector<float> wf((size_t)rows * cols);  // the naive version's f32 copy of W
    for (int r = 0; r < rows; r++) {
        const std::vector<float> wr = w.row(r);
        std::copy(wr.begin(), wr.end(), wf.begin() + (size_t)r * cols);
    }
    LabBuf<float> dwf(wf), dx(x), dnw(norm_w), dout(rows), dxn(cols), dtmp(rows), xd(cols / 32);
    LabBuf<int8_t> xq(cols);
    LabBuf<int> xsum(cols / 32);

    char shape[96], tol[256];
    snprintf(shape, sizeof shape, "%s %d x %d, one row (--dtype --rows --cols)", emx_dtype_name(dtype), rows, cols);
    // the matvec family's bound on an f32 dot product in another order, and for the int8 scheme
    // the flips described at cpu_twin
    snprintf(tol, sizeof tol,
             "|gpu - cpu| <= 1e-4 * (sum_c |W[r][c] xn[c]| + |res[r]|)%s", quant ?
             ", + d_g |W[r][c]| for each column whose int8 rounding the f32 norm may flip (int8 versions)" : "");
    if (quant) printf("columns whose int8 rounding the norm may flip: %d of %d\n", want.flippable, cols);
    lab_header(&L, shape, tol);
    const double tail = (double)cols * 8 + (double)rows * 8;  // x, norm_w; out read and written
    // out starts as res before each version's checked launch; the timed launches keep adding
    // (harmless: only the time is measured)
    auto check = [&](const std::vector<double> &ref, bool int8) {
        std::vector<double> scale(want.mag);
        for (int r = 0; r < rows && int8; r++) scale[r] += want.flip[r] / 1e-4;
        return lab_compare_scaled(dout.get(), ref, scale, 1e-4);
    };
    dout.upload(res);
    lab_version(&L, "naive (3 launches)", (double)rows * cols * 4 + tail, [&] {
        cudaError_t e = emx_cuda_rmsnorm_naive(dxn.p, dx.p, dnw.p, cols, 1, eps, L.stream);
        if (e == cudaSuccess) e = emx_cuda_matvec_naive(dwf.p, dxn.p, dtmp.p, rows, cols, L.stream);
        return e == cudaSuccess ? emx_cuda_add_naive(dout.p, dtmp.p, rows, L.stream) : e;
    }, [&] { return check(want.f, false); });
    const EmxCudaActs acts = {dxn.p, xq.p, xd.p, xsum.p};
    dout.upload(res);
    lab_version(&L, "separate (2 launches)", w.bytes() + tail, [&] {
        const cudaError_t e = quant ? emx_cuda_rmsnorm_quantize(dxn.p, dx.p, dnw.p, cols, 1, eps, xq.p, xd.p, xsum.p, L.stream)
                                    : emx_cuda_rmsnorm(dxn.p, dx.p, dnw.p, cols, 1, eps, L.stream);
        return e == cudaSuccess ? emx_cuda_matvec(EMX_MATVEC_FAST, &w.w, &acts, 1, dout.p, 1, L.stream) : e;
    }, [&] { return check(quant ? want.i : want.f, quant); });
    const EmxFusedInput in = {dx.p, dnw.p, eps, 0, 1};  // pdl 0: the lab times one launch at a time
    const EmxCudaWeight *ws[1] = {&w.w};
    float *outs[1] = {dout.p};
    dout.upload(res);
    lab_version(&L, "fused (runtime)", w.bytes() + tail,
                [&] { return emx_cuda_matvec_fused(&in, ws, outs, 1, 1, L.stream); },
                [&] { return check(quant ? want.i : want.f, quant); });
    return lab_finish(&L);
}
