// token_log.h — what ./run reports per generated token besides the text: the --metrics JSON
// lines (one object per token) and the --color terminal colouring by entropix case.
//
// A --metrics line (keys always present, in this order; null where a value does not apply):
//   index       0-based count of generated tokens
//   pos         the position the token occupies in the sequence
//   id          token id
//   piece       the token's own bytes as a JSON string (invalid UTF-8, e.g. one byte of a
//               character split over tokens, becomes U+FFFD; then piece_bytes lists the bytes)
//   piece_bytes null, or the raw bytes [0..255] when piece had to replace some
//   stop        true for a stop token (it ends generation and is not printed)
//   sampler     "entropix", "greedy", "combined", ...
//   case        entropix: "LELV" | "HELV" | "LEHV" | "HEHV" | "ADAPTIVE"; other samplers: null
//   action      entropix: "argmax" | "insert" | "sample" | "best_of_n"; others: "sample"
//   inserted    true when the token is the pause token inserted without sampling
//   temperature, top_k, top_p, min_p   the parameters the token was drawn with (argmax: T 0;
//               inserted: null)
//   n_samples   best-of-N draws (1 otherwise); score: the chosen draw's best-of-N score in bits
//   logits_entropy_bits, logits_varentropy_bits2, attn_entropy_bits,
//   attn_varentropy_heads_bits2, attn_varentropy_true_bits2, attn_agreement,
//   attn_interaction_strength    the step's metrics (sampler/metrics.h)
//   agent       the agent pool (sampler "agents"): index of the agent whose proposal won;
//               null otherwise. The pool's lines have the logits metrics only (the attention
//               of a lookahead branch's rows is not kept), temperature/top_k of that agent,
//               score = the winning branch's mean entropy in bits
//   proposal_entropy_bits   agents: entropy of the distribution the token was drawn from
// With --logprobs N only (without it the two keys are absent):
//   top_logprobs  the N most likely tokens of the distribution the model gave at this step,
//               [{"id", "piece", "logprob"}, ...] in descending logprob (ties: lower id first);
//               logprob = natural log of softmax(raw logits) at temperature 1, as OpenAI's API
//               reports it, whatever temperature or filter the sampler then used. piece: as
//               above, invalid UTF-8 replaced by U+FFFD. Agents: the logits the proposals
//               were drawn from (a token banned after a rollback has -inf there)
//   logprob     the chosen token's own log-probability under that same distribution (an
//               inserted pause token too: what the model gave it)
#ifndef ENTROPIX_TOKEN_LOG_H
#define ENTROPIX_TOKEN_LOG_H

#include <stddef.h>
#include <stdio.h>

#include "sampler/entropix.h"
#include "sampler/metrics.h"
#include "sampler/sample.h"

#include "runtime/generate.h"

// Top-N log-probabilities of one step (--logprobs, the report's alternatives).
#define EMX_MAX_LOGPROBS 20
typedef struct {
    int n;                          // entries in top (min(N, n_vocab))
    int id[EMX_MAX_LOGPROBS];       // descending logprob, ties: lower id first
    float logprob[EMX_MAX_LOGPROBS];// natural log, softmax of the raw logits (temperature 1)
    double lse;                     // ln sum exp(logits): logprob(i) = logits[i] - lse
    double chosen;                  // the chosen token's logprob (NAN until known)
} EmxLogprobs;

// Fills lp from logits [n_vocab] with the top min(n, EMX_MAX_LOGPROBS) entries; NaN logits
// count as -inf. lp->chosen is set to NAN (the caller sets it once a token is chosen:
// emx_logprob_of).
void emx_logprobs_compute(const float *logits, int n_vocab, int n, EmxLogprobs *lp);
static inline double emx_logprob_of(const EmxLogprobs *lp, const float *logits, int id) {
    return (double)logits[id] - lp->lse;
}

// An EmxSampler that records the top-n logprobs of every step before asking `inner` (like
// EmxMetricsTap). It has no device side: on a GPU the choice then runs on the host.
typedef struct {
    EmxSampler base;     // first member
    EmxSampler *inner;
    int n;               // entries to keep (<= EMX_MAX_LOGPROBS)
    EmxLogprobs last;    // the last step's, chosen filled in
} EmxLogprobTap;
void emx_logprob_tap_init(EmxLogprobTap *t, EmxSampler *inner, int n);

typedef struct {
    int index, id, pos;
    const char *piece;               // the token's bytes [piece_len]
    size_t piece_len;
    int is_stop;
    const char *sampler;             // sampler name
    const EmxMetrics *metrics;       // the step's metrics
    const EmxDecision *decision;     // entropix only; NULL for the basic samplers
    const EmxSamplerParams *params;  // basic samplers: their parameters; NULL with a decision
    double score;                    // best-of-N score (agents: branch score), NAN otherwise
    int is_agent;                    // agent pool: agent and proposal_entropy_bits are set
    int agent;
    double proposal_entropy_bits;
    const EmxLogprobs *logprobs;     // NULL: no top_logprobs/logprob keys
    int n_logprobs;                  // top_logprobs entries written (<= logprobs->n)
    const EmxTokenizer *tk;          // the top_logprobs' pieces (NULL: pieces null)
} EmxTokenRecord;

// Writes one JSON line for r. Returns 0, or -1 if the write failed.
int emx_token_log_json(FILE *f, const EmxTokenRecord *r);

// The same JSON object as a malloc'd string without the newline (the report keeps these), or
// NULL when out of memory.
char *emx_token_log_string(const EmxTokenRecord *r);

// ANSI SGR sequence for a token chosen by case c (inserted: the pause token).
const char *emx_case_color(EmxCase c, int inserted);
#define EMX_COLOR_RESET "\033[0m"

// The --color legend, one line: each case's name in its colour.
void emx_color_legend(FILE *f);

#endif
