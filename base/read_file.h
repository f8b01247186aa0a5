// read_file.h — a whole file (or stream) into memory, NUL-terminated: prompts (-f), texts for
// perplexity and calibration, JSON side files of the converter, a subprocess's captured output.
// Reads until end of file with a growing buffer, so pipes and /dev/stdin work as well as
// regular files.
#ifndef ENTROPIX_READ_FILE_H
#define ENTROPIX_READ_FILE_H

#include <stddef.h>
#include <stdio.h>

// The rest of stream f. Returns a malloc'd buffer with a NUL after the *len bytes (len may be
// NULL), or NULL with errno set (ENOMEM, or the read's own error, EIO when it gave none).
char *emx_read_stream(FILE *f, size_t *len);

// The same, at most max bytes: a longer stream is NULL with errno EFBIG after reading max + 1
// bytes of it (so /dev/zero or an endless pipe costs max bytes of memory, not all of it).
char *emx_read_stream_max(FILE *f, size_t max, size_t *len);

// The whole file at path. NULL with errno set (fopen's, EISDIR for a directory, ENOMEM, the
// read's error) on failure.
char *emx_read_file(const char *path, size_t *len);

// The whole file at path, at most max bytes (EFBIG beyond, as emx_read_stream_max).
char *emx_read_file_max(const char *path, size_t max, size_t *len);

#endif
