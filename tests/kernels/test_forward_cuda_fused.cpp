// test_forward_cuda_fused.cpp — the fused decode layer (runtime/cuda/forward_cuda_fused.c) against
// the graph path of separate kernels (EMX_CUDA_FUSED=0 when the state is made), whole models.
//
// Two states of the same model on emulated cuda:0, one made with EMX_CUDA_FUSED=0, the other
// with it unset (the default: fused), prefill the same prompt (both the separate kernels: a
// prompt's chunks are not fused), then decode greedily, each step through the decode graph (and
// once more through direct launches). At every step: the logits BITWISE equal, every layer's
// score row and the KV rows of every layer bitwise equal (the fused kernels do the same
// arithmetic in the same order: test_matvec_fused.cpp, test_attention_decode.cpp), and so the
// same greedy tokens. Also the kernels a step runs (emu/kernel_runs.h), each step counted on the
// emulator: per layer, the q/k/v set, the attention (one kernel: its last blocks combine), wo,
// the SwiGLU pair and w_down: 5 (Llama-type models; Gemma 3 keeps its sandwich-normed parts
// separate), and 6 fewer than the graph path's 11 where the weights are quantised (the norms,
// rope_kv, the attention's combine and the quantisations of att and hb), 4 fewer with f32
// weights (no quantisation launches there).
// Breadth at small vocabularies (stories260K: Llama 2 style; qwen2.5-tiny: biases; gemma3-tiny:
// sandwich norms, GeGLU, window and scale; f32, q8, q4; an f16 cache); Qwen3 and Llama 3 at their
// real vocabularies in EMU_FORWARD_ONLY (the Makefile: the reverse-schedule pass skips them).
#include <stdlib.h>
#include <string.h>

#include <string>
#include <vector>

#include "forward_test_util.h"
#include "kb_util.h"
#ifdef ENTROPIX_CUDA_EMU
#include "tests/cuda_emu/include/emu/kernel_runs.h"
#endif

namespace {

long runs(const char *prefix) {
#ifdef ENTROPIX_CUDA_EMU
    return emu::kernel_runs(prefix);
#else
    (void)prefix;
    return 0;
#endif
}

// A state made with EMX_CUDA_FUSED as given (NULL: unset), which the state reads once.
EmxState *state_with(const EmxModel *m, const char *fused, int ctx, int no_graphs, const EmxState *share,
                     EmxKvType cache) {
    if (fused)
        setenv("EMX_CUDA_FUSED", fused, 1);
    else
        unsetenv("EMX_CUDA_FUSED");
    EmxState *s = new_state(m, "cuda:0", ctx, no_graphs, share, cache);
    unsetenv("EMX_CUDA_FUSED");
    return s;
}

int argmax(const float *v, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
}

#ifdef ENTROPIX_CUDA_EMU  // the counts are the emulator's
// Launches a layer the fused step saves, for a model without sandwich norms whose dim is a
// multiple of 32: the attention norm, rope_kv, the attention's combine kernel and the FFN norm
// (now prologues and the attention's own work); with quantised weights also the quantisations of att and hb, each where its width
// is a multiple of 32 (else the graph path's matvec reads f32 and quantises nothing either).
// And the fused matvecs a step runs: q/k/v, wo, gate/up, each layer (their input is dim wide, or
// q_dim for wo), w_down where hidden_dim is a multiple of 32, and the classifier (whose output
// norm, a launch of its own in the graph path, is its prologue: one launch fewer a step).
int saved_per_layer(const EmxModel &m, bool quantised) {
    const int q_dim = (int)(m.cfg.n_heads * m.cfg.head_dim);
    return 4 + (quantised ? (q_dim % 32 == 0) + (m.cfg.hidden_dim % 32 == 0) : 0);
}
long fused_matvecs(const EmxModel &m) {
    return (long)m.cfg.n_layers * (3 + (m.cfg.hidden_dim % 32 == 0)) + 1;
}
#endif

// expect_counts: the launch counts above hold (false: the fused step runs fewer kernels, no more
// said: Gemma 3).
void fused_equals_graph(const char *name, int steps, bool expect_counts, EmxKvType cache = EMX_KV_F32) {
    EmxModel m;
    if (!open_test_model(name, &m)) cr_skip_test("build/models/%s missing (make test-models)", name);
    const int ctx = 16, vocab = (int)m.cfg.vocab_size, L = (int)m.cfg.n_layers, prompt = 4;
    const bool quantised = strstr(name, ".f32.") == nullptr;
    EmxState *ref = state_with(&m, "0", ctx, 0, nullptr, cache);
    EmxState *fused = state_with(&m, nullptr, ctx, 0, ref, cache);
    EmxState *direct = state_with(&m, "1", ctx, 1, ref, cache);  // the fused layer, launched one by one
    std::vector<int> toks(prompt);
    for (int i = 0; i < prompt; i++) toks[i] = (1 + 37 * i) % vocab;
    for (EmxState *s : {ref, fused, direct}) cr_assert(emx_forward(s, toks.data(), prompt, 0), "%s", emx_state_error(s));
    int tok = 5 % vocab;
    const size_t ns = (size_t)L * m.cfg.n_heads * ctx;
    for (int step = 0; step < steps; step++) {
        const int pos = prompt + step;
        long before = runs("");
        const float *r = emx_forward(ref, &tok, 1, pos);
        cr_assert(r, "%s", emx_state_error(ref));
        const long ref_runs = runs("") - before;
        const std::vector<float> rl(r, r + vocab);
        before = runs("");
        const long fused_before = runs("matvec_fused"), attn_before = runs("attention_decode");
        const float *f = emx_forward(fused, &tok, 1, pos);
        cr_assert(f, "%s", emx_state_error(fused));
        const long fused_runs = runs("") - before, fused_matvec_runs = runs("matvec_fused") - fused_before;
        const long fused_attn_runs = runs("attention_decode") - attn_before;
        cr_assert(memcmp(rl.data(), f, (size_t)vocab * sizeof(float)) == 0, "%s: logits differ at pos %d", name, pos);
        const float *d = emx_forward(direct, &tok, 1, pos);
        cr_assert(d && memcmp(rl.data(), d, (size_t)vocab * sizeof(float)) == 0, "%s: direct launches differ at pos %d",
                  name, pos);
        const std::vector<float> rs(emx_attention_scores(ref, nullptr), emx_attention_scores(ref, nullptr) + ns);
        const float *fs = emx_attention_scores(fused, nullptr);
        for (size_t lh = 0; lh < (size_t)L * m.cfg.n_heads; lh++)
            cr_assert(memcmp(&rs[lh * ctx], fs + lh * ctx, (size_t)(pos + 1) * sizeof(float)) == 0,
                      "%s: score row %zu differs at pos %d", name, lh, pos);
        const size_t bytes = emx_state_kv_rows_bytes(ref, pos + 1);
        std::vector<uint8_t> rk(bytes), fk(bytes);
        cr_assert_eq(emx_state_kv_rows_read(ref, 0, pos + 1, rk.data()), 0);
        cr_assert_eq(emx_state_kv_rows_read(fused, 0, pos + 1, fk.data()), 0);
        cr_assert(memcmp(rk.data(), fk.data(), bytes) == 0, "%s: KV rows differ at pos %d", name, pos);
#ifdef ENTROPIX_CUDA_EMU
        cr_log_info("%s: %ld kernels a step fused, %ld separate (%d layers)", name, fused_runs, ref_runs, L);
        cr_assert_lt(fused_runs, ref_runs, "%s: the fused step runs fewer kernels", name);
        if (expect_counts) {
            cr_assert_eq(ref_runs - fused_runs, (long)saved_per_layer(m, quantised) * L + 1,
                         "%s: %ld kernels fused, %ld separate", name, fused_runs, ref_runs);
            cr_assert_eq(fused_matvec_runs, fused_matvecs(m), "%s: fused matvecs", name);
            cr_assert_eq(fused_attn_runs, (long)L, "%s: fused attention", name);
        }
#else
        (void)fused_runs, (void)ref_runs, (void)expect_counts, (void)quantised, (void)fused_matvec_runs, (void)fused_attn_runs;
#endif
        tok = argmax(f, vocab);  // greedy: the same token for both, the logits being the same
    }
    emx_state_free(direct);
    emx_state_free(fused);
    emx_state_free(ref);
    emx_model_close(&m);
}

}  // namespace

Test(forward_cuda_fused, stories260K_equals_graph_path, .timeout = 600) {
    fused_equals_graph("stories260K.q8.bin", 3, true);
    fused_equals_graph("stories260K.f32.bin", 3, true);
    fused_equals_graph("stories260K.q4.bin", 2, true);
    fused_equals_graph("stories260K.q8.bin", 2, true, EMX_KV_F16);
}

Test(forward_cuda_fused, qwen2_5_tiny_equals_graph_path, .timeout = 600) {
    fused_equals_graph("qwen2.5-tiny.q8.bin", 2, true);
    fused_equals_graph("qwen2.5-tiny.f32.bin", 1, true);
}

// Gemma 3: sandwich norms and GeGLU keep their kernels from wo to w_down; q/k/v with the norm,
// and the attention with RoPE, the norms and the KV write, are fused.
Test(forward_cuda_fused, gemma3_tiny_equals_graph_path, .timeout = 600) {
    fused_equals_graph("gemma3-tiny.q8.bin", 2, false);
}

Test(forward_cuda_fused, qwen3_tiny_equals_graph_path, .timeout = 900) {
    fused_equals_graph("qwen3-tiny.q8.bin", 2, true);
}

Test(forward_cuda_fused, llama3_tiny_equals_graph_path, .timeout = 900) {
    fused_equals_graph("llama3-tiny.q4.bin", 2, true);
}
