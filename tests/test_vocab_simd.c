// test_vocab_simd.c — the vector helpers of the vocabulary passes (sampler/vocab_simd.h) and
// what uses them: emx_vexp4 within 1 ulp of libm's exp over the range it serves; argmax and
// top-k selection equal to plain loops written here (first maximum; best k by logit, ties by
// id) on rows with ties, NaN, -inf and +inf; the metrics of a 49152-token row equal to the
// two-pass scalar reference. Without AVX2 + FMA the build has no vector helpers: their test is
// skipped, saying so, and the others test the scalar loops.
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sampler/metrics.h"
#include "sampler/sample.h"
#include "sampler/vocab_simd.h"

#ifdef EMX_VOCAB_SIMD
// Distance in units in the last place between two positive doubles.
static double ulps(double got, double want) {
    int64_t a, b;
    memcpy(&a, &got, 8);
    memcpy(&b, &want, 8);
    return (double)llabs(a - b);
}
#endif

Test(vocab_simd, vexp_within_one_ulp_of_libm) {
#ifndef EMX_VOCAB_SIMD
    cr_skip_test("this build has no AVX2+FMA vocabulary helpers (vocab_simd.h): the scalar loops run");
#else
    double worst = 0.0, worst_x = 0.0;
    uint64_t r = 12345;
    for (int i = 0; i < 400000; i++) {
        double x[4];
        for (int l = 0; l < 4; l++) {
            r = r * 6364136223846793005ULL + 1442695040888963407ULL;
            double u = (double)(r >> 11) / 9007199254740992.0;  // [0, 1)
            // half the points in [-40, 0] (where a softmax's mass is), half over the whole range
            x[l] = (i & 1) ? -40.0 * u : EMX_VEXP_MIN * u;
        }
        if (i == 0) x[0] = 0.0, x[1] = -1e-300, x[2] = EMX_VEXP_MIN, x[3] = -0.5 * 0.6931471805599453;
        double e[4];
        _mm256_storeu_pd(e, emx_vexp4(_mm256_loadu_pd(x)));
        for (int l = 0; l < 4; l++) {
            double d = ulps(e[l], exp(x[l]));
            if (d > worst) worst = d, worst_x = x[l];
        }
    }
    cr_expect_leq(worst, 1.0, "emx_vexp4 is %.0f ulp from exp at x = %.17g", worst, worst_x);
    double one[4] = {0.0, 0.0, 0.0, 0.0}, e[4];
    _mm256_storeu_pd(e, emx_vexp4(_mm256_loadu_pd(one)));
    cr_expect(e[0] == 1.0, "e^0 is exactly 1 (the maximum's weight)");
    double below[4] = {-709.0, -745.0, -1e4, -INFINITY};
    _mm256_storeu_pd(e, emx_vexp4(_mm256_loadu_pd(below)));
    for (int l = 0; l < 4; l++) cr_expect(e[l] == 0.0, "below the range: 0, got %g at %g", e[l], below[l]);
#endif
}

// A row of n logits from a seed: Gumbel-like values, many exact ties (rounded to 1/8), a few
// NaN, -inf and (when posinf) +inf.
static void make_row(float *l, int n, uint64_t seed, int posinf) {
    uint64_t r = seed * 2654435761ULL + 1;
    for (int i = 0; i < n; i++) {
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        double u = ((double)(r >> 11) + 0.5) / 9007199254740992.0;
        l[i] = (float)(round(-log(-log(u)) * 8.0) / 8.0);
        uint32_t k = (uint32_t)(r >> 40) % 1000;
        if (k == 0) l[i] = NAN;
        else if (k == 1) l[i] = -INFINITY;
        else if (k == 2 && posinf) l[i] = INFINITY;
    }
}

static int plain_argmax(const float *l, int n) {
    int best = -1;
    for (int i = 0; i < n; i++)
        if (!isnan(l[i]) && l[i] != -INFINITY && (best < 0 || l[i] > l[best])) best = i;
    return best;
}

Test(vocab_simd, argmax_is_the_first_maximum) {
    static float l[49157];  // not a multiple of 8: the tail loop too
    for (int seed = 0; seed < 40; seed++) {
        int n = seed < 20 ? 49157 : 1 + seed * 37;
        make_row(l, n, (uint64_t)seed, seed % 3 == 0);
        cr_expect_eq(emx_sample_argmax(l, n), plain_argmax(l, n), "seed %d n %d", seed, n);
    }
    float none[11] = {NAN, -INFINITY, NAN, NAN, -INFINITY, NAN, NAN, NAN, -INFINITY, NAN, NAN};
    cr_expect_eq(emx_sample_argmax(none, 11), -1, "nothing can be chosen");
    float late[17];
    for (int i = 0; i < 17; i++) late[i] = 1.0f;
    late[16] = 2.0f;
    cr_expect_eq(emx_sample_argmax(late, 17), 16, "the maximum in the tail");
    late[3] = 2.0f;
    cr_expect_eq(emx_sample_argmax(late, 17), 3, "the first of two maxima");
}

static int rank_cmp(const void *a, const void *b) {
    const EmxCandidate *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

Test(vocab_simd, top_k_is_the_best_k_by_logit_then_id) {
    enum { N = 49157 };
    static float l[N];
    static EmxCandidate work[N], all[N];
    for (int seed = 0; seed < 12; seed++) {
        make_row(l, N, 100 + (uint64_t)seed, 0);
        int m = 0;
        for (int i = 0; i < N; i++)
            if (!isnan(l[i]) && l[i] != -INFINITY) all[m++] = (EmxCandidate){.id = i, .logit = l[i]};
        qsort(all, (size_t)m, sizeof *all, rank_cmp);
        int k = seed % 2 ? 40 : 1000;  // 1000: the kept set's threshold sits among ties
        EmxSamplerParams sp = {.temperature = 1.0f, .top_k = k, .top_p = 1.0f};
        int got = emx_sample_distribution(l, N, &sp, work);
        cr_assert_eq(got, k, "seed %d: %d kept", seed, got);
        for (int i = 0; i < k; i++)
            cr_expect(work[i].id == all[i].id, "seed %d rank %d: id %d, want %d", seed, i, work[i].id, all[i].id);
    }
}

Test(vocab_simd, metrics_of_a_vocabulary_row_match_the_two_pass_reference) {
    enum { N = 49152 };
    static float l[N];
    for (int seed = 0; seed < 6; seed++) {
        make_row(l, N, 7 + (uint64_t)seed, 0);
        for (int i = 0; i < N; i++) l[i] *= (float)(seed + 1) * 0.75f;  // sharper and sharper
        EmxMetrics m;
        double h, v;
        int n1 = emx_logits_metrics(l, N, &m), n2 = emx_logits_entropy_reference(l, N, &h, &v);
        cr_expect_eq(n1, n2);
        cr_expect(fabs(m.logits_entropy_bits - h) <= 1e-12 * h, "seed %d H %.17g vs %.17g", seed, m.logits_entropy_bits, h);
        cr_expect(fabs(m.logits_varentropy_bits2 - v) <= 1e-10 * v, "seed %d V %.17g vs %.17g", seed,
                  m.logits_varentropy_bits2, v);
    }
}
