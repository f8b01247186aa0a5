// engine_output.c — what every generation path (engine.c, engine_pool.c, engine_branch.c) sends:
// its text with the stop strings held back, the per-token entries waiting for their text
// (engine_output.h).
#include "tools/server/engine_output.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sampler/rng.h"
#include "tokenizer/tok_utf8.h"

size_t srv_stop_holdback(const char *text, size_t len, char *const *stop, int n_stop, long *match) {
    *match = -1;
    for (int s = 0; s < n_stop; s++) {  // the earliest complete match wins
        const size_t sl = strlen(stop[s]);
        for (size_t i = 0; i + sl <= len && (*match < 0 || (long)i < *match); i++)
            if (memcmp(text + i, stop[s], sl) == 0) {
                *match = (long)i;
                break;
            }
    }
    size_t hold = 0;
    for (int s = 0; s < n_stop; s++) {
        const size_t sl = strlen(stop[s]);
        for (size_t k = sl - 1; k > hold; k--)  // a suffix of length k that starts stop[s]
            if (k <= len && memcmp(text + len - k, stop[s], k) == 0) {
                hold = k;
                break;
            }
    }
    return hold;
}

uint64_t srv_request_seed(const SrvModel *sm, const SrvRequest *r) {
    if (r->has_seed) return r->seed;
    return sm->defaults.seed_given && !r->draw_seed ? sm->defaults.seed : emx_rng_seed_from_time();
}

cJSON *srv_text_json(const char *s, size_t n) {
    size_t len = 0;
    char *clean = tok_utf8_sanitize(s, n, &len);  // invalid UTF-8 becomes U+FFFD: JSON must be UTF-8
    if (!clean) return NULL;
    for (size_t i = 0; i < len; i++)
        if (!clean[i]) clean[i] = '?';  // unreachable for text (requests refuse NUL); token pieces may
    cJSON *j = cJSON_CreateString(clean);
    free(clean);
    return j;
}

cJSON *srv_token_entry(const EmxTokenizer *tk, int id, double logprob) {
    size_t n = 0;
    const char *piece = emx_token_bytes_ref(tk, id, &n);
    cJSON *o = cJSON_CreateObject(), *bytes = cJSON_CreateArray();
    cJSON_AddItemToObject(o, "token", srv_text_json(piece ? piece : "", piece ? n : 0));
    cJSON_AddItemToObject(o, "logprob", isfinite(logprob) ? cJSON_CreateNumber(logprob) : cJSON_CreateNumber(-9999.0));
    for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(bytes, cJSON_CreateNumber((unsigned char)piece[i]));
    cJSON_AddItemToObject(o, "bytes", bytes);
    return o;
}


int srv_flush_text(Gen *g, size_t upto, int force) {
    if (upto <= g->sent && !(force && (g->logprobs || g->metrics))) return 0;
    int rc = g->emit(g->emit_user, g->text + g->sent, upto - g->sent, g->logprobs, g->metrics);
    g->logprobs = g->metrics = NULL;
    g->sent = upto;
    if (rc) g->emit_failed = 1;
    return rc;
}

int srv_add_text(Gen *g, const char *text, size_t len, int final) {
    if (g->len + len + 1 > g->cap) {
        size_t cap = (g->len + len + 1) * 2;
        char *t = realloc(g->text, cap);
        if (!t) return g->oom = 1;
        g->text = t, g->cap = cap;
    }
    memcpy(g->text + g->len, text, len);
    g->len += len;
    g->text[g->len] = 0;
    long match = -1;
    size_t hold = srv_stop_holdback(g->text, g->len, g->r->stop, g->r->n_stop, &match);
    if (match >= 0) {
        g->stopped = 1;
        g->len = (size_t)match;  // the stop string and what follows it are not returned
        return srv_flush_text(g, g->len, 0) || 1;
    }
    return srv_flush_text(g, final ? g->len : g->len - hold, 0);
}
