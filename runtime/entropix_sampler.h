// entropix_sampler.h — the entropix switch as an EmxSampler (generate.h), so the generation loop
// runs it like the basic samplers: per token it computes the metrics from the logits and the
// forward pass's attention scores, decides (entropix.h), carries the decision out, and keeps
// the insert-once state. The last step's metrics and decision stay readable for logs.
#ifndef ENTROPIX_ENTROPIX_SAMPLER_H
#define ENTROPIX_ENTROPIX_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "sampler/entropix.h"
#include "runtime/generate.h"
#include "sampler/metrics.h"
#include "runtime/model.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    EmxSampler base;            // first member: (EmxSampler *)&es works
    EmxDecideSpec spec;         // the same switch for a backend that runs it on its side
                                // (spec.want_metrics: last_metrics filled there too)
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
    long n_inserted;            // pause tokens inserted
} EmxEntropixSampler;

// ctx: the state's context (emx_state_ctx), the stride of the attention scores. tk may be NULL
// (no pause token unless the profile names an id). Returns 0, or -1 with a one-line reason.
int emx_entropix_sampler_init(EmxEntropixSampler *es, const EmxProfile *profile,
                              const EmxModel *m, const EmxTokenizer *tk, int ctx, uint64_t seed,
                              char *err, size_t errlen);
void emx_entropix_sampler_free(EmxEntropixSampler *es);

// The metrics of one step, as the entropix sampler computes them: logits metrics from
// logits [n_vocab], attention metrics of `layer` (EMX_ATTN_LAYER_LAST, _ALL or an index) from
// the scores [n_layers][n_heads][ctx] of the last position fed to st, over its valid keys
// 0..last_pos. scratch: [ctx] doubles. Fields that cannot be computed stay 0.
void emx_step_metrics(EmxState *st, const float *logits, int n_vocab, int n_layers, int n_heads,
                      int ctx, int layer, double *scratch, EmxMetrics *m);

// Any sampler with the step metrics computed beside it (for --metrics logs with the basic
// samplers): choose() computes the metrics, then asks `inner`.
typedef struct {
    EmxSampler base;     // first member
    EmxSampler *inner;
    int n_layers, n_heads, ctx, layer;
    double *scratch;     // [ctx]
    EmxMetrics last_metrics;
} EmxMetricsTap;

int emx_metrics_tap_init(EmxMetricsTap *t, EmxSampler *inner, const EmxModel *m, int ctx,
                         int layer, char *err, size_t errlen);
void emx_metrics_tap_free(EmxMetricsTap *t);

#endif
