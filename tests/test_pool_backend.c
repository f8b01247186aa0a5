// test_pool_backend.c — a backend without the agent pool's extension (runtime/pool/pool_backend.h):
// its single-sequence calls run, the pool's calls do what runtime/pool/pool_forward.h says a
// backend without it gets, and the agent pool and the branching decoder refuse it in one line
// naming the backend. The fake backend is a table of forward_backend.h with `pool` NULL whose
// forward returns a fixed row of logits.
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "test_util.h"
#include "runtime/branch/branch_decode.h"
#include "runtime/forward_backend.h"
#include "runtime/pool/pool_forward.h"

#define VOCAB 4

typedef struct {
    EmxState base;
    float logits[VOCAB];
    int forwards;  // calls of fake_forward
} FakeState;

static void fake_free(EmxState *s) { (void)s; }
static int fake_ctx(const EmxState *s) { return (void)s, 16; }
static void fake_threads(EmxState *s, int n) { (void)s, (void)n; }
static const char *fake_error(const EmxState *s) { return (void)s, "fake"; }
static void fake_info(const EmxState *s, EmxStateInfo *info) {
    (void)s;
    *info = (EmxStateInfo){.device = "fake", .vocab = VOCAB, .cache_type = EMX_KV_F32};
}
static const float *fake_forward(EmxState *st, const int *tokens, int n, int pos) {
    (void)tokens, (void)n, (void)pos;
    FakeState *s = (FakeState *)st;
    s->forwards++;
    return s->logits;
}
static int fake_all_logits(EmxState *s, const int *tokens, int n, int pos, float *logits) {
    (void)s, (void)tokens, (void)n, (void)pos, (void)logits;
    return -1;
}
static const float *fake_scores(const EmxState *s, int *last_pos) { return (void)s, (void)last_pos, NULL; }
static void fake_kv(EmxState *s, float **k, float **v, int *kv_dim) { (void)s, (void)k, (void)v, (void)kv_dim; }

static const EmxBackend FAKE = {
    .name = "fake",
    .free = fake_free,
    .ctx = fake_ctx,
    .set_threads = fake_threads,
    .error = fake_error,
    .info = fake_info,
    .forward = fake_forward,
    .forward_all_logits = fake_all_logits,
    .attention_scores = fake_scores,
    .kv_cache = fake_kv,
};

static FakeState fake_state(void) { return (FakeState){.base = {.backend = &FAKE}, .logits = {1, 3, 2, 0}}; }

Test(pool_backend, the_pool_and_the_branching_decoder_name_the_backend_without_it) {
    FakeState f = fake_state();
    char err[256] = "";
    cr_assert_eq(emx_pool_require(&f.base, "the agent pool", err, sizeof err), -1);
    cr_expect_str_eq(err, "the agent pool needs branch passes and KV row copies (runtime/pool/pool_backend.h); "
                          "backend fake has none");
    EmxBranchParams bp = emx_branch_params_default();
    EmxGenerateOptions go = {.n_predict = 4};
    EmxBranchResult r;
    EmxGenerateStats stats;
    const int prompt[2] = {1, 2};
    err[0] = 0;
    cr_assert_eq(emx_branch_decode(&f.base, NULL, prompt, 2, &bp, &go, &r, &stats, err, sizeof err), -1);
    cr_expect_str_eq(err, "the branching decoder needs branch passes and KV row copies "
                          "(runtime/pool/pool_backend.h); backend fake has none");
    cr_expect_eq(f.forwards, 0, "the decoder ran the model before refusing");
    err[0] = 0;
    cr_assert_eq(emx_state_branches_reserve(&f.base, 2, 3, err, sizeof err), -1);
    cr_expect_str_eq(err, "branches: backend fake has no branch passes (runtime/pool/pool_backend.h)");
}

Test(pool_backend, calls_without_the_extension) {
    FakeState f = fake_state();
    EmxAgentParams agents[2] = {0};
    EmxProposal props[2];
    float logits[2 * VOCAB];
    const int toks[2] = {0, 1};
    // the proposals: 0, nothing run (the caller proposes from the logits it has)
    cr_expect_eq(emx_state_propose(&f.base, agents, 2, 1, 0, 0, -1, props), 0);
    cr_expect_eq(emx_forward_propose(&f.base, 1, 0, agents, 2, 1, 0, 0, -1, props), 0);
    cr_expect_eq(emx_forward_lookahead_propose(&f.base, 1, 0, agents, 2, 1, 0, 0, -1, 2, props), 0);
    cr_expect_eq(emx_forward_branches_propose(&f.base, toks, 2, 1, 0, agents, 1, 0, 0, props), 0);
    cr_expect_eq(f.forwards, 0);
    // branches and KV rows: refused
    cr_expect_eq(emx_forward_branches(&f.base, toks, 2, 1, 0, logits), -1);
    cr_expect_eq(emx_branch_commit(&f.base, 0, 1, 1), -1);
    cr_expect_eq(emx_state_kv_rows_bytes(&f.base, 1), 0);
    cr_expect_eq(emx_state_kv_rows_read(&f.base, 0, 1, logits), -1);
    cr_expect_eq(emx_state_kv_rows_write(&f.base, 0, 1, logits), -1);
    emx_state_branches_release(&f.base);  // nothing to release, and no table to call
    // the pair pass: emx_forward, then the pair from the host row {1, 3, 2, 0}: logits[1] = 3,
    // logits[2] = 2, max 3, sum e^-2 + e^0 + e^-1 + e^-3
    EmxLogitPair pair;
    cr_assert_eq(emx_forward_pair(&f.base, toks, 1, 0, 1, 2, &pair), 0);
    cr_expect_eq(f.forwards, 1);
    cr_expect(pair.logit_a == 3.0f && pair.logit_b == 2.0f && pair.max == 3.0f, "pair %g %g max %g", pair.logit_a,
              pair.logit_b, pair.max);
    const double sum = exp(-2.0) + 1.0 + exp(-1.0) + exp(-3.0);
    cr_expect(fabs(pair.sum - sum) < 1e-12, "sum %.15g, want %.15g", pair.sum, sum);
    cr_expect_eq(emx_forward_pair(&f.base, toks, 1, 0, 1, VOCAB, &pair), -1, "an id outside the vocabulary");
    cr_expect_eq(f.forwards, 1, "the pair ran the model on a bad id");
}

// The CPU backend provides the extension.
Test(pool_backend, the_cpu_has_it) {
    char path[512], err[256] = "";
    test_build_path(path, sizeof path, "models/stories260K.f32.bin");
    EmxModel m;
    cr_assert_eq(emx_model_open(&m, path, err, sizeof err), 0, "%s (make test-models)", err);
    EmxStateOptions so = {.n_threads = 1, .ctx = 32};
    EmxState *s = emx_state_new(&m, &so, err, sizeof err);
    cr_assert(s, "%s", err);
    cr_expect_eq(emx_pool_require(s, "the agent pool", err, sizeof err), 0, "%s", err);
    cr_expect_eq(emx_state_branches_reserve(s, 2, 3, err, sizeof err), 0, "%s", err);
    emx_state_free(s);
    emx_model_close(&m);
}
