// test_cpu_amx.c — the AMX prefill tile (runtime/cpu/cpu_amx.c) gives, bit for bit, what the
// single-row kernels give (emx_dot_q8 / _q4 / _q4_1 / _q4_1f, whose order every quantised kernel
// shares):
// 16 weight rows of each dtype against token counts that exercise whole blocks of 32, a lone half
// of 16, the zero-padded tail (1..15 rows past the last 16) and both together; group counts with
// and without a whole number of phases (1, 2, 3, 5, 18, 32 groups); an output stride wider than
// the 16 rows, whose other columns must stay untouched. Then the matmul that picks the tile
// (emx_matmul on 48 rows, all of them AMX tiles, no 4-row kernels) against the same dots.
//
// On a CPU without AMX-INT8, or where the kernel does not grant the tile state, or with
// EMX_AMX=0, the tests are skipped and say so.
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cpu/cpu_matmul.h"
#include "base/dtype.h"
#include "test_rand_util.h"
#include "test_weights_util.h"

#define SKIP_WITHOUT_AMX()                                                                                  \
    do {                                                                                                     \
        if (!emx_amx_available())                                                                            \
            cr_skip_test("no AMX here (this build or CPU lacks AMX-INT8, the kernel did not grant the tile " \
                         "state, or EMX_AMX=0): the AVX-512 tile runs instead");                             \
    } while (0)

// Activation rows in their int8 form.
typedef struct {
    int n, cols;
    float *x, *xd, *xs;
    int8_t *xq;
} Acts;

static Acts acts_new(int n, int cols) {
    const int ng = cols / 32;
    Acts a = {n, cols, malloc((size_t)n * cols * sizeof(float)), malloc((size_t)n * ng * sizeof(float)),
              malloc((size_t)n * ng * sizeof(float)), malloc((size_t)n * cols)};
    cr_assert(a.x && a.xd && a.xs && a.xq);
    fill(a.x, n * cols, 1.0f);
    for (int i = 0; i < n; i++)
        emx_quantize_acts(a.x + (size_t)i * cols, cols, a.xq + (size_t)i * cols, a.xd + (size_t)i * ng, a.xs + (size_t)i * ng);
    return a;
}

static void acts_free(Acts *a) {
    free(a->x), free(a->xd), free(a->xs), free(a->xq);
}

// Weight row k of rows [rows][cols] (test_encode_weights' layout: quants, then scales, then mins)
// against activation row t, by the single-row kernel.
static float dot(uint32_t dt, const uint8_t *w, int rows, int cols, int k, const Acts *a, int t) {
    const int ng = cols / 32;
    const size_t row_bytes = dt == EMX_Q8 ? (size_t)cols : (size_t)cols / 2;
    const uint8_t *wk = w + k * row_bytes;
    const size_t table = (size_t)ng * (dt == EMX_Q4_1F ? sizeof(float) : sizeof(uint16_t));  // a row's scales
    const void *wd = w + rows * row_bytes + k * table, *wm = (const uint8_t *)wd + rows * table;
    const int8_t *xq = a->xq + (size_t)t * cols;
    const float *xd = a->xd + (size_t)t * ng, *xs = a->xs + (size_t)t * ng;
    return dt == EMX_Q8     ? emx_dot_q8((const int8_t *)wk, wd, xq, xd, cols)
           : dt == EMX_Q4   ? emx_dot_q4(wk, wd, xq, xd, xs, cols)
           : dt == EMX_Q4_1 ? emx_dot_q4_1(wk, wd, wm, xq, xd, xs, cols)
                            : emx_dot_q4_1f(wk, wd, wm, xq, xd, xs, cols);
}

static void assert_equal(float got, float want, const char *what, uint32_t dt, int cols, int tokens, int t, int k) {
    cr_assert(memcmp(&got, &want, sizeof(float)) == 0, "%s %s, %d columns, %d tokens: token %d weight row %d: %.9g, dot %.9g",
              what, emx_dtype_name(dt), cols, tokens, t, k, got, want);
}

Test(cpu_amx, tile_equals_dot) {
    SKIP_WITHOUT_AMX();
    static const int cols_list[] = {32, 64, 96, 160, 576, 1024};
    static const int token_list[] = {1, 15, 16, 17, 31, 32, 33, 47, 70};
    enum { STRIDE = 19, MAX_TOKENS = 70 };  // out rows 16 wide in rows of 19: 3 guard columns
    for (size_t ci = 0; ci < sizeof(cols_list) / sizeof(cols_list[0]); ci++) {
        const int cols = cols_list[ci];
        Acts a = acts_new(MAX_TOKENS, cols);
        uint8_t *pack = aligned_alloc(64, emx_amx_pack_bytes(cols));
        uint8_t *acts = aligned_alloc(64, emx_amx_acts_bytes(MAX_TOKENS, cols));
        float *out = malloc((size_t)MAX_TOKENS * STRIDE * sizeof(float));
        cr_assert(pack && acts && out);
        for (uint32_t dt = EMX_Q8; dt <= EMX_Q4_1F; dt++) {
            float *wf = malloc((size_t)16 * cols * sizeof(float));
            cr_assert(wf);
            fill(wf, 16 * cols, 0.5f);
            uint8_t *w = test_encode_weights(dt, wf, 16, cols, 0);
            cr_assert(w);
            free(wf);
            const size_t row_bytes = dt == EMX_Q8 ? (size_t)cols : (size_t)cols / 2;
            const size_t table = (size_t)(cols / 32) * (dt == EMX_Q4_1F ? sizeof(float) : sizeof(uint16_t));
            const uint8_t *wd = w + 16 * row_bytes, *wm = wd + 16 * table;
            emx_amx_pack(pack, dt, w, row_bytes, wd, cols);
            for (size_t ti = 0; ti < sizeof(token_list) / sizeof(token_list[0]); ti++) {
                const int tokens = token_list[ti];
                const EmxActs ea = {.x = a.x, .xq = a.xq, .xd = a.xd, .xs = a.xs, .n = tokens};
                for (int blk = 0; blk < (tokens + 15) / 16; blk++) emx_amx_acts(acts, &ea, cols, blk);
                for (int i = 0; i < MAX_TOKENS * STRIDE; i++) out[i] = -1234.5f;
                emx_amx_tile(pack, dt, wm, &ea, acts, cols, out, STRIDE);
                for (int t = 0; t < MAX_TOKENS; t++)
                    for (int k = 0; k < STRIDE; k++) {
                        const float got = out[t * STRIDE + k];
                        if (t < tokens && k < 16) assert_equal(got, dot(dt, w, 16, cols, k, &a, t), "tile", dt, cols, tokens, t, k);
                        else cr_assert(got == -1234.5f, "%s %d tokens: out[%d][%d] written", emx_dtype_name(dt), tokens, t, k);
                    }
            }
            free(w);
        }
        free(pack), free(acts), free(out);
        acts_free(&a);
    }
}

// The matmul over 48 rows (three AMX tiles, nothing left for the 4-row kernels) and 37 tokens
// (two blocks of 32 and 5 in the tail), on 1 and 2 threads.
Test(cpu_amx, matmul_picks_the_tile) {
    SKIP_WITHOUT_AMX();
    enum { ROWS = 48, COLS = 320, TOKENS = 37 };
    Acts a = acts_new(TOKENS, COLS);
    float *out = malloc((size_t)TOKENS * ROWS * sizeof(float)), *wf = malloc((size_t)ROWS * COLS * sizeof(float));
    cr_assert(out && wf);
    for (uint32_t dt = EMX_Q8; dt <= EMX_Q4_1F; dt++) {
        fill(wf, ROWS * COLS, 0.5f);
        uint8_t *w = test_encode_weights(dt, wf, ROWS, COLS, 0);
        cr_assert(w);
        const EmxTensor t = {.dtype = dt, .rows = ROWS, .cols = COLS, .data = w};
        const EmxActs ea = {.x = a.x, .xq = a.xq, .xd = a.xd, .xs = a.xs, .n = TOKENS};
        for (int threads = 1; threads <= 2; threads++) {
            memset(out, 0, (size_t)TOKENS * ROWS * sizeof(float));
            emx_matmul(out, &t, &ea, threads);
            for (int i = 0; i < TOKENS; i++)
                for (int k = 0; k < ROWS; k++)
                    assert_equal(out[i * ROWS + k], dot(dt, w, ROWS, COLS, k, &a, i), "matmul", dt, COLS, TOKENS, i, k);
        }
        free(w);
    }
    free(out), free(wf);
    acts_free(&a);
}
