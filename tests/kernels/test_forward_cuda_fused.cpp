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
// the SwiGLU pair and w_down: 5 (Llama-type models), and 6 fewer than the graph path's 11 where
// the weights are quantised (the norms, rope_kv, the attention's combine and the quantisations of
// att and hb), 4 fewer with f32 weights (no quantisation launches there). Gemma 3 (sandwich
// norms, GeGLU): also 5 a layer, the q/k/v set and the GeGLU pair each with the residual add of
// the normed block output before it in its prologue, plus that add alone after the last layer:
// gemma3-tiny q8 runs 33 kernels a step (6 layers), where the fused step that kept the separate
// kernels from wo to w_down ran 86 (14 a layer) and the graph path runs 105.
// Breadth at small vocabularies (stories260K: Llama 2 style; qwen2.5-tiny: biases; gemma3-tiny:
// sandwich norms, GeGLU, window and scale; f32, q8, q4; an f16 cache); Qwen3 and Llama 3 at their
// real vocabularies in EMU_FORWARD_ONLY (the Makefile: the reverse-schedule pass skips them).
// Then programmatic dependent launch (PDL) on and off, the same models (pdl_equals_off).
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


long programmatic_runs() {
#ifdef ENTROPIX_CUDA_EMU
    return emu::programmatic_kernel_runs("");
#else
    return 0;
#endif
}
long programmatic_edges() {
#ifdef ENTROPIX_CUDA_EMU
    return emu::programmatic_edges_instantiated();
#else
    return 0;
#endif
}

// A state made with the environment variable `var` (EMX_CUDA_FUSED, EMX_CUDA_PDL) as given
// (NULL: unset), which the state reads once.
EmxState *state_env(const EmxModel *m, const char *var, const char *value, int ctx, int no_graphs,
                    const EmxState *share, EmxKvType cache) {
    if (value)
        setenv(var, value, 1);
    else
        unsetenv(var);
    EmxState *s = new_state(m, "cuda:0", ctx, no_graphs, share, cache);
    unsetenv(var);
    return s;
}
EmxState *state_with(const EmxModel *m, const char *fused, int ctx, int no_graphs, const EmxState *share,
                     EmxKvType cache) {
    return state_env(m, "EMX_CUDA_FUSED", fused, ctx, no_graphs, share, cache);
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
// A sandwich-normed model whose matvecs all fit: per layer the q/k/v set, the attention, wo, the
// GeGLU pair and w_down; the embedding, the last layer's residual add alone and the classifier.
long sandwich_step_kernels(const EmxModel &m) { return 5L * m.cfg.n_layers + 3; }
#endif

// expect_counts: the launch counts above hold (Llama-type models, or with ext.sandwich_norms
// Gemma 3's; false: the fused step runs fewer kernels, no more said).
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
        long before = emu_runs("");
        const float *r = emx_forward(ref, &tok, 1, pos);
        cr_assert(r, "%s", emx_state_error(ref));
        const long ref_runs = emu_runs("") - before;
        const std::vector<float> rl(r, r + vocab);
        before = emu_runs("");
        const long fused_before = emu_runs("matvec_fused"), attn_before = emu_runs("attention_decode");
        const long residual_before = emu_runs("fused_residual");
        const float *f = emx_forward(fused, &tok, 1, pos);
        cr_assert(f, "%s", emx_state_error(fused));
        const long fused_runs = emu_runs("") - before, fused_matvec_runs = emu_runs("matvec_fused") - fused_before;
        const long fused_attn_runs = emu_runs("attention_decode") - attn_before;
        const long fused_residual_runs = emu_runs("fused_residual") - residual_before;
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
        if (expect_counts && m.ext.sandwich_norms) {
            cr_assert_eq(fused_runs, sandwich_step_kernels(m), "%s: %ld kernels fused", name, fused_runs);
            cr_assert_eq(fused_matvec_runs, 4L * L + 1, "%s: fused matvecs", name);
            cr_assert_eq(fused_attn_runs, (long)L, "%s: fused attention", name);
            cr_assert_eq(fused_residual_runs, 1, "%s: the residual add alone, after the last layer", name);
        } else if (expect_counts) {
            cr_assert_eq(ref_runs - fused_runs, (long)saved_per_layer(m, quantised) * L + 1,
                         "%s: %ld kernels fused, %ld separate", name, fused_runs, ref_runs);
            cr_assert_eq(fused_matvec_runs, fused_matvecs(m), "%s: fused matvecs", name);
            cr_assert_eq(fused_attn_runs, (long)L, "%s: fused attention", name);
        }
#else
        (void)fused_runs, (void)ref_runs, (void)expect_counts, (void)quantised, (void)fused_matvec_runs, (void)fused_attn_runs;
        (void)fused_residual_runs;
#endif
        tok = logits_argmax(f, vocab);  // greedy: the same token for both, the logits being the same
    }
    emx_state_free(direct);
    emx_state_free(fused);
    emx_state_free(ref);
    emx_model_close(&m);
}

// The decode step with programmatic dependent launch (the default where the device has it; the
// emulator's device is sm_90) against the same step with EMX_CUDA_PDL=0, graph and direct: logits,
// every score row and the KV rows bitwise equal at every step, hence the same greedy tokens. The
// emulator runs each programmatic launch's blocks up to their emx_pdl_wait before the kernel
// before it ends (tests/cuda_emu/src/launch_ex.cpp), so a kernel that read its input before its wait
// would see the previous step's or layer's values and differ here. Also counted there: the
// programmatic launches a step makes (the fused matvecs and the attention's chunk kernel, none
// with PDL off) and the programmatic edges of the captured graph (one for each of them: each
// follows a kernel).
void pdl_equals_off(const char *name, int steps, EmxKvType cache = EMX_KV_F32) {
    EmxModel m;
    if (!open_test_model(name, &m)) cr_skip_test("build/models/%s missing (make test-models)", name);
    const int ctx = 16, vocab = (int)m.cfg.vocab_size, L = (int)m.cfg.n_layers, prompt = 3;
    EmxState *off = state_env(&m, "EMX_CUDA_PDL", "0", ctx, 0, nullptr, cache);
    long edges = programmatic_edges();
    EmxState *on = state_env(&m, "EMX_CUDA_PDL", nullptr, ctx, 0, off, cache);
    EmxState *direct = state_env(&m, "EMX_CUDA_PDL", nullptr, ctx, 1, off, cache);
    EmxState *all[3] = {off, on, direct};
    std::vector<int> toks(prompt);
    for (int i = 0; i < prompt; i++) toks[i] = (3 + 29 * i) % vocab;
    for (EmxState *s : all) cr_assert(emx_forward(s, toks.data(), prompt, 0), "%s", emx_state_error(s));
    int tok = 7 % vocab;
    const size_t ns = (size_t)L * m.cfg.n_heads * ctx;
    for (int step = 0; step < steps; step++) {
        const int pos = prompt + step;
        long pdl_runs[3];
        const float *out[3];
        std::vector<float> logits[3];
        for (int k = 0; k < 3; k++) {
            const long before = programmatic_runs(), edges_before = programmatic_edges();
            out[k] = emx_forward(all[k], &tok, 1, pos);
            cr_assert(out[k], "%s", emx_state_error(all[k]));
            logits[k].assign(out[k], out[k] + vocab);
            pdl_runs[k] = programmatic_runs() - before;
            if (k == 1 && step == 0) edges = programmatic_edges() - edges_before;  // the graph's capture
        }
        const char *what[3] = {"off", "graph", "direct launches"};
        const std::vector<float> rs(emx_attention_scores(off, nullptr), emx_attention_scores(off, nullptr) + ns);
        const size_t bytes = emx_state_kv_rows_bytes(off, pos + 1);
        std::vector<uint8_t> rk(bytes), k2(bytes);
        cr_assert_eq(emx_state_kv_rows_read(off, 0, pos + 1, rk.data()), 0);
        for (int k = 1; k < 3; k++) {
            cr_assert(memcmp(logits[0].data(), logits[k].data(), (size_t)vocab * sizeof(float)) == 0,
                      "%s: PDL (%s): logits differ at pos %d", name, what[k], pos);
            const float *fs = emx_attention_scores(all[k], nullptr);
            for (size_t lh = 0; lh < (size_t)L * m.cfg.n_heads; lh++)
                cr_assert(memcmp(&rs[lh * ctx], fs + lh * ctx, (size_t)(pos + 1) * sizeof(float)) == 0,
                          "%s: PDL (%s): score row %zu differs at pos %d", name, what[k], lh, pos);
            cr_assert_eq(emx_state_kv_rows_read(all[k], 0, pos + 1, k2.data()), 0);
            cr_assert(memcmp(rk.data(), k2.data(), bytes) == 0, "%s: PDL (%s): KV rows differ at pos %d", name, what[k], pos);
        }
#ifdef ENTROPIX_CUDA_EMU
        cr_assert_eq(pdl_runs[0], 0, "%s: EMX_CUDA_PDL=0 launched %ld kernels with the attribute", name, pdl_runs[0]);
        cr_assert_gt(pdl_runs[1], (long)L, "%s: %ld programmatic launches a step", name, pdl_runs[1]);
        cr_assert_eq(pdl_runs[2], pdl_runs[1], "%s: direct launches: %ld programmatic, the graph %ld", name, pdl_runs[2],
                     pdl_runs[1]);
        cr_assert_eq(edges, pdl_runs[1], "%s: the graph has %ld programmatic edges for %ld programmatic launches", name,
                     edges, pdl_runs[1]);
#else
        (void)pdl_runs, (void)edges;
#endif
        tok = logits_argmax(logits[1].data(), vocab);
    }
    for (EmxState *s : all) emx_state_free(s);
    emx_model_close(&m);
}

}  // namespace

Test(forward_cuda_fused, pdl_stories260K_equals_pdl_off, .timeout = 900) {
    pdl_equals_off("stories260K.q8.bin", 3);
    pdl_equals_off("stories260K.f32.bin", 2);
    pdl_equals_off("stories260K.q4.bin", 2, EMX_KV_F16);
}

// Names matched by the Makefile's EMU_FORWARD_ONLY: the reverse-schedule pass skips them.
Test(forward_cuda_fused, pdl_qwen25_gemma3_equals_pdl_off, .timeout = 900) {
    pdl_equals_off("qwen2.5-tiny.q8.bin", 2);
    pdl_equals_off("gemma3-tiny.q8.bin", 2);
}

Test(forward_cuda_fused, pdl_qwen3_llama3_equals_pdl_off, .timeout = 900) {
    pdl_equals_off("qwen3-tiny.q8.bin", 2);
    pdl_equals_off("llama3-tiny.q4.bin", 2);
}

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

// Gemma 3: the sandwich norms' residual adds in the next launch's prologue, the GeGLU pair fused;
// quantised (int8 groups made after the add and norm) and float weights (the normed row in shared
// memory).
Test(forward_cuda_fused, gemma3_tiny_equals_graph_path, .timeout = 600) {
    fused_equals_graph("gemma3-tiny.q8.bin", 2, true);
    fused_equals_graph("gemma3-tiny.f32.bin", 1, true);
    fused_equals_graph("gemma3-tiny.q4.bin", 1, true, EMX_KV_F16);
}

Test(forward_cuda_fused, qwen3_tiny_equals_graph_path, .timeout = 900) {
    fused_equals_graph("qwen3-tiny.q8.bin", 2, true);
}

Test(forward_cuda_fused, llama3_tiny_equals_graph_path, .timeout = 900) {
    fused_equals_graph("llama3-tiny.q4.bin", 2, true);
}
