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
    int correct;                // 1 / 0; -1: an open-ended item (check 'open': no answer)
    int n_tokens;
    double time_s;
    long cases[EMX_CASE_COUNT];
    // Recorded when the generation had them (a field absent from an older results file: NaN / -1):
    double answer_margin;       // mean p(top1) - p(top2) over the answer's tokens (trace.h)
    double mean_entropy_bits;   // mean logits entropy over the generated tokens
    double mean_logprob_nats;   // mean ln p(chosen) under the untempered softmax
    long n_not_argmax;          // generated tokens that were not the argmax (-1: not recorded)
    int n_paths;                // candidate paths of the decoder (0: none)
    int oracle;                 // 1: one of the paths passes the check, 0: none does, -1: no paths
    int repetition_loop;        // open-ended: 1 / 0 (textstats.h), -1: not recorded
    double distinct_1, distinct_2;  // open-ended: distinct-n of the token ids
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

// Appends one result line (flushed) and keeps it in rs: the check's result (extracted, correct),
// and what eval_measure finds in g. Returns 0, or -1 (a failed write).
int eval_results_add(EvalResults *rs, const EvalItem *it, const EvalConfig *c, uint64_t seed, const EvalGen *g,
                     const char *extracted, int correct, char *err, size_t errlen);

// The measures of generation g of item it, into r's recorded fields: the answer margin (the
// check re-run on g->text for where the answer stands), the trace's means, the oracle over
// g->paths (each path's text checked as the item says), and for 'open' items the repetition
// loop and distinct-n. Leaves r's other fields as they are.
void eval_measure(const EvalItem *it, const EvalGen *g, EvalResult *r);

// Closes the file (0, or -1 if a write failed) and frees everything.
int eval_results_close(EvalResults *rs, char *err, size_t errlen);

#endif
