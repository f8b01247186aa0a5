// forward_bench.h — prefill and decode speed of the forward pass, measured the way
// llama.cpp's llama-bench measures pp<N> and tg<N>, so the two can be put side by side:
//   prefill: one batched forward pass over n_prompt tokens at positions depth.. (tok/s =
//            n_prompt / time);
//   decode:  n_gen single-token forward passes at positions depth..depth+n_gen-1 (tok/s =
//            n_gen / time), after one untimed warm-up step (a GPU captures its decode graph there).
// depth (llama-bench's -d): positions 0..depth-1 are filled first by one untimed pass, so each
// test attends to depth more keys; 0 is an empty cache.
// The same code measures every device: the state's backend decides where it runs.
// Token ids are fixed pseudo-random ones (no tokenizer, no sampler: the forward pass alone).
#ifndef ENTROPIX_BENCH_FORWARD_BENCH_H
#define ENTROPIX_BENCH_FORWARD_BENCH_H

#include <stddef.h>

#include "runtime/forward.h"
#include "runtime/model.h"

typedef struct {
    double prefill_tps;  // tokens/s, 0 if n_prompt == 0
    double decode_tps;   // tokens/s, 0 if n_gen == 0
} EmxForwardSpeed;

// One measurement on state st (ctx >= depth + max(n_prompt, n_gen)). Returns 0, or -1 with a
// reason.
int emx_bench_forward_once(EmxState *st, const EmxModel *m, int n_prompt, int n_gen, int depth,
                           EmxForwardSpeed *out, char *err, size_t errlen);
// One decode measurement (tgN at depth, no prefill) as µs a token into *us: a round of the GPU
// tables that alternate two states (timeline.h, decode_paths.h). 0, or -1 with a reason.
int emx_bench_decode_us(EmxState *st, const EmxModel *m, int n_gen, int depth, double *us, char *err, size_t errlen);

#endif
