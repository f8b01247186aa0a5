// test_branches.c — the agent pool's forward-pass machinery (forward.h "Branches"): a batched
// pass over N branches gives each branch bitwise the logits of running its tokens alone; a
// committed branch leaves the cache exactly as feeding its tokens one by one would; a rollback
// gives bitwise the logits first computed at that position, and a fresh prefill of the kept
// text; KV rows moved between replicas (the multi-worker commit) change nothing.
//
// Bitwise equality holds because a matmul row's result does not depend on the batch it is in
// (runtime/cpu/cpu_matmul.h) and the attention visits prefix and tail keys in cache order.
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/forward.h"
#include "runtime/pool/pool_forward.h"
#include "runtime/model.h"
#include "test_util.h"

#define N_BRANCH 5
#define STEPS 4

typedef struct {
    EmxModel m;
    int vocab;
} Loaded;

static void load(Loaded *l, const char *name) {
    char path[1024], err[512];
    char rel[256];
    snprintf(rel, sizeof rel, "models/%s", name);
    test_build_path(path, sizeof path, rel);
    cr_assert_eq(emx_model_open(&l->m, path, err, sizeof err), 0, "%s", err);
    l->vocab = (int)l->m.cfg.vocab_size;
}

static EmxState *state(Loaded *l, int threads) {
    char err[512];
    EmxStateOptions so = {.n_threads = threads, .ctx = 64};
    EmxState *s = emx_state_new(&l->m, &so, err, sizeof err);
    cr_assert(s, "%s", err);
    return s;
}

static const int PROMPT[] = {1, 17, 42, 99, 7, 256, 300, 5, 11};
#define N_PROMPT ((int)(sizeof PROMPT / sizeof PROMPT[0]))

// Branch b's token at step j: distinct per branch, inside every test vocabulary.
static int branch_token(int b, int j, int vocab) { return (31 * b + 7 * j + 3) % vocab; }

static int same_floats(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

// Branch logits of every step (batched) against each branch fed alone, token by token.
static void check_batched_equals_alone(const char *name, int threads) {
    Loaded l;
    load(&l, name);
    const size_t V = (size_t)l.vocab;
    EmxState *s = state(&l, threads);
    char err[256];
    cr_assert_eq(emx_state_branches_reserve(s, N_BRANCH, STEPS, err, sizeof err), 0, "%s", err);
    cr_assert(emx_forward(s, PROMPT, N_PROMPT, 0));
    float *batched = malloc((size_t)STEPS * N_BRANCH * V * sizeof(float));  // [step][branch][vocab]
    for (int j = 0; j < STEPS; j++) {
        int toks[N_BRANCH];
        for (int b = 0; b < N_BRANCH; b++) toks[b] = branch_token(b, j, l.vocab);
        cr_assert_eq(emx_forward_branches(s, toks, N_BRANCH, N_PROMPT, j, batched + (size_t)j * N_BRANCH * V), 0);
    }
    // alone: a fresh sequence per branch (other thread count, too), and a one-branch batch
    EmxState *alone = state(&l, threads == 1 ? 2 : 1);
    EmxState *one = state(&l, threads);
    cr_assert_eq(emx_state_branches_reserve(one, 1, STEPS, err, sizeof err), 0, "%s", err);
    cr_assert(emx_forward(one, PROMPT, N_PROMPT, 0));
    float *single = malloc(V * sizeof(float));
    for (int b = 0; b < N_BRANCH; b++) {
        cr_assert(emx_forward(alone, PROMPT, N_PROMPT, 0));
        for (int j = 0; j < STEPS; j++) {
            int t = branch_token(b, j, l.vocab);
            const float *lg = emx_forward(alone, &t, 1, N_PROMPT + j);
            cr_assert(lg);
            const float *mine = batched + ((size_t)j * N_BRANCH + b) * V;
            cr_expect(same_floats(lg, mine, V), "%s: branch %d step %d: batched != alone", name, b, j);
            cr_assert_eq(emx_forward_branches(one, &t, 1, N_PROMPT, j, single), 0);
            cr_expect(same_floats(single, mine, V), "%s: branch %d step %d: batch of 5 != batch of 1", name, b, j);
        }
    }
    free(single);
    free(batched);
    emx_state_free(one);
    emx_state_free(alone);
    emx_state_free(s);
    emx_model_close(&l.m);
}

Test(branches, batched_equals_alone_qwen3_f32, .timeout = 300) { check_batched_equals_alone("qwen3-tiny.f32.bin", 2); }
Test(branches, batched_equals_alone_qwen3_q8, .timeout = 300) { check_batched_equals_alone("qwen3-tiny.q8.bin", 2); }
Test(branches, batched_equals_alone_qwen3_q4, .timeout = 300) { check_batched_equals_alone("qwen3-tiny.q4.bin", 1); }
Test(branches, batched_equals_alone_llama3_q4_1, .timeout = 300) { check_batched_equals_alone("llama3-tiny.q4_1.bin", 2); }
Test(branches, batched_equals_alone_stories_q8, .timeout = 300) { check_batched_equals_alone("stories260K.q8.bin", 1); }
// Gemma 3: local layers with a window of 8 over a 9-token prefix and the branches' own steps
Test(branches, batched_equals_alone_gemma3_q8, .timeout = 300) { check_batched_equals_alone("gemma3-tiny.q8.bin", 2); }

// Commit, KV transfer to another replica, rollback into the committed branch, fresh prefill.
static void check_commit_and_rollback(const char *name) {
    Loaded l;
    load(&l, name);
    const size_t V = (size_t)l.vocab;
    char err[256];
    EmxState *s = state(&l, 2);
    cr_assert_eq(emx_state_branches_reserve(s, N_BRANCH, STEPS, err, sizeof err), 0, "%s", err);
    cr_assert(emx_forward(s, PROMPT, N_PROMPT, 0));
    float *blog = malloc((size_t)(STEPS - 1) * N_BRANCH * V * sizeof(float));
    for (int j = 0; j < STEPS - 1; j++) {  // as the pool does: L - 1 passes, the last token fed normally
        int toks[N_BRANCH];
        for (int b = 0; b < N_BRANCH; b++) toks[b] = branch_token(b, j, l.vocab);
        cr_assert_eq(emx_forward_branches(s, toks, N_BRANCH, N_PROMPT, j, blog + (size_t)j * N_BRANCH * V), 0);
    }
    const int win = 3;
    int seq[N_PROMPT + STEPS];
    memcpy(seq, PROMPT, sizeof PROMPT);
    for (int j = 0; j < STEPS; j++) seq[N_PROMPT + j] = branch_token(win, j, l.vocab);
    const int n = N_PROMPT + STEPS;

    // a second replica that only saw the prompt receives the committed rows
    EmxState *r2 = state(&l, 1);
    cr_assert(emx_forward(r2, PROMPT, N_PROMPT, 0));
    cr_assert_eq(emx_branch_commit(s, win, STEPS - 1, N_PROMPT), 0);
    void *rows = malloc(emx_state_kv_rows_bytes(s, STEPS - 1));
    cr_assert_eq(emx_state_kv_rows_read(s, N_PROMPT, STEPS - 1, rows), 0);
    cr_assert_eq(emx_state_kv_rows_write(r2, N_PROMPT, STEPS - 1, rows), 0);
    float *after = malloc(V * sizeof(float));
    memcpy(after, emx_forward(s, &seq[n - 1], 1, n - 1), V * sizeof(float));
    cr_expect(same_floats(emx_forward(r2, &seq[n - 1], 1, n - 1), after, V), "%s: replica after KV transfer", name);

    // the same tokens fed one at a time, and as one prefill
    EmxState *seqst = state(&l, 1);
    cr_assert(emx_forward(seqst, seq, N_PROMPT, 0));
    for (int p = N_PROMPT; p < n; p++) {
        const float *lg = emx_forward(seqst, &seq[p], 1, p);
        if (p < n - 1)  // position p's logits were computed in the branch pass of step p - N_PROMPT
            cr_expect(same_floats(lg, blog + ((size_t)(p - N_PROMPT) * N_BRANCH + win) * V, V),
                      "%s: sequential position %d != branch pass", name, p);
        else
            cr_expect(same_floats(lg, after, V), "%s: sequential last != commit + forward", name);
    }
    float *kc, *vc, *kc2, *vc2;
    int kv_dim;
    emx_state_kv_cache(s, &kc, &vc, &kv_dim);
    emx_state_kv_cache(seqst, &kc2, &vc2, NULL);
    for (int layer = 0; layer < (int)l.m.cfg.n_layers; layer++) {
        const size_t at = (size_t)layer * 64 * kv_dim;  // ctx 64
        cr_expect(same_floats(kc + at, kc2 + at, (size_t)n * kv_dim), "%s: keys of layer %d", name, layer);
        cr_expect(same_floats(vc + at, vc2 + at, (size_t)n * kv_dim), "%s: values of layer %d", name, layer);
    }
    // rollback into the committed branch: keep N_PROMPT + 2 tokens
    const int keep = N_PROMPT + 2;
    const float *rb = emx_forward(s, &seq[keep - 1], 1, keep - 1);
    cr_expect(same_floats(rb, blog + ((size_t)1 * N_BRANCH + win) * V, V), "%s: rollback != first computation", name);
    EmxState *fresh = state(&l, 2);
    cr_expect(same_floats(emx_forward(fresh, seq, keep, 0), rb, V), "%s: rollback != fresh prefill of the kept text",
              name);
    // and a single-stream rollback to the end of the prompt gives the prefill's logits
    float *prefill = malloc(V * sizeof(float));
    memcpy(prefill, emx_forward(fresh, PROMPT, N_PROMPT, 0), V * sizeof(float));
    cr_expect(same_floats(emx_forward(s, &PROMPT[N_PROMPT - 1], 1, N_PROMPT - 1), prefill, V),
              "%s: rollback to the prompt != its prefill", name);
    free(prefill);
    free(rows);
    free(after);
    free(blog);
    emx_state_free(fresh);
    emx_state_free(seqst);
    emx_state_free(r2);
    emx_state_free(s);
    emx_model_close(&l.m);
}

Test(branches, commit_rollback_qwen3_f32, .timeout = 300) { check_commit_and_rollback("qwen3-tiny.f32.bin"); }
Test(branches, commit_rollback_qwen3_q8, .timeout = 300) { check_commit_and_rollback("qwen3-tiny.q8.bin"); }
Test(branches, commit_rollback_llama3_q4, .timeout = 300) { check_commit_and_rollback("llama3-tiny.q4.bin"); }
Test(branches, commit_rollback_gemma3_f32, .timeout = 300) { check_commit_and_rollback("gemma3-tiny.f32.bin"); }

Test(branches, bad_calls, .timeout = 300) {
    Loaded l;
    load(&l, "qwen3-tiny.f32.bin");
    EmxState *s = state(&l, 1);
    char err[256] = "";
    int t[2] = {1, 2};
    float *out = malloc(2 * (size_t)l.vocab * sizeof(float));
    cr_assert(emx_forward(s, PROMPT, N_PROMPT, 0));
    cr_expect_eq(emx_forward_branches(s, t, 1, N_PROMPT, 0, out), -1, "no tails reserved");
    cr_expect_eq(emx_state_branches_reserve(s, 100000, 4, err, sizeof err), -1);
    cr_expect(strstr(err, "100000 branches"), "message: %s", err);
    cr_assert_eq(emx_state_branches_reserve(s, 2, 2, err, sizeof err), 0, "%s", err);
    cr_expect_eq(emx_forward_branches(s, t, 3, N_PROMPT, 0, out), -1, "more branches than reserved");
    cr_expect_eq(emx_forward_branches(s, t, 2, N_PROMPT, 2, out), -1, "step past the tail");
    cr_expect_eq(emx_forward_branches(s, t, 2, 63, 1, out), -1, "past the context");
    int bad[2] = {1, l.vocab};
    cr_expect_eq(emx_forward_branches(s, bad, 2, N_PROMPT, 0, out), -1, "token out of range");
    cr_expect_eq(emx_forward_branches(s, t, 2, N_PROMPT, 0, out), 0);
    cr_expect_eq(emx_branch_commit(s, 2, 1, N_PROMPT), -1, "branch out of range");
    cr_expect_eq(emx_branch_commit(s, 0, 3, N_PROMPT), -1, "more steps than the tail");
    cr_expect_eq(emx_state_kv_rows_read(s, 60, 5, out), -1, "rows past the context");
    free(out);
    emx_state_free(s);
    emx_model_close(&l.m);
}
