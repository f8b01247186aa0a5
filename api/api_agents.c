// api_agents.c — entropix_generate_agents: the agent pool's generation entry
// (runtime/pool/pool_generate.h) with the caller's callback per committed token, read from the
// pool's round events and decoded here with the streaming detokeniser.
#include "api/api_internal.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/pool/pool_generate.h"

ENTROPIX_API void entropix_agents_params_init(entropix_agents_params *p) {
    if (p) *p = (entropix_agents_params){.size = sizeof *p, .n_agents = 8, .lookahead = 1, .workers = 1};
}

typedef struct {
    const entropix_generate_params *gp;
    const EmxTokenizer *tk;
    EmxDecoder dec;
    char *buf;                         // [emx_decoder_max_out]
    size_t cap;
    int index;
    volatile sig_atomic_t interrupted; // the callback asked to stop: the pool stops after its round
    entropix_metrics metrics;
} ApiPoolRun;

static void on_event(void *user, const EmxPoolEvent *ev) {
    ApiPoolRun *r = user;
    if (ev->kind != EMX_POOL_EVENT_ROUND || r->interrupted) return;  // no critic: no verdicts, no rollbacks
    for (int j = 0; j < ev->n_tokens && !r->interrupted; j++) {
        const int id = ev->tokens[j], stop = emx_is_stop(r->tk, id);
        const size_t len = stop ? 0 : emx_decoder_push(&r->dec, id, r->buf, r->cap);
        const EmxLogprobs *lp = &ev->logprobs[j];
        r->metrics = (entropix_metrics){.size = sizeof r->metrics, .logits_entropy = ev->logits_entropy[j],
                                        .logits_varentropy = ev->logits_varentropy[j], .attn_entropy = NAN,
                                        .attn_varentropy = NAN, .attn_agreement = NAN,
                                        .attn_interaction_strength = NAN};
        const int n_top = r->gp->n_top < lp->n ? r->gp->n_top : lp->n;
        entropix_token t = {.size = sizeof t, .index = r->index++, .id = id, .pos = ev->pos + j, .text = r->buf,
                            .text_len = len, .is_stop = stop, .logprob = lp->chosen, .n_top = n_top, .top_ids = lp->id,
                            .top_logprobs = lp->logprob, .metrics = &r->metrics, .entropix_case = -1};
        if (r->gp->on_token && r->gp->on_token(r->gp->user, &t) != 0) r->interrupted = 1;
    }
}

// The arguments checked, and the pool's context in *ctx_out (ap->ctx, or the model's up to 4,096).
static int check_agents(const entropix_model *m, const entropix_agents_params *ap, const int *prompt, int n_prompt,
                        const entropix_generate_params *gp, int *ctx_out) {
    if (!m || !ap || !prompt || !gp) return api_fail(ENTROPIX_ERR_ARGUMENT, "entropix_generate_agents: NULL argument");
    int rc = API_CHECK_SIZE("entropix_generate_agents", ap, entropix_agents_params, seed);
    if (rc == ENTROPIX_OK) rc = API_CHECK_SIZE("entropix_generate_agents", gp, entropix_generate_params, user);
    if (rc != ENTROPIX_OK) return rc;
    const int max = (int)m->model.cfg.max_seq_len, ctx = *ctx_out = ap->ctx > 0 ? ap->ctx : (max < 4096 ? max : 4096);
    if (!emx_device_is_cpu(m->device))
        return api_fail(ENTROPIX_ERR_DEVICE, "agents: the pool runs on the CPU through this API, not on %s", m->device);
    if (ap->n_agents < 1 || ap->n_agents > EMX_POOL_MAX_AGENTS)
        return api_fail(ENTROPIX_ERR_ARGUMENT, "agents: n_agents %d is outside [1, %d]", ap->n_agents, EMX_POOL_MAX_AGENTS);
    if (ap->lookahead < 1 || ap->lookahead > EMX_POOL_MAX_LOOKAHEAD)
        return api_fail(ENTROPIX_ERR_ARGUMENT, "agents: lookahead %d is outside [1, %d]", ap->lookahead,
                        EMX_POOL_MAX_LOOKAHEAD);
    if (ap->workers < 1 || ap->workers > ap->n_agents)
        return api_fail(ENTROPIX_ERR_ARGUMENT, "agents: workers %d is outside [1, n_agents %d]", ap->workers, ap->n_agents);
    if (gp->n_top < 0 || gp->n_top > EMX_POOL_EVENT_TOP)
        return api_fail(ENTROPIX_ERR_ARGUMENT, "agents: n_top %d is outside [0, %d]", gp->n_top, EMX_POOL_EVENT_TOP);
    if (ctx > (int)m->model.cfg.max_seq_len)
        return api_fail(ENTROPIX_ERR_ARGUMENT, "agents: context %d exceeds the model's %u positions", ctx,
                        m->model.cfg.max_seq_len);
    const int vocab = (int)m->model.cfg.vocab_size;
    if (n_prompt < 1 || n_prompt >= ctx)
        return api_fail(ENTROPIX_ERR_ARGUMENT, "agents: the prompt is %d ids, the context %d", n_prompt, ctx);
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= vocab)
            return api_fail(ENTROPIX_ERR_ARGUMENT, "agents: prompt id %d (index %d) is outside the vocabulary [0, %d)",
                            prompt[i], i, vocab);
    if (gp->max_tokens > ctx - n_prompt)
        return api_fail(ENTROPIX_ERR_ARGUMENT, "agents: max_tokens %d is more than the %d the context has room for",
                        gp->max_tokens, ctx - n_prompt);
    return ENTROPIX_OK;
}

ENTROPIX_API int entropix_generate_agents(entropix_model *m, const entropix_agents_params *ap, const int *prompt,
                                          int n_prompt, const entropix_generate_params *gp,
                                          entropix_generate_result *result) {
    int ctx = 0;
    int rc = check_agents(m, ap, prompt, n_prompt, gp, &ctx);
    // The result's size before the run: the pool must not run only to fail at its end.
    if (rc == ENTROPIX_OK && result)
        rc = API_CHECK_SIZE("entropix_generate_agents", result, entropix_generate_result, n_prompt);
    if (rc != ENTROPIX_OK) return rc;
    EmxAgentParams agents[EMX_POOL_MAX_AGENTS];
    emx_pool_default_configs(agents, ap->n_agents);
    const int threads = ap->threads > 0 ? ap->threads : m->threads;
    ApiPoolRun run = {.gp = gp, .tk = m->tk, .cap = emx_decoder_max_out(m->tk)};
    if (!(run.buf = malloc(run.cap))) return api_fail(ENTROPIX_ERR_MEMORY, "agents: out of memory");
    emx_decoder_init(&run.dec, m->tk, !gp->print_control);
    // As ./run --sampler agents sets the pool up (runtime/cli/run_pool_setup.c), the critic off.
    EmxPoolOptions po = {.agents = agents, .n_agents = ap->n_agents, .lookahead = ap->lookahead,
                         .n_workers = ap->workers, .n_threads = threads > 0 ? (threads + ap->workers - 1) / ap->workers : 0,
                         .ctx = ctx, .seed = ap->seed, .n_predict = gp->max_tokens < 0 ? ctx - n_prompt : gp->max_tokens,
                         .interrupted = &run.interrupted, .ignore_stop = gp->ignore_stop, .on_event = on_event,
                         .on_event_user = &run};
    EmxPoolStats stats = {0};
    rc = emx_pool_generate(&m->model, m->tk, prompt, n_prompt, &po, &stats, NULL, NULL, api_errbuf(), API_ERRLEN) == 0
             ? ENTROPIX_OK
             : ENTROPIX_ERR_RUNTIME;
    const size_t tail = emx_decoder_flush(&run.dec, run.buf, run.cap);
    if (rc == ENTROPIX_OK && tail && gp->on_token && !run.interrupted) {
        entropix_token t = {.size = sizeof t, .index = -1, .id = -1, .pos = -1, .text = run.buf, .text_len = tail,
                            .entropix_case = -1};
        gp->on_token(gp->user, &t);
    }
    free(run.buf);
    if (result) {
        entropix_generate_result res = {.size = result->size, .n_prompt = stats.n_prompt, .n_generated = stats.n_generated,
                                        .stop = stats.stop == EMX_STOP_INTERRUPTED ? ENTROPIX_STOP_CALLBACK : stats.stop,
                                        .prefill_s = stats.prefill_s, .decode_s = stats.decode_s};
        API_COPY_OUT(result, res);
    }
    return rc;
}
