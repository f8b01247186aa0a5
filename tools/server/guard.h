// guard.h — what a request must be before the server does anything for it, as pure functions of
// its headers (tests/test_server.c calls them directly): from this server's own origin or one
// that --cors allows, with the API key when there is one, and JSON for the generation endpoints
// (the client's bytes in their errors quoted by srv_error.h's srv_quote).
//
// Why the origin and the media type: any web page the user visits can send a request to a
// server on the user's machine. A "simple" cross-origin request (a POST with Content-Type
// text/plain, no preflight) reaches the server and would start a generation; requiring
// application/json makes the browser ask first (a preflight OPTIONS, which a foreign origin
// fails), and a request that carries a foreign Origin header is refused whatever its type.
#ifndef ENTROPIX_SERVER_GUARD_H
#define ENTROPIX_SERVER_GUARD_H

#include <stddef.h>

#include "tools/server/srv_error.h"

#define SRV_MAX_CORS 8

typedef struct {
    const char *cors[SRV_MAX_CORS];  // --cors origins, exactly as a browser sends them ("*": any)
    int n_cors;
    const char *api_key;             // NULL: no key needed
} SrvGuard;

// The Origin header (NULL: none, as from a client that is not a browser, or a same-origin GET)
// against the Host header: same-origin ("http://" + Host) and origins --cors allows pass.
// Returns 0, with *allow set to the origin to echo in Access-Control-Allow-Origin (NULL: none
// to send), or -1 with e (403, code "origin_not_allowed").
int srv_guard_origin(const SrvGuard *g, const char *origin, const char *host, const char **allow, SrvError *e);

// 1 when `authorization` ("Bearer KEY"; the scheme in any case, as RFC 9110 has it) carries the
// key, or no key is needed. The key is compared in constant time.
int srv_guard_auth(const SrvGuard *g, const char *authorization);

// A generation request's Content-Type: application/json, in any case, parameters allowed
// ("application/json; charset=utf-8"). 0, or -1 with e (415, code "unsupported_media_type").
int srv_guard_json_type(const char *content_type, SrvError *e);

#endif
