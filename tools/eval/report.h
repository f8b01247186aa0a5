// report.h — eval's summary: per family, then overall, one row per config and one per trivial
// baseline (docs/eval.md "The summary"), as a table on stdout and as JSON (--json FILE). The
// numbers are summary.h's.
#ifndef ENTROPIX_EVAL_REPORT_H
#define ENTROPIX_EVAL_REPORT_H

#include <stdio.h>

#include "tools/eval/summary.h"

// The table (families in first-seen order, then "overall") to f. Returns 0, or -1 (out of memory).
int eval_summary_print(FILE *f, const EvalSummaryInput *in);

// The same as one JSON document to f. Returns 0, or -1 (out of memory / a failed write).
int eval_summary_json(FILE *f, const EvalSummaryInput *in, const char *model_path);

// Family i is the first item of its family (families in first-seen order).
int eval_first_of_family(const EvalSummaryInput *in, int i);

#endif
