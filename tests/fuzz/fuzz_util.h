// fuzz_util.h — what the libFuzzer harnesses share: the loaders under test take paths, so each
// input becomes a file in a per-process temporary directory (removed at exit), and structured
// inputs are split into parts on NUL bytes.
#ifndef ENTROPIX_FUZZ_UTIL_H
#define ENTROPIX_FUZZ_UTIL_H

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// The per-process directory (made on first use; several fuzzing jobs never share one).
static char fuzz_dir_path[64];

static inline void fuzz_dir_remove(void) {
    static const char *const names[] = {"in.bin", "out.bin", "config.json", "model.safetensors",
                                        "tokenizer.json", "tokenizer_config.json"};
    char p[160];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", fuzz_dir_path, names[i]);
        unlink(p);
    }
    rmdir(fuzz_dir_path);  // fails (and leaves it) if the code under test left something else
}

static inline const char *fuzz_dir(void) {
    if (!fuzz_dir_path[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(fuzz_dir_path, sizeof fuzz_dir_path, "%s/emx-fuzz-XXXXXX", t && strlen(t) < 40 ? t : "/tmp");
        if (!mkdtemp(fuzz_dir_path)) {
            perror("fuzz: mkdtemp");
            abort();
        }
        atexit(fuzz_dir_remove);
    }
    return fuzz_dir_path;
}

// Writes data to <fuzz_dir>/name (replacing it); path gets the full name. Aborts on a write
// error: the harness, not the code under test, would be broken.
static inline void fuzz_write(const char *name, const void *data, size_t size, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s", fuzz_dir(), name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const char *p = data;
    while (fd >= 0 && size > 0) {
        ssize_t w = write(fd, p, size);
        if (w <= 0) break;
        p += w, size -= (size_t)w;
    }
    if (fd < 0 || size > 0 || close(fd) != 0) {
        perror("fuzz: write");
        abort();
    }
}

static inline void fuzz_unlink(const char *name) {
    char p[160];
    snprintf(p, sizeof p, "%s/%s", fuzz_dir(), name);
    unlink(p);
}

// The next part of a NUL-separated input: [*pos, end of part), *pos moved past the NUL. Returns
// 0 when no part is left.
static inline int fuzz_next_part(const uint8_t *data, size_t size, size_t *pos, const uint8_t **part,
                          size_t *len) {
    if (*pos > size || (*pos == size && *pos != 0)) return 0;
    const uint8_t *start = data + *pos;
    const uint8_t *nul = *pos < size ? memchr(start, 0, size - *pos) : NULL;
    *part = start;
    *len = nul ? (size_t)(nul - start) : size - *pos;
    *pos += *len + 1;
    return 1;
}

// A NUL-terminated heap copy (the APIs under test that take C strings).
static inline char *fuzz_strndup(const uint8_t *p, size_t n) {
    char *s = malloc(n + 1);
    if (!s) abort();
    memcpy(s, p, n);
    s[n] = 0;
    return s;
}

// Code under test that prints progress (the converter) writes to stdout; libFuzzer reports on
// stderr, so stdout goes to /dev/null.
static inline void fuzz_quiet_stdout(void) {
    int fd = open("/dev/null", O_WRONLY);
    if (fd >= 0) {
        fflush(stdout);
        dup2(fd, 1);
        close(fd);
    }
}

#endif
