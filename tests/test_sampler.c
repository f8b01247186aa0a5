// test_sampler.c — the basic samplers against the distribution the specification defines
// (sampler/sample.h), computed here independently in double by the most direct method
// (sort everything, cut, renormalise), and checked by chi-square goodness of fit over many
// seeded draws, plus the exact edge cases: greedy ties, -inf/NaN/+inf logits, one-hot
// distributions, filter boundaries, degenerate parameters.
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sampler/philox.h"
#include "sampler/sample.h"

// ---------------------------------------------------------------------------------------------
// Reference: the kept set and final probabilities by definition, probabilities by token id.

static int finite_or_inf(float l) { return !isnan(l) && l != -INFINITY; }

// Returns the number of kept tokens; prob[0..n) gets the final probability of each id.
static int reference(const float *l, int n, EmxSamplerParams sp, double *prob) {
    memset(prob, 0, sizeof(double) * (size_t)n);
    int *order = malloc(sizeof(int) * (size_t)n), nv = 0;
    for (int i = 0; i < n; i++)
        if (finite_or_inf(l[i])) order[nv++] = i;
    // Insertion sort by logit descending, id ascending (stable on ids already ascending).
    for (int a = 1; a < nv; a++) {
        int x = order[a], b = a - 1;
        while (b >= 0 && l[order[b]] < l[x]) {
            order[b + 1] = order[b];
            b--;
        }
        order[b + 1] = x;
    }
    int kept = 0;
    if (nv == 0) {
        kept = 0;
    } else if (sp.temperature <= 0 || sp.top_k == 1) {
        prob[order[0]] = 1.0;
        kept = 1;
    } else {
        double m = l[order[0]], s = sp.temperature_first ? 1.0 / sp.temperature : 1.0;
        int k = nv;
        if (sp.top_k > 0 && sp.top_k < k) k = sp.top_k;
        if (sp.top_p < 1) {
            double z = 0, cum = 0;
            for (int j = 0; j < k; j++) z += exp(s * (l[order[j]] - m));
            for (int j = 0; j < k; j++) {
                cum += exp(s * (l[order[j]] - m)) / z;
                if (cum >= sp.top_p) {
                    k = j + 1;
                    break;
                }
            }
        }
        if (sp.min_p > 0) {
            int j = 1;
            while (j < k && exp(s * (l[order[j]] - m)) >= sp.min_p) j++;
            k = j;
        }
        double z = 0;
        for (int j = 0; j < k; j++) z += exp((l[order[j]] - m) / sp.temperature);
        for (int j = 0; j < k; j++) prob[order[j]] = exp((l[order[j]] - m) / sp.temperature) / z;
        kept = k;
    }
    free(order);
    return kept;
}

// Upper critical value of chi-square with `dof` degrees of freedom at tail probability 1e-4
// (Wilson-Hilferty: accurate to a few percent for dof >= 3, and conservative enough here).
static double chi2_critical(int dof) {
    double z = 3.719, a = 2.0 / (9.0 * dof);
    double c = 1.0 - a + z * sqrt(a);
    return dof * c * c * c;
}

// Draws `draws` tokens with u = Philox(seed, step, 0) and checks them against the reference:
// never an excluded token, and chi-square over the kept tokens below the 1e-4 critical value.
static void check_distribution(const float *logits, int n, EmxSamplerParams sp, int draws,
                               uint64_t seed, const char *what) {
    double *prob = malloc(sizeof(double) * (size_t)n);
    long *count = calloc((size_t)n, sizeof(long));
    EmxCandidate *work = malloc(sizeof(EmxCandidate) * (size_t)n);
    int kept = reference(logits, n, sp, prob);
    cr_assert(kept >= 1, "%s: reference keeps nothing", what);

    // The distribution the sampler reports equals the reference one.
    int m = emx_sample_distribution(logits, n, &sp, work);
    cr_expect_eq(m, kept, "%s: sampler keeps %d tokens, reference %d", what, m, kept);
    for (int i = 0; i < m; i++)
        cr_expect(fabs(work[i].p - prob[work[i].id]) < 1e-12, "%s: p[%d] = %.15g, reference %.15g",
                  what, work[i].id, work[i].p, prob[work[i].id]);

    for (int d = 0; d < draws; d++) {
        int t = emx_sample(logits, n, &sp, emx_uniform_f64(seed, (uint64_t)d, 0), work);
        cr_assert(t >= 0 && t < n, "%s: token %d", what, t);
        count[t]++;
    }
    double chi2 = 0;
    int bins = 0;
    for (int i = 0; i < n; i++) {
        if (prob[i] == 0) {
            cr_assert_eq(count[i], 0, "%s: excluded token %d drawn %ld times", what, i, count[i]);
            continue;
        }
        double e = prob[i] * draws;
        chi2 += (count[i] - e) * (count[i] - e) / e;
        bins++;
    }
    if (bins > 1) {
        double crit = chi2_critical(bins - 1);
        cr_expect(chi2 < crit, "%s: chi2 = %.1f over %d dof (critical %.1f at p = 1e-4)", what,
                  chi2, bins - 1, crit);
    }
    free(prob);
    free(count);
    free(work);
}

// 40 logits with a spread of magnitudes, some masked out.
static void test_logits(float *l, int n) {
    for (int i = 0; i < n; i++) l[i] = (float)(2.5 * sin(1.7 * i + 0.3) + 0.05 * i);
    l[3] = -INFINITY;
    l[11] = -INFINITY;
    l[17] = NAN;
}

#define N_SMALL 40
#define DRAWS 60000

Test(sampler, temperature_only_matches_softmax) {
    float l[N_SMALL];
    test_logits(l, N_SMALL);
    EmxSamplerParams sp = {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f};
    check_distribution(l, N_SMALL, sp, DRAWS, 1, "T=1");
    sp.temperature = 1.7f;
    check_distribution(l, N_SMALL, sp, DRAWS, 2, "T=1.7");
    sp.temperature = 0.6f;
    check_distribution(l, N_SMALL, sp, DRAWS, 3, "T=0.6");
}

Test(sampler, top_k_matches_renormalised_top_k) {
    float l[N_SMALL];
    test_logits(l, N_SMALL);
    EmxSamplerParams sp = {.temperature = 1.0f, .top_k = 5, .top_p = 1.0f, .min_p = 0.0f};
    check_distribution(l, N_SMALL, sp, DRAWS, 4, "top-k 5");
    sp.top_k = 12;
    sp.temperature = 1.4f;
    check_distribution(l, N_SMALL, sp, DRAWS, 5, "top-k 12 T=1.4");
}

Test(sampler, top_p_matches_nucleus) {
    float l[N_SMALL];
    test_logits(l, N_SMALL);
    EmxSamplerParams sp = {.temperature = 1.0f, .top_k = 0, .top_p = 0.8f, .min_p = 0.0f};
    check_distribution(l, N_SMALL, sp, DRAWS, 6, "top-p 0.8");
    sp.top_p = 0.95f;
    sp.temperature = 0.7f;
    check_distribution(l, N_SMALL, sp, DRAWS, 7, "top-p 0.95 T=0.7");
}

Test(sampler, min_p_matches_threshold) {
    float l[N_SMALL];
    test_logits(l, N_SMALL);
    EmxSamplerParams sp = {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.1f};
    check_distribution(l, N_SMALL, sp, DRAWS, 8, "min-p 0.1");
    sp.min_p = 0.02f;
    sp.temperature = 1.3f;
    check_distribution(l, N_SMALL, sp, DRAWS, 9, "min-p 0.02 T=1.3");
}

Test(sampler, combined_in_llama_cpp_order) {
    float l[N_SMALL];
    test_logits(l, N_SMALL);
    EmxSamplerParams sp = {.temperature = 0.8f, .top_k = 10, .top_p = 0.9f, .min_p = 0.05f};
    check_distribution(l, N_SMALL, sp, DRAWS, 10, "k10 p0.9 min0.05 T0.8");
    sp = EMX_SAMPLER_PARAMS_DEFAULT;
    check_distribution(l, N_SMALL, sp, DRAWS, 11, "defaults");
    sp = (EmxSamplerParams){.temperature = 1.5f, .top_k = 20, .top_p = 0.7f, .min_p = 0.0f};
    check_distribution(l, N_SMALL, sp, DRAWS, 12, "k20 p0.7 T1.5");
}

Test(sampler, combined_temperature_first) {
    float l[N_SMALL];
    test_logits(l, N_SMALL);
    EmxSamplerParams sp = {.temperature = 2.0f, .top_k = 15, .top_p = 0.8f, .min_p = 0.1f,
                           .temperature_first = 1};
    check_distribution(l, N_SMALL, sp, DRAWS, 13, "T first, T=2");
    sp.temperature = 0.5f;
    check_distribution(l, N_SMALL, sp, DRAWS, 14, "T first, T=0.5");
    // The order matters: at T = 2 the nucleus is wider when temperature comes first.
    EmxCandidate *w = malloc(sizeof(EmxCandidate) * N_SMALL);
    EmxSamplerParams a = {.temperature = 2.0f, .top_k = 0, .top_p = 0.8f, .min_p = 0.0f};
    EmxSamplerParams b = a;
    b.temperature_first = 1;
    int ma = emx_sample_distribution(l, N_SMALL, &a, w);
    int mb = emx_sample_distribution(l, N_SMALL, &b, w);
    cr_expect(mb > ma, "nucleus %d (T first) vs %d (T last)", mb, ma);
    free(w);
}

// A flat-ish vocabulary of 300: the nucleus (about 270 tokens) exceeds the first selection
// size (64) and the second (256), so the growing search must continue to the whole vocabulary.
Test(sampler, top_p_nucleus_larger_than_first_selection) {
    enum { N = 300 };
    float l[N];
    for (int i = 0; i < N; i++) l[i] = (float)(0.5 * emx_uniform_f64(77, (uint64_t)i, 0));
    EmxSamplerParams sp = {.temperature = 1.0f, .top_k = 0, .top_p = 0.9f, .min_p = 0.0f};
    double prob[N];
    int kept = reference(l, N, sp, prob);
    cr_assert(kept > 256, "test needs a nucleus over 256 tokens, has %d", kept);
    check_distribution(l, N, sp, 40000, 15, "flat top-p 0.9");
    sp.top_p = 0.2f;  // about 55 tokens: found within the first selection
    check_distribution(l, N, sp, 40000, 16, "flat top-p 0.2");
}

// ---------------------------------------------------------------------------------------------
// Exact cases.

// logits ln(0.5), ln(0.3), ln(0.2): softmax = (0.5, 0.3, 0.2).
static void three_way(float l[3]) {
    l[0] = logf(0.5f);
    l[1] = logf(0.3f);
    l[2] = logf(0.2f);
}

static int kept_ids(const float *l, int n, EmxSamplerParams sp, int *ids) {
    EmxCandidate w[64];
    int m = emx_sample_distribution(l, n, &sp, w);
    for (int i = 0; i < m; i++) ids[i] = w[i].id;
    return m;
}

Test(sampler, top_p_nucleus_is_from_the_most_likely_end) {
    float l[3];
    three_way(l);
    int ids[3];
    EmxSamplerParams sp = {.temperature = 1.0f, .top_k = 0, .top_p = 0.45f, .min_p = 0.0f};
    cr_expect_eq(kept_ids(l, 3, sp, ids), 1);
    cr_expect_eq(ids[0], 0);
    sp.top_p = 0.55f;  // 0.5 < 0.55 <= 0.8: the two most likely, not the two least likely
    cr_assert_eq(kept_ids(l, 3, sp, ids), 2);
    cr_expect(ids[0] == 0 && ids[1] == 1);
    sp.top_p = 0.85f;
    cr_expect_eq(kept_ids(l, 3, sp, ids), 3);
    sp.top_p = 0.0f;  // always at least one token
    cr_expect_eq(kept_ids(l, 3, sp, ids), 1);
    cr_expect_eq(ids[0], 0);
}

Test(sampler, min_p_filters_and_renormalises) {
    float l[3];
    three_way(l);
    EmxCandidate w[3];
    EmxSamplerParams sp = {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.5f};
    int m = emx_sample_distribution(l, 3, &sp, w);  // keep p >= 0.25: tokens 0 and 1
    cr_assert_eq(m, 2);
    cr_expect(fabs(w[0].p - 0.625) < 1e-6 && fabs(w[1].p - 0.375) < 1e-6, "%g %g", w[0].p,
              w[1].p);
    for (int d = 0; d < 2000; d++)  // and token 2 is never drawn
        cr_assert_neq(emx_sample(l, 3, &sp, emx_uniform_f64(5, (uint64_t)d, 0), w), 2);
    sp.min_p = 0.7f;  // p >= 0.35: token 0 only
    cr_expect_eq(emx_sample_distribution(l, 3, &sp, w), 1);
    sp.min_p = 0.3f;  // p >= 0.15: all
    cr_expect_eq(emx_sample_distribution(l, 3, &sp, w), 3);
    sp.min_p = 5.0f;  // beyond 1: still the best token
    cr_expect_eq(emx_sample_distribution(l, 3, &sp, w), 1);
    cr_expect_eq(w[0].id, 0);
}

Test(sampler, inverse_cdf_is_exact) {
    float l[2] = {0.0f, logf(3.0f)};  // p = (0.25, 0.75)
    EmxCandidate w[2];
    EmxSamplerParams sp = {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f};
    cr_expect_eq(emx_sample(l, 2, &sp, 0.0, w), 0);
    cr_expect_eq(emx_sample(l, 2, &sp, 0.2499, w), 0);
    cr_expect_eq(emx_sample(l, 2, &sp, 0.2501, w), 1);
    cr_expect_eq(emx_sample(l, 2, &sp, 0.9999999999, w), 1);
    // Zero-probability entries are skipped even at u = 0.
    EmxCandidate c[3] = {{.id = 7, .p = 0.0}, {.id = 8, .p = 1.0}, {.id = 9, .p = 0.0}};
    cr_expect_eq(emx_sample_draw(c, 3, 0.0), 8);
    cr_expect_eq(emx_sample_draw(c, 3, 0.999999), 8);
    cr_expect_eq(emx_sample_draw(c, 0, 0.5), -1);
}

Test(sampler, greedy_ties_take_the_lowest_id) {
    float l[6] = {1.0f, 5.0f, -2.0f, 5.0f, 4.0f, 5.0f};
    cr_expect_eq(emx_sample_argmax(l, 6), 1);
    EmxCandidate w[6];
    EmxSamplerParams greedy = {.temperature = 0.0f, .top_k = 40, .top_p = 0.9f, .min_p = 0.1f};
    for (int d = 0; d < 50; d++)
        cr_expect_eq(emx_sample(l, 6, &greedy, emx_uniform_f64(9, (uint64_t)d, 0), w), 1);
    EmxSamplerParams k1 = {.temperature = 1.0f, .top_k = 1, .top_p = 1.0f, .min_p = 0.0f};
    cr_expect_eq(emx_sample(l, 6, &k1, 0.99, w), 1);
    // top-k 2 among three tied maxima keeps the two lowest ids, each with probability 1/2.
    EmxSamplerParams k2 = {.temperature = 1.0f, .top_k = 2, .top_p = 1.0f, .min_p = 0.0f};
    int m = emx_sample_distribution(l, 6, &k2, w);
    cr_assert_eq(m, 2);
    cr_expect(w[0].id == 1 && w[1].id == 3 && w[0].p == 0.5 && w[1].p == 0.5);
}

Test(sampler, minus_infinity_and_nan_are_never_chosen) {
    float l[5] = {-INFINITY, NAN, 0.0f, -INFINITY, NAN};
    EmxCandidate w[5];
    EmxSamplerParams sps[] = {
        {.temperature = 0.0f},
        {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f},
        {.temperature = 1.0f, .top_k = 3, .top_p = 0.5f, .min_p = 0.1f},
        {.temperature = 3.0f, .top_k = 0, .top_p = 0.99f},
        {.temperature = 3.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.01f},
    };
    for (size_t s = 0; s < sizeof sps / sizeof sps[0]; s++) {
        for (int d = 0; d < 20; d++) {
            int t = emx_sample(l, 5, &sps[s], emx_uniform_f64(3, (uint64_t)d, 0), w);
            cr_expect_eq(t, 2, "params %zu: token %d", s, t);
        }
        int m = emx_sample_distribution(l, 5, &sps[s], w);
        cr_expect(m == 1 && w[0].p == 1.0, "params %zu: m %d p %g", s, m, w[0].p);
    }
    // Nothing choosable at all: -1, for every sampler.
    float none[3] = {-INFINITY, NAN, -INFINITY};
    cr_expect_eq(emx_sample_argmax(none, 3), -1);
    for (size_t s = 0; s < sizeof sps / sizeof sps[0]; s++)
        cr_expect_eq(emx_sample(none, 3, &sps[s], 0.5, w), -1);
    cr_expect_eq(emx_sample(none, 0, &sps[1], 0.5, w), -1);
}

Test(sampler, plus_infinity_shares_the_mass) {
    float l[4] = {0.0f, INFINITY, 3.0f, INFINITY};
    EmxCandidate w[4];
    EmxSamplerParams sp = {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f};
    int m = emx_sample_distribution(l, 4, &sp, w);
    cr_assert_eq(m, 2);
    cr_expect(w[0].id == 1 && w[1].id == 3 && w[0].p == 0.5 && w[1].p == 0.5);
    for (int k = 0; k < m; k++) cr_expect(!isnan(w[k].p));
    cr_expect_eq(emx_sample_argmax(l, 4), 1);
}

Test(sampler, one_hot_and_extreme_logits_give_no_nan) {
    enum { N = 50 };
    float l[N];
    for (int i = 0; i < N; i++) l[i] = -1e30f;
    l[7] = 1e30f;
    EmxCandidate w[N];
    EmxSamplerParams sps[] = {
        {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f},
        {.temperature = 100.0f, .top_k = 0, .top_p = 0.9f},
        {.temperature = 1e-6f, .top_k = 5, .top_p = 0.5f, .min_p = 0.2f},
        {.temperature = 0.5f, .top_k = 0, .top_p = 1.0f, .min_p = 0.05f},
    };
    for (size_t s = 0; s < sizeof sps / sizeof sps[0]; s++) {
        int m = emx_sample_distribution(l, N, &sps[s], w);
        for (int i = 0; i < m; i++) cr_expect(!isnan(w[i].p), "params %zu entry %d", s, i);
        cr_expect_eq(emx_sample(l, N, &sps[s], 0.999999999, w), 7, "params %zu", s);
        cr_expect_eq(emx_sample(l, N, &sps[s], 0.0, w), 7, "params %zu", s);
    }
    // A true one-hot over finite values: 100 nats apart.
    for (int i = 0; i < N; i++) l[i] = 0.0f;
    l[31] = 100.0f;
    EmxSamplerParams t1 = {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f};
    for (int d = 0; d < 100; d++)
        cr_expect_eq(emx_sample(l, N, &t1, emx_uniform_f64(4, (uint64_t)d, 0), w), 31);
}

Test(sampler, degenerate_parameters_are_off) {
    float l[N_SMALL];
    test_logits(l, N_SMALL);
    EmxCandidate a[N_SMALL], b[N_SMALL];
    EmxSamplerParams plain = {.temperature = 0.9f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f};
    int m_plain = emx_sample_distribution(l, N_SMALL, &plain, a);
    cr_expect_eq(m_plain, N_SMALL - 3, "all finite tokens");  // 2 -inf, 1 NaN
    // top_k beyond the vocabulary, top_p above 1, min_p below 0: each the same as off.
    EmxSamplerParams alts[] = {
        {.temperature = 0.9f, .top_k = N_SMALL, .top_p = 1.0f},
        {.temperature = 0.9f, .top_k = 1000, .top_p = 1.0f},
        {.temperature = 0.9f, .top_k = -1, .top_p = 1.0f},
        {.temperature = 0.9f, .top_k = 0, .top_p = 1.5f},
        {.temperature = 0.9f, .top_k = 0, .top_p = 1.0f, .min_p = -0.5f},
    };
    double pa[N_SMALL] = {0};
    for (int i = 0; i < m_plain; i++) pa[a[i].id] = a[i].p;
    for (size_t s = 0; s < sizeof alts / sizeof alts[0]; s++) {
        int m = emx_sample_distribution(l, N_SMALL, &alts[s], b);
        cr_expect_eq(m, m_plain, "params %zu", s);
        for (int i = 0; i < m; i++)
            cr_expect(fabs(b[i].p - pa[b[i].id]) < 1e-15, "params %zu id %d", s, b[i].id);
    }
    // temperature 0 (and negative, NaN) = greedy.
    int best = emx_sample_argmax(l, N_SMALL);
    float temps[] = {0.0f, -1.0f, NAN};
    for (int t = 0; t < 3; t++) {
        EmxSamplerParams g = {.temperature = temps[t], .top_k = 0, .top_p = 1.0f};
        cr_expect_eq(emx_sample_distribution(l, N_SMALL, &g, b), 1);
        cr_expect_eq(b[0].id, best);
        cr_expect_eq(emx_sample(l, N_SMALL, &g, 0.7, b), best);
    }
}

Test(sampler, same_u_same_token) {
    float l[N_SMALL];
    test_logits(l, N_SMALL);
    EmxCandidate w[N_SMALL];
    EmxSamplerParams sp = EMX_SAMPLER_PARAMS_DEFAULT;
    for (int d = 0; d < 200; d++) {
        double u = emx_uniform_f64(123, (uint64_t)d, 0);
        cr_expect_eq(emx_sample(l, N_SMALL, &sp, u, w), emx_sample(l, N_SMALL, &sp, u, w));
    }
}
