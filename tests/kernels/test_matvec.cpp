// test_matvec.cpp — kernels/matvec.cu against the CPU backend's dot products.
//
// References and tolerances:
//  - plain variant, and fast variant with f32/f16/bf16 weights: f32 activations times weights
//    dequantised by the CPU's emx_dequantize_row, summed in double. The kernels sum in f32 (in
//    another order), whose error is at most ~n * 2^-24 * sum|w_j x_j| (n <= 544 here: 3.2e-5);
//    tolerance 1e-4 * sum|w_j x_j|.
//  - fast_f32 (any weights): the same as plain.
//  - fast variant with q8/q4/q4_1 weights: the CPU's own integer scheme, emx_quantize_acts_scalar
//    + emx_dot_q*_scalar. The device quantiser must give the same int8 values (checked bit for
//    bit below), the group sums are integers (exact), so only the f32 accumulation order of the
//    scaled group sums differs: same bound, same tolerance.
//  - batched calls against B single calls: bitwise. Every multiply-add is an explicit fmaf, so
//    the one-row and batched instantiations do the same arithmetic per vector (emx_forward_multi
//    relies on it: a row's result must not depend on its batch).
// Sizes are not multiples of the block (4 rows / 128 threads) or of 256 columns: rows 37, 200,
// 577; cols 96, 288, 544 (the fast kernel's lanes then get 0, 1 or 2 chunks per row).
#include "dense_test_util.h"

#include "kernels/matvec.h"

struct Shape {
    int rows, cols;
};
static const Shape kShapes[] = {{37, 96}, {200, 288}, {577, 544}};

// Activations of a call: x on the device and its int8 form made by the device quantiser.
struct DevActs {
    DevBuf<float> x;
    DevBuf<int8_t> xq;
    DevBuf<float> xd;
    DevBuf<int> xsum;
    EmxCudaActs a;
    DevActs(const std::vector<float> &hx, int cols, int batch)
        : x(hx), xq((size_t)batch * cols), xd((size_t)batch * cols / 32), xsum((size_t)batch * cols / 32) {
        if (cols % 32 == 0) CUDA_OK(emx_cuda_quantize_acts(x.p, cols, batch, xq.p, xd.p, xsum.p, nullptr));
        a = EmxCudaActs{x.p, xq.p, xd.p, xsum.p};
    }
};

// The CPU's value of W[r] · x for this variant (see the header comment), and sum |w_j x_j|.
static double cpu_value(int variant, const TestWeight &tw, int r, const float *x, double *mag) {
    const double f = ref_dot(tw, r, x, mag);
    if (variant != EMX_MATVEC_FAST || !is_quantised(tw.dtype)) return f;
    const int n = tw.cols, G = n / 32;
    std::vector<int8_t> q(n);
    std::vector<float> d(G), s(G);
    emx_quantize_acts_scalar(x, n, q.data(), d.data(), s.data());
    switch (tw.dtype) {
    case EMX_Q8: return emx_dot_q8_scalar((const int8_t *)tw.quants(r), tw.scales(r), q.data(), d.data(), n);
    case EMX_Q4: return emx_dot_q4_scalar(tw.quants(r), tw.scales(r), q.data(), d.data(), s.data(), n);
    case EMX_Q4_1F:
        return emx_dot_q4_1f_scalar(tw.quants(r), tw.scales32(r), tw.mins32(r), q.data(), d.data(), s.data(), n);
    default: return emx_dot_q4_1_scalar(tw.quants(r), tw.scales(r), tw.mins(r), q.data(), d.data(), s.data(), n);
    }
}

// Runs one matvec of a random matrix and random activations and checks every output against the
// CPU. Returns the outputs [batch][rows].
static std::vector<float> check_matvec(int variant, uint32_t dtype, int rows, int cols, int batch, uint64_t seed) {
    TestWeight tw(dtype, rows, cols, seed);
    std::vector<float> hx = random_floats((size_t)batch * cols, seed + 7, -2.0f, 2.0f);
    DevActs acts(hx, cols, batch);
    DevBuf<float> out((size_t)batch * rows);
    CUDA_OK(emx_cuda_matvec(variant, &tw.w, &acts.a, batch, out.p, 0, nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<float> got = out.download();
    for (int b = 0; b < batch; b++)
        for (int r = 0; r < rows; r++) {
            double mag;
            const double want = cpu_value(variant, tw, r, hx.data() + (size_t)b * cols, &mag);
            const double g = got[(size_t)b * rows + r];
            cr_assert(fabs(g - want) <= 1e-4 * mag + 1e-12,
                      "%s %s %dx%d batch %d: out[%d][%d] = %.9g, CPU %.9g (sum|wx| %.3g)",
                      emx_matvec_variant_name(variant), emx_dtype_name(dtype), rows, cols, batch, b, r, g, want, mag);
        }
    return got;
}

Test(matvec, quantize_acts_match_cpu_bit_for_bit) {
    const int cols = 544, batch = 3, G = cols / 32;
    std::vector<float> hx = random_floats((size_t)batch * cols, 11, -3.0f, 3.0f);
    for (int j = 32; j < 64; j++) hx[j] = 0.0f;   // an all-zero group: d = 0, q = 0
    hx[70] = 100.0f;                              // one outlier dominates its group
    hx[96] = 127.0f;                              // d = 1 exactly: the others are ties x.5,
    for (int j = 97; j < 128; j++) hx[j] = (float)(j % 7 - 3) + 0.5f;  // rounded half to even
    DevActs acts(hx, cols, batch);
    std::vector<int8_t> q = acts.xq.download();
    std::vector<float> d = acts.xd.download();
    std::vector<int> xs = acts.xsum.download();
    std::vector<int8_t> cq(cols);
    std::vector<float> cd(G), cs(G);
    for (int b = 0; b < batch; b++) {
        emx_quantize_acts_scalar(hx.data() + (size_t)b * cols, cols, cq.data(), cd.data(), cs.data());
        for (int j = 0; j < cols; j++)
            cr_assert_eq(q[(size_t)b * cols + j], cq[j], "xq[%d][%d]: %d, CPU %d", b, j, q[(size_t)b * cols + j], cq[j]);
        for (int g = 0; g < G; g++) {
            const float dg = d[(size_t)b * G + g];
            cr_assert(memcmp(&dg, &cd[g], 4) == 0, "xd[%d][%d]: %.9g, CPU %.9g", b, g, dg, cd[g]);
            cr_assert_eq(dg * (float)xs[(size_t)b * G + g], cs[g], "xsum[%d][%d] * d differs from the CPU's s", b, g);
        }
    }
}

Test(matvec, plain_every_dtype_matches_cpu) {
    for (uint32_t dt : kAllDtypes)
        for (const Shape &s : kShapes) check_matvec(EMX_MATVEC_PLAIN, dt, s.rows, s.cols, 1, 100 + dt);
}

Test(matvec, fast_every_dtype_matches_cpu) {
    for (uint32_t dt : kAllDtypes)
        for (const Shape &s : kShapes) check_matvec(EMX_MATVEC_FAST, dt, s.rows, s.cols, 1, 200 + dt);
}

Test(matvec, fast_f32_every_dtype_matches_cpu) {
    for (uint32_t dt : kAllDtypes)
        for (const Shape &s : kShapes) check_matvec(EMX_MATVEC_FAST_F32, dt, s.rows, s.cols, 1, 250 + dt);
}

// A batch of B vectors gives what B single calls give, and both match the CPU.
Test(matvec, batched_equals_single_calls) {
    const int rows = 37, cols = 288;
    for (int variant = 0; variant < EMX_MATVEC_VARIANTS; variant++)
        for (uint32_t dt : kAllDtypes)
            for (int batch : {1, 3, 16}) {
                const uint64_t seed = 300 + dt * 7 + batch;
                std::vector<float> all = check_matvec(variant, dt, rows, cols, batch, seed);
                TestWeight tw(dt, rows, cols, seed);  // the same matrix and vectors again
                std::vector<float> hx = random_floats((size_t)batch * cols, seed + 7, -2.0f, 2.0f);
                for (int b = 0; b < batch; b++) {
                    std::vector<float> xb(hx.begin() + (size_t)b * cols, hx.begin() + (size_t)(b + 1) * cols);
                    DevActs acts(xb, cols, 1);
                    DevBuf<float> out((size_t)rows);
                    CUDA_OK(emx_cuda_matvec(variant, &tw.w, &acts.a, 1, out.p, 0, nullptr));
                    std::vector<float> one = out.download();
                    for (int r = 0; r < rows; r++) {
                        cr_assert(memcmp(&one[r], &all[(size_t)b * rows + r], sizeof(float)) == 0,
                                  "%s %s batch %d: row %d of vector %d: single %.9g, batched %.9g",
                                  emx_matvec_variant_name(variant), emx_dtype_name(dt), batch, r, b, one[r],
                                  all[(size_t)b * rows + r]);
                    }
                }
            }
}

// accumulate = 1 adds W x to what out holds (the residual stream).
Test(matvec, accumulate_adds_to_out) {
    const int rows = 45, cols = 96, batch = 2;
    for (int variant = 0; variant < EMX_MATVEC_VARIANTS; variant++) {
        TestWeight tw(EMX_Q4, rows, cols, 5);
        std::vector<float> hx = random_floats((size_t)batch * cols, 6);
        std::vector<float> base = random_floats((size_t)batch * rows, 7, -10.0f, 10.0f);
        DevActs acts(hx, cols, batch);
        DevBuf<float> fresh((size_t)batch * rows), summed(base);
        CUDA_OK(emx_cuda_matvec(variant, &tw.w, &acts.a, batch, fresh.p, 0, nullptr));
        CUDA_OK(emx_cuda_matvec(variant, &tw.w, &acts.a, batch, summed.p, 1, nullptr));
        std::vector<float> f = fresh.download(), s = summed.download();
        for (size_t i = 0; i < f.size(); i++)
            cr_assert_eq(s[i], base[i] + f[i], "%s: out[%zu] = %.9g, expected %.9g + %.9g",
                         emx_matvec_variant_name(variant), i, s[i], base[i], f[i]);
    }
}

Test(matvec, rejects_bad_arguments) {
    TestWeight tw(EMX_Q8, 8, 64, 1);
    std::vector<float> hx = random_floats(64 * 17, 2);
    DevActs acts(hx, 64, 17);
    DevBuf<float> out(8 * 17);
    cr_assert_eq(emx_cuda_matvec(EMX_MATVEC_FAST, &tw.w, &acts.a, 0, out.p, 0, nullptr), cudaErrorInvalidValue);
    cr_assert_eq(emx_cuda_matvec(EMX_MATVEC_FAST, &tw.w, &acts.a, 17, out.p, 0, nullptr), cudaErrorInvalidValue);
    cr_assert_eq(emx_cuda_matvec(7, &tw.w, &acts.a, 1, out.p, 0, nullptr), cudaErrorInvalidValue);
    EmxCudaActs no_int8 = {acts.x.p, nullptr, nullptr, nullptr};  // q8 needs the int8 form
    cr_assert_eq(emx_cuda_matvec(EMX_MATVEC_FAST, &tw.w, &no_int8, 1, out.p, 0, nullptr), cudaErrorInvalidValue);
    cr_assert_eq(emx_cuda_matvec(EMX_MATVEC_PLAIN, &tw.w, &no_int8, 1, out.p, 0, nullptr), cudaSuccess);
    cr_assert_eq(emx_cuda_matvec(EMX_MATVEC_FAST_F32, &tw.w, &no_int8, 1, out.p, 0, nullptr), cudaSuccess);
    EmxCudaActs int8_only = {nullptr, acts.xq.p, acts.xd.p, acts.xsum.p};  // fast_f32 reads x
    cr_assert_eq(emx_cuda_matvec(EMX_MATVEC_FAST_F32, &tw.w, &int8_only, 1, out.p, 0, nullptr), cudaErrorInvalidValue);
    EmxCudaActs shifted = {acts.x.p + 1, acts.xq.p + 1, acts.xd.p, acts.xsum.p};  // 16-byte loads need alignment
    cr_assert_eq(emx_cuda_matvec(EMX_MATVEC_FAST, &tw.w, &shifted, 1, out.p, 0, nullptr), cudaErrorInvalidValue);
    EmxCudaWeight odd = {EMX_F32, 8, 40, tw.w.data};  // fast needs cols % 32 == 0
    cr_assert_eq(emx_cuda_matvec(EMX_MATVEC_FAST, &odd, &acts.a, 1, out.p, 0, nullptr), cudaErrorInvalidValue);
    EmxCudaWeight bad_dtype = {99, 8, 64, tw.w.data};
    cr_assert_eq(emx_cuda_matvec(EMX_MATVEC_PLAIN, &bad_dtype, &acts.a, 1, out.p, 0, nullptr), cudaErrorInvalidValue);
    cr_assert_eq(emx_cuda_quantize_acts(acts.x.p, 40, 1, acts.xq.p, acts.xd.p, acts.xsum.p, nullptr),
                 cudaErrorInvalidValue);
}

// The plain variant takes any number of columns for float weights.
Test(matvec, plain_takes_any_cols_for_float_weights) {
    for (uint32_t dt : {EMX_F32, EMX_BF16}) check_matvec(EMX_MATVEC_PLAIN, dt, 33, 45, 2, 40 + dt);
}

Test(matvec, variant_names) {
    cr_assert_str_eq(emx_matvec_variant_name(EMX_MATVEC_PLAIN), "plain");
    cr_assert_str_eq(emx_matvec_variant_name(EMX_MATVEC_FAST), "fast");
    cr_assert_eq(emx_matvec_variant_from_name("fast"), EMX_MATVEC_FAST);
    cr_assert_eq(emx_matvec_variant_from_name("plain"), EMX_MATVEC_PLAIN);
    cr_assert_eq(emx_matvec_variant_from_name("fast_f32"), EMX_MATVEC_FAST_F32);
    cr_assert_eq(emx_matvec_variant_from_name("fastest"), -1);
    cr_assert_null(emx_matvec_variant_name(EMX_MATVEC_VARIANTS));
}

// A set (q, k, v in one launch) = each matrix alone, bit for bit: every dtype,
// batch 1 and 5, row counts that are not multiples of the block's 4 warps (a block straddles two
// matrices), and sets of 1, 2 and 3.
Test(matvec, set_equals_each_matrix_alone) {
    const int cols = 160, rows[3] = {38, 9, 21};
    for (int variant : {EMX_MATVEC_FAST})
        for (uint32_t dt : kAllDtypes)
            for (int batch : {1, 5})
                for (int n = 1; n <= 3; n++) {
                    const uint64_t seed = 900 + dt * 11 + batch + n;
                    TestWeight w0(dt, rows[0], cols, seed), w1(dt, rows[1], cols, seed + 1), w2(dt, rows[2], cols, seed + 2);
                    const EmxCudaWeight *ws[3] = {&w0.w, &w1.w, &w2.w};
                    DevActs acts(random_floats((size_t)batch * cols, seed + 3, -2.0f, 2.0f), cols, batch);
                    DevBuf<float> o0((size_t)batch * rows[0]), o1((size_t)batch * rows[1]), o2((size_t)batch * rows[2]);
                    float *outs[3] = {o0.p, o1.p, o2.p};
                    CUDA_OK(emx_cuda_matvec_set(variant, ws, outs, n, &acts.a, batch, nullptr));
                    const DevBuf<float> *got[3] = {&o0, &o1, &o2};
                    for (int i = 0; i < n; i++) {
                        DevBuf<float> alone((size_t)batch * rows[i]);
                        CUDA_OK(emx_cuda_matvec(variant, ws[i], &acts.a, batch, alone.p, 0, nullptr));
                        const std::vector<float> a = alone.download(), g = got[i]->download();
                        cr_assert(memcmp(a.data(), g.data(), a.size() * 4) == 0, "%s %s batch %d set of %d: matrix %d differs",
                                  emx_matvec_variant_name(variant), emx_dtype_name(dt), batch, n, i);
                    }
                }
}

Test(matvec, set_rejects_what_it_cannot_launch) {
    TestWeight a(EMX_Q8, 8, 64, 1), b(EMX_Q4, 8, 64, 2), c(EMX_Q8, 8, 96, 3);
    DevActs acts(random_floats(96, 4), 96, 1);
    DevBuf<float> o(8);
    float *outs[4] = {o.p, o.p, o.p, o.p};
    const EmxCudaWeight *mixed_dtype[2] = {&a.w, &b.w}, *mixed_cols[2] = {&a.w, &c.w}, *four[4] = {&a.w, &a.w, &a.w, &a.w};
    cr_assert_eq(emx_cuda_matvec_set(EMX_MATVEC_FAST, mixed_dtype, outs, 2, &acts.a, 1, nullptr), cudaErrorInvalidValue);
    cr_assert_eq(emx_cuda_matvec_set(EMX_MATVEC_FAST, mixed_cols, outs, 2, &acts.a, 1, nullptr), cudaErrorInvalidValue);
    cr_assert_eq(emx_cuda_matvec_set(EMX_MATVEC_FAST, four, outs, 4, &acts.a, 1, nullptr), cudaErrorInvalidValue);
    cr_assert_eq(emx_cuda_matvec_set(EMX_MATVEC_FAST, four, outs, 0, &acts.a, 1, nullptr), cudaErrorInvalidValue);
    cr_assert_eq(emx_cuda_matvec_set(EMX_MATVEC_PLAIN, four, outs, 1, &acts.a, 1, nullptr), cudaErrorInvalidValue);
    cr_assert_eq(emx_cuda_matvec_set(EMX_MATVEC_FAST_F32, four, outs, 1, &acts.a, 1, nullptr), cudaErrorInvalidValue);
    cr_assert_eq(emx_cuda_matvec_set(EMX_MATVEC_FAST, four, outs, 1, &acts.a, 0, nullptr), cudaErrorInvalidValue);
    float *no_out[1] = {nullptr};
    cr_assert_eq(emx_cuda_matvec_set(EMX_MATVEC_FAST, four, no_out, 1, &acts.a, 1, nullptr), cudaErrorInvalidValue);
}
