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
#include "tools/eval/trace.h"

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
    EvalTrace trace;              // per token: measured by the tap (single stream), ids only (agents)
    char **paths;                 // a decoder that keeps several candidate paths (a branching one):
    int n_paths;                  // their texts [n_paths], malloc'd; NULL / 0: none
} EvalGen;

// Frees what a generation holds (text, trace, paths) and zeroes it.
void eval_gen_free(EvalGen *g);

// device, threads: as ./run's --device and -t. Allocates the state. Returns 0 or -1.
int eval_runner_init(EvalRunner *r, const EmxModel *m, const EmxTokenizer *tk, const char *device, int threads,
                     char *err, size_t errlen);
void eval_runner_free(EvalRunner *r);

// The item's prompt ids as ./run builds them (raw, or chat with the config's --no-think).
int eval_prompt_ids(const EvalRunner *r, const EvalItem *it, const EvalConfig *c, int **ids, int *n_ids, char *err,
                    size_t errlen);

// The context a generation with c has (the state's, or the agents' replicas').
int eval_runner_ctx(const EvalRunner *r, const EvalConfig *c);

// Generates it's answer with c and seed (and its report page when r->report_dir is set).
// Returns 0 (g filled; free with eval_gen_free), or -1.
int eval_generate(EvalRunner *r, const EvalConfig *c, const EvalItem *it, uint64_t seed, EvalGen *g, char *err,
                  size_t errlen);

#endif
