// test_batch_invariance.c — a row's result does not depend on the batch it is in
// (runtime/cpu/cpu_matmul.h, "Batch invariance"): the agent pool runs N branches as one batched
// pass and must get, bit for bit, the logits each branch would get alone, whatever the batch
// and the thread count of the worker that ran it; a rollback compares a single-token forward
// with the row a batched prefill computed.
//
// Every comparison here is bitwise (memcmp): there is no tolerance to choose. The reference of
// a row is the same row computed alone (n = 1, one thread), so these tests check exactly the
// property, not the values (test_cpu_ops.c and test_forward.c check the values against
// independent references).
//
//   matmul     random weights of every dtype, odd row counts, cols with and without whole
//              blocks of 8 groups of 32 (the SIMD kernels' block size) and with a tail of
//              groups; batches of n = 1..21 activation rows (the decode kernel for n = 1,
//              the prefill tile's 8-, 4- and 1-row steps for more, and the 1-row kernel for
//              the rows outside whole quads), rows placed at several indices, 1 and 2 threads.
//   models     a 13-token prompt as one prefill, as two chunks, and one token at a time;
//              emx_forward_all_logits rows against the one-at-a-time logits; 1 vs 2 threads.
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cpu/cpu_matmul.h"
#include "base/dtype.h"
#include "runtime/forward.h"
#include "runtime/model.h"
#include "test_util.h"
#include "test_weights_util.h"

static uint64_t rng_next(uint64_t *s) {  // xorshift64*
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545f4914f6cdd1dull;
}
static float rng_normalish(uint64_t *s) {  // sum of 4 uniforms, centred: roughly unit normal
    double u = 0;
    for (int i = 0; i < 4; i++) u += (double)(rng_next(s) >> 11) / 9007199254740992.0;
    return (float)((u - 2.0) * 1.7320508);
}

// Random [rows, cols] weights of the dtype (quantised by the runtime's own quantiser: only
// the layout matters here, not the values).
static void *random_weights(uint32_t dtype, int rows, int cols, uint64_t *rng) {
    const size_t n = (size_t)rows * cols;
    float *w = malloc(n * sizeof(float));
    cr_assert(w);
    for (size_t i = 0; i < n; i++) w[i] = 0.5f * rng_normalish(rng);
    void *out = test_encode_weights(dtype, w, rows, cols, 0);
    cr_assert(out);
    free(w);
    return out;
}

// A pool of activation rows in float and in their int8 form (for q8/q4/q4_1 weights).
typedef struct {
    int n, cols;
    float *x;    // [n][cols]
    int8_t *xq;  // [n][cols]
    float *xd;   // [n][cols/32]
    float *xs;   // [n][cols/32]
} Rows;

static Rows rows_new(int n, int cols, uint64_t *rng) {
    const int ng = cols / 32;
    Rows r = {n, cols, malloc((size_t)n * cols * sizeof(float)), malloc((size_t)n * cols),
              malloc((size_t)n * ng * sizeof(float)), malloc((size_t)n * ng * sizeof(float))};
    cr_assert(r.x && r.xq && r.xd && r.xs);
    for (size_t i = 0; i < (size_t)n * cols; i++) r.x[i] = rng_normalish(rng);
    for (int i = 0; i < n; i++)
        emx_quantize_acts(r.x + (size_t)i * cols, cols, r.xq + (size_t)i * cols, r.xd + (size_t)i * ng, r.xs + (size_t)i * ng);
    return r;
}

static void rows_free(Rows *r) {
    free(r->x);
    free(r->xq);
    free(r->xd);
    free(r->xs);
}

// Row `dst` of b := row `src` of a (same cols).
static void rows_copy(Rows *b, int dst, const Rows *a, int src) {
    const int cols = a->cols, ng = cols / 32;
    memcpy(b->x + (size_t)dst * cols, a->x + (size_t)src * cols, (size_t)cols * sizeof(float));
    memcpy(b->xq + (size_t)dst * cols, a->xq + (size_t)src * cols, (size_t)cols);
    memcpy(b->xd + (size_t)dst * ng, a->xd + (size_t)src * ng, (size_t)ng * sizeof(float));
    memcpy(b->xs + (size_t)dst * ng, a->xs + (size_t)src * ng, (size_t)ng * sizeof(float));
}

// out [n][w->rows] = W x for the first n rows of r.
static void matmul_rows(float *out, const EmxTensor *w, const Rows *r, int n, int threads) {
    const int q = emx_dtype_wants_q8_acts(w->dtype);
    EmxActs a = {.x = r->x, .xq = q ? r->xq : NULL, .xd = q ? r->xd : NULL, .xs = q ? r->xs : NULL, .n = n};
    emx_matmul(out, w, &a, threads);
}

#define POOL 21  // activation rows: 8 + 8 + 4 + 1, every step of the prefill tile

// Every row of every batch 1..POOL (rows in order, and rotated so each lands at other indices
// and in the other kernel), with 1 and 2 threads, against the row alone.
static void check_matmul_invariance(uint32_t dtype, int rows, int cols) {
    uint64_t rng = 0x5eed0000u + dtype * 7919u + (uint64_t)rows * 131u + (uint64_t)cols;
    void *data = random_weights(dtype, rows, cols, &rng);
    EmxTensor w = {.dtype = dtype, .rows = (uint64_t)rows, .cols = (uint64_t)cols, .data = data};
    Rows pool = rows_new(POOL, cols, &rng), batch = rows_new(POOL, cols, &rng), one = rows_new(1, cols, &rng);
    float *alone = malloc((size_t)POOL * rows * sizeof(float));  // [POOL][rows]
    float *out = malloc((size_t)POOL * rows * sizeof(float));     // [n][rows]
    cr_assert(alone && out);
    for (int i = 0; i < POOL; i++) {
        rows_copy(&one, 0, &pool, i);
        matmul_rows(alone + (size_t)i * rows, &w, &one, 1, 1);
    }
    static const int shifts[] = {0, 1, 2, 3, 6, 13};
    for (int threads = 1; threads <= 2; threads++) {
        for (int n = 1; n <= POOL; n++) {
            for (size_t si = 0; si < sizeof(shifts) / sizeof(shifts[0]); si++) {
                for (int j = 0; j < n; j++) rows_copy(&batch, j, &pool, (j + shifts[si]) % POOL);
                matmul_rows(out, &w, &batch, n, threads);
                for (int j = 0; j < n; j++) {
                    const int src = (j + shifts[si]) % POOL;
                    const float *got = out + (size_t)j * rows, *want = alone + (size_t)src * rows;
                    if (memcmp(got, want, (size_t)rows * sizeof(float)) == 0) continue;
                    int r = 0;  // the first differing bits (-0 vs +0 counts)
                    while (memcmp(&got[r], &want[r], sizeof(float)) == 0) r++;
                    cr_assert_fail("%s [%d x %d]: pool row %d at index %d of a batch of %d (%d threads): out[%d] = %.9g, "
                            "alone %.9g",
                            emx_dtype_name(dtype), rows, cols, src, j, n, threads, r, got[r], want[r]);
                }
            }
        }
    }
    free(alone);
    free(out);
    rows_free(&pool);
    rows_free(&batch);
    rows_free(&one);
    free(data);
}

// cols: 96 (3 groups: tail only), 320 (one block of 8 groups + 2), 512 (two whole blocks);
// rows odd, 301 x 512 large enough to run on two threads even for n = 1.
static void check_dtype(uint32_t dtype) {
    check_matmul_invariance(dtype, 37, 96);
    check_matmul_invariance(dtype, 19, 320);
    check_matmul_invariance(dtype, 301, 512);
    if (!emx_dtype_wants_q8_acts(dtype)) check_matmul_invariance(dtype, 23, 75);  // float dots: any cols
}

Test(batch_invariance, matmul_f32, .timeout = 300) { check_dtype(EMX_F32); }
Test(batch_invariance, matmul_bf16, .timeout = 300) { check_dtype(EMX_BF16); }
Test(batch_invariance, matmul_f16, .timeout = 300) { check_dtype(EMX_F16); }
Test(batch_invariance, matmul_q8, .timeout = 300) { check_dtype(EMX_Q8); }
Test(batch_invariance, matmul_q4, .timeout = 300) { check_dtype(EMX_Q4); }
Test(batch_invariance, matmul_q4_1, .timeout = 300) { check_dtype(EMX_Q4_1); }
Test(batch_invariance, matmul_q4_1f, .timeout = 300) { check_dtype(EMX_Q4_1F); }

// The 4-row kernels against the single-row kernels: the decode kernel (four weight rows, one
// activation row) and the tile (four weight rows repacked, or read as they are; 27 activation
// rows: tiles of 16, 8, 4, 3, 2 and 1; the activations as rows or in blocks), at sizes with whole blocks of 8 groups, a partial
// block, and an odd count.
Test(batch_invariance, four_row_kernels_equal_dot) {
    if (!emx_quad_kernels_available()) cr_skip_test("this build has no 4-row kernels (they need AVX2)");
    static const int sizes[] = {32, 64, 96, 256, 320, 352, 576, 1024};
    enum { ROWS = 27 };
    uint64_t rng = 4242;
    for (size_t si = 0; si < 4 * sizeof(sizes) / sizeof(sizes[0]); si++) {
        const int n = sizes[si % (sizeof(sizes) / sizeof(sizes[0]))], ng = n / 32;
        Rows r = rows_new(ROWS, n, &rng);
        int32_t *xl = malloc((size_t)ROWS * (n / 8) * sizeof(int32_t));
        uint8_t *pack = aligned_alloc(64, emx_quad_pack_bytes(n) + 64), *blocks = malloc(emx_act_blocks_bytes(ROWS, n));
        cr_assert(xl && pack && blocks);
        for (int t = 0; t < ROWS; t++) emx_act_lane_sums(r.xq + (size_t)t * n, n, xl + (size_t)t * (n / 8));
        for (uint32_t dt = EMX_Q8; dt <= EMX_Q4_1F; dt++) {
            uint8_t *w = random_weights(dt, 4, n, &rng);  // quants [4][...], scales [4][ng], (mins [4][ng])
            const size_t row_bytes = dt == EMX_Q8 ? (size_t)n : (size_t)n / 2;
            const size_t table = (size_t)ng * (dt == EMX_Q4_1F ? sizeof(float) : sizeof(uint16_t));  // a row's scales
            const uint8_t *wd = w + 4 * row_bytes, *wm = wd + 4 * table;
            float tile[ROWS][4];  // [activation row][weight row]
            const EmxActs a = {.x = r.x, .xq = r.xq, .xd = r.xd, .xs = r.xs, .n = ROWS};
            emx_quad_pack(pack, dt, w, wd, n);
            emx_quad_tile(pack, dt, wm, &a, xl, NULL, n, 0, ROWS, &tile[0][0], 4);
            // the same tile from the activations in blocks (rows 0..23; 24..26 as they are)
            float blocked[ROWS][4];
            memset(blocked, 0xff, sizeof blocked);
            for (int b = 0; b < ROWS / EMX_ACT_BLOCK_ROWS; b++) emx_act_block(blocks, &a, xl, n, b);
            emx_quad_tile(pack, dt, wm, &a, xl, blocks, n, 0, ROWS, &blocked[0][0], 4);
            cr_assert(memcmp(blocked, tile, sizeof tile) == 0, "%s n=%d: the tile from blocks differs",
                      emx_dtype_name(dt), n);
            // the tile over the rows as they are, in runs of 2, 3, 1, 5 and 16 activation rows
            float direct[ROWS][4];
            memset(direct, 0xff, sizeof direct);
            static const int runs[][2] = {{0, 2}, {2, 3}, {5, 1}, {6, 5}, {11, 16}};
            for (int k = 0; k < 5; k++) emx_quad_direct(dt, w, wd, wm, &a, xl, n, runs[k][0], runs[k][1], &direct[0][0], 4);
            cr_assert(memcmp(direct, tile, sizeof tile) == 0, "%s n=%d: the direct tile differs from the packed one",
                      emx_dtype_name(dt), n);
            for (int t = 0; t < ROWS; t++) {
                float col[4];
                const int8_t *xq = r.xq + (size_t)t * n;
                const int32_t *xlt = xl + (size_t)t * (n / 8);
                const float *xd = r.xd + (size_t)t * ng, *xs = r.xs + (size_t)t * ng;
                if (dt == EMX_Q8) emx_dot4x1_q8((const int8_t *)w, (const void *)wd, xq, xlt, xd, n, col);
                else if (dt == EMX_Q4) emx_dot4x1_q4(w, (const void *)wd, xq, xlt, xd, xs, n, col);
                else if (dt == EMX_Q4_1) emx_dot4x1_q4_1(w, (const void *)wd, (const void *)wm, xq, xlt, xd, xs, n, col);
                else emx_dot4x1_q4_1f(w, (const void *)wd, (const void *)wm, xq, xlt, xd, xs, n, col);
                for (int k = 0; k < 4; k++) {
                    const uint8_t *wk = w + k * row_bytes;
                    const void *wdk = wd + k * table, *wmk = wm + k * table;
                    const float o1 = dt == EMX_Q8     ? emx_dot_q8((const int8_t *)wk, wdk, xq, xd, n)
                                     : dt == EMX_Q4   ? emx_dot_q4(wk, wdk, xq, xd, xs, n)
                                     : dt == EMX_Q4_1 ? emx_dot_q4_1(wk, wdk, wmk, xq, xd, xs, n)
                                                      : emx_dot_q4_1f(wk, wdk, wmk, xq, xd, xs, n);
                    cr_assert(memcmp(&tile[t][k], &o1, sizeof(float)) == 0, "%s n=%d weight row %d, row %d: tile %.9g, dot %.9g",
                              emx_dtype_name(dt), n, k, t, tile[t][k], o1);
                    cr_assert(memcmp(&col[k], &o1, sizeof(float)) == 0, "%s n=%d weight row %d, row %d: 4 x 1 %.9g, dot %.9g",
                              emx_dtype_name(dt), n, k, t, col[k], o1);
                }
            }
            free(w);
        }
        free(xl);
        free(pack);
        free(blocks);
        rows_free(&r);
    }
}

// ---------------------------------------------------------------------------------------------
// Whole models

#define PROMPT 13

// Opens build/models/<name>; false (after printing why) if it was not made.
static int open_model(const char *name, EmxModel *m, EmxState **s) {
    char path[512], rel[256], err[512];
    snprintf(rel, sizeof(rel), "models/%s", name);
    test_build_path(path, sizeof(path), rel);
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    fclose(f);
    cr_assert(emx_model_open(m, path, err, sizeof(err)) == 0, "%s", err);
    EmxStateOptions opt = {.n_threads = 2, .ctx = 64};
    *s = emx_state_new(m, &opt, err, sizeof(err));
    cr_assert(*s != NULL, "%s", err);
    return 1;
}

static void assert_same_logits(const float *got, const float *want, int vocab, const char *model, const char *what) {
    if (memcmp(got, want, (size_t)vocab * sizeof(float)) == 0) return;
    int v = 0;  // the first differing bits (-0 vs +0 counts)
    while (memcmp(&got[v], &want[v], sizeof(float)) == 0) v++;
    cr_assert_fail("%s: %s: logit %d is %.9g, one token at a time %.9g", model, what, v, got[v], want[v]);
}

// The prompt's ids: a fixed spread over the vocabulary (any ids do: only equality is checked).
static void prompt_ids(int *ids, int vocab) {
    for (int i = 0; i < PROMPT; i++) ids[i] = (int)((1 + (uint64_t)i * 2654435761u) % (uint64_t)vocab);
}

static void check_model(const char *name) {
    EmxModel m;
    EmxState *s;
    if (!open_model(name, &m, &s)) cr_skip_test("build/models/%s missing (make test-models converts it)", name);
    const int vocab = (int)m.cfg.vocab_size;
    int ids[PROMPT];
    prompt_ids(ids, vocab);
    float *step = malloc((size_t)PROMPT * vocab * sizeof(float));  // [PROMPT][vocab] one at a time, 2 threads
    float *all = malloc((size_t)PROMPT * vocab * sizeof(float));   // [PROMPT][vocab] emx_forward_all_logits
    float *last = malloc((size_t)vocab * sizeof(float));
    cr_assert(step && all && last);
    for (int i = 0; i < PROMPT; i++) {
        const float *l = emx_forward(s, &ids[i], 1, i);
        cr_assert(l);
        memcpy(step + (size_t)i * vocab, l, (size_t)vocab * sizeof(float));
    }
    const float *want = step + (size_t)(PROMPT - 1) * vocab;

    const float *l = emx_forward(s, ids, PROMPT, 0);
    cr_assert(l);
    assert_same_logits(l, want, vocab, name, "prefill of 13 tokens");
    cr_assert(emx_forward(s, ids, 5, 0));
    l = emx_forward(s, ids + 5, PROMPT - 5, 5);
    cr_assert(l);
    assert_same_logits(l, want, vocab, name, "prefill of 5 then 8 tokens");

    cr_assert(emx_forward_all_logits(s, ids, PROMPT, 0, all) == 0);
    for (int i = 0; i < PROMPT; i++) {
        char what[64];
        snprintf(what, sizeof(what), "emx_forward_all_logits row %d", i);
        assert_same_logits(all + (size_t)i * vocab, step + (size_t)i * vocab, vocab, name, what);
    }

    // one thread: a worker with another thread count gets the same bits
    emx_forward_set_threads(s, 1);
    for (int i = 0; i < PROMPT; i++) {
        l = emx_forward(s, &ids[i], 1, i);
        cr_assert(l);
        memcpy(last, l, (size_t)vocab * sizeof(float));
        char what[64];
        snprintf(what, sizeof(what), "position %d on 1 thread vs 2", i);
        assert_same_logits(last, step + (size_t)i * vocab, vocab, name, what);
    }
    l = emx_forward(s, ids, PROMPT, 0);
    cr_assert(l);
    assert_same_logits(l, want, vocab, name, "prefill on 1 thread");

    free(step);
    free(all);
    free(last);
    emx_state_free(s);
    emx_model_close(&m);
}

Test(batch_invariance, qwen3_tiny_f32, .timeout = 300) { check_model("qwen3-tiny.f32.bin"); }
Test(batch_invariance, qwen3_tiny_q8, .timeout = 300) { check_model("qwen3-tiny.q8.bin"); }
Test(batch_invariance, qwen3_tiny_q4, .timeout = 300) { check_model("qwen3-tiny.q4.bin"); }
Test(batch_invariance, qwen3_tiny_q4_1, .timeout = 300) { check_model("qwen3-tiny.q4_1.bin"); }
Test(batch_invariance, qwen3_tiny_q4_1f, .timeout = 300) { check_model("qwen3-tiny.q4_1f.bin"); }
Test(batch_invariance, llama3_tiny_f32, .timeout = 300) { check_model("llama3-tiny.f32.bin"); }
Test(batch_invariance, llama3_tiny_q8, .timeout = 300) { check_model("llama3-tiny.q8.bin"); }
Test(batch_invariance, llama3_tiny_q4, .timeout = 300) { check_model("llama3-tiny.q4.bin"); }
Test(batch_invariance, llama3_tiny_q4_1, .timeout = 300) { check_model("llama3-tiny.q4_1.bin"); }
Test(batch_invariance, llama3_tiny_q4_1f, .timeout = 300) { check_model("llama3-tiny.q4_1f.bin"); }
Test(batch_invariance, stories260K_q8, .timeout = 300) { check_model("stories260K.q8.bin"); }
// SmolLM2 (dim 576, hidden 1536): whole blocks of 8 groups and a tail in a real model; the
// model is optional data (tests/models_smollm2.mk)
Test(batch_invariance, smollm2_q8, .timeout = 300) { check_model("smollm2.q8.bin"); }
