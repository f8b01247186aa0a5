// errmsg.h — the one-line error messages every loader and parser returns through (err, errlen).
#ifndef ENTROPIX_ERRMSG_H
#define ENTROPIX_ERRMSG_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

// Formats into err (if the caller gave one; truncated to errlen). Returns -1 so that
// `return emx_seterr(err, errlen, "...", ...);` reports a failure in one line.
__attribute__((format(printf, 3, 4)))
static inline int emx_seterr(char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

#endif
