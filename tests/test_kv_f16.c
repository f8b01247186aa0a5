// test_kv_f16.c — the CPU backend's f16 KV cache (EmxStateOptions.cache_type = EMX_KV_F16):
// keys and values rounded to f16 (nearest even) as they are written, widened exactly as they are
// read, everything else f32.
//   - its logits stay close to an f32 cache's (the bound below, measured), and differ from them;
//   - the cache holds exactly the f16 rounding of what an f32 cache holds where both computed
//     the same k and v (layer 0: its k and v depend on the token and position only);
//   - the invariance of the f32 cache holds for it bitwise: a prefill equals decoding token by
//     token, branches (batched, committed) equal their tokens fed alone, emx_forward_multi rows
//     (f16 and f32 states mixed) equal emx_forward on each state;
//   - kv_rows travel as f32 between f16 and f32 states (widened when read, rounded when written);
//   - ./run --cache-type f16 and bench speed --cache-type f16 run on the CPU and say so.
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/dtype.h"
#include "runtime/forward.h"
#include "runtime/pool/pool_forward.h"
#include "runtime/model.h"
#include "run_util.h"
#include "test_util.h"

#define CTX 64

static const int PROMPT[] = {1, 17, 42, 99, 7, 256, 300, 5, 11, 23, 64, 2};
#define N_PROMPT ((int)(sizeof PROMPT / sizeof PROMPT[0]))

static void open_model(EmxModel *m, const char *name) {
    char path[1024], rel[256], err[512];
    snprintf(rel, sizeof rel, "models/%s", name);
    test_build_path(path, sizeof path, rel);
    cr_assert_eq(emx_model_open(m, path, err, sizeof err), 0, "%s", err);
}

static EmxState *new_state(const EmxModel *m, EmxKvType type, int threads) {
    char err[512];
    EmxStateOptions so = {.n_threads = threads, .ctx = CTX, .device = "cpu", .cache_type = type};
    EmxState *s = emx_state_new(m, &so, err, sizeof err);
    cr_assert(s, "%s", err);
    EmxStateInfo info;
    emx_state_info(s, &info);
    cr_assert_eq(info.cache_type, type == EMX_KV_F16 ? EMX_KV_F16 : EMX_KV_F32, "cache type %d reported as %d",
                 type, info.cache_type);
    return s;
}

static int token_of(int i, int vocab) { return PROMPT[i % N_PROMPT] % vocab; }

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++) b = x[i] > x[b] ? i : b;
    return b;
}

static int same(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

// (a) A prefill of the prompt, then DECODE greedy steps (the f32 state's choices fed to both):
// the largest |logit difference| relative to the largest |logit| over all of them. Measured
// (AVX2 build, 1 thread; 13 positions): stories260K 9.3e-4 (0.016 of max |logit| 16.8),
// qwen3-tiny 5.8e-4 (0.015 of 26.1), llama3-tiny 1.05e-3 (0.029 of 27.3): f16 keeps 11
// significant bits (2^-12 = 2.4e-4 relative rounding per value), and these tiny random models
// amplify it through their layers. Bound: 5e-3, about 5x the largest. A bug that reads the
// wrong key or a zero row moves the logits by O(1) relative; bf16 instead of f16 (8 bits) moves
// them about 8x more than f16 does; no difference at all would mean nothing was rounded.
#define DECODE 8
static void check_close_to_f32(const char *name) {
    EmxModel m;
    open_model(&m, name);
    const int V = (int)m.cfg.vocab_size;
    EmxState *a = new_state(&m, EMX_KV_F32, 1), *b = new_state(&m, EMX_KV_F16, 1);
    int toks[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++) toks[i] = token_of(i, V);
    double max_diff = 0, max_abs = 0;
    const float *la = emx_forward(a, toks, N_PROMPT, 0), *lb = emx_forward(b, toks, N_PROMPT, 0);
    for (int step = 0;; step++) {
        cr_assert(la && lb);
        for (int i = 0; i < V; i++) {
            max_diff = fmax(max_diff, fabs((double)la[i] - lb[i]));
            max_abs = fmax(max_abs, fabs((double)la[i]));
        }
        if (step == DECODE) break;
        const int next = argmax(la, V);
        la = emx_forward(a, &next, 1, N_PROMPT + step);
        lb = emx_forward(b, &next, 1, N_PROMPT + step);
    }
    const double rel = max_diff / max_abs;
    cr_log_info("%s: f16 vs f32 cache: max |dlogit| %.3g, max |logit| %.3g, relative %.3g", name, max_diff, max_abs, rel);
    cr_expect(rel <= 5e-3, "%s: f16 cache logits %.3g (relative) from the f32 cache's", name, rel);
    cr_expect(max_diff > 0, "%s: f16 cache logits bitwise the f32 cache's: nothing rounded?", name);
    emx_state_free(a), emx_state_free(b);
    emx_model_close(&m);
}

// SmolLM2-135M's cache rows (3 KV heads x 64: 768 B in f32, 384 B in f16) are an even number of
// cache lines, padded by one in both types (cpu_state_new); the tiny models' f16 rows are not.
// The model is optional data (make weights, as test_smollm2.c): without it these tests skip.
static void smollm2_or_skip(void) {
    char path[1024];
    if (access(test_build_path(path, sizeof path, "models/smollm2.f32.bin"), R_OK) != 0)
        cr_skip_test("%s missing: needs `make weights`, then make %s (tests/models_smollm2.mk)", path, path);
}

Test(kv_f16, logits_close_to_f32_stories, .timeout = 300) { check_close_to_f32("stories260K.f32.bin"); }
Test(kv_f16, logits_close_to_f32_qwen3, .timeout = 300) { check_close_to_f32("qwen3-tiny.f32.bin"); }
Test(kv_f16, logits_close_to_f32_llama3, .timeout = 300) { check_close_to_f32("llama3-tiny.f32.bin"); }

// (b) Every cache value of an f16 state is an f16 value (emx_state_kv_cache widens exactly), and
// layer 0's rows, whose k and v depend on the token and position alone, are the f16 rounding of
// an f32 state's, bitwise.
static void check_cache_rounded(const char *name) {
    EmxModel m;
    open_model(&m, name);
    EmxState *a = new_state(&m, EMX_KV_F32, 0), *b = new_state(&m, EMX_KV_F16, 0);
    int toks[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++) toks[i] = token_of(i, (int)m.cfg.vocab_size);
    cr_assert(emx_forward(a, toks, N_PROMPT, 0) && emx_forward(b, toks, N_PROMPT, 0));
    float *ka, *va, *kb, *vb;
    int kv_dim;
    emx_state_kv_cache(a, &ka, &va, &kv_dim);
    emx_state_kv_cache(b, &kb, &vb, NULL);
    cr_assert(ka && va && kb && vb);
    const size_t layer = (size_t)CTX * kv_dim, rows = (size_t)N_PROMPT * kv_dim;
    int rounded = 0;  // values the rounding changed: some must be
    for (size_t l = 0; l < m.cfg.n_layers; l++)
        for (size_t i = 0; i < rows; i++) {
            const float k = kb[l * layer + i], v = vb[l * layer + i];
            cr_assert(emx_f16_to_f32(emx_f32_to_f16(k)) == k && emx_f16_to_f32(emx_f32_to_f16(v)) == v,
                      "%s: layer %zu element %zu: %.9g / %.9g not an f16 value", name, l, i, k, v);
        }
    for (size_t i = 0; i < rows; i++) {
        const float rk = emx_f16_to_f32(emx_f32_to_f16(ka[i])), rv = emx_f16_to_f32(emx_f32_to_f16(va[i]));
        cr_assert(memcmp(&rk, &kb[i], 4) == 0 && memcmp(&rv, &vb[i], 4) == 0,
                  "%s: layer 0 element %zu: f16 cache %.9g / %.9g, f32 cache rounded %.9g / %.9g", name, i, kb[i],
                  vb[i], rk, rv);
        rounded += ka[i] != kb[i];
    }
    cr_expect(rounded > 0, "%s: no layer-0 value changed by rounding", name);
    emx_state_free(a), emx_state_free(b);
    emx_model_close(&m);
}

Test(kv_f16, cache_is_rounded_f32_stories, .timeout = 300) { check_cache_rounded("stories260K.f32.bin"); }
Test(kv_f16, cache_is_rounded_f32_qwen3, .timeout = 300) { check_cache_rounded("qwen3-tiny.f32.bin"); }
Test(kv_f16, cache_is_rounded_f32_llama3, .timeout = 300) { check_cache_rounded("llama3-tiny.f32.bin"); }
Test(kv_f16, cache_is_rounded_f32_smollm2_padded_rows, .timeout = 300) {
    smollm2_or_skip();
    check_cache_rounded("smollm2.f32.bin");
}

// (c) The f16 cache's invariance: a prefill equals token-by-token decoding; N_BR branches of
// STEPS steps (batched) equal each branch's tokens fed alone; a committed branch leaves the cache
// and the next logits those of feeding its tokens one by one.
#define N_BR 4
#define STEPS 3
static int branch_token(int b, int j, int vocab) { return (31 * b + 7 * j + 3) % vocab; }

static void check_branches(const char *name, int threads) {
    EmxModel m;
    open_model(&m, name);
    const int V = (int)m.cfg.vocab_size;
    const size_t VS = (size_t)V;
    int toks[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++) toks[i] = token_of(i, V);
    EmxState *ref = new_state(&m, EMX_KV_F16, threads), *s = new_state(&m, EMX_KV_F16, threads);
    // prefill (s) against token by token (ref)
    const float *lp = emx_forward(s, toks, N_PROMPT, 0), *lr = NULL;
    for (int i = 0; i < N_PROMPT; i++) lr = emx_forward(ref, &toks[i], 1, i);
    cr_assert(lp && lr && same(lp, lr, VS), "%s: f16 prefill differs from decoding token by token", name);
    // each branch alone on ref, by rollback to the prefix
    float *alone = malloc((size_t)N_BR * STEPS * VS * sizeof(float)), *lg = malloc((size_t)N_BR * VS * sizeof(float));
    cr_assert(alone && lg);
    for (int b = 0; b < N_BR; b++)
        for (int j = 0; j < STEPS; j++) {
            const int t = branch_token(b, j, V);
            const float *l = emx_forward(ref, &t, 1, N_PROMPT + j);
            cr_assert(l);
            memcpy(alone + ((size_t)b * STEPS + j) * VS, l, VS * sizeof(float));
        }
    char err[256];
    cr_assert_eq(emx_state_branches_reserve(s, N_BR, STEPS, err, sizeof err), 0, "%s", err);
    for (int j = 0; j < STEPS; j++) {
        int bt[N_BR];
        for (int b = 0; b < N_BR; b++) bt[b] = branch_token(b, j, V);
        cr_assert_eq(emx_forward_branches(s, bt, N_BR, N_PROMPT, j, lg), 0);
        for (int b = 0; b < N_BR; b++)
            cr_assert(same(lg + (size_t)b * VS, alone + ((size_t)b * STEPS + j) * VS, VS),
                      "%s (%d threads): branch %d step %d differs from the branch alone", name, threads, b, j);
    }
    // commit branch 2, then one more token: the cache and logits of feeding branch 2 alone
    const int keep = 2, next = 5 % V;
    cr_assert_eq(emx_branch_commit(s, keep, STEPS, N_PROMPT), 0);
    for (int j = 0; j < STEPS; j++) {
        const int t = branch_token(keep, j, V);
        cr_assert(emx_forward(ref, &t, 1, N_PROMPT + j));
    }
    lr = emx_forward(ref, &next, 1, N_PROMPT + STEPS);
    lp = emx_forward(s, &next, 1, N_PROMPT + STEPS);
    cr_assert(lr && lp && same(lr, lp, VS), "%s: next token after a commit differs", name);
    float *k1, *v1, *k2, *v2;
    int kv_dim;
    emx_state_kv_cache(s, &k1, &v1, &kv_dim);
    emx_state_kv_cache(ref, &k2, &v2, NULL);
    for (size_t l = 0; l < m.cfg.n_layers; l++) {
        const size_t at = l * CTX * kv_dim, n = (size_t)(N_PROMPT + STEPS + 1) * kv_dim;
        cr_assert(same(k1 + at, k2 + at, n) && same(v1 + at, v2 + at, n), "%s: layer %zu cache after commit", name, l);
    }
    free(alone), free(lg);
    emx_state_free(ref), emx_state_free(s);
    emx_model_close(&m);
}

Test(kv_f16, branches_bitwise_qwen3, .timeout = 300) { check_branches("qwen3-tiny.f32.bin", 1); }
Test(kv_f16, branches_bitwise_qwen3_threads, .timeout = 300) { check_branches("qwen3-tiny.f32.bin", 2); }
Test(kv_f16, branches_bitwise_llama3, .timeout = 300) { check_branches("llama3-tiny.f32.bin", 1); }

// emx_forward_multi over three states at different positions (f16, f32, f16: each row written
// and read in its own state's type) against emx_forward on twins of each, for several steps.
static void check_multi(const char *name) {
    EmxModel m;
    open_model(&m, name);
    const int V = (int)m.cfg.vocab_size;
    const size_t VS = (size_t)V;
    const EmxKvType types[3] = {EMX_KV_F16, EMX_KV_F32, EMX_KV_F16};
    EmxState *multi[3], *alone[3];
    int at[3];
    for (int i = 0; i < 3; i++) {
        multi[i] = new_state(&m, types[i], 1), alone[i] = new_state(&m, types[i], 1);
        int toks[N_PROMPT];
        at[i] = 3 + 4 * i;  // prompts of 3, 7, 11 tokens
        for (int t = 0; t < at[i]; t++) toks[t] = token_of(t + i, V);
        cr_assert(emx_forward(multi[i], toks, at[i], 0) && emx_forward(alone[i], toks, at[i], 0));
    }
    for (int step = 0; step < 4; step++) {
        int toks[3];
        const float *lg[3];
        for (int i = 0; i < 3; i++) toks[i] = branch_token(i, step, V);
        cr_assert_eq(emx_forward_multi(multi, toks, at, 3, lg), 0, "%s", emx_state_error(multi[0]));
        for (int i = 0; i < 3; i++) {
            const float *l = emx_forward(alone[i], &toks[i], 1, at[i]);
            cr_assert(l && same(l, lg[i], VS), "%s: step %d row %d (%s cache) differs from emx_forward", name, step, i,
                      emx_kv_type_name(types[i]));
            at[i]++;
        }
    }
    for (int i = 0; i < 3; i++) emx_state_free(multi[i]), emx_state_free(alone[i]);
    emx_model_close(&m);
}

Test(kv_f16, forward_multi_bitwise_qwen3, .timeout = 300) { check_multi("qwen3-tiny.f32.bin"); }
Test(kv_f16, forward_multi_bitwise_stories, .timeout = 300) { check_multi("stories260K.f32.bin"); }

// (d) kv_rows between an f16 and an f32 state: f32 in the buffer both ways. Rows read from an f16
// state, written to an f32 state and read back, are the same bits; written to another f16 state,
// the same cache (its next logits equal the source's); rows of an f32 state written to an f16
// state read back as their f16 rounding.
Test(kv_f16, kv_rows_between_f16_and_f32, .timeout = 300) {
    EmxModel m;
    open_model(&m, "qwen3-tiny.f32.bin");
    const int V = (int)m.cfg.vocab_size;
    int toks[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++) toks[i] = token_of(i, V);
    EmxState *h = new_state(&m, EMX_KV_F16, 1), *f = new_state(&m, EMX_KV_F32, 1);
    EmxState *h2 = new_state(&m, EMX_KV_F16, 1);
    cr_assert(emx_forward(h, toks, N_PROMPT, 0) && emx_forward(f, toks, N_PROMPT, 0));
    const size_t bytes = emx_state_kv_rows_bytes(h, N_PROMPT), nf = bytes / sizeof(float);
    cr_assert_eq(bytes, emx_state_kv_rows_bytes(f, N_PROMPT), "the row format is f32 whatever the cache");
    float *buf = malloc(bytes), *back = malloc(bytes), *fb = malloc(bytes);
    cr_assert(buf && back && fb);
    cr_assert_eq(emx_state_kv_rows_read(h, 0, N_PROMPT, buf), 0);
    for (size_t i = 0; i < nf; i++)
        cr_assert(emx_f16_to_f32(emx_f32_to_f16(buf[i])) == buf[i], "f16 rows read: %.9g not an f16 value", buf[i]);
    // f16 -> f32 state -> read back: the same bits
    EmxState *g = new_state(&m, EMX_KV_F32, 1);
    cr_assert_eq(emx_state_kv_rows_write(g, 0, N_PROMPT, buf), 0);
    cr_assert_eq(emx_state_kv_rows_read(g, 0, N_PROMPT, back), 0);
    cr_assert(same(buf, back, nf), "f16 rows through an f32 state changed");
    // f16 -> f16 state: the same cache, so the same next logits
    cr_assert_eq(emx_state_kv_rows_write(h2, 0, N_PROMPT, buf), 0);
    const int next = 9 % V;
    float *l1 = malloc((size_t)V * sizeof(float));
    cr_assert(l1);
    const float *l = emx_forward(h, &next, 1, N_PROMPT);
    cr_assert(l);
    memcpy(l1, l, (size_t)V * sizeof(float));
    l = emx_forward(h2, &next, 1, N_PROMPT);
    cr_assert(l && same(l, l1, (size_t)V), "f16 rows written to another f16 state: different logits");
    // f32 -> f16 state: read back as the f16 rounding
    cr_assert_eq(emx_state_kv_rows_read(f, 0, N_PROMPT, fb), 0);
    cr_assert_eq(emx_state_kv_rows_write(h2, 0, N_PROMPT, fb), 0);
    cr_assert_eq(emx_state_kv_rows_read(h2, 0, N_PROMPT, back), 0);
    int changed = 0;
    for (size_t i = 0; i < nf; i++) {
        const float r = emx_f16_to_f32(emx_f32_to_f16(fb[i]));
        cr_assert(memcmp(&r, &back[i], 4) == 0, "f32 row %zu into an f16 state: %.9g, want %.9g", i, back[i], r);
        changed += fb[i] != back[i];
    }
    cr_expect(changed > 0, "f32 rows into an f16 state: none rounded");
    cr_expect_eq(emx_state_kv_rows_write(h2, CTX - 1, 2, fb), -1, "rows past the context");
    free(buf), free(back), free(fb), free(l1);
    emx_state_free(h), emx_state_free(f), emx_state_free(g), emx_state_free(h2);
    emx_model_close(&m);
}

// (e) The CLI: ./run --cache-type f16 on the CPU prints greedy text and exits 0; bench speed
// says which cache it measured.
Test(kv_f16, run_and_bench_cli, .timeout = 300) {
    char mp[1024], bin[1024];
    test_build_path(mp, sizeof mp, "models/stories260K.f32.bin");
    RunResult r = run((const char *[]){mp, "--cache-type", "f16", "--device", "cpu", "--temp", "0", "-n", "40", "-t",
                                       "1", NULL});
    cr_assert_eq(r.code, 0, "run --cache-type f16: exit %d: %s", r.code, r.err);
    cr_expect(strlen(r.out) > 20, "run --cache-type f16 printed %zu bytes: '%s'", strlen(r.out), r.out);
    run_free(&r);
    test_build_path(bin, sizeof bin, "cpu/tools/bench");
    if (access(bin, X_OK) != 0) cr_assert_fail("%s is not built", bin);
    const char *types[2] = {"f16", "f32"};
    for (int i = 0; i < 2; i++) {
        r = run_prog(bin, (const char *[]){"speed", mp, "--cache-type", types[i], "-p", "8", "-n", "4", "--runs", "1",
                                           "--device", "cpu", "-t", "1", NULL});
        cr_assert_eq(r.code, 0, "bench --cache-type %s: exit %d: %s", types[i], r.code, r.err);
        char want[32];
        snprintf(want, sizeof want, "%s KV cache", types[i]);
        cr_expect(strstr(r.err, want) != NULL, "bench --cache-type %s: no '%s' in: %s", types[i], want, r.err);
        run_free(&r);
    }
}
