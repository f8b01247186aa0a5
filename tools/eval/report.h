// report.h — eval's summary: per family, then overall, one row per config (docs/eval.md
// "The summary"), as a table on stdout and as JSON (--json FILE).
#ifndef ENTROPIX_EVAL_REPORT_H
#define ENTROPIX_EVAL_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include "tools/eval/config.h"
#include "tools/eval/results.h"
#include "tools/eval/tasks.h"

typedef struct {
    const EvalItem *const *items;  // the items this run covers
    int n_items;
    const EvalConfig *configs;
    int n_configs;
    int n_seeds;                   // seeds 0..n_seeds-1 (deterministic configs: seed 0 only)
    const EvalResults *results;
} EvalSummaryInput;

typedef struct {
    long n, correct;               // results and how many were correct
    double accuracy, ci_lo, ci_hi; // correct / n, Wilson 95%
    double diff;                   // mean over items of (this config's - the first's) per-item mean correctness
    long b, c;                     // items where the first config scores higher / lower
    double p;                      // exact two-sided sign test of b against c
    double mean_tokens, tok_s, time_s;
    long cases[EMX_CASE_COUNT];
    int n_items;                   // items with every result present
} EvalRow;

// The row of config ci over the items of family (NULL: all).
void eval_summary_row(const EvalSummaryInput *in, int ci, const char *family, EvalRow *row);

// The table (families in first-seen order, then "overall") to f.
void eval_summary_print(FILE *f, const EvalSummaryInput *in);

// The same as one JSON document to f. Returns 0, or -1 (out of memory / a failed write).
int eval_summary_json(FILE *f, const EvalSummaryInput *in, const char *model_path);

#endif
