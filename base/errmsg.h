// errmsg.h — the one-line error messages every loader and parser returns through (err, errlen).
#ifndef ENTROPIX_ERRMSG_H
#define ENTROPIX_ERRMSG_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

// The one way a message reaches a caller's (err, errlen): emx_seterr (or emx_vseterr inside a
// variadic helper of one's own). A message is one line, lower-case first, no final period, and
// names what failed ("tensor %s: ...", "%s:%d: field 'answer': ..."); the program that prints
// it adds its own name ("run: ", "convert: "). tools/check_layers.py checks these rules.
//
// Formats into err (if the caller gave one; truncated to errlen). Returns -1 so that
// `return emx_seterr(err, errlen, "...", ...);` reports a failure in one line.
__attribute__((format(printf, 3, 0)))
static inline int emx_vseterr(char *err, size_t errlen, const char *fmt, va_list ap) {
    if (err && errlen) vsnprintf(err, errlen, fmt, ap);
    return -1;
}

__attribute__((format(printf, 3, 4)))
static inline int emx_seterr(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    emx_vseterr(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

// Copies s[0..n) (stopping at a NUL) into out as text that keeps a message on one line:
// control bytes become \r, \n, \t or \xNN, a backslash becomes \\, everything else (UTF-8
// included) is kept. For names read from a file ("layers.0.w\r\nq"). Never writes a partial
// escape; a name too long for out is cut and ends in "...". Returns out (always terminated
// when outlen > 0).
static inline char *emx_escape(const char *s, size_t n, char *out, size_t outlen) {
    static const char hex[] = "0123456789abcdef";
    if (!out || outlen == 0) return out;
    size_t o = 0;
    for (size_t i = 0; i < n && s[i]; i++) {
        unsigned char c = (unsigned char)s[i];
        char e[4];
        size_t k = 0;
        if (c == '\r' || c == '\n' || c == '\t' || c == '\\') {
            e[k++] = '\\';
            e[k++] = c == '\r' ? 'r' : c == '\n' ? 'n' : c == '\t' ? 't' : '\\';
        } else if (c < 0x20 || c == 0x7f) {
            e[0] = '\\', e[1] = 'x', e[2] = hex[c >> 4], e[3] = hex[c & 15];
            k = 4;
        } else {
            e[k++] = (char)c;
        }
        if (o + k + 1 > outlen) {  // no room: end in "..." where it fits
            size_t d = outlen - 1 < 3 ? outlen - 1 : 3;
            o = o > outlen - 1 - d ? outlen - 1 - d : o;
            for (size_t j = 0; j < d; j++) out[o++] = '.';
            break;
        }
        for (size_t j = 0; j < k; j++) out[o++] = e[j];
    }
    out[o] = 0;
    return out;
}

#endif
