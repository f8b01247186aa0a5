// run_pool.h — ./run's agent-pool mode (--sampler agents): the flags turned into
// EmxPoolOptions, the critic set up, the log opened, the run and its summary.
#ifndef ENTROPIX_RUN_POOL_H
#define ENTROPIX_RUN_POOL_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/cli/cli_args.h"
#include "runtime/model.h"
#include "runtime/pool/critic.h"
#include "runtime/pool/pool_generate.h"
#include "tokenizer/tokenizer.h"

// The pool's layout from the flags (run_pool_setup.c), shared by ./run and tools/eval.
typedef struct {
    EmxAgentParams agents[EMX_POOL_MAX_AGENTS];  // --agents N's defaults, or --agent-configs
    int n_agents;
    int cuda_devices[EMX_POOL_MAX_AGENTS];       // --devices cuda:0,cuda:1 -> {0, 1}
    int n_devices;                               // 0: CPU workers
    int n_workers;                               // one per device, else --workers
    char critic_device[24];                      // "cpu", or rank 0's GPU "cuda:N"
} EmxRunPoolSetup;

// Reads --devices, --workers, --agents, --agent-configs; checks that the GPUs exist and that
// every worker has an agent. Returns 0, or 2 (a bad flag value) or 1 (no such GPU) with a
// one-line reason in err ("--workers 5 is more than the 4 agents").
int emx_run_pool_setup(const EmxCliArgs *a, EmxRunPoolSetup *s, char *err, size_t errlen);

// The critic the flags ask for: --critic-model's, else the generating model judging (on
// s->critic_device, `threads` OpenMP threads). NULL with err on failure.
EmxCritic *emx_run_pool_critic(const EmxCliArgs *a, const EmxRunPoolSetup *s, const EmxModel *m,
                               const EmxTokenizer *tk, int threads, char *err, size_t errlen);

// The pool's options from the flags and the setup: agents, lookahead, workers and their devices,
// `threads` split over the workers, the critic (used when --check-every > 0) and its schedule.
// Output, log, metrics, events and the interrupt flag are left for the caller.
EmxPoolOptions emx_run_pool_options(const EmxCliArgs *a, const EmxRunPoolSetup *s, int threads, int ctx,
                                    uint64_t seed, int n_predict, EmxCritic *critic);

// Bytes the CPU workers' replicas of m at ctx allocate (n_workers states, and a critic state over
// the same model when a->check_every > 0 without --critic-model), as ./run checks them against
// the memory there is; kv_bytes (optional): their KV caches' part. The server admits a request's
// pool with the same figure.
uint64_t emx_run_pool_memory(const EmxCliArgs *a, const EmxModel *m, int ctx, int n_workers, uint64_t *kv_bytes);

// Generates from the prompt ids with the agent pool as the flags in `a` say. `interrupted`
// is the SIGINT flag (set asynchronously; the run stops after the current round, prints and
// logs what it has). Returns ./run's exit status: 0, 1 (runtime error), 2 (bad flag value),
// 130 (interrupted).
int emx_run_pool(const EmxCliArgs *a, const EmxModel *m, const EmxTokenizer *tk, const int *ids, int n_ids, int ctx,
                 volatile sig_atomic_t *interrupted);

#endif
