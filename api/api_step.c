// api_step.c — step-wise generation (entropix_generation_*): the runtime's generation steps
// (runtime/generate_step.h, the ones entropix_generate's loop runs to the end) one token per
// entropix_generation_next in the caller's thread, so that a caller with a loop of its own
// (Python's iterator) takes each token without a thread of ours between it and the runtime: the
// same tokens, the same text, each token as the sampler chain's record.
#include "api/api_sampler.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/generate_step.h"

struct entropix_generation {
    entropix_state *s;
    entropix_generate_params params;  // a copy: on_token and user unused
    ApiChain chain;
    int *prompt;            // [n_prompt] a copy, read by the first step
    EmxGenStep step;
    int begun;              // step holds memory to free
    entropix_token record;
    entropix_metrics metrics;
    int status;             // a failure, returned again with err (ENTROPIX_OK: none)
    char err[API_ERRLEN];
};

ENTROPIX_API int entropix_generation_begin(entropix_state *s, entropix_sampler *smp, const int *prompt, int n_prompt,
                                           const entropix_generate_params *params, entropix_generation **out) {
    if (!out) return api_fail(ENTROPIX_ERR_ARGUMENT, "entropix_generation_begin: out is NULL");
    *out = NULL;
    entropix_generate_params def;
    entropix_generate_params_init(&def);
    const entropix_generate_params *p = params ? params : &def;
    int rc = api_generate_check("entropix_generation_begin", s, smp, prompt, n_prompt, p);
    if (rc != ENTROPIX_OK) return rc;
    entropix_generation *g = calloc(1, sizeof *g);
    if (!g) return api_fail(ENTROPIX_ERR_MEMORY, "entropix_generation_begin: out of memory");
    entropix_generate_params_init(&g->params);  // fields a caller's older, shorter struct lacks
    API_COPY_IN(g->params, p);
    g->params.size = sizeof g->params;
    g->s = s;
    g->prompt = malloc((size_t)n_prompt * sizeof *g->prompt);
    if (!g->prompt) {
        entropix_generation_end(g);
        return api_fail(ENTROPIX_ERR_MEMORY, "entropix_generation_begin: out of memory");
    }
    memcpy(g->prompt, prompt, (size_t)n_prompt * sizeof *prompt);
    if ((rc = api_chain_init(&g->chain, smp, s, g->prompt, n_prompt, p->n_top, p->metrics)) != ENTROPIX_OK) {
        entropix_generation_end(g);
        return rc;
    }
    const EmxGenerateOptions opt = {.n_predict = p->max_tokens, .print_control = p->print_control,
                                    .ignore_stop = p->ignore_stop, .n_cached = api_generate_reuse(s, p, prompt, n_prompt)};
    if (emx_gen_step_begin(&g->step, s->st, s->owner->tk, g->prompt, n_prompt, g->chain.head, &opt, NULL, NULL,
                           api_errbuf(), API_ERRLEN) != 0) {  // out of memory: the prompt was checked
        entropix_generation_end(g);
        return ENTROPIX_ERR_MEMORY;
    }
    g->begun = 1;
    s->last_pos = -1, s->logits = NULL;  // the state's logits are the generation's from here
    s->generating = 1;
    *out = g;
    return ENTROPIX_OK;
}

ENTROPIX_API int entropix_generation_next(entropix_generation *g, const entropix_token **tok) {
    if (!g || !tok) return api_fail(ENTROPIX_ERR_ARGUMENT, "entropix_generation_next: NULL argument");
    *tok = NULL;
    if (g->status != ENTROPIX_OK) return api_fail(g->status, "%s", g->err);
    EmxGenToken t;
    const int rc = emx_gen_step_next(&g->step, &t, api_errbuf(), API_ERRLEN);
    if (rc < 0) {  // kept for later calls
        g->status = ENTROPIX_ERR_RUNTIME;
        snprintf(g->err, sizeof g->err, "%s", api_errbuf());
        return g->status;
    }
    if (rc == 0) return ENTROPIX_OK;
    if (t.index >= 0) api_generate_record_id(g->s, g->step.n_prompt, t.index, t.id);
    if (t.index >= 0)
        g->record = api_chain_record(&g->chain, g->params.n_top, &g->metrics, t.index, t.id, t.pos, t.text, t.len,
                                     t.is_stop);
    else  // the decoder's final flush (held bytes, as U+FFFD), as entropix_generate's last callback
        g->record = (entropix_token){.size = sizeof g->record, .index = -1, .id = -1, .pos = -1, .text = t.text,
                                     .text_len = t.len, .entropix_case = -1};
    *tok = &g->record;
    return ENTROPIX_OK;
}

ENTROPIX_API int entropix_generation_result(const entropix_generation *g, entropix_generate_result *result) {
    if (!g || !result) return api_fail(ENTROPIX_ERR_ARGUMENT, "entropix_generation_result: NULL argument");
    const int rc = API_CHECK_SIZE("entropix_generation_result", result, entropix_generate_result, n_prompt);
    if (rc != ENTROPIX_OK) return rc;
    const EmxGenerateStats *st = &g->step.stats;
    entropix_generate_result res = {.size = result->size, .n_prompt = g->step.n_prompt,
                                    .n_generated = st->n_generated, .stop = st->stop, .prefill_s = st->prefill_s,
                                    .decode_s = st->decode_s, .n_cached = g->step.n_cached};
    API_COPY_OUT(result, res);
    return ENTROPIX_OK;
}

ENTROPIX_API void entropix_generation_end(entropix_generation *g) {
    if (!g) return;
    if (g->s) g->s->generating = 0;
    if (g->begun)  // what the cache holds now (a failed step: nothing known)
        api_generate_held(g->s, g->step.n_cached, g->step.n_prompt, g->step.stats.n_generated, g->status != ENTROPIX_OK);
    if (g->begun) emx_gen_step_end(&g->step);
    api_chain_free(&g->chain);
    free(g->prompt);
    free(g);
}
