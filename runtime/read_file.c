// read_file.c — whole files into memory (read_file.h).
#include "read_file.h"

#include <errno.h>
#include <stdlib.h>

char *emx_read_stream(FILE *f, size_t *len) {
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);  // + 1: room for the NUL
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;  // end of file (or an error, checked below)
        char *bigger = realloc(buf, 2 * cap + 1);
        if (!bigger) free(buf);
        buf = bigger;
        cap *= 2;
    }
    if (!buf) {
        errno = ENOMEM;
        return NULL;
    }
    if (ferror(f)) {
        free(buf);
        errno = EIO;
        return NULL;
    }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

char *emx_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = emx_read_stream(f, len);
    int saved = errno;
    fclose(f);
    errno = saved;
    return buf;
}
