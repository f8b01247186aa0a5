// generate.c — prompt to ids, and the prefill + decode loop (see generate.h).
#include "runtime/generate.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/chat_template.h"
#include "base/clock.h"
#include "base/errmsg.h"
#include "sampler/philox.h"

// ---------------------------------------------------------------------------------------------
// One step of the loop (generate.h).
int emx_feed_and_choose(EmxState *st, EmxSampler *sm, const int *tokens, int n, int pos, int n_vocab,
                        double *sample_s) {
    const EmxDecideSpec *spec = sm->device_spec ? sm->device_spec(sm) : NULL;
    if (spec) {
        EmxDecideResult r;
        int rc = emx_forward_decide(st, tokens, n, pos, spec, &r);
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

// The error of a step whose sampler found no token (generate.h).
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
// The basic samplers behind the interface.

static int basic_choose(EmxSampler *self, EmxState *st, const float *logits, int n_vocab, int pos) {
    (void)st;
    EmxBasicSampler *bs = (EmxBasicSampler *)self;
    if (n_vocab > bs->n_vocab) return -1;
    double u = emx_uniform_f64(bs->seed, (uint64_t)pos, 0);
    return emx_sample(logits, n_vocab, &bs->params, u, bs->work);
}

static const EmxDecideSpec *basic_device_spec(EmxSampler *self) { return &((EmxBasicSampler *)self)->spec; }

int emx_basic_sampler_init(EmxBasicSampler *bs, const EmxSamplerParams *params, uint64_t seed,
                           int n_vocab, char *err, size_t errlen) {
    memset(bs, 0, sizeof *bs);
    bs->work = malloc(sizeof(EmxCandidate) * (size_t)(n_vocab > 0 ? n_vocab : 1));
    if (!bs->work) {
        emx_seterr(err, errlen, "sampler: out of memory for %d candidates", n_vocab);
        return -1;
    }
    bs->base.choose = basic_choose;
    bs->base.device_spec = basic_device_spec;
    bs->params = *params;
    bs->seed = seed;
    bs->spec.kind = EMX_DECIDE_SAMPLE;  // the same emx_sample, on the device
    bs->spec.params = *params;
    bs->spec.seed = seed;
    bs->spec.pause_token = -1;
    bs->n_vocab = n_vocab;
    return 0;
}

void emx_basic_sampler_free(EmxBasicSampler *bs) {
    free(bs->work);
    bs->work = NULL;
}

// ---------------------------------------------------------------------------------------------
// Prompt -> ids.

// Tells ps->warn which prompt byte had no token. In chat mode the offset is into the rendered
// conversation; the user's text is found in it to give the offset in what the user wrote.
static void warn_dropped(const EmxPromptSpec *ps, const EmxEncodeDrops *d, const char *rendered) {
    size_t off = d->first_offset;
    const char *of = "the prompt";
    if (rendered) {
        const char *u = NULL;  // the first copy of the user's text (memmem is not C11)
        for (const char *r = rendered; ps->len && *r && !u; r++)
            if (strncmp(r, ps->text, ps->len) == 0) u = r;
        if (u && off >= (size_t)(u - rendered) && off < (size_t)(u - rendered) + ps->len) off -= (size_t)(u - rendered);
        else of = "the rendered chat prompt";
    }
    char msg[200], more[64] = "";
    if (d->n_dropped > 1) snprintf(more, sizeof more, " (%zu such bytes in all)", d->n_dropped);
    snprintf(msg, sizeof msg, "the vocabulary has no token for byte 0x%02x at offset %zu of %s; it is left out%s",
             d->first_byte, off, of, more);
    ps->warn(ps->warn_ctx, msg);
}

int emx_prompt_ids(const EmxModel *m, const EmxTokenizer *tk, const EmxPromptSpec *ps, int **ids,
                   int *n_ids, char *err, size_t errlen) {
    *ids = NULL;
    *n_ids = 0;
    const char *text = ps->text ? ps->text : "";
    size_t len = ps->text ? ps->len : 0;
    char *rendered = NULL;
    // Special-token texts in the prompt ("<|im_start|>") are parsed as llama.cpp's CLI does,
    // so a hand-written template in raw mode works too.
    int flags = EMX_ENC_SPECIAL | EMX_ENC_BOS;
    if (ps->chat) {
        uint32_t family = m->cfg.chat_template;
        if (family == EMX_CHAT_NONE) {
            emx_seterr(err, errlen, "chat mode: the model file has no chat template (use --raw)");
            return -1;
        }
        // The user text may hold NULs (it came with a length); the renderer wants a C string.
        char *user = malloc(len + 1);
        if (!user) {
            emx_seterr(err, errlen, "prompt: out of memory");
            return -1;
        }
        memcpy(user, text, len);
        user[len] = 0;
        EmxChatMessage msgs[2];
        int n = 0;
        if (ps->system) msgs[n++] = (EmxChatMessage){.role = "system", .content = ps->system};
        msgs[n++] = (EmxChatMessage){.role = "user", .content = user};
        EmxChatOptions co = {.add_generation_prompt = 1, .enable_thinking = ps->enable_thinking};
        rendered = emx_chat_render(family, msgs, n, &co, err, errlen);
        free(user);
        if (!rendered) return -1;
        text = rendered;
        len = strlen(rendered);
        if (emx_chat_template_adds_bos(family)) flags &= ~EMX_ENC_BOS;  // the template's BOS wins
    }
    size_t n = 0;
    EmxEncodeDrops drops;
    int rc = emx_encode_ex(tk, text, len, flags, ids, &n, &drops, err, errlen);
    if (rc == 0 && drops.n_dropped && ps->warn) warn_dropped(ps, &drops, rendered);
    free(rendered);
    if (rc != 0) return -1;
    if (n == 0) {
        // Nothing to condition on: start from BOS (llama2.c's unconditional generation).
        int bos = emx_tokenizer_bos(tk);
        if (bos < 0) {
            free(*ids);
            *ids = NULL;
            emx_seterr(err, errlen, "empty prompt and the model has no BOS token to start from (give -p)");
            return -1;
        }
        int *one = realloc(*ids, sizeof(int));  // emx_encode's array may be 0 long
        if (!one) {
            free(*ids);
            *ids = NULL;
            emx_seterr(err, errlen, "prompt: out of memory");
            return -1;
        }
        one[0] = bos;
        *ids = one;
        n = 1;
    }
    if (n > (size_t)1 << 30) {
        free(*ids);
        *ids = NULL;
        emx_seterr(err, errlen, "prompt is %zu tokens: too long", n);
        return -1;
    }
    *n_ids = (int)n;
    return 0;
}

// ---------------------------------------------------------------------------------------------
// The loop.

// Writes text[0..k) to opt->out (if any) and flushes it. A full disk or a closed stdout is an
// error: the text must not vanish while the run reports success.
static int write_out(const EmxGenerateOptions *opt, const char *text, size_t k, char *err, size_t errlen) {
    if (!opt->out) return 0;
    if ((k && fwrite(text, 1, k, opt->out) != k) || fflush(opt->out) != 0 || ferror(opt->out)) {
        emx_seterr(err, errlen, "writing the generated text to %s: %s", opt->out_name ? opt->out_name : "the output",
                 strerror(errno ? errno : EIO));
        return -1;
    }
    return 0;
}

// Writes a token's text (if any) and flushes, so the text appears as it is produced; or hands
// it to the caller's callback. The stop token is never printed. Returns 0, or -1 with the
// reason in err when the text could not be written or the callback stopped the loop.
static int emit(const EmxGenerateOptions *opt, EmxDecoder *dec, int index, int id, int pos,
                int is_stop, char *buf, size_t cap, char *err, size_t errlen) {
    size_t k = is_stop ? 0 : emx_decoder_push(dec, id, buf, cap);
    if (opt->on_token) {
        if (opt->on_token(opt->on_token_user, index, id, pos, buf, k, is_stop) == 0) return 0;
        emx_seterr(err, errlen, "generation stopped by the token callback at position %d", pos);
        return -1;
    }
    return k ? write_out(opt, buf, k, err, errlen) : 0;
}

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

int emx_generate(EmxState *st, const EmxTokenizer *tk, const int *prompt, int n_prompt,
                 EmxSampler *sampler, const EmxGenerateOptions *opt, EmxGenerateStats *stats,
                 char *err, size_t errlen) {
    memset(stats, 0, sizeof *stats);
    const int n_cached = opt->n_cached;
    stats->n_prompt = n_prompt - n_cached;
    int ctx = emx_state_ctx(st);
    int n_vocab = emx_tokenizer_n_vocab(tk);
    if (check_prompt(n_prompt, n_cached, ctx, err, errlen) != 0) return -1;

    size_t cap = emx_decoder_max_out(tk);
    char *buf = malloc(cap);
    if (!buf) {
        emx_seterr(err, errlen, "generate: out of memory");
        return -1;
    }
    EmxDecoder dec;
    emx_decoder_init(&dec, tk, !opt->print_control);
    // The prompt goes through the decoder even when not echoed: the decoder's state (the
    // previous token, e.g. BOS for SPM's leading-space rule) must be that of the sequence.
    int rc = 0;
    errno = 0;
    for (int i = 0; i < n_prompt && rc == 0; i++) {
        size_t k = emx_decoder_push(&dec, prompt[i], buf, cap);
        if (opt->echo_prompt && k) rc = write_out(opt, buf, k, err, errlen);
    }
    if (rc != 0) goto done;
    // The first token is chosen right after the prefill's forward; its choice is counted in
    // the decode interval with the others, so the sampler's share is of one interval.
    double t0 = emx_now_s();
    // one batched prefill of what is not cached yet
    int id = emx_feed_and_choose(st, sampler, prompt + n_cached, n_prompt - n_cached, n_cached, n_vocab, &stats->sample_s);
    double t1 = emx_now_s();
    const double first_choice_s = stats->sample_s;
    stats->prefill_s = t1 - t0 - first_choice_s;
    if (id == -1) {
        emx_seterr(err, errlen, "forward pass failed on the prompt (%d tokens, context %d): %s", n_prompt - n_cached, ctx,
                 emx_state_error(st));
        rc = -1;
        goto done;
    }

    int pos = n_prompt;  // where the chosen token goes
    for (;;) {
        if (opt->n_predict >= 0 && stats->n_generated >= opt->n_predict) {
            stats->stop = EMX_STOP_N_PREDICT;
            break;
        }
        if (id < 0) {
            emx_no_token_error(st, id, pos, stats->n_generated, err, errlen);
            rc = -1;
            break;
        }
        if (opt->ids_out && stats->n_generated < opt->ids_cap) opt->ids_out[stats->n_generated] = id;
        int index = stats->n_generated++;
        int is_stop = emx_is_stop(tk, id) && !(opt->ignore_stop && opt->n_predict >= 0);
        if (emit(opt, &dec, index, id, pos, is_stop, buf, cap, err, errlen) != 0) {
            rc = -1;
            break;
        }
        if (is_stop) {
            stats->stop = EMX_STOP_TOKEN;
            break;
        }
        if (opt->n_predict >= 0 && stats->n_generated >= opt->n_predict) {
            stats->stop = EMX_STOP_N_PREDICT;  // no need to feed the last token
            break;
        }
        if (pos >= ctx) {  // the token just chosen has no place left in the cache
            stats->stop = EMX_STOP_CONTEXT;
            break;
        }
        const int fed = id;
        id = emx_feed_and_choose(st, sampler, &fed, 1, pos, n_vocab, &stats->sample_s);
        if (id == -1) {
            emx_seterr(err, errlen, "forward pass failed at position %d (context %d): %s", pos, ctx, emx_state_error(st));
            rc = -1;
            break;
        }
        pos++;
    }
    stats->decode_s = emx_now_s() - t1 + first_choice_s;

done:;
    size_t k = emx_decoder_flush(&dec, buf, cap);
    if (k && write_out(opt, buf, k, rc ? NULL : err, rc ? 0 : errlen) != 0) rc = -1;  // the first reason stays
    free(buf);
    return rc;
}

void emx_generate_print_stats(FILE *f, const EmxGenerateStats *s, const char *sampler) {
    double pf_ms = 1e3 * s->prefill_s, dec_ms = 1e3 * s->decode_s;
    fprintf(f, "prompt: %d tokens, prefill %.2f ms (%.2f tok/s)\n", s->n_prompt, pf_ms,
            s->prefill_s > 0 ? s->n_prompt / s->prefill_s : 0.0);
    fprintf(f, "generated: %d tokens, decode %.2f ms (%.2f tok/s, %.2f ms/token)\n",
            s->n_generated, dec_ms, s->decode_s > 0 ? s->n_generated / s->decode_s : 0.0,
            s->n_generated > 0 ? dec_ms / s->n_generated : 0.0);
    if (s->n_generated > 0)
        fprintf(f, "sampler: %s, %.3f ms/token (%.1f%% of decode)\n", sampler, 1e3 * s->sample_s / s->n_generated,
                s->decode_s > 0 ? 100.0 * s->sample_s / s->decode_s : 0.0);
}
