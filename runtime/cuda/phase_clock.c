// phase_clock.c — a decode step's phases timed by CUDA events (phase_clock.h).
#include "runtime/cuda/phase_clock.h"

#include <stdlib.h>

#include "base/errmsg.h"

CudaPhaseClock *cuda_phase_clock_new(int n_layers, char *err, size_t errlen) {
    CudaPhaseClock *c = calloc(1, sizeof *c);
    // the opening event, the embedding, five phases a layer, the classifier and the step's end
    const int cap = 2 + 5 * (n_layers > 0 ? n_layers : 0) + 2;
    if (c) c->events = calloc((size_t)cap, sizeof *c->events), c->phase = calloc((size_t)cap, 1);
    if (!c || !c->events || !c->phase) {
        cuda_phase_clock_free(c);
        emx_seterr(err, errlen, "phase timeline: out of host memory");
        return NULL;
    }
    for (; c->cap < cap; c->cap++) {
        const cudaError_t e = cudaEventCreate(&c->events[c->cap]);
        if (e != cudaSuccess) {
            emx_seterr(err, errlen, "phase timeline: cudaEventCreate: %s", cudaGetErrorString(e));
            cuda_phase_clock_free(c);
            return NULL;
        }
    }
    return c;
}

void cuda_phase_clock_free(CudaPhaseClock *c) {
    if (!c) return;
    for (int i = 0; i < c->cap; i++) cudaEventDestroy(c->events[i]);
    free(c->events);
    free(c->phase);
    free(c);
}

cudaError_t cuda_phase_start(CudaPhaseClock *c, cudaStream_t stream) {
    if (!c) return cudaSuccess;
    c->running = 1;
    c->n = 1;
    return cudaEventRecord(c->events[0], stream);
}

cudaError_t cuda_phase_end(CudaPhaseClock *c, EmxPhase p, cudaStream_t stream) {
    if (!c || !c->running) return cudaSuccess;
    if (c->n >= c->cap) return cudaErrorInvalidValue;  // more marks than a step has: a caller's bug
    c->phase[c->n] = (unsigned char)p;
    return cudaEventRecord(c->events[c->n++], stream);
}

void cuda_phase_split(CudaPhaseClock *c, const double share[EMX_PHASES], const double wait[EMX_PHASES]) {
    for (int p = 0; p < EMX_PHASES; p++) c->share[p] = share[p], c->wait[p] = wait[p];
}

cudaError_t cuda_phase_collect(CudaPhaseClock *c) {
    if (!c || !c->running) return cudaSuccess;
    c->running = 0;
    for (int i = 1; i < c->n; i++) {
        float ms = 0;
        const cudaError_t e = cudaEventElapsedTime(&ms, c->events[i - 1], c->events[i]);
        if (e != cudaSuccess) return e;
        if (c->phase[i] != CUDA_PHASE_SPLIT) {
            c->total.us[c->phase[i]] += 1e3 * ms;
            continue;
        }
        for (int p = 0; p < EMX_PHASES; p++) {
            c->total.us[p] += 1e3 * ms * c->share[p];
            c->total.wait_us[p] += 1e3 * ms * c->wait[p];
        }
    }
    c->total.steps++;
    return cudaSuccess;
}
