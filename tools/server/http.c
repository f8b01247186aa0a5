// http.c — libmicrohttpd glue: connections, the checks every request passes, routing, the
// generation endpoints, the start and the drain (http.h).
#include "tools/server/http.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/errmsg.h"
#include "runtime/cli/run_pool.h"
#include "tools/server/access_log.h"
#include "tools/server/engine_internal.h"
#include "tools/server/http_internal.h"
#include "tools/server/http_reply.h"

// One request on a connection (libmicrohttpd's per-request context).
typedef struct {
    char *body;
    size_t len, cap;
    int too_big;
    SrvConnRec *rec;            // the connection's record (deadlines, reserve)
    const char *allow_origin;   // an origin --cors allows, echoed in the answer (NULL: none)
    SrvError refused;           // decided from the headers, answered once the body is read (status 0: none)
    double t0;                  // its headers' arrival (access_log.h)
    char method[16], path[128]; // for the log line (cut)
    int status;                 // the answer's, logged when the request ends (0: a generation's job logs it)
    // A plain generation's answer, logged here once libmicrohttpd has sent it or given up: its
    // tokens (n_prompt -1: none ran), and 499 instead of `status` when it was not sent whole
    int answered, n_prompt, n_completion;
} SrvConn;

static int is_generation(const char *url) {
    return !strcmp(url, "/v1/chat/completions") || !strcmp(url, "/v1/completions");
}

// The methods a known path answers: its 405's and OPTIONS' Allow header (RFC 9110). HEAD is GET
// without the body: libmicrohttpd sends a HEAD the status and headers of the response queued for
// it (Content-Length included) and leaves the body out.
static const char *path_methods(const char *url) { return is_generation(url) ? "POST, OPTIONS" : "GET, HEAD, OPTIONS"; }

// The API without its /v1 prefix, as llama.cpp's server answers it: the path routed (in buf for
// /models/{id}; a path too long for buf stays unrouted: no model has such an id).
static const char *api_path(const char *url, char *buf, size_t cap) {
    if (!strncmp(url, "/models/", 8) && (size_t)snprintf(buf, cap, "/v1%s", url) < cap) return buf;
    return !strcmp(url, "/chat/completions") ? "/v1/chat/completions"
           : !strcmp(url, "/completions")    ? "/v1/completions"
           : !strcmp(url, "/models")         ? "/v1/models"
                                             : url;
}

static const char *header(struct MHD_Connection *c, const char *name) {
    return MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
}

// ---------------------------------------------------------------------------------------------
// The generation endpoints.

// The agent pool's replicas for request r, in bytes, as ./run sizes them (0: not a pool).
static uint64_t pool_bytes(const SrvModel *sm, const SrvRequest *r) {
    if (!srv_request_is_pool(sm, r)) return 0;
    EmxCliArgs a;
    srv_request_args(sm, r, &a);
    a.critic_model = NULL;  // the served model is the critic
    return emx_run_pool_memory(&a, &sm->model, sm->ctx, r->agents.workers, NULL);
}

// The request's checks that need the model, then the queue. 0, or -1 with e.
static int admit(SrvServer *s, SrvJob *j, const char *body, size_t len, int kind, SrvError *e) {
    if (srv_request_parse(body, len, kind, &j->req, e) != 0) return -1;
    if (srv_request_check_model(s->sm, &j->req, e) != 0) return -1;
    if (srv_prompt_ids(s->sm, &j->req, &j->ids, &j->n_ids, e) != 0) return -1;
    const int room = s->sm->ctx - j->n_ids + 1;
    if (j->req.max_tokens > room)  // checked here so a stream gets a 400, not an error event
        return srv_fail(e, 400, "max_tokens", "context_length_exceeded",
                        "max_tokens is %d; the context of %d has room for %d after the prompt's %d tokens",
                        j->req.max_tokens, s->sm->ctx, room, j->n_ids);
    j->mem = pool_bytes(s->sm, &j->req);
    // the branching decoder: its refusals now (a 400, not a stream's error event), its tails' memory
    const int on_cpu = !strcmp(emx_state_device(s->slots[0].st), "cpu");
    if (j->req.sampler == EMX_SAMPLER_BRANCH && srv_branch_check(s->sm, &j->req, j->n_ids, on_cpu, &j->mem, e) != 0)
        return -1;
    return srv_enqueue(s, j, e);
}

static enum MHD_Result generate(SrvServer *s, struct MHD_Connection *c, SrvConn *k, int kind) {
    SrvError e;
    SrvJob *j = srv_job_new(s);
    if (!j) return MHD_NO;
    const union MHD_ConnectionInfo *fd = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    j->fd = fd ? fd->connect_fd : -1;
    j->t0 = k->t0;
    snprintf(j->path, sizeof j->path, "%s", k->path);  // logged as requested, not as routed
    if (admit(s, j, k->body ? k->body : "", k->len, kind, &e) != 0) {
        srv_job_release(j);
        k->status = e.status;
        return srv_send_error(s, c, &e, 1, NULL, k->allow_origin);
    }
    if (j->req.stream) {
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, srv_stream_read, j,
                                                                   srv_stream_free);
        if (!r) return srv_stream_free(j), MHD_NO;
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        if (k->allow_origin) {
            MHD_add_response_header(r, "Access-Control-Allow-Origin", k->allow_origin);
            MHD_add_response_header(r, "Vary", "Origin");
        }
        enum MHD_Result rc = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        return rc;
    }
    const int gone = srv_job_wait(j) != 0;  // a client that left is noticed while it waits
    pthread_mutex_lock(&j->mu);
    char *out = j->body;
    j->body = NULL;
    const int status = j->status;
    // The log line waits for the answer's send (on_completed): the client may leave during it. No
    // body (out of memory): nothing is sent, the job logs its status.
    if (!gone && out) {
        k->answered = 1, k->status = j->log_status;
        k->n_prompt = j->log_prompt, k->n_completion = j->log_completion;
        j->log_status = 0;
    }
    pthread_mutex_unlock(&j->mu);
    srv_job_release(j);
    if (gone) return free(out), MHD_NO;  // nobody to answer: the connection is closed; the job logs the 499
    return srv_send_body(c, status, out, "application/json", k->allow_origin);
}

// ---------------------------------------------------------------------------------------------
// Routing.

// What the headers alone decide, for every request, in this order: the origin, the method and
// path, the key, a reserve connection's limits, the media type and the size of a generation's
// body. 0 to go on, or -1 with e (answered once any body has been read: a response sent before
// it and the close that follows could reset the connection under the client's feet).
static int check_headers(SrvServer *s, struct MHD_Connection *c, SrvConn *k, const char *url, const char *method,
                         SrvError *e) {
    if (srv_guard_origin(&s->guard, header(c, "Origin"), header(c, "Host"), &k->allow_origin, e) != 0) return -1;
    const int get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    const int options = !strcmp(method, "OPTIONS");
    const int open = !strcmp(url, "/health") || !strcmp(url, "/");  // no key: the page asks for it
    const int known = is_generation(url) || open || !strcmp(url, "/v1/models") || !strncmp(url, "/v1/models/", 11) ||
                      !strcmp(url, "/metrics");
    char qm[40], qu[128];
    if (!strcmp(url, "/v1/embeddings"))
        return srv_fail(e, 404, NULL, "not_found", "no endpoint /v1/embeddings: this server generates text and does not "
                        "compute embeddings");
    if (!known) return srv_fail(e, 404, NULL, "not_found", "no endpoint %s", srv_quote(url, strlen(url), 80, qu, sizeof qu));
    if (!options && (is_generation(url) ? !post : !get))
        return srv_fail(e, 405, NULL, "method_not_allowed", "%s is not allowed on %s",
                        srv_quote(method, strlen(method), 16, qm, sizeof qm), url);
    if (options) return 0;
    if (!open && !srv_guard_auth(&s->guard, header(c, "Authorization")))
        return srv_fail(e, 401, NULL, "invalid_api_key", "missing or wrong API key (Authorization: Bearer KEY)");
    if (srv_conns_is_reserve(k->rec) && strcmp(url, "/health") && strcmp(url, "/metrics"))
        return srv_fail(e, 503, NULL, "too_many_connections",
                        "the server is at its connection limit (%d, --max-conn): this connection may ask /health and "
                        "/metrics only", s->o.max_conn);
    if (!is_generation(url)) return 0;
    if (srv_guard_json_type(header(c, "Content-Type"), e) != 0) return -1;
    return 0;
}

static enum MHD_Result route(SrvServer *s, struct MHD_Connection *c, const char *url, const char *method, SrvConn *k) {
    const int generation = is_generation(url) && !strcmp(method, "POST");
    if (generation) {
        pthread_mutex_lock(&s->mu);
        s->n_requests++;
        pthread_mutex_unlock(&s->mu);
    }
    k->status = 200;  // each answer below but a generation's sets its own
    if (k->refused.status)
        return k->status = k->refused.status, srv_send_error(s, c, &k->refused, generation,
                                                             k->refused.status == 405 ? path_methods(url) : NULL,
                                                             k->allow_origin);
    if (!strcmp(method, "OPTIONS")) return k->status = 204, srv_send_preflight(c, path_methods(url), k->allow_origin);
    if (k->too_big) {
        SrvError e;
        srv_fail(&e, 413, NULL, "request_too_large", "the request body is over %zu bytes (--max-body)", s->o.max_body);
        return k->status = 413, srv_send_error(s, c, &e, generation, NULL, k->allow_origin);
    }
    if (!strcmp(url, "/health")) return srv_send_body(c, 200, strdup("{\"status\":\"ok\"}"), "application/json", k->allow_origin);
    if (!strcmp(url, "/")) return srv_send_page(c);
    if (!strcmp(url, "/v1/models")) return srv_send_models(s, c, k->allow_origin);
    if (!strncmp(url, "/v1/models/", 11)) return srv_send_model(s, c, url + 11, k->allow_origin, &k->status);
    if (!strcmp(url, "/metrics")) return srv_send_metrics(s, c, k->allow_origin);
    k->status = 0;  // the job logs a generation that was queued; generate() sets a refusal's status
    return generate(s, c, k, !strcmp(url, "/v1/chat/completions") ? SRV_CHAT : SRV_COMPLETION);
}

// The first call for a request, its headers read (libmicrohttpd makes none for a request it
// refused itself: docs/server.md lists those): its record and what the headers decide. url: the
// path routed (api_path), logged as the client sent it.
static enum MHD_Result first_call(SrvServer *s, struct MHD_Connection *c, const char *url, const char *sent,
                                  const char *method, SrvConn *k) {
    const union MHD_ConnectionInfo *ctx = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    k->rec = ctx ? ctx->socket_context : NULL;
    k->t0 = emx_now_s();
    snprintf(k->method, sizeof k->method, "%s", method);
    snprintf(k->path, sizeof k->path, "%s", sent);
    srv_conns_phase(s->conns, k->rec, SRV_CONN_BODY);
    check_headers(s, c, k, url, method, &k->refused);
    // A body announced over --max-body: answered now (the client must stop sending), not read.
    const char *cl = header(c, "Content-Length");
    if (cl && strtoull(cl, NULL, 10) > s->o.max_body) {
        k->too_big = 1;
        srv_conns_phase(s->conns, k->rec, SRV_CONN_SERVING);
        return route(s, c, url, method, k);
    }
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    SrvServer *s = cls;
    SrvConn *k = *con_cls;
    char routed[1024];
    const char *path = api_path(url, routed, sizeof routed);
    if (!k) {
        if (!(k = calloc(1, sizeof *k))) return MHD_NO;
        *con_cls = k;
        return first_call(s, c, path, url, method, k);
    }
    if (*upload_size) {  // a body chunk: kept up to --max-body, the rest read and dropped
        const size_t n = *upload_size;
        *upload_size = 0;
        if (k->too_big || k->refused.status || k->len + n > s->o.max_body) {
            k->too_big |= !k->refused.status;
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
    srv_conns_phase(s->conns, k->rec, SRV_CONN_SERVING);  // the request is whole: no deadline while it is answered
    return route(s, c, path, method, k);
}

// The request ends: t says whether its answer went out whole (COMPLETED_OK) or the connection
// failed first (the client closed or reset it, a timeout, the server's stop).
static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode t) {
    (void)c;
    SrvServer *s = cls;
    SrvConn *k = *con_cls;
    if (k) {
        srv_conns_phase(s->conns, k->rec, SRV_CONN_IDLE);  // a kept-alive connection: its next request's deadline
        // nginx's 499, as a stream whose client left before its last event: a plain answer not sent whole
        const int left = k->answered && t != MHD_REQUEST_TERMINATED_COMPLETED_OK;
        if (k->status)
            srv_access_log(k->method, k->path, left ? 499 : k->status, k->answered ? k->n_prompt : -1, k->n_completion,
                           k->t0);
        free(k->body), free(k);
    }
    *con_cls = NULL;
}

// Each connection's kernel send buffer, fixed (no autotuning up to tcp_wmem's 4 MiB): with the
// 64 KiB stream buffer it bounds what a client that stops reading lets the server generate
// (a few hundred KiB, not megabytes) before its slot pauses. Token streams need no more.
#define SRV_SOCKET_SNDBUF (64 * 1024)

// A connection opens (its record, with its headers' deadline) or closes (before libmicrohttpd
// closes its descriptor: conns.h).
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    SrvServer *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        srv_conns_close(s->conns, *socket_context);
        *socket_context = NULL;
        return;
    }
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!info) return;
    const int size = SRV_SOCKET_SNDBUF;
    (void)setsockopt(info->connect_fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);  // failing: autotuned
    *socket_context = srv_conns_open(s->conns, info->connect_fd);
}

// ---------------------------------------------------------------------------------------------
// Start, drain, stop.

static void server_free(SrvServer *s) {
    srv_slots_free(s);
    srv_conns_free(s->conns);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

SrvServer *srv_http_start(SrvModel *sm, const SrvHttpOptions *o, char *err, size_t errlen) {
    SrvServer *s = calloc(1, sizeof *s);
    if (!s) return emx_seterr(err, errlen, "out of memory"), NULL;
    s->sm = sm;
    s->o = *o;
    s->listen_fd = -1;
    s->guard.api_key = o->api_key;
    for (int i = 0; i < o->n_cors && i < SRV_MAX_CORS; i++) s->guard.cors[s->guard.n_cors++] = o->cors[i];
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)o->port)};
    if (inet_pton(AF_INET, o->host, &addr.sin_addr) != 1) {
        emx_seterr(err, errlen, "--host '%s' is not an IPv4 address", o->host);
        return server_free(s), NULL;
    }
    if (!(s->conns = srv_conns_new(o->max_conn, o->header_timeout, o->body_timeout))) {
        emx_seterr(err, errlen, "out of memory");
        return server_free(s), NULL;
    }
    if (srv_slots_start(s, err, errlen) != 0) {
        srv_slots_join(s);
        return server_free(s), NULL;
    }
    // One thread per connection: a non-streaming request waits for its generation, a stream's
    // reader blocks for the next token, and neither holds up the others. The limits bound the
    // threads: --max-conn plus a reserve for /health and /metrics (conns.h), and per address.
    s->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ITC, 0, NULL,
                            NULL, on_request, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr, MHD_OPTION_NOTIFY_COMPLETED,
                            on_completed, s, MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)(o->max_conn + SRV_CONN_RESERVE),
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)o->max_conn_per_addr,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)o->idle_timeout, MHD_OPTION_END);
    if (!s->d) {
        emx_seterr(err, errlen, "cannot listen on %s:%d (in use, or not an address of this machine)", o->host, o->port);
        srv_slots_drain(s);
        srv_slots_join(s);
        return server_free(s), NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : o->port;
    return s;
}

int srv_http_port(const SrvServer *s) { return s->port; }

void srv_http_drain(SrvServer *s) {
    s->listen_fd = MHD_quiesce_daemon(s->d);  // no new connections from here on
    srv_slots_drain(s);
}

int srv_http_settled(SrvServer *s) { return srv_slots_settled(s); }

void srv_http_cut(SrvServer *s) { srv_slots_cut(s); }

void srv_http_stop(SrvServer *s) {
    srv_slots_join(s);  // after a cut, each generation stops within a token or a round
    MHD_stop_daemon(s->d);
    if (s->listen_fd != MHD_INVALID_SOCKET && s->listen_fd >= 0) close(s->listen_fd);
    server_free(s);
}
