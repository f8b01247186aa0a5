// test_forward_ref.c — the reference forward pass (runtime/reference/forward_ref.c):
//   ref_*  the reference against the independent references in ../shared/testdata (llama2.c's
//          greedy text and a float64 numpy forward for stories260K; numpy and llama.cpp logits
//          for the tiny Qwen3 / Llama 3 models; tests/data/smollm2 for SmolLM2 when present);
//   cpu_*  the fast CPU backend (emx_forward) against the reference, position by position, on
//          every test model of build/models: prefill (one batched pass, every position's logits
//          and the last position's attention scores) and decode (one token per call, logits and
//          scores at every position).
// The CUDA backend is compared with the reference in tests/kernels/test_forward_cuda_ref.cpp.
//
// Tolerances, reference vs testdata (max |Δlogit|; logits lie in about ±30): those the testdata
// README gives for an f32 runtime, as tests/test_forward.c uses for the fast path: stories260K
// 1e-4 (numpy vs llama.cpp differ by 9.1e-6); tiny models 2e-4 up to 32 tokens, 1e-3 for the
// 410-token prompt; SmolLM2 5e-4 (test_smollm2.c: 10x llama.cpp F32 vs numpy). Greedy ids equal.
//
// Tolerances, fast CPU vs reference: see CPU_TOL below, per weight type.
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/forward.h"
#include "runtime/model.h"
#include "runtime/reference/forward_ref.h"
#include "test_util.h"
#include "test_ref_util.h"

// ---------------------------------------------------------------------------------------------
// Helpers

// Opens build/models/<name>; skips the test if the file was not made.
static void open_model(const char *name, EmxModel *m) {
    char path[512], rel[256], err[512];
    snprintf(rel, sizeof rel, "models/%s", name);
    test_build_path(path, sizeof path, rel);
    FILE *f = fopen(path, "rb");
    if (!f) cr_skip_test("%s missing (make test-models converts it)", path);
    fclose(f);
    cr_assert(emx_model_open(m, path, err, sizeof err) == 0, "%s", err);
}

static RefModel *ref_open(const EmxModel *m) {
    char err[512];
    RefModel *rm = ref_model_new(m, err, sizeof err);
    cr_assert(rm != NULL, "%s", err);
    return rm;
}

static RefState *ref_state(const RefModel *rm, int ctx) {
    char err[512];
    RefState *s = ref_state_new(rm, ctx, err, sizeof err);
    cr_assert(s != NULL, "%s", err);
    return s;
}

// Every [id, logit] pair of a top-k list within tol of logits; returns the worst difference.
static double check_topk(const cJSON *topk, const float *logits, double tol, const char *what, int step) {
    double worst = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, topk) {
        const int id = cJSON_GetArrayItem(e, 0)->valueint;
        const double want = cJSON_GetArrayItem(e, 1)->valuedouble, d = fabs(logits[id] - want);
        worst = fmax(worst, d);
        cr_assert(d <= tol, "%s step %d: logit[%d] = %.7g, reference %.7g (tol %g)", what, step, id, logits[id], want, tol);
    }
    return worst;
}

// ---------------------------------------------------------------------------------------------
// The reference against ../shared/testdata: stories260K (llama2.c, numpy)

// 200 greedy tokens from BOS: the ids behind llama2.c's expected.txt (numpy's, identical).
static void ref_stories_unconditional(const char *model_file) {
    EmxModel m;
    open_model(model_file, &m);
    RefModel *rm = ref_open(&m);
    // llama.cpp's GGUF of this model says context_length 128: as far as that goes
    const int ctx = m.cfg.max_seq_len < 200 ? (int)m.cfg.max_seq_len : 200;
    RefState *s = ref_state(rm, ctx);
    cJSON *g = ref_load_shared_json("testdata/stories260K/golden.json");
    int n_gold;
    int *gold = ref_json_ints(cJSON_GetObjectItem(cJSON_GetObjectItem(g, "unconditional_200"), "greedy_ids_numpy"), &n_gold);
    cr_assert_eq(n_gold, 200);
    int tok = 1;  // BOS
    for (int pos = 0; pos < ctx; pos++) {
        const float *logits = ref_forward(s, tok, pos);
        cr_assert(logits != NULL);
        tok = ref_argmax(logits, (int)m.cfg.vocab_size);
        cr_assert_eq(tok, gold[pos], "%s step %d: token %d, llama2.c/numpy %d", model_file, pos, tok, gold[pos]);
    }
    free(gold);
    cJSON_Delete(g);
    ref_state_free(s);
    ref_model_free(rm);
    emx_model_close(&m);
}

// 5 prompts: all 512 step-0 logits and the top-10 of 20 greedy steps within 1e-4 of numpy's
// float64, the 100 greedy ids equal.
static void ref_stories_prompts(const char *model_file) {
    EmxModel m;
    open_model(model_file, &m);
    RefModel *rm = ref_open(&m);
    RefState *s = ref_state(rm, 128);
    cJSON *g = ref_load_shared_json("testdata/stories260K/golden.json");
    const int vocab = (int)m.cfg.vocab_size;
    double worst0 = 0, worst_top = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItem(g, "prompts")) {
        int n, n_greedy;
        int *ids = ref_json_ints(cJSON_GetObjectItem(p, "prompt_ids"), &n);
        int *greedy = ref_json_ints(cJSON_GetObjectItem(p, "greedy_ids_numpy"), &n_greedy);
        const cJSON *ref0 = cJSON_GetObjectItem(p, "step0_logits_numpy");
        const cJSON *top10 = cJSON_GetObjectItem(p, "top10_per_step_numpy");
        cr_assert_eq(cJSON_GetArraySize(ref0), vocab);
        const float *logits = NULL;
        for (int i = 0; i < n; i++) logits = ref_forward(s, ids[i], i);
        for (int v = 0; v < vocab; v++) {
            const double d = fabs(logits[v] - cJSON_GetArrayItem(ref0, v)->valuedouble);
            worst0 = fmax(worst0, d);
            cr_assert(d <= 1e-4, "%s prompt %d: step-0 logit %d off by %g", model_file, n, v, d);
        }
        for (int step = 0; step < n_greedy; step++) {
            if (step < cJSON_GetArraySize(top10))
                worst_top = fmax(worst_top, check_topk(cJSON_GetArrayItem(top10, step), logits, 1e-4, model_file, step));
            const int tok = ref_argmax(logits, vocab);
            cr_assert_eq(tok, greedy[step], "%s prompt %d step %d: %d vs numpy %d", model_file, n, step, tok, greedy[step]);
            logits = ref_forward(s, tok, n + step);
        }
        free(ids);
        free(greedy);
    }
    fprintf(stderr, "reference %s: max|dlogit| vs numpy: step 0 %.3g, top10 x20 steps %.3g; greedy 100/100 x5\n",
            model_file, worst0, worst_top);
    cJSON_Delete(g);
    ref_state_free(s);
    ref_model_free(rm);
    emx_model_close(&m);
}

Test(forward_ref, ref_stories_unconditional_200, .timeout = 300) { ref_stories_unconditional("stories260K.f32.bin"); }
Test(forward_ref, ref_stories_gguf_unconditional, .timeout = 300) { ref_stories_unconditional("stories260K.gguf.f32.bin"); }
Test(forward_ref, ref_stories_prompts, .timeout = 300) { ref_stories_prompts("stories260K.f32.bin"); }
Test(forward_ref, ref_stories_gguf_prompts, .timeout = 300) { ref_stories_prompts("stories260K.gguf.f32.bin"); }

// ---------------------------------------------------------------------------------------------
// The reference against ../shared/testdata: qwen3-tiny / llama3-tiny (numpy, llama.cpp F32)

// 6 prompts: step-0 logits (full vocabulary) against numpy and llama.cpp, the top-20 of 16
// greedy steps against numpy, 32 greedy ids equal. The 410-token prompt checks RoPE at long
// positions and, for llama3, the "llama3" frequency scaling (README 3.4: ignoring it moves a
// logit by 3.3).
static void ref_tiny(const char *model_file, const char *ref_dir) {
    EmxModel m;
    open_model(model_file, &m);
    RefModel *rm = ref_open(&m);
    RefState *s = ref_state(rm, 512);
    char rel[256], path[512];
    snprintf(rel, sizeof rel, "testdata/tiny/%s/reference.json", ref_dir);
    cJSON *ref = ref_load_shared_json(rel);
    const cJSON *prompts = cJSON_GetObjectItem(ref, "prompts");
    const int vocab = (int)m.cfg.vocab_size, n_prompts = cJSON_GetArraySize(prompts);
    snprintf(rel, sizeof rel, "testdata/tiny/%s/logits_step0.numpy.f32", ref_dir);
    float *numpy0 = ref_read_f32(test_shared_path(path, sizeof path, rel), (size_t)n_prompts * vocab);
    snprintf(rel, sizeof rel, "testdata/tiny/%s/logits_step0.llamacpp.f32", ref_dir);
    float *llama0 = ref_read_f32(test_shared_path(path, sizeof path, rel), (size_t)n_prompts * vocab);
    for (int pi = 0; pi < n_prompts; pi++) {
        const cJSON *p = cJSON_GetArrayItem(prompts, pi);
        int n, n_greedy;
        int *ids = ref_json_ints(cJSON_GetObjectItem(p, "ids"), &n);
        int *greedy = ref_json_ints(cJSON_GetObjectItem(p, "greedy_numpy"), &n_greedy);
        const cJSON *steps = cJSON_GetObjectItem(p, "steps");
        const double tol = n <= 32 ? 2e-4 : 1e-3;
        const float *logits = NULL;
        for (int i = 0; i < n; i++) logits = ref_forward(s, ids[i], i);
        const double d_np = ref_max_abs_diff(logits, numpy0 + (size_t)pi * vocab, (size_t)vocab);
        const double d_lc = ref_max_abs_diff(logits, llama0 + (size_t)pi * vocab, (size_t)vocab);
        cr_assert(d_np <= tol, "%s prompt %d (%d tokens): step-0 logits vs numpy off by %g (tol %g)", model_file, pi, n, d_np, tol);
        cr_assert(d_lc <= tol, "%s prompt %d (%d tokens): step-0 logits vs llama.cpp off by %g (tol %g)", model_file, pi, n, d_lc, tol);
        double worst_top = 0;
        for (int step = 0; step < n_greedy; step++) {
            if (step < cJSON_GetArraySize(steps))
                worst_top = fmax(worst_top, check_topk(cJSON_GetObjectItem(cJSON_GetArrayItem(steps, step), "top20_numpy"),
                                                       logits, tol, model_file, step));
            const int tok = ref_argmax(logits, vocab);
            cr_assert_eq(tok, greedy[step], "%s prompt %d step %d: %d vs numpy %d", model_file, pi, step, tok, greedy[step]);
            logits = ref_forward(s, tok, n + step);
        }
        fprintf(stderr, "reference %s prompt %d (%3d tokens): step 0 max|d| numpy %.2g llama.cpp %.2g, top20 x16 %.2g, greedy 32/32\n",
                model_file, pi, n, d_np, d_lc, worst_top);
        free(ids);
        free(greedy);
    }
    free(numpy0);
    free(llama0);
    cJSON_Delete(ref);
    ref_state_free(s);
    ref_model_free(rm);
    emx_model_close(&m);
}

Test(forward_ref, ref_qwen3_tiny_hf, .timeout = 600) { ref_tiny("qwen3-tiny.f32.bin", "qwen3-tiny"); }
Test(forward_ref, ref_qwen3_tiny_gguf, .timeout = 600) { ref_tiny("qwen3-tiny.gguf.f32.bin", "qwen3-tiny"); }
Test(forward_ref, ref_llama3_tiny_hf, .timeout = 600) { ref_tiny("llama3-tiny.f32.bin", "llama3-tiny"); }
Test(forward_ref, ref_llama3_tiny_gguf, .timeout = 600) { ref_tiny("llama3-tiny.gguf.f32.bin", "llama3-tiny"); }

// SmolLM2 (tests/data/smollm2, optional model): step-0 logits of the 5 chat prompts against
// llama.cpp F32 and numpy on bit-identical f32 weights. Under the sanitizers (make test-asan) the
// first prompt only: the others run the same code again, token by token through the reference
// at 135M weights (the slowest test of that run); make test's build checks all five.
Test(forward_ref, ref_smollm2, .timeout = 900) {
    EmxModel m;
    open_model("smollm2.f32.bin", &m);
    RefModel *rm = ref_open(&m);
    RefState *s = ref_state(rm, 256);
    cJSON *ref = ref_load_json("tests/data/smollm2/reference.json");
    const cJSON *prompts = cJSON_GetObjectItem(ref, "prompts");
    const int vocab = (int)m.cfg.vocab_size, n_prompts = cJSON_GetArraySize(prompts);
    const int n_checked = EMX_TEST_SANITIZED ? 1 : n_prompts;
    float *lc0 = ref_read_f32("tests/data/smollm2/logits_step0.f32", (size_t)n_prompts * vocab);
    float *np0 = ref_read_f32("tests/data/smollm2/logits_step0.numpy.f32", (size_t)n_prompts * vocab);
    for (int pi = 0; pi < n_checked; pi++) {
        int n;
        int *ids = ref_json_ints(cJSON_GetObjectItem(cJSON_GetArrayItem(prompts, pi), "ids"), &n);
        const float *logits = NULL;
        for (int i = 0; i < n; i++) logits = ref_forward(s, ids[i], i);
        const double d_lc = ref_max_abs_diff(logits, lc0 + (size_t)pi * vocab, (size_t)vocab);
        const double d_np = ref_max_abs_diff(logits, np0 + (size_t)pi * vocab, (size_t)vocab);
        fprintf(stderr, "reference smollm2 prompt %d (%d tokens): step 0 max|d| llama.cpp %.2g numpy %.2g\n", pi, n, d_lc, d_np);
        cr_assert(d_lc <= 5e-4 && d_np <= 5e-4, "smollm2 prompt %d: step-0 logits off by %g (llama.cpp), %g (numpy)", pi, d_lc, d_np);
        free(ids);
    }
    free(lc0);
    free(np0);
    cJSON_Delete(ref);
    ref_state_free(s);
    ref_model_free(rm);
    emx_model_close(&m);
}

// ---------------------------------------------------------------------------------------------
// The fast CPU backend against the reference, position by position

// A token sequence of the model: a prompt of its reference data and the first greedy tokens
// after it (real text, so the attention sees real patterns, not noise). *n tokens, <= 48.
static int *sequence_for(const char *model_file, int *n) {
    cJSON *j;
    const cJSON *p;
    const char *ids_key, *greedy_key;
    int extra;
    if (strncmp(model_file, "stories", 7) == 0) {  // "Once upon a time" + 24 greedy tokens
        j = ref_load_shared_json("testdata/stories260K/golden.json");
        p = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "prompts"), 1);
        ids_key = "prompt_ids", greedy_key = "greedy_ids_numpy", extra = 24;
    } else if (strncmp(model_file, "smollm2", 7) == 0) {  // a 37-token chat prompt + 8
        j = ref_load_json("tests/data/smollm2/reference.json");
        p = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "prompts"), 0);
        ids_key = "ids", greedy_key = "greedy", extra = 8;
    } else {  // the tiny models' chat prompt (22 / 25 tokens, special tokens included) + 8
        char rel[256];
        snprintf(rel, sizeof rel, "testdata/tiny/%.*s/reference.json", (int)strcspn(model_file, "."), model_file);
        j = ref_load_shared_json(rel);
        p = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "prompts"), 2);
        ids_key = "ids", greedy_key = "greedy_numpy", extra = 8;
    }
    int n_ids, n_greedy;
    int *ids = ref_json_ints(cJSON_GetObjectItem(p, ids_key), &n_ids);
    int *greedy = ref_json_ints(cJSON_GetObjectItem(p, greedy_key), &n_greedy);
    cr_assert(n_greedy >= extra && n_ids + extra <= 48);
    ids = realloc(ids, (size_t)(n_ids + extra) * sizeof(int));
    cr_assert(ids != NULL);
    memcpy(ids + n_ids, greedy, (size_t)extra * sizeof(int));
    *n = n_ids + extra;
    free(greedy);
    cJSON_Delete(j);
    return ids;
}

#define CMP_CTX 64

typedef struct {
    double logit, score;  // worst |Δ| so far
    int logit_pos, score_pos;
    double sq_diff, sq_ref;  // sums of Δlogit² and logit² (relative RMS error)
} Worst;

// Compares the fast path's attention scores of position pos with the reference's (both
// [n_layers][n_heads][ctx]).
static void compare_scores(const EmxModel *m, const float *fast, const float *ref, int ctx, int pos, Worst *w) {
    for (size_t lh = 0; lh < (size_t)m->cfg.n_layers * m->cfg.n_heads; lh++) {
        const double d = ref_max_abs_diff(fast + lh * ctx, ref + lh * ctx, (size_t)pos + 1);
        if (d > w->score) w->score = d, w->score_pos = pos;
    }
}

static void note_logits(const float *fast, const float *ref, int vocab, int pos, Worst *w) {
    const double d = ref_max_abs_diff(fast, ref, (size_t)vocab);
    if (d > w->logit) w->logit = d, w->logit_pos = pos;
    for (int i = 0; i < vocab; i++) {
        w->sq_diff += ((double)fast[i] - ref[i]) * ((double)fast[i] - ref[i]);
        w->sq_ref += (double)ref[i] * ref[i];
    }
}

// Decode (one token per emx_forward, every position) and prefill (the sequence in one batched
// pass: emx_forward_all_logits for every position's logits, emx_forward for the scores) against
// the reference run token by token. Fails when a logit or a score differs by more than tol.
static void cpu_vs_ref(const char *model_file, double tol_logit, double tol_score, double tol_rms) {
    EmxModel m;
    open_model(model_file, &m);
    RefModel *rm = ref_open(&m);
    RefState *r = ref_state(rm, CMP_CTX);
    char err[512];
    EmxStateOptions opt = {.n_threads = 2, .ctx = CMP_CTX};
    EmxState *s = emx_state_new(&m, &opt, err, sizeof err);
    cr_assert(s != NULL, "%s", err);
    int n;
    int *toks = sequence_for(model_file, &n);
    const int vocab = (int)m.cfg.vocab_size;
    float *want = malloc((size_t)n * vocab * sizeof(float)), *got = malloc((size_t)n * vocab * sizeof(float));
    cr_assert(want && got);
    Worst dec = {0}, pre = {0};
    for (int pos = 0; pos < n; pos++) {
        const float *rl = ref_forward(r, toks[pos], pos), *fl = emx_forward(s, &toks[pos], 1, pos);
        cr_assert(rl && fl);
        memcpy(want + (size_t)pos * vocab, rl, (size_t)vocab * sizeof(float));
        note_logits(fl, rl, vocab, pos, &dec);
        compare_scores(&m, emx_attention_scores(s, NULL), ref_attention_scores(r, NULL), CMP_CTX, pos, &dec);
    }
    cr_assert(emx_forward(s, toks, n, 0));
    compare_scores(&m, emx_attention_scores(s, NULL), ref_attention_scores(r, NULL), CMP_CTX, n - 1, &pre);
    cr_assert(emx_forward_all_logits(s, toks, n, 0, got) == 0);
    for (int pos = 0; pos < n; pos++) note_logits(got + (size_t)pos * vocab, want + (size_t)pos * vocab, vocab, pos, &pre);
    fprintf(stderr, "cpu vs reference %-26s %d positions: max|dlogit| decode %.3g (pos %d) prefill %.3g (pos %d); "
            "max|dscore| decode %.3g (pos %d) prefill %.3g; rel. rms %.3g\n", model_file, n, dec.logit, dec.logit_pos, pre.logit,
            pre.logit_pos, dec.score, dec.score_pos, pre.score, sqrt(dec.sq_diff / dec.sq_ref));
    cr_assert(dec.logit <= tol_logit, "%s decode: logits at position %d differ by %g (tol %g)", model_file, dec.logit_pos, dec.logit, tol_logit);
    cr_assert(pre.logit <= tol_logit, "%s prefill: logits at position %d differ by %g (tol %g)", model_file, pre.logit_pos, pre.logit, tol_logit);
    cr_assert(dec.score <= tol_score, "%s decode: attention scores at position %d differ by %g (tol %g)", model_file, dec.score_pos, dec.score, tol_score);
    cr_assert(pre.score <= tol_score, "%s prefill: attention scores differ by %g (tol %g)", model_file, pre.score, tol_score);
    const double rms_dec = sqrt(dec.sq_diff / dec.sq_ref), rms_pre = sqrt(pre.sq_diff / pre.sq_ref);
    cr_assert(rms_dec <= tol_rms && rms_pre <= tol_rms, "%s: relative RMS logit error decode %g, prefill %g (tol %g)",
              model_file, rms_dec, rms_pre, tol_rms);
    free(want);
    free(got);
    free(toks);
    emx_state_free(s);
    ref_state_free(r);
    ref_model_free(rm);
    emx_model_close(&m);
}

// Tolerances: max |Δlogit|, max |Δscore| (pre-softmax, over every layer, head, key and
// position) and |Δlogits| / |logits| over the whole run (relative RMS), fast path vs reference.
// f32 and bf16 weights: the same f32 arithmetic up to summation order (SIMD lanes, double sums
// of squares in the fast RMSNorm) and the batched attention's order; measured at most 8.7e-5,
// 3.1e-5 and 1.3e-6, allowed about 5x that. Quantised weights: the reference dequantises
// them to exactly the values the fast kernels multiply by, so what is left is the fast path's
// int8 activations (x ≈ q·d per group of 32 values, d = max|x|/127, up to 0.4% per value),
// compounded over the layers. The tiny models' random weights (std 0.2, logits ±30) amplify it:
// measured max |Δlogit| 0.97..1.8, |Δscore| 0.14..0.49, relative RMS 2.5..3.7% (q8, q4 and
// q4_1 alike: the activations dominate, not the weights); the trained stories260K 0.26, 0.5 and
// 0.7%; SmolLM2 q8 (30 layers; its scores reach the tens) 2.0, 1.5 and 4.0%. Allowed about 2x.
// A wrong kernel (a swapped nibble, a misread scale) decorrelates the
// logits: relative RMS near 1.
#define TOL_F32 5e-4, 2e-4, 1e-5
#define TOL_Q_STORIES 0.6, 1.0, 0.015
#define TOL_Q_TINY 3.5, 1.0, 0.075
#define TOL_Q_SMOLLM2 4.0, 3.0, 0.08
Test(forward_ref, cpu_stories_f32, .timeout = 300) { cpu_vs_ref("stories260K.f32.bin", TOL_F32); }
Test(forward_ref, cpu_stories_q8, .timeout = 300) { cpu_vs_ref("stories260K.q8.bin", TOL_Q_STORIES); }
Test(forward_ref, cpu_stories_q4, .timeout = 300) { cpu_vs_ref("stories260K.q4.bin", TOL_Q_STORIES); }
Test(forward_ref, cpu_stories_gguf_f32, .timeout = 300) { cpu_vs_ref("stories260K.gguf.f32.bin", TOL_F32); }
Test(forward_ref, cpu_stories_gguf_q8, .timeout = 300) { cpu_vs_ref("stories260K.gguf.q8.bin", TOL_Q_STORIES); }
Test(forward_ref, cpu_qwen3_f32, .timeout = 300) { cpu_vs_ref("qwen3-tiny.f32.bin", TOL_F32); }
Test(forward_ref, cpu_qwen3_gguf_f32, .timeout = 300) { cpu_vs_ref("qwen3-tiny.gguf.f32.bin", TOL_F32); }
Test(forward_ref, cpu_qwen3_bf16, .timeout = 300) { cpu_vs_ref("qwen3-tiny.bf16.bin", TOL_F32); }
Test(forward_ref, cpu_qwen3_q8, .timeout = 300) { cpu_vs_ref("qwen3-tiny.q8.bin", TOL_Q_TINY); }
Test(forward_ref, cpu_qwen3_q4, .timeout = 300) { cpu_vs_ref("qwen3-tiny.q4.bin", TOL_Q_TINY); }
Test(forward_ref, cpu_qwen3_q4_1, .timeout = 300) { cpu_vs_ref("qwen3-tiny.q4_1.bin", TOL_Q_TINY); }
Test(forward_ref, cpu_llama3_f32, .timeout = 300) { cpu_vs_ref("llama3-tiny.f32.bin", TOL_F32); }
Test(forward_ref, cpu_llama3_gguf_f32, .timeout = 300) { cpu_vs_ref("llama3-tiny.gguf.f32.bin", TOL_F32); }
Test(forward_ref, cpu_llama3_bf16, .timeout = 300) { cpu_vs_ref("llama3-tiny.bf16.bin", TOL_F32); }
Test(forward_ref, cpu_llama3_q8, .timeout = 300) { cpu_vs_ref("llama3-tiny.q8.bin", TOL_Q_TINY); }
Test(forward_ref, cpu_llama3_q4, .timeout = 300) { cpu_vs_ref("llama3-tiny.q4.bin", TOL_Q_TINY); }
Test(forward_ref, cpu_llama3_q4_1, .timeout = 300) { cpu_vs_ref("llama3-tiny.q4_1.bin", TOL_Q_TINY); }
Test(forward_ref, cpu_smollm2_f32, .timeout = 900) { cpu_vs_ref("smollm2.f32.bin", TOL_F32); }
Test(forward_ref, cpu_smollm2_q8, .timeout = 900) { cpu_vs_ref("smollm2.q8.bin", TOL_Q_SMOLLM2); }

// The 410-token prompt of the tiny models in one emx_forward: the fast path runs it in batches of
// 256 rows (EMX_CPU_MAX_BATCH), the second attending to the first's cached keys; positions up to 409
// exercise RoPE far out and, for llama3, the scaled frequencies. The last position's logits and
// its scores over all 410 keys of every layer (each key computed by the fast path at its own
// position) against the reference. Tolerances as for the f32 runs above (TOL_F32); measured
// max |Δlogit| 2.2e-5 / |Δscore| 3.9e-6 (qwen3), 3.5e-5 / 2.2e-5 (llama3).
static void cpu_long_prompt(const char *model_file) {
    EmxModel m;
    open_model(model_file, &m);
    const int ctx = 512;
    RefModel *rm = ref_open(&m);
    RefState *r = ref_state(rm, ctx);
    char err[512], rel[256];
    EmxStateOptions opt = {.n_threads = 2, .ctx = ctx};
    EmxState *s = emx_state_new(&m, &opt, err, sizeof err);
    cr_assert(s != NULL, "%s", err);
    snprintf(rel, sizeof rel, "testdata/tiny/%.*s/reference.json", (int)strcspn(model_file, "."), model_file);
    cJSON *j = ref_load_shared_json(rel);
    int n;
    int *ids = ref_json_ints(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "prompts"), 5), "ids"), &n);
    cr_assert(n > 256 && n <= ctx, "%s: the long prompt has %d tokens", rel, n);
    const float *want = NULL;
    for (int i = 0; i < n; i++) want = ref_forward(r, ids[i], i);
    const float *got = emx_forward(s, ids, n, 0);
    cr_assert(got != NULL);
    Worst w = {0};
    note_logits(got, want, (int)m.cfg.vocab_size, n - 1, &w);
    compare_scores(&m, emx_attention_scores(s, NULL), ref_attention_scores(r, NULL), ctx, n - 1, &w);
    fprintf(stderr, "cpu vs reference %s, %d-token prompt in one call: max|dlogit| %.3g, max|dscore| %.3g\n", model_file, n,
            w.logit, w.score);
    cr_assert(w.logit <= 5e-4, "%s: logits after the %d-token prompt differ by %g (tol 5e-4)", model_file, n, w.logit);
    cr_assert(w.score <= 2e-4, "%s: scores after the %d-token prompt differ by %g (tol 2e-4)", model_file, n, w.score);
    free(ids);
    cJSON_Delete(j);
    emx_state_free(s);
    ref_state_free(r);
    ref_model_free(rm);
    emx_model_close(&m);
}

Test(forward_ref, cpu_qwen3_long_prompt, .timeout = 600) { cpu_long_prompt("qwen3-tiny.f32.bin"); }
Test(forward_ref, cpu_llama3_long_prompt, .timeout = 600) { cpu_long_prompt("llama3-tiny.f32.bin"); }
