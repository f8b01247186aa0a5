// test_ref_util.h — reading the reference data of ../shared/testdata and tests/data (JSON files
// of token ids and top-k lists, raw f32 logits) and comparing logits with it. Shared by the
// forward-pass tests (test_forward.c, test_forward_ref.c, test_smollm2.c). Header-only, with
// Criterion assertions: a missing or malformed reference fails the test that reads it.
#ifndef ENTROPIX_TEST_REF_UTIL_H
#define ENTROPIX_TEST_REF_UTIL_H

#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "test_util.h"

// A JSON file parsed whole (cJSON_Delete it).
static inline cJSON *ref_load_json(const char *path) {
    char *text = test_read_file(path, NULL);
    cr_assert(text != NULL, "cannot read %s", path);
    cJSON *j = cJSON_Parse(text);
    free(text);
    cr_assert(j != NULL, "%s: invalid JSON", path);
    return j;
}

// The same for a path under ../shared.
static inline cJSON *ref_load_shared_json(const char *rel) {
    char path[512];
    return ref_load_json(test_shared_path(path, sizeof path, rel));
}

// JSON array of ints -> heap array (free it); *n = its length.
static inline int *ref_json_ints(const cJSON *arr, int *n) {
    cr_assert(cJSON_IsArray(arr));
    *n = cJSON_GetArraySize(arr);
    int *v = malloc((size_t)(*n > 0 ? *n : 1) * sizeof(int));
    cr_assert(v != NULL);
    for (int i = 0; i < *n; i++) v[i] = cJSON_GetArrayItem(arr, i)->valueint;
    return v;
}

// A raw little-endian f32 file of exactly `count` values (free it).
static inline float *ref_read_f32(const char *path, size_t count) {
    size_t len = 0;
    char *buf = test_read_file(path, &len);
    cr_assert(buf != NULL, "cannot read %s", path);
    cr_assert_eq(len, count * 4, "%s: %zu bytes, expected %zu", path, len, count * 4);
    return (float *)buf;
}

// The same for a path under ../shared.
static inline float *ref_read_shared_f32(const char *rel, size_t count) {
    char path[512];
    return ref_read_f32(test_shared_path(path, sizeof path, rel), count);
}

static inline int ref_argmax(const float *x, int n) {  // lowest id on ties, as the references
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static inline double ref_max_abs_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

#endif
