// vocab_simd.h — the host's vector helpers for passes over a whole vocabulary (AVX2 + FMA): the
// maximum of the logits and how many can be chosen, and e^x in double precision, four lanes at a
// time. A build without AVX2 gets the maximum and the search as plain loops (same answers) and
// keeps metrics.c's scalar exp loop.
//
// Why: entropix reads the vocabulary's statistics every token (metrics.c: one e^x per logit, in
// double, which libm computes one call at a time), and every sampler finds the maximum first. On
// a 150M-parameter model decoding at ~100 tokens/s those scalar loops were ~5% of the step; four
// lanes cut them to a fraction of that.
//
// Exactness: the maximum and the counts are exact (comparisons only), so whatever uses them
// (argmax, top-k) is bitwise the scalar code's. emx_vexp4 differs from libm's exp by at most
// 1 ulp (tests/test_vocab_simd.c checks it over the whole range it serves), and the sums built
// from it are added four lanes at a time: metrics computed through it agree with the scalar
// loops to ~1e-15 relative, not bit for bit (the GPU's, kernels/logits_metrics.cu, never did).
// Host only: the sampler's device code (kernels/sampling/sampling_device.cuh) does not include this.
#ifndef ENTROPIX_VOCAB_SIMD_H
#define ENTROPIX_VOCAB_SIMD_H

#include <math.h>

// The one-logit-at-a-time scans from index i on: the maximum (continuing m, counting the
// chosen-able logits into *c and noting a +inf in *inf) and the first s[j] == v. A build without
// AVX2 runs them over the whole row; the vector versions below over the last n % 8 logits.
static inline float emx_vocab_max_from(const float *s, int i, int n, float m, int *c, int *inf) {
    for (; i < n; i++) {
        if (s[i] > m) m = s[i];  // NaN compares false: never the max
        *c += s[i] > -INFINITY;
        *inf |= s[i] == INFINITY;
    }
    return m;
}

static inline int emx_vocab_find_from(const float *s, int i, int n, float v) {
    for (; i < n; i++)
        if (s[i] == v) return i;
    return -1;
}

#if defined(__AVX2__) && defined(__FMA__) && !defined(__CUDACC__)
#define EMX_VOCAB_SIMD 1
#include <immintrin.h>

// e^x for x in [EMX_VEXP_MIN, 0], four lanes; lanes below EMX_VEXP_MIN give 0 (libm gives a
// subnormal there, below 1e-307: nothing next to the sum it joins, which holds e^0 = 1).
// How: x = k ln2 + r with k = round(x / ln2), |r| <= ln2 / 2 (ln2 in two parts, so r is exact
// to ~1e-20); e^r by its Taylor series to r^13 (truncation < 5e-18, under 1/40 ulp), evaluated
// by Horner with FMA; then 2^k put straight into the exponent field (k >= -1021: normal).
#define EMX_VEXP_MIN (-708.0)
static inline __m256d emx_vexp4(__m256d x) {
    const __m256d log2e = _mm256_set1_pd(1.4426950408889634074);
    const __m256d ln2_hi = _mm256_set1_pd(6.93147180369123816490e-01);
    const __m256d ln2_lo = _mm256_set1_pd(1.90821492927058770002e-10);
    __m256d k = _mm256_round_pd(_mm256_mul_pd(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256d r = _mm256_fnmadd_pd(k, ln2_hi, x);
    r = _mm256_fnmadd_pd(k, ln2_lo, r);
    // 1/n! for n = 13 down to 2, then 1 and 1
    static const double inv_fact[12] = {
        1.0 / 6227020800.0, 1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0,
        1.0 / 362880.0,     1.0 / 40320.0,     1.0 / 5040.0,      1.0 / 720.0,
        1.0 / 120.0,        1.0 / 24.0,        1.0 / 6.0,         1.0 / 2.0,
    };
    __m256d p = _mm256_set1_pd(inv_fact[0]);
    for (int i = 1; i < 12; i++) p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(inv_fact[i]));
    p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(1.0));
    p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(1.0));
    // 2^k: (k + 1023) << 52 as a double's bits; k is in [-1022, 0] for x in [EMX_VEXP_MIN, 0]
    const __m256d in_range = _mm256_cmp_pd(x, _mm256_set1_pd(EMX_VEXP_MIN), _CMP_GE_OQ);
    k = _mm256_blendv_pd(_mm256_setzero_pd(), k, in_range);
    __m256i e = _mm256_cvtepi32_epi64(_mm_add_epi32(_mm256_cvtpd_epi32(k), _mm_set1_epi32(1023)));
    __m256d two_k = _mm256_castsi256_pd(_mm256_slli_epi64(e, 52));
    return _mm256_and_pd(_mm256_mul_pd(p, two_k), in_range);
}

// Maximum of the chosen-able logits of s[0..n) (not NaN, not -inf; -inf when there are none),
// how many there are, and whether any is +inf. Exact: the scalar loop's values.
static inline float emx_vocab_max(const float *s, int n, int *n_valid, int *any_posinf) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY), pinf = _mm256_set1_ps(INFINITY);
    __m256 mx = ninf;
    __m256i count = _mm256_setzero_si256(), posinf = _mm256_setzero_si256();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(s + i);
        mx = _mm256_max_ps(v, mx);  // a NaN lane of v gives mx's lane: NaN is never the max
        // valid: v > -inf (false for NaN); the mask's lanes are -1, so subtracting counts them
        count = _mm256_sub_epi32(count, _mm256_castps_si256(_mm256_cmp_ps(v, ninf, _CMP_GT_OQ)));
        posinf = _mm256_or_si256(posinf, _mm256_castps_si256(_mm256_cmp_ps(v, pinf, _CMP_EQ_OQ)));
    }
    float lanes[8];
    int counts[8];
    _mm256_storeu_ps(lanes, mx);
    _mm256_storeu_si256((__m256i *)counts, count);
    float m = -INFINITY;
    int c = 0;
    for (int l = 0; l < 8; l++) {
        if (lanes[l] > m) m = lanes[l];
        c += counts[l];
    }
    int inf = !_mm256_testz_si256(posinf, posinf);
    m = emx_vocab_max_from(s, i, n, m, &c, &inf);
    if (n_valid) *n_valid = c;
    if (any_posinf) *any_posinf = inf;
    return m;
}

// The first index i < n with s[i] == v (v not NaN), or -1.
static inline int emx_vocab_find(const float *s, int n, float v) {
    const __m256 vv = _mm256_set1_ps(v);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(s + i), vv, _CMP_EQ_OQ));
        if (mask) return i + __builtin_ctz((unsigned)mask);
    }
    return emx_vocab_find_from(s, i, n, v);
}

// Whether any of s[i..i+8) is greater than v (NaN never is).
static inline int emx_vocab_any_above8(const float *s, float v) {
    return _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(s), _mm256_set1_ps(v), _CMP_GT_OQ)) != 0;
}
#else
// Without AVX2 the same two answers one logit at a time (the callers need no second version).
static inline float emx_vocab_max(const float *s, int n, int *n_valid, int *any_posinf) {
    int c = 0, inf = 0;
    const float m = emx_vocab_max_from(s, 0, n, -INFINITY, &c, &inf);
    if (n_valid) *n_valid = c;
    if (any_posinf) *any_posinf = inf;
    return m;
}

static inline int emx_vocab_find(const float *s, int n, float v) { return emx_vocab_find_from(s, 0, n, v); }
#endif

#endif
