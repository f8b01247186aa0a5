// guard.c — origin, key, media type and quoting (guard.h).
#include "tools/server/guard.h"

#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "tokenizer/tok_utf8.h"

int srv_guard_origin(const SrvGuard *g, const char *origin, const char *host, const char **allow, SrvError *e) {
    *allow = NULL;
    if (!origin) return 0;
    for (int i = 0; i < g->n_cors; i++)
        if (!strcmp(g->cors[i], "*") || !strcmp(g->cors[i], origin)) return *allow = origin, 0;
    // The server's own page: scheme and authority equal to what the request was sent to.
    if (host && !strncasecmp(origin, "http://", 7) && !strcasecmp(origin + 7, host)) return 0;
    char q[128];
    return srv_fail(e, 403, NULL, "origin_not_allowed",
                    "requests from the origin '%s' are not allowed (a web page's request; --cors ORIGIN allows one)",
                    srv_quote(origin, strlen(origin), 80, q, sizeof q));
}

int srv_guard_auth(const SrvGuard *g, const char *authorization) {
    if (!g->api_key) return 1;
    if (!authorization || strncasecmp(authorization, "Bearer", 6) != 0 || authorization[6] != ' ') return 0;
    const char *h = authorization + 6;
    while (*h == ' ') h++;
    const size_t n = strlen(g->api_key), got = strlen(h);
    unsigned char diff = got != n;
    for (size_t i = 0; i < n; i++) diff |= (unsigned char)(h[i < got ? i : 0] ^ g->api_key[i]);
    return diff == 0;
}

int srv_guard_json_type(const char *content_type, SrvError *e) {
    static const char json[] = "application/json";
    const size_t k = sizeof json - 1;
    if (content_type) {
        while (*content_type == ' ' || *content_type == '\t') content_type++;
        // the type, then the end or its parameters (the byte after it is read only once it matched)
        if (!strncasecmp(content_type, json, k) && (!content_type[k] || strchr(" \t;", content_type[k]))) return 0;
    }
    char q[96];
    return srv_fail(e, 415, NULL, "unsupported_media_type", "the body must be sent as Content-Type: application/json, not %s",
                    content_type ? srv_quote(content_type, strlen(content_type), 60, q, sizeof q) : "without a Content-Type");
}
