// test_gguf_quants.c — ggml's block types as we read and keep them, against the `gguf` Python
// package's own decoding (gguf.quants.dequantize): tests/data/gguf_quants/, made by
// tools/make_gguf_quant_ref.py from random blocks of each type, [4, 512] each.
//
//   - our dequantisers (runtime/convert/ggml_dequant.c) give gguf-py's values bit for bit, all
//     eight types;
//   - the types ./run keeps exactly (conv_keep_dtype: Q8_0 -> q8, Q4_0 -> q4, Q4_1 -> q4_1,
//     Q4_K -> q4_1f) decode from the converted tensor (base/dtype.c) to gguf-py's values bit for
//     bit;
//   - the others (Q5_0, Q5_1, Q5_K, Q6_K -> q8) are not exact: some value differs, and the
//     difference stays within q8's rounding (half a step of the group's scale).
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "runtime/convert/conv_plan.h"
#include "runtime/convert/ggml_dequant.h"
#include "runtime/convert/gguf.h"
#include "runtime/convert/tensor_encode.h"
#include "test_util.h"

#define DIR "tests/data/gguf_quants/"
#define ROWS 4
#define COLS 512

static const struct {
    const char *name;
    int exact;
} TYPES[] = {{"Q8_0", 1}, {"Q4_0", 1}, {"Q4_1", 1}, {"Q4_K", 1}, {"Q5_0", 0}, {"Q5_1", 0}, {"Q5_K", 0}, {"Q6_K", 0}};

// gguf-py's decoding of tensor `name`: [ROWS][COLS] float32.
static float *reference(const char *name) {
    char path[128];
    snprintf(path, sizeof path, DIR "%s.f32", name);
    size_t n = 0;
    float *ref = (float *)test_read_file(path, &n);
    cr_assert(ref && n == ROWS * COLS * sizeof(float), "%s: missing or %zu bytes", path, n);
    return ref;
}

static const GGUFTensor *tensor(const GGUFFile *g, const char *name) {
    const GGUFTensor *t = gguf_find_tensor(g, name);
    cr_assert(t, "%s: no tensor %s", g->path, name);
    cr_assert(t->n_dims == 2 && t->ne[0] == COLS && t->ne[1] == ROWS, "%s: shape", name);
    cr_assert_str_eq(ggml_type_name(t->type), name);
    return t;
}

// First index where a and b differ as bits, or -1.
static long first_difference(const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float))) return (long)i;
    return -1;
}

Test(gguf_quants, dequantisers_match_gguf_py_bitwise) {
    GGUFFile g;
    char err[256];
    cr_assert_eq(gguf_open(&g, DIR "quants.gguf", err, sizeof err), 0, "%s", err);
    for (size_t k = 0; k < sizeof TYPES / sizeof TYPES[0]; k++) {
        const GGUFTensor *t = tensor(&g, TYPES[k].name);
        float *ref = reference(TYPES[k].name), got[ROWS * COLS];
        cr_assert_eq(ggml_dequantize_rows(t->type, t->data, COLS, 0, ROWS, got), 0);
        long i = first_difference(got, ref, ROWS * COLS);
        cr_expect_eq(i, -1, "%s: value %ld: ours %.9g, gguf-py %.9g", TYPES[k].name, i, i < 0 ? 0 : (double)got[i],
                     i < 0 ? 0 : (double)ref[i]);
        free(ref);
    }
    gguf_close(&g);
}

Test(gguf_quants, kept_types_are_exact_and_the_others_within_q8_rounding) {
    GGUFFile g;
    char err[256];
    cr_assert_eq(gguf_open(&g, DIR "quants.gguf", err, sizeof err), 0, "%s", err);
    for (size_t k = 0; k < sizeof TYPES / sizeof TYPES[0]; k++) {
        const GGUFTensor *t = tensor(&g, TYPES[k].name);
        const uint32_t dtype = conv_keep_dtype(t->type);
        cr_expect_eq(te_exact_copy(dtype, t->type), TYPES[k].exact, "%s -> %s", TYPES[k].name, emx_dtype_name(dtype));
        float *ref = reference(TYPES[k].name), x[ROWS * COLS], back[ROWS * COLS];
        cr_assert_eq(ggml_dequantize_rows(t->type, t->data, COLS, 0, ROWS, x), 0);
        uint8_t *enc = malloc(emx_tensor_bytes(dtype, ROWS, COLS));
        cr_assert(enc);
        te_encode_rows(dtype, t->type, t->data, COLS, 0, ROWS, x, enc);
        for (int r = 0; r < ROWS; r++) emx_dequantize_row(dtype, enc, ROWS, COLS, (uint64_t)r, back + r * COLS);
        long i = first_difference(back, ref, ROWS * COLS);
        if (TYPES[k].exact) {
            cr_expect_eq(i, -1, "%s -> %s: value %ld: kept %.9g, gguf-py %.9g", TYPES[k].name, emx_dtype_name(dtype), i,
                         i < 0 ? 0 : (double)back[i], i < 0 ? 0 : (double)ref[i]);
        } else {
            cr_expect_eq(dtype, EMX_Q8, "%s is kept as %s", TYPES[k].name, emx_dtype_name(dtype));
            cr_expect_neq(i, -1, "%s -> q8 kept every value: the table calls it inexact", TYPES[k].name);
            for (int gi = 0; gi < ROWS * COLS / 32; gi++) {  // q8: |error| <= d/2 of the group's max|w|/127
                float amax = 0;
                for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(ref[gi * 32 + j]));
                for (int j = 0; j < 32; j++)
                    cr_expect(fabs((double)back[gi * 32 + j] - ref[gi * 32 + j]) <= 0.51 * amax / 127 * (1 + 1e-3),
                              "%s group %d weight %d: %.9g vs %.9g", TYPES[k].name, gi, j, (double)back[gi * 32 + j],
                              (double)ref[gi * 32 + j]);
            }
        }
        free(enc);
        free(ref);
    }
    gguf_close(&g);
}
