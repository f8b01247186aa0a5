// run_report.h — ./run's --report and --logprobs hooks: the report set up from the flags (both
// modes), and how many top logprobs each step keeps.
#ifndef ENTROPIX_RUN_REPORT_H
#define ENTROPIX_RUN_REPORT_H

#include "runtime/cli/cli_args.h"
#include "runtime/report/report.h"

// Top logprobs to compute per step: --logprobs N, at least EMX_REPORT_TOP with --report; -1: none.
int emx_run_logprobs_wanted(const EmxCliArgs *a);

// The report of this run (NULL without --report; also NULL, said on stderr, when out of memory:
// the caller then exits 1). profile: the entropix run's; NULL: --profile's thresholds are drawn
// (classic when it names a file that does not load). The prompt is shown as its decoded ids.
// A folder the page cannot be written to is refused here ("run: --report FILE: why").
EmxReport *emx_run_report_new(const EmxCliArgs *a, const EmxProfile *profile, const EmxTokenizer *tk,
                              const int *ids, int n_ids, uint64_t seed, const EmxAgentParams *agents, int n_agents);

// Writes and frees *r (NULL: nothing) and sets *r to NULL, whether the write worked or not.
// Returns 0, or -1 with "run: --report FILE: why" on stderr.
int emx_run_report_finish(EmxReport **r, const char *path);

#endif
