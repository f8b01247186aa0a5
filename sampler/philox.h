// philox.h — Philox4x32-10, the counter-based random number generator of Salmon et al.,
// "Parallel Random Numbers: As Easy as 1, 2, 3" (SC11), as Random123 defines it.
//
// Counter-based means there is no state to carry: the numbers are a pure function of a key
// (here: the seed) and a counter (here: the decoding step and a lane). So the sampler on the
// host and, later, the one inside a CUDA kernel draw exactly the same numbers for the same
// (seed, step, lane), a rollback replays the same draws, and agents never share a stream.
//
// Header-only, `static inline`, no globals: compiled unchanged by the host compiler and by nvcc
// (EMX_HD marks the functions __host__ __device__ there).
#ifndef ENTROPIX_PHILOX_H
#define ENTROPIX_PHILOX_H

#include <stdint.h>

#include "sampler/hostdevice.h"

// Round multipliers and Weyl key increments (golden ratio, sqrt(3) - 1), from the paper.
#define EMX_PHILOX_M0 0xD2511F53u
#define EMX_PHILOX_M1 0xCD9E8D57u
#define EMX_PHILOX_W0 0x9E3779B9u
#define EMX_PHILOX_W1 0xBB67AE85u

typedef struct {
    uint32_t v[4];
} EmxPhilox4;

// One round: two 32x32->64 products; the high halves are mixed with the other words and the
// key, the low halves move on unchanged (a Feistel-like permutation of the 4 words).
static inline EMX_HD void emx_philox_round(uint32_t c[4], uint32_t k0, uint32_t k1) {
    uint64_t p0 = (uint64_t)EMX_PHILOX_M0 * c[0];
    uint64_t p1 = (uint64_t)EMX_PHILOX_M1 * c[2];
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    uint32_t n0 = hi1 ^ c[1] ^ k0;
    uint32_t n2 = hi0 ^ c[3] ^ k1;
    c[0] = n0;
    c[1] = lo1;
    c[2] = n2;
    c[3] = lo0;
}

// Philox4x32 with `rounds` rounds (Random123 allows 1..16; 10 is the standard, 7 the fast
// variant that still passes BigCrush). The key advances by the Weyl constants between rounds.
static inline EMX_HD EmxPhilox4 emx_philox4x32_r(int rounds, const uint32_t key[2],
                                                 const uint32_t ctr[4]) {
    uint32_t c[4] = {ctr[0], ctr[1], ctr[2], ctr[3]};
    uint32_t k0 = key[0], k1 = key[1];
    for (int r = 0; r < rounds; r++) {
        if (r > 0) {
            k0 += EMX_PHILOX_W0;  // unsigned: wraps mod 2^32 as the algorithm wants
            k1 += EMX_PHILOX_W1;
        }
        emx_philox_round(c, k0, k1);
    }
    EmxPhilox4 out = {{c[0], c[1], c[2], c[3]}};
    return out;
}

// Philox4x32-10: key 2x32, counter 4x32 -> 4 independent uniform 32-bit words.
static inline EMX_HD EmxPhilox4 emx_philox(const uint32_t key[2], const uint32_t ctr[4]) {
    return emx_philox4x32_r(10, key, ctr);
}

// The project's use of the counter: key = the 64-bit seed; counter = (step low, step high,
// lane, 0). `step` is the decoding step (generated-token index), `lane` separates independent
// draws within one step (agent, best-of-N sample, ...). The fourth word is reserved (0).
static inline EMX_HD EmxPhilox4 emx_rng_block(uint64_t seed, uint64_t step, uint32_t lane) {
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t ctr[4] = {(uint32_t)step, (uint32_t)(step >> 32), lane, 0u};
    return emx_philox(key, ctr);
}

// Uniform double in [0, 1) with 53 random bits (k * 2^-53, k < 2^53): never 1.0.
static inline EMX_HD double emx_uniform_f64(uint64_t seed, uint64_t step, uint32_t lane) {
    EmxPhilox4 r = emx_rng_block(seed, step, lane);
    uint64_t bits = (((uint64_t)r.v[0] << 32) | r.v[1]) >> 11;
    return (double)bits * (1.0 / 9007199254740992.0);  // 2^53
}

// Uniform float in [0, 1) with 24 random bits (k * 2^-24): never 1.0f (a float rounding of a
// 32-bit word times 2^-32 could give exactly 1.0f).
static inline EMX_HD float emx_uniform_f32(uint64_t seed, uint64_t step, uint32_t lane) {
    EmxPhilox4 r = emx_rng_block(seed, step, lane);
    return (float)(r.v[0] >> 8) * (1.0f / 16777216.0f);  // 2^24
}

#endif
