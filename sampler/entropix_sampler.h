// entropix_sampler.h — the entropix switch as an EmxSampler (generate.h), so the generation loop
// runs it like the basic samplers: per token it computes the metrics from the logits and the
// forward pass's attention scores, decides (entropix.h), carries the decision out, and keeps
// the insert-once state. The last step's metrics and decision stay readable for logs.
#ifndef ENTROPIX_ENTROPIX_SAMPLER_H
#define ENTROPIX_ENTROPIX_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "entropix.h"
#include "generate.h"
#include "metrics.h"
#include "model.h"
#include "tokenizer.h"

typedef struct {
    EmxSampler base;            // first member: (EmxSampler *)&es works
    EmxProfile profile;
    uint64_t seed;
    int pause_token;            // resolved at init; -1: none
    int n_layers, n_heads, n_vocab, ctx;
    EmxEntropixState state;
    EmxCandidate *work;         // [n_vocab] basic-sampler scratch
    double *scratch;            // [ctx] head-mean attention row
    // The last step, for logs (--verbose, calibration):
    EmxMetrics last_metrics;
    EmxDecision last_decision;
    double last_score;          // best-of-N score of the chosen token; NAN for other actions
    long case_counts[EMX_CASE_COUNT];
} EmxEntropixSampler;

// ctx: the state's context (emx_state_ctx), the stride of the attention scores. tk may be NULL
// (no pause token unless the profile names an id). Returns 0, or -1 with a one-line reason.
int emx_entropix_sampler_init(EmxEntropixSampler *es, const EmxProfile *profile,
                              const EmxModel *m, const EmxTokenizer *tk, int ctx, uint64_t seed,
                              char *err, size_t errlen);
void emx_entropix_sampler_free(EmxEntropixSampler *es);

#endif
