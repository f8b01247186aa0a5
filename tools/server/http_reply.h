// http_reply.h — the server's answers other than a generation's (http_reply.c). allow_origin:
// an origin --cors allows, echoed in Access-Control-Allow-Origin (NULL: no CORS headers).
#ifndef ENTROPIX_SERVER_HTTP_REPLY_H
#define ENTROPIX_SERVER_HTTP_REPLY_H

#include <microhttpd.h>

#include "tools/server/http_internal.h"

// body (malloc'd, taken; NULL: out of memory, the connection is dropped) with its type.
enum MHD_Result srv_send_body(struct MHD_Connection *c, int status, char *body, const char *type, const char *allow_origin);
// OpenAI's error object; counted in /metrics: a generation request's in its errors, any other
// request's in the HTTP errors. allow: a 405's Allow header, the path's methods (else NULL).
enum MHD_Result srv_send_error(SrvServer *s, struct MHD_Connection *c, const SrvError *e, int generation,
                               const char *allow, const char *allow_origin);
enum MHD_Result srv_send_models(SrvServer *s, struct MHD_Connection *c, const char *allow_origin);
// GET /v1/models/{id}: the model's entry, or a 404 error naming the ids this server has
// (*status: which).
enum MHD_Result srv_send_model(SrvServer *s, struct MHD_Connection *c, const char *id, const char *allow_origin,
                               int *status);
enum MHD_Result srv_send_page(struct MHD_Connection *c);
enum MHD_Result srv_send_metrics(SrvServer *s, struct MHD_Connection *c, const char *allow_origin);
// OPTIONS: 204 with Allow (the path's methods), and for an allowed origin the CORS preflight's
// answer (those methods, the Authorization and Content-Type headers, cached 600 s).
enum MHD_Result srv_send_preflight(struct MHD_Connection *c, const char *methods, const char *allow_origin);

#endif
