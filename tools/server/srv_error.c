// srv_error.c — the server's error object and the quoting of client bytes in its messages
// (srv_error.h).
#include "tools/server/srv_error.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "tokenizer/tok_utf8.h"

int srv_fail(SrvError *e, int status, const char *param, const char *code, const char *fmt, ...) {
    e->status = status;
    e->type = status == 401 ? "authentication_error" : status >= 500 ? "server_error" : "invalid_request_error";
    e->param = param;
    e->param_path[0] = 0;
    e->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    // The message may quote the client's own bytes (a role, a sampler name, a model, a URL): a
    // control byte there becomes '?', so the error stays one line in the logs and the JSON.
    for (char *c = e->message; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
    return -1;
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
