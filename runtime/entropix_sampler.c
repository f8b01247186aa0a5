// entropix_sampler.c — one decoding step of the entropix switch (entropix_sampler.h).
#include "runtime/entropix_sampler.h"
#include "base/errmsg.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void emx_step_metrics(EmxState *st, const float *logits, int n_vocab, int n_layers, int n_heads,
                      int ctx, int layer, double *scratch, EmxMetrics *m) {
    memset(m, 0, sizeof *m);
    emx_logits_metrics(logits, n_vocab, m);
    int last_pos = -1;
    const float *scores = emx_attention_scores(st, &last_pos);  // [n_layers][n_heads][ctx]
    if (!scores || last_pos < 0 || last_pos >= ctx) return;
    // local layers (a sliding window): the metrics over the keys the query saw
    int first_key[EMX_MAX_LAYERS];
    const int n = n_layers < (int)EMX_MAX_LAYERS ? n_layers : (int)EMX_MAX_LAYERS;
    for (int l = 0; l < n; l++) first_key[l] = emx_attention_first_key(st, l, last_pos);
    emx_attention_metrics_window(scores, n, n_heads, ctx, last_pos + 1, first_key, layer, scratch, m);
}

// The whole step, in the order the data needs: metrics (logits, then the selected layers'
// attention rows over the valid keys 0..last_pos), decision, draw, state.
static int entropix_choose(EmxSampler *self, EmxState *st, const float *logits, int n_vocab,
                           int pos) {
    EmxEntropixSampler *es = (EmxEntropixSampler *)self;
    EmxMetrics m;
    emx_step_metrics(st, logits, n_vocab, es->n_layers, es->n_heads, es->ctx,
                     es->profile.attn_layer, es->scratch, &m);
    EmxDecision d = emx_entropix_decide(&m, &es->profile, &es->state, es->pause_token);
    int tok = emx_entropix_execute(&d, logits, n_vocab, &m, &es->profile, es->seed,
                                   (uint64_t)pos, es->work, &es->last_score);
    emx_entropix_state_update(&es->state, &d);
    es->last_metrics = m;
    es->last_decision = d;
    es->case_counts[d.kase]++;
    if (d.action == EMX_ACTION_INSERT) es->n_inserted++;
    return tok;
}

// The device's choice (forward.h emx_forward_decide): the same records as entropix_choose.
static const EmxDecideSpec *entropix_device_spec(EmxSampler *self) { return &((EmxEntropixSampler *)self)->spec; }

static void entropix_device_result(EmxSampler *self, const EmxDecideResult *r) {
    EmxEntropixSampler *es = (EmxEntropixSampler *)self;
    es->last_metrics = r->metrics;
    es->last_decision = r->decision;
    es->last_score = r->score;
    emx_entropix_state_update(&es->state, &r->decision);  // the host's copy follows the device's
    es->case_counts[r->decision.kase]++;
    if (r->decision.action == EMX_ACTION_INSERT) es->n_inserted++;
}

int emx_entropix_sampler_init(EmxEntropixSampler *es, const EmxProfile *profile,
                              const EmxModel *m, const EmxTokenizer *tk, int ctx, uint64_t seed,
                              char *err, size_t errlen) {
    memset(es, 0, sizeof *es);
    es->base.choose = entropix_choose;
    es->profile = *profile;
    es->seed = seed;
    es->n_layers = (int)m->cfg.n_layers;
    es->n_heads = (int)m->cfg.n_heads;
    es->n_vocab = (int)m->cfg.vocab_size;
    es->ctx = ctx;
    es->last_score = NAN;
    int layer = profile->attn_layer;
    if (layer >= es->n_layers) {
        emx_seterr(err, errlen, "entropix profile: attn_layer = %d, but the model has %d layers (0..%d)",
                 layer, es->n_layers, es->n_layers - 1);
        return -1;
    }
    if (profile->pause_token_id >= es->n_vocab) {
        emx_seterr(err, errlen, "entropix profile: pause_token_id = %d, but the vocabulary has %d",
                 profile->pause_token_id, es->n_vocab);
        return -1;
    }
    es->pause_token = profile->pause_token_id >= 0 ? profile->pause_token_id
                      : tk ? emx_pause_token_resolve(emx_find_token_by_bytes, (void *)tk)
                           : -1;
    es->work = malloc(sizeof(EmxCandidate) * (size_t)(es->n_vocab > 0 ? es->n_vocab : 1));
    es->scratch = malloc(sizeof(double) * (size_t)(ctx > 0 ? ctx : 1));
    if (!es->work || !es->scratch) {
        emx_entropix_sampler_free(es);
        emx_seterr(err, errlen, "entropix sampler: out of memory (vocab %d, ctx %d)", es->n_vocab,
                 ctx);
        return -1;
    }
    es->base.device_spec = entropix_device_spec;
    es->base.device_result = entropix_device_result;
    es->spec.kind = EMX_DECIDE_ENTROPIX;
    es->spec.profile = es->profile;
    es->spec.pause_token = es->pause_token;
    es->spec.seed = es->seed;
    return 0;
}

void emx_entropix_sampler_free(EmxEntropixSampler *es) {
    free(es->work);
    free(es->scratch);
    es->work = NULL;
    es->scratch = NULL;
}

static int tap_choose(EmxSampler *self, EmxState *st, const float *logits, int n_vocab, int pos) {
    EmxMetricsTap *t = (EmxMetricsTap *)self;
    emx_step_metrics(st, logits, n_vocab, t->n_layers, t->n_heads, t->ctx, t->layer, t->scratch,
                     &t->last_metrics);
    return t->inner->choose(t->inner, st, logits, n_vocab, pos);
}

int emx_metrics_tap_init(EmxMetricsTap *t, EmxSampler *inner, const EmxModel *m, int ctx,
                         int layer, char *err, size_t errlen) {
    memset(t, 0, sizeof *t);
    t->base.choose = tap_choose;
    t->inner = inner;
    t->n_layers = (int)m->cfg.n_layers;
    t->n_heads = (int)m->cfg.n_heads;
    t->ctx = ctx;
    t->layer = layer;
    if (layer >= t->n_layers) {
        emx_seterr(err, errlen, "metric layer %d: the model has %d layers (0..%d)", layer,
                 t->n_layers, t->n_layers - 1);
        return -1;
    }
    t->scratch = malloc(sizeof(double) * (size_t)(ctx > 0 ? ctx : 1));
    if (!t->scratch) {
        emx_seterr(err, errlen, "metrics: out of memory (ctx %d)", ctx);
        return -1;
    }
    return 0;
}

void emx_metrics_tap_free(EmxMetricsTap *t) {
    free(t->scratch);
    t->scratch = NULL;
}
