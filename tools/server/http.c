// http.c — libmicrohttpd glue, the queue and the slots (http.h).
#define _GNU_SOURCE  // asprintf
#include "tools/server/http.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/server/page.h"
#include "tools/server/response.h"

// One request's generation, shared by its connection and the slot that runs it (refs: 2 while
// both hold it; the last release frees it).
typedef struct SrvJob {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    SrvRequest req;
    int *ids, n_ids;
    atomic_int cancel;     // the client went away, or the server is stopping
    int done;
    char *out;             // stream: SSE bytes [out_len], the connection has read out_pos
    size_t out_len, out_cap, out_pos;
    int status;            // non-stream: the answer
    char *body;
    struct SrvJob *next;
} SrvJob;

typedef struct {
    SrvServer *s;
    int index;
    EmxState *st;
    pthread_t thread;
} SrvSlot;

struct SrvServer {
    SrvModel *sm;
    SrvHttpOptions o;
    struct MHD_Daemon *d;
    int port;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    SrvJob *head, *tail;
    int n_queued, n_busy, stopping;
    SrvSlot *slots;
    int n_slots;
    unsigned long serial;
    // /metrics counters (under mu)
    unsigned long n_requests, n_errors, n_prompt_tokens, n_completion_tokens;
    double decode_s, last_tok_s;
};

static void job_release(SrvJob *j) {
    pthread_mutex_lock(&j->mu);
    const int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left) return;
    srv_request_free(&j->req);
    free(j->ids);
    free(j->out);
    free(j->body);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

static void job_finish(SrvJob *j, int status, char *body) {
    pthread_mutex_lock(&j->mu);
    j->status = status;
    j->body = body;
    j->done = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

// SrvWrite for a streaming job: the bytes wait for the connection's reader.
static int job_write(void *user, const char *data, size_t len) {
    SrvJob *j = user;
    pthread_mutex_lock(&j->mu);
    int rc = atomic_load(&j->cancel) ? -1 : 0;
    if (!rc && j->out_len + len > j->out_cap) {
        size_t cap = (j->out_len + len) * 2;
        char *o = realloc(j->out, cap);
        if (o) j->out = o, j->out_cap = cap;
        else rc = -1;
    }
    if (!rc) {
        memcpy(j->out + j->out_len, data, len);
        j->out_len += len;
        pthread_cond_broadcast(&j->cv);
    }
    pthread_mutex_unlock(&j->mu);
    return rc;
}

static void run_job(SrvSlot *slot, SrvJob *j) {
    SrvServer *s = slot->s;
    SrvResponse resp;
    pthread_mutex_lock(&s->mu);
    const unsigned long serial = ++s->serial;
    pthread_mutex_unlock(&s->mu);
    srv_response_init(&resp, &j->req, s->sm->id, serial);
    resp.write = job_write, resp.write_user = j;
    SrvGenResult res;
    SrvError e;
    int rc = srv_generate(s->sm, slot->st, &j->req, j->ids, j->n_ids, &j->cancel, srv_response_emit, &resp, &res, &e);
    char *body = NULL;
    int status = 200;
    if (j->req.stream) {
        if (rc == 0) srv_response_stream_end(&resp, &res);
        else srv_response_stream_error(&resp, &e);
    } else {
        body = rc == 0 ? srv_response_body(&resp, &res) : srv_error_json(&e);
        status = rc == 0 ? (body ? 200 : 500) : e.status;
    }
    srv_response_free(&resp);
    pthread_mutex_lock(&s->mu);
    if (rc == 0) {
        s->n_prompt_tokens += (unsigned long)res.n_prompt;
        s->n_completion_tokens += (unsigned long)res.n_completion;
        s->decode_s += res.decode_s;
        if (res.decode_s > 0) s->last_tok_s = res.n_completion / res.decode_s;
    } else {
        s->n_errors++;
    }
    pthread_mutex_unlock(&s->mu);
    job_finish(j, status, body);
}

static void *slot_main(void *arg) {
    SrvSlot *slot = arg;
    SrvServer *s = slot->s;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->head && !s->stopping) pthread_cond_wait(&s->cv, &s->mu);
        SrvJob *j = s->head;
        if (!j) {
            pthread_mutex_unlock(&s->mu);
            return NULL;
        }
        s->head = j->next;
        if (!s->head) s->tail = NULL;
        s->n_queued--;
        s->n_busy++;
        pthread_mutex_unlock(&s->mu);
        run_job(slot, j);
        job_release(j);
        pthread_mutex_lock(&s->mu);
        s->n_busy--;
        pthread_mutex_unlock(&s->mu);
    }
}

// ---------------------------------------------------------------------------------------------
// Responses.

static enum MHD_Result send_body(struct MHD_Connection *c, int status, char *body, const char *type) {
    if (!body) return MHD_NO;  // out of memory: drop the connection
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) return free(body), MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result send_error(SrvServer *s, struct MHD_Connection *c, const SrvError *e) {
    pthread_mutex_lock(&s->mu);
    s->n_errors++;
    pthread_mutex_unlock(&s->mu);
    return send_body(c, e->status, srv_error_json(e), "application/json");
}

static enum MHD_Result send_json(struct MHD_Connection *c, cJSON *o) {
    char *j = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return send_body(c, 200, j, "application/json");
}

static enum MHD_Result send_models(SrvServer *s, struct MHD_Connection *c) {
    cJSON *o = cJSON_CreateObject(), *m = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "data"), m);
    cJSON_AddStringToObject(m, "id", s->sm->id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", 0);
    cJSON_AddStringToObject(m, "owned_by", "entropix.c");
    // Extension: false when /v1/chat/completions would refuse (no template; the page then uses /v1/completions).
    cJSON_AddBoolToObject(m, "chat_template", s->sm->model.cfg.chat_template != EMX_CHAT_NONE);
    return send_json(c, o);
}

// The chat page (page.h): static bytes, never freed. The policy allows only the page's own
// inline code and calls to this server: a model's text shown in it can load and send nothing.
static enum MHD_Result send_page(struct MHD_Connection *c) {
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(srv_page_html), (void *)srv_page_html, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "text/html; charset=utf-8");
    MHD_add_response_header(r, "Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; "
                            "style-src 'unsafe-inline'; connect-src 'self'; base-uri 'none'; form-action 'none'");
    enum MHD_Result rc = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result send_metrics(SrvServer *s, struct MHD_Connection *c) {
    char *t = NULL;
    pthread_mutex_lock(&s->mu);
    int n = asprintf(&t,
                     "# HELP entropix_requests_total Generation requests received.\n# TYPE entropix_requests_total counter\n"
                     "entropix_requests_total %lu\n"
                     "# HELP entropix_request_errors_total Requests answered with an error.\n"
                     "# TYPE entropix_request_errors_total counter\nentropix_request_errors_total %lu\n"
                     "# HELP entropix_prompt_tokens_total Prompt tokens prefilled.\n"
                     "# TYPE entropix_prompt_tokens_total counter\nentropix_prompt_tokens_total %lu\n"
                     "# HELP entropix_completion_tokens_total Tokens generated.\n"
                     "# TYPE entropix_completion_tokens_total counter\nentropix_completion_tokens_total %lu\n"
                     "# HELP entropix_decode_seconds_total Time spent decoding.\n"
                     "# TYPE entropix_decode_seconds_total counter\nentropix_decode_seconds_total %.6f\n"
                     "# HELP entropix_tokens_per_second Decode speed of the last finished generation.\n"
                     "# TYPE entropix_tokens_per_second gauge\nentropix_tokens_per_second %.3f\n"
                     "# HELP entropix_queue_length Requests waiting for a slot.\n"
                     "# TYPE entropix_queue_length gauge\nentropix_queue_length %d\n"
                     "# HELP entropix_slots_busy Slots generating.\n# TYPE entropix_slots_busy gauge\n"
                     "entropix_slots_busy %d\n"
                     "# HELP entropix_slots_total Slots (--parallel).\n# TYPE entropix_slots_total gauge\n"
                     "entropix_slots_total %d\n",
                     s->n_requests, s->n_errors, s->n_prompt_tokens, s->n_completion_tokens, s->decode_s, s->last_tok_s,
                     s->n_queued, s->n_busy, s->n_slots);
    pthread_mutex_unlock(&s->mu);
    return send_body(c, 200, n < 0 ? NULL : t, "text/plain; version=0.0.4");
}

// ---------------------------------------------------------------------------------------------
// Streaming: the connection's thread reads the job's bytes as the slot writes them.

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    SrvJob *j = cls;
    pthread_mutex_lock(&j->mu);
    while (j->out_pos == j->out_len && !j->done) pthread_cond_wait(&j->cv, &j->mu);
    ssize_t n = MHD_CONTENT_READER_END_OF_STREAM;
    if (j->out_pos < j->out_len) {
        size_t k = j->out_len - j->out_pos < max ? j->out_len - j->out_pos : max;
        memcpy(buf, j->out + j->out_pos, k);
        j->out_pos += k;
        n = (ssize_t)k;
    }
    pthread_mutex_unlock(&j->mu);
    return n;
}

// libmicrohttpd is done with the response: finished, or the client went away (a failed
// write). Either way the generation has nobody to send to: cancel it.
static void stream_free(void *cls) {
    SrvJob *j = cls;
    atomic_store(&j->cancel, 1);
    job_release(j);
}

// ---------------------------------------------------------------------------------------------
// The generation endpoints.

static enum MHD_Result generate(SrvServer *s, struct MHD_Connection *c, int kind, const char *body, size_t len) {
    SrvError e;
    SrvJob *j = calloc(1, sizeof *j);
    if (!j) return MHD_NO;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->refs = 1;
    pthread_mutex_lock(&s->mu);
    s->n_requests++;
    pthread_mutex_unlock(&s->mu);
    enum MHD_Result rc;
    if (srv_request_parse(body, len, kind, &j->req, &e) != 0) goto fail;
    if (j->req.model && strcmp(j->req.model, s->sm->id) != 0) {
        srv_fail(&e, 404, "model", "model_not_found", "the model '%.80s' does not exist (this server has '%s')",
                 j->req.model, s->sm->id);
        goto fail;
    }
    if (srv_prompt_ids(s->sm, &j->req, &j->ids, &j->n_ids, &e) != 0) goto fail;
    const int room = s->sm->ctx - j->n_ids + 1;
    if (j->req.max_tokens > room) {  // checked here so a stream gets a 400, not an error event
        srv_fail(&e, 400, "max_tokens", "context_length_exceeded",
                 "max_tokens is %d; the context of %d has room for %d after the prompt's %d tokens", j->req.max_tokens,
                 s->sm->ctx, room, j->n_ids);
        goto fail;
    }
    pthread_mutex_lock(&s->mu);
    // A free slot takes the request at once; --queue counts only those that must wait.
    if (s->stopping || s->n_queued >= s->o.queue + (s->n_slots - s->n_busy)) {
        pthread_mutex_unlock(&s->mu);
        srv_fail(&e, 503, NULL, s->stopping ? "shutting_down" : "queue_full",
                 s->stopping ? "the server is shutting down" : "the queue is full (%d requests waiting); try again later",
                 s->o.queue);
        goto fail;
    }
    j->refs = 2;  // the slot's reference
    if (s->tail) s->tail->next = j;
    else s->head = j;
    s->tail = j;
    s->n_queued++;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (j->req.stream) {
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, j, stream_free);
        if (!r) return stream_free(j), MHD_NO;
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        rc = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        return rc;
    }
    pthread_mutex_lock(&j->mu);
    while (!j->done) pthread_cond_wait(&j->cv, &j->mu);
    char *out = j->body;
    j->body = NULL;
    const int status = j->status;
    pthread_mutex_unlock(&j->mu);
    job_release(j);
    return send_body(c, status, out, "application/json");
fail:
    job_release(j);
    return send_error(s, c, &e);
}

// ---------------------------------------------------------------------------------------------
// Connections.

typedef struct {
    char *body;
    size_t len, cap;
    int too_big;
} SrvConn;

// Authorization: Bearer KEY (compared in constant time: no timing hint about the key).
static int authorized(const SrvServer *s, struct MHD_Connection *c) {
    if (!s->o.api_key) return 1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncmp(h, "Bearer ", 7) != 0) return 0;
    h += 7;
    const size_t n = strlen(s->o.api_key);
    if (strlen(h) != n) return 0;
    unsigned char diff = 0;
    for (size_t i = 0; i < n; i++) diff |= (unsigned char)(h[i] ^ s->o.api_key[i]);
    return diff == 0;
}

static enum MHD_Result route(SrvServer *s, struct MHD_Connection *c, const char *url, const char *method, SrvConn *k) {
    SrvError e;
    const int get = strcmp(method, "GET") == 0, post = strcmp(method, "POST") == 0;
    if (strcmp(url, "/health") == 0 && get) return send_body(c, 200, strdup("{\"status\":\"ok\"}"), "application/json");
    if (strcmp(url, "/") == 0 && get) return send_page(c);  // no key: the page asks for it, its API calls carry it
    if (!authorized(s, c)) {
        srv_fail(&e, 401, NULL, "invalid_api_key", "missing or wrong API key (Authorization: Bearer KEY)");
        return send_error(s, c, &e);
    }
    const int chat = strcmp(url, "/v1/chat/completions") == 0, cmpl = strcmp(url, "/v1/completions") == 0;
    if (get && strcmp(url, "/v1/models") == 0) return send_models(s, c);
    if (get && strcmp(url, "/metrics") == 0) return send_metrics(s, c);
    if ((chat || cmpl) && post) {
        if (k->too_big) {
            srv_fail(&e, 413, NULL, "request_too_large", "the request body is over %zu bytes (--max-body)", s->o.max_body);
            return send_error(s, c, &e);
        }
        return generate(s, c, chat ? SRV_CHAT : SRV_COMPLETION, k->body ? k->body : "", k->len);
    }
    const int known = chat || cmpl || !strcmp(url, "/v1/models") || !strcmp(url, "/metrics") || !strcmp(url, "/health") || !strcmp(url, "/");
    if (known) srv_fail(&e, 405, NULL, "method_not_allowed", "%.8s is not allowed on %.80s", method, url);
    else srv_fail(&e, 404, NULL, "not_found", "no endpoint %.80s", url);
    return send_error(s, c, &e);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    SrvServer *s = cls;
    SrvConn *k = *con_cls;
    if (!k) {
        if (!(k = calloc(1, sizeof *k))) return MHD_NO;
        *con_cls = k;
        return MHD_YES;
    }
    if (*upload_size) {  // a body chunk: kept up to --max-body, the rest read and dropped
        const size_t n = *upload_size;
        *upload_size = 0;
        if (k->too_big || k->len + n > s->o.max_body) {
            k->too_big = 1;
            return MHD_YES;
        }
        if (k->len + n + 1 > k->cap) {
            size_t cap = (k->len + n + 1) * 2;
            if (cap > s->o.max_body + 1) cap = s->o.max_body + 1;
            char *b = realloc(k->body, cap);
            if (!b) return MHD_NO;
            k->body = b, k->cap = cap;
        }
        memcpy(k->body + k->len, upload, n);
        k->len += n;
        k->body[k->len] = 0;
        return MHD_YES;
    }
    return route(s, c, url, method, k);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode t) {
    (void)cls, (void)c, (void)t;
    SrvConn *k = *con_cls;
    if (k) free(k->body), free(k);
    *con_cls = NULL;
}

static void stop_slots(SrvServer *s) {
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    // Queued requests get 503 (a stream: an error event): they never started.
    SrvError e;
    srv_fail(&e, 503, NULL, "shutting_down", "the server is shutting down");
    while (s->head) {
        SrvJob *j = s->head;
        s->head = j->next;
        s->n_queued--;
        if (j->req.stream) {
            SrvResponse resp;
            srv_response_init(&resp, &j->req, s->sm->id, 0);
            resp.write = job_write, resp.write_user = j;
            srv_response_stream_error(&resp, &e);
            srv_response_free(&resp);
        }
        job_finish(j, 503, j->req.stream ? NULL : srv_error_json(&e));
        job_release(j);
    }
    s->tail = NULL;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < s->n_slots; i++)
        if (s->slots[i].thread) pthread_join(s->slots[i].thread, NULL);
}

static void server_free(SrvServer *s) {
    for (int i = 0; i < s->n_slots; i++)
        if (s->slots[i].st) emx_state_free(s->slots[i].st);
    free(s->slots);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

SrvServer *srv_http_start(SrvModel *sm, const SrvHttpOptions *o, char *err, size_t errlen) {
    SrvServer *s = calloc(1, sizeof *s);
    if (!s) return snprintf(err, errlen, "out of memory"), NULL;
    s->sm = sm;
    s->o = *o;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (!(s->slots = calloc((size_t)o->parallel, sizeof *s->slots))) return server_free(s), NULL;
    s->n_slots = o->parallel;
    for (int i = 0; i < s->n_slots; i++) {  // one state (KV cache) per slot, all of one context
        EmxStateOptions so = {.n_threads = o->threads, .ctx = sm->ctx, .device = o->device};
        s->slots[i] = (SrvSlot){.s = s, .index = i, .st = emx_state_new(&sm->model, &so, err, errlen)};
        if (!s->slots[i].st) return server_free(s), NULL;
    }
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)o->port)};
    if (inet_pton(AF_INET, o->host, &addr.sin_addr) != 1) {
        snprintf(err, errlen, "--host '%s' is not an IPv4 address", o->host);
        return server_free(s), NULL;
    }
    for (int i = 0; i < s->n_slots; i++)
        if (pthread_create(&s->slots[i].thread, NULL, slot_main, &s->slots[i]) != 0) {
            s->slots[i].thread = 0;
            snprintf(err, errlen, "cannot start slot thread %d", i);
            stop_slots(s);
            return server_free(s), NULL;
        }
    // One thread per connection: a non-streaming request waits for its generation, a stream's
    // reader blocks for the next token, and neither holds up the others. The connection limit
    // bounds the threads; an idle connection is dropped after 120 s.
    const unsigned max_conn = (unsigned)(o->parallel + o->queue + 16);
    s->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ITC, 0, NULL,
                            NULL, on_request, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr, MHD_OPTION_NOTIFY_COMPLETED,
                            on_completed, s, MHD_OPTION_CONNECTION_LIMIT, max_conn, MHD_OPTION_CONNECTION_TIMEOUT,
                            (unsigned)120, MHD_OPTION_END);
    if (!s->d) {
        snprintf(err, errlen, "cannot listen on %s:%d (in use, or not an address of this machine)", o->host, o->port);
        stop_slots(s);
        return server_free(s), NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : o->port;
    return s;
}

int srv_http_port(const SrvServer *s) { return s->port; }

void srv_http_stop(SrvServer *s) {
    const MHD_socket fd = MHD_quiesce_daemon(s->d);  // no new connections from here on
    stop_slots(s);  // running generations finish; their connections then end
    MHD_stop_daemon(s->d);
    if (fd != MHD_INVALID_SOCKET) close(fd);
    server_free(s);
}
