// trace.c — the per-token tap and the confidence measures of a result (trace.h).
#include "tools/eval/trace.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sampler/metrics.h"

static EvalStep *new_step(EvalTrace *t) {
    if (t->n == t->cap) {
        const int cap = t->cap ? 2 * t->cap : 64;
        EvalStep *s = realloc(t->steps, (size_t)cap * sizeof *s);
        if (!s) {
            t->oom = 1;
            return NULL;
        }
        t->steps = s, t->cap = cap;
    }
    EvalStep *s = &t->steps[t->n++];
    *s = (EvalStep){.id = -1, .entropy_bits = NAN, .margin = NAN, .logprob_nats = NAN,
                    .text_start = t->text_len, .text_end = t->text_len};
    return s;
}

// The largest and second largest logits (NaN counts as -inf; a tie for the top is top2 = top1).
static void top2(const float *logits, int n, float *l1, float *l2) {
    float a = -INFINITY, b = -INFINITY;
    for (int i = 0; i < n; i++) {
        const float x = logits[i];
        if (x > a) b = a, a = x;
        else if (x > b) b = x;
    }
    *l1 = a, *l2 = b;
}

static int tap_choose(EmxSampler *self, EmxState *st, const float *logits, int n_vocab, int pos) {
    EvalTap *t = (EvalTap *)self;
    EmxMetrics m;
    emx_logits_metrics(logits, n_vocab, &m);  // entropy in bits and ln Σ e^logit, no temperature
    float l1, l2;
    top2(logits, n_vocab, &l1, &l2);
    const int id = t->inner->choose(t->inner, st, logits, n_vocab, pos);  // the logits as they came
    EvalStep *s = new_step(t->trace);
    if (!s) return id;
    const double lse = m.logits_lse_nats;
    s->id = id;
    s->entropy_bits = (float)m.logits_entropy_bits;
    s->margin = isfinite(lse) ? (float)(exp((double)l1 - lse) - exp((double)l2 - lse)) : NAN;
    if (id >= 0 && id < n_vocab) {
        s->logprob_nats = isfinite(lse) ? (float)((double)logits[id] - lse) : NAN;
        s->not_argmax = !(logits[id] >= l1);
    }
    t->trace->measured = 1;
    return id;
}

void eval_tap_init(EvalTap *t, EmxSampler *inner, EvalTrace *trace) {
    memset(t, 0, sizeof *t);
    t->base.choose = tap_choose;
    t->inner = inner;
    t->trace = trace;
}

void eval_trace_text(EvalTrace *t, int index, size_t len, int is_stop) {
    t->text_len += len;
    if (index < 0 || index >= t->n) return;
    t->steps[index].text_end = t->text_len;
    t->steps[index].text_start = t->text_len - len;
    t->ends_with_stop = is_stop;
}

int eval_trace_push_id(EvalTrace *t, int id) {
    EvalStep *s = new_step(t);
    if (!s) return -1;
    s->id = id;
    return 0;
}

void eval_trace_free(EvalTrace *t) {
    free(t->steps);
    memset(t, 0, sizeof *t);
}

int eval_confidence(const EvalTrace *t, const EvalSpan *span, EvalConfidence *c) {
    *c = (EvalConfidence){.answer_margin = NAN, .mean_entropy_bits = NAN, .mean_logprob_nats = NAN, .n_not_argmax = -1};
    if (!t->measured || t->oom || t->n == 0) return -1;
    double h = 0, lp = 0, mg = 0;
    int n_h = 0, n_lp = 0;
    c->n_not_argmax = 0;
    for (int i = 0; i < t->n; i++) {
        const EvalStep *s = &t->steps[i];
        c->n_not_argmax += s->not_argmax;
        if (isfinite(s->entropy_bits)) h += s->entropy_bits, n_h++;
        if (isfinite(s->logprob_nats)) lp += s->logprob_nats, n_lp++;
        // an answer token: its released bytes overlap the answer's [start, end)
        if (span && span->found && s->text_start < span->end && s->text_end > span->start && isfinite(s->margin))
            mg += s->margin, c->n_answer_tokens++;
    }
    if (n_h) c->mean_entropy_bits = h / n_h;
    if (n_lp) c->mean_logprob_nats = lp / n_lp;
    if (c->n_answer_tokens) c->answer_margin = mg / c->n_answer_tokens;
    return 0;
}

int eval_trace_text_ids(const EvalTrace *t, int *ids, int cap) {
    const int n = t->n - (t->ends_with_stop && t->n > 0);
    int k = 0;
    for (int i = 0; i < n && k < cap; i++) ids[k++] = t->steps[i].id;
    return k;
}
