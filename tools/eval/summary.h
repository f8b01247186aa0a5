// summary.h — the numbers of eval's summary (docs/eval.md "The summary"), per block of items (a
// family, or all of them): per config its accuracy with the paired test against the first config,
// the confidence measures and the oracle; the trivial baselines, scored from the task items
// alone; for open-ended items their own metrics. report.h prints them and writes them as JSON.
//
// Pairing. Items whose prompts are identical (the same chat flag, system message and prompt, so
// the same rendered prompt) form one unit: their per-item scores are averaged, and the sign test
// counts units, so a prompt asked twice is not two independent observations.
#ifndef ENTROPIX_EVAL_SUMMARY_H
#define ENTROPIX_EVAL_SUMMARY_H

#include <stdint.h>

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

// A config's row over the block's items with an answer (check 'open' items are not in it).
typedef struct {
    long n, correct;               // results and how many were correct
    double accuracy, ci_lo, ci_hi; // correct / n, Wilson 95%
    double diff;                   // mean over paired items of (this config's - the first's) per-item mean correctness
    long b, c;                     // units (distinct prompts) where the first config scores higher / lower
    double p;                      // exact two-sided sign test of b against c
    int n_units;                   // units paired with the first config
    double mean_tokens, tok_s, time_s;
    long cases[EMX_CASE_COUNT];
    int n_items;                   // items with every result present
    double not_argmax;             // generated tokens not the argmax / generated tokens (NaN: not recorded)
    double auroc_margin;           // AUROC of answer_margin against correctness (NaN: a class empty)
    long n_auroc_margin;           // results it is over (those with an answer margin)
    double auroc_entropy;          // AUROC of -mean_entropy_bits against correctness
    long n_auroc_entropy;
    double oracle;                 // results where one of the paths passes / results with paths (NaN: none)
    long n_oracle;
} EvalRow;

// A trivial baseline's row: a fixed answer per item, run through the item's check.
typedef struct {
    char name[48];                 // "mode", "first-option", "always-1", or a task file's baselines name
    const char *answer;            // the answer when it is the same for every item of the block, else NULL
    int n_items;                   // items it applies to (n)
    long correct;
    double accuracy, ci_lo, ci_hi;
    double diff;                   // mean over paired items of (baseline - first config)
    long b, c;                     // units where the first config scores higher / lower
    double p;
    int n_units;
} EvalBaselineRow;

// A config's open-ended metrics over the block's 'open' items.
typedef struct {
    long n;                        // results
    long n_loops, n_loop_known;    // results ending in a repetition loop / results recording it
    double loop_share;             // n_loops / n_loop_known (NaN: none)
    double distinct_1, distinct_2; // means over results (NaN: none)
    double mean_logprob_nats;      // ln p(chosen) per generated token, over every token (NaN: none)
    double not_argmax;
    double mean_tokens;
} EvalOpenRow;

typedef struct EvalSummary EvalSummary;

// Indexes the results by (item, config, seed), groups the items by prompt and finds each
// family's most common answer. Returns NULL when out of memory.
EvalSummary *eval_summary_new(const EvalSummaryInput *in);
void eval_summary_free(EvalSummary *s);

// The block of family (NULL: every item): items, distinct prompts, items with an answer, open items.
void eval_summary_block(const EvalSummary *s, const char *family, int *n_items, int *n_prompts, int *n_answered,
                        int *n_open);

void eval_summary_row(const EvalSummary *s, int ci, const char *family, EvalRow *row);
void eval_summary_open_row(const EvalSummary *s, int ci, const char *family, EvalOpenRow *row);

// The baselines that apply to the block's items, in this order: mode, first-option (check
// 'choice': "A"), always-1 (check 'number': "1"), then the task files' names in first-seen order.
// Returns how many were written to rows (at most cap).
int eval_summary_baselines(const EvalSummary *s, const char *family, EvalBaselineRow *rows, int cap);

#endif
