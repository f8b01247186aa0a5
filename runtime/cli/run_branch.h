// run_branch.h — ./run's branching-decoder mode (--sampler branch): the flags turned into
// EmxBranchParams (shared with tools/eval), the generation, its summary on stderr.
#ifndef ENTROPIX_RUN_BRANCH_H
#define ENTROPIX_RUN_BRANCH_H

#include <stddef.h>

#include "runtime/branch/branch_decode.h"
#include "runtime/cli/cli_args.h"

// The decoder's parameters from the flags (--branch-*, --answer-cue, --answer-alphabet). The
// alphabet is parsed into bp->alphabet: free it with emx_branch_alphabet_free(bp->alphabet,
// bp->n_alphabet). Returns 0, or -1 with a one-line reason.
int emx_run_branch_params(const EmxCliArgs *a, EmxBranchParams *bp, char *err, size_t errlen);

// Generates from the prompt ids on st with the branching decoder, the text to stdout (the
// prompt echoed first unless chat), the stats and the decoder's summary to stderr (with
// --verbose, every path). Returns ./run's exit status: 0, 1 (runtime error), 2 (bad flag value).
int emx_run_branch(const EmxCliArgs *a, EmxState *st, const EmxTokenizer *tk, const int *ids, int n_ids, int chat);

#endif
