// config.h — eval's sampler configurations: "NAME[:key=value,...]" (docs/eval.md "Configs"),
// turned into ./run's flags and parsed by ./run's own parser (runtime/cli/cli_args.h), so every
// default and every check on a value is ./run's.
#ifndef ENTROPIX_EVAL_CONFIG_H
#define ENTROPIX_EVAL_CONFIG_H

#include <stddef.h>

#include "runtime/cli/cli_args.h"
#include "sampler/profile.h"

#define EVAL_CONFIG_MAX_ARGS 64

typedef struct {
    char *spec;                       // as given: "combined:temp=0.7" (the name in results)
    char *argv[EVAL_CONFIG_MAX_ARGS]; // the ./run command line it stands for (owned strings)
    int argc;
    EmxCliArgs args;                  // parsed: points into argv
    EmxProfile profile;               // entropix: the built profile
    int deterministic;                // greedy, branch: one run, whatever the seed
    int commit_item;                  // branch, commit=1: each item's answer_alphabet and answer_cue
} EvalConfig;

// Parses spec for model_path. Returns 0, or -1 with one line naming the config and the key:
// "config 'combined:tmp=1': key 'tmp': unknown key (temp, top_k, ...)".
int eval_config_parse(const char *spec, const char *model_path, EvalConfig *c, char *err, size_t errlen);
void eval_config_free(EvalConfig *c);

// The ./run flags of the config (for messages and docs): "--sampler combined --temp 0.7".
void eval_config_flags(const EvalConfig *c, char *out, size_t cap);

#endif
