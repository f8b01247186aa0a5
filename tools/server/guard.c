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

char *srv_quote(const char *s, size_t n, size_t max, char *out, size_t cap) {
    static const char hex[] = "0123456789abcdef";
    if (!cap) return out;
    size_t o = 0, i = 0;
    for (; i < n && s[i] && i < max;) {
        uint32_t cp = 0;
        int len = tok_utf8_next((const uint8_t *)s + i, n - i, &cp);
        char e[8];
        size_t k = 0;
        const unsigned char c = (unsigned char)s[i];
        if (len > 1 && i + (size_t)len <= max) {
            memcpy(e, s + i, (size_t)len), k = (size_t)len;  // a whole character that fits the bound
        } else if (len > 1) {
            break;  // it would be cut: stop before it
        } else if (c == '\\') {
            e[0] = e[1] = '\\', k = 2, len = 1;
        } else if (c < 0x20 || c >= 0x7f) {  // control, DEL, or one invalid byte
            e[0] = '\\', e[1] = 'x', e[2] = hex[c >> 4], e[3] = hex[c & 15], k = 4, len = 1;
        } else {
            e[0] = (char)c, k = 1, len = 1;
        }
        if (o + k + 4 > cap) break;  // room for "..." and the NUL stays
        memcpy(out + o, e, k);
        o += k;
        i += (size_t)len;
    }
    if (i < n && s[i] && o + 3 < cap) memcpy(out + o, "...", 3), o += 3;
    out[o] = 0;
    return out;
}
