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

// Each pending entry's mark: the offset in text[] where its token's text starts. The entries a
// path added since the last call (they come before their token's text) start at `at`.
static int mark_new(SrvMarks *m, const cJSON *list, size_t at) {
    const int n = cJSON_GetArraySize(list);
    if (n > m->cap) {
        const int cap = n * 2;
        size_t *a = realloc(m->at, (size_t)cap * sizeof *a);
        if (!a) return -1;
        m->at = a, m->cap = cap;
    }
    while (m->n < n) m->at[m->n++] = at;
    return 0;
}

// The leading entries whose text starts before `upto` (marks never decrease).
static int starting_before(const SrvMarks *m, size_t upto) {
    int k = 0;
    while (k < m->n && m->at[k] < upto) k++;
    return k;
}

// The first k pending entries, taken off the list (NULL when k is 0).
static cJSON *take(cJSON **list, SrvMarks *m, int k) {
    if (k <= 0 || !*list) return NULL;
    cJSON *out = *list;
    if (k < cJSON_GetArraySize(*list)) {
        if (!(out = cJSON_CreateArray())) return NULL;
        for (int i = 0; i < k; i++) cJSON_AddItemToArray(out, cJSON_DetachItemFromArray(*list, 0));
        memmove(m->at, m->at + k, (size_t)(m->n - k) * sizeof *m->at);
        m->n -= k;
        return out;
    }
    *list = NULL;
    m->n = 0;
    return out;
}

int srv_flush_text(Gen *g, size_t upto, int force) {
    // An entry goes out with the piece of text that holds its token's first byte; at the end
    // (force), every one left.
    const int n_lp = force ? cJSON_GetArraySize(g->logprobs) : starting_before(&g->lp_at, upto);
    const int n_mx = force ? cJSON_GetArraySize(g->metrics) : starting_before(&g->mx_at, upto);
    if (upto <= g->sent && !(force && (n_lp || n_mx))) return 0;
    cJSON *lp = take(&g->logprobs, &g->lp_at, n_lp), *mx = take(&g->metrics, &g->mx_at, n_mx);
    if ((n_lp && !lp) || (n_mx && !mx)) g->oom = 1;
    int rc = g->emit(g->emit_user, g->text + g->sent, upto - g->sent, lp, mx);
    g->sent = upto;
    if (rc) g->emit_failed = 1;
    return rc;
}

int srv_add_text(Gen *g, const char *text, size_t len, int final) {
    if (mark_new(&g->lp_at, g->logprobs, g->len) || mark_new(&g->mx_at, g->metrics, g->len)) return g->oom = 1;
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
        // Nor their tokens' logprobs: a token with no byte left in the text is dropped (one cut
        // inside keeps its whole bytes). The metrics keep every token generated, as usage counts.
        const int keep = starting_before(&g->lp_at, g->len);
        while (g->lp_at.n > keep) cJSON_DeleteItemFromArray(g->logprobs, --g->lp_at.n);
        return srv_flush_text(g, g->len, 0) || 1;
    }
    return srv_flush_text(g, final ? g->len : g->len - hold, 0);
}

void srv_gen_free(Gen *g) {
    free(g->text);
    cJSON_Delete(g->logprobs);
    cJSON_Delete(g->metrics);
    free(g->lp_at.at);
    free(g->mx_at.at);
}
