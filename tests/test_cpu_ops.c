// test_cpu_ops.c — every CPU kernel (scalar and SIMD) against a naive double-precision
// reference on random inputs, including lengths that are not multiples of 8 or 32 where the
// dtype allows them.
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
#include "test_weights_util.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double urand(void) {  // xorshift64*, uniform in [0, 1)
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 0x2545f4914f6cdd1dull) >> 11) / 9007199254740992.0;
}
static float nrand(void) {  // roughly normal: sum of 4 uniforms, centred, unit variance
    return (float)((urand() + urand() + urand() + urand() - 2.0) * 1.7320508);
}
static void fill(float *x, int n, float scale) {
    for (int i = 0; i < n; i++) x[i] = nrand() * scale;
}

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
    cr_assert_str_eq(name, "avx2+vnni+avx512vnni");
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && (defined(__AVXVNNI__) || (defined(__AVX512VNNI__) && defined(__AVX512VL__)))
    cr_assert_str_eq(name, "avx2+vnni");
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
    cr_assert_str_eq(name, "avx2");
#else
    cr_assert_str_eq(name, "scalar");
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
        // exact integer sums per group on the quantised activation, then the scales in double
        double ref_q = 0, mag = 0, ref_x = 0, bound = 0;
        for (int j = 0; j < n; j++) {
            double wj = weight_at(dtype, w, rows, n, rows - 1, j);
            ref_q += wj * xq[j] * (double)xd[j / 32];
            // q4's SIMD kernel sums nib * x and 8 * x separately: its rounding scales with both
            // (q4_1's likewise nib * d * x and m * x)
            double wmag = dtype == EMX_Q4     ? fabs(wj) + 8 * fabs(emx_f16_to_f32(scales[j / 32]))
                          : dtype == EMX_Q4_1 ? fabs(wj) + 2 * fabs(emx_f16_to_f32(mins[j / 32]))
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
        } else {
            const uint8_t *row = w + (rows - 1) * n / 2;
            s = emx_dot_q4_1_scalar(row, scales, mins, xq, xd, xs, n);
            v = emx_dot_q4_1(row, scales, mins, xq, xd, xs, n);
        }
        // the per-group products are exact integers: only the ng scaled terms round
        double tol = (ng + 2) * FLT_EPSILON * mag + 1e-30;
        cr_assert(fabs(s - ref_q) <= tol, "%s scalar n=%d: %.9g vs %.9g", emx_dtype_name(dtype), n, s, ref_q);
        cr_assert(fabs(v - ref_q) <= tol, "%s simd n=%d: %.9g vs %.9g", emx_dtype_name(dtype), n, v, ref_q);
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
Test(cpu_ops, dot4x1_q8_q4_q4_1) {
    static const int sizes[] = {32, 96, 256, 320, 576};
    for (size_t si = 0; si < 5; si++) {
        const int n = sizes[si], ng = n / 32;
        float x[576], xd[18], xs[18], o4[4];
        int8_t xq[576];
        int32_t xl[576 / 8];
        fill(x, n, 1.5f);
        emx_quantize_acts(x, n, xq, xd, xs);
        emx_act_lane_sums(xq, n, xl);
        for (uint32_t dt = EMX_Q8; dt <= EMX_Q4_1; dt++) {
            uint8_t *w = make_weights(dt, 4, n);
            const uint16_t *wd = (const uint16_t *)(w + (dt == EMX_Q8 ? 4 * n : 2 * n)), *wm = wd + 4 * ng;
            if (dt == EMX_Q4_1) emx_dot4x1_q4_1(w, wd, wm, xq, xl, xd, xs, n, o4);
            else if (dt == EMX_Q8) emx_dot4x1_q8((const int8_t *)w, wd, xq, xl, xd, n, o4);
            else emx_dot4x1_q4(w, wd, xq, xl, xd, xs, n, o4);
            for (int k = 0; k < 4; k++) {
                const uint8_t *wk = w + (size_t)k * (dt == EMX_Q8 ? n : n / 2);
                const uint16_t *wdk = wd + k * ng, *wmk = wm + k * ng;
                const float ref = dt == EMX_Q8   ? emx_dot_q8_scalar((const int8_t *)wk, wdk, xq, xd, n)
                                  : dt == EMX_Q4 ? emx_dot_q4_scalar(wk, wdk, xq, xd, xs, n)
                                                 : emx_dot_q4_1_scalar(wk, wdk, wmk, xq, xd, xs, n);
                double mag = 0;  // sum |w| |x| with q4's +8 offset counted (see check_quant_dots)
                for (int j = 0; j < n; j++)
                    mag += (fabs(weight_at(dt, w, 4, n, k, j)) + (dt == EMX_Q4 ? 8 * fabs(emx_f16_to_f32(wdk[j / 32])) : 0) +
                            (dt == EMX_Q4_1 ? 2 * fabs(emx_f16_to_f32(wmk[j / 32])) : 0)) *
                           fabs(xq[j] * (double)xd[j / 32]);
                double tol = 2 * (ng + 2) * FLT_EPSILON * mag + 1e-30;
                cr_assert(fabs(o4[k] - ref) <= tol, "%s dot4x1 n=%d weight row %d: %.9g vs %.9g", emx_dtype_name(dt), n, k,
                          o4[k], ref);
            }
            free(w);
        }
    }
}
Test(cpu_ops, dot_q4) { check_quant_dots(EMX_Q4); }
Test(cpu_ops, dot_q4_1) { check_quant_dots(EMX_Q4_1); }

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

Test(cpu_ops, attention_head) {
    const int hd = 24, n_keys = 13, stride = 3 * hd;  // this head's slice inside wider cache rows
    float q[24], k[13 * 72], v[13 * 72], out[24], scores[13], probs[13];
    fill(q, hd, 1.0f);
    fill(k, n_keys * stride, 1.0f);
    fill(v, n_keys * stride, 1.0f);
    const float *kh = k + hd, *vh = v + hd;  // head 1
    const float scale = 1.0f / sqrtf((float)hd);
    emx_attention_head(out, q, kh, vh, stride, n_keys, hd, scale, scores, probs);
    double s[13], mx = -1e300, sum = 0;
    for (int t = 0; t < n_keys; t++) {
        s[t] = 0;
        for (int d = 0; d < hd; d++) s[t] += (double)q[d] * kh[t * stride + d];
        s[t] /= sqrt((double)hd);
        mx = fmax(mx, s[t]);
        cr_assert(fabs(scores[t] - s[t]) <= 1e-5 * (1 + fabs(s[t])), "score %d: %.9g vs %.9g", t, scores[t], s[t]);
    }
    for (int t = 0; t < n_keys; t++) sum += exp(s[t] - mx);
    for (int d = 0; d < hd; d++) {
        double r = 0;
        for (int t = 0; t < n_keys; t++) r += exp(s[t] - mx) / sum * vh[t * stride + d];
        cr_assert(fabs(out[d] - r) <= 1e-5, "out %d: %.9g vs %.9g", d, out[d], r);
    }
    for (int t = 0; t < n_keys; t++) cr_assert(fabs(probs[t] - exp(s[t] - mx) / sum) <= 1e-6);
    // in place (probs == scores) gives the same output
    float out2[24];
    emx_attention_head(out2, q, kh, vh, stride, n_keys, hd, scale, scores, scores);
    cr_assert(memcmp(out, out2, sizeof(out)) == 0);
}

// --- Attention: the default (AVX-512F where targeted) and the plain twin against double ---
//
// Tolerances, for N(0,1) q, k, v with the keys of head 1 inside wider cache rows:
//   score: each key's q·k is, lane by lane, an FMA chain over ceil(hd/16) chunks, then a 4-level
//     add tree across the 16 lanes, then one multiply by scale (the plain twin: emx_dot_f32's
//     chains and sum, no deeper): the classic summation bound with depth ceil(hd/16) + 5 (hd + 2
//     for the twin, whose dot may be sequential),
//     |Δs| <= depth * FLT_EPSILON * scale * Σ_d |q_d k_d|.
//   probs: a softmax moves by at most 2 max|Δs| relative when its inputs move by Δs; then s - max
//     (half an ulp of |s - max|), the exp (2 ulp), the sum of n positive terms in 16 lanes and
//     a 4-level tree (n/16 + 4 ulp), 1/sum and the product (1 ulp): relative
//     2 max|Δs| + (|s - max| + n + 8) * FLT_EPSILON (n, not n/16: the twin sums sequentially).
//   out[d]: the probability errors weigh Σ_t p_t |v_t[d]|, and the accumulation of n products
//     in at most two chains plus their sum adds (n + 2) * FLT_EPSILON of the same weight.
// A wrong lane of the transposing tree, a key dropped or read twice, a wrong mask at the end of
// a block or of head_dim changes a score by O(1), far outside these bounds.
typedef void (*attention_fn)(float *out, const float *q, const EmxKeySpan *spans, int n_spans, int head_dim,
                             float scale, float *scores, float *probs);

// shift: every key gets shift * q added, moving all scores by about shift * |q|² * scale (-20:
// all scores near -160, where e^score underflows: the max must come from real keys only).
static void check_attention_vs_double(attention_fn attend, int hd, int n_keys, int twin, float shift) {
    const int stride = 3 * hd;  // this head's slice (head 1) inside rows of three kv heads
    float *k = malloc(sizeof(float) * n_keys * stride), *v = malloc(sizeof(float) * n_keys * stride);
    // q and out with 16 floats past head_dim: NaN in q's (a lane read past head_dim poisons the
    // scores), a sentinel in out's (a lane written past head_dim is seen)
    float *q = malloc(sizeof(float) * (hd + 16)), *out = malloc(sizeof(float) * (hd + 16));
    float *scores = malloc(sizeof(float) * n_keys), *probs = malloc(sizeof(float) * n_keys);
    double *s = malloc(sizeof(double) * n_keys), *ds = malloc(sizeof(double) * n_keys);
    cr_assert(k && v && q && out && scores && probs && s && ds);
    fill(q, hd, 1.0f);
    for (int d = hd; d < hd + 16; d++) q[d] = NAN, out[d] = 12345.0f;
    fill(k, n_keys * stride, 1.0f);
    fill(v, n_keys * stride, 1.0f);
    for (int t = 0; t < n_keys; t++)
        for (int d = 0; d < hd; d++) k[(size_t)t * stride + hd + d] += shift * q[d];
    const float *kh = k + hd, *vh = v + hd;
    const float scale = 1.0f / sqrtf((float)hd);
    const EmxKeySpan all = {kh, vh, (size_t)stride, n_keys};
    attend(out, q, &all, 1, hd, scale, scores, probs);

    const int depth = twin ? hd + 2 : (hd + 15) / 16 + 5;
    double mx = -1e300, max_ds = 0, sum = 0;
    for (int t = 0; t < n_keys; t++) {
        double abs_sum = 0;
        s[t] = 0;
        for (int d = 0; d < hd; d++) {
            s[t] += (double)q[d] * kh[(size_t)t * stride + d];
            abs_sum += fabs((double)q[d] * kh[(size_t)t * stride + d]);
        }
        s[t] *= scale;
        ds[t] = depth * FLT_EPSILON * scale * abs_sum;
        max_ds = fmax(max_ds, ds[t]);
        mx = fmax(mx, s[t]);
        cr_assert(fabs(scores[t] - s[t]) <= ds[t], "hd %d n %d score %d: %.9g vs %.9g (tol %.3g)", hd, n_keys, t,
                  scores[t], s[t], ds[t]);
    }
    for (int t = 0; t < n_keys; t++) sum += exp(s[t] - mx);
    double p_rel_max = 0;
    for (int t = 0; t < n_keys; t++) {
        const double p = exp(s[t] - mx) / sum;
        const double rel = 2 * max_ds + (fabs(s[t] - mx) + n_keys + 8) * FLT_EPSILON;
        p_rel_max = fmax(p_rel_max, rel);
        cr_assert(fabs(probs[t] - p) <= rel * p + 1e-30, "hd %d n %d prob %d: %.9g vs %.9g", hd, n_keys, t, probs[t], p);
    }
    for (int d = 0; d < hd; d++) {
        double r = 0, w = 0;
        for (int t = 0; t < n_keys; t++) {
            const double p = exp(s[t] - mx) / sum, x = vh[(size_t)t * stride + d];
            r += p * x;
            w += p * fabs(x);
        }
        const double tol = (p_rel_max + (n_keys + 2) * FLT_EPSILON) * w;
        cr_assert(fabs(out[d] - r) <= tol, "hd %d n %d out %d: %.9g vs %.9g (tol %.3g)", hd, n_keys, d, out[d], r, tol);
    }
    for (int d = hd; d < hd + 16; d++) cr_assert(out[d] == 12345.0f, "hd %d n %d: out[%d] written", hd, n_keys, d);
    free(k), free(v), free(q), free(out), free(scores), free(probs), free(s), free(ds);
}

Test(cpu_ops, attention_fast_and_scalar_vs_double) {
    const int dims[] = {8, 24, 64, 128, 160}, counts[] = {1, 15, 16, 17, 100, 1000};
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 6; j++) {
            check_attention_vs_double(emx_attention_head_spans, dims[i], counts[j], 0, 0.0f);
            check_attention_vs_double(emx_attention_head_spans_scalar, dims[i], counts[j], 1, 0.0f);
        }
    for (int j = 0; j < 6; j++) check_attention_vs_double(emx_attention_head_spans, 64, counts[j], 0, -20.0f);
}

// The same keys as one contiguous cache, as a prefix + a tail kept elsewhere (another buffer,
// another stride: a branch's own rows), and as three pieces: bitwise the same scores, probs and
// out, for split points inside and across 16-key blocks, at 0 (empty prefix) and at n.
static void check_span_split(attention_fn attend, int hd, int n) {
    const int stride = 3 * hd, tail_stride = 5 * hd;
    float *k = malloc(sizeof(float) * n * stride), *v = malloc(sizeof(float) * n * stride);
    float *tk = malloc(sizeof(float) * n * tail_stride), *tv = malloc(sizeof(float) * n * tail_stride);
    float *q = malloc(sizeof(float) * hd), *out0 = malloc(sizeof(float) * hd), *out = malloc(sizeof(float) * hd);
    float *s0 = malloc(sizeof(float) * n), *p0 = malloc(sizeof(float) * n);
    float *s = malloc(sizeof(float) * n), *p = malloc(sizeof(float) * n);
    cr_assert(k && v && tk && tv && q && out0 && out && s0 && p0 && s && p);
    fill(q, hd, 1.0f);
    fill(k, n * stride, 2.0f);  // wider scores: a peaked softmax with tiny probabilities too
    fill(v, n * stride, 1.0f);
    for (int t = 0; t < n; t++) {  // the tail buffer holds copies of every key
        memcpy(tk + (size_t)t * tail_stride + 2 * hd, k + (size_t)t * stride + hd, sizeof(float) * hd);
        memcpy(tv + (size_t)t * tail_stride + 2 * hd, v + (size_t)t * stride + hd, sizeof(float) * hd);
    }
    const float scale = 1.0f / sqrtf((float)hd);
    const EmxKeySpan all = {k + hd, v + hd, (size_t)stride, n};
    attend(out0, q, &all, 1, hd, scale, s0, p0);
    const int splits[] = {0, 1, 5, 15, 16, 17, 31, 33, 50, n - 1, n};
    for (int i = 0; i < 11; i++) {
        const int a = splits[i] < n ? splits[i] : n;
        for (int b = a;; b = b + 7 < n ? b + 7 : n) {  // [0, a) cache, [a, b) tail, [b, n) cache again
            const EmxKeySpan three[3] = {
                {k + hd, v + hd, (size_t)stride, a},
                {tk + (size_t)a * tail_stride + 2 * hd, tv + (size_t)a * tail_stride + 2 * hd, (size_t)tail_stride, b - a},
                {k + (size_t)b * stride + hd, v + (size_t)b * stride + hd, (size_t)stride, n - b},
            };
            const int n_spans = b == n ? 2 : 3;  // b == n: a branch's prefix + its own tail
            memset(out, 0xff, sizeof(float) * hd);
            memset(s, 0xff, sizeof(float) * n);
            attend(out, q, three, n_spans, hd, scale, s, p);
            cr_assert(memcmp(s, s0, sizeof(float) * n) == 0, "hd %d n %d split %d/%d: scores differ", hd, n, a, b);
            cr_assert(memcmp(p, p0, sizeof(float) * n) == 0, "hd %d n %d split %d/%d: probs differ", hd, n, a, b);
            cr_assert(memcmp(out, out0, sizeof(float) * hd) == 0, "hd %d n %d split %d/%d: out differs", hd, n, a, b);
            if (b == n) break;
        }
    }
    // in place (probs == scores): the same distribution and output
    attend(out, q, &all, 1, hd, scale, s, s);
    cr_assert(memcmp(s, p0, sizeof(float) * n) == 0, "hd %d n %d: in-place probs differ", hd, n);
    cr_assert(memcmp(out, out0, sizeof(float) * hd) == 0, "hd %d n %d: in-place out differs", hd, n);
    free(k), free(v), free(tk), free(tv), free(q), free(out0), free(out), free(s0), free(p0), free(s), free(p);
}

Test(cpu_ops, attention_span_split_bitwise) {
    const int dims[] = {8, 24, 64, 128, 160}, counts[] = {1, 17, 100};
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 3; j++) {
            check_span_split(emx_attention_head_spans, dims[i], counts[j]);
            check_span_split(emx_attention_head_spans_scalar, dims[i], counts[j]);
        }
}

// emx_exp_f32 against double exp: within 2 ulp of the exact value where it is a normal float
// (the polynomial path: ~1 ulp of Horner rounding, <0.1 ulp of truncation, ~0.25 ulp from the
// reduced argument), within one subnormal step below FLT_MIN (one rounding by scalef of a
// value already within 1e-7 relative), 0 for -inf and far below -103.97, +inf where expf
// overflows, NaN for NaN. Lengths that are not multiples of 16 and in-place use included.
Test(cpu_ops, exp_f32) {
    enum { N = 214001 };  // -120 .. 94 in steps of 0.001, then special values
    float *x = malloc(sizeof(float) * (N + 16)), *y = malloc(sizeof(float) * (N + 16));
    cr_assert(x && y);
    for (int i = 0; i < N; i++) x[i] = -120.0f + 0.001f * i;
    const float specials[16] = {-INFINITY, -1e30f, -1000.0f, -200.0f, -104.0f, -103.98f, -103.96f, -87.3f,
                                -1e-30f, 0.0f, -0.0f, 1e-30f, 88.72f, 88.73f, INFINITY, NAN};
    memcpy(x + N, specials, sizeof(specials));
    emx_exp_f32(y, x, N + 16);
    for (int i = 0; i < N + 16; i++) {
        const double e = exp((double)x[i]);
        if (isnan(x[i])) {
            cr_assert(isnan(y[i]), "exp(NaN) = %g", y[i]);
            continue;
        }
        cr_assert(!isnan(y[i]), "exp(%.9g) = NaN", x[i]);
        if (isinf(expf(x[i])) || e > FLT_MAX) {
            cr_assert(isinf(y[i]) && y[i] > 0, "exp(%.9g) = %g, expf overflows", x[i], y[i]);
        } else if (e >= FLT_MIN) {
            const double ulp = ldexp(1.0, ilogb(e) - 23);
            cr_assert(fabs(y[i] - e) <= 2 * ulp, "exp(%.9g) = %.9g, exact %.9g (%.2f ulp)", x[i], y[i], e,
                      fabs(y[i] - e) / ulp);
        } else {
            cr_assert(y[i] >= 0 && fabs(y[i] - e) <= ldexp(1.0, -149), "exp(%.9g) = %.9g, exact %.9g", x[i], y[i], e);
        }
        if (x[i] < -104.0f) cr_assert(y[i] == 0, "exp(%.9g) = %.9g, want 0", x[i], y[i]);
    }
    // in place, on a length that ends inside a 16-float block
    memcpy(y, x, sizeof(float) * 37);
    emx_exp_f32(y, y, 37);
    for (int i = 0; i < 37; i++) cr_assert(fabs(y[i] - exp((double)x[i])) <= 1e-40 + 3e-7 * exp((double)x[i]));
    free(x), free(y);
}

// emx_attention_group_spans: n_q queries in one call give, bitwise, what each gets from
// emx_attention_head_spans alone, for groups below, at and above the 8 queries of one pass, keys
// in one span or three, and probs in place.
static void check_group(int hd, int n, int n_q) {
    const int stride = 3 * hd;
    float *k = malloc(sizeof(float) * n * stride), *v = malloc(sizeof(float) * n * stride);
    float *q = malloc(sizeof(float) * n_q * (hd + 8)), *out = malloc(sizeof(float) * n_q * (hd + 8));
    float *one = malloc(sizeof(float) * hd), *s = malloc(sizeof(float) * n), *p = malloc(sizeof(float) * n);
    float *gs = malloc(sizeof(float) * n_q * n), *gp = malloc(sizeof(float) * n_q * n);
    EmxAttnQuery qs[16];
    cr_assert(k && v && q && out && one && s && p && gs && gp && n_q <= 16);
    fill(k, n * stride, 1.5f);
    fill(v, n * stride, 1.0f);
    fill(q, n_q * (hd + 8), 1.0f);  // query i at q + i * (hd + 8): a stride wider than head_dim
    const float scale = 1.0f / sqrtf((float)hd);
    const int a = n / 3, b = n - n / 5;
    const EmxKeySpan all = {k + hd, v + hd, (size_t)stride, n};
    const EmxKeySpan three[3] = {{k + hd, v + hd, (size_t)stride, a},
                                 {k + (size_t)a * stride + hd, v + (size_t)a * stride + hd, (size_t)stride, b - a},
                                 {k + (size_t)b * stride + hd, v + (size_t)b * stride + hd, (size_t)stride, n - b}};
    for (int mode = 0; mode < 3; mode++) {  // 0: one span, 1: three spans, 2: probs in place
        for (int i = 0; i < n_q; i++)
            qs[i] = (EmxAttnQuery){q + (size_t)i * (hd + 8), out + (size_t)i * (hd + 8), gs + (size_t)i * n,
                                   mode == 2 ? gs + (size_t)i * n : gp + (size_t)i * n, n};
        emx_attention_group_spans(qs, n_q, mode == 1 ? three : &all, mode == 1 ? 3 : 1, hd, scale);
        for (int i = 0; i < n_q; i++) {
            emx_attention_head_spans(one, q + (size_t)i * (hd + 8), &all, 1, hd, scale, s, p);
            cr_assert(memcmp(qs[i].out, one, sizeof(float) * hd) == 0, "hd %d n %d q %d/%d mode %d: out", hd, n, i,
                      n_q, mode);
            cr_assert(memcmp(qs[i].probs, p, sizeof(float) * n) == 0, "hd %d n %d q %d/%d mode %d: probs", hd, n, i,
                      n_q, mode);
            if (mode != 2)
                cr_assert(memcmp(qs[i].scores, s, sizeof(float) * n) == 0, "hd %d n %d q %d/%d: scores", hd, n, i, n_q);
        }
    }
    free(k), free(v), free(q), free(out), free(one), free(s), free(p), free(gs), free(gp);
}

Test(cpu_ops, attention_group_bitwise) {
    const int dims[] = {8, 24, 64, 128, 160}, counts[] = {1, 17, 100}, groups[] = {1, 2, 3, 8, 9};
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 3; j++)
            for (int g = 0; g < 5; g++) check_group(dims[i], counts[j], groups[g]);
}

// Queries with their own key counts (the rows of a prefill: row i sees pos + i + 1 keys): query
// i of the call sees the first n_i = base + off_i keys (off_i random in 0..3) of spans holding
// T = max n_i + extra keys, the spans split at a and b (before, inside and after the keys some
// queries do not see; the middle span from another buffer with another stride). Each query
// gets, bitwise, the scores, probs and out of emx_attention_head_spans alone over exactly its
// n_i keys in one span; nothing is written past its n_i scores and probs, nor past head_dim in
// out (sentinels). Probs in place too.
#define SENTINEL 777.0f
static void check_rows(int hd, int base, int n_q, int extra) {
    const int stride = 3 * hd, tail_stride = 5 * hd, cap = base + 3 + extra;  // cap >= T
    float *k = malloc(sizeof(float) * cap * stride), *v = malloc(sizeof(float) * cap * stride);
    float *tk = malloc(sizeof(float) * cap * tail_stride), *tv = malloc(sizeof(float) * cap * tail_stride);
    float *q = malloc(sizeof(float) * n_q * hd), *out = malloc(sizeof(float) * n_q * (hd + 8));
    float *gs = malloc(sizeof(float) * n_q * (cap + 8)), *gp = malloc(sizeof(float) * n_q * (cap + 8));
    float *one = malloc(sizeof(float) * hd), *s = malloc(sizeof(float) * cap), *p = malloc(sizeof(float) * cap);
    EmxAttnQuery qs[16];
    int nk[16], lo = cap, hi = 0;
    cr_assert(k && v && tk && tv && q && out && gs && gp && one && s && p && n_q <= 16);
    fill(k, cap * stride, 1.5f);
    fill(v, cap * stride, 1.0f);
    fill(q, n_q * hd, 1.0f);
    for (int t = 0; t < cap; t++) {  // the tail buffer holds copies of every key
        memcpy(tk + (size_t)t * tail_stride + 2 * hd, k + (size_t)t * stride + hd, sizeof(float) * hd);
        memcpy(tv + (size_t)t * tail_stride + 2 * hd, v + (size_t)t * stride + hd, sizeof(float) * hd);
    }
    for (int i = 0; i < n_q; i++) {
        nk[i] = base + (int)(urand() * 4);
        lo = nk[i] < lo ? nk[i] : lo;
        hi = nk[i] > hi ? nk[i] : hi;
    }
    const int total = hi + extra;
    const float scale = 1.0f / sqrtf((float)hd);
    const int cuts[] = {0, lo > 0 ? lo - 1 : 0, lo, (lo + hi) / 2, hi - 1 > lo ? hi - 1 : lo, hi, total};
    for (int ia = 0; ia < 7; ia++)
        for (int ib = ia; ib < 7; ib++)
            for (int in_place = 0; in_place < 2; in_place++) {
                const int a = cuts[ia], b = cuts[ib];
                const EmxKeySpan three[3] = {
                    {k + hd, v + hd, (size_t)stride, a},
                    {tk + (size_t)a * tail_stride + 2 * hd, tv + (size_t)a * tail_stride + 2 * hd, (size_t)tail_stride,
                     b - a},
                    {k + (size_t)b * stride + hd, v + (size_t)b * stride + hd, (size_t)stride, total - b},
                };
                for (int x = 0; x < n_q * (cap + 8); x++) gs[x] = gp[x] = SENTINEL;
                for (int x = 0; x < n_q * (hd + 8); x++) out[x] = SENTINEL;
                for (int i = 0; i < n_q; i++) {
                    float *si = gs + (size_t)i * (cap + 8);
                    qs[i] = (EmxAttnQuery){q + (size_t)i * hd, out + (size_t)i * (hd + 8), si,
                                           in_place ? si : gp + (size_t)i * (cap + 8), nk[i]};
                }
                emx_attention_group_spans(qs, n_q, three, 3, hd, scale);
                for (int i = 0; i < n_q; i++) {
                    const int ni = nk[i];
                    const EmxKeySpan own = {k + hd, v + hd, (size_t)stride, ni};
                    emx_attention_head_spans(one, q + (size_t)i * hd, &own, 1, hd, scale, s, p);
                    cr_assert(memcmp(qs[i].out, one, sizeof(float) * hd) == 0,
                              "hd %d q %d/%d (%d keys of %d, spans %d|%d|%d, in place %d): out", hd, i, n_q, ni, total,
                              a, b - a, total - b, in_place);
                    cr_assert(memcmp(qs[i].probs, p, sizeof(float) * ni) == 0,
                              "hd %d q %d/%d (%d keys of %d, spans %d|%d|%d, in place %d): probs", hd, i, n_q, ni,
                              total, a, b - a, total - b, in_place);
                    if (!in_place)
                        cr_assert(memcmp(qs[i].scores, s, sizeof(float) * ni) == 0,
                                  "hd %d q %d/%d (%d keys of %d, spans %d|%d|%d): scores", hd, i, n_q, ni, total, a,
                                  b - a, total - b);
                    for (int t = ni; t < cap + 8; t++)
                        cr_assert(qs[i].scores[t] == SENTINEL && qs[i].probs[t] == SENTINEL,
                                  "hd %d q %d/%d: score or prob %d written past its %d keys", hd, i, n_q, t, ni);
                    for (int d = hd; d < hd + 8; d++)
                        cr_assert(qs[i].out[d] == SENTINEL, "hd %d q %d/%d: out[%d] written", hd, i, n_q, d);
                }
            }
    free(k), free(v), free(tk), free(tv), free(q), free(out), free(gs), free(gp), free(one), free(s), free(p);
}

Test(cpu_ops, attention_rows_own_key_counts_bitwise) {
    const int dims[] = {8, 24, 64, 128, 160}, bases[] = {0, 1, 2, 13, 15, 16, 17, 30, 62, 100};
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 10; j++)
            for (int n_q = 1; n_q <= 9; n_q++) check_rows(dims[i], bases[j], n_q, (i + j + n_q) % 3 == 0 ? 5 : 0);
}
