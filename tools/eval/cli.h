// cli.h — the eval command line (docs/eval.md "Usage").
#ifndef ENTROPIX_EVAL_CLI_H
#define ENTROPIX_EVAL_CLI_H

#include <stddef.h>
#include <stdio.h>

#define EVAL_MAX_FILES 64
#define EVAL_MAX_CONFIGS 32
#define EVAL_DEFAULT_OUT "eval-results.jsonl"

typedef struct {
    const char *model;
    const char *tasks[EVAL_MAX_FILES];
    int n_tasks;
    const char *configs[EVAL_MAX_CONFIGS];  // default: greedy, combined, entropix
    int n_configs;
    int seeds;          // --seeds N, default 3
    int limit;          // --limit N: the first N items of each file (0: all)
    const char *out;    // -o, default eval-results.jsonl
    const char *json;   // --json FILE: the summary as JSON (NULL: none)
    const char *report_dir; // --report-dir DIR: an HTML report per generation (NULL: none)
    const char *device; // --device, default auto
    int threads;        // -t, default 0 (all cores)
    int help;
    int version;        // --version: print it and the backends, run nothing
} EvalArgs;

// Returns 0, or 2 with a one-line message in err.
int eval_parse_args(int argc, char **argv, EvalArgs *a, char *err, size_t errlen);
void eval_usage(FILE *f);

#endif
