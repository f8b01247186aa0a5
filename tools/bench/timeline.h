// timeline.h — `bench speed --timeline`: where one decode token's time goes on a GPU, phase by
// phase (forward.h's EmxPhase), beside the bandwidth model's bytes and bound for each phase and
// the graph path's own time per token, measured in the same run.
//
// Two states of the model share its weights on the device: the one `bench speed` measured (its
// decode steps replay a CUDA graph) and a timed one (EmxStateOptions.phase_timeline: the same
// kernels launched directly, a CUDA event closing each phase). Each round decodes tgN on the
// graph state, then tgN on the timed one, so both see the same machine. The timed step is slower
// than the graph's (direct launches, no overlap across an event): its phases say where the time
// goes, the graph's figure what a token costs; both are printed, with their ratio.
#ifndef ENTROPIX_BENCH_TIMELINE_H
#define ENTROPIX_BENCH_TIMELINE_H

#include <stddef.h>
#include <stdio.h>

#include "runtime/forward.h"
#include "runtime/model.h"
#include "tools/bench/bandwidth_model.h"

typedef struct {
    int n_gen, depth, rounds;
    double peak_gbps;       // the device's peak bandwidth (GB/s): the bound's
    const char *peak_label; // where it comes from: the GPU's properties, --peak-gbps, a named device
} EmxTimelineRun;

// Runs the rounds on graph_state (a GPU state; so: the options it was made with) and prints the
// table to out. persistent: the timed state decodes with the persistent kernel (one launch split
// between the phases by its blocks' clocks, with each phase's barrier time in a last column; where
// the kernel does not take the model, a line says why). 0, or -1 with a one-line reason in err.
int emx_bench_timeline(const EmxModel *m, EmxState *graph_state, const EmxStateOptions *so, const EmxTimelineRun *run,
                       int persistent, FILE *out, char *err, size_t errlen);

#endif
