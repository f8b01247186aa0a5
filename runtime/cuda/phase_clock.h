// phase_clock.h — where a CUDA decode step's time goes, by phase (forward.h's EmxPhase): with
// EmxStateOptions.phase_timeline the step runs as direct launches and a CUDA event is recorded
// at the start of the step and at the end of every phase; when the step has finished, the time
// between consecutive events is added to the phase the later one closes. A kernel's time is then
// its run plus whatever gap the host left before it: direct launches, not the graph's, without
// programmatic dependent launch, and an event between phases keeps the next kernel from starting
// early (no overlap across a boundary).
// The graph path's wall-clock time, alternated with it, is the figure a timeline is read against.
#ifndef ENTROPIX_CUDA_PHASE_CLOCK_H
#define ENTROPIX_CUDA_PHASE_CLOCK_H

#include <cuda_runtime.h>

#include "runtime/forward.h"

// A mark whose interval is split between the phases by the owner's shares (cuda_phase_split: the
// persistent kernel, one launch for every phase of the layers).
#define CUDA_PHASE_SPLIT ((EmxPhase)EMX_PHASES)

typedef struct {
    cudaEvent_t *events;   // [cap] events[0] opens the step, events[i] closes phase[i]
    unsigned char *phase;  // [cap]
    int cap, n;            // cap = 2 + 5 x layers + 2: every mark of the longest step
    int running;           // between cuda_phase_start and cuda_phase_collect (a timed step)
    double share[EMX_PHASES], wait[EMX_PHASES];  // a SPLIT interval's parts: each phase's, and
                                                 // of it the barrier's (cuda_phase_split)
    EmxPhaseTimes total;
} CudaPhaseClock;

// A clock for steps of n_layers layers, or NULL (out of memory or a CUDA error: err filled).
CudaPhaseClock *cuda_phase_clock_new(int n_layers, char *err, size_t errlen);
void cuda_phase_clock_free(CudaPhaseClock *c);

// On stream: cuda_phase_start records the opening event; cuda_phase_end the end of phase p (a
// no-op when no timed step runs: prefill, captured graphs, other kinds of rows). 0, or a CUDA
// error code.
cudaError_t cuda_phase_start(CudaPhaseClock *c, cudaStream_t stream);
cudaError_t cuda_phase_end(CudaPhaseClock *c, EmxPhase p, cudaStream_t stream);
// How the step's CUDA_PHASE_SPLIT interval divides: share[p] of it is phase p's, wait[p] of it
// (<= share[p]) that phase's barrier; set after the step's stream has synchronised, before
// cuda_phase_collect.
void cuda_phase_split(CudaPhaseClock *c, const double share[EMX_PHASES], const double wait[EMX_PHASES]);
// After the step's stream has synchronised: adds its phases to the totals and ends the timed step.
cudaError_t cuda_phase_collect(CudaPhaseClock *c);

#endif
