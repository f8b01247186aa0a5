// generate_step.c — the generation loop as steps (generate_step.h): the prefill, each choice, the
// stop rules in their order, the streaming decoder.
#include "runtime/generate_step.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/errmsg.h"

enum { PHASE_PREFILL, PHASE_DECODE, PHASE_FLUSH, PHASE_DONE, PHASE_FAILED };

// ---------------------------------------------------------------------------------------------
// One forward and one choice (generate.h).

int emx_feed_and_choose(EmxState *st, EmxSampler *sm, const int *tokens, int n, int pos, int n_vocab, int ahead,
                        double *sample_s) {
    const EmxDecideSpec *spec = sm->device_spec ? sm->device_spec(sm) : NULL;
    if (spec) {
        EmxDecideResult r;
        int rc = ahead ? emx_forward_decide_ahead(st, tokens, n, pos, spec, &r)
                       : emx_forward_decide(st, tokens, n, pos, spec, &r);
        if (rc < 0) return -1;
        if (rc == 1) {
            if (sm->device_result) sm->device_result(sm, &r);
            return r.token;
        }
    }
    const float *logits = emx_forward(st, tokens, n, pos);
    if (!logits) return -1;
    double ts = emx_now_s();
    int id = sm->choose(sm, st, logits, n_vocab, pos + n);
    *sample_s += emx_now_s() - ts;
    if (id >= 0 && id < n_vocab) return id;
    for (int i = 0; i < n_vocab; i++)
        if (isnan(logits[i]) || isinf(logits[i])) return -3;
    return -2;
}

void emx_no_token_error(EmxState *st, int id, int pos, int step, char *err, size_t errlen) {
    const char *where = id == -3 ? emx_state_nonfinite(st) : NULL;
    if (id != -3)
        emx_seterr(err, errlen, "sampler found no token to choose at position %d", pos);
    else if (where)
        emx_seterr(err, errlen, "the logits are NaN or Inf at position %d (step %d): %s is the first non-finite "
                 "value (a NaN or Inf weight?)", pos, step, where);
    else
        emx_seterr(err, errlen, "the logits are NaN or Inf at position %d (step %d)", pos, step);
}

// ---------------------------------------------------------------------------------------------
// The steps.

// The prompt's length against the context, and what is cached of it. Returns 0 or -1 (err).
static int check_prompt(int n_prompt, int n_cached, int ctx, char *err, size_t errlen) {
    if (n_prompt < 1) {
        emx_seterr(err, errlen, "generate: empty prompt (it needs at least a BOS token)");
        return -1;
    }
    if (n_cached < 0 || n_cached >= n_prompt) {  // the last prompt token must run: its logits choose
        emx_seterr(err, errlen, "generate: n_cached %d is outside 0..%d (prompt %d tokens)", n_cached, n_prompt - 1,
                 n_prompt);
        return -1;
    }
    if (n_prompt > ctx) {
        emx_seterr(err, errlen, "prompt is %d tokens, context is %d", n_prompt, ctx);
        return -1;
    }
    return 0;
}

int emx_gen_step_begin(EmxGenStep *g, EmxState *st, const EmxTokenizer *tk, const int *prompt, int n_prompt,
                       EmxSampler *sampler, const EmxGenerateOptions *opt, EmxGenTextFn echo, void *echo_user,
                       char *err, size_t errlen) {
    memset(g, 0, sizeof *g);
    if (check_prompt(n_prompt, opt->n_cached, emx_state_ctx(st), err, errlen) != 0) return -1;
    *g = (EmxGenStep){.st = st, .tk = tk, .sampler = sampler, .prompt = prompt, .n_prompt = n_prompt,
                      .n_cached = opt->n_cached, .n_vocab = emx_tokenizer_n_vocab(tk), .ctx = emx_state_ctx(st),
                      .n_predict = opt->n_predict, .ignore_stop = opt->ignore_stop,
                      .steps_in_turn = opt->steps_in_turn, .cap = emx_decoder_max_out(tk),
                      .phase = PHASE_PREFILL};
    g->stats.n_prompt = n_prompt - opt->n_cached;
    if (!(g->buf = malloc(g->cap))) {
        emx_seterr(err, errlen, "generate: out of memory");
        return -1;
    }
    emx_decoder_init(&g->dec, tk, !opt->print_control);
    for (int i = 0; i < n_prompt; i++) {
        const size_t k = emx_decoder_push(&g->dec, prompt[i], g->buf, g->cap);
        if (echo && k && echo(echo_user, g->buf, k, err, errlen) != 0) {
            emx_gen_step_end(g);
            return -1;
        }
    }
    return 0;
}

static int fail(EmxGenStep *g) {
    g->phase = PHASE_FAILED;
    return -1;
}

// Whether the token chosen next (the index-th) may be fed by a step queued before the host reads
// it: unless the token budget ends with it (a stop token is not known in advance: the queued step
// is then dropped) or the steps go in turn.
static int queue_ahead(const EmxGenStep *g, int index) {
    return !g->steps_in_turn && (g->n_predict < 0 || index + 1 < g->n_predict);
}

// One batched prefill of what is not cached yet, and the first choice. The choice is counted in
// the decode interval with the others, so the sampler's share is of one interval.
static int prefill(EmxGenStep *g, char *err, size_t errlen) {
    const int n = g->n_prompt - g->n_cached;
    const double t0 = emx_now_s();
    g->id = emx_feed_and_choose(g->st, g->sampler, g->prompt + g->n_cached, n, g->n_cached, g->n_vocab,
                                queue_ahead(g, 0), &g->stats.sample_s);
    g->t_decode0 = emx_now_s();
    g->first_choice_s = g->stats.sample_s;
    g->stats.prefill_s = g->t_decode0 - t0 - g->first_choice_s;
    if (g->id == -1) {
        emx_seterr(err, errlen, "forward pass failed on the prompt (%d tokens, context %d): %s", n, g->ctx,
                 emx_state_error(g->st));
        return fail(g);
    }
    g->pos = g->n_prompt;  // where the chosen token goes
    g->phase = PHASE_DECODE;
    return 0;
}

// Feeds the token chosen last and chooses the next.
static int feed(EmxGenStep *g, char *err, size_t errlen) {
    const int fed = g->id;
    g->id = emx_feed_and_choose(g->st, g->sampler, &fed, 1, g->pos, g->n_vocab, queue_ahead(g, g->stats.n_generated),
                                &g->stats.sample_s);
    if (g->id == -1) {
        emx_seterr(err, errlen, "forward pass failed at position %d (context %d): %s", g->pos, g->ctx,
                 emx_state_error(g->st));
        return fail(g);
    }
    g->pos++;
    g->fed = 0;
    return 0;
}

// The token chosen last as a step's token, and whether the generation ends after it. Returns 1
// with *tok, 0 when the budget was spent before it, -1 (err).
static int emit(EmxGenStep *g, EmxGenToken *tok, char *err, size_t errlen) {
    EmxGenerateStats *s = &g->stats;
    if (g->n_predict >= 0 && s->n_generated >= g->n_predict) {
        s->stop = EMX_STOP_N_PREDICT;
        g->phase = PHASE_FLUSH;
        return 0;
    }
    if (g->id < 0) {
        emx_no_token_error(g->st, g->id, g->pos, s->n_generated, err, errlen);
        return fail(g);
    }
    const int index = s->n_generated++;
    // ignore_stop (benchmarks) feeds a stop token back like any other, within a token budget
    const int is_stop = emx_is_stop(g->tk, g->id) && !(g->ignore_stop && g->n_predict >= 0);
    const size_t k = is_stop ? 0 : emx_decoder_push(&g->dec, g->id, g->buf, g->cap);  // never the stop's text
    *tok = (EmxGenToken){.index = index, .id = g->id, .pos = g->pos, .is_stop = is_stop, .text = g->buf, .len = k};
    g->fed = 1;
    if (is_stop) s->stop = EMX_STOP_TOKEN;
    else if (g->n_predict >= 0 && s->n_generated >= g->n_predict) s->stop = EMX_STOP_N_PREDICT;  // not fed
    else if (g->pos >= g->ctx) s->stop = EMX_STOP_CONTEXT;  // the token just chosen has no place left
    if (s->stop) g->phase = PHASE_FLUSH;
    return 1;
}

size_t emx_gen_step_flush(EmxGenStep *g, const char **text) {
    *text = g->buf;
    if (g->phase != PHASE_FAILED) g->phase = PHASE_DONE;
    return g->buf ? emx_decoder_flush(&g->dec, g->buf, g->cap) : 0;
}

int emx_gen_step_next(EmxGenStep *g, EmxGenToken *tok, char *err, size_t errlen) {
    if (g->phase == PHASE_FAILED) {
        emx_seterr(err, errlen, "generate: the generation failed already");
        return -1;
    }
    if (g->phase == PHASE_PREFILL && prefill(g, err, errlen) != 0) return -1;
    if (g->phase == PHASE_DECODE && g->fed && feed(g, err, errlen) != 0) return -1;
    int rc = 0;
    if (g->phase == PHASE_DECODE && (rc = emit(g, tok, err, errlen)) < 0) return -1;
    // decode_s: from the end of the prefill's forward to this token (the caller's handling of the
    // token before included)
    g->stats.decode_s = emx_now_s() - g->t_decode0 + g->first_choice_s;
    if (rc == 1) return 1;
    if (g->phase == PHASE_FLUSH) {
        const char *text;
        const size_t k = emx_gen_step_flush(g, &text);
        if (k) {
            *tok = (EmxGenToken){.index = -1, .id = -1, .pos = -1, .text = text, .len = k};
            return 1;
        }
    }
    return 0;
}

void emx_gen_step_end(EmxGenStep *g) {
    free(g->buf);
    g->buf = NULL;
}
