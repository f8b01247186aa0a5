// msg_esc.c — escape names for one-line messages (msg_esc.h).
#include "runtime/convert/msg_esc.h"

#include <stdio.h>
#include <string.h>

const char *emx_escn(char *buf, size_t cap, const char *s, size_t n) {
    if (cap == 0) return buf;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char e[5];
        size_t k;
        if (c == '\n') k = 2, memcpy(e, "\\n", 2);
        else if (c == '\r') k = 2, memcpy(e, "\\r", 2);
        else if (c == '\t') k = 2, memcpy(e, "\\t", 2);
        else if (c == '\\') k = 2, memcpy(e, "\\\\", 2);
        else if (c < 0x20 || c == 0x7f) k = 4, snprintf(e, sizeof e, "\\x%02x", c);
        else k = 1, e[0] = (char)c;
        if (o + k + 4 > cap) {  // room for "..." and the NUL
            if (cap >= 4) memcpy(buf + (o < cap - 4 ? o : cap - 4), "...", 3), o = (o < cap - 4 ? o : cap - 4) + 3;
            break;
        }
        memcpy(buf + o, e, k);
        o += k;
    }
    buf[o < cap ? o : cap - 1] = 0;
    return buf;
}

const char *emx_esc(char *buf, size_t cap, const char *s) {
    if (!s) s = "(null)";
    return emx_escn(buf, cap, s, strlen(s));
}
