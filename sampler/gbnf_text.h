// gbnf_text.h — a growable text buffer with printf-style appending, shared by the writers of
// GBNF text (json_schema.c, json_schema_pattern.c, json_schema_format.c). A failed allocation
// sets oom and drops all later text; the writer checks oom once at the end.
#ifndef ENTROPIX_GBNF_TEXT_H
#define ENTROPIX_GBNF_TEXT_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    char *s;
    size_t n, cap;
    int oom;
} EmxText;

__attribute__((format(printf, 2, 3))) static inline void emx_text_put(EmxText *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (k < 0 || b->oom) return;
    if (b->n + (size_t)k + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < b->n + (size_t)k + 1) c *= 2;
        char *s = realloc(b->s, c);
        if (!s) {
            b->oom = 1;
            return;
        }
        b->s = s, b->cap = c;
    }
    va_start(ap, fmt);
    vsnprintf(b->s + b->n, (size_t)k + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)k;
}

// The text so far ("" when none).
static inline const char *emx_text_str(const EmxText *b) { return b->n ? b->s : ""; }

#endif
