// api_state.c — states, the forward step, attention scores and the metrics of a step.
#include "api/api_internal.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/entropix_sampler.h"

ENTROPIX_API void entropix_state_params_init(entropix_state_params *p) {
    if (p) *p = (entropix_state_params){.size = sizeof *p, .cache_type = "auto"};
}

ENTROPIX_API int entropix_state_new(entropix_model *m, const entropix_state_params *params, entropix_state **out) {
    entropix_state_params def;
    entropix_state_params_init(&def);
    if (!m || !out) return api_fail(ENTROPIX_ERR_ARGUMENT, "entropix_state_new: NULL argument");
    *out = NULL;
    const int rc = params ? API_CHECK_SIZE("entropix_state_new", params, entropix_state_params, threads) : ENTROPIX_OK;
    if (rc != ENTROPIX_OK) return rc;
    const entropix_state_params *p = params ? params : &def;
    EmxKvType cache = EMX_KV_AUTO;
    if (p->cache_type && emx_kv_type_parse(p->cache_type, &cache) != 0)
        return api_fail(ENTROPIX_ERR_ARGUMENT, "cache type \"%s\": expected auto, f32 or f16", p->cache_type);
    const int max = (int)m->model.cfg.max_seq_len;
    if (p->ctx > max)
        return api_fail(ENTROPIX_ERR_ARGUMENT, "context %d exceeds the model's %d positions", p->ctx, max);
    EmxStateOptions so = {.n_threads = p->threads ? p->threads : m->threads, .ctx = p->ctx,
                          .device = p->device ? p->device : m->device, .cache_type = cache};
    entropix_state *s = calloc(1, sizeof *s);
    if (!s) return api_fail(ENTROPIX_ERR_MEMORY, "entropix_state_new: out of memory");
    if (!(s->st = emx_state_new(&m->model, &so, api_errbuf(), API_ERRLEN))) {
        free(s);
        return emx_device_is_cpu(so.device) ? ENTROPIX_ERR_RUNTIME : ENTROPIX_ERR_DEVICE;
    }
    s->owner = m;
    s->last_pos = -1;
    s->scratch = malloc((size_t)emx_state_ctx(s->st) * sizeof *s->scratch);
    s->held = malloc((size_t)emx_state_ctx(s->st) * sizeof *s->held);
    s->last_row = malloc((size_t)m->model.cfg.vocab_size * sizeof *s->last_row);
    if (!s->scratch || !s->last_row || !s->held) {
        entropix_state_free(s);
        return api_fail(ENTROPIX_ERR_MEMORY, "entropix_state_new: out of memory");
    }
    *out = s;
    return ENTROPIX_OK;
}

ENTROPIX_API void entropix_state_free(entropix_state *s) {
    if (!s) return;
    if (s->st) emx_state_free(s->st);
    free(s->scratch);
    free(s->held);
    free(s->last_row);
    free(s);
}

ENTROPIX_API int entropix_state_ctx(const entropix_state *s) { return s ? emx_state_ctx(s->st) : 0; }
ENTROPIX_API const char *entropix_state_device(const entropix_state *s) { return s ? emx_state_device(s->st) : NULL; }
ENTROPIX_API entropix_model *entropix_state_model(const entropix_state *s) { return s ? s->owner : NULL; }

void api_state_hold(entropix_state *s, const int *ids, int n, int pos) {
    if (pos > s->n_held) return;
    const int ctx = emx_state_ctx(s->st), k = n < ctx - pos ? n : ctx - pos;
    if (k > 0) memcpy(s->held + pos, ids, (size_t)k * sizeof *ids);
    s->n_held = pos + (k > 0 ? k : 0);
}

int api_state_prefix(const entropix_state *s, const int *prompt, int n) {
    int k = 0;
    while (k < s->n_held && k < n - 1 && s->held[k] == prompt[k]) k++;
    return k;
}

// The checks emx_forward makes, said in words before it runs.
static int check_batch(const entropix_state *s, const int *ids, int n, int pos) {
    if (!s || !ids) return api_fail(ENTROPIX_ERR_ARGUMENT, "entropix_forward: NULL argument");
    if (s->generating)
        return api_fail(ENTROPIX_ERR_ARGUMENT, "forward: a generation runs on this state (entropix_generation_end ends it)");
    const int ctx = emx_state_ctx(s->st), vocab = (int)s->owner->model.cfg.vocab_size;
    if (n < 1) return api_fail(ENTROPIX_ERR_ARGUMENT, "forward: %d ids; at least 1 is needed", n);
    if (pos < 0 || pos > ctx - n)
        return api_fail(ENTROPIX_ERR_ARGUMENT, "forward: positions %d..%d are beyond the context of %d", pos,
                        pos + n - 1, ctx);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab)
            return api_fail(ENTROPIX_ERR_ARGUMENT, "forward: id %d (index %d) is outside the vocabulary [0, %d)", ids[i],
                            i, vocab);
    return ENTROPIX_OK;
}

ENTROPIX_API int entropix_forward(entropix_state *s, const int *ids, int n, int pos, entropix_step *out) {
    int rc = check_batch(s, ids, n, pos);
    if (rc != ENTROPIX_OK) return rc;
    if (!out) return api_fail(ENTROPIX_ERR_ARGUMENT, "entropix_forward: out is NULL");
    // Before the forward: a call that fails leaves the state as it was.
    if ((rc = API_CHECK_SIZE("entropix_forward", out, entropix_step, logits)) != ENTROPIX_OK) return rc;
    const float *logits = emx_forward(s->st, ids, n, pos);
    if (!logits) {
        s->last_pos = -1, s->logits = NULL;
        if (s->n_held > pos) s->n_held = pos;  // what it wrote is unknown
        return api_fail(ENTROPIX_ERR_RUNTIME, "forward: %s", emx_state_error(s->st));
    }
    api_state_hold(s, ids, n, pos);
    s->last_pos = pos + n - 1;
    s->logits = logits;
    entropix_step st = {.size = out->size, .logits = logits, .n_vocab = (int)s->owner->model.cfg.vocab_size,
                        .pos = s->last_pos};
    API_COPY_OUT(out, st);
    return ENTROPIX_OK;
}

ENTROPIX_API int entropix_forward_all(entropix_state *s, const int *ids, int n, int pos, float *logits) {
    int rc = check_batch(s, ids, n, pos);
    if (rc != ENTROPIX_OK) return rc;
    if (!logits) return api_fail(ENTROPIX_ERR_ARGUMENT, "entropix_forward_all: logits is NULL");
    if (emx_forward_all_logits(s->st, ids, n, pos, logits) != 0) {
        s->last_pos = -1, s->logits = NULL;
        if (s->n_held > pos) s->n_held = pos;
        return api_fail(ENTROPIX_ERR_RUNTIME, "forward: %s", emx_state_error(s->st));
    }
    api_state_hold(s, ids, n, pos);
    s->last_pos = pos + n - 1;
    // The last row, kept for entropix_state_metrics: the caller's buffer may not outlive the call.
    const size_t vocab = s->owner->model.cfg.vocab_size;
    memcpy(s->last_row, logits + (size_t)(n - 1) * vocab, vocab * sizeof *logits);
    s->logits = s->last_row;
    return ENTROPIX_OK;
}

ENTROPIX_API int entropix_attention_scores(entropix_state *s, int layer, entropix_attention *out) {
    if (!s || !out) return api_fail(ENTROPIX_ERR_ARGUMENT, "entropix_attention_scores: NULL argument");
    const int rc = API_CHECK_SIZE("entropix_attention_scores", out, entropix_attention, scores);
    if (rc != ENTROPIX_OK) return rc;
    const EmxConfig *c = &s->owner->model.cfg;
    if (layer < 0 || layer >= (int)c->n_layers)
        return api_fail(ENTROPIX_ERR_ARGUMENT, "attention scores: layer %d is outside [0, %u)", layer, c->n_layers);
    if (s->last_pos < 0) return api_fail(ENTROPIX_ERR_ARGUMENT, "attention scores: no forward has run on this state");
    int last = 0;
    const float *all = emx_attention_scores(s->st, &last);
    if (!all) return api_fail(ENTROPIX_ERR_RUNTIME, "attention scores: %s", emx_state_error(s->st));
    const int ctx = emx_state_ctx(s->st);
    entropix_attention a = {.size = out->size, .scores = all + (size_t)layer * c->n_heads * (size_t)ctx,
                            .n_heads = (int)c->n_heads, .n_keys = last + 1, .row_stride = ctx};
    API_COPY_OUT(out, a);
    return ENTROPIX_OK;
}

ENTROPIX_API int entropix_state_metrics(entropix_state *s, int attn_layer, entropix_metrics *out) {
    if (!s || !out) return api_fail(ENTROPIX_ERR_ARGUMENT, "entropix_state_metrics: NULL argument");
    const int rc = API_CHECK_SIZE("entropix_state_metrics", out, entropix_metrics, logits_entropy);
    if (rc != ENTROPIX_OK) return rc;
    const EmxConfig *c = &s->owner->model.cfg;
    int first, last;
    if (emx_attn_layer_range(attn_layer, (int)c->n_layers, &first, &last) != 0)
        return api_fail(ENTROPIX_ERR_ARGUMENT, "metrics: layer %d is outside [0, %u)", attn_layer, c->n_layers);
    if (s->last_pos < 0) return api_fail(ENTROPIX_ERR_ARGUMENT, "metrics: no forward has run on this state");
    EmxMetrics m = {0};
    emx_step_metrics(s->st, s->logits, (int)c->vocab_size, (int)c->n_layers, (int)c->n_heads, emx_state_ctx(s->st),
                     attn_layer, s->scratch, &m);
    api_fill_metrics(&m, out);
    return ENTROPIX_OK;
}

ENTROPIX_API int entropix_logits_metrics(const float *logits, int n, entropix_metrics *out) {
    if (!logits || !out || n < 1) return api_fail(ENTROPIX_ERR_ARGUMENT, "entropix_logits_metrics: bad argument");
    const int rc = API_CHECK_SIZE("entropix_logits_metrics", out, entropix_metrics, logits_entropy);
    if (rc != ENTROPIX_OK) return rc;
    EmxMetrics m = {0};
    emx_logits_metrics(logits, n, &m);
    api_fill_metrics(&m, out);
    return ENTROPIX_OK;
}
