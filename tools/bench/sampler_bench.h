// sampler_bench.h — the runs of `bench sampler` (tools/bench.c): one decode with greedy, entropix or
// the fixed combined sampler, and the table of their medians with what each costs over greedy.
#ifndef ENTROPIX_BENCH_SAMPLER_BENCH_H
#define ENTROPIX_BENCH_SAMPLER_BENCH_H

#include "runtime/forward.h"
#include "runtime/model.h"
#include "sampler/profile.h"
#include "tokenizer/tokenizer.h"

// The rounds of `bench sampler`: runs rounds of one decode of n tokens after the prompt
// ids[0..n_ids) with each sampler in turn (greedy, entropix, combined and, on a GPU, greedy with
// its steps in turn), stop tokens fed back, a progress line a decode on stderr; then the table of
// medians on stdout (decode tok/s, host ms a token spent choosing) and each sampler's overhead
// over greedy: on a GPU, where every sampler chooses on the device, the tok/s ratios alone, and
// greedy with its steps in turn beside greedy queued ahead. 0, or -1 with the reason on stderr.
int emx_bench_sampler_rounds(EmxState *st, EmxTokenizer *tk, const EmxModel *model, const EmxProfile *profile,
                             const int *ids, int n_ids, int n, int runs);

#endif
