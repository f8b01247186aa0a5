// api_generate.c — entropix_generate: the runtime's generation loop (runtime/generate.h) with the
// caller's callback per token, fed from the sampler chain's taps (api_sampler.h).
#include "api/api_sampler.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ENTROPIX_API void entropix_generate_params_init(entropix_generate_params *p) {
    if (p) *p = (entropix_generate_params){.size = sizeof *p, .max_tokens = -1};
}

typedef struct {
    const entropix_generate_params *gp;
    entropix_state *s;      // its held ids get the generated ones
    int n_prompt;
    ApiChain *chain;
    int stopped;            // the callback asked to stop
    entropix_metrics metrics;
} ApiRun;

static int on_token(void *user, int index, int id, int pos, const char *text, size_t len, int is_stop) {
    ApiRun *r = user;
    api_generate_record_id(r->s, r->n_prompt, index, id);
    if (!r->gp->on_token) return 0;
    entropix_token t = api_chain_record(r->chain, r->gp->n_top, &r->metrics, index, id, pos, text, len, is_stop);
    if (r->gp->on_token(r->gp->user, &t) != 0) r->stopped = 1;
    return r->stopped;
}

// The decoder's final flush (bytes held at the end, as U+FFFD) as a record of its own.
static int deliver_tail(ApiRun *r, const char *tail, size_t len) {
    if (!len || !r->gp->on_token || r->stopped) return 0;
    entropix_token t = {.size = sizeof t, .index = -1, .id = -1, .pos = -1, .text = tail, .text_len = len,
                        .logprob = 0.0, .entropix_case = -1};
    return r->gp->on_token(r->gp->user, &t);
}

int api_generate_check(const char *fn, const entropix_state *s, const entropix_sampler *smp, const int *prompt,
                       int n_prompt, const entropix_generate_params *params) {
    if (!s || !smp || !prompt || !params) return api_fail(ENTROPIX_ERR_ARGUMENT, "%s: NULL argument", fn);
    const int rc = API_CHECK_SIZE(fn, params, entropix_generate_params, user);
    if (rc != ENTROPIX_OK) return rc;
    if (s->generating)
        return api_fail(ENTROPIX_ERR_ARGUMENT, "%s: a generation runs on this state (entropix_generation_end ends it)",
                        fn);
    if (n_prompt < 1) return api_fail(ENTROPIX_ERR_ARGUMENT, "generate: the prompt has no ids");
    if (params->n_top < 0 || params->n_top > ENTROPIX_MAX_TOP)
        return api_fail(ENTROPIX_ERR_ARGUMENT, "generate: n_top %d is outside [0, %d]", params->n_top,
                        ENTROPIX_MAX_TOP);
    if (params->ignore_stop && params->max_tokens < 0)
        return api_fail(ENTROPIX_ERR_ARGUMENT, "generate: ignore_stop needs max_tokens >= 0");
    const int vocab = (int)s->owner->model.cfg.vocab_size, ctx = emx_state_ctx(s->st);
    if (n_prompt > ctx)
        return api_fail(ENTROPIX_ERR_ARGUMENT, "generate: the prompt is %d ids, the context %d", n_prompt, ctx);
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= vocab)
            return api_fail(ENTROPIX_ERR_ARGUMENT, "generate: prompt id %d (index %d) is outside the vocabulary [0, %d)",
                            prompt[i], i, vocab);
    return ENTROPIX_OK;
}

int api_generate_reuse(entropix_state *s, const entropix_generate_params *params, const int *prompt, int n_prompt) {
    const int reuse = params->size >= API_FIELD_END(entropix_generate_params, reuse_prefix) && params->reuse_prefix;
    const int n_cached = reuse ? api_state_prefix(s, prompt, n_prompt) : 0;
    s->n_held = n_cached;
    api_state_hold(s, prompt + n_cached, n_prompt - n_cached, n_cached);
    s->n_held = n_cached;  // the rest is held once the prefill has run
    return n_cached;
}

void api_generate_record_id(entropix_state *s, int n_prompt, int index, int id) {
    if (index >= 0 && n_prompt + index < emx_state_ctx(s->st)) s->held[n_prompt + index] = id;
}

void api_generate_held(entropix_state *s, int n_cached, int n_prompt, int n_generated, int failed) {
    const int ctx = emx_state_ctx(s->st), n = n_generated > 0 ? n_prompt + n_generated - 1 : n_cached;
    s->n_held = failed ? 0 : n < ctx ? n : ctx;
}

ENTROPIX_API int entropix_generate(entropix_state *s, entropix_sampler *smp, const int *prompt, int n_prompt,
                                   const entropix_generate_params *params, entropix_generate_result *result) {
    entropix_generate_params def;
    entropix_generate_params_init(&def);
    const entropix_generate_params *p = params ? params : &def;
    int rc = api_generate_check("entropix_generate", s, smp, prompt, n_prompt, p);
    // The result's size before the run: a generation must not run only to fail at its end.
    if (rc == ENTROPIX_OK && result)
        rc = API_CHECK_SIZE("entropix_generate", result, entropix_generate_result, n_prompt);
    if (rc != ENTROPIX_OK) return rc;
    ApiChain chain;
    if ((rc = api_chain_init(&chain, smp, s, prompt, n_prompt, p->n_top, p->metrics)) != ENTROPIX_OK) {
        api_chain_free(&chain);
        return rc;
    }
    // The final flush goes to `out` (the tokens' text goes to the callback): a memory stream.
    char *tail = NULL;
    size_t tail_len = 0;
    FILE *out = open_memstream(&tail, &tail_len);
    if (!out) {
        api_chain_free(&chain);
        return api_fail(ENTROPIX_ERR_MEMORY, "generate: out of memory");
    }
    ApiRun run = {.gp = p, .s = s, .n_prompt = n_prompt, .chain = &chain};
    const int n_cached = api_generate_reuse(s, p, prompt, n_prompt);
    EmxGenerateOptions go = {.n_predict = p->max_tokens, .out = out, .out_name = "the text buffer",
                             .print_control = p->print_control, .ignore_stop = p->ignore_stop, .on_token = on_token,
                             .on_token_user = &run, .n_cached = n_cached};
    EmxGenerateStats stats = {0};
    s->last_pos = -1, s->logits = NULL;  // the state's logits are the loop's from here
    s->generating = 1;                    // a callback's forward on s would rewrite the loop's cache
    const int grc = emx_generate(s->st, s->owner->tk, prompt, n_prompt, chain.head, &go, &stats, api_errbuf(), API_ERRLEN);
    s->generating = 0;
    fclose(out);
    rc = grc == 0 || run.stopped ? ENTROPIX_OK : ENTROPIX_ERR_RUNTIME;
    api_generate_held(s, n_cached, n_prompt, stats.n_generated, rc != ENTROPIX_OK);
    if (rc == ENTROPIX_OK && deliver_tail(&run, tail, tail_len) != 0) run.stopped = 1;
    free(tail);
    api_chain_free(&chain);
    if (result) {
        entropix_generate_result res = {.size = result->size, .n_prompt = n_prompt, .n_generated = stats.n_generated,
                                        .stop = run.stopped ? ENTROPIX_STOP_CALLBACK : stats.stop,
                                        .prefill_s = stats.prefill_s, .decode_s = stats.decode_s, .n_cached = n_cached};
        API_COPY_OUT(result, res);
    }
    return rc;
}
