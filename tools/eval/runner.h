// runner.h — one generation of eval: an item's prompt through a config's sampler with a seed,
// by the code paths of ./run (emx_prompt_ids, emx_generate with run_setup's sampler, or
// emx_pool_generate for agents), so the text is ./run's for the same prompt, flags and -s.
#ifndef ENTROPIX_EVAL_RUNNER_H
#define ENTROPIX_EVAL_RUNNER_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/forward.h"
#include "runtime/model.h"
#include "runtime/pool/critic.h"
#include "runtime/token_log.h"
#include "sampler/entropix.h"
#include "tokenizer/tokenizer.h"
#include "tools/eval/config.h"
#include "tools/eval/tasks.h"

typedef struct {
    const EmxModel *m;
    const EmxTokenizer *tk;
    EmxState *st;                 // one state for every single-stream generation
    int *cached;                  // st's cache holds the rows of these prompt ids at 0..n_cached-1
    int n_cached, cap_cached;     // (a generation from prompt p writes rows >= len(p) - 1 only)
    int threads;
    const char *device;
    EmxCritic *critic;            // the agents config's critic, kept while that config runs
    const EvalConfig *critic_for;
    const char *report_dir;       // --report-dir: a page per generation (NULL: none)
} EvalRunner;

typedef struct {
    char *text;                   // the generated text (without the echoed prompt); malloc'd
    int n_tokens;                 // tokens generated (a final stop token included)
    double time_s;                // prefill + decode
    long cases[EMX_CASE_COUNT];   // entropix: tokens chosen per case
    long n_inserted;              // entropix: pause tokens inserted
    char **paths;                 // branch: every path's final text (malloc'd strings), for the
    int n_paths;                  // oracle "does any path hold the answer"; NULL/0 otherwise
} EvalGen;

// device, threads: as ./run's --device and -t. Allocates the state. Returns 0 or -1.
int eval_runner_init(EvalRunner *r, const EmxModel *m, const EmxTokenizer *tk, const char *device, int threads,
                     char *err, size_t errlen);
void eval_runner_free(EvalRunner *r);

// The item's prompt ids as ./run builds them (raw, or chat with the config's --no-think).
int eval_prompt_ids(const EvalRunner *r, const EvalItem *it, const EvalConfig *c, int **ids, int *n_ids, char *err,
                    size_t errlen);

// The context a generation with c has (the state's, or the agents' replicas').
int eval_runner_ctx(const EvalRunner *r, const EvalConfig *c);

// The --report-dir page of (it, c, seed): dir/<family>-<id>-<config>-s<seed>.html, each name
// with every byte outside [A-Za-z0-9._-] written as '_'. Returns 0, or -1 when it does not fit.
int eval_report_path(char *out, size_t cap, const char *dir, const EvalItem *it, const EvalConfig *c, uint64_t seed);

// Generates it's answer with c and seed (and its report page when r->report_dir is set).
// Returns 0 (g filled; free g->text and g->paths), or -1.
int eval_generate(EvalRunner *r, const EvalConfig *c, const EvalItem *it, uint64_t seed, EvalGen *g, char *err,
                  size_t errlen);

#endif
