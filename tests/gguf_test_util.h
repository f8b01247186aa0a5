// gguf_test_util.h — a temporary folder holding a copy of one of ../shared's GGUFs, for the tests
// that open a GGUF and let its cache file be written (test_gguf_cache.c through ./run,
// test_api_gguf.c through the public API). Header-only, as the other test helpers.
#ifndef ENTROPIX_TESTS_GGUF_TEST_UTIL_H
#define ENTROPIX_TESTS_GGUF_TEST_UTIL_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

#include "test_util.h"

typedef struct {
    char dir[64];     // the test's folder
    char cache[96];   // dir/cache: the cache folder (--gguf-cache, params->gguf_cache), not made
    char gguf[128];   // dir/model.gguf: the copy of the shared GGUF
} GgufTmp;

// The whole file `from` written to `to` (the test fails if either cannot be).
static inline void test_copy_file(const char *from, const char *to) {
    size_t n = 0;
    char *bytes = test_read_file(from, &n);
    cr_assert(bytes, "%s is missing", from);
    FILE *f = fopen(to, "wb");
    cr_assert(f && fwrite(bytes, 1, n, f) == n && fclose(f) == 0, "cannot write %s", to);
    free(bytes);
}

// A new folder /tmp/emx_<name>_XXXXXX with a copy of ../shared/<shared_gguf> as model.gguf.
static inline void gguf_tmp_setup(GgufTmp *t, const char *name, const char *shared_gguf) {
    snprintf(t->dir, sizeof t->dir, "/tmp/emx_%s_XXXXXX", name);
    cr_assert_not_null(mkdtemp(t->dir));
    snprintf(t->cache, sizeof t->cache, "%s/cache", t->dir);
    snprintf(t->gguf, sizeof t->gguf, "%s/model.gguf", t->dir);
    char src[1024];
    test_copy_file(test_shared_path(src, sizeof src, shared_gguf), t->gguf);
}

// Removes the folder, made writable first (a test may leave its cache folder read-only).
static inline void gguf_tmp_cleanup(GgufTmp *t) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "chmod -R u+w '%s'; rm -rf '%s'", t->dir, t->dir);
    cr_expect_eq(system(cmd), 0);
}

#endif
