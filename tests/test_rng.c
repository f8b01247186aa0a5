// test_rng.c — Philox4x32 against Random123's published known-answer vectors, and the
// properties the samplers rely on (range, determinism, independence of lanes and steps).
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>

#include "sampler/philox.h"
#include "sampler/rng.h"

// Known answers from Random123 (D. E. Shaw Research), file tests/kat_vectors,
// github.com/DEShawResearch/random123 (commit 9545ff6413f258be2f04c1d319d99aaef7521150), the
// "philox4x32 7" and "philox4x32 10" lines. Format there: name rounds CTR[4] KEY[2] EXPECTED[4]:
//   philox4x32 7 00000000 00000000 00000000 00000000 00000000 00000000   5f6fb709 0d893f64 4f121f81 4f730a48
//   philox4x32 7 ffffffff ffffffff ffffffff ffffffff ffffffff ffffffff   5207ddc2 45165e59 4d8ee751 8c52f662
//   philox4x32 7 243f6a88 85a308d3 13198a2e 03707344 a4093822 299f31d0   4dfccaba 190a87f0 c47362ba b6b5242a
//   philox4x32 10 00000000 00000000 00000000 00000000 00000000 00000000   6627e8d5 e169c58d bc57ac4c 9b00dbd8
//   philox4x32 10 ffffffff ffffffff ffffffff ffffffff ffffffff ffffffff   408f276d 41c83b0e a20bc7c6 6d5451fd
//   philox4x32 10 243f6a88 85a308d3 13198a2e 03707344 a4093822 299f31d0   d16cfe09 94fdcceb 5001e420 24126ea1
// (The pi-digit inputs are the hexadecimal expansion of pi, as Random123 chose them.)
typedef struct {
    int rounds;
    uint32_t ctr[4], key[2], expect[4];
} Kat;

static const Kat kat[] = {
    {7, {0, 0, 0, 0}, {0, 0}, {0x5f6fb709, 0x0d893f64, 0x4f121f81, 0x4f730a48}},
    {7,
     {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
     {0xffffffff, 0xffffffff},
     {0x5207ddc2, 0x45165e59, 0x4d8ee751, 0x8c52f662}},
    {7,
     {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
     {0xa4093822, 0x299f31d0},
     {0x4dfccaba, 0x190a87f0, 0xc47362ba, 0xb6b5242a}},
    {10, {0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {10,
     {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
     {0xffffffff, 0xffffffff},
     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    {10,
     {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
     {0xa4093822, 0x299f31d0},
     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
};

Test(rng, philox4x32_random123_known_answers) {
    for (size_t t = 0; t < sizeof kat / sizeof kat[0]; t++) {
        EmxPhilox4 r = emx_philox4x32_r(kat[t].rounds, kat[t].key, kat[t].ctr);
        for (int j = 0; j < 4; j++)
            cr_expect_eq(r.v[j], kat[t].expect[j], "vector %zu (%d rounds) word %d: %08x != %08x",
                         t, kat[t].rounds, j, r.v[j], kat[t].expect[j]);
        if (kat[t].rounds == 10) {
            EmxPhilox4 d = emx_philox(kat[t].key, kat[t].ctr);  // the 10-round default
            for (int j = 0; j < 4; j++) cr_expect_eq(d.v[j], kat[t].expect[j]);
        }
    }
}

Test(rng, seed_step_lane_map_onto_key_and_counter) {
    // emx_rng_block's documented layout: key = seed (low, high), counter = (step low,
    // step high, lane, 0). With the pi inputs this must reproduce the KAT answer above.
    uint64_t seed = ((uint64_t)0x299f31d0 << 32) | 0xa4093822;
    uint64_t step = ((uint64_t)0x85a308d3 << 32) | 0x243f6a88;
    uint32_t key[2] = {0xa4093822, 0x299f31d0};
    uint32_t ctr[4] = {0x243f6a88, 0x85a308d3, 0x13198a2e, 0};
    EmxPhilox4 a = emx_rng_block(seed, step, 0x13198a2e);
    EmxPhilox4 b = emx_philox(key, ctr);
    for (int j = 0; j < 4; j++) cr_expect_eq(a.v[j], b.v[j]);
}

Test(rng, uniforms_in_unit_interval_and_deterministic) {
    double sum = 0.0, sum_f = 0.0;
    const int n = 200000;
    for (int i = 0; i < n; i++) {
        double u = emx_uniform_f64(42, (uint64_t)i, 0);
        float f = emx_uniform_f32(42, (uint64_t)i, 1);
        cr_assert(u >= 0.0 && u < 1.0, "u = %.17g at step %d", u, i);
        cr_assert(f >= 0.0f && f < 1.0f, "f = %.9g at step %d", (double)f, i);
        cr_assert_eq(u, emx_uniform_f64(42, (uint64_t)i, 0));  // same address, same number
        sum += u;
        sum_f += f;
    }
    // Mean of n uniforms: 0.5 with standard deviation sqrt(1/12/n) ~ 6.5e-4; allow 5 sigma.
    cr_expect(fabs(sum / n - 0.5) < 5 * sqrt(1.0 / 12 / n), "mean %.6f", sum / n);
    cr_expect(fabs(sum_f / n - 0.5) < 5 * sqrt(1.0 / 12 / n), "mean %.6f", sum_f / n);
}

Test(rng, seeds_steps_and_lanes_are_independent_streams) {
    // Uniform bins: a chi-square over 16 bins for three streams that differ only in seed,
    // lane or step offset, and the correlation between streams near 0.
    const int n = 64000, bins = 16;
    int counts[3][16] = {{0}};
    double sxy = 0.0, sx = 0.0, sy = 0.0, sxx = 0.0, syy = 0.0;
    for (int i = 0; i < n; i++) {
        double a = emx_uniform_f64(1, (uint64_t)i, 0);
        double b = emx_uniform_f64(2, (uint64_t)i, 0);
        double c = emx_uniform_f64(1, (uint64_t)i, 1);
        counts[0][(int)(a * bins)]++;
        counts[1][(int)(b * bins)]++;
        counts[2][(int)(c * bins)]++;
        sx += a;
        sy += c;
        sxy += a * c;
        sxx += a * a;
        syy += c * c;
    }
    for (int s = 0; s < 3; s++) {
        double chi2 = 0.0, e = (double)n / bins;
        for (int k = 0; k < bins; k++) chi2 += (counts[s][k] - e) * (counts[s][k] - e) / e;
        cr_expect(chi2 < 37.7, "stream %d: chi2 %.2f over 15 dof (p = 0.001 at 37.7)", s, chi2);
    }
    double cov = sxy / n - (sx / n) * (sy / n);
    double corr = cov / sqrt((sxx / n - (sx / n) * (sx / n)) * (syy / n - (sy / n) * (sy / n)));
    cr_expect(fabs(corr) < 5.0 / sqrt(n), "lane 0 vs lane 1 correlation %.5f", corr);
}

Test(rng, time_seeds_differ) {
    uint64_t a = emx_rng_seed_from_time(), b = emx_rng_seed_from_time();
    cr_expect_neq(a, b);
    cr_expect(a < (1ull << 53) && b < (1ull << 53));
}
