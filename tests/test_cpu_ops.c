// test_cpu_ops.c — every CPU kernel (scalar and SIMD) but attention against a naive
// double-precision reference on random inputs, including lengths that are not multiples of 8
// or 32 where the dtype allows them. Attention: test_cpu_attention.c.
//
// Tolerances: a float dot product of n terms, however it is ordered, is within
// n * FLT_EPSILON * sum|w x| of the exact sum (the classic bound for any summation order);
// the tests use that bound. q8/q4 kernels are compared exactly in integers against the
// reference on the quantised activations (q4_1: nibble*d + min), and against the unquantised activation within the
// rigorous bound sum_j |w_j| * d_x(j) / 2 (each activation is rounded to the nearest multiple
// of its group's scale).
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cpu/cpu_matmul.h"
#include "runtime/cpu/cpu_ops.h"
#include "base/dtype.h"
#include "test_rand_util.h"
#include "test_weights_util.h"


// Weight j of row r of a [rows, cols] tensor of any dtype, read from its bytes here (not with
// the runtime's dequantiser) so the test states the layout itself.
static double weight_at(uint32_t dtype, const void *data, int rows, int cols, int r, int j) {
    const uint8_t *b = data;
    size_t idx = (size_t)r * cols + j;
    switch (dtype) {
    case EMX_F32: return ((const float *)data)[idx];
    case EMX_BF16: return emx_bf16_to_f32(((const uint16_t *)data)[idx]);
    case EMX_F16: return emx_f16_to_f32(((const uint16_t *)data)[idx]);
    case EMX_Q8: {
        const uint16_t *d = (const uint16_t *)(b + (size_t)rows * cols);
        return (double)((const int8_t *)data)[idx] * emx_f16_to_f32(d[idx / 32]);
    }
    case EMX_Q4: {
        const uint16_t *d = (const uint16_t *)(b + (size_t)rows * cols / 2);
        size_t g = idx / 32, k = idx % 32;
        uint8_t byte = b[g * 16 + k % 16];
        int nib = k < 16 ? (byte & 0xf) : (byte >> 4);
        return (double)(nib - 8) * emx_f16_to_f32(d[g]);
    }
    case EMX_Q4_1: {  // nibbles as q4, then f16 d [rows][cols/32], then f16 m [rows][cols/32]
        const uint16_t *d = (const uint16_t *)(b + (size_t)rows * cols / 2), *m = d + (size_t)rows * cols / 32;
        size_t g = idx / 32, k = idx % 32;
        uint8_t byte = b[g * 16 + k % 16];
        int nib = k < 16 ? (byte & 0xf) : (byte >> 4);
        return (double)nib * emx_f16_to_f32(d[g]) + emx_f16_to_f32(m[g]);
    }
    case EMX_Q4_1F: {  // nibbles as q4, then f32 d [rows][cols/32], then f32 m [rows][cols/32]
        float d, m;
        size_t g = idx / 32, k = idx % 32, off = (size_t)rows * cols / 2;
        memcpy(&d, b + off + 4 * g, 4);
        memcpy(&m, b + off + 4 * ((size_t)rows * cols / 32 + g), 4);
        uint8_t byte = b[g * 16 + k % 16];
        int nib = k < 16 ? (byte & 0xf) : (byte >> 4);
        return (double)nib * d + m;
    }
    }
    return NAN;
}

// Random [rows, cols] tensor of the dtype in a fresh buffer.
static void *make_weights(uint32_t dtype, int rows, int cols) {
    size_t n = (size_t)rows * cols;
    float *w = malloc(n * sizeof(float));
    fill(w, (int)n, 0.5f);
    void *out = test_encode_weights(dtype, w, rows, cols, 64);
    free(w);
    return out;
}

Test(cpu_ops, simd_name) {
    const char *name = emx_cpu_simd_name();
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && defined(__AVX512VNNI__) && defined(__AVX512BW__) && \
    defined(__AVX512VL__) && defined(__AVX512DQ__)
    // + amx where this CPU's prefill tile runs on AMX (cpu_amx.c), which only such a build has
    cr_assert_str_eq(name, emx_amx_available() ? "avx2+vnni+avx512vnni+amx" : "avx2+vnni+avx512vnni");
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && (defined(__AVXVNNI__) || (defined(__AVX512VNNI__) && defined(__AVX512VL__)))
    cr_assert_str_eq(name, "avx2+vnni");
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
    cr_assert_str_eq(name, "avx2");
#else
    cr_assert_str_eq(name, "scalar");
#endif
    // the 4-row int8/int4 kernels are there wherever AVX2 is (AVX-512 VNNI or AVX2 forms)
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
    cr_assert_eq(emx_quad_kernels_available(), 1, "an AVX2 build has the 4-row kernels");
#else
    cr_assert_eq(emx_quad_kernels_available(), 0);
#endif
#if !(defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__))
    cr_assert_eq(emx_amx_available(), 0, "AMX is used only by the AVX-512 build");
#endif
}

Test(cpu_ops, quantize_acts) {
    const int n = 32 * 19;
    float *x = malloc(n * sizeof(float));
    fill(x, n, 3.0f);
    for (int j = 32; j < 64; j++) x[j] = 0;    // an all-zero group: scale 0, quants 0
    x[100] = 1e-30f;                           // tiny values must not overflow the scale
    int8_t q[32 * 19], qs[32 * 19];
    float d[19], ds[19], sm[19], sms[19];
    emx_quantize_acts(x, n, q, d, sm);
    emx_quantize_acts_scalar(x, n, qs, ds, sms);
    cr_assert(memcmp(q, qs, sizeof(q)) == 0, "SIMD and scalar quants differ");
    cr_assert(memcmp(d, ds, sizeof(d)) == 0, "SIMD and scalar scales differ");
    cr_assert(memcmp(sm, sms, sizeof(sm)) == 0, "SIMD and scalar group sums differ");
    for (int g = 0; g < 19; g++) {
        double amax = 0;
        for (int j = 0; j < 32; j++) amax = fmax(amax, fabs(x[g * 32 + j]));
        cr_assert_float_eq(d[g], amax / 127.0, amax * 1e-6 + 1e-38, "group %d scale", g);
        long sum = 0;
        for (int j = 0; j < 32; j++) sum += q[g * 32 + j];
        cr_assert_float_eq(sm[g], (double)d[g] * sum, fabs(d[g] * sum) * 1e-6 + 1e-38, "group %d sum", g);
        for (int j = 0; j < 32; j++) {
            double err = fabs(q[g * 32 + j] * (double)d[g] - x[g * 32 + j]);
            cr_assert(err <= d[g] * 0.5001 + 1e-38, "group %d elem %d: err %g > d/2 (%g)", g, j, err, d[g] / 2);
        }
    }
    cr_assert(d[1] == 0 && q[40] == 0);
    free(x);
}

typedef float (*dot_float_fn)(const void *w, const float *x, int n);
static float dot_f32_s(const void *w, const float *x, int n) { return emx_dot_f32_scalar(w, x, n); }
static float dot_f32_v(const void *w, const float *x, int n) { return emx_dot_f32(w, x, n); }
static float dot_bf16_s(const void *w, const float *x, int n) { return emx_dot_bf16_scalar(w, x, n); }
static float dot_bf16_v(const void *w, const float *x, int n) { return emx_dot_bf16(w, x, n); }
static float dot_f16_s(const void *w, const float *x, int n) { return emx_dot_f16_scalar(w, x, n); }
static float dot_f16_v(const void *w, const float *x, int n) { return emx_dot_f16(w, x, n); }

static void check_float_dots(uint32_t dtype, dot_float_fn scalar, dot_float_fn fast) {
    static const int sizes[] = {1, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 100, 257, 576, 1000};
    for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
        int n = sizes[si];
        void *w = make_weights(dtype, 1, n);
        float *x = malloc(n * sizeof(float));
        fill(x, n, 1.0f);
        double ref = 0, mag = 0;
        for (int j = 0; j < n; j++) {
            double t = weight_at(dtype, w, 1, n, 0, j) * x[j];
            ref += t;
            mag += fabs(t);
        }
        double tol = n * FLT_EPSILON * mag + 1e-30;
        float s = scalar(w, x, n), v = fast(w, x, n);
        cr_assert(fabs(s - ref) <= tol, "%s scalar n=%d: %.9g vs %.9g (tol %g)", emx_dtype_name(dtype), n, s, ref, tol);
        cr_assert(fabs(v - ref) <= tol, "%s simd n=%d: %.9g vs %.9g (tol %g)", emx_dtype_name(dtype), n, v, ref, tol);
        free(w);
        free(x);
    }
}

Test(cpu_ops, dot_f32) { check_float_dots(EMX_F32, dot_f32_s, dot_f32_v); }
Test(cpu_ops, dot_bf16) { check_float_dots(EMX_BF16, dot_bf16_s, dot_bf16_v); }
Test(cpu_ops, dot_f16) { check_float_dots(EMX_F16, dot_f16_s, dot_f16_v); }

static void check_quant_dots(uint32_t dtype) {
    static const int sizes[] = {32, 64, 96, 160, 576, 1024};
    for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
        int n = sizes[si], ng = n / 32;
        const int rows = 3;  // test the last row: exercises the scales' row offset
        uint8_t *w = make_weights(dtype, rows, n);
        float *x = malloc(n * sizeof(float));
        int8_t *xq = malloc(n);
        float *xd = malloc(ng * sizeof(float)), *xs = malloc(ng * sizeof(float));
        fill(x, n, 2.0f);
        emx_quantize_acts_scalar(x, n, xq, xd, xs);
        const uint16_t *scales = (const uint16_t *)(w + (dtype == EMX_Q8 ? rows * n : rows * n / 2)) + (rows - 1) * ng;
        const uint16_t *mins = scales + rows * ng;  // q4_1 only
        const float *scales32 = (const float *)(const void *)(w + rows * n / 2) + (rows - 1) * ng;  // q4_1f only
        if (dtype == EMX_Q4_1F) scales = (const uint16_t *)(const void *)scales32, mins = (const uint16_t *)(const void *)(scales32 + rows * ng);
        // exact integer sums per group on the quantised activation, then the scales in double
        double ref_q = 0, mag = 0, ref_x = 0, bound = 0;
        for (int j = 0; j < n; j++) {
            double wj = weight_at(dtype, w, rows, n, rows - 1, j);
            ref_q += wj * xq[j] * (double)xd[j / 32];
            // q4's SIMD kernel sums nib * x and 8 * x separately: its rounding scales with both
            // (q4_1's likewise nib * d * x and m * x)
            double wmag = dtype == EMX_Q4      ? fabs(wj) + 8 * fabs(emx_f16_to_f32(scales[j / 32]))
                          : dtype == EMX_Q4_1  ? fabs(wj) + 2 * fabs(emx_f16_to_f32(mins[j / 32]))
                          : dtype == EMX_Q4_1F ? fabs(wj) + 2 * fabs(((const float *)(const void *)mins)[j / 32])
                                               : fabs(wj);
            mag += wmag * fabs(xq[j] * (double)xd[j / 32]);
            ref_x += wj * x[j];
            bound += fabs(wj) * xd[j / 32] * 0.5;
        }
        float s, v;
        if (dtype == EMX_Q8) {
            const int8_t *row = (const int8_t *)w + (rows - 1) * n;
            s = emx_dot_q8_scalar(row, scales, xq, xd, n);
            v = emx_dot_q8(row, scales, xq, xd, n);
        } else if (dtype == EMX_Q4) {
            const uint8_t *row = w + (rows - 1) * n / 2;
            s = emx_dot_q4_scalar(row, scales, xq, xd, xs, n);
            v = emx_dot_q4(row, scales, xq, xd, xs, n);
        } else if (dtype == EMX_Q4_1) {
            const uint8_t *row = w + (rows - 1) * n / 2;
            s = emx_dot_q4_1_scalar(row, scales, mins, xq, xd, xs, n);
            v = emx_dot_q4_1(row, scales, mins, xq, xd, xs, n);
        } else {
            const uint8_t *row = w + (rows - 1) * n / 2;
            const float *d32 = (const float *)(const void *)scales, *m32 = (const float *)(const void *)mins;
            s = emx_dot_q4_1f_scalar(row, d32, m32, xq, xd, xs, n);
            v = emx_dot_q4_1f(row, d32, m32, xq, xd, xs, n);
        }
        // the per-group products are exact integers: only the ng scaled terms round
        double tol = (ng + 2) * FLT_EPSILON * mag + 1e-30;
        cr_assert(fabs(s - ref_q) <= tol, "%s scalar n=%d: %.9g vs %.9g", emx_dtype_name(dtype), n, s, ref_q);
        cr_assert(fabs(v - ref_q) <= tol, "%s simd n=%d: %.9g vs %.9g", emx_dtype_name(dtype), n, v, ref_q);
        // one order (cpu_qdot.c) for every kernel: the SIMD dot is the scalar one, bitwise
        cr_assert(memcmp(&s, &v, sizeof s) == 0, "%s n=%d: simd %.9g, scalar %.9g", emx_dtype_name(dtype), n, v, s);
        cr_assert(fabs(v - ref_x) <= bound + tol, "%s n=%d vs unquantised x: %.9g vs %.9g (bound %g)",
                  emx_dtype_name(dtype), n, v, ref_x, bound);
        free(w);
        free(x);
        free(xq);
        free(xd);
        free(xs);
    }
}

Test(cpu_ops, dot_q8) { check_quant_dots(EMX_Q8); }

// The 4-row decode kernel (four weight rows, one activation row) agrees with the scalar dot of
// each row (same integer sums; only the float order of the scaled terms differs). That it and
// the prefill tile equal the SIMD single-row dots bitwise is test_batch_invariance.c's.
Test(cpu_ops, dot4x1_q8_q4_q4_1_q4_1f) {
    // ng = 1, 3, 7 (a tail of 3 after a whole block: its scales from the block before), 8, 10, 18
    static const int sizes[] = {32, 96, 224, 256, 320, 576};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        const int n = sizes[si], ng = n / 32;
        float x[576], xd[18], xs[18], o4[4];
        int8_t xq[576];
        int32_t xl[576 / 8];
        fill(x, n, 1.5f);
        emx_quantize_acts(x, n, xq, xd, xs);
        emx_act_lane_sums(xq, n, xl);
        for (uint32_t dt = EMX_Q8; dt <= EMX_Q4_1F; dt++) {
            uint8_t *w = make_weights(dt, 4, n);
            const uint16_t *wd = (const uint16_t *)(w + (dt == EMX_Q8 ? 4 * n : 2 * n)), *wm = wd + 4 * ng;
            const float *wd32 = (const float *)(const void *)wd, *wm32 = wd32 + 4 * ng;  // q4_1f: f32 scales, mins
            if (dt == EMX_Q4_1) emx_dot4x1_q4_1(w, wd, wm, xq, xl, xd, xs, n, o4);
            else if (dt == EMX_Q4_1F) emx_dot4x1_q4_1f(w, wd32, wm32, xq, xl, xd, xs, n, o4);
            else if (dt == EMX_Q8) emx_dot4x1_q8((const int8_t *)w, wd, xq, xl, xd, n, o4);
            else emx_dot4x1_q4(w, wd, xq, xl, xd, xs, n, o4);
            for (int k = 0; k < 4; k++) {
                const uint8_t *wk = w + (size_t)k * (dt == EMX_Q8 ? n : n / 2);
                const uint16_t *wdk = wd + k * ng, *wmk = wm + k * ng;
                const float ref = dt == EMX_Q8     ? emx_dot_q8_scalar((const int8_t *)wk, wdk, xq, xd, n)
                                  : dt == EMX_Q4   ? emx_dot_q4_scalar(wk, wdk, xq, xd, xs, n)
                                  : dt == EMX_Q4_1 ? emx_dot_q4_1_scalar(wk, wdk, wmk, xq, xd, xs, n)
                                                   : emx_dot_q4_1f_scalar(wk, wd32 + k * ng, wm32 + k * ng, xq, xd, xs, n);
                double mag = 0, ref_q = 0;  // sum |w| |x| with q4's +8 offset counted (see check_quant_dots)
                for (int j = 0; j < n; j++) {
                    const double wj = weight_at(dt, w, 4, n, k, j), min = dt == EMX_Q4_1    ? emx_f16_to_f32(wmk[j / 32])
                                                                          : dt == EMX_Q4_1F ? wm32[k * ng + j / 32]
                                                                                            : 0;
                    mag += (fabs(wj) + (dt == EMX_Q4 ? 8 * fabs(emx_f16_to_f32(wdk[j / 32])) : 0) + 2 * fabs(min)) *
                           fabs(xq[j] * (double)xd[j / 32]);
                    ref_q += wj * xq[j] * (double)xd[j / 32];  // the dequantised weights in double
                }
                double tol = 2 * (ng + 2) * FLT_EPSILON * mag + 1e-30;
                cr_assert(fabs(o4[k] - ref) <= tol, "%s dot4x1 n=%d weight row %d: %.9g vs %.9g", emx_dtype_name(dt), n, k,
                          o4[k], ref);
                cr_assert(fabs(o4[k] - ref_q) <= tol, "%s dot4x1 n=%d weight row %d: %.9g vs the f32 weights' %.9g",
                          emx_dtype_name(dt), n, k, o4[k], ref_q);
                cr_assert(memcmp(&o4[k], &ref, sizeof ref) == 0, "%s dot4x1 n=%d weight row %d: %.9g, scalar %.9g (bitwise)",
                          emx_dtype_name(dt), n, k, o4[k], ref);
            }
            free(w);
        }
    }
}
Test(cpu_ops, dot_q4) { check_quant_dots(EMX_Q4); }
Test(cpu_ops, dot_q4_1) { check_quant_dots(EMX_Q4_1); }
Test(cpu_ops, dot_q4_1f) { check_quant_dots(EMX_Q4_1F); }

// The threaded matmul, every dtype, batches of 1, 5 and 6 activation rows, odd row counts.
static void check_matmul(uint32_t dtype, int rows, int cols, int n, int threads) {
    void *w = make_weights(dtype, rows, cols);
    float *x = malloc((size_t)n * cols * sizeof(float));
    int8_t *xq = malloc((size_t)n * cols);
    float *xd = malloc((size_t)n * (cols / 32 + 1) * sizeof(float));
    float *xs = malloc((size_t)n * (cols / 32 + 1) * sizeof(float));
    float *out = malloc((size_t)n * rows * sizeof(float));
    fill(x, n * cols, 1.0f);
    int quant = emx_dtype_wants_q8_acts(dtype);
    if (quant)
        for (int i = 0; i < n; i++)
            emx_quantize_acts(x + i * cols, cols, xq + i * cols, xd + i * (cols / 32), xs + i * (cols / 32));
    EmxActs a = {.x = x, .xq = quant ? xq : NULL, .xd = quant ? xd : NULL, .xs = quant ? xs : NULL, .n = n};
    EmxTensor t = {.dtype = dtype, .rows = rows, .cols = cols, .data = w};
    emx_matmul(out, &t, &a, threads);
    for (int i = 0; i < n; i++) {
        for (int r = 0; r < rows; r++) {
            double ref = 0, mag = 0;
            for (int j = 0; j < cols; j++) {
                double xj = quant ? xq[i * cols + j] * (double)xd[i * (cols / 32) + j / 32] : x[i * cols + j];
                double t2 = weight_at(dtype, w, rows, cols, r, j) * xj;
                ref += t2;
                mag += fabs(t2);
            }
            double tol = cols * FLT_EPSILON * mag + 1e-30;
            float got = out[(size_t)i * rows + r];
            cr_assert(fabs(got - ref) <= tol, "%s matmul [%d x %d] row %d act %d: %.9g vs %.9g", emx_dtype_name(dtype),
                      rows, cols, r, i, got, ref);
        }
    }
    free(w);
    free(x);
    free(xq);
    free(xd);
    free(xs);
    free(out);
}

Test(cpu_ops, matmul_all_dtypes) {
    for (uint32_t dt = 0; dt < EMX_DTYPE_COUNT; dt++) {
        int cols = emx_dtype_wants_q8_acts(dt) ? 96 : 75;
        check_matmul(dt, 37, cols, 5, 2);   // threaded: 37*96*5 exceeds the parallel threshold
        check_matmul(dt, 3, cols, 1, 2);    // small: runs on one thread
        check_matmul(dt, 301, 256, 1, 2);   // decode shape
        check_matmul(dt, 19, 320, 6, 2);    // prefill: q8/q4 rows 0-3 by 4 (blocks of 8 groups + 2), rows 4-5 one by one
    }
}

Test(cpu_ops, rmsnorm) {
    const int sizes[] = {1, 8, 64, 77, 576};
    for (size_t si = 0; si < 5; si++) {
        int n = sizes[si];
        float *x = malloc(n * 4), *w = malloc(n * 4), *out = malloc(n * 4);
        fill(x, n, 3.0f);
        for (int i = 0; i < n; i++) w[i] = 1.0f + 0.1f * nrand();
        double ss = 0;
        for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
        double inv = 1.0 / sqrt(ss / n + 1e-5);
        emx_rmsnorm(out, x, w, n, 1e-5f);
        for (int i = 0; i < n; i++) {
            double ref = x[i] * inv * w[i];
            cr_assert(fabs(out[i] - ref) <= 4 * FLT_EPSILON * fabs(ref) + 1e-30, "n=%d i=%d: %.9g vs %.9g", n, i, out[i], ref);
        }
        emx_rmsnorm(x, x, w, n, 1e-5f);  // in place
        cr_assert(memcmp(x, out, n * 4) == 0);
        free(x);
        free(w);
        free(out);
    }
}

// RoPE: rotate with the op, compare with an explicit double computation of the pairing.
static void check_rope(int style, const float *factors) {
    const int hd = 16, half = 8, heads = 3, pos = 4321;
    const double theta = 500000.0;
    double inv[8];
    float c[8], s[8], v[48], orig[48];
    emx_rope_inv_freq(inv, hd, theta, factors);
    emx_rope_angles(c, s, inv, half, pos);
    fill(v, 48, 1.0f);
    memcpy(orig, v, sizeof(v));
    emx_rope(v, heads, hd, style, c, s);
    for (int h = 0; h < heads; h++) {
        for (int i = 0; i < half; i++) {
            double f = pow(theta, -2.0 * i / hd) / (factors ? factors[i] : 1.0);
            double a = pos * f;
            int ia = style == EMX_ROPE_INTERLEAVED ? 2 * i : i;
            int ib = style == EMX_ROPE_INTERLEAVED ? 2 * i + 1 : i + half;
            double x0 = orig[h * hd + ia], x1 = orig[h * hd + ib];
            double r0 = x0 * cos(a) - x1 * sin(a), r1 = x0 * sin(a) + x1 * cos(a);
            double tol = 4 * FLT_EPSILON * (fabs(x0) + fabs(x1));
            cr_assert(fabs(v[h * hd + ia] - r0) <= tol, "style %d head %d pair %d: %.9g vs %.9g", style, h, i, v[h * hd + ia], r0);
            cr_assert(fabs(v[h * hd + ib] - r1) <= tol, "style %d head %d pair %d: %.9g vs %.9g", style, h, i, v[h * hd + ib], r1);
        }
    }
}

Test(cpu_ops, rope) {
    static const float factors[8] = {1, 1, 1, 1, 3.2922626f, 32, 32, 32};
    check_rope(EMX_ROPE_INTERLEAVED, NULL);
    check_rope(EMX_ROPE_HALF, NULL);
    check_rope(EMX_ROPE_HALF, factors);
    check_rope(EMX_ROPE_INTERLEAVED, factors);
}

Test(cpu_ops, softmax_and_swiglu) {
    float x[37], g[37], u[37], g0[37];
    fill(x, 37, 10.0f);
    double mx = -1e300, sum = 0, ref[37];
    for (int i = 0; i < 37; i++) mx = fmax(mx, x[i]);
    for (int i = 0; i < 37; i++) sum += (ref[i] = exp(x[i] - mx));
    emx_softmax(x, 37);
    for (int i = 0; i < 37; i++) cr_assert(fabs(x[i] - ref[i] / sum) <= 1e-6 * (ref[i] / sum) + 1e-12, "softmax %d", i);
    fill(g, 37, 4.0f);
    fill(u, 37, 1.0f);
    memcpy(g0, g, sizeof(g));
    emx_swiglu(g, u, 37);
    for (int i = 0; i < 37; i++) {
        double r = g0[i] / (1.0 + exp(-(double)g0[i])) * u[i];
        cr_assert(fabs(g[i] - r) <= 1e-6 * fabs(r) + 1e-12, "swiglu %d: %.9g vs %.9g", i, g[i], r);
    }
}
