// tools/lab/matvec.cu — weight matrix x activation vector(s), the decode step's matmuls
// (kernels/matvec_naive.cu, kernels/matvec.cu), against the CPU, each version one idea more:
// naive (a thread per row over the dequantised f32 weights), plain (the same mapping, the weights
// read as stored and dequantised in the loop), fast_f32 (a warp per row, 16-byte loads, weights
// dequantised in registers), fast (the same loads, int8 activations and __dp4a for quantised
// weights: what the runtime uses). `make lab K=matvec`.
// References: naive, plain and fast_f32 against the dequantised weights times the f32 activations in
// double; fast with q8/q4/q4_1 against the CPU's own integer scheme (emx_quantize_acts_scalar +
// emx_dot_q*_scalar), which it reproduces up to the f32 order of the group sums.
#include "tools/lab/lab_weight.h"

#include "kernels/matvec.h"
#include "kernels/naive.h"

int main(int argc, char **argv) {
    Lab L;
    lab_init(&L, "matvec", argc, argv, "--rows --cols --batch --dtype",
             "out[b][r] = W[r] . x[b], W [rows][cols] of --dtype, b < batch");
    // SmolLM2-135M's gate projection (1536 x 576), q8, one sequence
    const int rows = lab_int(&L, "--rows", 1536, 1, 1 << 20), cols = lab_int(&L, "--cols", 576, 32, 1 << 16);
    const int batch = lab_int(&L, "--batch", 1, 1, EMX_MATVEC_MAX_BATCH);
    const uint32_t dtype = lab_dtype_int_dot(&L, "q8");
    const bool quant = dtype == EMX_Q8 || dtype == EMX_Q4 || dtype == EMX_Q4_1;
    if (cols % 32) {
        fprintf(stderr, "lab matvec: --cols %d: the fast variants need a multiple of 32\n", cols);
        exit(2);
    }
    LabWeight w(dtype, rows, cols, 21);
    std::vector<float> x = lab_random((size_t)batch * cols, 22, -2.0f, 2.0f);
    // references: f = dequantised weights . f32 x in double, i = the CPU's integer scheme
    std::vector<double> want_f((size_t)batch * rows), want_i((size_t)batch * rows), mag((size_t)batch * rows);
    std::vector<int8_t> q(cols);
    std::vector<float> wf((size_t)rows * cols);  // the naive version's f32 copy of W
    std::vector<float> d(cols / 32), s(cols / 32);
    for (int r = 0; r < rows; r++) {
        const std::vector<float> wr = w.row(r);
        std::copy(wr.begin(), wr.end(), wf.begin() + (size_t)r * cols);
        for (int b = 0; b < batch; b++) {
            const float *xb = &x[(size_t)b * cols];
            double acc = 0, m = 0;
            for (int c = 0; c < cols; c++) {
                acc += (double)wr[c] * xb[c];
                m += fabs((double)wr[c] * xb[c]);
            }
            want_f[(size_t)b * rows + r] = acc;
            mag[(size_t)b * rows + r] = m;
        }
    }
    for (int b = 0; b < batch && quant; b++) {
        emx_quantize_acts_scalar(&x[(size_t)b * cols], cols, q.data(), d.data(), s.data());
        for (int r = 0; r < rows; r++) want_i[(size_t)b * rows + r] = w.int_dot(r, q.data(), d.data(), s.data());
    }
    LabBuf<float> dwf(wf), dx(x), dout((size_t)batch * rows), xd((size_t)batch * cols / 32);
    LabBuf<int8_t> xq((size_t)batch * cols);
    LabBuf<int> xsum((size_t)batch * cols / 32);
    LAB_CHECK(emx_cuda_quantize_acts(dx.p, cols, batch, xq.p, xd.p, xsum.p, L.stream));
    const EmxCudaActs acts = {dx.p, xq.p, xd.p, xsum.p};

    char shape[96];
    snprintf(shape, sizeof shape, "%s %d x %d, batch %d (--dtype --rows --cols --batch)", emx_dtype_name(dtype), rows,
             cols, batch);
    // f32 sums in another order: at most ~cols * 2^-24 * sum|w x| (tests/kernels/test_matvec.cpp)
    lab_header(&L, shape, "|gpu - cpu| <= 1e-4 * sum_c |W[r][c] x[c]| (f32 accumulation order)");
    // weights once, activations once (f32 or int8 + scales), outputs once
    const double bytes_f = w.bytes() + (double)batch * cols * 4 + (double)batch * rows * 4;
    const double bytes_i = w.bytes() + (double)batch * cols * (1 + 8.0 / 32) + (double)batch * rows * 4;
    auto check_f = [&] { return lab_compare_scaled(dout.get(), want_f, mag, 1e-4); };
    lab_version(&L, "naive (thread/row, f32)", (double)rows * cols * 4 + (double)batch * (cols + rows) * 4, [&] {
        for (int b = 0; b < batch; b++) {  // one vector per launch
            const cudaError_t e = emx_cuda_matvec_naive(dwf.p, dx.p + (size_t)b * cols, dout.p + (size_t)b * rows, rows, cols, L.stream);
            if (e != cudaSuccess) return e;
        }
        return cudaSuccess;
    }, check_f);
    const struct { int variant; const char *name; } versions[] = {
        {EMX_MATVEC_PLAIN, "plain (thread/row)"}, {EMX_MATVEC_FAST_F32, "fast_f32 (warp/row)"},
        {EMX_MATVEC_FAST, "fast (runtime)"}};
    for (const auto &v : versions) {
        const bool int8 = v.variant == EMX_MATVEC_FAST && quant;
        LAB_CHECK(cudaMemset(dout.p, 0, dout.n * 4));
        lab_version(&L, v.name, int8 ? bytes_i : bytes_f,
                    [&] { return emx_cuda_matvec(v.variant, &w.w, &acts, batch, dout.p, 0, L.stream); },
                    [&] { return lab_compare_scaled(dout.get(), int8 ? want_i : want_f, mag, 1e-4); });
    }
    return lab_finish(&L);
}
