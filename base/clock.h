// clock.h — wall-clock seconds for timing (a monotonic clock: never steps back).
#ifndef ENTROPIX_CLOCK_H
#define ENTROPIX_CLOCK_H

#include <time.h>

static inline double emx_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
