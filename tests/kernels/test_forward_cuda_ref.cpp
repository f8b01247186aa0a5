// test_forward_cuda_ref.cpp — the CUDA backend of forward.h against the reference forward pass
// (runtime/reference/forward_ref.c), position by position, for a model of each architecture:
// stories260K (Llama 2: interleaved RoPE, GQA), llama3-tiny (Llama 3: "llama3" RoPE scaling,
// rotate-half pairs), qwen3-tiny (q/k norms, head_dim != dim / n_heads), each at f32, and
// stories260K at q8 (the int8 path), qwen2.5-tiny (q/k/v biases) and gemma3-tiny (every field of
// EmxConfigExt, the sliding window included; rope_linear_global set to 8 on the opened model), f32
// and q8. test_forward_cuda.cpp compares the same backend with the CPU one; this compares it with the plain f32 definition of the model, so that a mistake the
// two fast backends share cannot pass.
//
// The sequence: a 19-token prefill (two of the backend's 16-row chunks; its last position's
// logits, and its scores over every position's keys of every layer), then 3 decode steps
// (logits and scores at each). For stories260K also every prompt position's logits through
// emx_forward_all_logits (the tiny models' 128k-152k-row classifier for 19 rows takes minutes
// under emulation). Tolerances, absolute: f32 weights 5e-4 on logits (measured 7.4e-5) and 5e-4
// on scores (measured 1.1e-4, stories260K: larger scores than the tiny models'); q8 weights read
// int8 activations (tests/test_forward_ref.c), measured 0.24 / 0.98 for stories260K: 0.6 / 2.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <criterion/criterion.h>

#include "kb_util.h"

#include <vector>

extern "C" {
#include "runtime/forward.h"
#include "runtime/model.h"
#include "runtime/reference/forward_ref.h"
}

namespace {

const int kCtx = 32;
const int kPrompt[] = {1, 9707, 11, 1879, 0, 576, 3974, 42, 17, 300, 5, 77, 1000, 8, 64, 3, 12, 99, 4};
const int kPromptLen = 19;
const int kDecode = 3;

// Worst |got - want| over n values; fails above tol.
double check(const char *what, const float *got, const float *want, size_t n, double tol) {
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        // equal values (a key before a sliding window: -inf on both sides) differ by 0
        const double d = got[i] == want[i] ? 0.0 : fabs((double)got[i] - want[i]);
        if (!(d <= worst)) worst = d, at = i;
    }
    cr_assert(worst <= tol, "%s: value %zu differs by %.3g (reference %.6g, CUDA %.6g; tol %g)", what, at, worst,
              want[at], got[at], tol);
    return worst;
}

// Every layer's and head's score row of the latest position, keys 0..pos.
double check_scores(const char *name, const EmxModel &m, EmxState *gpu, const RefState *ref, int pos, double tol) {
    int lp_gpu, lp_ref;
    const float *sg = emx_attention_scores(gpu, &lp_gpu), *sr = ref_attention_scores(ref, &lp_ref);
    cr_assert(sg, "%s: %s", name, emx_state_error(gpu));
    cr_assert_eq(lp_gpu, pos);
    cr_assert_eq(lp_ref, pos);
    double worst = 0;
    char what[160];
    for (uint32_t l = 0; l < m.cfg.n_layers; l++)
        for (uint32_t h = 0; h < m.cfg.n_heads; h++) {
            const size_t at = ((size_t)l * m.cfg.n_heads + h) * kCtx;
            snprintf(what, sizeof what, "%s scores layer %u head %u pos %d", name, l, h, pos);
            worst = fmax(worst, check(what, sg + at, sr + at, (size_t)pos + 1, tol));
        }
    return worst;
}

// prompt_len prompt tokens (at most kPromptLen), then `decode` steps of one token each.
// linear_global > 0: the model's rope_linear_global replaced by it (both sides read the model's
// EmxConfigExt).
void cuda_vs_ref(const char *name, double tol_logit, double tol_score, bool all_positions, int prompt_len = kPromptLen,
                 int decode = kDecode, float linear_global = 0) {
    EmxModel m;
    if (!open_test_model(name, &m)) cr_skip_test("build/models/%s missing (make test-models converts it)", name);
    if (linear_global > 0) m.ext.rope_linear_global = linear_global;
    const size_t vocab = m.cfg.vocab_size;
    char err[512];
    RefModel *rm = ref_model_new(&m, err, sizeof err);
    cr_assert(rm, "%s", err);
    RefState *ref = ref_state_new(rm, kCtx, err, sizeof err);
    cr_assert(ref, "%s", err);
    EmxStateOptions opt = {};
    opt.ctx = kCtx;
    opt.device = "cuda:0";
    EmxState *gpu = emx_state_new(&m, &opt, err, sizeof err);
    cr_assert(gpu, "emx_state_new(cuda:0): %s", err);
    cr_assert_str_eq(emx_state_device(gpu), "cuda:0");

    std::vector<int> toks(kPrompt, kPrompt + prompt_len);
    for (int &t : toks) t %= (int)vocab;
    for (int i = 0; i < decode; i++) toks.push_back((toks.back() * 31 + 7) % (int)vocab);
    double worst_logit = 0, worst_score = 0;
    char what[160];
    std::vector<float> want((size_t)prompt_len * vocab);  // the reference's logits at every prompt position
    for (int pos = 0; pos < prompt_len; pos++) {
        const float *w = ref_forward(ref, toks[pos], pos);
        cr_assert(w);
        memcpy(&want[(size_t)pos * vocab], w, vocab * sizeof(float));
    }
    // prefill: the last position's logits, and its scores over every position's keys
    const float *last = emx_forward(gpu, toks.data(), prompt_len, 0);
    cr_assert(last, "%s: %s", name, emx_state_error(gpu));
    snprintf(what, sizeof what, "%s prefill logits pos %d", name, prompt_len - 1);
    worst_logit = check(what, last, &want[(size_t)(prompt_len - 1) * vocab], vocab, tol_logit);
    worst_score = check_scores(name, m, gpu, ref, prompt_len - 1, tol_score);
    if (all_positions) {  // every position's logits from one batched call
        std::vector<float> all((size_t)prompt_len * vocab);
        cr_assert_eq(emx_forward_all_logits(gpu, toks.data(), prompt_len, 0, all.data()), 0, "%s: %s", name,
                     emx_state_error(gpu));
        for (int pos = 0; pos < prompt_len; pos++) {
            snprintf(what, sizeof what, "%s prefill (all logits) pos %d", name, pos);
            worst_logit = fmax(worst_logit, check(what, &all[(size_t)pos * vocab], &want[(size_t)pos * vocab], vocab, tol_logit));
        }
    }
    // decode: one token per call
    for (int pos = prompt_len; pos < prompt_len + decode; pos++) {
        const float *got = emx_forward(gpu, &toks[pos], 1, pos);
        cr_assert(got, "%s: %s", name, emx_state_error(gpu));
        std::vector<float> g(got, got + vocab);
        const float *r = ref_forward(ref, toks[pos], pos);
        snprintf(what, sizeof what, "%s decode logits pos %d", name, pos);
        worst_logit = fmax(worst_logit, check(what, g.data(), r, vocab, tol_logit));
        worst_score = fmax(worst_score, check_scores(name, m, gpu, ref, pos, tol_score));
    }
    cr_log_info("%s: CUDA vs reference over %d positions: max|dlogit| %.3g, max|dscore| %.3g", name,
                prompt_len + decode, worst_logit, worst_score);
    emx_state_free(gpu);
    ref_state_free(ref);
    ref_model_free(rm);
    emx_model_close(&m);
}

}  // namespace

Test(forward_cuda_ref, stories260K_f32, .timeout = 900) { cuda_vs_ref("stories260K.f32.bin", 5e-4, 5e-4, true); }
Test(forward_cuda_ref, stories260K_q8, .timeout = 900) { cuda_vs_ref("stories260K.q8.bin", 0.6, 2.0, true); }
Test(forward_cuda_ref, llama3_tiny_f32, .timeout = 900) { cuda_vs_ref("llama3-tiny.f32.bin", 5e-4, 5e-4, false); }
Test(forward_cuda_ref, qwen3_tiny_f32, .timeout = 900) { cuda_vs_ref("qwen3-tiny.f32.bin", 5e-4, 5e-4, false); }
// Qwen2: q/k/v biases (added in the rope kernel); q8 reads int8 activations as the CPU's does
// (tests/test_arch.c: 1.24 / 0.53 on the CPU over 44 positions)
Test(forward_cuda_ref, qwen25_tiny_f32, .timeout = 900) { cuda_vs_ref("qwen2.5-tiny.f32.bin", 5e-4, 5e-4, false); }
Test(forward_cuda_ref, qwen25_tiny_q8, .timeout = 900) { cuda_vs_ref("qwen2.5-tiny.q8.bin", 3.5, 1.0, false); }

// Gemma 3 (sandwich norms, GeGLU, the embedding and attention scales, q/k norms, local layers'
// RoPE base and window of 8 keys, 5 local layers and 1 global): an 11-token prompt (rows 8..10
// past the window) and 2 decode steps (the decode graph: the window from the key count read on
// the device); the scores of the keys before a local layer's window are -inf on both sides.
// Short: the 262k-row classifier is slow under emulation. Tolerances as the CPU's
// (tests/test_arch.c's cpu_gemma3_*).
Test(forward_cuda_ref, gemma3_tiny_f32, .timeout = 900) { cuda_vs_ref("gemma3-tiny.f32.bin", 5e-4, 5e-4, false, 11, 2); }
Test(forward_cuda_ref, gemma3_tiny_q8, .timeout = 900) { cuda_vs_ref("gemma3-tiny.q8.bin", 3.5, 1.0, false, 11, 2); }
// Gemma 3 4B+'s linear RoPE scaling of the global layers (factor 8; gemma3-tiny's own is 1), set
// on the opened model for both sides.
Test(forward_cuda_ref, gemma3_tiny_f32_linear_rope, .timeout = 900) {
    cuda_vs_ref("gemma3-tiny.f32.bin", 5e-4, 5e-4, false, 11, 2, 8.0f);
}
