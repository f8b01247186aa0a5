// api_sampler.h — a public sampler object made into the runtime's EmxSampler chain for one
// generation (api_sampler.c), and what the generation loop reads back of each step.
#ifndef ENTROPIX_API_SAMPLER_H
#define ENTROPIX_API_SAMPLER_H

#include "api/api_internal.h"
#include "runtime/entropix_sampler.h"
#include "runtime/generate.h"
#include "runtime/logit_filter.h"
#include "runtime/token_log.h"
#include "sampler/profile.h"

struct entropix_sampler {
    entropix_sampler_params params;  // profile, grammar, json_schema, logit bias: NULL (held below)
    EmxProfile profile;              // ENTROPIX: loaded when the sampler was made
    EmxLogitRules rules;             // the penalties and logit bias; rules.grammar: the compiled
    EmxGrammar *grammar;             // grammar or schema (NULL: none), which the sampler owns
    entropix_choose_fn choose;       // custom: the caller's function; else NULL
    void *user;
};

// The caller's choose() as an EmxSampler, with the step's metrics computed for it.
typedef struct {
    EmxSampler base;  // first member
    entropix_choose_fn choose;
    void *user;
    int n_layers, n_heads, ctx;
    double *scratch;  // [ctx]
    EmxMetrics last_metrics;
} ApiCustomSampler;

// One generation's samplers: the logprob tap first (the chosen token's logprob and the top
// alternatives: the model's, before any rule), then the logit rules when the sampler has any,
// then the metrics tap when metrics are asked of a basic sampler, then the sampler.
typedef struct {
    EmxBasicSampler basic;
    EmxEntropixSampler es;
    EmxMetricsTap tap;
    ApiCustomSampler custom;
    EmxLogitFilter filter;
    EmxLogprobTap lp;
    EmxSampler *head;             // &lp.base: what emx_generate gets
    const EmxMetrics *metrics;    // where each step's metrics land; NULL when not measured
    int entropix;
} ApiChain;

// Builds the chain of smp for a generation of prompt[0..n_prompt) on s (seeded by smp's
// params; the prompt is what the penalties look back over first). n_top: alternatives kept
// (<= ENTROPIX_MAX_TOP); want_metrics: the metrics for a basic sampler too. Returns
// ENTROPIX_OK or a status with the message set; api_chain_free is safe either way.
int api_chain_init(ApiChain *c, const entropix_sampler *smp, entropix_state *s, const int *prompt, int n_prompt,
                   int n_top, int want_metrics);
void api_chain_free(ApiChain *c);

// The checks of a generation's arguments (entropix_generate, entropix_generation_begin; fn names
// the caller in the message). Returns ENTROPIX_OK or a status with the message set.
int api_generate_check(const char *fn, const entropix_state *s, const entropix_sampler *smp, const int *prompt,
                       int n_prompt, const entropix_generate_params *params);

// The start of a generation's cache bookkeeping: the prompt's leading ids the state holds
// (params->reuse_prefix, when the caller's struct has it; else 0), which the generation then
// skips; the rest of the prompt is recorded as what the cache will hold.
int api_generate_reuse(entropix_state *s, const entropix_generate_params *params, const int *prompt, int n_prompt);
// A generated token (index 0, 1, ...) recorded where the cache will hold it once it is fed.
void api_generate_record_id(entropix_state *s, int n_prompt, int index, int id);
// Its end: the cache holds the prompt and every generated token but the last (never fed);
// after a failure nothing is known.
void api_generate_held(entropix_state *s, int n_cached, int n_prompt, int n_generated, int failed);

// The public record of the token the chain chose last (its logprob, the first n_top alternatives,
// its metrics written to *metrics, which the record points at, and the entropix case); text[0..len)
// is what the decoder released for it.
entropix_token api_chain_record(const ApiChain *c, int n_top, entropix_metrics *metrics, int index, int id, int pos,
                                const char *text, size_t len, int is_stop);

#endif
