// rng.c — seeds for the counter-based generator in philox.h.
#include "sampler/rng.h"

#include <time.h>
#include <unistd.h>

uint64_t emx_rng_seed_from_time(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t t = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    // Philox as a mixing function: the raw clock has few changing bits.
    uint32_t key[2] = {(uint32_t)getpid(), 0x5eed5eedu};
    uint32_t ctr[4] = {(uint32_t)t, (uint32_t)(t >> 32), 0u, 0u};
    EmxPhilox4 r = emx_philox(key, ctr);
    // Keep the seed to 53 bits so it prints and parses as an exact integer anywhere (JSON,
    // doubles in scripts) without surprises.
    return (((uint64_t)r.v[0] << 32) | r.v[1]) & ((1ull << 53) - 1);
}
