// test_forward_cuda_timeline.cpp — the phase timeline of a decode step (EmxStateOptions.
// phase_timeline, runtime/cuda/phase_clock.h) on the emulated GPU.
//
// A timed state decodes the same tokens as a graph state of the same model (its weights shared):
// its logits must be BITWISE the graph's at every step (the timeline only adds events between
// the same kernels, launched directly), every phase of EmxPhase must have taken time (a phase
// that no mark closes, or closes twice in a row, would read 0), and only decode steps count: the
// prompt's prefill and another state's steps add nothing. Both the fused layer and the separate
// kernels (EMX_CUDA_FUSED=0), whose phase boundaries fall inside different functions; Gemma 3's
// sandwich norms close the attention-output phase inside cuda_attn_block_out. With the persistent
// kernel (one launch) its blocks' clocks split the launch between the phases, each phase's barrier
// time no more than the phase's (0 on the graph path).
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "forward_test_util.h"
#include "kb_util.h"

namespace {

EmxState *state_of(const EmxModel *m, int ctx, const EmxState *share, int timeline, bool fused, bool persistent = false) {
    if (!fused) setenv("EMX_CUDA_FUSED", "0", 1);
    EmxStateOptions opt = {};
    opt.n_threads = 1;
    opt.ctx = ctx;
    opt.device = "cuda:0";
    opt.share_weights = share;
    opt.cache_type = EMX_KV_AUTO;  // (the persistent kernel's: f16 beside quantised weights)
    opt.phase_timeline = timeline;
    opt.persistent = persistent;
    char err[512];
    EmxState *s = emx_state_new(m, &opt, err, sizeof err);
    unsetenv("EMX_CUDA_FUSED");
    cr_assert(s, "emx_state_new: %s", err);
    return s;
}

void timeline_matches_graph(const char *name, bool fused, int steps, bool persistent = false) {
    EmxModel m;
    if (!open_test_model(name, &m)) cr_skip_test("build/models/%s missing (make test-models)", name);
    const int ctx = 16, vocab = (int)m.cfg.vocab_size, prompt = 3;
    EmxState *graph = state_of(&m, ctx, nullptr, 0, fused);
    EmxState *timed = state_of(&m, ctx, graph, 1, fused, persistent);
    EmxStateInfo info;
    emx_state_info(timed, &info);
    cr_assert(!info.uses_graphs, "%s: a timed state launches directly", name);
    cr_assert_eq(info.persistent_blocks > 0, persistent, "%s: decode path '%s'", name, info.decode_path);
    cr_assert_eq(info.phases.steps, 0);
    emx_state_info(graph, &info);
    cr_assert_eq(info.phases.steps, 0, "%s: an untimed state reports no phases", name);
    std::vector<int> toks(prompt);
    for (int i = 0; i < prompt; i++) toks[i] = (3 + 11 * i) % vocab;
    for (EmxState *s : {graph, timed}) cr_assert(emx_forward(s, toks.data(), prompt, 0), "%s", emx_state_error(s));
    emx_state_info(timed, &info);
    cr_assert_eq(info.phases.steps, 0, "%s: the prompt's prefill is not a timed decode step", name);
    int tok = 7 % vocab;
    for (int step = 0; step < steps; step++) {
        const float *g = emx_forward(graph, &tok, 1, prompt + step);
        cr_assert(g, "%s", emx_state_error(graph));
        const std::vector<float> gl(g, g + vocab);
        const float *t = emx_forward(timed, &tok, 1, prompt + step);
        cr_assert(t, "%s", emx_state_error(timed));
        cr_assert(memcmp(gl.data(), t, (size_t)vocab * sizeof(float)) == 0, "%s: logits differ at step %d", name, step);
        int best = 0;
        for (int i = 1; i < vocab; i++) best = t[i] > t[best] ? i : best;
        tok = best;
    }
    emx_state_info(timed, &info);
    cr_assert_eq(info.phases.steps, steps, "%s: %ld steps timed, %d decoded", name, info.phases.steps, steps);
    double waits = 0;
    for (int p = 0; p < EMX_PHASES; p++) {
        const double us = info.phases.us[p], wait = info.phases.wait_us[p];
        cr_assert(us > 0, "%s (%s): phase '%s' took %g µs", name, info.decode_path, emx_phase_name((EmxPhase)p), us);
        cr_assert(persistent ? wait >= 0 && wait <= us * (1 + 1e-9) : wait == 0, "%s (%s): phase '%s': %g µs of %g "
                  "at its barriers", name, info.decode_path, emx_phase_name((EmxPhase)p), wait, us);
        waits += wait;
    }
    cr_assert(!persistent || waits > 0, "%s: no time at the persistent kernel's barriers", name);
    emx_state_free(timed);
    emx_state_free(graph);
    emx_model_close(&m);
}

}  // namespace

Test(forward_cuda_timeline, stories260K_fused_and_separate, .timeout = 600) {
    timeline_matches_graph("stories260K.q8.bin", true, 3);
    timeline_matches_graph("stories260K.q8.bin", false, 2);
}

// Gemma 3's sandwich norms and GeGLU: the separate kernels from wo to w_down inside the fused step.
Test(forward_cuda_timeline, gemma3_tiny_fused, .timeout = 600) {
    timeline_matches_graph("gemma3-tiny.q8.bin", true, 2);
}

// The persistent kernel (one launch for the embedding, the layers and the classifier) split
// between the phases by its blocks' clocks: every phase's share, each with its barrier time.
Test(forward_cuda_timeline, llama3_tiny_persistent_kernel, .timeout = 600) {
    timeline_matches_graph("llama3-tiny.q8.bin", true, 2, true);
}
