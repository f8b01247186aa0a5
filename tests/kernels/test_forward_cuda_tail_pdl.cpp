// test_forward_cuda_tail_pdl.cpp — the decode step's tail (runtime/cuda/forward_cuda_tail.c's
// decide_kernels: the logits metrics, the attention metrics, the sampler) with programmatic
// dependent launch against the same step with EMX_CUDA_PDL=0, whole models on emulated cuda:0.
//
// Three states of one model: EMX_CUDA_PDL=0 (the reference: plain launches), PDL on through the
// decode graph, PDL on through direct launches. Each decides every step with emx_forward_decide
// and the same spec (greedy and the entropix switch with the step's metrics brought back, or a
// sampled draw with temperature and top-p, whose first kernel then follows the classifier): at
// every step the token, the entropix decision, the best-of-N score and every metric (logits and
// attention, sliding-window layers on Gemma 3) bitwise those of the reference. The emulator runs a programmatic launch's blocks up to their emx_pdl_wait
// before the kernel before it ends (tests/cuda_emu/src/launch_ex.cpp), so a tail kernel that read
// its input before its wait would see the previous step's logits, scores or partials and differ.
// Also counted there: every tail kernel of a PDL step is a programmatic launch, none with
// EMX_CUDA_PDL=0, and the captured graph has a programmatic edge for each programmatic launch.
// Vocabularies: stories260K's 512 (one block decides), Qwen3's 151,936 and Gemma 3's 262,144
// (the many-block passes, sampling_mb.cuh, and with top-k off the wide draw, sampling_wide.cuh).
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "kb_util.h"
#include "pdl_test_util.h"
extern "C" {
#include "sampler/profile.h"
}

namespace {

// The tail's kernels by name (kernels/logits_metrics.cu, attn_metrics.cu, sampling/).
const std::initializer_list<const char *> TAIL_KERNELS = {
    "logits_partial_kernel", "logits_merge_kernel", "attn_layer_kernel", "attn_average_kernel",
    "mb_", "wide_", "sample_kernel", "entropix_kernel"};

EmxDecideSpec spec_of(int kind) {
    EmxDecideSpec sp = {};
    sp.kind = kind;
    sp.pause_token = -1;
    sp.seed = 1234;
    sp.want_metrics = 1;  // the metrics come back too: compared bitwise
    if (kind == EMX_DECIDE_SAMPLE) {
        sp.want_metrics = 0;  // no metrics kernels: the sampler's first kernel follows the classifier
        sp.params.temperature = 0.9f;
        sp.params.top_k = 0;  // from 8192 logits on: the wide draw
        sp.params.top_p = 0.9f;
        sp.params.min_p = 0.0f;
    }
    if (kind == EMX_DECIDE_ENTROPIX) emx_profile_classic(&sp.profile);
    return sp;
}

void expect_same(const char *name, const char *what, int pos, const EmxDecideResult &want, const EmxDecideResult &got) {
    cr_assert_eq(got.token, want.token, "%s: PDL (%s): token %d, off %d at pos %d", name, what, got.token, want.token,
                 pos);
    cr_assert(memcmp(&got.decision, &want.decision, sizeof want.decision) == 0, "%s: PDL (%s): decision differs at pos %d",
              name, what, pos);
    cr_assert(memcmp(&got.score, &want.score, sizeof want.score) == 0, "%s: PDL (%s): score %.17g, off %.17g at pos %d",
              name, what, got.score, want.score, pos);
    const double *g = &got.metrics.logits_entropy_bits, *w = &want.metrics.logits_entropy_bits;
    cr_assert(memcmp(&got.metrics, &want.metrics, sizeof want.metrics) == 0,
              "%s: PDL (%s): metrics differ at pos %d (logits H %.17g vs %.17g, attention H %.17g vs %.17g)", name, what,
              pos, *g, *w, got.metrics.attn_entropy_bits, want.metrics.attn_entropy_bits);
}

// prompt tokens, then `steps` decode steps decided by `kind` on the three states.
void tail_pdl_equals_off(const char *name, int kind, int prompt, int steps) {
    EmxModel m;
    if (!open_test_model(name, &m)) cr_skip_test("build/models/%s missing (make test-models)", name);
    const int ctx = prompt + steps + 2, vocab = (int)m.cfg.vocab_size;
    EmxState *off = state_pdl(&m, "0", ctx, 0, nullptr);
    EmxState *on = state_pdl(&m, nullptr, ctx, 0, off);
    EmxState *direct = state_pdl(&m, nullptr, ctx, 1, off);
    EmxState *all[3] = {off, on, direct};
    const char *what[3] = {"off", "graph", "direct launches"};
    const EmxDecideSpec spec = spec_of(kind);
    std::vector<int> toks(prompt);
    for (int i = 0; i < prompt; i++) toks[i] = (5 + 31 * i) % vocab;
    EmxDecideResult out[3];
    for (int k = 0; k < 3; k++)
        cr_assert_eq(emx_forward_decide(all[k], toks.data(), prompt, 0, &spec, &out[k]), 1, "%s",
                     emx_state_error(all[k]));
    for (int step = 0; step < steps; step++) {
        const int pos = prompt + step, tok = out[0].token;
        cr_assert(tok >= 0 && tok < vocab, "%s: off decided %d", name, tok);
        PdlCounts used[3];
        for (int k = 0; k < 3; k++) {
            const PdlCounts before = pdl_counts_now(TAIL_KERNELS);
            cr_assert_eq(emx_forward_decide(all[k], &tok, 1, pos, &spec, &out[k]), 1, "%s", emx_state_error(all[k]));
            used[k] = pdl_counts_now(TAIL_KERNELS) - before;
        }
        for (int k = 1; k < 3; k++) expect_same(name, what[k], pos, out[0], out[k]);
#ifdef ENTROPIX_CUDA_EMU
        cr_assert_eq(used[0].pdl, 0, "%s: EMX_CUDA_PDL=0 made %ld programmatic launches", name, used[0].pdl);
        for (int k = 1; k < 3; k++) {
            cr_assert_gt(used[k].tail, 0, "%s: no tail kernel ran", name);
            cr_assert_eq(used[k].tail_pdl, used[k].tail, "%s: PDL (%s): %ld of the tail's %ld kernels programmatic",
                         name, what[k], used[k].tail_pdl, used[k].tail);
        }
        cr_assert_eq(used[2].pdl, used[1].pdl, "%s: direct launches: %ld programmatic, the graph %ld", name,
                     used[2].pdl, used[1].pdl);
        if (step == 0)  // the graph is captured at the first decode step
            cr_assert_eq(used[1].edges, used[1].pdl, "%s: %ld programmatic edges for %ld programmatic launches", name,
                         used[1].edges, used[1].pdl);
        cr_log_info("%s (decide %d): %ld tail kernels a step, all programmatic", name, kind, used[1].tail);
#else
        (void)used;
#endif
    }
    for (EmxState *s : all) emx_state_free(s);
    emx_model_close(&m);
}

void all_kinds(const char *name, int prompt, int steps) {
    for (int kind : {EMX_DECIDE_GREEDY, EMX_DECIDE_ENTROPIX, EMX_DECIDE_SAMPLE})
        tail_pdl_equals_off(name, kind, prompt, steps);
}

}  // namespace

Test(forward_cuda_tail_pdl, stories260K_equals_pdl_off, .timeout = 900) {
    all_kinds("stories260K.q8.bin", 3, 3);
}

// Names matched by the Makefile's EMU_FORWARD_ONLY (qwen3, gemma3): the reverse-schedule pass
// skips them. Gemma 3's window is 8 keys: a prompt of 9 makes its local layers' metrics read
// from a first visible key past 0.
Test(forward_cuda_tail_pdl, qwen3_equals_pdl_off, .timeout = 900) {
    all_kinds("qwen3-tiny.q8.bin", 3, 2);
}

Test(forward_cuda_tail_pdl, gemma3_equals_pdl_off, .timeout = 900) {
    all_kinds("gemma3-tiny.q8.bin", 9, 2);
}
