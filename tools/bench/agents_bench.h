// agents_bench.h — the runs of `bench agents` (tools/bench.c): where the pool runs, and one run
// of one row (the single stream, the pool at lookahead 1 or L, the pool with a critic) with what
// it measured.
#ifndef ENTROPIX_BENCH_AGENTS_BENCH_H
#define ENTROPIX_BENCH_AGENTS_BENCH_H

#include <stddef.h>

#include "runtime/forward.h"
#include "runtime/model.h"
#include "runtime/pool/pool_generate.h"
#include "tokenizer/tokenizer.h"

// The rows of `bench agents`, in the order they run within a round.
enum { EMX_AGENTS_SINGLE, EMX_AGENTS_L1, EMX_AGENTS_LOOKAHEAD, EMX_AGENTS_CRITIC, EMX_AGENTS_ROWS };

// Where the pool runs: the GPUs of `devices` (cuda_devices[0..*n_devices), one worker each, so
// *workers becomes their count) or the CPU (*n_devices 0, *workers kept). Returns the number of
// pool rows that can run: 1 (the single stream only) when this build's pool cannot use GPUs
// (with a note on stdout), else all; -1 with err set on a bad --devices / --workers.
int emx_bench_pool_devices(const char *devices, int *cuda_devices, int *n_devices, int *workers, int n_agents,
                           char *err, size_t errlen);

// What one run measured.
typedef struct {
    double tok_s;         // committed tokens per second of decode (the prefill's first token excluded)
    int n_checks;         // the critic's judgments (the critic row)
    double critic_share;  // their share of the decode time
} EmxAgentsRun;

// Run `seed` of row `row`: the single stream on st (greedy), or the pool of `pool` at lookahead 1
// (EMX_AGENTS_L1, and EMX_AGENTS_CRITIC with pool->critic judging every pool->check_every tokens)
// or at pool->lookahead; n tokens after ids[0..n_ids). Returns 0 or -1 with err set.
int emx_bench_agents_run(EmxState *st, const EmxModel *model, const EmxTokenizer *tk, const int *ids, int n_ids,
                         int n, int row, int seed, const EmxPoolOptions *pool, EmxAgentsRun *out, char *err,
                         size_t errlen);

// The rows' names (names[EMX_AGENTS_ROWS][48]) and the table of `bench agents`: the medians of
// each row's runs (res [run][EMX_AGENTS_ROWS]; tps, shares: runs doubles of scratch) against the
// single stream's, and the critic's share when its row ran.
void emx_bench_agents_names(char (*names)[48], int n_agents, int lookahead, int check_every);
void emx_bench_agents_table(const EmxAgentsRun *res, int runs, int rows, const char (*names)[48], double *tps,
                            double *shares);

#endif
