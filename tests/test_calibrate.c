// test_calibrate.c — percentiles (numpy's linear rule, values worked out by hand), which
// percentile lands in which threshold (shares on independent synthetic metrics), the
// attention-coefficient rescaling, and tools/calibrate end to end on stories260K.
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sampler/calibrate.h"
#include "sampler/profile.h"
#include "run_util.h"
#include "test_util.h"

Test(calibrate, percentile_linear_interpolation) {
    // sorted: 1 1 2 3 4 5 6 9 (n = 8); rank = 7q/100.
    const double x[] = {3, 1, 4, 1, 5, 9, 2, 6};
    cr_expect_float_eq(emx_percentile(x, 8, 0), 1.0, 1e-12);
    cr_expect_float_eq(emx_percentile(x, 8, 30), 2.1, 1e-12);   // rank 2.1: 2 + 0.1·(3-2)
    cr_expect_float_eq(emx_percentile(x, 8, 50), 3.5, 1e-12);   // rank 3.5: 3 + 0.5·(4-3)
    cr_expect_float_eq(emx_percentile(x, 8, 70), 4.9, 1e-12);   // rank 4.9: 4 + 0.9·(5-4)
    cr_expect_float_eq(emx_percentile(x, 8, 100), 9.0, 1e-12);
    cr_expect_eq(x[0], 3.0, "the input is not sorted in place");
    const double one = 7.5;
    cr_expect_eq(emx_percentile(&one, 1, 40), 7.5);
    cr_expect(isnan(emx_percentile(x, 0, 50)));
}

// H uniform on a grid, V an independent permutation of the same grid: each joint case takes
// the product of its marginal shares (LELV 0.3·0.3, HELV 0.15·0.3, LEHV 0.5·0.3, HEHV 0.3·0.3;
// the cases are disjoint by construction), so a percentile in the wrong threshold shows.
Test(calibrate, thresholds_are_the_documented_percentiles) {
    EmxMetricSamples s = {0};
    const int n = 10000;
    for (int i = 0; i < n; i++) {
        EmxMetrics m = {0};
        m.logits_entropy_bits = (double)i / n * 8.0;
        m.logits_varentropy_bits2 = (double)((i * 7919L) % n) / n * 20.0;  // 7919 prime: a permutation
        m.attn_entropy_bits = 2.38;
        m.attn_varentropy_heads_bits2 = 0.5;
        m.attn_interaction_strength = 4.0;
        cr_assert_eq(emx_metric_samples_add(&s, &m, EMX_ATTN_VARENTROPY_HEADS), 0);
    }
    EmxProfile classic, p;
    emx_profile_classic(&classic);
    EmxCalibration cal;
    cr_assert_eq(emx_calibrate_profile(&classic, &s, &p, &cal), 0);
    cr_expect_float_eq(p.lelv_entropy_below, emx_percentile(s.h, s.n, 30), 1e-12);
    cr_expect_float_eq(p.lelv_varentropy_below, emx_percentile(s.v, s.n, 30), 1e-12);
    cr_expect_float_eq(p.helv_entropy_above, emx_percentile(s.h, s.n, 85), 1e-12);
    cr_expect_float_eq(p.helv_varentropy_below, emx_percentile(s.v, s.n, 30), 1e-12);
    cr_expect_float_eq(p.lehv_entropy_below, emx_percentile(s.h, s.n, 50), 1e-12);
    cr_expect_float_eq(p.lehv_varentropy_above, emx_percentile(s.v, s.n, 70), 1e-12);
    cr_expect_float_eq(p.hehv_entropy_above, emx_percentile(s.h, s.n, 70), 1e-12);
    cr_expect_float_eq(p.hehv_varentropy_above, emx_percentile(s.v, s.n, 70), 1e-12);
    double frac[EMX_CASE_COUNT];
    emx_case_distribution(&p, &s, frac);
    const double want[EMX_CASE_COUNT] = {0.09, 0.045, 0.15, 0.09, 0.625};
    for (int c = 0; c < EMX_CASE_COUNT; c++)
        cr_expect(fabs(frac[c] - want[c]) < 0.01, "%s: %.4f, expected %.2f",
                  emx_case_name((EmxCase)c), frac[c], want[c]);
    // Attention coefficients: c·ref/median (11.9 bits, interaction 0.2); spread terms off.
    cr_expect_float_eq(p.helv_temp_attn_entropy, 0.2 * 11.9 / 2.38, 1e-12);
    cr_expect_float_eq(p.hehv_top_p_attn_entropy, 0.2 * 11.9 / 2.38, 1e-12);
    cr_expect_float_eq(p.lehv_temp_interaction, 0.3 * 0.2 / 4.0, 1e-12);
    cr_expect_float_eq(p.ada_top_k_interaction, 0.3 * 0.2 / 4.0, 1e-12);
    cr_expect_float_eq(p.ada_temp_attn_unc, 0.2 * 11.9 / (2.38 + 0.5), 1e-12);
    cr_expect(p.hehv_temp_attn_varentropy == 0.0 && p.ada_top_p_attn_varentropy == 0.0);
    // Everything else is the base's.
    cr_expect(p.temperature == classic.temperature && p.top_k == classic.top_k &&
              p.ada_n_samples == classic.ada_n_samples && p.helv_temp_max == classic.helv_temp_max);
    emx_metric_samples_free(&s);

    EmxMetricSamples one = {0};
    EmxMetrics m = {0};
    cr_assert_eq(emx_metric_samples_add(&one, &m, 0), 0);
    cr_expect_eq(emx_calibrate_profile(&classic, &one, &p, NULL), -1, "one sample is too few");
    emx_metric_samples_free(&one);
}

// Each case's temperature at the median metrics, by hand from the classic formulas
// (docs/entropix.md): H 4, V 12, attention entropy 3, spread 1, agreement 0.1, IS 2.5.
Test(calibrate, case_temperatures_at_the_median) {
    EmxProfile p;
    emx_profile_classic(&p);
    EmxCalibration cal = {.h_p50 = 4.0, .v_p50 = 12.0, .ae_median = 3.0, .av_median = 1.0,
                          .agr_median = 0.1, .is_median = 2.5};
    double t[EMX_CASE_COUNT];
    const int hot = emx_case_temperatures_at_median(&p, &cal, 1.0, t);
    cr_expect_float_eq(t[EMX_CASE_LELV], 0.0, 1e-6);
    cr_expect_float_eq(t[EMX_CASE_HELV], 0.666 * (1.3 + 0.2 * 3.0), 1e-6);        // 1.2654 (< 1.5)
    cr_expect_float_eq(t[EMX_CASE_LEHV], 0.666 * (1.2 + 0.3 * 2.5), 1e-6);        // 1.2987 (< 1.5)
    cr_expect_float_eq(t[EMX_CASE_HEHV], 2.0, 1e-6);                              // max(2, 0.666·2.5)
    cr_expect_float_eq(t[EMX_CASE_ADAPTIVE], 0.666 * (1 + 0.3 * 16 + 0.2 * 4 - 0.2 * 0.1), 1e-5);
    cr_expect_eq(hot, 4, "all but LELV are above 1");
    p.temp_max = 1.0;
    cr_expect_eq(emx_case_temperatures_at_median(&p, &cal, 1.0, t), 0, "capped: none");
    cr_expect_float_eq(t[EMX_CASE_ADAPTIVE], 1.0, 1e-6);
}

static const char *calibrate_bin(char *buf, size_t cap) {
    test_build_path(buf, cap, "tools/calibrate");
    if (access(buf, X_OK) != 0) cr_assert_fail("%s is not built (make all)", buf);
    return buf;
}

// On stories260K: the written profile reads back, its thresholds are ordered as the
// percentiles are, and ./run accepts it.
Test(calibrate, tool_writes_a_profile_run_accepts, .timeout = 300) {
    char bin[1024], model[1024], text[1024], out[] = "/tmp/emx_cal_XXXXXX";
    calibrate_bin(bin, sizeof bin);
    test_build_path(model, sizeof model, "models/stories260K.f32.bin");
    test_shared_path(text, sizeof text, "testdata/stories260K/expected.txt");
    int fd = mkstemp(out);
    cr_assert(fd >= 0);
    close(fd);
    RunResult r = run_prog(bin, (const char *[]){model, text, "-o", out, "-c", "128", "-t", "1", NULL});
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.err, "calibrated") != NULL && strstr(r.err, "measured") != NULL,
              "no case shares on stderr: %s", r.err);
    EmxProfile p;
    char err[256];
    cr_assert_eq(emx_profile_load(&p, out, err, sizeof err), 0, "%s", err);
    cr_expect(p.lelv_entropy_below <= p.lehv_entropy_below &&
                  p.lehv_entropy_below <= p.helv_entropy_above,
              "P30 <= P50 <= P70 of H: %g %g %g", p.lelv_entropy_below, p.lehv_entropy_below,
              p.helv_entropy_above);
    cr_expect(p.lelv_varentropy_below == p.helv_varentropy_below &&
              p.helv_varentropy_below <= p.lehv_varentropy_above);
    cr_expect(p.helv_entropy_above >= p.hehv_entropy_above);
    cr_expect(p.lelv_entropy_below > 0 && p.helv_entropy_above < 9.0, "H in (0, log2 512]");
    char *body = test_read_file(out, NULL);
    cr_assert(body);
    cr_expect(strncmp(body, "# calibrated by tools/calibrate", 31) == 0, "%.80s", body);
    free(body);
    RunResult g = run((const char *[]){model, "--profile", out, "-n", "20", "-t", "1", "-s", "5", NULL});
    cr_expect_eq(g.code, 0, "%s", g.err);
    run_free(&g);
    run_free(&r);
    unlink(out);
}

// A case hotter than the model's own temperature at the median metrics is warned about: classic's
// ADAPTIVE (T0·(1 + 0.3·(H + V) + ...) with H + V of several bits) is; measured caps every case at 1.
Test(calibrate, tool_warns_about_hot_cases, .timeout = 300) {
    char bin[1024], model[1024], text[1024], out[] = "/tmp/emx_calw_XXXXXX";
    calibrate_bin(bin, sizeof bin);
    test_build_path(model, sizeof model, "models/stories260K.f32.bin");
    test_shared_path(text, sizeof text, "testdata/stories260K/expected.txt");
    int fd = mkstemp(out);
    cr_assert(fd >= 0);
    close(fd);
    RunResult r = run_prog(bin, (const char *[]){model, text, "-o", out, "-c", "128", "-t", "1", "--base", "classic", NULL});
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.err, "calibrate: warning: ADAPTIVE samples at T = ") != NULL, "%s", r.err);
    char *body = test_read_file(out, NULL);
    cr_assert(body);
    cr_expect(strstr(body, "# temperature of each case at the median metrics: LELV 0 ") != NULL, "%s", body);
    free(body);
    run_free(&r);
    r = run_prog(bin, (const char *[]){model, text, "-o", out, "-c", "128", "-t", "1", NULL});
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.err, "warning") == NULL, "measured (temp_max 1) has no hot case: %s", r.err);
    run_free(&r);
    unlink(out);
}

Test(calibrate, tool_errors_are_one_line, .timeout = 300) {
    char bin[1024], model[1024], text[1024];
    calibrate_bin(bin, sizeof bin);
    test_build_path(model, sizeof model, "models/stories260K.f32.bin");
    test_shared_path(text, sizeof text, "testdata/stories260K/expected.txt");
    expect_error_prog(bin, (const char *[]){model, "/nonexistent.txt", NULL}, 1,
                      "/nonexistent.txt: No such file or directory");
    expect_error_prog(bin, (const char *[]){"/nonexistent.bin", text, NULL}, 1, "/nonexistent.bin");
    expect_error_prog(bin, (const char *[]){model, text, "--frob", NULL}, 2, "unknown option '--frob'");
    expect_error_prog(bin, (const char *[]){model, text, "-n", "x", NULL}, 2, "-n: 'x' is not an integer");
    expect_error_prog(bin, (const char *[]){model, text, "-c", "16", "--skip", "16", NULL}, 2,
                      "--skip 16 leaves nothing");
    expect_error_prog(bin, (const char *[]){model, text, "--base", "nosuch", NULL}, 2, "no profile 'nosuch'");
    expect_error_prog(bin, (const char *[]){model, text, "--metric-layers", "9", NULL}, 1,
                      "attention layer 9: the model has 5 layers");
    // An output path is a usage error, refused before the model is opened (as ./run's).
    expect_error_prog(bin, (const char *[]){model, text, "-o", "/nonexistent/x.profile", "-n", "40", NULL}, 2,
                      "-o /nonexistent/x.profile");
}

// The shipped calibrated profile reads, and its thresholds are the percentiles its header
// lists (P30 of H and V for LELV, P85 of H for HELV, P70 of V for LEHV/HEHV).
Test(calibrate, shipped_smollm2_profile_matches_its_header) {
    const char *path = "sampler/profiles/smollm2-135m-instruct.profile";
    EmxProfile p;
    char err[256];
    cr_assert_eq(emx_profile_load(&p, path, err, sizeof err), 0, "%s", err);
    char *text = test_read_file(path, NULL);
    cr_assert(text);
    double h30, h85, v30, v70;
    const char *h = strstr(text, "# logits entropy H (bits):");
    const char *v = strstr(text, "# logits varentropy V (bits²):");
    cr_assert(h && v, "header lines missing");
    cr_assert(sscanf(strstr(h, "P30"), "P30 %lf", &h30) == 1 && sscanf(strstr(h, "P85"), "P85 %lf", &h85) == 1);
    cr_assert(sscanf(strstr(v, "P30"), "P30 %lf", &v30) == 1 && sscanf(strstr(v, "P70"), "P70 %lf", &v70) == 1);
    // The header prints 4 significant digits.
    cr_expect(fabs(p.lelv_entropy_below - h30) <= 5e-4 * h30, "%g vs %g", p.lelv_entropy_below, h30);
    cr_expect(fabs(p.helv_entropy_above - h85) <= 5e-4 * h85);
    cr_expect(fabs(p.lelv_varentropy_below - v30) <= 5e-4 * v30);
    cr_expect(fabs(p.hehv_varentropy_above - v70) <= 5e-4 * v70);
    free(text);
}
