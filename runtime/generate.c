// generate.c — prompt to ids, and the prefill + decode loop (see generate.h).
#include "runtime/generate.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/generate_step.h"
#include "tokenizer/chat_template.h"
#include "base/clock.h"
#include "base/errmsg.h"
#include "sampler/philox.h"

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
        // The renderer takes C strings: a NUL inside the text would end the message there,
        // silently dropping the rest, so it is refused (raw mode encodes the bytes as they are).
        const char *nul = memchr(text, 0, len);
        if (nul) {
            emx_seterr(err, errlen, "chat mode: the prompt has a NUL byte at offset %zu; a chat message is text "
                                    "(raw mode feeds the bytes as they are)", (size_t)(nul - text));
            return -1;
        }
        char *user = malloc(len + 1);
        if (!user) {
            emx_seterr(err, errlen, "prompt: out of memory");
            return -1;
        }
        memcpy(user, text, len);
        user[len] = 0;
        EmxChatMessage *msgs = malloc(((size_t)ps->n_history + 2) * sizeof *msgs);
        if (!msgs) {
            free(user);
            emx_seterr(err, errlen, "prompt: out of memory");
            return -1;
        }
        int n = 0;
        if (ps->system) msgs[n++] = (EmxChatMessage){.role = "system", .content = ps->system};
        for (int i = 0; i < ps->n_history; i++) msgs[n++] = ps->history[i];
        msgs[n++] = (EmxChatMessage){.role = "user", .content = user};
        EmxChatOptions co = {.add_generation_prompt = 1, .enable_thinking = ps->enable_thinking};
        rendered = emx_chat_render(family, msgs, n, &co, err, errlen);
        free(msgs);
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
// The loop: generate_step.h's steps to the end.

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

static int echo_out(void *user, const char *text, size_t k, char *err, size_t errlen) {
    return write_out(user, text, k, err, errlen);
}

// Writes a token's text (if any) and flushes, so the text appears as it is produced; or hands
// it to the caller's callback. The final flush (index -1) always goes to out. Returns 0, or -1
// with the reason in err when the text could not be written or the callback stopped the loop.
static int deliver(const EmxGenerateOptions *opt, const EmxGenToken *t, char *err, size_t errlen) {
    if (t->index < 0 || !opt->on_token) return t->len ? write_out(opt, t->text, t->len, err, errlen) : 0;
    if (opt->on_token(opt->on_token_user, t->index, t->id, t->pos, t->text, t->len, t->is_stop) == 0) return 0;
    emx_seterr(err, errlen, "generation stopped by the token callback at position %d", t->pos);
    return -1;
}

int emx_generate(EmxState *st, const EmxTokenizer *tk, const int *prompt, int n_prompt,
                 EmxSampler *sampler, const EmxGenerateOptions *opt, EmxGenerateStats *stats,
                 char *err, size_t errlen) {
    memset(stats, 0, sizeof *stats);
    EmxGenStep g;
    errno = 0;
    if (emx_gen_step_begin(&g, st, tk, prompt, n_prompt, sampler, opt, opt->echo_prompt ? echo_out : NULL,
                           (void *)opt, err, errlen) != 0)
        return -1;
    EmxGenToken t;
    int rc;
    while ((rc = emx_gen_step_next(&g, &t, err, errlen)) == 1) {
        if (t.index >= 0 && opt->ids_out && t.index < opt->ids_cap) opt->ids_out[t.index] = t.id;
        if (deliver(opt, &t, err, errlen) != 0) {
            rc = -1;
            break;
        }
    }
    if (rc != 0) {  // the decoder's held bytes still go out; the first reason stays
        const char *text;
        const size_t k = emx_gen_step_flush(&g, &text);
        if (k) write_out(opt, text, k, NULL, 0);
    }
    *stats = g.stats;
    emx_gen_step_end(&g);
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
