// read_file.c — whole files into memory (read_file.h).
#include "base/read_file.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>

char *emx_read_stream_max(FILE *f, size_t max, size_t *len) {
    // Reads at most max + 1 bytes: one more than allowed tells a stream that is too long (a
    // pipe, /dev/zero) from one that fits, without reading the rest of it.
    const size_t limit = max < SIZE_MAX - 1 ? max + 1 : SIZE_MAX - 1;
    size_t cap = limit < 4096 ? limit : 4096, n = 0;
    char *buf = malloc(cap + 1);  // + 1: room for the NUL
    errno = 0;
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap || cap == limit) break;  // end of file (or an error, checked below), or the bound
        size_t grow = cap <= limit / 2 ? 2 * cap : limit;
        char *bigger = realloc(buf, grow + 1);
        if (!bigger) free(buf);
        buf = bigger;
        cap = grow;
    }
    if (!buf) {
        errno = ENOMEM;
        return NULL;
    }
    if (ferror(f)) {
        int e = errno ? errno : EIO;  // read()'s own reason: EISDIR says more than EIO
        free(buf);
        errno = e;
        return NULL;
    }
    if (n > max) {
        free(buf);
        errno = EFBIG;
        return NULL;
    }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

char *emx_read_stream(FILE *f, size_t *len) { return emx_read_stream_max(f, SIZE_MAX - 2, len); }

char *emx_read_file_max(const char *path, size_t max, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) {
        fclose(f);
        errno = EISDIR;
        return NULL;
    }
    char *buf = emx_read_stream_max(f, max, len);
    int saved = errno;
    fclose(f);
    errno = saved;
    return buf;
}

char *emx_read_file(const char *path, size_t *len) { return emx_read_file_max(path, SIZE_MAX - 2, len); }
