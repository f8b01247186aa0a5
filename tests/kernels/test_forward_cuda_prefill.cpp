// test_forward_cuda_prefill.cpp — the CUDA backend's long-prompt prefill (prompts of more than
// GEMM_MIN_PROMPT = 32 rows: every projection through kernels/gemm.h's cuBLAS GEMMs, chunks of up
// to 256 rows) against the CPU backend, through the public API.
//
// Tolerances, as fractions of max|logit| and max|score| (test_forward_cuda.cpp explains the
// method); measured over the tests below, worst of logits and scores:
//  - f32 and bf16 weights: the GEMM is cublas_f32 on f32 activations, as the CPU reads them for
//    those dtypes: f32 summation order only. Measured 2.6e-6; 2e-4 as for the matvec path.
//  - q8 weights against the reference forward pass (weights dequantised to f32, f32
//    activations): the bf16 GEMM differs by rounding weights and activations to 8 significant
//    bits (2^-9 each), which test_dense_forward.cpp measured at 7e-3 through 3 layers. Measured
//    here 1.1e-2 (logits) and 2.1e-2 (scores); 4e-2 allowed. This is the check of the q8 path.
//  - q8 weights against the CPU: the CPU multiplies int8 activations (a step of amax/127 in each
//    group of 32, i.e. up to 0.4% of the group's largest value per activation), the GEMM bf16
//    ones; the K and V rows carry that to every later position, and the tiny models' 64-wide
//    rows have only two groups. Measured 6e-2 (logits) and 1.1e-1 (scores, llama3-tiny, 40
//    rows); 0.2 allowed: it catches a wrong matrix or row (errors near 1), and the greedy tokens
//    after the prompt must still be the CPU's.
// After the prompt each backend decodes greedily from its own logits and cache (the CUDA state
// from its decode graph): the same tokens, and the logits within the same tolerance.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <criterion/criterion.h>

#include "kb_util.h"
#include "forward_test_util.h"

#include <string>
#include <vector>

extern "C" {
#include "runtime/forward.h"
#include "runtime/model.h"
#include "runtime/reference/forward_ref.h"
}

namespace {


// n pseudo-random token ids below vocab (fixed: the test must not depend on anything else).
std::vector<int> prompt(int n, int vocab) {
    std::vector<int> t(n);
    uint32_t x = 12345;
    for (int &v : t) v = (int)((x = x * 1103515245u + 12345u) >> 8) % vocab;
    return t;
}

// The prompt in one call on both backends, then `steps` greedy decode steps, each backend on its
// own choice: logits and every layer's score rows at each step, and the tokens.
void prefill_matches_cpu(const char *name, int n, int steps, float tol) {
    EmxModel m;
    if (!open_test_model(name, &m)) cr_skip_test("build/models/%s missing (make test-models converts it)", name);
    const int vocab = (int)m.cfg.vocab_size, ctx = n + steps + 1;
    std::vector<int> toks = prompt(n, vocab);
    EmxState *cpu = new_state(&m, "cpu", ctx), *gpu = new_state(&m, "cuda:0", ctx);
    double worst = 0, worst_scores = 0;
    int pos = 0, tc = 0, tg = 0;
    for (int step = 0; step <= steps; step++) {
        const int len = step == 0 ? n : 1;
        const int *in_c = step == 0 ? toks.data() : &tc, *in_g = step == 0 ? toks.data() : &tg;
        const float *want = emx_forward(cpu, in_c, len, pos);
        cr_assert(want, "%s: %s", name, emx_state_error(cpu));
        std::vector<float> w(want, want + vocab);
        const float *got = emx_forward(gpu, in_g, len, pos);
        cr_assert(got, "%s: %s", name, emx_state_error(gpu));
        char what[160];
        snprintf(what, sizeof what, "%s, %d-row prompt: logits at step %d (pos %d)", name, n, step, pos);
        worst = fmax(worst, compare(what, got, w.data(), (size_t)vocab, tol));
        int lp_cpu, lp_gpu;
        const float *sc = emx_attention_scores(cpu, &lp_cpu), *sg = emx_attention_scores(gpu, &lp_gpu);
        cr_assert_eq(lp_cpu, lp_gpu);
        for (uint32_t l = 0; l < m.cfg.n_layers; l++)
            for (uint32_t h = 0; h < m.cfg.n_heads; h++) {
                const size_t at = ((size_t)l * m.cfg.n_heads + h) * ctx;
                snprintf(what, sizeof what, "%s, %d-row prompt: scores layer %u head %u step %d", name, n, l, h, step);
                worst_scores = fmax(worst_scores, compare(what, sg + at, sc + at, (size_t)lp_cpu + 1, tol));
            }
        pos += len;
        tc = logits_argmax(w.data(), vocab);
        tg = logits_argmax(got, vocab);
        cr_assert_eq(tg, tc, "%s, %d-row prompt: greedy token after step %d: CUDA %d, CPU %d", name, n, step, tg, tc);
    }
    cr_log_info("%s, %d-row prompt: worst difference %.2e of max|logit|, %.2e of max|score|", name, n, worst,
                worst_scores);
    emx_state_free(gpu);
    emx_state_free(cpu);
    emx_model_close(&m);
}

// The last logits of toks fed in one call and in calls of at most `piece` tokens, on one CUDA
// state each; returns whether they are bitwise equal.
bool one_call_equals_pieces(const EmxModel &m, const std::vector<int> &toks, int piece) {
    const int vocab = (int)m.cfg.vocab_size, n = (int)toks.size();
    EmxState *a = new_state(&m, "cuda:0", n + 1), *b = new_state(&m, "cuda:0", n + 1);
    const float *la = emx_forward(a, toks.data(), n, 0);
    cr_assert(la, "%s", emx_state_error(a));
    const float *lb = nullptr;
    for (int done = 0; done < n; done += piece) {
        lb = emx_forward(b, toks.data() + done, n - done < piece ? n - done : piece, done);
        cr_assert(lb, "%s", emx_state_error(b));
    }
    const bool same = memcmp(la, lb, (size_t)vocab * sizeof(float)) == 0;
    emx_state_free(a);
    emx_state_free(b);
    return same;
}

// A q8 model's n-row prompt on the GEMM path against the reference forward pass (weights
// dequantised to f32, f32 activations: what the bf16 GEMM computes but for its rounding to bf16):
// the last position's logits and every layer's score rows, as fractions of their max.
void prefill_matches_reference(const char *name, int n, float tol) {
    EmxModel m;
    if (!open_test_model(name, &m)) cr_skip_test("build/models/%s missing (make test-models converts it)", name);
    const int vocab = (int)m.cfg.vocab_size;
    const std::vector<int> toks = prompt(n, vocab);
    char err[512];
    RefModel *rm = ref_model_new(&m, err, sizeof err);
    cr_assert(rm, "%s", err);
    RefState *ref = ref_state_new(rm, n, err, sizeof err);
    cr_assert(ref, "%s", err);
    const float *want = nullptr;
    for (int pos = 0; pos < n; pos++) cr_assert((want = ref_forward(ref, toks[pos], pos)));
    EmxState *gpu = new_state(&m, "cuda:0", n);
    const float *got = emx_forward(gpu, toks.data(), n, 0);
    cr_assert(got, "%s: %s", name, emx_state_error(gpu));
    char what[160];
    snprintf(what, sizeof what, "%s, %d-row prompt: logits against the reference", name, n);
    const double worst = compare(what, got, want, (size_t)vocab, tol);
    int lp_ref, lp_gpu;
    const float *sr = ref_attention_scores(ref, &lp_ref), *sg = emx_attention_scores(gpu, &lp_gpu);
    cr_assert_eq(lp_ref, lp_gpu);
    double worst_scores = 0;
    for (uint32_t l = 0; l < m.cfg.n_layers; l++)
        for (uint32_t h = 0; h < m.cfg.n_heads; h++) {
            const size_t at = ((size_t)l * m.cfg.n_heads + h) * n;
            snprintf(what, sizeof what, "%s, %d-row prompt: scores layer %u head %u against the reference", name, n, l, h);
            worst_scores = fmax(worst_scores, compare(what, sg + at, sr + at, (size_t)n, tol));
        }
    cr_log_info("%s, %d-row prompt against the reference: %.2e of max|logit|, %.2e of max|score|", name, n, worst,
                worst_scores);
    emx_state_free(gpu);
    ref_state_free(ref);
    ref_model_free(rm);
    emx_model_close(&m);
}

const float kTight = 2e-4f, kQuantRef = 4e-2f, kQuantCpu = 0.2f;

}  // namespace

// 40 rows: one GEMM chunk, its attention in three launches (16, 16, 8 rows).
Test(forward_cuda_prefill, qwen3_tiny_40_rows_match_cpu, .timeout = 600) {
    prefill_matches_cpu("qwen3-tiny.f32.bin", 40, 3, kTight);
    prefill_matches_cpu("qwen3-tiny.bf16.bin", 40, 3, kTight);
    prefill_matches_cpu("qwen3-tiny.q8.bin", 40, 3, kQuantCpu);
}
Test(forward_cuda_prefill, llama3_tiny_40_rows_match_cpu, .timeout = 600) {
    prefill_matches_cpu("llama3-tiny.f32.bin", 40, 3, kTight);
    prefill_matches_cpu("llama3-tiny.bf16.bin", 40, 3, kTight);
    prefill_matches_cpu("llama3-tiny.q8.bin", 40, 3, kQuantCpu);
}

Test(forward_cuda_prefill, q8_matches_the_reference, .timeout = 600) {
    prefill_matches_reference("qwen3-tiny.q8.bin", 40, kQuantRef);
    prefill_matches_reference("llama3-tiny.q8.bin", 40, kQuantRef);
}

// 300 rows: two chunks of 150 (the second attends the first's cache rows), positions far enough
// for RoPE's angles to wrap many times.
Test(forward_cuda_prefill, two_chunks_of_150_rows_match_cpu, .timeout = 600) {
    prefill_matches_cpu("qwen3-tiny.f32.bin", 300, 2, kTight);
    prefill_matches_cpu("llama3-tiny.q8.bin", 300, 2, kQuantCpu);
}

// Up to 32 rows the prompt takes the batched matvecs, as before: one call of 32 rows equals, bit
// for bit, two calls of 16 (each one chunk of the batched path). From 33 rows on it takes the
// GEMMs: q8 weights then meet bf16 activations instead of int8 ones, so one call of 33 rows
// cannot equal calls of 16, 16 and 1 bit for bit (the check that the long path is really taken
// where the tests above expect it).
Test(forward_cuda_prefill, the_threshold_chooses_the_path, .timeout = 600) {
    EmxModel m;
    if (!open_test_model("qwen3-tiny.q8.bin", &m)) cr_skip_test("build/models/qwen3-tiny.q8.bin missing");
    const std::vector<int> all = prompt(33, (int)m.cfg.vocab_size);
    cr_assert(one_call_equals_pieces(m, std::vector<int>(all.begin(), all.begin() + 32), 16),
              "32 rows in one call differ from 16 + 16: the short path changed");
    cr_assert(!one_call_equals_pieces(m, all, 16), "33 rows in one call equal 16 + 16 + 1: no GEMM path taken");
    emx_model_close(&m);
}

// emx_forward_decide after a long prompt: the device's greedy choice is the CPU's argmax.
Test(forward_cuda_prefill, decide_after_a_long_prompt, .timeout = 600) {
    EmxModel m;
    if (!open_test_model("llama3-tiny.bf16.bin", &m)) cr_skip_test("build/models/llama3-tiny.bf16.bin missing");
    const int vocab = (int)m.cfg.vocab_size, n = 50;
    const std::vector<int> toks = prompt(n, vocab);
    EmxState *cpu = new_state(&m, "cpu", n + 1), *gpu = new_state(&m, "cuda:0", n + 1);
    const float *want = emx_forward(cpu, toks.data(), n, 0);
    cr_assert(want, "%s", emx_state_error(cpu));
    EmxDecideSpec spec = {};
    spec.kind = EMX_DECIDE_GREEDY;
    spec.pause_token = -1;
    EmxDecideResult out;
    cr_assert_eq(emx_forward_decide(gpu, toks.data(), n, 0, &spec, &out), 1, "%s", emx_state_error(gpu));
    cr_assert_eq(out.token, logits_argmax(want, vocab));
    emx_state_free(gpu);
    emx_state_free(cpu);
    emx_model_close(&m);
}
