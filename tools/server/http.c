// http.c — libmicrohttpd glue, the queue and the slots (http.h).
#define _GNU_SOURCE  // asprintf
#include "tools/server/http.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/errmsg.h"
#include "runtime/forward_group.h"
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
    int stopping;          // the server is stopping: a full stream buffer cancels, no more waiting
    atomic_int *stalled;   // the server's count of slots waiting in job_write
    EmxForwardGroup *group;  // the forward group the slot's state is in for this job (NULL: none)
    EmxState *st;            // that state (job_write leaves the group while it waits)
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
    SrvCache cache;        // the ids whose rows st holds (read by dispatch while the slot is idle)
    SrvJob *job;           // the request given to this slot (under the server's mu); NULL: idle
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
    EmxForwardGroup *group;  // the busy slots' decode steps, batched (NULL: one slot, or no batched step)
    unsigned long serial;
    // /metrics counters (under mu)
    unsigned long n_requests, n_errors, n_prompt_tokens, n_cached_tokens, n_completion_tokens;
    atomic_int n_stalled;  // slots waiting for a streaming client to read (job_write)
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

// A stream's bytes that the connection has not taken yet, at most (the bound is what makes a
// client's reading pace the generation).
#define SRV_STREAM_PENDING (64 * 1024)

// len more bytes would pass the bound (an empty buffer takes any event whole).
static int job_full(const SrvJob *j, size_t len) {
    return j->out_len > j->out_pos && j->out_len - j->out_pos + len > SRV_STREAM_PENDING;
}

// SrvWrite for a streaming job: the bytes wait for the connection's reader. Back-pressure: while
// the buffer is full, the slot waits too (its generation paused, the slot held) until the reader
// takes some, the client goes away (stream_free cancels) or the server stops (then a full buffer
// cancels: that client is not reading, and must not keep the server from exiting).
static int job_write(void *user, const char *data, size_t len) {
    SrvJob *j = user;
    pthread_mutex_lock(&j->mu);
    if (job_full(j, len) && !atomic_load(&j->cancel) && !j->stopping) {
        atomic_fetch_add(j->stalled, 1);  // /metrics shows it: entropix_slots_stalled
        // The other slots' decode steps must not wait for a client that does not read: out of
        // the group while waiting (we are between two forward calls of this slot's thread),
        // back in before the next one. A member's place is kept free for it, so the rejoin holds.
        if (j->group) emx_forward_group_leave(j->st);
        while (job_full(j, len) && !atomic_load(&j->cancel) && !j->stopping) pthread_cond_wait(&j->cv, &j->mu);
        if (j->group && emx_forward_group_join(j->group, j->st, NULL, 0) != 0) j->group = NULL;  // decodes alone
        atomic_fetch_sub(j->stalled, 1);
    }
    if (job_full(j, len)) atomic_store(&j->cancel, 1);  // cancelled, or the server stops
    int rc = atomic_load(&j->cancel) ? -1 : 0;
    if (!rc && j->out_pos) {  // what was read makes room: the buffer stays under 2 x the bound
        memmove(j->out, j->out + j->out_pos, j->out_len - j->out_pos);
        j->out_len -= j->out_pos;
        j->out_pos = 0;
    }
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
    int rc = srv_generate(s->sm, slot->st, &slot->cache, &j->req, j->ids, j->n_ids, &j->cancel, srv_response_emit, &resp,
                          &res, &e);
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
        s->n_cached_tokens += (unsigned long)res.n_cached;
        s->n_completion_tokens += (unsigned long)res.n_completion;
        s->decode_s += res.decode_s;
        if (res.decode_s > 0) s->last_tok_s = res.n_completion / res.decode_s;
    } else {
        s->n_errors++;
    }
    pthread_mutex_unlock(&s->mu);
    job_finish(j, status, body);
}

// Gives queued requests, first come first served, to idle slots (under s->mu): each to the idle
// slot whose cache shares the longest prefix with its prompt, so a chat that goes on finds the
// slot that ran its previous turn. A prefix shorter than half of what the slot holds and half
// of the prompt (two chats that share only the template's start or a short system message) does
// not count: that slot holds another conversation, which an empty or less useful slot spares.
// Ties: the slot holding the least (nothing lost), then the first.
static void dispatch(SrvServer *s) {
    while (s->head) {
        SrvJob *j = s->head;
        SrvSlot *best = NULL;
        int best_k = -1;
        for (int i = 0; i < s->n_slots; i++) {
            SrvSlot *sl = &s->slots[i];
            if (sl->job) continue;
            int k = srv_cache_match(&sl->cache, j->ids, j->n_ids);
            if (2 * k < sl->cache.n && 2 * k < j->n_ids) k = 0;
            if (k > best_k || (k == best_k && sl->cache.n < best->cache.n)) best = sl, best_k = k;
        }
        if (!best) return;  // every slot busy: the request waits
        s->head = j->next;
        if (!s->head) s->tail = NULL;
        j->next = NULL;
        s->n_queued--;
        s->n_busy++;
        best->job = j;
        pthread_cond_broadcast(&s->cv);
    }
}

static void *slot_main(void *arg) {
    SrvSlot *slot = arg;
    SrvServer *s = slot->s;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!slot->job && !s->stopping) pthread_cond_wait(&s->cv, &s->mu);
        SrvJob *j = slot->job;
        pthread_mutex_unlock(&s->mu);
        if (!j) return NULL;
        // decode in one batched step with the other busy slots (forward_group.h); refused only
        // when the state is already in a group, which a slot's is not after leaving below. The
        // agent pool runs replicas of its own, never this state: as a member it would hold up
        // every other slot's step until it ended.
        char gerr[160];
        const int grouped = s->group && !srv_request_is_pool(s->sm, &j->req) &&
                            emx_forward_group_join(s->group, slot->st, gerr, sizeof gerr) == 0;
        if (grouped) j->group = s->group, j->st = slot->st;
        run_job(slot, j);
        if (grouped) emx_forward_group_leave(slot->st);  // error and cancel included: run_job has returned
        pthread_mutex_lock(&s->mu);
        slot->job = NULL;  // before the release: stop_slots may reach the job through the slot
        s->n_busy--;
        dispatch(s);
        pthread_mutex_unlock(&s->mu);
        job_release(j);
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
    EmxForwardGroupStats gs = {0};
    if (s->group) emx_forward_group_stats(s->group, &gs);
    pthread_mutex_lock(&s->mu);
    int n = asprintf(&t,
                     "# HELP entropix_requests_total Generation requests received.\n# TYPE entropix_requests_total counter\n"
                     "entropix_requests_total %lu\n"
                     "# HELP entropix_request_errors_total Requests answered with an error.\n"
                     "# TYPE entropix_request_errors_total counter\nentropix_request_errors_total %lu\n"
                     "# HELP entropix_prompt_tokens_total Prompt tokens prefilled.\n"
                     "# TYPE entropix_prompt_tokens_total counter\nentropix_prompt_tokens_total %lu\n"
                     "# HELP entropix_prompt_tokens_cached_total Prompt tokens taken from a slot's cache.\n"
                     "# TYPE entropix_prompt_tokens_cached_total counter\nentropix_prompt_tokens_cached_total %lu\n"
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
                     "# HELP entropix_slots_stalled Busy slots waiting for a streaming client to read.\n"
                     "# TYPE entropix_slots_stalled gauge\nentropix_slots_stalled %d\n"
                     "# HELP entropix_slots_total Slots (--parallel).\n# TYPE entropix_slots_total gauge\n"
                     "entropix_slots_total %d\n"
                     "# HELP entropix_batch_steps_total Batched decode steps of the busy slots (0: not batched).\n"
                     "# TYPE entropix_batch_steps_total counter\nentropix_batch_steps_total %ld\n"
                     "# HELP entropix_batch_rows_total Slot rows in those steps (rows / steps: the mean batch).\n"
                     "# TYPE entropix_batch_rows_total counter\nentropix_batch_rows_total %ld\n",
                     s->n_requests, s->n_errors, s->n_prompt_tokens, s->n_cached_tokens, s->n_completion_tokens, s->decode_s,
                     s->last_tok_s,
                     s->n_queued, s->n_busy, atomic_load(&s->n_stalled), s->n_slots, gs.steps, gs.rows);
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
        pthread_cond_broadcast(&j->cv);  // room for a slot waiting in job_write
    }
    pthread_mutex_unlock(&j->mu);
    return n;
}

// libmicrohttpd is done with the response: finished, or the client went away (a failed
// write). Either way the generation has nobody to send to: cancel it.
static void stream_free(void *cls) {
    SrvJob *j = cls;
    pthread_mutex_lock(&j->mu);
    atomic_store(&j->cancel, 1);
    pthread_cond_broadcast(&j->cv);  // a slot waiting for room in job_write stops
    pthread_mutex_unlock(&j->mu);
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
    j->stalled = &s->n_stalled;
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
    dispatch(s);
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

// Each connection's kernel send buffer, fixed (no autotuning up to tcp_wmem's 4 MiB): with the
// 64 KiB stream buffer it bounds what a client that stops reading lets the server generate
// (a few hundred KiB, not megabytes) before its slot pauses. Token streams need no more.
#define SRV_SOCKET_SNDBUF (64 * 1024)

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    (void)cls, (void)socket_context;
    if (code != MHD_CONNECTION_NOTIFY_STARTED) return;
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    const int size = SRV_SOCKET_SNDBUF;
    if (info) (void)setsockopt(info->connect_fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);  // failing: autotuned
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
    for (int i = 0; i < s->n_slots; i++) {  // a running stream whose client stopped reading must not hold us
        SrvJob *j = s->slots[i].job;
        if (!j) continue;
        pthread_mutex_lock(&j->mu);
        j->stopping = 1;
        pthread_cond_broadcast(&j->cv);
        pthread_mutex_unlock(&j->mu);
    }
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < s->n_slots; i++)
        if (s->slots[i].thread) pthread_join(s->slots[i].thread, NULL);
}

static void server_free(SrvServer *s) {
    for (int i = 0; i < s->n_slots; i++) {
        if (s->slots[i].st) emx_state_free(s->slots[i].st);
        free(s->slots[i].cache.ids);
    }
    emx_forward_group_free(s->group);  // after the states: freeing one leaves its group
    free(s->slots);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

SrvServer *srv_http_start(SrvModel *sm, const SrvHttpOptions *o, char *err, size_t errlen) {
    SrvServer *s = calloc(1, sizeof *s);
    if (!s) return emx_seterr(err, errlen, "out of memory"), NULL;
    s->sm = sm;
    s->o = *o;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (!(s->slots = calloc((size_t)o->parallel, sizeof *s->slots))) return server_free(s), NULL;
    s->n_slots = o->parallel;
    for (int i = 0; i < s->n_slots; i++) {  // one state (KV cache) per slot, all of one context
        // a GPU's slots use slot 0's uploaded weights: one copy, and the batched step needs that
        EmxStateOptions so = {.n_threads = o->threads, .ctx = sm->ctx, .device = o->device,
                              .share_weights = i ? s->slots[0].st : NULL};
        s->slots[i] = (SrvSlot){.s = s, .index = i, .st = emx_state_new(&sm->model, &so, err, errlen)};
        if (!s->slots[i].st) return server_free(s), NULL;
        // the prompt and every chosen token (the last one is recorded but not fed): ctx + 1
        s->slots[i].cache = (SrvCache){.ids = malloc((size_t)(sm->ctx + 1) * sizeof(int)), .cap = sm->ctx + 1};
        if (!s->slots[i].cache.ids) return emx_seterr(err, errlen, "out of memory"), server_free(s), NULL;
    }
    if (s->n_slots > 1 && emx_forward_multi_batched(s->slots[0].st) &&
        !(s->group = emx_forward_group_new(s->n_slots, err, errlen)))
        return server_free(s), NULL;
    // A pass that takes more than half the cores runs alone (a new request's prefill waits for
    // the step): two such passes at once share cores, and their OpenMP teams wait on each other.
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (s->group && 2L * (o->threads > 0 ? o->threads : cores) > cores) emx_forward_group_set_exclusive(s->group, 1);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)o->port)};
    if (inet_pton(AF_INET, o->host, &addr.sin_addr) != 1) {
        emx_seterr(err, errlen, "--host '%s' is not an IPv4 address", o->host);
        return server_free(s), NULL;
    }
    for (int i = 0; i < s->n_slots; i++)
        if (pthread_create(&s->slots[i].thread, NULL, slot_main, &s->slots[i]) != 0) {
            s->slots[i].thread = 0;
            emx_seterr(err, errlen, "cannot start slot thread %d", i);
            stop_slots(s);
            return server_free(s), NULL;
        }
    // One thread per connection: a non-streaming request waits for its generation, a stream's
    // reader blocks for the next token, and neither holds up the others. The connection limit
    // bounds the threads; an idle connection is dropped after 120 s.
    const unsigned max_conn = (unsigned)(o->parallel + o->queue + 16);
    s->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ITC, 0, NULL,
                            NULL, on_request, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr, MHD_OPTION_NOTIFY_COMPLETED,
                            on_completed, s, MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                            MHD_OPTION_CONNECTION_LIMIT, max_conn, MHD_OPTION_CONNECTION_TIMEOUT,
                            (unsigned)120, MHD_OPTION_END);
    if (!s->d) {
        emx_seterr(err, errlen, "cannot listen on %s:%d (in use, or not an address of this machine)", o->host, o->port);
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
