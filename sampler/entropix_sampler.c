// entropix_sampler.c — one decoding step of the entropix switch (entropix_sampler.h).
#include "entropix_sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// The whole step, in the order the data needs: metrics (logits, then the selected layers'
// attention rows over the valid keys 0..last_pos), decision, draw, state.
static int entropix_choose(EmxSampler *self, EmxState *st, const float *logits, int n_vocab,
                           int pos) {
    EmxEntropixSampler *es = (EmxEntropixSampler *)self;
    EmxMetrics m;
    memset(&m, 0, sizeof m);
    emx_logits_metrics(logits, n_vocab, &m);
    int last_pos = -1;
    const float *scores = emx_attention_scores(st, &last_pos);  // [n_layers][n_heads][ctx]
    if (scores && last_pos >= 0 && last_pos < es->ctx)
        emx_attention_metrics(scores, es->n_layers, es->n_heads, es->ctx, last_pos + 1,
                              es->profile.attn_layer, es->scratch, &m);
    EmxDecision d = emx_entropix_decide(&m, &es->profile, &es->state, es->pause_token);
    int tok = emx_entropix_execute(&d, logits, n_vocab, &m, &es->profile, es->seed,
                                   (uint64_t)pos, es->work, &es->last_score);
    emx_entropix_state_update(&es->state, &d);
    es->last_metrics = m;
    es->last_decision = d;
    es->case_counts[d.kase]++;
    return tok;
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
        snprintf(err, errlen, "entropix profile: attn_layer = %d, but the model has %d layers",
                 layer, es->n_layers);
        return -1;
    }
    if (profile->pause_token_id >= es->n_vocab) {
        snprintf(err, errlen, "entropix profile: pause_token_id = %d, but the vocabulary has %d",
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
        snprintf(err, errlen, "entropix sampler: out of memory (vocab %d, ctx %d)", es->n_vocab,
                 ctx);
        return -1;
    }
    return 0;
}

void emx_entropix_sampler_free(EmxEntropixSampler *es) {
    free(es->work);
    free(es->scratch);
    es->work = NULL;
    es->scratch = NULL;
}
