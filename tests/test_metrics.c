// test_metrics.c — the entropix metrics (sampler/metrics.h) against closed forms (uniform,
// one-hot, two-point, geometric), the special inputs (-inf, NaN, +inf, ±1e30), and reference
// values computed from the definitions with mpmath at 40 digits by tools/gen_metrics_reference.py
// (tests/data/metrics/reference.json), for logits and for attention score rows. The one-pass
// and two-pass logits versions, and merged partial statistics, are compared with each other.
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sampler/metrics.h"
#include "sampler/philox.h"
#include "test_util.h"

// |got - want| within rel·|want| + abs, NaN never passes.
static void expect_near(double got, double want, double rel, double abs_tol, const char *what) {
    cr_expect(fabs(got - want) <= rel * fabs(want) + abs_tol, "%s: got %.17g, want %.17g", what,
              got, want);
}

static void entropy_of(const float *l, int n, double *h, double *v) {
    EmxMetrics m;
    emx_logits_metrics(l, n, &m);
    *h = m.logits_entropy_bits;
    *v = m.logits_varentropy_bits2;
}

// Both logits versions against one expected (H, V).
static void expect_logits(const float *l, int n, double h, double v, double rel, double abs_tol,
                          const char *what) {
    double h1, v1, h2, v2;
    entropy_of(l, n, &h1, &v1);
    emx_logits_entropy_reference(l, n, &h2, &v2);
    char buf[160];
    snprintf(buf, sizeof buf, "%s one-pass H", what);
    expect_near(h1, h, rel, abs_tol, buf);
    snprintf(buf, sizeof buf, "%s one-pass V", what);
    expect_near(v1, v, rel, abs_tol, buf);
    snprintf(buf, sizeof buf, "%s two-pass H", what);
    expect_near(h2, h, rel, abs_tol, buf);
    snprintf(buf, sizeof buf, "%s two-pass V", what);
    expect_near(v2, v, rel, abs_tol, buf);
}

// Standard normal-ish floats from Philox (Box-Muller), seeded per test.
static float gauss(uint64_t seed, uint64_t i) {
    double u1 = emx_uniform_f64(seed, i, 0), u2 = emx_uniform_f64(seed, i, 1);
    return (float)(sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2));
}

// ---------------------------------------------------------------------------------------------
// Closed forms.

Test(metrics, uniform_is_log2_n) {
    int sizes[] = {1, 2, 7, 1000, 151936};
    for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++) {
        int n = sizes[t];
        float *l = malloc(sizeof(float) * n);
        for (int i = 0; i < n; i++) l[i] = 3.25f;
        // 1e-11: the two-pass reference sums n equal terms plainly (n·eps at worst)
        expect_logits(l, n, log2((double)n), 0.0, 1e-11, 1e-13, "uniform");
        free(l);
    }
}

Test(metrics, one_hot_is_zero) {
    float l[5] = {-INFINITY, -INFINITY, 4.0f, -INFINITY, -INFINITY};
    expect_logits(l, 5, 0.0, 0.0, 0, 0, "one finite logit");
    float far[4] = {0.0f, 1000.0f, 0.0f, -5.0f};  // e^-1000 underflows to exactly 0
    expect_logits(far, 4, 0.0, 0.0, 0, 0, "one logit 1000 above the rest");
    float huge[3] = {-1e30f, 1e30f, -1e30f};
    expect_logits(huge, 3, 0.0, 0.0, 0, 0, "±1e30");
}

Test(metrics, two_point_closed_form) {
    float gaps[] = {0.0f, 0.5f, 1.0f, 3.0f, 10.0f, 30.0f};
    for (size_t t = 0; t < sizeof gaps / sizeof gaps[0]; t++) {
        float l[2] = {1.5f, 1.5f - gaps[t]};
        double d = gaps[t], p = 1.0 / (1.0 + exp(-d)), q = 1.0 - p;
        q = exp(-d) / (1.0 + exp(-d));  // not 1 - p: keeps q's digits when it is tiny
        double h = -(p * log2(p) + q * log2(q));
        double v = p * q * (d / EMX_LN2) * (d / EMX_LN2);  // log2(p/q) = d / ln 2
        expect_logits(l, 2, h, v, 1e-12, 1e-15, "two-point");
    }
}

// p_i ∝ r^i, r = e^{-λ}, i = 0..n-1 with r^n negligible: a geometric distribution. Surprisal
// (nats) = -ln(1-r) + λ i, so H = -ln(1-r) + λ r/(1-r), V = λ² r/(1-r)². λ is a power of two
// so every logit -λ i is exact in float.
Test(metrics, geometric_closed_form) {
    struct { double lambda; int n; } cases[] = {{1.0 / 64, 8192}, {0.5, 200}, {4.0, 40}};
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        double lam = cases[t].lambda, r = exp(-lam);
        int n = cases[t].n;
        float *l = malloc(sizeof(float) * n);
        for (int i = 0; i < n; i++) l[(i * 7919) % n] = (float)(-lam * i);  // shuffled order
        double h = (-log1p(-r) + lam * r / (1 - r)) / EMX_LN2;
        double v = lam * lam * r / ((1 - r) * (1 - r)) / (EMX_LN2 * EMX_LN2);
        expect_logits(l, n, h, v, 1e-11, 1e-14, "geometric");
        free(l);
    }
}

Test(metrics, neg_inf_and_nan_take_no_probability) {
    float l[8] = {2.0f, -INFINITY, 2.0f, NAN, 2.0f, -INFINITY, 2.0f, NAN};
    expect_logits(l, 8, 2.0, 0.0, 1e-14, 1e-14, "4 equal finite among -inf/NaN");
    EmxMetrics m;
    cr_expect_eq(emx_logits_metrics(l, 8, &m), 4, "4 tokens can be chosen");
    float none[3] = {-INFINITY, NAN, -INFINITY};
    cr_expect_eq(emx_logits_metrics(none, 3, &m), 0);
    cr_expect(m.logits_entropy_bits == 0.0 && m.logits_varentropy_bits2 == 0.0);
    cr_expect(m.logits_lse_nats == -INFINITY);
    double h, v;
    cr_expect_eq(emx_logits_entropy_reference(none, 3, &h, &v), 0);
    cr_expect(h == 0.0 && v == 0.0);
    cr_expect_eq(emx_logits_metrics(none, 0, &m), 0, "empty row");
}

Test(metrics, pos_inf_logits_share_the_mass) {
    float l[4] = {INFINITY, 0.0f, INFINITY, -3.0f};
    expect_logits(l, 4, 1.0, 0.0, 1e-15, 0, "two +inf");
}

Test(metrics, huge_magnitudes_no_nan) {
    // Two equal maxima at 1e30, the rest 2e30 below: exactly two equally likely tokens.
    float l[5] = {1e30f, -1e30f, 1e30f, -3e38f, -1e30f};
    expect_logits(l, 5, 1.0, 0.0, 1e-15, 1e-15, "two at 1e30");
    // Extremes of float with a spread that is ordinary relative to the max.
    float big[3] = {3e38f, 3e38f, 3e38f};
    expect_logits(big, 3, log2(3.0), 0.0, 1e-14, 1e-14, "uniform at 3e38");
    float mixed[4] = {-3.4e38f, 3.4e38f, -3.4e38f, 0.0f};
    expect_logits(mixed, 4, 0.0, 0.0, 0, 0, "±3.4e38");
}

Test(metrics, lse_gives_log_probabilities) {
    float l[3] = {1.0f, 2.0f, 3.0f};
    EmxMetrics m;
    emx_logits_metrics(l, 3, &m);
    double lse = log(exp(1.0) + exp(2.0) + exp(3.0));
    expect_near(m.logits_lse_nats, lse, 1e-15, 0, "lse");
}

// ---------------------------------------------------------------------------------------------
// One pass against two passes, and merged partial statistics against the whole row.

Test(metrics, one_pass_equals_two_pass_on_vocab_rows) {
    int n = 151936;
    float *l = malloc(sizeof(float) * n);
    float scales[] = {0.1f, 1.0f, 4.0f, 30.0f};
    for (int s = 0; s < 4; s++) {
        for (int i = 0; i < n; i++) l[i] = scales[s] * gauss(77 + s, i);
        l[n / 3] = -INFINITY;
        double h1, v1, h2, v2;
        entropy_of(l, n, &h1, &v1);
        emx_logits_entropy_reference(l, n, &h2, &v2);
        expect_near(h1, h2, 1e-11, 1e-13, "H one vs two pass");
        expect_near(v1, v2, 1e-9, 1e-12, "V one vs two pass");
    }
    free(l);
}

static void expect_same_stats(EmxSoftmaxStats a, EmxSoftmaxStats b, const char *what) {
    char buf[128];
    snprintf(buf, sizeof buf, "%s entropy", what);
    expect_near(emx_softmax_stats_entropy_nats(a), emx_softmax_stats_entropy_nats(b), 1e-12,
                1e-14, buf);
    snprintf(buf, sizeof buf, "%s varentropy", what);
    expect_near(emx_softmax_stats_varentropy_nats2(a), emx_softmax_stats_varentropy_nats2(b),
                1e-10, 1e-13, buf);
    snprintf(buf, sizeof buf, "%s lse", what);
    expect_near(emx_softmax_stats_lse(a), emx_softmax_stats_lse(b), 1e-14, 1e-14, buf);
}

Test(metrics, merged_partials_equal_whole_row) {
    int n = 5000;
    float *l = malloc(sizeof(float) * n);
    for (int trial = 0; trial < 20; trial++) {
        for (int i = 0; i < n; i++) l[i] = (1.0f + trial) * gauss(1000 + trial, i);
        if (trial % 3 == 0) l[trial * 17] = -INFINITY;
        EmxSoftmaxStats whole = emx_softmax_stats_row(l, n);
        // Split at random points into up to 8 chunks; merge left to right and as a tree.
        int cuts[9] = {0}, nc = 1 + trial % 8;
        for (int c = 1; c < nc; c++) cuts[c] = (int)(emx_uniform_f64(trial, c, 2) * n);
        cuts[nc] = n;
        for (int a = 1; a < nc; a++)  // sort the cut points
            for (int b = a; b > 0 && cuts[b] < cuts[b - 1]; b--) {
                int t = cuts[b];
                cuts[b] = cuts[b - 1];
                cuts[b - 1] = t;
            }
        EmxSoftmaxStats parts[8], seq = emx_softmax_stats_empty();
        for (int c = 0; c < nc; c++) {
            parts[c] = emx_softmax_stats_row(l + cuts[c], cuts[c + 1] - cuts[c]);  // may be empty
            seq = emx_softmax_stats_merge(seq, parts[c]);
        }
        for (int width = 1; width < nc; width *= 2)  // pairwise, like a split-K reduction
            for (int c = 0; c + width < nc; c += 2 * width)
                parts[c] = emx_softmax_stats_merge(parts[c + width], parts[c]);  // reversed order
        expect_same_stats(seq, whole, "sequential merge");
        expect_same_stats(parts[0], whole, "tree merge");
    }
    free(l);
}

Test(metrics, merge_with_empty_and_inf) {
    float l[3] = {0.5f, -1.0f, 2.0f};
    EmxSoftmaxStats a = emx_softmax_stats_row(l, 3), e = emx_softmax_stats_empty();
    expect_same_stats(emx_softmax_stats_merge(a, e), a, "a+empty");
    expect_same_stats(emx_softmax_stats_merge(e, a), a, "empty+a");
    EmxSoftmaxStats ee = emx_softmax_stats_merge(e, e);
    cr_expect(emx_softmax_stats_entropy_nats(ee) == 0.0 && !isnan(ee.sum_et2));
    float inf[2] = {INFINITY, 1.0f};
    EmxSoftmaxStats b = emx_softmax_stats_merge(a, emx_softmax_stats_row(inf, 2));
    cr_expect(b.n_posinf == 1 && emx_softmax_stats_entropy_nats(b) == 0.0);
}

// ---------------------------------------------------------------------------------------------
// Against the mpmath reference.

static cJSON *load_reference(void) {
    char *text = test_read_file("tests/data/metrics/reference.json", NULL);
    cr_assert_not_null(text, "tests/data/metrics/reference.json (run from the repo root)");
    cJSON *doc = cJSON_Parse(text);
    free(text);
    cr_assert_not_null(doc, "reference.json parses");
    return doc;
}

static float json_f32(const cJSON *x) {
    if (cJSON_IsString(x) && strcmp(x->valuestring, "-inf") == 0) return -INFINITY;
    return (float)x->valuedouble;  // the exact double of a float32: converts back exactly
}

static double num(const cJSON *obj, const char *key) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(obj, key);
    cr_assert(cJSON_IsNumber(x), "reference field %s", key);
    return x->valuedouble;
}

Test(metrics, logits_against_mpmath) {
    cJSON *doc = load_reference();
    const cJSON *c;
    int count = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(doc, "logits")) {
        const cJSON *arr = cJSON_GetObjectItem(c, "logits");
        int n = cJSON_GetArraySize(arr), i = 0;
        float *l = malloc(sizeof(float) * n);
        const cJSON *x;
        cJSON_ArrayForEach(x, arr) l[i++] = json_f32(x);
        expect_logits(l, n, num(c, "entropy_bits"), num(c, "varentropy_bits2"), 1e-10, 1e-13,
                      cJSON_GetObjectItem(c, "name")->valuestring);
        free(l);
        count++;
    }
    cr_expect_eq(count, 5, "all logits cases read");
    cJSON_Delete(doc);
}

static const char *const layer_keys[5] = {"entropy_bits", "varentropy_heads_bits2",
                                          "varentropy_true_bits2", "agreement",
                                          "interaction_strength"};

static void expect_layer(const EmxAttnLayerMetrics *got, const cJSON *want, const char *what) {
    double g[5] = {got->entropy_bits, got->varentropy_heads_bits2, got->varentropy_true_bits2,
                   got->agreement, got->interaction_strength};
    for (int k = 0; k < 5; k++) {
        char buf[160];
        snprintf(buf, sizeof buf, "%s %s", what, layer_keys[k]);
        expect_near(g[k], num(want, layer_keys[k]), 1e-10, 1e-13, buf);
    }
}

static void expect_metrics_attn(const EmxMetrics *m, const cJSON *want, const char *what) {
    EmxAttnLayerMetrics g = {m->attn_entropy_bits, m->attn_varentropy_heads_bits2,
                             m->attn_varentropy_true_bits2, m->attn_agreement,
                             m->attn_interaction_strength};
    expect_layer(&g, want, what);
}

Test(metrics, attention_against_mpmath) {
    cJSON *doc = load_reference();
    const cJSON *c;
    int count = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(doc, "attention")) {
        const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
        int nl = (int)num(c, "n_layers"), nh = (int)num(c, "n_heads"), len = (int)num(c, "valid_len");
        int stride = len + 5;  // like the forward pass: rows of ctx, only valid_len of them read
        float *s = malloc(sizeof(float) * nl * nh * stride);
        for (int i = 0; i < nl * nh * stride; i++) s[i] = NAN;  // any read past valid_len shows
        const cJSON *layer, *head, *x;
        int l = 0;
        cJSON_ArrayForEach(layer, cJSON_GetObjectItem(c, "scores")) {
            int h = 0;
            cJSON_ArrayForEach(head, layer) {
                int k = 0;
                cJSON_ArrayForEach(x, head) s[((long)l * nh + h) * stride + k++] = json_f32(x);
                h++;
            }
            l++;
        }
        double *scratch = malloc(sizeof(double) * len), *he = malloc(sizeof(double) * nh),
               *hv = malloc(sizeof(double) * nh);
        const cJSON *want_layers = cJSON_GetObjectItem(c, "layers");
        for (l = 0; l < nl; l++) {
            const cJSON *want = cJSON_GetArrayItem(want_layers, l);
            EmxAttnLayerMetrics got;
            cr_assert_eq(emx_attention_layer_metrics(s + (long)l * nh * stride, nh, stride, len,
                                                     scratch, he, hv, &got), 0);
            expect_layer(&got, want, name);
            for (int h = 0; h < nh; h++) {
                expect_near(he[h], cJSON_GetArrayItem(cJSON_GetObjectItem(want, "head_entropy_bits"), h)->valuedouble, 1e-10, 1e-13, "head entropy");
                expect_near(hv[h], cJSON_GetArrayItem(cJSON_GetObjectItem(want, "head_varentropy_bits2"), h)->valuedouble, 1e-10, 1e-13, "head varentropy");
            }
        }
        // The layer selections of emx_attention_metrics.
        EmxMetrics m;
        cr_assert_eq(emx_attention_metrics(s, nl, nh, stride, len, EMX_ATTN_LAYER_LAST, scratch, &m), 0);
        expect_metrics_attn(&m, cJSON_GetArrayItem(want_layers, nl - 1), "last layer");
        cr_assert_eq(emx_attention_metrics(s, nl, nh, stride, len, EMX_ATTN_LAYERS_ALL, scratch, &m), 0);
        expect_metrics_attn(&m, cJSON_GetObjectItem(c, "all_layers"), "all layers");
        cr_assert_eq(emx_attention_metrics(s, nl, nh, stride, len, 0, scratch, &m), 0);
        expect_metrics_attn(&m, cJSON_GetArrayItem(want_layers, 0), "layer 0");
        cr_expect_eq(emx_attention_metrics(s, nl, nh, stride, len, nl, scratch, &m), -1,
                     "layer out of range");
        free(s);
        free(scratch);
        free(he);
        free(hv);
        count++;
    }
    cr_expect_eq(count, 4, "all attention cases read");
    cJSON_Delete(doc);
}

Test(metrics, attention_equal_heads_and_bad_dims) {
    // Every head the same uniform row: entropy log2 n, no spread, perfect agreement.
    float s[3 * 4];
    for (int i = 0; i < 12; i++) s[i] = -0.75f;
    double scratch[4];
    EmxAttnLayerMetrics m;
    cr_assert_eq(emx_attention_layer_metrics(s, 3, 4, 4, scratch, NULL, NULL, &m), 0);
    expect_near(m.entropy_bits, 2.0, 1e-15, 0, "entropy");
    cr_expect(m.varentropy_heads_bits2 == 0.0 && m.varentropy_true_bits2 == 0.0);
    cr_expect(m.agreement == 0.0);
    expect_near(m.interaction_strength, 0.75, 1e-15, 0, "interaction strength");
    cr_expect_eq(emx_attention_layer_metrics(s, 0, 4, 4, scratch, NULL, NULL, &m), -1);
    cr_expect_eq(emx_attention_layer_metrics(s, 3, 4, 0, scratch, NULL, NULL, &m), -1);
    cr_expect_eq(emx_attention_layer_metrics(s, 3, 3, 4, scratch, NULL, NULL, &m), -1);
    EmxMetrics mm;
    cr_expect_eq(emx_attention_metrics(s, 0, 3, 4, 4, EMX_ATTN_LAYER_LAST, scratch, &mm), -1);
    cr_expect_eq(emx_attention_metrics(s, 1, 3, 4, 4, -3, scratch, &mm), -1);
}

Test(metrics, attention_two_opposite_heads) {
    // Head 0 all on key 0, head 1 all on key 1 (scores 0 vs -inf-like): mean row (½, ½),
    // each head deviates by ½ on both keys -> agreement ½; entropies 0 -> no spread.
    float s[2 * 2] = {100.0f, -100.0f, -100.0f, 100.0f};
    double scratch[2];
    EmxAttnLayerMetrics m;
    cr_assert_eq(emx_attention_layer_metrics(s, 2, 2, 2, scratch, NULL, NULL, &m), 0);
    expect_near(m.agreement, 0.5, 1e-12, 0, "agreement");
    expect_near(m.entropy_bits, 0.0, 0, 1e-80, "entropy");
    expect_near(m.interaction_strength, 100.0, 1e-15, 0, "interaction strength");
}
