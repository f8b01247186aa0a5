// api_model.c — models (entropix_model_*) and what the tokenizer tells about tokens.
#include "api/api_internal.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/convert/gguf_cache.h"
#include "runtime/forward_backend.h"
#include "tokenizer/chat_template.h"

// A state's tokenizer is the model's: the public handle is the EmxTokenizer itself.
static const EmxTokenizer *tok_of(const entropix_tokenizer *tk) { return (const EmxTokenizer *)tk; }

// Weak: NULL unless the CUDA backend was linked in (api/api.mk, CUDA=1).
ENTROPIX_API const char *entropix_cuda_backend(void) { return emx_cuda_backend_name ? emx_cuda_backend_name() : NULL; }

ENTROPIX_API void entropix_model_params_init(entropix_model_params *p) {
    if (!p) return;
    *p = (entropix_model_params){.size = sizeof *p, .device = "cpu"};
}

// "cpu" (NULL, ""), "auto" or "cuda:N" with N a number: the syntax emx_state_new reads.
static int device_valid(const char *d) {
    if (!d || !*d || !strcmp(d, "cpu") || !strcmp(d, "auto")) return 1;
    if (strncmp(d, "cuda:", 5) != 0 || !d[5]) return 0;
    for (const char *c = d + 5; *c; c++)
        if (*c < '0' || *c > '9') return 0;
    return strlen(d) < API_DEVICE_LEN;
}

// params->gguf_cache when the caller's struct has it (a program built against a header before
// that field sets a smaller size), else NULL: the default folder.
static const char *gguf_cache_of(const entropix_model_params *params) {
    return params && params->size >= API_FIELD_END(entropix_model_params, gguf_cache) ? params->gguf_cache : NULL;
}

ENTROPIX_API int entropix_model_open(const char *path, const entropix_model_params *params, entropix_model **out) {
    entropix_model_params def;
    entropix_model_params_init(&def);
    if (!out) return api_fail(ENTROPIX_ERR_ARGUMENT, "entropix_model_open: out is NULL");
    *out = NULL;
    if (!path) return api_fail(ENTROPIX_ERR_ARGUMENT, "entropix_model_open: path is NULL");
    // gguf_cache came later: gguf_cache_of reads it only from a struct that holds it.
    const int rc = params ? API_CHECK_SIZE("entropix_model_open", params, entropix_model_params, mmap) : ENTROPIX_OK;
    if (rc != ENTROPIX_OK) return rc;
    const entropix_model_params *p = params ? params : &def;
    if (!device_valid(p->device))
        return api_fail(ENTROPIX_ERR_DEVICE, "device \"%s\": expected cpu, auto or cuda:N", p->device);
    if (p->device && !strncmp(p->device, "cuda:", 5) && !emx_cuda_available())
        return api_fail(ENTROPIX_ERR_DEVICE, "device %s: %s", p->device,
                        strstr(emx_backend_names(), "cuda") ? "no GPU is visible" : "this build has no CUDA backend");
    entropix_model *m = calloc(1, sizeof *m);
    if (!m) return api_fail(ENTROPIX_ERR_MEMORY, "entropix_model_open: out of memory");
    char *err = api_errbuf(), file[4096];  // path, or a GGUF's converted cache file (gguf_cache.h)
    if (emx_gguf_model_path(path, gguf_cache_of(params), NULL, file, sizeof file, err, API_ERRLEN) != 0 ||
        emx_model_open_load(&m->model, file, emx_load_for_device(p->device, p->mmap), err, API_ERRLEN) != 0) {
        free(m);
        return ENTROPIX_ERR_FILE;
    }
    if (!(m->tk = emx_tokenizer_new(&m->model.tok, err, API_ERRLEN))) {
        emx_model_close(&m->model);
        free(m);
        return ENTROPIX_ERR_FILE;
    }
    snprintf(m->device, sizeof m->device, "%s", p->device && *p->device ? p->device : "cpu");
    m->threads = p->threads;
    pthread_mutex_init(&m->trie_lock, NULL);
    *out = m;
    return ENTROPIX_OK;
}

ENTROPIX_API void entropix_model_close(entropix_model *m) {
    if (!m) return;
    if (m->trie) emx_token_trie_free(m->trie);
    pthread_mutex_destroy(&m->trie_lock);
    emx_tokenizer_free(m->tk);
    emx_model_close(&m->model);
    free(m);
}

const EmxTokenTrie *api_model_trie(entropix_model *m) {
    pthread_mutex_lock(&m->trie_lock);
    if (!m->trie) m->trie = emx_token_trie_new(m->tk, api_errbuf(), API_ERRLEN);
    const EmxTokenTrie *t = m->trie;
    pthread_mutex_unlock(&m->trie_lock);
    return t;
}

ENTROPIX_API int entropix_model_get_info(const entropix_model *m, entropix_model_info *info) {
    if (!m || !info) return api_fail(ENTROPIX_ERR_ARGUMENT, "entropix_model_get_info: NULL argument");
    const int rc = API_CHECK_SIZE("entropix_model_get_info", info, entropix_model_info, vocab_size);
    if (rc != ENTROPIX_OK) return rc;
    const EmxConfig *c = &m->model.cfg;
    entropix_model_info i = {
        .size = info->size,
        .vocab_size = (int)c->vocab_size,
        .dim = (int)c->dim,
        .hidden_dim = (int)c->hidden_dim,
        .n_layers = (int)c->n_layers,
        .n_heads = (int)c->n_heads,
        .n_kv_heads = (int)c->n_kv_heads,
        .head_dim = (int)c->head_dim,
        .max_seq_len = (int)c->max_seq_len,
        .chat_template = c->chat_template == EMX_CHAT_NONE ? NULL : emx_chat_template_name(c->chat_template),
    };
    API_COPY_OUT(info, i);
    return ENTROPIX_OK;
}

ENTROPIX_API const entropix_tokenizer *entropix_model_tokenizer(const entropix_model *m) {
    return m ? (const entropix_tokenizer *)m->tk : NULL;
}

ENTROPIX_API int entropix_tokenizer_vocab_size(const entropix_tokenizer *tk) {
    return tk ? emx_tokenizer_n_vocab(tok_of(tk)) : 0;
}

ENTROPIX_API int entropix_token_bos(const entropix_tokenizer *tk) { return tk ? emx_tokenizer_bos(tok_of(tk)) : -1; }

ENTROPIX_API int entropix_token_eos(const entropix_tokenizer *tk) {
    return tk ? emx_tokenizer_data(tok_of(tk))->eos_id : -1;
}

ENTROPIX_API int entropix_token_stops(const entropix_tokenizer *tk, int *ids, int cap) {
    if (!tk) return 0;
    const TokenizerData *d = emx_tokenizer_data(tok_of(tk));
    for (int i = 0; i < (int)d->n_stop && i < cap; i++) ids[i] = d->stop_ids[i];
    return (int)d->n_stop;
}

ENTROPIX_API int entropix_token_is_stop(const entropix_tokenizer *tk, int id) {
    return tk && id >= 0 && id < emx_tokenizer_n_vocab(tok_of(tk)) && emx_is_stop(tok_of(tk), id);
}

ENTROPIX_API int entropix_token_is_control(const entropix_tokenizer *tk, int id) {
    return tk && id >= 0 && id < emx_tokenizer_n_vocab(tok_of(tk)) && emx_is_control(tok_of(tk), id);
}

ENTROPIX_API int entropix_token_find(const entropix_tokenizer *tk, const char *text) {
    return tk && text ? emx_token_find(tok_of(tk), text) : -1;
}

ENTROPIX_API int entropix_token_piece(const entropix_tokenizer *tk, int id, char *buf, size_t cap, size_t *len) {
    if (!tk || !len || (!buf && cap)) return api_fail(ENTROPIX_ERR_ARGUMENT, "entropix_token_piece: NULL argument");
    const int n_vocab = emx_tokenizer_n_vocab(tok_of(tk));
    if (id < 0 || id >= n_vocab)
        return api_fail(ENTROPIX_ERR_ARGUMENT, "token id %d is outside the vocabulary [0, %d)", id, n_vocab);
    *len = emx_token_bytes(tok_of(tk), id, buf, cap);
    return ENTROPIX_OK;
}
