// decode_paths.h — `bench speed --persistent`: a GPU's decode step through the graph path and
// through the persistent kernel (EmxStateOptions.persistent: one launch a token), alternated
// round by round in one run, as µs a token, tok/s and the share of the bandwidth model's bound.
//
// States of the model share its weights on the device: the one `bench speed` measured, one made
// with the persistent kernel asked for and, where that kernel warms L2 with the next phases'
// weights while the attention runs (its decode path says "L2 warmed"), one without the warming
// (EMX_CUDA_PERSISTENT_WARM_MB=0). Each round decodes tgN on each in turn, so all see the same
// machine; the medians are printed with the ratios (persistent / graph; warmed / not warmed).
// Where the persistent kernel does not take the model the table says why (its state's
// decode_path) and the graph path's row stands alone.
#ifndef ENTROPIX_BENCH_DECODE_PATHS_H
#define ENTROPIX_BENCH_DECODE_PATHS_H

#include <stddef.h>
#include <stdio.h>

#include "runtime/forward.h"
#include "runtime/model.h"
#include "tools/bench/timeline.h"

// Runs the rounds (run: tgN, depth, rounds, the peak bandwidth) on graph_state (a GPU state; so:
// the options it was made with) and a persistent state, and prints the table to out. 0, or -1
// with a one-line reason in err.
int emx_bench_decode_paths(const EmxModel *m, EmxState *graph_state, const EmxStateOptions *so,
                           const EmxTimelineRun *run, FILE *out, char *err, size_t errlen);

// The tables that follow bench speed's report on a GPU: --timeline's (timeline.h: with
// --persistent the persistent kernel's timeline), then --persistent's, each when asked. 0, or -1 with the reason printed on stderr.
int emx_bench_gpu_tables(int timeline, int persistent, const EmxModel *m, EmxState *graph_state,
                         const EmxStateOptions *so, const EmxTimelineRun *run);

#endif
