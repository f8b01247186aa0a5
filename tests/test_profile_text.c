// test_profile_text.c — the profile text format (profile.h): the built-in profiles equal their
// shipped files, write/parse round trips, overrides and comments, one-line errors; and values at
// the edges of double precision: what emx_profile_write writes must parse back (profile.h:
// "reads back exactly"), subnormal numbers included (found by tests/fuzz: a profile with temperature 0x1p-1074 was written as 5e-324,
// which strtod flags ERANGE, and the written file was rejected).
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sampler/profile.h"

Test(profile, subnormal_values_parse_and_round_trip) {
    EmxProfile p, q;
    memset(&p, 0, sizeof p), memset(&q, 0, sizeof q);
    emx_profile_classic(&p), emx_profile_classic(&q);
    char err[256] = "";
    const char *text = "temperature = 5e-324\nmin_p = 2.2e-308\ntop_p = 0x1p-1074\n";
    cr_assert_eq(emx_profile_parse(&p, text, strlen(text), "t.profile", err, sizeof err), 0, "%s", err);
    cr_expect(p.temperature == 0x1p-1074 && p.min_p == 2.2e-308 && p.top_p == 0x1p-1074);
    char *w = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&w, &n);
    emx_profile_write(f, &p);
    fclose(f);
    cr_assert_eq(emx_profile_parse(&q, w, n, "written", err, sizeof err), 0, "%s", err);
    cr_expect_eq(memcmp(&p, &q, sizeof p), 0, "written profile reads back different:\n%s", w);
    free(w);
    // A value that underflows to zero is still an error (nothing was meant by it but a typo).
    cr_expect_eq(emx_profile_set(&q, "temperature", "1e-400", err, sizeof err), -1);
    cr_expect_eq(emx_profile_set(&q, "temperature", "1e400", err, sizeof err), -1);
}

// ---------------------------------------------------------------------------------------------
// Profiles.

// Every field as text: profiles compare equal when these strings do.
static char *profile_text(const EmxProfile *p) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    emx_profile_write(f, p);
    fclose(f);
    return buf;
}

static void expect_same_profile(const EmxProfile *a, const EmxProfile *b, const char *what) {
    char *ta = profile_text(a), *tb = profile_text(b);
    cr_expect_str_eq(ta, tb, "%s", what);
    free(ta);
    free(tb);
}

Test(profile, classic_has_the_spec_constants) {
    EmxProfile p;
    cr_assert_eq(emx_profile_builtin(&p, "classic"), 0);
    cr_expect(p.temperature == 0.666 && p.top_k == 27 && p.top_p == 0.90 && p.min_p == 0.03);
    cr_expect(p.lelv_entropy_below == 0.1 && p.lelv_varentropy_below == 0.1);
    cr_expect(p.helv_entropy_above == 5.0 && p.helv_varentropy_below == 0.1);
    cr_expect(p.lehv_entropy_below == 5.0 && p.lehv_varentropy_above == 5.0);
    cr_expect(p.hehv_entropy_above == 3.0 && p.hehv_varentropy_above == 5.0);
    cr_expect(p.ada_n_samples == 5 && p.attn_layer == EMX_ATTN_LAYER_LAST);
    cr_expect(p.attn_varentropy_def == EMX_ATTN_VARENTROPY_HEADS);
    cr_expect_eq(emx_profile_builtin(&p, "nonesuch"), -1);
}

// measured is classic with exactly these keys changed (docs/entropix.md "The default profile").
Test(profile, measured_is_classic_with_the_measured_changes) {
    EmxProfile m, c;
    cr_assert_eq(emx_profile_builtin(&m, "measured"), 0);
    cr_assert_eq(emx_profile_builtin(&c, EMX_PROFILE_DEFAULT), 0);
    expect_same_profile(&m, &c, "measured is the default");
    emx_profile_classic(&c);
    cr_expect(m.temp_max == 1.0 && m.min_p == 0.1 && m.ada_score_typicality == 0.0);
    cr_expect(m.helv_n_samples == 5 && m.lehv_n_samples == 5 && m.hehv_n_samples == 5 && m.ada_n_samples == 5);
    cr_expect(m.ada_min_p_logits_unc == 0.0 && m.ada_min_p_min == 0.0 && m.ada_min_p_max == 1.0);
    c.temp_max = m.temp_max, c.min_p = m.min_p, c.ada_score_typicality = m.ada_score_typicality;
    c.helv_n_samples = c.lehv_n_samples = c.hehv_n_samples = c.ada_n_samples = 5;
    c.ada_min_p_logits_unc = m.ada_min_p_logits_unc, c.ada_min_p_min = m.ada_min_p_min, c.ada_min_p_max = m.ada_min_p_max;
    expect_same_profile(&m, &c, "every other key is classic's");
}

Test(profile, shipped_files_equal_builtins) {
    const char *names[] = {"measured", "classic", "masked-bits"};
    for (int i = 0; i < 3; i++) {
        char path[256], err[256];
        snprintf(path, sizeof path, "sampler/profiles/%s.profile", names[i]);
        EmxProfile from_file, builtin;
        cr_assert_eq(emx_profile_load(&from_file, path, err, sizeof err), 0, "%s", err);
        emx_profile_builtin(&builtin, names[i]);
        expect_same_profile(&from_file, &builtin, path);
    }
}

Test(profile, write_then_parse_round_trips) {
    EmxProfile p, q;
    emx_profile_builtin(&p, "masked-bits");
    p.temperature = 0.1 + 0.2;  // not a short decimal: must still come back exactly
    p.attn_layer = 3;
    char *text = profile_text(&p), err[256];
    emx_profile_classic(&q);
    cr_assert_eq(emx_profile_parse(&q, text, strlen(text), "mem", err, sizeof err), 0, "%s", err);
    expect_same_profile(&p, &q, "round trip");
    free(text);
}

Test(profile, parse_overrides_and_comments) {
    const char *text =
        "# a comment line\n"
        "\n"
        "temperature = 0.8   # trailing comment\n"
        "  top_k=40\n"
        "attn_layer = all\n"
        "attn_varentropy_def = true\r\n"
        "helv_entropy_above = 4.5\n"
        "helv_entropy_above = 4.25\n";  // the last one wins
    EmxProfile p;
    emx_profile_classic(&p);
    char err[256] = "";
    cr_assert_eq(emx_profile_parse(&p, text, strlen(text), "t.profile", err, sizeof err), 0, "%s",
                 err);
    cr_expect(p.temperature == 0.8 && p.top_k == 40 && p.helv_entropy_above == 4.25);
    cr_expect(p.attn_layer == EMX_ATTN_LAYERS_ALL);
    cr_expect(p.attn_varentropy_def == EMX_ATTN_VARENTROPY_TRUE);
    cr_expect(p.top_p == 0.90, "untouched fields keep classic");
    cr_assert_eq(emx_profile_set(&p, "attn_layer", "7", err, sizeof err), 0, "%s", err);
    cr_expect_eq(p.attn_layer, 7);
}

static void expect_error(const char *text, const char *want) {
    EmxProfile p;
    emx_profile_classic(&p);
    char err[256] = "";
    cr_expect_eq(emx_profile_parse(&p, text, strlen(text), "bad.profile", err, sizeof err), -1,
                 "%s", text);
    cr_expect_str_eq(err, want);
}

Test(profile, errors_name_line_and_key) {
    expect_error("top_k = 3\ntop_kk = 4\n", "bad.profile:2: unknown key 'top_kk'");
    expect_error("\n\ntop_k = abc\n",
                 "bad.profile:3: bad value 'abc' for top_k (an integer in [0, 1000000])");
    expect_error("top_k = 2.5", "bad.profile:1: bad value '2.5' for top_k (an integer in [0, 1000000])");
    expect_error("top_p = 1.5", "bad.profile:1: bad value '1.5' for top_p (a number in [0, 1])");
    expect_error("min_p = nan", "bad.profile:1: bad value 'nan' for min_p (a number in [0, 1])");
    expect_error("temperature =", "bad.profile:1: bad value '' for temperature (a number in [0, 100])");
    expect_error("attn_layer = first",
                 "bad.profile:1: bad value 'first' for attn_layer (last, all or a layer index)");
    expect_error("attn_varentropy_def = both",
                 "bad.profile:1: bad value 'both' for attn_varentropy_def (heads or true)");
    expect_error("# ok\njust words\n", "bad.profile:2: expected 'key = value', got 'just words'");
    expect_error("ada_n_samples = 0",
                 "bad.profile:1: bad value '0' for ada_n_samples (an integer in [1, 1024])");
    EmxProfile p;
    char err[256];
    cr_expect_eq(emx_profile_set(&p, "nope", "1", err, sizeof err), -1);
    cr_expect_str_eq(err, "unknown key 'nope'");
}

Test(profile, load_missing_file) {
    EmxProfile p;
    char err[256];
    cr_expect_eq(emx_profile_load(&p, "no/such.profile", err, sizeof err), -1);
    cr_expect_str_eq(err, "no profile 'no/such.profile': not a built-in name (measured, "
                          "classic, masked-bits) nor a readable file");
}
