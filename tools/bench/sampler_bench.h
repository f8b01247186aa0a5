// sampler_bench.h — the runs of `bench sampler` (tools/bench.c): one decode with the greedy or the
// entropix sampler, and the table of their medians with what entropix costs over greedy.
#ifndef ENTROPIX_BENCH_SAMPLER_BENCH_H
#define ENTROPIX_BENCH_SAMPLER_BENCH_H

#include "runtime/forward.h"
#include "runtime/model.h"
#include "sampler/profile.h"
#include "tokenizer/tokenizer.h"

// One decode of n tokens after the prompt ids[0..n_ids) with sampler k (0 greedy, 1 entropix
// seeded r + 1, 2 greedy with each step's token read before the next step is queued:
// EmxGenerateOptions.steps_in_turn), stop tokens fed back: its decode tok/s (*tps) and host ms a token spent choosing
// (*spt), with a progress line on stderr. 0, or -1 with the reason on stderr.
int emx_bench_sampler_run(EmxState *st, EmxTokenizer *tk, const EmxModel *model, const EmxProfile *profile,
                          const int *ids, int n_ids, int n, int k, int r, double *tps, double *spt);

// The table of medians on stdout (tg/te decode tok/s, sg/se sampler ms a token; greedy/entropix)
// and the overhead: on a GPU, where both choose on the device, the tok/s ratio alone, and greedy
// with its steps in turn (tt tok/s; 0: not measured) beside greedy queued ahead.
void emx_bench_sampler_report(const EmxState *st, double tg, double te, double sg, double se, double tt);

#endif
