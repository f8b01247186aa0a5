// api_sampler.c — sampler objects (entropix_sampler_*) and the EmxSampler chain a generation runs.
#include "api/api_sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sampler/json_schema.h"

ENTROPIX_API void entropix_sampler_params_init(entropix_sampler_params *p, int kind) {
    if (!p) return;
    const EmxSamplerParams d = EMX_SAMPLER_PARAMS_DEFAULT;  // ./run's defaults
    const EmxPenalties off = EMX_PENALTIES_OFF;
    *p = (entropix_sampler_params){.size = sizeof *p, .kind = kind, .temperature = d.temperature, .top_k = d.top_k,
                                   .top_p = d.top_p, .min_p = d.min_p, .repeat_penalty = off.repeat_penalty,
                                   .repeat_last_n = off.repeat_last_n};
}

// The combined sampler's values in ./run's ranges (runtime/cli/cli_args.c).
static int check_combined(const entropix_sampler_params *p) {
    if (!(p->temperature >= 0.0f))
        return api_fail(ENTROPIX_ERR_ARGUMENT, "temperature %g: expected a number >= 0", (double)p->temperature);
    if (p->top_k < 0) return api_fail(ENTROPIX_ERR_ARGUMENT, "top_k %d: expected >= 0 (0: off)", p->top_k);
    if (!(p->top_p >= 0.0f && p->top_p <= 1.0f))
        return api_fail(ENTROPIX_ERR_ARGUMENT, "top_p %g: expected a number in [0, 1] (1: off)", (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return api_fail(ENTROPIX_ERR_ARGUMENT, "min_p %g: expected a number in [0, 1] (0: off)", (double)p->min_p);
    return ENTROPIX_OK;
}

// p's penalties and logit bias into r, in ./run's and the server's ranges.
static int read_rules(const entropix_sampler_params *p, EmxLogitRules *r) {
    *r = EMX_LOGIT_RULES_OFF;
    r->penalties = (EmxPenalties){.repeat_penalty = p->repeat_penalty, .repeat_last_n = p->repeat_last_n,
                                  .presence_penalty = p->presence_penalty, .frequency_penalty = p->frequency_penalty};
    if (!(p->repeat_penalty > 0.0f && p->repeat_penalty <= EMX_REPEAT_PENALTY_MAX))
        return api_fail(ENTROPIX_ERR_ARGUMENT, "repeat_penalty %g: expected a number in (0, %g] (1: off)",
                        (double)p->repeat_penalty, EMX_REPEAT_PENALTY_MAX);
    if (p->repeat_last_n < -1 || p->repeat_last_n > EMX_REPEAT_LAST_N_MAX)
        return api_fail(ENTROPIX_ERR_ARGUMENT, "repeat_last_n %d: expected -1 .. %d (-1: all, 0: off)", p->repeat_last_n,
                        EMX_REPEAT_LAST_N_MAX);
    const double pm = EMX_PRESENCE_PENALTY_MAX;
    if (!(fabs(p->presence_penalty) <= pm) || !(fabs(p->frequency_penalty) <= pm))
        return api_fail(ENTROPIX_ERR_ARGUMENT, "presence_penalty %g, frequency_penalty %g: expected numbers in [-%g, %g]",
                        (double)p->presence_penalty, (double)p->frequency_penalty, pm, pm);
    if (p->n_logit_bias < 0 || p->n_logit_bias > EMX_MAX_LOGIT_BIAS)
        return api_fail(ENTROPIX_ERR_ARGUMENT, "n_logit_bias %d: expected [0, %d]", p->n_logit_bias, EMX_MAX_LOGIT_BIAS);
    if (p->n_logit_bias > 0 && (!p->logit_bias_ids || !p->logit_bias))
        return api_fail(ENTROPIX_ERR_ARGUMENT, "n_logit_bias %d with a NULL logit_bias_ids or logit_bias", p->n_logit_bias);
    for (int i = 0; i < p->n_logit_bias; i++) {
        const int id = p->logit_bias_ids[i];
        const float b = p->logit_bias[i];
        if (id < 0) return api_fail(ENTROPIX_ERR_ARGUMENT, "logit_bias_ids[%d] %d: not a token id", i, id);
        if (!(fabs(b) <= EMX_LOGIT_BIAS_MAX) && !(isinf(b) && b < 0))
            return api_fail(ENTROPIX_ERR_ARGUMENT, "logit_bias[%d] %g: expected [-%g, %g] or -INFINITY", i, (double)b,
                            EMX_LOGIT_BIAS_MAX, EMX_LOGIT_BIAS_MAX);
        r->bias[r->n_bias++] = (EmxLogitBias){.id = id, .bias = b};
    }
    return ENTROPIX_OK;
}

// p's grammar or JSON schema, compiled into *g (NULL: neither).
static int read_grammar(const entropix_sampler_params *p, EmxGrammar **g) {
    *g = NULL;
    if (p->grammar && p->json_schema) return api_fail(ENTROPIX_ERR_ARGUMENT, "grammar and json_schema: give one of them");
    char *err = api_errbuf();
    if (p->grammar && emx_grammar_parse(p->grammar, strlen(p->grammar), g, err, API_ERRLEN) != 0)
        return ENTROPIX_ERR_ARGUMENT;
    if (p->json_schema && emx_grammar_from_json_schema(p->json_schema, strlen(p->json_schema), g, err, API_ERRLEN) != 0)
        return ENTROPIX_ERR_ARGUMENT;
    return ENTROPIX_OK;
}

ENTROPIX_API int entropix_sampler_new(const entropix_sampler_params *params, entropix_sampler **out) {
    if (!params || !out) return api_fail(ENTROPIX_ERR_ARGUMENT, "entropix_sampler_new: NULL argument");
    *out = NULL;
    int rc = API_CHECK_SIZE("entropix_sampler_new", params, entropix_sampler_params, profile);
    if (rc != ENTROPIX_OK) return rc;
    entropix_sampler_params p;  // the caller's fields; the rules stay off where its struct ends first
    entropix_sampler_params_init(&p, params->kind);
    API_COPY_IN(p, params);
    p.size = sizeof p;
    if (p.kind < ENTROPIX_SAMPLER_GREEDY || p.kind > ENTROPIX_SAMPLER_ENTROPIX)
        return api_fail(ENTROPIX_ERR_ARGUMENT, "sampler kind %d: expected 0 (greedy), 1 (combined) or 2 (entropix)",
                        p.kind);
    if (p.kind == ENTROPIX_SAMPLER_COMBINED && (rc = check_combined(&p)) != ENTROPIX_OK) return rc;
    entropix_sampler *smp = calloc(1, sizeof *smp);
    if (!smp) return api_fail(ENTROPIX_ERR_MEMORY, "entropix_sampler_new: out of memory");
    if ((rc = read_rules(&p, &smp->rules)) != ENTROPIX_OK || (rc = read_grammar(&p, &smp->grammar)) != ENTROPIX_OK) {
        entropix_sampler_free(smp);
        return rc;
    }
    smp->rules.grammar = smp->grammar;
    smp->params = p;  // the pointers are not kept: the sampler holds what they gave
    smp->params.profile = smp->params.grammar = smp->params.json_schema = NULL;
    smp->params.logit_bias_ids = NULL, smp->params.logit_bias = NULL;
    if (p.kind == ENTROPIX_SAMPLER_ENTROPIX) {
        const char *name = p.profile && *p.profile && strcmp(p.profile, "default") != 0 ? p.profile : EMX_PROFILE_DEFAULT;
        if (emx_profile_load(&smp->profile, name, api_errbuf(), API_ERRLEN) != 0) {
            entropix_sampler_free(smp);
            return ENTROPIX_ERR_FILE;
        }
    }
    *out = smp;
    return ENTROPIX_OK;
}

ENTROPIX_API int entropix_sampler_new_custom(entropix_choose_fn choose, void *user, entropix_sampler **out) {
    if (!choose || !out) return api_fail(ENTROPIX_ERR_ARGUMENT, "entropix_sampler_new_custom: NULL argument");
    if (!(*out = calloc(1, sizeof **out))) return api_fail(ENTROPIX_ERR_MEMORY, "entropix_sampler_new_custom: out of memory");
    entropix_sampler_params_init(&(*out)->params, -1);
    (*out)->rules = EMX_LOGIT_RULES_OFF;
    (*out)->choose = choose;
    (*out)->user = user;
    return ENTROPIX_OK;
}

ENTROPIX_API void entropix_sampler_free(entropix_sampler *smp) {
    if (!smp) return;
    if (smp->grammar) emx_grammar_free(smp->grammar);
    free(smp);
}

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

// The logit rules of smp around *inner (nothing when it has none): a logit bias id past the
// vocabulary fails here, as the generation's argument.
static int init_rules(ApiChain *c, const entropix_sampler *smp, entropix_state *s, const int *prompt, int n_prompt,
                      EmxSampler **inner) {
    if (!emx_logit_rules_active(&smp->rules)) return ENTROPIX_OK;
    EmxLogitRules rules = smp->rules;
    char *err = api_errbuf();
    if (rules.grammar) {
        if (!(rules.trie = api_model_trie(s->owner))) return ENTROPIX_ERR_MEMORY;
        rules.tk = s->owner->tk;
    }
    const int vocab = (int)s->owner->model.cfg.vocab_size;
    if (emx_logit_rules_check(&rules, vocab, err, API_ERRLEN) != 0) return ENTROPIX_ERR_ARGUMENT;
    if (emx_logit_filter_init(&c->filter, *inner, &rules, vocab, emx_state_ctx(s->st), err, API_ERRLEN) != 0)
        return ENTROPIX_ERR_MEMORY;
    emx_logit_filter_prompt(&c->filter, prompt, n_prompt);
    *inner = &c->filter.base;
    return ENTROPIX_OK;
}

int api_chain_init(ApiChain *c, const entropix_sampler *smp, entropix_state *s, const int *prompt, int n_prompt,
                   int n_top, int want_metrics) {
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
    if ((rc = init_rules(c, smp, s, prompt, n_prompt, &inner)) != ENTROPIX_OK) return rc;
    emx_logprob_tap_init(&c->lp, inner, n_top);
    c->head = &c->lp.base;
    return ENTROPIX_OK;
}

void api_chain_free(ApiChain *c) {
    free(c->custom.scratch);
    emx_logit_filter_free(&c->filter);
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
