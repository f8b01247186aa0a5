// test_rand_util.h — the CPU kernel tests' random inputs (test_cpu_ops.c, test_cpu_attention.c):
// a fixed-seed xorshift64*, so every test process starts from the same numbers. Header-only.
#ifndef ENTROPIX_TEST_RAND_UTIL_H
#define ENTROPIX_TEST_RAND_UTIL_H

#include <stdint.h>

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static inline double urand(void) {  // xorshift64*, uniform in [0, 1)
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 0x2545f4914f6cdd1dull) >> 11) / 9007199254740992.0;
}
static inline float nrand(void) {  // roughly normal: sum of 4 uniforms, centred, unit variance
    return (float)((urand() + urand() + urand() + urand() - 2.0) * 1.7320508);
}
static inline void fill(float *x, int n, float scale) {
    for (int i = 0; i < n; i++) x[i] = nrand() * scale;
}

#endif
