// test_cpu_attention.c — the CPU attention kernels (one head; the default and the plain twin
// over key spans; grouped queries; prefill rows with their own key counts) and the exp they use,
// against double-precision references on random inputs, and the bitwise agreement of the ways
// the same keys can be laid out.
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "runtime/cpu/cpu_ops.h"
#include "test_rand_util.h"

// f16 spans (EMX_KV_F16) reuse the bitwise checks below: the buffers are rounded to f16
// values in place and an f16 copy of each is kept (a shadow); then the spans under test (sp())
// read the f16 copies while the references read f32 spans of the same, widened values. So each
// check says both that f16 spans give the bits of f32 spans holding their widened values, and
// that the split and grouping invariance holds for them.
typedef struct {
    const float *f;  // the rounded f32 buffer
    uint16_t *h;     // its f16 copy
    size_t n;
} Shadow;
static Shadow shadows[4];
static int n_shadows;  // 0: sp() gives f32 spans

static void shadow_add(float *f, size_t n) {
    cr_assert(n_shadows < 4);
    uint16_t *h = malloc(n * sizeof(uint16_t));
    cr_assert(h);
    for (size_t i = 0; i < n; i++) {
        h[i] = emx_f32_to_f16(f[i]);
        f[i] = emx_f16_to_f32(h[i]);
    }
    shadows[n_shadows++] = (Shadow){f, h, n};
}

static void shadows_free(void) {
    while (n_shadows > 0) free(shadows[--n_shadows].h);
}

static const uint16_t *shadow_of(const float *p) {
    for (int i = 0; i < n_shadows; i++)
        if ((uintptr_t)p >= (uintptr_t)shadows[i].f && (uintptr_t)p <= (uintptr_t)(shadows[i].f + shadows[i].n))
            return shadows[i].h + (p - shadows[i].f);
    cr_assert_fail("no f16 copy of a span's buffer");
    return NULL;
}

// The span of the keys k, values v: f32, or their f16 copies while shadows are kept.
static EmxKeySpan sp(const float *k, const float *v, size_t stride, int n) {
    if (!n_shadows) return (EmxKeySpan){k, v, stride, n, NULL, NULL};
    if (n == 0) return (EmxKeySpan){NULL, NULL, stride, 0, shadows[0].h, shadows[0].h};  // never read (k may be past the end)
    return (EmxKeySpan){NULL, NULL, stride, n, shadow_of(k), shadow_of(v)};
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
    const EmxKeySpan all = sp(kh, vh, (size_t)stride, n_keys);
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
static void check_span_split(attention_fn attend, int hd, int n, int f16) {
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
    if (f16) shadow_add(k, (size_t)n * stride), shadow_add(v, (size_t)n * stride);
    for (int t = 0; t < n; t++) {  // the tail buffer holds copies of every key
        memcpy(tk + (size_t)t * tail_stride + 2 * hd, k + (size_t)t * stride + hd, sizeof(float) * hd);
        memcpy(tv + (size_t)t * tail_stride + 2 * hd, v + (size_t)t * stride + hd, sizeof(float) * hd);
    }
    if (f16) shadow_add(tk, (size_t)n * tail_stride), shadow_add(tv, (size_t)n * tail_stride);
    const float scale = 1.0f / sqrtf((float)hd);
    const EmxKeySpan all = {k + hd, v + hd, (size_t)stride, n, NULL, NULL};  // the reference: f32
    attend(out0, q, &all, 1, hd, scale, s0, p0);
    const int splits[] = {0, 1, 5, 15, 16, 17, 31, 33, 50, n - 1, n};
    for (int i = 0; i < 11; i++) {
        const int a = splits[i] < n ? splits[i] : n;
        for (int b = a;; b = b + 7 < n ? b + 7 : n) {  // [0, a) cache, [a, b) tail, [b, n) cache again
            const EmxKeySpan three[3] = {
                sp(k + hd, v + hd, (size_t)stride, a),
                sp(tk + (size_t)a * tail_stride + 2 * hd, tv + (size_t)a * tail_stride + 2 * hd, (size_t)tail_stride, b - a),
                sp(k + (size_t)b * stride + hd, v + (size_t)b * stride + hd, (size_t)stride, n - b),
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
    const EmxKeySpan one = sp(k + hd, v + hd, (size_t)stride, n);
    attend(out, q, &one, 1, hd, scale, s, s);
    cr_assert(memcmp(s, p0, sizeof(float) * n) == 0, "hd %d n %d: in-place probs differ", hd, n);
    cr_assert(memcmp(out, out0, sizeof(float) * hd) == 0, "hd %d n %d: in-place out differs", hd, n);
    shadows_free();
    free(k), free(v), free(tk), free(tv), free(q), free(out0), free(out), free(s0), free(p0), free(s), free(p);
}

Test(cpu_ops, attention_span_split_bitwise) {
    const int dims[] = {8, 24, 64, 128, 160}, counts[] = {1, 17, 100};
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 3; j++) {
            check_span_split(emx_attention_head_spans, dims[i], counts[j], 0);
            check_span_split(emx_attention_head_spans_scalar, dims[i], counts[j], 0);
        }
}

// f16 spans, split or whole, in place or not: the bits of one f32 span of the widened values,
// for the default and the plain version. Head sizes include tails of 2, 8 (partial vectors).
Test(cpu_ops, attention_f16_spans_bitwise) {
    const int dims[] = {2, 8, 24, 64, 128, 160}, counts[] = {1, 17, 100};
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 3; j++) {
            check_span_split(emx_attention_head_spans, dims[i], counts[j], 1);
            check_span_split(emx_attention_head_spans_scalar, dims[i], counts[j], 1);
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
// emx_attention_head_spans alone, for groups below, at and above the 32 queries of one pass, keys
// in one span or three, and probs in place.
static void check_group(int hd, int n, int n_q, int f16) {
    const int stride = 3 * hd;
    float *k = malloc(sizeof(float) * n * stride), *v = malloc(sizeof(float) * n * stride);
    float *q = malloc(sizeof(float) * n_q * (hd + 8)), *out = malloc(sizeof(float) * n_q * (hd + 8));
    float *one = malloc(sizeof(float) * hd), *s = malloc(sizeof(float) * n), *p = malloc(sizeof(float) * n);
    float *gs = malloc(sizeof(float) * n_q * n), *gp = malloc(sizeof(float) * n_q * n);
    EmxAttnQuery qs[40];
    cr_assert(k && v && q && out && one && s && p && gs && gp && n_q <= 40);
    fill(k, n * stride, 1.5f);
    fill(v, n * stride, 1.0f);
    fill(q, n_q * (hd + 8), 1.0f);  // query i at q + i * (hd + 8): a stride wider than head_dim
    if (f16) shadow_add(k, (size_t)n * stride), shadow_add(v, (size_t)n * stride);
    const float scale = 1.0f / sqrtf((float)hd);
    const int a = n / 3, b = n - n / 5;
    const EmxKeySpan all = {k + hd, v + hd, (size_t)stride, n, NULL, NULL};  // the reference: f32
    const EmxKeySpan whole = sp(k + hd, v + hd, (size_t)stride, n);
    const EmxKeySpan three[3] = {sp(k + hd, v + hd, (size_t)stride, a),
                                 sp(k + (size_t)a * stride + hd, v + (size_t)a * stride + hd, (size_t)stride, b - a),
                                 sp(k + (size_t)b * stride + hd, v + (size_t)b * stride + hd, (size_t)stride, n - b)};
    for (int mode = 0; mode < 3; mode++) {  // 0: one span, 1: three spans, 2: probs in place
        for (int i = 0; i < n_q; i++)
            qs[i] = (EmxAttnQuery){q + (size_t)i * (hd + 8), out + (size_t)i * (hd + 8), gs + (size_t)i * n,
                                   mode == 2 ? gs + (size_t)i * n : gp + (size_t)i * n, n};
        emx_attention_group_spans(qs, n_q, mode == 1 ? three : &whole, mode == 1 ? 3 : 1, hd, scale);
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
    shadows_free();
    free(k), free(v), free(q), free(out), free(one), free(s), free(p), free(gs), free(gp);
}

Test(cpu_ops, attention_group_bitwise) {
    const int dims[] = {8, 24, 64, 128, 160}, counts[] = {1, 17, 100}, groups[] = {1, 2, 3, 8, 9, 32, 33};
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 3; j++)
            for (int g = 0; g < 7; g++) check_group(dims[i], counts[j], groups[g], 0);
}

// Grouped queries over f16 spans: each the bits of itself alone over one f32 span of the
// widened values (the AVX-512 version widens a block once for the whole group).
Test(cpu_ops, attention_group_f16_bitwise) {
    const int dims[] = {8, 24, 64, 128, 160}, counts[] = {1, 17, 100}, groups[] = {1, 2, 9, 33};
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 3; j++)
            for (int g = 0; g < 4; g++) check_group(dims[i], counts[j], groups[g], 1);
}

// Queries with their own key counts (the rows of a prefill: row i sees pos + i + 1 keys): query
// i of the call sees the first n_i = base + off_i keys (off_i random in 0..3) of spans holding
// T = max n_i + extra keys, the spans split at a and b (before, inside and after the keys some
// queries do not see; the middle span from another buffer with another stride). Each query
// gets, bitwise, the scores, probs and out of emx_attention_head_spans alone over exactly its
// n_i keys in one span; nothing is written past its n_i scores and probs, nor past head_dim in
// out (sentinels). Probs in place too.
#define SENTINEL 777.0f
static void check_rows(int hd, int base, int n_q, int extra, int f16) {
    const int stride = 3 * hd, tail_stride = 5 * hd, cap = base + 3 + extra;  // cap >= T
    float *k = malloc(sizeof(float) * cap * stride), *v = malloc(sizeof(float) * cap * stride);
    float *tk = malloc(sizeof(float) * cap * tail_stride), *tv = malloc(sizeof(float) * cap * tail_stride);
    float *q = malloc(sizeof(float) * n_q * hd), *out = malloc(sizeof(float) * n_q * (hd + 8));
    float *gs = malloc(sizeof(float) * n_q * (cap + 8)), *gp = malloc(sizeof(float) * n_q * (cap + 8));
    float *one = malloc(sizeof(float) * hd), *s = malloc(sizeof(float) * cap), *p = malloc(sizeof(float) * cap);
    EmxAttnQuery qs[40];
    int nk[40], lo = cap, hi = 0;
    cr_assert(k && v && tk && tv && q && out && gs && gp && one && s && p && n_q <= 40);
    fill(k, cap * stride, 1.5f);
    fill(v, cap * stride, 1.0f);
    fill(q, n_q * hd, 1.0f);
    if (f16) shadow_add(k, (size_t)cap * stride), shadow_add(v, (size_t)cap * stride);
    for (int t = 0; t < cap; t++) {  // the tail buffer holds copies of every key
        memcpy(tk + (size_t)t * tail_stride + 2 * hd, k + (size_t)t * stride + hd, sizeof(float) * hd);
        memcpy(tv + (size_t)t * tail_stride + 2 * hd, v + (size_t)t * stride + hd, sizeof(float) * hd);
    }
    if (f16) shadow_add(tk, (size_t)cap * tail_stride), shadow_add(tv, (size_t)cap * tail_stride);
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
                    sp(k + hd, v + hd, (size_t)stride, a),
                    sp(tk + (size_t)a * tail_stride + 2 * hd, tv + (size_t)a * tail_stride + 2 * hd,
                       (size_t)tail_stride, b - a),
                    sp(k + (size_t)b * stride + hd, v + (size_t)b * stride + hd, (size_t)stride, total - b),
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
                    const EmxKeySpan own = {k + hd, v + hd, (size_t)stride, ni, NULL, NULL};  // f32
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
    shadows_free();
    free(k), free(v), free(tk), free(tv), free(q), free(out), free(gs), free(gp), free(one), free(s), free(p);
}

Test(cpu_ops, attention_rows_own_key_counts_bitwise) {
    const int dims[] = {8, 24, 64, 128, 160}, bases[] = {0, 1, 2, 13, 15, 16, 17, 30, 62, 100};
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 10; j++)
            for (int n_q = 1; n_q <= 33; n_q = n_q < 9 ? n_q + 1 : n_q == 9 ? 31 : n_q + 1)  // 1..9, 31..33
                check_rows(dims[i], bases[j], n_q, (i + j + n_q) % 3 == 0 ? 5 : 0, 0);
}

// The same over f16 spans, against f32 references of the widened values.
Test(cpu_ops, attention_rows_f16_bitwise) {
    const int dims[] = {8, 24, 64, 160}, bases[] = {0, 1, 15, 16, 17, 62};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 6; j++)
            for (int n_q = 1; n_q <= 33; n_q += n_q < 9 ? 2 : 24) check_rows(dims[i], bases[j], n_q, (i + j + n_q) % 3 == 0 ? 5 : 0, 1);
}
