// api_test_util.h — what the C API's tests share (tests/test_api*.c): a test model opened through
// the public API, or the test skipped when `make test-models` has not made it.
#ifndef ENTROPIX_API_TEST_UTIL_H
#define ENTROPIX_API_TEST_UTIL_H

#include <criterion/criterion.h>
#include <stdio.h>

#include "include/entropix.h"
#include "test_util.h"

static inline entropix_model *open_api(const char *name, int threads) {
    char path[512], rel[256];
    snprintf(rel, sizeof rel, "models/%s", name);
    test_build_path(path, sizeof path, rel);
    FILE *f = fopen(path, "rb");
    if (!f) cr_skip_test("%s missing (make test-models converts it)", path);
    fclose(f);
    entropix_model_params mp;
    entropix_model_params_init(&mp);
    mp.threads = threads;
    entropix_model *m = NULL;
    cr_assert_eq(entropix_model_open(path, &mp, &m), ENTROPIX_OK, "%s", entropix_error_last());
    return m;
}

#endif
