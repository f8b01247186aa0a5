// api_sampler.c — sampler objects (entropix_sampler_*) and the EmxSampler chain a generation runs.
#include "api/api_sampler.h"

#include <stdlib.h>
#include <string.h>

ENTROPIX_API void entropix_sampler_params_init(entropix_sampler_params *p, int kind) {
    if (!p) return;
    const EmxSamplerParams d = EMX_SAMPLER_PARAMS_DEFAULT;  // ./run's defaults
    *p = (entropix_sampler_params){.size = sizeof *p, .kind = kind, .temperature = d.temperature, .top_k = d.top_k,
                                   .top_p = d.top_p, .min_p = d.min_p};
}

ENTROPIX_API int entropix_sampler_new(const entropix_sampler_params *params, entropix_sampler **out) {
    if (!params || !out) return api_fail(ENTROPIX_ERR_ARGUMENT, "entropix_sampler_new: NULL argument");
    *out = NULL;
    const int rc = API_CHECK_SIZE("entropix_sampler_new", params, entropix_sampler_params, profile);
    if (rc != ENTROPIX_OK) return rc;
    if (params->kind < ENTROPIX_SAMPLER_GREEDY || params->kind > ENTROPIX_SAMPLER_ENTROPIX)
        return api_fail(ENTROPIX_ERR_ARGUMENT, "sampler kind %d: expected 0 (greedy), 1 (combined) or 2 (entropix)",
                        params->kind);
    if (params->kind == ENTROPIX_SAMPLER_COMBINED) {  // ./run's ranges (runtime/cli/cli_args.c)
        const entropix_sampler_params *p = params;
        if (!(p->temperature >= 0.0f))
            return api_fail(ENTROPIX_ERR_ARGUMENT, "temperature %g: expected a number >= 0", (double)p->temperature);
        if (p->top_k < 0) return api_fail(ENTROPIX_ERR_ARGUMENT, "top_k %d: expected >= 0 (0: off)", p->top_k);
        if (!(p->top_p >= 0.0f && p->top_p <= 1.0f))
            return api_fail(ENTROPIX_ERR_ARGUMENT, "top_p %g: expected a number in [0, 1] (1: off)", (double)p->top_p);
        if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
            return api_fail(ENTROPIX_ERR_ARGUMENT, "min_p %g: expected a number in [0, 1] (0: off)", (double)p->min_p);
    }
    entropix_sampler *smp = calloc(1, sizeof *smp);
    if (!smp) return api_fail(ENTROPIX_ERR_MEMORY, "entropix_sampler_new: out of memory");
    smp->params = *params;
    smp->params.size = sizeof smp->params;
    smp->params.profile = NULL;
    if (params->kind == ENTROPIX_SAMPLER_ENTROPIX) {
        const char *name = params->profile && *params->profile && strcmp(params->profile, "default") != 0
                               ? params->profile
                               : EMX_PROFILE_DEFAULT;
        if (emx_profile_load(&smp->profile, name, api_errbuf(), API_ERRLEN) != 0) {
            free(smp);
            return ENTROPIX_ERR_FILE;
        }
    }
    *out = smp;
    return ENTROPIX_OK;
}

ENTROPIX_API int entropix_sampler_new_custom(entropix_choose_fn choose, void *user, entropix_sampler **out) {
    if (!choose || !out) return api_fail(ENTROPIX_ERR_ARGUMENT, "entropix_sampler_new_custom: NULL argument");
    if (!(*out = calloc(1, sizeof **out))) return api_fail(ENTROPIX_ERR_MEMORY, "entropix_sampler_new_custom: out of memory");
    (*out)->params.size = sizeof (*out)->params;
    (*out)->params.kind = -1;
    (*out)->choose = choose;
    (*out)->user = user;
    return ENTROPIX_OK;
}

ENTROPIX_API void entropix_sampler_free(entropix_sampler *smp) { free(smp); }

static int custom_choose(EmxSampler *self, EmxState *st, const float *logits, int n_vocab, int pos) {
    ApiCustomSampler *c = (ApiCustomSampler *)self;
    emx_step_metrics(st, logits, n_vocab, c->n_layers, c->n_heads, c->ctx, EMX_ATTN_LAYER_LAST, c->scratch,
                     &c->last_metrics);
    entropix_metrics m = {.size = sizeof m};
    api_fill_metrics(&c->last_metrics, &m);
    const int id = c->choose(c->user, logits, n_vocab, &m, pos);
    return id >= 0 && id < n_vocab ? id : -1;
}

// The sampler itself, without the taps: c->head and c->metrics set for it.
static int init_inner(ApiChain *c, const entropix_sampler *smp, entropix_state *s, EmxSampler **inner) {
    const EmxModel *m = &s->owner->model;
    const int ctx = emx_state_ctx(s->st), vocab = (int)m->cfg.vocab_size;
    char *err = api_errbuf();
    if (smp->choose) {
        c->custom = (ApiCustomSampler){.base.choose = custom_choose, .choose = smp->choose, .user = smp->user,
                                       .n_layers = (int)m->cfg.n_layers, .n_heads = (int)m->cfg.n_heads, .ctx = ctx};
        if (!(c->custom.scratch = malloc((size_t)ctx * sizeof *c->custom.scratch)))
            return api_fail(ENTROPIX_ERR_MEMORY, "sampler: out of memory");
        *inner = &c->custom.base;
        c->metrics = &c->custom.last_metrics;
        return ENTROPIX_OK;
    }
    if (smp->params.kind == ENTROPIX_SAMPLER_ENTROPIX) {
        if (emx_entropix_sampler_init(&c->es, &smp->profile, m, s->owner->tk, ctx, smp->params.seed, err, API_ERRLEN) != 0)
            return ENTROPIX_ERR_RUNTIME;
        c->entropix = 1;
        *inner = &c->es.base;
        c->metrics = &c->es.last_metrics;
        return ENTROPIX_OK;
    }
    EmxSamplerParams sp = {.temperature = smp->params.temperature, .top_k = smp->params.top_k,
                           .top_p = smp->params.top_p, .min_p = smp->params.min_p};
    if (smp->params.kind == ENTROPIX_SAMPLER_GREEDY) sp.temperature = 0.0f;  // as ./run --sampler greedy
    if (emx_basic_sampler_init(&c->basic, &sp, smp->params.seed, vocab, err, API_ERRLEN) != 0) return ENTROPIX_ERR_RUNTIME;
    *inner = &c->basic.base;
    return ENTROPIX_OK;
}

int api_chain_init(ApiChain *c, const entropix_sampler *smp, entropix_state *s, int n_top, int want_metrics) {
    memset(c, 0, sizeof *c);
    EmxSampler *inner = NULL;
    int rc = init_inner(c, smp, s, &inner);
    if (rc != ENTROPIX_OK) return rc;
    if (want_metrics && !c->metrics) {
        if (emx_metrics_tap_init(&c->tap, inner, &s->owner->model, emx_state_ctx(s->st), EMX_ATTN_LAYER_LAST, api_errbuf(),
                                 API_ERRLEN) != 0)
            return ENTROPIX_ERR_RUNTIME;
        inner = &c->tap.base;
        c->metrics = &c->tap.last_metrics;
    }
    emx_logprob_tap_init(&c->lp, inner, n_top);
    c->head = &c->lp.base;
    return ENTROPIX_OK;
}

void api_chain_free(ApiChain *c) {
    free(c->custom.scratch);
    emx_metrics_tap_free(&c->tap);
    emx_entropix_sampler_free(&c->es);
    emx_basic_sampler_free(&c->basic);
    memset(c, 0, sizeof *c);
}

entropix_token api_chain_record(const ApiChain *c, int n_top, entropix_metrics *metrics, int index, int id, int pos,
                                const char *text, size_t len, int is_stop) {
    entropix_token t = {.size = sizeof t, .index = index, .id = id, .pos = pos, .text = text, .text_len = len,
                        .is_stop = is_stop, .logprob = c->lp.last.chosen, .entropix_case = -1};
    t.n_top = n_top < c->lp.last.n ? n_top : c->lp.last.n;
    t.top_ids = c->lp.last.id;
    t.top_logprobs = c->lp.last.logprob;
    if (c->metrics) {
        metrics->size = sizeof *metrics;
        api_fill_metrics(c->metrics, metrics);
        t.metrics = metrics;
    }
    if (c->entropix) {
        t.entropix_case = (int)c->es.last_decision.kase;
        t.case_name = emx_case_name(c->es.last_decision.kase);
    }
    return t;
}
