// api_tokenizer.c — encoding, the streaming detokeniser and chat templates (entropix_tokenize,
// entropix_decoder_*, entropix_chat_*, entropix_prompt_tokens).
#include "api/api_internal.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/generate.h"
#include "tokenizer/chat_template.h"

struct entropix_decoder {
    EmxDecoder d;
    size_t max_out;
    char buf[];  // [max_out]: one push's or flush's bytes, before they are known to fit the caller's buffer
};

ENTROPIX_API int entropix_tokenize(const entropix_tokenizer *tk, const char *text, size_t len, int flags, int *ids,
                                   size_t cap, size_t *n_ids) {
    if (!tk || !n_ids || (!text && len) || (!ids && cap))
        return api_fail(ENTROPIX_ERR_ARGUMENT, "entropix_tokenize: NULL argument");
    int emx_flags = (flags & ENTROPIX_TOKENIZE_BOS ? EMX_ENC_BOS : 0) | (flags & ENTROPIX_TOKENIZE_SPECIAL ? EMX_ENC_SPECIAL : 0);
    int *all = NULL;
    size_t n = 0;
    if (emx_encode((const EmxTokenizer *)tk, text ? text : "", len, emx_flags, &all, &n, api_errbuf(), API_ERRLEN) != 0)
        return ENTROPIX_ERR_MEMORY;
    *n_ids = n;
    int rc = ENTROPIX_OK;
    if (n > cap)
        rc = api_fail(ENTROPIX_ERR_BUFFER, "entropix_tokenize: %zu ids do not fit a buffer of %zu", n, cap);
    else if (n)
        memcpy(ids, all, n * sizeof *ids);
    free(all);
    return rc;
}

ENTROPIX_API int entropix_decoder_new(const entropix_tokenizer *tk, int skip_control, entropix_decoder **out) {
    if (!tk || !out) return api_fail(ENTROPIX_ERR_ARGUMENT, "entropix_decoder_new: NULL argument");
    const size_t max_out = emx_decoder_max_out((const EmxTokenizer *)tk);
    if (!(*out = malloc(sizeof **out + max_out)))
        return api_fail(ENTROPIX_ERR_MEMORY, "entropix_decoder_new: out of memory");
    emx_decoder_init(&(*out)->d, (const EmxTokenizer *)tk, skip_control);
    (*out)->max_out = max_out;
    return ENTROPIX_OK;
}

ENTROPIX_API void entropix_decoder_free(entropix_decoder *d) { free(d); }

ENTROPIX_API size_t entropix_decoder_max_out(const entropix_decoder *d) { return d ? d->max_out : 0; }

// The n bytes a push or flush left in d->buf, all of them into out[0..cap) with *n_out = n; or,
// when they do not fit, none: ENTROPIX_ERR_BUFFER with the size needed in *n_out and the decoder
// back to `before`, so that the same call with a buffer of *n_out bytes gives every byte (the
// runtime's decoder would cut the text at cap and lose the rest).
static int deliver(entropix_decoder *d, const EmxDecoder *before, size_t n, char *out, size_t cap, size_t *n_out,
                   const char *fn) {
    *n_out = n;
    if (n > cap) {
        d->d = *before;
        return api_fail(ENTROPIX_ERR_BUFFER, "%s: %zu bytes do not fit a buffer of %zu", fn, n, cap);
    }
    if (n) memcpy(out, d->buf, n);
    return ENTROPIX_OK;
}

ENTROPIX_API int entropix_decoder_push(entropix_decoder *d, int id, char *out, size_t cap, size_t *n_out) {
    if (!d || !n_out || (!out && cap)) return api_fail(ENTROPIX_ERR_ARGUMENT, "entropix_decoder_push: NULL argument");
    const int n_vocab = emx_tokenizer_n_vocab(d->d.tk);
    if (id < 0 || id >= n_vocab)
        return api_fail(ENTROPIX_ERR_ARGUMENT, "token id %d is outside the vocabulary [0, %d)", id, n_vocab);
    const EmxDecoder before = d->d;
    const size_t n = emx_decoder_push(&d->d, id, d->buf, d->max_out);  // max_out: never cut
    return deliver(d, &before, n, out, cap, n_out, "entropix_decoder_push");
}

ENTROPIX_API int entropix_decoder_flush(entropix_decoder *d, char *out, size_t cap, size_t *n_out) {
    if (!d || !n_out || (!out && cap)) return api_fail(ENTROPIX_ERR_ARGUMENT, "entropix_decoder_flush: NULL argument");
    const EmxDecoder before = d->d;
    const size_t n = emx_decoder_flush(&d->d, d->buf, d->max_out);
    return deliver(d, &before, n, out, cap, n_out, "entropix_decoder_flush");
}

ENTROPIX_API void entropix_chat_params_init(entropix_chat_params *p) {
    if (p) *p = (entropix_chat_params){.size = sizeof *p, .add_generation_prompt = 1, .enable_thinking = 1};
}

// fn: the public function, named in the messages.
static int render(const char *fn, const entropix_model *m, const entropix_message *msgs, int n_msgs,
                  const entropix_chat_params *params, char **text) {
    entropix_chat_params def;
    entropix_chat_params_init(&def);
    const entropix_chat_params *p = params ? params : &def;
    if (!m || !text || n_msgs < 0 || (!msgs && n_msgs)) return api_fail(ENTROPIX_ERR_ARGUMENT, "%s: NULL argument", fn);
    *text = NULL;
    const int rc = params ? API_CHECK_SIZE(fn, params, entropix_chat_params, enable_thinking) : ENTROPIX_OK;
    if (rc != ENTROPIX_OK) return rc;
    const uint32_t family = m->model.cfg.chat_template;
    if (family == EMX_CHAT_NONE) return api_fail(ENTROPIX_ERR_ARGUMENT, "the model file has no chat template");
    EmxChatMessage *em = calloc((size_t)(n_msgs ? n_msgs : 1), sizeof *em);
    if (!em) return api_fail(ENTROPIX_ERR_MEMORY, "entropix_chat_render: out of memory");
    for (int i = 0; i < n_msgs; i++) {
        if (!msgs[i].role || !msgs[i].content) {
            free(em);
            return api_fail(ENTROPIX_ERR_ARGUMENT, "message %d: role or content is NULL", i);
        }
        em[i] = (EmxChatMessage){.role = msgs[i].role, .content = msgs[i].content};
    }
    EmxChatOptions co = {.add_generation_prompt = p->add_generation_prompt, .enable_thinking = p->enable_thinking};
    *text = emx_chat_render(family, em, n_msgs, &co, api_errbuf(), API_ERRLEN);
    free(em);
    return *text ? ENTROPIX_OK : ENTROPIX_ERR_ARGUMENT;
}

ENTROPIX_API int entropix_chat_render(const entropix_model *m, const entropix_message *msgs, int n_msgs,
                                      const entropix_chat_params *params, char **text) {
    return render("entropix_chat_render", m, msgs, n_msgs, params, text);
}

ENTROPIX_API int entropix_chat_tokens(const entropix_model *m, const entropix_message *msgs, int n_msgs,
                                      const entropix_chat_params *params, int **ids, int *n_ids) {
    if (!ids || !n_ids) return api_fail(ENTROPIX_ERR_ARGUMENT, "entropix_chat_tokens: NULL argument");
    char *text;
    int rc = render("entropix_chat_tokens", m, msgs, n_msgs, params, &text);
    if (rc != ENTROPIX_OK) return rc;
    // As emx_prompt_ids does for a chat: special tokens parsed, no BOS of ours when the template has one.
    int flags = EMX_ENC_SPECIAL | (emx_chat_template_adds_bos(m->model.cfg.chat_template) ? 0 : EMX_ENC_BOS);
    size_t n = 0;
    rc = emx_encode(m->tk, text, strlen(text), flags, ids, &n, api_errbuf(), API_ERRLEN);
    free(text);
    *n_ids = (int)n;
    return rc == 0 ? ENTROPIX_OK : ENTROPIX_ERR_MEMORY;
}

ENTROPIX_API int entropix_prompt_tokens(const entropix_model *m, const char *text, size_t len, int chat,
                                        const char *system, int **ids, int *n_ids) {
    if (!m || !ids || !n_ids || (!text && len)) return api_fail(ENTROPIX_ERR_ARGUMENT, "entropix_prompt_tokens: NULL argument");
    EmxPromptSpec ps = {.text = text, .len = len, .chat = chat, .system = system, .enable_thinking = 1};
    if (emx_prompt_ids(&m->model, m->tk, &ps, ids, n_ids, api_errbuf(), API_ERRLEN) != 0) return ENTROPIX_ERR_ARGUMENT;
    return ENTROPIX_OK;
}
