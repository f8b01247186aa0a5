// engine_pool.c — a request with sampler "agents": the agent pool built from the request's
// options by ./run's code (runtime/cli/run_pool.h), as tools/eval's runner builds it, so the same
// seed and options give ./run's text. The pool writes its final text (after the critic's
// verdicts) and one --metrics line per final token to two FILE*s; here both are fopencookie(3)
// streams whose writes feed the text and entries every path shares (engine_output.h): stop
// strings, logprobs, metrics and streaming work as they do there.
#define _GNU_SOURCE  // fopencookie
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cli/run_pool.h"
#include "runtime/pool/pool_generate.h"
#include "tools/server/engine_internal.h"
#include "tools/server/engine_output.h"

typedef struct {
    Gen *g;
    char *pending;               // text written for the token whose --metrics line has not come yet
    size_t n_pending, cap_pending;
    char *line;                  // the --metrics line being written (it comes in several writes)
    size_t n_line, cap_line;
    int last_stop;               // the last counted token was a stop token
    volatile sig_atomic_t stop;  // EmxPoolOptions.interrupted: the pool stops after its round
} PoolSink;

static int append(char **buf, size_t *n, size_t *cap, const char *data, size_t len) {
    if (*n + len + 1 > *cap) {
        size_t c = (*n + len + 1) * 2;
        char *b = realloc(*buf, c);
        if (!b) return -1;
        *buf = b, *cap = c;
    }
    memcpy(*buf + *n, data, len);
    *n += len;
    (*buf)[*n] = 0;
    return 0;
}

// Nothing more goes to the client: a stop string matched, the client is gone, or out of memory.
static int done(const PoolSink *k) { return k->g->stopped || k->g->emit_failed || k->g->oom || *k->g->cancel; }

// The pool's text stream: each final token's text arrives before that token's --metrics line,
// and waits here for it (its entries go out with its text).
static ssize_t text_write(void *cookie, const char *buf, size_t size) {
    PoolSink *k = cookie;
    if (done(k)) return (ssize_t)size;  // the pool is stopping (k->stop): what it writes now is dropped
    if (append(&k->pending, &k->n_pending, &k->cap_pending, buf, size) != 0) return k->g->oom = 1, k->stop = 1, -1;
    return (ssize_t)size;
}

// The OpenAI logprobs entry of one token from its --metrics line ({id, logprob, top_logprobs}).
static cJSON *logprob_entry(const Gen *g, const cJSON *line) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(line, "id"), *lp = cJSON_GetObjectItemCaseSensitive(line, "logprob");
    const cJSON *tops = cJSON_GetObjectItemCaseSensitive(line, "top_logprobs"), *t;
    if (!cJSON_IsNumber(id)) return NULL;
    // the chosen logprob as a float, as its top_logprobs entry has it (as the single stream)
    cJSON *o = srv_token_entry(g->sm->tk, id->valueint, cJSON_IsNumber(lp) ? (float)lp->valuedouble : NAN);
    cJSON *top = cJSON_CreateArray();
    int n = 0;
    cJSON_ArrayForEach(t, tops) {
        const cJSON *tid = cJSON_GetObjectItemCaseSensitive(t, "id"), *tlp = cJSON_GetObjectItemCaseSensitive(t, "logprob");
        if (n++ >= g->r->top_logprobs || !cJSON_IsNumber(tid)) continue;
        cJSON_AddItemToArray(top, srv_token_entry(g->sm->tk, tid->valueint, cJSON_IsNumber(tlp) ? tlp->valuedouble : NAN));
    }
    if (!o || !top) return cJSON_Delete(o), cJSON_Delete(top), NULL;
    cJSON_AddItemToObject(o, "top_logprobs", top);
    return o;
}

static int add_entry(cJSON **list, cJSON *o) {
    if (!o || (!*list && !(*list = cJSON_CreateArray()))) return cJSON_Delete(o), -1;
    cJSON_AddItemToArray(*list, o);
    return 0;
}

// One final token: its --metrics line. Its entries join the pending ones, then its text goes out.
static int on_line(PoolSink *k, const char *text) {
    Gen *g = k->g;
    cJSON *line = cJSON_Parse(text);
    if (!line) return g->oom = 1, -1;
    const int is_stop = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(line, "stop"));
    int rc = 0;
    // A stop token is not part of the completion: no logprobs entry (as the single stream), but
    // its metrics line, as ./run logs it.
    if (g->r->logprobs && !is_stop) rc = add_entry(&g->logprobs, logprob_entry(g, line));
    if (!rc && g->r->metrics) {
        cJSON *tops = cJSON_GetObjectItemCaseSensitive(line, "top_logprobs");
        while (cJSON_GetArraySize(tops) > g->r->top_logprobs) cJSON_DeleteItemFromArray(tops, g->r->top_logprobs);
        rc = add_entry(&g->metrics, line);
        line = NULL;
    }
    cJSON_Delete(line);
    if (rc) return g->oom = 1, -1;
    g->n_tokens++;
    k->last_stop = is_stop;
    const size_t n = k->n_pending;
    k->n_pending = 0;
    return srv_add_text(g, k->pending ? k->pending : "", n, 0) ? -1 : 0;
}

// The pool's --metrics stream: complete lines to on_line. Always open (even when the client
// asked for no metrics), since its lines mark where each final token's text ends.
static ssize_t metrics_write(void *cookie, const char *buf, size_t size) {
    PoolSink *k = cookie;
    for (size_t i = 0; i < size && !done(k); i++) {
        if (buf[i] != '\n') {
            if (append(&k->line, &k->n_line, &k->cap_line, buf + i, 1) != 0) return k->g->oom = 1, k->stop = 1, -1;
            continue;
        }
        if (!k->n_line) continue;  // (the pool writes no empty line)
        k->n_line = 0;  // k->line keeps its text (NUL-terminated) through the call
        if (on_line(k, k->line) != 0) k->stop = 1;  // stop string, client gone, or out of memory
    }
    return (ssize_t)size;
}

// The pool's observer, called every round on rank 0: a client gone stops the pool there.
static void on_event(void *user, const EmxPoolEvent *ev) {
    (void)ev;
    PoolSink *k = user;
    if (*k->g->cancel) k->stop = 1;
}

// Unbuffered, so every write reaches the sink at once and in the pool's order.
static FILE *sink_file(PoolSink *k, cookie_write_function_t *fn) {
    FILE *f = fopencookie(k, "w", (cookie_io_functions_t){.write = fn});
    if (f) setvbuf(f, NULL, _IONBF, 0);
    return f;
}

// The pool's run with its output through the sink; then the text the decoder held to the end.
static int run_pool(const SrvModel *sm, const int *ids, int n_ids, EmxPoolOptions *po, PoolSink *k,
                    EmxPoolStats *stats, SrvError *e) {
    Gen *g = k->g;
    FILE *out = sink_file(k, text_write), *metrics = sink_file(k, metrics_write);
    char err[512] = {0};
    int rc = -1;
    if (out && metrics) {
        po->out = out, po->metrics = metrics;
        rc = emx_pool_generate(&sm->model, sm->tk, ids, n_ids, po, stats, NULL, NULL, err, sizeof err);
    }
    if (out) fclose(out);
    if (metrics) fclose(metrics);
    if (!out || !metrics) return srv_fail(e, 500, NULL, NULL, "out of memory");
    if (g->oom) return srv_fail(e, 500, NULL, NULL, "out of memory");
    if (rc != 0 && !done(k)) return srv_fail(e, 500, NULL, NULL, "generation failed: %s", err);
    if (!done(k)) srv_add_text(g, k->pending ? k->pending : "", k->n_pending, 1);
    if (!g->emit_failed && (g->logprobs || g->metrics)) srv_flush_text(g, g->sent, 1);  // entries left over
    return g->oom ? srv_fail(e, 500, NULL, NULL, "out of memory") : 0;
}

static void pool_result(const Gen *g, const PoolSink *k, const EmxPoolStats *s, int n_ids, SrvGenResult *res) {
    res->n_prompt = n_ids;
    res->n_cached = 0;  // the pool prefills its own replicas: nothing comes from the slot's cache
    res->n_completion = g->n_tokens - (k->last_stop && !g->stopped ? 1 : 0);  // a final stop token not counted
    res->finish_reason = g->stopped || s->stop == EMX_STOP_TOKEN ? "stop" : "length";
    res->decode_s = s->decode_s;
    res->pool = 1;
    res->n_rounds = s->n_rounds, res->n_checks = s->n_checks, res->n_bad = s->n_bad;
    res->n_rollbacks = s->n_rollbacks, res->n_rolled_back_tokens = s->n_rolled_back_tokens;
    res->n_bad_accepted = s->n_bad_accepted;
}

int srv_generate_pool(const SrvModel *sm, const EmxCliArgs *a, const SrvRequest *r, const int *ids, int n_ids,
                      atomic_int *cancel, SrvEmit emit, void *emit_user, SrvGenResult *res, SrvError *e) {
    const int room = sm->ctx - n_ids;  // ./run's agents mode: every committed token has a row
    const char *param = r->kind == SRV_CHAT ? "messages" : "prompt";
    if (room < 1)
        return srv_fail(e, 400, param, "context_length_exceeded", "the prompt is %d tokens; the agent pool needs room "
                        "after it in the context of %d", n_ids, sm->ctx);
    if (r->max_tokens > room)
        return srv_fail(e, 400, "max_tokens", "context_length_exceeded",
                        "max_tokens is %d; the context of %d has room for %d after the prompt's %d tokens (agents)",
                        r->max_tokens, sm->ctx, room, n_ids);
    const int n_predict = r->max_tokens > 0 ? r->max_tokens : (a->n_predict < 0 || a->n_predict > room ? room : a->n_predict);
    res->seed = srv_request_seed(sm, r);
    res->sampler = emx_sampler_kind_name(EMX_SAMPLER_AGENTS);
    char err[512] = {0};
    EmxRunPoolSetup ps;
    if (emx_run_pool_setup(a, &ps, err, sizeof err) != 0) return srv_fail(e, 400, "entropix", NULL, "entropix: %s", err);
    EmxCritic *critic = NULL;  // this request's own, freed with it
    if (a->check_every > 0 && !(critic = emx_run_pool_critic(a, &ps, &sm->model, sm->tk, a->threads, err, sizeof err)))
        return srv_fail(e, 500, NULL, NULL, "critic: %s", err);
    Gen g = {.sm = sm, .r = r, .sampler_name = res->sampler, .cancel = cancel, .emit = emit, .emit_user = emit_user};
    PoolSink k = {.g = &g};
    EmxPoolOptions po = emx_run_pool_options(a, &ps, a->threads, sm->ctx, res->seed, n_predict, critic);
    po.interrupted = &k.stop, po.on_event = on_event, po.on_event_user = &k;
    // top_logprobs 0 still needs the chosen token's own logprob: the pool computes it with the top ones
    po.want_logprobs = r->logprobs, po.n_logprobs = r->top_logprobs > 0 ? r->top_logprobs : 1;
    EmxPoolStats stats = {0};
    int rc = run_pool(sm, ids, n_ids, &po, &k, &stats, e);
    pool_result(&g, &k, &stats, n_ids, res);
    emx_critic_free(critic);
    free(k.pending);
    free(k.line);
    srv_gen_free(&g);
    return rc;
}
