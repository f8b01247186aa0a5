// logit_filter.h — the logit rules a request or ./run's flags set (sampler/penalties.h: logit
// bias, repetition, presence and frequency penalties; sampler/grammar.h: a grammar the tokens
// must follow), applied before any sampler chooses: an EmxSampler that hands `inner` a filtered
// copy of each step's logits (a token the grammar does not allow next gets -inf) and remembers
// the context (prompt and chosen tokens) the penalties look back over.
//
// With a grammar, the chosen token must be one the mask allowed: a sampler that returns another
// (entropix inserting its pause token) is overruled by the most likely allowed token. A stop
// token is allowed exactly when the text so far is complete; when nothing else can follow, only
// stop tokens are.
//
// Placed first in the chain of samplers after the logprob tap (token_log.h), which reads the
// raw logits (OpenAI's logprobs are the model's, not the biased ones). It has no device side:
// on a GPU the choice then runs on the host, from the step's logits.
#ifndef ENTROPIX_LOGIT_FILTER_H
#define ENTROPIX_LOGIT_FILTER_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/generate.h"
#include "sampler/grammar.h"
#include "sampler/grammar_mask.h"
#include "sampler/penalties.h"

#define EMX_MAX_LOGIT_BIAS 300  // OpenAI's limit on logit_bias entries

typedef struct {
    EmxPenalties penalties;
    EmxLogitBias bias[EMX_MAX_LOGIT_BIAS];
    int n_bias;
    const EmxGrammar *grammar;     // NULL: none. With it, trie and tk (the model's tokenizer and
    const EmxTokenTrie *trie;      // its trie, grammar_mask.h); all three outlive the filter
    const EmxTokenizer *tk;
} EmxLogitRules;

#define EMX_LOGIT_RULES_OFF ((EmxLogitRules){.penalties = EMX_PENALTIES_OFF})

// Whether the rules change any logit (no filter is needed otherwise).
int emx_logit_rules_active(const EmxLogitRules *r);

// Each bias entry's id against the vocabulary: 0, or -1 with "logit bias: token 99999 is not
// in the vocabulary (0 .. 49151)".
int emx_logit_rules_check(const EmxLogitRules *r, int n_vocab, char *err, size_t errlen);

typedef struct {
    EmxSampler base;       // first member
    EmxSampler *inner;
    EmxLogitRules rules;
    int n_vocab;
    float *logits;         // [n_vocab] the filtered copy inner sees
    uint8_t *seen;         // [n_vocab] penalties' scratch (zero between steps)
    int *counts;           // [n_vocab] penalties' scratch (zero between steps)
    int *ctx;              // [ctx_cap] the token at each position (prompt, then chosen)
    int n_ctx, ctx_cap;
    int n_prompt;          // positions 0 .. n_prompt-1 are the prompt's: not counted as generated
    EmxGrammarState *grammar;    // the grammar's position after the chosen tokens (NULL: no grammar)
    EmxGrammarMasker *masker;
    uint8_t *allowed;            // [n_vocab] the step's mask
    int n_overruled;             // choices the grammar overruled (see above)
} EmxLogitFilter;

// Zero f first. ctx_cap: the state's context length. Returns 0, or -1 with a one-line reason.
int emx_logit_filter_init(EmxLogitFilter *f, EmxSampler *inner, const EmxLogitRules *r, int n_vocab, int ctx_cap,
                          char *err, size_t errlen);
// The prompt's ids (positions 0 .. n-1), before the first choice; without it the repetition
// penalty sees the generated tokens only.
void emx_logit_filter_prompt(EmxLogitFilter *f, const int *ids, int n);
void emx_logit_filter_free(EmxLogitFilter *f);

#endif
