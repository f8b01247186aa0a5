// test_util.h — small helpers shared by the Criterion tests: where the reference data and the
// converted test models are, reading whole files, and whether the build is sanitized.
// Header-only so each test file stays self-contained.
#ifndef ENTROPIX_TEST_UTIL_H
#define ENTROPIX_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// 1 in a build under AddressSanitizer (`make test-asan`; gcc's and clang's ways of saying so),
// else 0: a test whose check is about optimised code or address-space limits adapts to it.
#if defined(__SANITIZE_ADDRESS__)
#define EMX_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMX_TEST_SANITIZED 1
#endif
#endif
#ifndef EMX_TEST_SANITIZED
#define EMX_TEST_SANITIZED 0
#endif

// Path of `rel` under ../shared (or $EMX_SHARED). Returned string is static per call site
// buffer: copy it if you need two at once.
static inline const char *test_shared_path(char *buf, size_t cap, const char *rel) {
    const char *root = getenv("EMX_SHARED");
    snprintf(buf, cap, "%s/%s", root && *root ? root : "../shared", rel);
    return buf;
}

// Path of `rel` under the build folder (or $EMX_BUILD): converted test models live there.
static inline const char *test_build_path(char *buf, size_t cap, const char *rel) {
    const char *root = getenv("EMX_BUILD");
    snprintf(buf, cap, "%s/%s", root && *root ? root : "build", rel);
    return buf;
}

// Whole file into a NUL-terminated heap buffer (free it); NULL if it cannot be read.
static inline char *test_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = 0;
        if (len) *len = (size_t)n;
    }
    return buf;
}

#endif
