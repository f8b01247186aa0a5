// cli_args.h — the command line of ./run (llama.cpp-style flags), parsed into a struct with
// every default filled in. Parsing is separate from running so it can be tested in-process;
// docs/cli.md describes every flag.
#ifndef ENTROPIX_CLI_ARGS_H
#define ENTROPIX_CLI_ARGS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "runtime/forward.h"
#include "runtime/logit_filter.h"
#include "sampler/sample.h"

#define EMX_VERSION_STRING "0.1.0"

// --sampler: which decision rule picks each token.
enum emx_sampler_kind {
    EMX_SAMPLER_COMBINED = 0,  // temperature + top-k + top-p + min-p
    EMX_SAMPLER_GREEDY,        // argmax
    EMX_SAMPLER_TEMP,          // temperature only
    EMX_SAMPLER_TOPK,          // temperature + top-k
    EMX_SAMPLER_TOPP,          // temperature + top-p
    EMX_SAMPLER_MINP,          // temperature + min-p
    EMX_SAMPLER_ENTROPIX,      // the entropix strategy switch (the default)
    EMX_SAMPLER_AGENTS,        // the agent pool with its critic (runtime/pool/pool_generate.h)
    EMX_SAMPLER_BRANCH,        // the branching decoder (runtime/branch/branch_decode.h)
};

#define EMX_CLI_MAX_PROFILE_SETS 64

enum { EMX_CHAT_AUTO = -1, EMX_CHAT_RAW = 0, EMX_CHAT_ON = 1 };

typedef struct {
    const char *model_path;   // positional
    const char *prompt;       // -p; NULL: none given
    const char *prompt_file;  // -f; NULL: none given
    const char *system;       // --system; NULL: none
    int n_predict;            // -n, default 256; -1: until a stop token or the context is full
    uint64_t seed;            // -s
    int n_predict_given;      // 0: the default, lowered to what the context has room for
    int seed_given;           // 0: ./run picks a time-based seed and prints it
    EmxSamplerParams sampling;// --temp --top-k --top-p --min-p
    int temp_given, top_k_given, top_p_given, min_p_given;  // entropix: override the profile's
    int sampler;              // enum emx_sampler_kind; default entropix (greedy for a bare --temp 0)
    int sampler_given;
    const char *profile;      // --profile NAME|FILE (entropix), default EMX_PROFILE_DEFAULT
    const char *profile_sets[EMX_CLI_MAX_PROFILE_SETS];  // --profile-set KEY=VALUE, in order
    int n_profile_sets;
    int metric_layer;         // --metric-layers: EMX_ATTN_LAYER_LAST (-1), _ALL (-2) or N
    int metric_layer_given;
    const char *metrics_path; // --metrics FILE: one JSON line per generated token
    int color;                // --color: tokens coloured by entropix case
    // the agent pool (--sampler agents, implied by any of its flags)
    int n_agents;             // --agents N, default 8
    const char *agent_configs;// --agent-configs "T:k,T:k,...": overrides --agents
    int lookahead;            // --lookahead L, default 1 (the original design)
    int workers;              // --workers N: CPU workers, default 1
    const char *device;       // --device cpu|cuda:N|auto (single stream); default "auto"
    EmxKvType cache_type;  // --cache-type auto|f32|f16; default auto
    const char *devices;      // --devices cpu|cuda:0,cuda:1,...; default "cpu"
    int check_every;          // --check-every K, default 5 when a critic runs (0: no critic)
    int check_every_given;    // --check-every was given: the critic runs with the same model
    int critic_default_off;   // agents mode without --critic-model or --check-every: no critic
                              // (check_every is 0 then; ./run says so once on stderr)
    int rollback;             // --rollback R, default 5
    int max_rollbacks;        // --max-rollbacks N, default 3
    int critic_window;        // --critic-window W, default 64 tokens
    float critic_margin;      // --critic-margin M, default 0
    const char *critic_model; // --critic-model FILE; NULL: the generating model
    const char *log_path;     // --log FILE: the generation log
    // the branching decoder (--sampler branch, implied by any of its flags; docs/branch.md)
    float branch_entropy;     // --branch-entropy TAU: fork above TAU bits, default 2
    int branch_k;             // --branch-k K: branches per fork, 2..16, default 5
    int branch_forks;         // --branch-forks B: forks per generation, default 1
    float branch_gate;        // --branch-gate G: candidates need p >= G * p(top), (0, 1], default 0.1
    int branch_lookahead;     // --branch-lookahead L: tokens before a fork is decided, default 0 (to the end)
    int branch_rule;          // --branch-rule prob|margin|entropy (EmxBranchRule), default prob
    const char *answer_cue;   // --answer-cue TEXT; NULL: "The answer is"
    const char *answer_alphabet; // --answer-alphabet A,B,C: answer commitment on; NULL: off
    const char *report_path;  // --report FILE.html: the run as one self-contained page
    EmxLogitRules rules;      // --repeat-penalty, --repeat-last-n, --presence-penalty,
                              // --frequency-penalty, --logit-bias (runtime/logit_filter.h)
    const char *grammar;      // --grammar GBNF text (sampler/grammar.h); NULL: none
    const char *grammar_file; // --grammar-file FILE
    const char *json_schema;  // -j, --json-schema JSON text (sampler/json_schema.h)
    const char *json_schema_file;  // --json-schema-file FILE
    int json_object;          // the server's response_format json_object: any JSON object
    int logprobs;             // --logprobs N (0..20): top-N log-probabilities per --metrics line;
                              // -1: not given (no top_logprobs/logprob keys)
    int ctx;                  // -c; 0: min(model's max_seq_len, 4096)
    int threads;              // -t; 0: all cores
    int chat;                 // EMX_CHAT_AUTO (chat if the model has a template) / RAW / ON
    int no_think;             // --no-think (Qwen3)
    int conversation;         // -cnv, --conversation: a chat read from stdin, turn by turn (run_chat.h)
    int escape;               // -e, --escape: \n \r \t \' \" \\ \xHH in -p and --system (emx_cli_unescape)
    int ignore_eos;           // --ignore-eos: a stop token is fed back like any other
    int verbose;
    int verify;               // --verify: check the model file's checksum before running
    const char *gguf_cache;   // --gguf-cache DIR: a GGUF model's cache folder (gguf_cache.h); NULL: the default
    int mmap;                 // --mmap: map the file instead of copying it into huge pages
    int help, version;        // -h / --version: print and exit 0
} EmxCliArgs;

// Parses argv into *a (defaults first). Returns 0, or 2 (usage error: exit code 2) with a
// one-line message in err, e.g. "--temp: 'abc' is not a number", "unknown option '--foo'".
int emx_cli_parse(int argc, char **argv, EmxCliArgs *a, char *err, size_t errlen);

// The sampler parameters the chosen --sampler actually uses (filters it does not use are off;
// greedy has temperature 0).
EmxSamplerParams emx_cli_effective_sampling(const EmxCliArgs *a);

const char *emx_sampler_kind_name(int kind);

// The text of -p or --system with -e's escapes replaced (llama.cpp's set: \n \r \t \' \" \\ and
// \xHH); any other backslash is kept as it is. Returns a malloc'd copy and its length in *len
// (\x00 gives a NUL byte, which the length keeps), or NULL when out of memory.
char *emx_cli_unescape(const char *s, size_t *len);

// The --help text.
void emx_cli_usage(FILE *f, const char *prog);
// --version of ./run and the tools: "entropix.c PROG 0.1.0 (backends: cpu, cuda sm_80 sm_90)".
void emx_cli_version(FILE *f, const char *prog);

#endif
