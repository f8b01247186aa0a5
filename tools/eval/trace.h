// trace.h — what eval records per generated token beside the text (docs/eval.md "Confidence and
// open-ended metrics"): a tap, an EmxSampler wrapped around the config's sampler (like
// runtime/entropix_sampler.h's EmxMetricsTap), computes from each step's logits the entropy,
// p(top1) - p(top2) and the chosen token's log-probability under the untempered softmax, and
// whether the inner sampler's choice is the argmax; the per-token callback adds which bytes of
// the text each token released. The tap only reads: the inner sampler gets the same logits and
// its choice is returned as it is, so the text is the same with or without it. It has no device
// side, so on a GPU the choice runs on the host (as with --logprobs).
#ifndef ENTROPIX_EVAL_TRACE_H
#define ENTROPIX_EVAL_TRACE_H

#include <stddef.h>

#include "runtime/generate.h"
#include "tools/eval/checks.h"

typedef struct {
    int id;                     // the chosen token
    float entropy_bits;         // H of softmax(logits), no temperature (NaN: not measured)
    float margin;               // p(top1) - p(top2) of that softmax (NaN: not measured)
    float logprob_nats;         // ln p(id) under it (NaN: not measured)
    unsigned char not_argmax;   // 1: logits[id] is below the largest logit
    size_t text_start, text_end;// the bytes of the generated text released at this step
} EvalStep;

typedef struct {
    EvalStep *steps;            // [n] one per chosen token, in order
    int n, cap;
    int measured;               // 1: the tap filled the logits fields (0: ids only, e.g. agents)
    int ends_with_stop;         // the last step chose a stop token
    size_t text_len;            // bytes released so far
    int oom;                    // a step could not be stored (the measures are then left out)
} EvalTrace;

typedef struct {
    EmxSampler base;            // first member
    EmxSampler *inner;
    EvalTrace *trace;
} EvalTap;

// trace: zeroed before the generation; the tap appends a step per choice.
void eval_tap_init(EvalTap *t, EmxSampler *inner, EvalTrace *trace);

// The per-token callback's part: step index released len bytes of text; is_stop: it is a stop token.
void eval_trace_text(EvalTrace *t, int index, size_t len, int is_stop);

// Appends a step with id only (measured stays 0). Returns 0, or -1 when out of memory.
int eval_trace_push_id(EvalTrace *t, int id);

void eval_trace_free(EvalTrace *t);

// The confidence of one result, from its trace and the span of its extracted answer.
typedef struct {
    double answer_margin;       // mean margin over the answer's tokens (those whose released bytes
                                // overlap span); NaN: no answer, or no token overlaps it
    int n_answer_tokens;
    double mean_entropy_bits;   // mean over every step (a final stop token included); NaN: none
    double mean_logprob_nats;   // the same for ln p(chosen)
    long n_not_argmax;          // steps whose choice was not the argmax
} EvalConfidence;

// Returns 0, or -1 when the trace has no measured steps (c is then all NaN / -1).
int eval_confidence(const EvalTrace *t, const EvalSpan *span, EvalConfidence *c);

// The generated ids without a final stop token, into ids[0..cap); returns how many.
int eval_trace_text_ids(const EvalTrace *t, int *ids, int cap);

#endif
