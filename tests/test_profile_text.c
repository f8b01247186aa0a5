// test_profile_text.c — profile values at the edges of double precision: what
// emx_profile_write writes must parse back (profile.h: "reads back exactly"), subnormal numbers
// included (found by tests/fuzz: a profile with temperature 0x1p-1074 was written as 5e-324,
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
