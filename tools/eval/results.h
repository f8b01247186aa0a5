// results.h — eval's results file (-o): one JSON object per (item, config, seed), appended and
// flushed as each finishes. Reopening it reads what is there, so a rerun skips those and a killed
// run loses nothing it finished (docs/eval.md "Results and resuming").
#ifndef ENTROPIX_EVAL_RESULTS_H
#define ENTROPIX_EVAL_RESULTS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sampler/entropix.h"
#include "tools/eval/config.h"
#include "tools/eval/runner.h"
#include "tools/eval/tasks.h"

typedef struct {
    char *family, *id, *config;
    uint64_t seed;
    int correct;
    int n_tokens;
    double time_s;
    long cases[EMX_CASE_COUNT];
} EvalResult;

typedef struct {
    EvalResult *r;
    int n, cap;
    FILE *f;              // open for appending
    const char *path;
    const char *model;
} EvalResults;

// Reads path's results (if it exists) and opens it for appending. An incomplete last line (a
// run killed mid-write) is cut off with a warning on stderr; any other line that is not a
// result, or a result of another model than model_path, is an error. Returns 0 or -1.
int eval_results_open(EvalResults *rs, const char *path, const char *model_path, char *err, size_t errlen);

// The stored result of (family, id, config, seed), or NULL.
const EvalResult *eval_results_find(const EvalResults *rs, const char *family, const char *id, const char *config,
                                    uint64_t seed);

// Appends one result line (flushed) and keeps it in rs. Returns 0, or -1 (a failed write).
int eval_results_add(EvalResults *rs, const EvalItem *it, const EvalConfig *c, uint64_t seed, const EvalGen *g,
                     const char *extracted, int correct, char *err, size_t errlen);

// Closes the file (0, or -1 if a write failed) and frees everything.
int eval_results_close(EvalResults *rs, char *err, size_t errlen);

#endif
