// run_pool.h — ./run's agent-pool mode (--sampler agents): the flags turned into
// EmxPoolOptions, the critic set up, the log opened, the run and its summary.
#ifndef ENTROPIX_RUN_POOL_H
#define ENTROPIX_RUN_POOL_H

#include <signal.h>

#include "runtime/cli/cli_args.h"
#include "runtime/model.h"
#include "tokenizer/tokenizer.h"

// Generates from the prompt ids with the agent pool as the flags in `a` say. `interrupted`
// is the SIGINT flag (set asynchronously; the run stops after the current round, prints and
// logs what it has). Returns ./run's exit status: 0, 1 (runtime error), 2 (bad flag value),
// 130 (interrupted).
int emx_run_pool(const EmxCliArgs *a, const EmxModel *m, const EmxTokenizer *tk, const int *ids, int n_ids, int ctx,
                 volatile sig_atomic_t *interrupted);

#endif
