// http_reply.c — the server's answers other than a generation's: JSON bodies and errors, the
// model list, the page, /metrics, CORS headers.
#define _GNU_SOURCE  // asprintf
#include "tools/server/http_reply.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/server/guard.h"
#include "tools/server/page.h"
#include "tools/server/srv_error.h"

// The CORS answer for an origin --cors allows (http_reply.h).
static void add_cors(struct MHD_Response *r, const char *allow_origin) {
    if (!allow_origin) return;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", allow_origin);
    MHD_add_response_header(r, "Vary", "Origin");
}

// body with its type, and an Allow header when `allow` is given (a 405's).
static enum MHD_Result send_reply(struct MHD_Connection *c, int status, char *body, const char *type, const char *allow,
                                  const char *allow_origin) {
    if (!body) return MHD_NO;  // out of memory: drop the connection
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) return free(body), MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    if (allow) MHD_add_response_header(r, "Allow", allow);
    char retry[16];  // every 503 and 429 says when to try again (srv_error.h)
    snprintf(retry, sizeof retry, "%d", SRV_RETRY_AFTER_S);
    if (status == 503 || status == 429) MHD_add_response_header(r, "Retry-After", retry);
    add_cors(r, allow_origin);
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return rc;
}

enum MHD_Result srv_send_body(struct MHD_Connection *c, int status, char *body, const char *type, const char *allow_origin) {
    return send_reply(c, status, body, type, NULL, allow_origin);
}

enum MHD_Result srv_send_error(SrvServer *s, struct MHD_Connection *c, const SrvError *e, int generation,
                               const char *allow, const char *allow_origin) {
    if (generation) srv_count_error(s);
    else {
        pthread_mutex_lock(&s->mu);
        s->n_http_errors++;
        pthread_mutex_unlock(&s->mu);
    }
    return send_reply(c, e->status, srv_error_json(e), "application/json", allow, allow_origin);
}

// One entry of the model list: the served model, or its alias that runs entropix (engine.h).
static cJSON *model_object(const SrvServer *s, int alias) {
    cJSON *m = cJSON_CreateObject();
    char id[512];
    snprintf(id, sizeof id, "%s%s", s->sm->id, alias ? SRV_ENTROPIX_ALIAS : "");
    cJSON_AddStringToObject(m, "id", id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)s->sm->created);
    cJSON_AddStringToObject(m, "owned_by", "entropix.c");
    // Extensions: the sampler a request naming this id runs when it names none (the server's
    // default for the model itself); false when /v1/chat/completions would refuse (no template:
    // the page then uses /v1/completions).
    cJSON_AddStringToObject(m, "sampler", emx_sampler_kind_name(alias ? EMX_SAMPLER_ENTROPIX : s->sm->defaults.sampler));
    cJSON_AddBoolToObject(m, "chat_template", s->sm->model.cfg.chat_template != EMX_CHAT_NONE);
    return m;
}

enum MHD_Result srv_send_models(SrvServer *s, struct MHD_Connection *c, const char *allow_origin) {
    cJSON *o = cJSON_CreateObject(), *data = cJSON_AddArrayToObject(o, "data");
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddItemToArray(data, model_object(s, 0));
    cJSON_AddItemToArray(data, model_object(s, 1));
    char *j = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return srv_send_body(c, 200, j, "application/json", allow_origin);
}

enum MHD_Result srv_send_model(SrvServer *s, struct MHD_Connection *c, const char *id, const char *allow_origin,
                               int *status) {
    for (int alias = 0; alias < 2; alias++) {
        cJSON *m = model_object(s, alias);
        if (strcmp(cJSON_GetObjectItem(m, "id")->valuestring, id) == 0) {
            char *j = cJSON_PrintUnformatted(m);
            cJSON_Delete(m);
            *status = 200;
            return srv_send_body(c, 200, j, "application/json", allow_origin);
        }
        cJSON_Delete(m);
    }
    SrvError e;
    char q[128];
    srv_fail(&e, 404, "model", "model_not_found", "the model '%s' does not exist (this server has '%s' and '%s"
             SRV_ENTROPIX_ALIAS "')", srv_quote(id, strlen(id), 80, q, sizeof q), s->sm->id, s->sm->id);
    *status = 404;
    return srv_send_error(s, c, &e, 0, NULL, allow_origin);
}

// The chat page (page.h): static bytes, never freed. The policy allows only the page's own
// inline code and calls to this server: a model's text shown in it can load and send nothing.
enum MHD_Result srv_send_page(struct MHD_Connection *c) {
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(srv_page_html), (void *)srv_page_html, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "text/html; charset=utf-8");
    MHD_add_response_header(r, "Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; "
                            "style-src 'unsafe-inline'; connect-src 'self'; base-uri 'none'; form-action 'none'");
    enum MHD_Result rc = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return rc;
}

enum MHD_Result srv_send_preflight(struct MHD_Connection *c, const char *methods, const char *allow_origin) {
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Allow", methods);
    if (allow_origin) {
        add_cors(r, allow_origin);
        MHD_add_response_header(r, "Access-Control-Allow-Methods", methods);
        MHD_add_response_header(r, "Access-Control-Allow-Headers", "Authorization, Content-Type");
        MHD_add_response_header(r, "Access-Control-Max-Age", "600");
    }
    enum MHD_Result rc = MHD_queue_response(c, 204, r);
    MHD_destroy_response(r);
    return rc;
}

// "# HELP name help\n# TYPE name type\nname " then the value (appended by the caller's format).
#define METRIC(name, type, help) "# HELP " name " " help "\n# TYPE " name " " type "\n" name " "

enum MHD_Result srv_send_metrics(SrvServer *s, struct MHD_Connection *c, const char *allow_origin) {
    char *t = NULL;
    EmxForwardGroupStats gs = {0};
    if (s->group) emx_forward_group_stats(s->group, &gs);
    int open = 0;
    long timed_out = 0;
    srv_conns_counts(s->conns, &open, &timed_out);
    pthread_mutex_lock(&s->mu);
    int n = asprintf(&t,
                     METRIC("entropix_requests_total", "counter", "Generation requests received.") "%lu\n"
                     METRIC("entropix_request_errors_total", "counter", "Generation requests answered with an error.") "%lu\n"
                     METRIC("entropix_http_errors_total", "counter",
                            "Other requests answered with an error (path, method, key, origin, connection limit).") "%lu\n"
                     METRIC("entropix_prompt_tokens_total", "counter", "Prompt tokens prefilled.") "%lu\n"
                     METRIC("entropix_prompt_tokens_cached_total", "counter", "Prompt tokens taken from a slot's cache.") "%lu\n"
                     METRIC("entropix_completion_tokens_total", "counter", "Tokens generated.") "%lu\n"
                     METRIC("entropix_decode_seconds_total", "counter", "Time spent decoding.") "%.6f\n"
                     METRIC("entropix_tokens_per_second", "gauge", "Decode speed of the last finished generation.") "%.3f\n"
                     METRIC("entropix_queue_length", "gauge", "Requests waiting for a slot.") "%d\n"
                     METRIC("entropix_slots_busy", "gauge", "Slots generating.") "%d\n"
                     METRIC("entropix_slots_stalled", "gauge", "Busy slots waiting for a streaming client to read.") "%d\n"
                     METRIC("entropix_slots_total", "gauge", "Slots (--parallel).") "%d\n"
                     METRIC("entropix_batch_steps_total", "counter", "Batched decode steps of the busy slots (0: not batched).")
                     "%ld\n"
                     METRIC("entropix_batch_rows_total", "counter", "Slot rows in those steps (rows / steps: the mean batch).")
                     "%ld\n"
                     METRIC("entropix_pool_memory_bytes", "gauge", "Memory reserved by the agent pools and branching decoders admitted.") "%llu\n"
                     METRIC("entropix_connections", "gauge", "Connections open.") "%d\n"
                     METRIC("entropix_connections_timed_out_total", "counter",
                            "Connections closed for sending a request too slowly (--header-timeout, --body-timeout).") "%ld\n",
                     s->n_requests, s->n_errors, s->n_http_errors, s->n_prompt_tokens, s->n_cached_tokens,
                     s->n_completion_tokens, s->decode_s, s->last_tok_s, s->n_queued, s->n_busy, atomic_load(&s->n_stalled),
                     s->n_slots, gs.steps, gs.rows, (unsigned long long)s->mem_reserved, open, timed_out);
    pthread_mutex_unlock(&s->mu);
    return srv_send_body(c, 200, n < 0 ? NULL : t, "text/plain; version=0.0.4", allow_origin);
}
