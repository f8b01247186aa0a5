// run_setup.h — what ./run builds from its flags before generating: the entropix profile and the
// sampler (entropix, a basic sampler, or a basic sampler with the metrics tap for --metrics).
// Shared by ./run and tools/eval so that the same flags and seed give the same tokens.
#ifndef ENTROPIX_RUN_SETUP_H
#define ENTROPIX_RUN_SETUP_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/cli/cli_args.h"
#include "runtime/entropix_sampler.h"
#include "runtime/generate.h"
#include "runtime/logit_filter.h"
#include "runtime/model.h"
#include "runtime/token_log.h"
#include "sampler/profile.h"
#include "tokenizer/tokenizer.h"

// The profile ./run uses: --profile, then each --profile-set in order, then the flags that
// name a profile field directly (--metric-layers, --temp/--top-k/--top-p/--min-p as the base
// values). Returns 0, or -1 with a one-line reason.
int emx_run_build_profile(const EmxCliArgs *a, EmxProfile *p, char *err, size_t errlen);

// Its two halves: --profile and each --profile-set (the part that may read a file; 0, or -1 with
// a one-line reason), then the flags naming a profile field directly (a server loads the first
// once at startup and applies the second per request).
int emx_run_load_profile(const EmxCliArgs *a, EmxProfile *p, char *err, size_t errlen);
void emx_run_profile_flags(const EmxCliArgs *a, EmxProfile *p);

// One generation's sampler. Zero-initialise, then emx_run_sampler_init; free with
// emx_run_sampler_free (safe on a zeroed or half-initialised one).
typedef struct {
    EmxBasicSampler basic;
    EmxEntropixSampler es;
    EmxMetricsTap tap;
    EmxLogitFilter filter;     // the logit rules (--repeat-penalty, --logit-bias, ...) when any is set
    EmxSampler *sampler;       // what emx_generate gets: &es.base, &basic.base or &tap.base, behind
                               // &filter.base when the rules change the logits
    int tapped;                // the metrics tap measures beside the basic sampler
    EmxGrammar *grammar;       // the grammar flags' (or the server's response_format), compiled; NULL: none
    const EmxTokenTrie *trie;  // its mask's trie: a caller may set one before init (a server builds
                               // it once); else init builds its own
    EmxTokenTrie *own_trie;
    EmxSamplerParams params;   // the base values (entropix: the profile's)
    int entropix;
} EmxRunSampler;

// The sampler of a->sampler (not agents) for a state of context ctx, seeded with seed, behind the
// logit rules of a (penalties, logit bias, a grammar from --grammar, --grammar-file, --json-schema,
// --json-schema-file or json_object: a file's or the text's error names the flag).
// profile: the built profile (entropix only; may be NULL otherwise). want_metrics: a --metrics
// log is written (entropix computes its metrics on the device too; a basic sampler gets the
// tap). Returns 0, or -1 with a one-line reason.
int emx_run_sampler_init(EmxRunSampler *rs, const EmxCliArgs *a, const EmxProfile *profile, const EmxModel *m,
                         const EmxTokenizer *tk, int ctx, uint64_t seed, int want_metrics, char *err, size_t errlen);
void emx_run_sampler_free(EmxRunSampler *rs);

// The grammar flags' text or file compiled and dropped: a syntax error or an unreadable file is
// told (a usage error) before the model opens. 0, or -1 with the reason emx_run_sampler_init gives.
int emx_run_grammar_check(const EmxCliArgs *a, char *err, size_t errlen);

// The prompt's ids, which the repetition penalty looks back over with the generated tokens
// (nothing to do when no logit rule is set).
void emx_run_sampler_prompt(EmxRunSampler *rs, const int *ids, int n);

// The --metrics record of the token the sampler just chose (called from emx_generate's
// per-token callback): entropix's metrics, decision and best-of-N score; a basic sampler's
// parameters, and the metrics when the tap measured them (want_metrics). The caller adds the
// logprobs. The pointers refer into rs and tk: use the record before the next step.
EmxTokenRecord emx_run_sampler_record(const EmxRunSampler *rs, const EmxTokenizer *tk, const char *sampler_name,
                                      int index, int id, int pos, int is_stop);

#endif
