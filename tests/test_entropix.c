// test_entropix.c — the classic entropix switch (sampler/entropix.h) on synthetic metrics: each
// case, values exactly on every threshold (all comparisons strict, as docs/entropix.md states),
// the first-match order, the insert-once rule over a sequence of steps, the effective
// parameters against values computed by hand from the spec's formulas, the best-of-N draws
// and score, the pause token of real tokenizers (the profile text format: test_profile_text.c).
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sampler/entropix.h"
#include "runtime/entropix_sampler.h"
#include "runtime/forward.h"
#include "runtime/pool/pool_forward.h"
#include "runtime/model.h"
#include "sampler/philox.h"
#include "sampler/profile.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"
#include "tools/convert/tokenizer_build.h"

#define PAUSE 2564  // any id; the switch does not care which

// Attention metrics fixed to values the hand computations below use.
static EmxMetrics metrics(double h, double v) {
    EmxMetrics m = {
        .logits_entropy_bits = h,
        .logits_varentropy_bits2 = v,
        .logits_lse_nats = 0.0,
        .attn_entropy_bits = 2.5,
        .attn_varentropy_heads_bits2 = 0.8,
        .attn_varentropy_true_bits2 = 3.0,
        .attn_agreement = 0.3,
        .attn_interaction_strength = 1.2,
    };
    return m;
}

static EmxDecision decide(double h, double v) {
    EmxProfile p;
    emx_profile_classic(&p);
    EmxMetrics m = metrics(h, v);
    EmxEntropixState st = {0};
    return emx_entropix_decide(&m, &p, &st, PAUSE);
}

static void expect_case(double h, double v, EmxCase want) {
    EmxDecision d = decide(h, v);
    cr_expect_eq(d.kase, want, "H=%g V=%g: got %s, want %s", h, v, emx_case_name(d.kase),
                 emx_case_name(want));
}

static void expect_params(EmxSamplerParams got, double t, int k, double p, double mp,
                          const char *what) {
    cr_expect(fabs(got.temperature - t) < 1e-5, "%s: T %.7g, want %.7g", what, got.temperature, t);
    cr_expect_eq(got.top_k, k, "%s: top_k %d, want %d", what, got.top_k, k);
    cr_expect(fabs(got.top_p - p) < 1e-6, "%s: top_p %.7g, want %.7g", what, got.top_p, p);
    cr_expect(fabs(got.min_p - mp) < 1e-7, "%s: min_p %.7g, want %.7g", what, got.min_p, mp);
}

// ---------------------------------------------------------------------------------------------
// Case selection.

Test(entropix, each_case) {
    expect_case(0.05, 0.05, EMX_CASE_LELV);
    expect_case(6.0, 0.05, EMX_CASE_HELV);
    expect_case(2.0, 6.0, EMX_CASE_LEHV);
    expect_case(6.0, 6.0, EMX_CASE_HEHV);
    expect_case(2.0, 2.0, EMX_CASE_ADAPTIVE);
    cr_expect_eq(decide(0.05, 0.05).action, EMX_ACTION_ARGMAX);
    cr_expect_eq(decide(2.0, 2.0).action, EMX_ACTION_BEST_OF_N);
    cr_expect_eq(decide(2.0, 2.0).n_samples, 5);
}

// Every comparison is strict: a value exactly on a threshold fails that condition.
Test(entropix, values_on_thresholds) {
    expect_case(0.1, 0.05, EMX_CASE_ADAPTIVE);   // H < 0.1 fails
    expect_case(0.05, 0.1, EMX_CASE_ADAPTIVE);   // V < 0.1 fails
    expect_case(5.0, 0.05, EMX_CASE_ADAPTIVE);   // HELV: H > 5 fails
    expect_case(6.0, 0.1, EMX_CASE_ADAPTIVE);    // HELV: V < 0.1 fails; nothing else matches
    expect_case(5.0, 6.0, EMX_CASE_HEHV);        // LEHV: H < 5 fails; HEHV: 5 > 3, 6 > 5
    expect_case(2.0, 5.0, EMX_CASE_ADAPTIVE);    // LEHV: V > 5 fails
    expect_case(6.0, 5.0, EMX_CASE_ADAPTIVE);    // HEHV: V > 5 fails
    expect_case(3.0, 6.0, EMX_CASE_LEHV);        // H = 3 < 5
    expect_case(nextafter(0.1, 0), nextafter(0.1, 0), EMX_CASE_LELV);
    expect_case(nextafter(5.0, 6), nextafter(0.1, 0), EMX_CASE_HELV);
}

// First match wins: where two conditions hold, the earlier case is chosen.
Test(entropix, first_match_order) {
    expect_case(4.0, 6.0, EMX_CASE_LEHV);  // HEHV's condition (4 > 3, 6 > 5) holds too
    EmxProfile p;
    emx_profile_classic(&p);
    p.lelv_entropy_below = 10.0;  // now LELV's condition also holds at H = 6, V = 0.05
    EmxMetrics m = metrics(6.0, 0.05);
    EmxEntropixState st = {0};
    cr_expect_eq(emx_entropix_decide(&m, &p, &st, PAUSE).kase, EMX_CASE_LELV);
    emx_profile_classic(&p);
    p.lehv_varentropy_above = 0.0;  // LEHV's condition holds at H = 0.05, V = 0.05 too
    m = metrics(0.05, 0.05);
    cr_expect_eq(emx_entropix_decide(&m, &p, &st, PAUSE).kase, EMX_CASE_LELV);
    m = metrics(6.0, 0.05);  // HELV before LEHV/HEHV
    p.hehv_varentropy_above = 0.0;
    cr_expect_eq(emx_entropix_decide(&m, &p, &st, PAUSE).kase, EMX_CASE_HELV);
}

// ---------------------------------------------------------------------------------------------
// The pause token: at most once per run of consecutive HELV steps.

Test(entropix, insert_once_per_helv_run) {
    EmxProfile p;
    emx_profile_classic(&p);
    EmxEntropixState st = {0};
    struct { double h, v; EmxCase c; EmxAction a; } steps[] = {
        {6.0, 0.05, EMX_CASE_HELV, EMX_ACTION_INSERT},     // a run starts: insert
        {6.5, 0.02, EMX_CASE_HELV, EMX_ACTION_SAMPLE},     // same run: sample
        {7.0, 0.01, EMX_CASE_HELV, EMX_ACTION_SAMPLE},
        {2.0, 2.0, EMX_CASE_ADAPTIVE, EMX_ACTION_BEST_OF_N},  // the run ends
        {6.0, 0.05, EMX_CASE_HELV, EMX_ACTION_INSERT},     // a new run: insert again
        {0.01, 0.01, EMX_CASE_LELV, EMX_ACTION_ARGMAX},
        {6.0, 0.05, EMX_CASE_HELV, EMX_ACTION_INSERT},
        {6.0, 0.05, EMX_CASE_HELV, EMX_ACTION_SAMPLE},
    };
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        EmxMetrics m = metrics(steps[i].h, steps[i].v);
        EmxDecision d = emx_entropix_decide(&m, &p, &st, PAUSE);
        cr_expect_eq(d.kase, steps[i].c, "step %zu case", i);
        cr_expect_eq(d.action, steps[i].a, "step %zu action", i);
        if (d.action == EMX_ACTION_INSERT) cr_expect_eq(d.token, PAUSE);
        emx_entropix_state_update(&st, &d);
    }
}

Test(entropix, helv_without_pause_token_samples) {
    EmxProfile p;
    emx_profile_classic(&p);
    EmxEntropixState st = {0};
    EmxMetrics m = metrics(6.0, 0.05);
    cr_expect_eq(emx_entropix_decide(&m, &p, &st, -1).action, EMX_ACTION_SAMPLE, "no token");
    p.helv_insert_pause = 0;
    cr_expect_eq(emx_entropix_decide(&m, &p, &st, PAUSE).action, EMX_ACTION_SAMPLE, "disabled");
}

// ---------------------------------------------------------------------------------------------
// Effective parameters, computed by hand from the spec's formulas with the metrics above
// (attn_ent 2.5, attn_vent 0.8 across heads / 3.0 true, agreement 0.3, IS 1.2).

Test(entropix, helv_parameters) {
    EmxProfile p;
    emx_profile_classic(&p);
    EmxEntropixState st = {1};  // already inserted in this run
    EmxMetrics m = metrics(6.0, 0.05);
    // T = min(1.5, 0.666·(1.3 + 0.2·2.5)) = 0.666·1.8
    expect_params(emx_entropix_decide(&m, &p, &st, PAUSE).params, 1.1988, 27, 0.9, 0.03, "HELV");
    m.attn_entropy_bits = 10.0;  // 0.666·3.3 = 2.1978 -> capped at 1.5
    expect_params(emx_entropix_decide(&m, &p, &st, PAUSE).params, 1.5, 27, 0.9, 0.03, "HELV cap");
}

Test(entropix, lehv_parameters) {
    EmxProfile p;
    emx_profile_classic(&p);
    EmxEntropixState st = {0};
    EmxMetrics m = metrics(2.0, 6.0);
    // T = min(1.5, 0.666·(1.2 + 0.3·1.2)) = 0.666·1.56; top_k = int(27·(1 + 0.5·0.7)) = int(36.45)
    expect_params(emx_entropix_decide(&m, &p, &st, PAUSE).params, 1.03896, 36, 0.9, 0.03, "LEHV");
    m.attn_agreement = 1.9;  // int(27·0.55) = int(14.85) = 14 (truncation)
    m.attn_interaction_strength = 3.0;  // 0.666·2.1 = 1.3986
    expect_params(emx_entropix_decide(&m, &p, &st, PAUSE).params, 1.3986, 14, 0.9, 0.03, "LEHV 2");
    m.attn_agreement = 3.0;  // int(27·0) = 0 -> floor 5
    m.attn_interaction_strength = 5.0;  // 0.666·2.7 -> cap 1.5
    expect_params(emx_entropix_decide(&m, &p, &st, PAUSE).params, 1.5, 5, 0.9, 0.03, "LEHV 3");
}

Test(entropix, hehv_parameters) {
    EmxProfile p;
    emx_profile_classic(&p);
    EmxEntropixState st = {0};
    EmxMetrics m = metrics(6.0, 6.0);
    // T = max(2.0, 0.666·(2 + 0.5·0.8)) = max(2, 1.5984); top_p = max(0.5, 0.9 - 0.5) = 0.5
    expect_params(emx_entropix_decide(&m, &p, &st, PAUSE).params, 2.0, 27, 0.5, 0.03, "HEHV");
    m.attn_varentropy_heads_bits2 = 5.0;  // 0.666·4.5 = 2.997
    m.attn_entropy_bits = 1.0;            // 0.9 - 0.2 = 0.7
    expect_params(emx_entropix_decide(&m, &p, &st, PAUSE).params, 2.997, 27, 0.7, 0.03, "HEHV 2");
    p.attn_varentropy_def = EMX_ATTN_VARENTROPY_TRUE;  // reads 3.0: 0.666·3.5 = 2.331
    expect_params(emx_entropix_decide(&m, &p, &st, PAUSE).params, 2.331, 27, 0.7, 0.03, "HEHV true");
}

Test(entropix, adaptive_parameters) {
    EmxProfile p;
    emx_profile_classic(&p);
    EmxEntropixState st = {0};
    EmxMetrics m = metrics(2.0, 1.5);
    // lu = 3.5, au = 2.5 + 0.8 = 3.3
    // T = 0.666·(1 + 0.3·3.5 + 0.2·3.3 - 0.2·0.3) = 0.666·2.65 = 1.7649
    // top_p = clip(0.9·(1 + 0.1·0.8), 0.1, 1) = 0.972
    // top_k = clip(round(27·(1 + 0.3·1.2 - 0.2·0.3)), 1, 100) = round(35.1) = 35
    // min_p = clip(0.03·(1 - 0.5·3.5), 0.01, 0.5) = 0.01
    EmxDecision d = emx_entropix_decide(&m, &p, &st, PAUSE);
    expect_params(d.params, 1.7649, 35, 0.972, 0.01, "ADAPTIVE");
    cr_expect_eq(d.n_samples, 5);
    // True varentropy 3.0: au = 5.5, T = 0.666·3.09 = 2.05794, top_p = clip(0.9·1.3) = 1
    p.attn_varentropy_def = EMX_ATTN_VARENTROPY_TRUE;
    expect_params(emx_entropix_decide(&m, &p, &st, PAUSE).params, 2.05794, 35, 1.0, 0.01,
                  "ADAPTIVE true");
    // Small uncertainty: H 0.2, V 0.05 -> lu 0.25: min_p = 0.03·0.875 = 0.02625;
    // T = 0.666·(1 + 0.075 + 0.2·5.5 - 0.06) = 0.666·2.115 = 1.40859
    m = metrics(0.2, 0.05);
    m.attn_interaction_strength = 20.0;  // 27·(1 + 6 - 0.06) = 187.38 -> clipped to 100
    expect_params(emx_entropix_decide(&m, &p, &st, PAUSE).params, 1.40859, 100, 1.0, 0.02625,
                  "ADAPTIVE 2");
}

// temp_max caps the temperature of every sampling case, after the case's own formula and
// bounds; 0 leaves each case's value (classic). Values by hand with the metrics above.
Test(entropix, temp_max_caps_every_case) {
    EmxProfile p;
    emx_profile_classic(&p);
    cr_expect_eq(p.temp_max, 0.0, "classic has no cap");
    struct { double h, v, uncapped; int k; double top_p, min_p; const char *what; } cases[] = {
        {6.0, 0.05, 1.1988, 27, 0.9, 0.03, "HELV"},     // min(1.5, 0.666·1.8)
        {2.0, 6.0, 1.03896, 36, 0.9, 0.03, "LEHV"},     // min(1.5, 0.666·1.56)
        {6.0, 6.0, 2.0, 27, 0.5, 0.03, "HEHV"},         // max(2, 0.666·2.4): its floor
        {2.0, 1.5, 1.7649, 35, 0.972, 0.01, "ADAPTIVE"},// 0.666·2.65
    };
    EmxEntropixState inserted = {1};  // HELV samples
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        EmxMetrics m = metrics(cases[i].h, cases[i].v);
        p.temp_max = 0.0;
        expect_params(emx_entropix_decide(&m, &p, &inserted, PAUSE).params, cases[i].uncapped, cases[i].k,
                      cases[i].top_p, cases[i].min_p, cases[i].what);
        p.temp_max = 1.0;  // every one of them is above 1: capped, nothing else moves
        expect_params(emx_entropix_decide(&m, &p, &inserted, PAUSE).params, 1.0, cases[i].k, cases[i].top_p,
                      cases[i].min_p, cases[i].what);
        p.temp_max = 5.0;  // above every one: unchanged
        expect_params(emx_entropix_decide(&m, &p, &inserted, PAUSE).params, cases[i].uncapped, cases[i].k,
                      cases[i].top_p, cases[i].min_p, cases[i].what);
    }
    p.temp_max = 1.0;
    EmxMetrics m = metrics(0.05, 0.05);
    EmxDecision d = emx_entropix_decide(&m, &p, &inserted, PAUSE);
    cr_expect(d.kase == EMX_CASE_LELV && d.action == EMX_ACTION_ARGMAX && d.params.temperature == 0.0f);
}

// The draws of each case: classic draws once in HELV, LEHV and HEHV (SAMPLE) and ada_n_samples
// times in ADAPTIVE; a case given n > 1 draws takes the best of them (BEST_OF_N, n); the pause
// and LELV are unaffected.
Test(entropix, draws_per_case) {
    EmxProfile p;
    emx_profile_classic(&p);
    EmxEntropixState inserted = {1}, fresh = {0};
    struct { double h, v; EmxCase c; int *key; } cases[] = {
        {6.0, 0.05, EMX_CASE_HELV, &p.helv_n_samples},
        {2.0, 6.0, EMX_CASE_LEHV, &p.lehv_n_samples},
        {6.0, 6.0, EMX_CASE_HEHV, &p.hehv_n_samples},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        EmxMetrics m = metrics(cases[i].h, cases[i].v);
        EmxDecision d = emx_entropix_decide(&m, &p, &inserted, PAUSE);
        cr_expect(d.kase == cases[i].c && d.action == EMX_ACTION_SAMPLE && d.n_samples == 1, "%s: classic",
                  emx_case_name(cases[i].c));
        *cases[i].key = 7;
        d = emx_entropix_decide(&m, &p, &inserted, PAUSE);
        cr_expect(d.action == EMX_ACTION_BEST_OF_N && d.n_samples == 7, "%s: 7 draws", emx_case_name(cases[i].c));
        *cases[i].key = 1;
    }
    p.helv_n_samples = 7;
    EmxMetrics m = metrics(6.0, 0.05);
    EmxDecision d = emx_entropix_decide(&m, &p, &fresh, PAUSE);
    cr_expect(d.action == EMX_ACTION_INSERT && d.token == PAUSE, "the pause is still inserted first");
    p.ada_n_samples = 1;
    m = metrics(2.0, 2.0);
    d = emx_entropix_decide(&m, &p, &fresh, PAUSE);
    cr_expect(d.action == EMX_ACTION_BEST_OF_N && d.n_samples == 1, "ADAPTIVE keeps its action with one draw");
}

// top_k rounds half to even, as jnp.round does: 2.5 -> 2, 3.5 -> 4.
Test(entropix, adaptive_top_k_rounds_half_to_even) {
    EmxProfile p;
    emx_profile_classic(&p);
    p.top_k = 1;
    p.ada_top_k_agreement = 0.0;
    p.ada_top_k_interaction = 1.5;
    EmxEntropixState st = {0};
    EmxMetrics m = metrics(2.0, 2.0);
    m.attn_interaction_strength = 1.0;  // 1·(1 + 1.5) = 2.5
    cr_expect_eq(emx_entropix_decide(&m, &p, &st, PAUSE).params.top_k, 2);
    p.ada_top_k_interaction = 2.5;  // 3.5
    cr_expect_eq(emx_entropix_decide(&m, &p, &st, PAUSE).params.top_k, 4);
}

// ---------------------------------------------------------------------------------------------
// Carrying out decisions.

static void fill_logits(float *l, int n, uint64_t seed) {
    for (int i = 0; i < n; i++) l[i] = (float)(3.0 * emx_uniform_f64(seed, i, 7));
}

// log2 p(id) by the definition, in long double (independent of metrics.c).
static double log2_prob(const float *l, int n, int id) {
    long double z = 0;
    for (int i = 0; i < n; i++) z += expl((long double)l[i]);
    return (double)(logl(expl((long double)l[id]) / z) / logl(2.0L));
}

Test(entropix, execute_simple_actions) {
    enum { N = 300 };
    float l[N];
    fill_logits(l, N, 5);
    EmxCandidate *work = malloc(sizeof(EmxCandidate) * N);
    EmxProfile p;
    emx_profile_classic(&p);
    EmxMetrics m;
    emx_logits_metrics(l, N, &m);
    EmxDecision d = {.kase = EMX_CASE_LELV, .action = EMX_ACTION_ARGMAX, .token = -1};
    cr_expect_eq(emx_entropix_execute(&d, l, N, &m, &p, 1, 2, work, NULL), emx_sample_argmax(l, N));
    d = (EmxDecision){.kase = EMX_CASE_HELV, .action = EMX_ACTION_INSERT, .token = 17};
    cr_expect_eq(emx_entropix_execute(&d, l, N, &m, &p, 1, 2, work, NULL), 17);
    d.token = N;  // out of range: refused
    cr_expect_eq(emx_entropix_execute(&d, l, N, &m, &p, 1, 2, work, NULL), -1);
    d = (EmxDecision){.kase = EMX_CASE_LEHV, .action = EMX_ACTION_SAMPLE, .token = -1,
                      .params = {.temperature = 1.3f, .top_k = 40, .top_p = 0.9f, .min_p = 0.03f}};
    for (uint64_t step = 0; step < 20; step++)
        cr_expect_eq(emx_entropix_execute(&d, l, N, &m, &p, 99, step, work, NULL),
                     emx_sample(l, N, &d.params, emx_uniform_f64(99, step, 0), work),
                     "SAMPLE is the basic sampler on lane 0");
    free(work);
}

// Best of N: draws on lanes 0..N-1 from the decision's distribution, the best by
// -s - w·|s - H| (s = -log2 p under the untempered distribution) wins, ties to the earlier.
Test(entropix, best_of_n_by_hand) {
    enum { N = 500 };
    float l[N];
    fill_logits(l, N, 11);
    EmxCandidate *work = malloc(sizeof(EmxCandidate) * N);
    EmxProfile p;
    emx_profile_classic(&p);
    EmxMetrics m;
    emx_logits_metrics(l, N, &m);
    EmxDecision d = {.kase = EMX_CASE_ADAPTIVE, .action = EMX_ACTION_BEST_OF_N, .token = -1,
                     .params = {.temperature = 1.2f, .top_k = 60, .top_p = 0.95f, .min_p = 0.01f},
                     .n_samples = 5};
    double weights[] = {0.0, 2.0};
    int differs = 0;
    for (int wi = 0; wi < 2; wi++) {
        p.ada_score_typicality = weights[wi];
        for (uint64_t step = 0; step < 50; step++) {
            int want = -1, distinct = 0, first = -1;
            double want_score = -INFINITY;
            for (uint32_t lane = 0; lane < 5; lane++) {
                int id = emx_sample(l, N, &d.params, emx_uniform_f64(3, step, lane), work);
                double s = -log2_prob(l, N, id);
                double score = -s - weights[wi] * fabs(s - m.logits_entropy_bits);
                if (want < 0 || score > want_score) want = id, want_score = score;
                if (first < 0) first = id;
                distinct += id != first;
            }
            double got_score;
            int got = emx_entropix_execute(&d, l, N, &m, &p, 3, step, work, &got_score);
            cr_expect_eq(got, want, "w=%g step %d", weights[wi], (int)step);
            cr_expect(fabs(got_score - want_score) < 1e-9, "score %.12g vs %.12g", got_score,
                      want_score);
            cr_expect(distinct > 0, "the five lanes draw different tokens");
            if (wi == 1) {  // does the typicality term change the choice?
                p.ada_score_typicality = 0.0;
                differs += emx_entropix_execute(&d, l, N, &m, &p, 3, step, work, NULL) != got;
                p.ada_score_typicality = 2.0;
            }
        }
    }
    cr_expect(differs > 0, "the score depends on more than p: some steps choose differently");
    free(work);
}

Test(entropix, score_prefers_typical_surprisal) {
    // p = (1/2, 1/8 ×4): H = 0.5·1 + 0.5·3 = 2 bits; surprisals 1 and 3.
    float l[5] = {2.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    l[0] = (float)log(4.0);  // p0 = 4/(4+4) = 1/2
    EmxMetrics m;
    emx_logits_metrics(l, 5, &m);
    cr_expect(fabs(m.logits_entropy_bits - 2.0) < 1e-6);  // ln 4 rounded to float
    // w = 2: token 0 -> -1 - 2·1 = -3; token 1 -> -3 - 2·1 = -5; w = 0: -1 and -3.
    cr_expect(fabs(emx_entropix_score(l, 0, &m, 2.0) + 3.0) < 1e-6);
    cr_expect(fabs(emx_entropix_score(l, 1, &m, 2.0) + 5.0) < 1e-6);
    cr_expect(fabs(emx_entropix_score(l, 1, &m, 0.0) + 3.0) < 1e-6);
    // p = (0.9, 0.1/k ...): the likely token is far below H, a tail token closer to it.
    float t[3] = {(float)log(0.9), (float)log(0.05), (float)log(0.05)};
    emx_logits_metrics(t, 3, &m);
    double h = m.logits_entropy_bits;  // ≈ 0.569
    double s0 = -log2(0.9), s1 = -log2(0.05);
    cr_expect(fabs(emx_entropix_score(t, 0, &m, 2.0) - (-s0 - 2 * fabs(s0 - h))) < 1e-6);
    cr_expect(fabs(emx_entropix_score(t, 1, &m, 2.0) - (-s1 - 2 * fabs(s1 - h))) < 1e-6);
}

// ---------------------------------------------------------------------------------------------
// The pause token.

typedef struct {
    const char *const *texts;
    int n;
} FakeVocab;

static int fake_find(void *ctx, const char *text, size_t len) {
    const FakeVocab *v = ctx;
    for (int i = 0; i < v->n; i++)
        if (strlen(v->texts[i]) == len && memcmp(v->texts[i], text, len) == 0) return i;
    return -1;
}

Test(entropix, pause_token_by_text) {
    const char *a[] = {"a", "...", " b", " ..."};
    FakeVocab va = {a, 4};
    cr_expect_eq(emx_pause_token_resolve(fake_find, &va), 3, "\" ...\" preferred");
    const char *b[] = {"a", "...", " b"};
    FakeVocab vb = {b, 3};
    cr_expect_eq(emx_pause_token_resolve(fake_find, &vb), 1, "falls back to \"...\"");
    const char *c[] = {"a", " b"};
    FakeVocab vc = {c, 2};
    cr_expect_eq(emx_pause_token_resolve(fake_find, &vc), -1, "none");
}

// The real tokenizers: Llama 3's must give the sources' id 2564; Qwen3's " ..." is 2503 in its
// tokenizer.json ("Ġ..."). Both from ../shared/testdata (HF tokenizer files).
static void expect_pause_of(const char *dir_rel, int want) {
    char dir[512];
    test_shared_path(dir, sizeof dir, dir_rel);
    TokenizerData td;
    char err[256];
    if (tokdata_from_hf_dir(dir, 0, &td, err, sizeof err) != 0) {
        tokdata_free(&td);
        cr_skip_test("tokenizer %s not readable: %s", dir, err);
    }
    EmxTokenizer *tk = emx_tokenizer_new(&td, err, sizeof err);
    cr_assert_not_null(tk, "%s", err);
    cr_expect_eq(emx_pause_token_resolve(emx_find_token_by_bytes, tk), want, "%s", dir_rel);
    emx_tokenizer_free(tk);
    tokdata_free(&td);
}

Test(entropix, pause_token_llama3) { expect_pause_of("testdata/tokenizers/llama3", 2564); }
Test(entropix, pause_token_qwen3) { expect_pause_of("testdata/tokenizers/qwen3", 2503); }

// SmolLM2 (optional data: `make weights` fetches the GGUF, test-models converts it): " ..." is
// 4563 in its GGUF vocabulary (tokenizer.ggml.tokens "Ġ...").
Test(entropix, pause_token_smollm2) {
    char path[512], err[256];
    test_build_path(path, sizeof path, "models/smollm2.f32.bin");
    FILE *f = fopen(path, "rb");
    if (!f) cr_skip_test("%s missing (make weights, then make test-models)", path);
    fclose(f);
    EmxModel m;
    cr_assert_eq(emx_model_open(&m, path, err, sizeof err), 0, "%s", err);
    EmxTokenizer *tk = emx_tokenizer_new(&m.tok, err, sizeof err);
    cr_assert_not_null(tk, "%s", err);
    cr_expect_eq(emx_pause_token_resolve(emx_find_token_by_bytes, tk), 4563);
    emx_tokenizer_free(tk);
    emx_model_close(&m);
}

// ---------------------------------------------------------------------------------------------
// The EmxSampler adapter on a real forward pass (the tiny random-weight Qwen3 with the real
// Qwen3 vocabulary): the per-token wiring of metrics -> decision -> draw -> state.

typedef struct {
    EmxModel m;
    EmxTokenizer *tk;
    EmxState *st;
} Tiny;

static void tiny_open(Tiny *t, int ctx) {
    char path[512], err[256];
    test_build_path(path, sizeof path, "models/qwen3-tiny.f32.bin");
    FILE *f = fopen(path, "rb");
    if (!f) cr_skip_test("%s missing (make test-models converts it)", path);
    fclose(f);
    cr_assert_eq(emx_model_open(&t->m, path, err, sizeof err), 0, "%s", err);
    t->tk = emx_tokenizer_new(&t->m.tok, err, sizeof err);
    cr_assert_not_null(t->tk, "%s", err);
    t->st = emx_state_new(&t->m, &(EmxStateOptions){.n_threads = 1, .ctx = ctx}, err, sizeof err);
    cr_assert_not_null(t->st, "%s", err);
}

static void tiny_close(Tiny *t) {
    emx_state_free(t->st);
    emx_tokenizer_free(t->tk);
    emx_model_close(&t->m);
}

Test(entropix_sampler, step_equals_the_pure_pieces) {
    Tiny t;
    tiny_open(&t, 64);
    int layers[] = {EMX_ATTN_LAYER_LAST, EMX_ATTN_LAYERS_ALL, 0};
    for (int li = 0; li < 3; li++) {
        EmxProfile p;
        emx_profile_classic(&p);
        p.attn_layer = layers[li];
        EmxEntropixSampler es;
        char err[256];
        cr_assert_eq(emx_entropix_sampler_init(&es, &p, &t.m, t.tk, emx_state_ctx(t.st), 123, err,
                                               sizeof err), 0, "%s", err);
        cr_expect_eq(es.pause_token, 2503, "Qwen3's \" ...\" (tokenizer.json \"Ġ...\")");
        int nl = (int)t.m.cfg.n_layers, nh = (int)t.m.cfg.n_heads, nv = (int)t.m.cfg.vocab_size;
        int ctx = emx_state_ctx(t.st), tok = 9707;  // any start token
        EmxEntropixState shadow = {0};
        EmxCandidate *work = malloc(sizeof(EmxCandidate) * nv);
        double *scratch = malloc(sizeof(double) * ctx);
        for (int pos = 0; pos < 12; pos++) {
            const float *logits = emx_forward(t.st, &tok, 1, pos);
            cr_assert_not_null(logits);
            // By hand: metrics, decision, draw.
            int last;
            const float *sc = emx_attention_scores(t.st, &last);
            cr_assert_eq(last, pos);
            EmxMetrics m;
            emx_logits_metrics(logits, nv, &m);
            cr_assert_eq(emx_attention_metrics(sc, nl, nh, ctx, pos + 1, p.attn_layer, scratch, &m), 0);
            EmxDecision d = emx_entropix_decide(&m, &p, &shadow, 2503);
            int want = emx_entropix_execute(&d, logits, nv, &m, &p, 123, pos + 1, work, NULL);
            emx_entropix_state_update(&shadow, &d);
            // The adapter.
            int got = es.base.choose(&es.base, t.st, logits, nv, pos + 1);
            cr_expect_eq(got, want, "pos %d", pos);
            cr_expect_eq(es.last_decision.kase, d.kase);
            cr_expect(es.last_metrics.attn_entropy_bits == m.attn_entropy_bits);
            cr_expect(es.last_metrics.logits_entropy_bits == m.logits_entropy_bits);
            cr_expect(m.attn_entropy_bits <= log2(pos + 1.0) + 1e-9, "at most log2 of the keys");
            tok = got;
        }
        long total = 0;
        for (int c = 0; c < EMX_CASE_COUNT; c++) total += es.case_counts[c];
        cr_expect_eq(total, 12);
        free(work);
        free(scratch);
        emx_entropix_sampler_free(&es);
    }
    tiny_close(&t);
}

Test(entropix_sampler, runs_in_the_generation_loop) {
    Tiny t;
    tiny_open(&t, 64);
    EmxProfile p;
    emx_profile_builtin(&p, "masked-bits");
    EmxEntropixSampler es;
    char err[256];
    cr_assert_eq(emx_entropix_sampler_init(&es, &p, &t.m, t.tk, emx_state_ctx(t.st), 7, err,
                                           sizeof err), 0, "%s", err);
    int prompt[3] = {9707, 1879, 13};
    EmxGenerateOptions go = {.n_predict = 20};
    EmxGenerateStats stats;
    cr_assert_eq(emx_generate(t.st, t.tk, prompt, 3, &es.base, &go, &stats, err, sizeof err), 0,
                 "%s", err);
    long total = 0;
    for (int c = 0; c < EMX_CASE_COUNT; c++) total += es.case_counts[c];
    cr_expect_eq(total, stats.n_generated);
    emx_entropix_sampler_free(&es);
    // Bad profiles for this model are refused with a reason.
    p.attn_layer = 1000;
    cr_expect_eq(emx_entropix_sampler_init(&es, &p, &t.m, t.tk, 64, 7, err, sizeof err), -1);
    cr_expect(strstr(err, "attn_layer = 1000") != NULL, "%s", err);
    tiny_close(&t);
}

// Masking (issue #4, done-means 2): the metrics of position p read only keys 0..p. Fill the KV
// cache past p with a longer sequence, then overwrite those positions with garbage (NaN,
// ±1e30, random), roll back and run position p again: logits, every layer's score row over
// 0..p and the metrics for every layer choice are bitwise those of a state that never saw
// anything past p.
static void step_metrics_all_layers(Tiny *t, const float *logits, EmxMetrics *out /* [2+L] */,
                                    int nl) {
    int ctx = emx_state_ctx(t->st), nv = (int)t->m.cfg.vocab_size, nh = (int)t->m.cfg.n_heads;
    double *scratch = malloc(sizeof(double) * (size_t)ctx);
    int layers[2 + 64];
    layers[0] = EMX_ATTN_LAYER_LAST;
    layers[1] = EMX_ATTN_LAYERS_ALL;
    for (int l = 0; l < nl; l++) layers[2 + l] = l;
    for (int i = 0; i < 2 + nl; i++)
        emx_step_metrics(t->st, logits, nv, nl, nh, ctx, layers[i], scratch, &out[i]);
    free(scratch);
}

Test(entropix_sampler, metrics_ignore_cache_positions_past_p) {
    const int p = 9, ctx = 64;
    int toks[40];
    for (int i = 0; i < 40; i++) toks[i] = (int)((i * 7919u + 11u) % 5000u) + 100;
    Tiny clean, dirty;
    tiny_open(&clean, ctx);
    tiny_open(&dirty, ctx);
    int nl = (int)clean.m.cfg.n_layers, nh = (int)clean.m.cfg.n_heads;
    int nv = (int)clean.m.cfg.vocab_size;
    cr_assert(nl <= 64);

    // Clean: positions 0..p only.
    const float *lc = emx_forward(clean.st, toks, p + 1, 0);
    cr_assert_not_null(lc);
    float *logits_clean = malloc(sizeof(float) * (size_t)nv);
    memcpy(logits_clean, lc, sizeof(float) * (size_t)nv);
    EmxMetrics want[2 + 64];
    step_metrics_all_layers(&clean, logits_clean, want, nl);
    int last = -1;
    const float *sc_clean = emx_attention_scores(clean.st, &last);
    cr_assert_eq(last, p);

    // Dirty: a longer sequence first, then garbage past p, then position p again.
    cr_assert_not_null(emx_forward(dirty.st, toks, 40, 0));
    // The garbage goes in through emx_state_kv_rows_write, which reaches the cache whatever its
    // layout (emx_state_kv_cache may hand out copies: this model's cache rows are padded).
    const int n_past = ctx - (p + 1);
    const size_t bytes = emx_state_kv_rows_bytes(dirty.st, n_past), n_f = bytes / sizeof(float);
    float *g = malloc(bytes), *back = malloc(bytes);  // keys [nl][n_past][kv_dim], then values
    cr_assert(g && back);
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < n_f / 2; i++, x ^= x << 13, x ^= x >> 7, x ^= x << 17) {
        g[i] = (x % 4 == 0) ? NAN : (x % 4 == 1) ? 1e30f : (x % 4 == 2) ? -1e30f : (float)(x % 1000) - 500.0f;
        g[n_f / 2 + i] = -g[i];
    }
    cr_assert(emx_state_kv_rows_write(dirty.st, p + 1, n_past, g) == 0 &&
              emx_state_kv_rows_read(dirty.st, p + 1, n_past, back) == 0 && memcmp(back, g, bytes) == 0,
              "the garbage did not reach the cache");
    free(back), free(g);
    cr_assert_not_null(emx_forward(dirty.st, toks, p, 0));  // rollback to 0..p-1 ...
    const float *ld = emx_forward(dirty.st, &toks[p], 1, p);  // ... and position p alone
    cr_assert_not_null(ld);
    cr_expect(memcmp(ld, logits_clean, sizeof(float) * (size_t)nv) == 0, "logits differ");
    const float *sc_dirty = emx_attention_scores(dirty.st, &last);
    cr_assert_eq(last, p);
    for (int l = 0; l < nl; l++)
        for (int h = 0; h < nh; h++) {
            size_t row = ((size_t)l * nh + h) * ctx;
            cr_expect(memcmp(sc_dirty + row, sc_clean + row, sizeof(float) * (p + 1)) == 0,
                      "layer %d head %d: scores over 0..%d differ", l, h, p);
        }
    EmxMetrics got[2 + 64];
    step_metrics_all_layers(&dirty, ld, got, nl);
    for (int i = 0; i < 2 + nl; i++)
        cr_expect(memcmp(&got[i], &want[i], sizeof(EmxMetrics)) == 0,
                  "layer choice %d: metrics differ (H %.17g vs %.17g, attn %.17g vs %.17g)", i - 2,
                  got[i].logits_entropy_bits, want[i].logits_entropy_bits,
                  got[i].attn_entropy_bits, want[i].attn_entropy_bits);
    // And the metrics are real: the attention entropy is positive, at most log2(p + 1).
    cr_expect(want[0].attn_entropy_bits > 0.0 && want[0].attn_entropy_bits <= log2(p + 1.0) + 1e-9);
    free(logits_clean);
    tiny_close(&clean);
    tiny_close(&dirty);
}
