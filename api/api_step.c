// api_step.c — step-wise generation (entropix_generation_*): entropix_generate's loop
// (runtime/generate.c emx_generate) turned inside out, one token per entropix_generation_next in
// the caller's thread, so that a caller with a loop of its own (Python's iterator) takes each token
// without a thread of ours between it and the runtime. Each step is emx_feed_and_choose, the loop's
// own step, and the stop rules and their order are emx_generate's: the same tokens, the same text.
#include "api/api_sampler.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"

enum { PHASE_PREFILL, PHASE_DECODE, PHASE_FLUSH, PHASE_DONE, PHASE_FAILED };

struct entropix_generation {
    entropix_state *s;
    entropix_generate_params params;  // a copy: on_token and user unused
    ApiChain chain;
    EmxDecoder dec;
    int *prompt;            // [n_prompt] a copy, fed by the first step
    int n_prompt, n_vocab, ctx;
    char *buf;              // [cap] the text the decoder releases for one token
    size_t cap;
    int phase;
    int fed;                // the last record's token is still to be fed (PHASE_DECODE)
    int id, pos;            // the token last chosen, the position it takes
    int n_generated, stop;
    double t_decode0, first_choice_s, sample_s, prefill_s, decode_s;
    entropix_token record;
    entropix_metrics metrics;
    int status;             // PHASE_FAILED: the failure, returned again with err
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
    memcpy(&g->params, p, p->size < sizeof g->params ? p->size : sizeof g->params);
    g->params.size = sizeof g->params;
    g->s = s;
    g->n_prompt = n_prompt;
    g->n_vocab = emx_tokenizer_n_vocab(s->owner->tk);
    g->ctx = emx_state_ctx(s->st);
    g->cap = emx_decoder_max_out(s->owner->tk);
    g->prompt = malloc((size_t)n_prompt * sizeof *g->prompt);
    g->buf = malloc(g->cap);
    if (!g->prompt || !g->buf) {
        entropix_generation_end(g);
        return api_fail(ENTROPIX_ERR_MEMORY, "entropix_generation_begin: out of memory");
    }
    memcpy(g->prompt, prompt, (size_t)n_prompt * sizeof *prompt);
    if ((rc = api_chain_init(&g->chain, smp, s, p->n_top, p->metrics)) != ENTROPIX_OK) {
        entropix_generation_end(g);
        return rc;
    }
    // The prompt goes through the decoder first, as emx_generate does: the decoder's state (the
    // previous token, e.g. BOS for SPM's leading-space rule) must be that of the sequence.
    emx_decoder_init(&g->dec, s->owner->tk, !p->print_control);
    for (int i = 0; i < n_prompt; i++) emx_decoder_push(&g->dec, prompt[i], g->buf, g->cap);
    s->last_pos = -1, s->logits = NULL;  // the state's logits are the generation's from here
    s->generating = 1;
    *out = g;
    return ENTROPIX_OK;
}

// Ends g with a failure: the message (already in this thread's buffer) kept for later calls.
static int fail(entropix_generation *g, int status) {
    g->phase = PHASE_FAILED;
    g->status = status;
    snprintf(g->err, sizeof g->err, "%s", api_errbuf());
    return status;
}

// The prefill and the first choice (emx_generate before its loop).
static int prefill(entropix_generation *g) {
    const double t0 = emx_now_s();
    g->id = emx_feed_and_choose(g->s->st, g->chain.head, g->prompt, g->n_prompt, 0, g->n_vocab, &g->sample_s);
    g->t_decode0 = emx_now_s();
    g->first_choice_s = g->sample_s;
    g->prefill_s = g->t_decode0 - t0 - g->first_choice_s;
    if (g->id == -1)
        return fail(g, api_fail(ENTROPIX_ERR_RUNTIME, "forward pass failed on the prompt (%d tokens, context %d): %s",
                                g->n_prompt, g->ctx, emx_state_error(g->s->st)));
    g->pos = g->n_prompt;
    g->phase = PHASE_DECODE;
    return ENTROPIX_OK;
}

// Feeds the token of the previous record and chooses the next (the end of emx_generate's loop body).
static int feed(entropix_generation *g) {
    const int fed = g->id;
    g->id = emx_feed_and_choose(g->s->st, g->chain.head, &fed, 1, g->pos, g->n_vocab, &g->sample_s);
    if (g->id == -1)
        return fail(g, api_fail(ENTROPIX_ERR_RUNTIME, "forward pass failed at position %d (context %d): %s", g->pos,
                                g->ctx, emx_state_error(g->s->st)));
    g->pos++;
    g->fed = 0;
    return ENTROPIX_OK;
}

// The token chosen last as a record, and whether the generation ends after it (the first part of
// emx_generate's loop body). *tok NULL: it ended before this token (max_tokens reached).
static int emit(entropix_generation *g, const entropix_token **tok) {
    const int n_predict = g->params.max_tokens;
    g->decode_s = emx_now_s() - g->t_decode0 + g->first_choice_s;  // as emx_generate's, to this token
    if (n_predict >= 0 && g->n_generated >= n_predict) {
        g->stop = ENTROPIX_STOP_MAX_TOKENS;
        g->phase = PHASE_FLUSH;
        return ENTROPIX_OK;
    }
    if (g->id < 0) {
        emx_no_token_error(g->s->st, g->id, g->pos, g->n_generated, api_errbuf(), API_ERRLEN);
        return fail(g, ENTROPIX_ERR_RUNTIME);
    }
    const EmxTokenizer *tk = g->s->owner->tk;
    const int index = g->n_generated++;
    const int is_stop = emx_is_stop(tk, g->id) && !(g->params.ignore_stop && n_predict >= 0);
    const size_t k = is_stop ? 0 : emx_decoder_push(&g->dec, g->id, g->buf, g->cap);
    g->record = api_chain_record(&g->chain, g->params.n_top, &g->metrics, index, g->id, g->pos, g->buf, k, is_stop);
    *tok = &g->record;
    g->fed = 1;
    if (is_stop) g->stop = ENTROPIX_STOP_TOKEN;
    else if (n_predict >= 0 && g->n_generated >= n_predict) g->stop = ENTROPIX_STOP_MAX_TOKENS;
    else if (g->pos >= g->ctx) g->stop = ENTROPIX_STOP_CONTEXT;  // no place left for this token
    if (g->stop) g->phase = PHASE_FLUSH;
    return ENTROPIX_OK;
}

// Bytes the decoder still holds at the end (as U+FFFD) as a record of their own, as
// entropix_generate's final callback.
static void flush(entropix_generation *g, const entropix_token **tok) {
    g->phase = PHASE_DONE;
    const size_t k = emx_decoder_flush(&g->dec, g->buf, g->cap);
    if (!k) return;
    g->record = (entropix_token){.size = sizeof g->record, .index = -1, .id = -1, .pos = -1, .text = g->buf,
                                 .text_len = k, .entropix_case = -1};
    *tok = &g->record;
}

ENTROPIX_API int entropix_generation_next(entropix_generation *g, const entropix_token **tok) {
    if (!g || !tok) return api_fail(ENTROPIX_ERR_ARGUMENT, "entropix_generation_next: NULL argument");
    *tok = NULL;
    if (g->phase == PHASE_FAILED) return api_fail(g->status, "%s", g->err);
    int rc = ENTROPIX_OK;
    if (g->phase == PHASE_PREFILL) rc = prefill(g);
    else if (g->phase == PHASE_DECODE && g->fed) rc = feed(g);
    if (rc == ENTROPIX_OK && g->phase == PHASE_DECODE) rc = emit(g, tok);
    if (rc == ENTROPIX_OK && !*tok && g->phase == PHASE_FLUSH) flush(g, tok);
    return rc;
}

ENTROPIX_API int entropix_generation_result(const entropix_generation *g, entropix_generate_result *result) {
    if (!g || !result) return api_fail(ENTROPIX_ERR_ARGUMENT, "entropix_generation_result: NULL argument");
    entropix_generate_result res = {.size = result->size, .n_prompt = g->n_prompt, .n_generated = g->n_generated,
                                    .stop = g->stop, .prefill_s = g->prefill_s, .decode_s = g->decode_s};
    memcpy(result, &res, result->size < sizeof res ? result->size : sizeof res);
    return ENTROPIX_OK;
}

ENTROPIX_API void entropix_generation_end(entropix_generation *g) {
    if (!g) return;
    if (g->s) g->s->generating = 0;
    api_chain_free(&g->chain);
    free(g->prompt);
    free(g->buf);
    free(g);
}
