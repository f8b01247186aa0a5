// test_forward_cuda_ahead.cpp — decode steps queued ahead (runtime/forward.h
// emx_forward_decide_ahead, runtime/cuda/forward_cuda_ahead.c): the step that feeds a chosen token
// queued on the device before the host reads that token, whole models on emulated cuda:0.
//
// Two states of one model decode the same prompt: one step at a time (emx_forward_decide) and
// queued ahead; every step's token, decision, score and metrics are bitwise equal, for greedy, a
// sampled draw and entropix, on the graph path and the persistent kernel. Each runs twice: with
// the emulator's streams synchronous (work runs when queued: a result read before its copy)
// and deferred (work runs when the host waits: a pinned slot overwritten by the step queued
// after it, a step that waits for the wrong event); there, right after a call returns, the step
// it queued has not run: the host really goes on while it is queued. A queued step that the next
// call does not take is dropped with the entropix state put back as it found it.
#include <math.h>
#include <string.h>

#include "forward_test_util.h"
#include "kb_util.h"
#ifdef ENTROPIX_CUDA_EMU
#include "tests/cuda_emu/include/emu/api.h"
#endif

namespace {

void deferred_streams(bool on) {
#ifdef ENTROPIX_CUDA_EMU
    emu::set_deferred_streams(on);
#else
    (void)on;
#endif
}

EmxState *state_of(const EmxModel *m, int persistent, const EmxState *share) {
    EmxStateOptions opt = {};
    opt.n_threads = 1;
    opt.ctx = 24;
    opt.device = "cuda:0";
    opt.share_weights = share;
    opt.cache_type = EMX_KV_AUTO;  // (the persistent kernel's: f16 beside quantised weights)
    opt.persistent = persistent;
    char err[512];
    EmxState *s = emx_state_new(m, &opt, err, sizeof err);
    cr_assert(s, "emx_state_new: %s", err);
    return s;
}

void same_result(const EmxDecideResult &a, const EmxDecideResult &b, const char *what, int step) {
    cr_assert_eq(a.token, b.token, "%s: token %d queued ahead, %d in turn at step %d", what, a.token, b.token, step);
    cr_assert(memcmp(&a.decision, &b.decision, sizeof a.decision) == 0 &&
                  memcmp(&a.score, &b.score, sizeof a.score) == 0 && memcmp(&a.metrics, &b.metrics, sizeof a.metrics) == 0,
              "%s: the decision, score or metrics differ at step %d", what, step);
}

// `steps` decode steps of `kind` in turn and queued ahead: the same results, bitwise, and the
// feed kernel run once a step queued ahead (deferred: not yet when the call that queued it returns).
void ahead_equals_in_turn(const char *name, int persistent, int kind, int steps, bool deferred) {
    EmxModel m;
    if (!open_test_model(name, &m)) cr_skip_test("build/models/%s missing (make test-models)", name);
    deferred_streams(deferred);
    EmxState *turn = state_of(&m, persistent, nullptr), *ahead = state_of(&m, persistent, turn);
    const EmxDecideSpec spec = decide_spec(kind, 1234, 1.0f, 40, 0.95f);
    const int vocab = (int)m.cfg.vocab_size, prompt[4] = {1 % vocab, 40 % vocab, 9 % vocab, 77 % vocab};
    char what[160];
    snprintf(what, sizeof what, "%s, %s, kind %d, %s streams", name, persistent ? "persistent" : "graph", kind,
             deferred ? "deferred" : "synchronous");
    EmxDecideResult a, b;
    const long fed0 = emu_runs("feed_choice");
    (void)fed0;  // (counted on the emulator only)
    cr_assert_eq(emx_forward_decide(turn, prompt, 4, 0, &spec, &b), 1, "%s", emx_state_error(turn));
    cr_assert_eq(emx_forward_decide_ahead(ahead, prompt, 4, 0, &spec, &a), 1, "%s", emx_state_error(ahead));
    same_result(a, b, what, 0);
    for (int step = 1; step <= steps; step++) {
#ifdef ENTROPIX_CUDA_EMU
        const long fed = emu_runs("feed_choice") - fed0;
        cr_assert_eq(fed, deferred ? step - 1 : step, "%s: %ld steps fed on the device before step %d", what, fed, step);
#endif
        const int tok = b.token, pos = 3 + step;
        cr_assert_eq(emx_forward_decide(turn, &tok, 1, pos, &spec, &b), 1, "%s", emx_state_error(turn));
        cr_assert_eq(emx_forward_decide_ahead(ahead, &tok, 1, pos, &spec, &a), 1, "%s", emx_state_error(ahead));
        same_result(a, b, what, step);
    }
    // the cache up to the last token fed is the same (the queued step is dropped first)
    float *k[2], *v[2];
    int kv_dim = 0;
    emx_state_kv_cache(turn, &k[0], &v[0], &kv_dim);
    emx_state_kv_cache(ahead, &k[1], &v[1], &kv_dim);
    cr_assert(k[0] && k[1] && v[0] && v[1]);
    const size_t row = (size_t)kv_dim, ctx = (size_t)emx_state_ctx(turn);
    for (size_t l = 0; l < m.cfg.n_layers; l++)
        for (size_t p = 0; p < (size_t)(4 + steps); p++) {
            const size_t at = (l * ctx + p) * row;
            cr_assert(memcmp(k[0] + at, k[1] + at, row * sizeof(float)) == 0 &&
                          memcmp(v[0] + at, v[1] + at, row * sizeof(float)) == 0,
                      "%s: layer %zu's KV row %zu differs", what, l, p);
        }
    emx_state_free(ahead);
    emx_state_free(turn);
    deferred_streams(false);
    emx_model_close(&m);
}

}  // namespace

Test(forward_cuda_ahead, stories260K_greedy_sampled_entropix_equal_in_turn, .timeout = 900) {
    for (int deferred = 0; deferred < 2; deferred++)
        for (int kind : {EMX_DECIDE_GREEDY, EMX_DECIDE_SAMPLE, EMX_DECIDE_ENTROPIX})
            ahead_equals_in_turn("stories260K.f32.bin", 0, kind, 6, deferred);
}

// The persistent kernel whose launch makes the choice too: entropix's, and a top-k draw's.
Test(forward_cuda_ahead, qwen3_tiny_persistent_entropix_and_sampled_equal_in_turn, .timeout = 900) {
    ahead_equals_in_turn("qwen3-tiny.q8.bin", 1, EMX_DECIDE_ENTROPIX, 2, true);
    ahead_equals_in_turn("qwen3-tiny.q8.bin", 1, EMX_DECIDE_SAMPLE, 2, true);
}

// A queued step the next call does not take is dropped, and the entropix insert-once state put
// back as that step found it. The profile is made so that the prompt's step falls in no case but
// ADAPTIVE and the step after it in HELV with the pause inserted (its entropy above a threshold
// the prompt's is below): the queued step inserts the pause (the state says inserted); a call in
// between (here emx_attention_scores) drops it; the same step run again must insert the pause
// again, as the state that ran one step at a time does.
Test(forward_cuda_ahead, a_dropped_step_puts_the_entropix_state_back, .timeout = 900) {
    EmxModel m;
    if (!open_test_model("stories260K.f32.bin", &m)) cr_skip_test("build/models/stories260K.f32.bin missing");
    EmxState *turn = state_of(&m, 0, nullptr), *ahead = state_of(&m, 0, turn);
    EmxDecideSpec spec = decide_spec(EMX_DECIDE_ENTROPIX, 1234, 1.0f, 40, 0.95f);
    EmxProfile &p = spec.profile;
    p.lelv_entropy_below = p.lehv_entropy_below = -1.0;  // no LELV, LEHV, HEHV, HELV yet
    p.hehv_entropy_above = p.helv_entropy_above = 1e9;
    p.helv_varentropy_below = 1e9;
    p.helv_insert_pause = 1;
    spec.pause_token = 5;
    // a prompt whose next step's entropy is above its own (a few tried)
    int prompt[3] = {1, 0, 0}, found = 0;
    EmxDecideResult r0, r1;
    for (int t = 2; t < 40 && !found; t++) {
        prompt[1] = t, prompt[2] = (7 * t) % 500 + 1;
        cr_assert_eq(emx_forward_decide(turn, prompt, 3, 0, &spec, &r0), 1, "%s", emx_state_error(turn));
        cr_assert_eq(emx_forward_decide(turn, &r0.token, 1, 3, &spec, &r1), 1, "%s", emx_state_error(turn));
        found = r1.metrics.logits_entropy_bits > r0.metrics.logits_entropy_bits;
    }
    cr_assert(found, "no prompt whose next step has more entropy");
    p.helv_entropy_above = 0.5 * (r0.metrics.logits_entropy_bits + r1.metrics.logits_entropy_bits);
    EmxDecideResult a, b;
    cr_assert_eq(emx_forward_decide(turn, prompt, 3, 0, &spec, &b), 1, "%s", emx_state_error(turn));
    cr_assert_eq(emx_forward_decide(turn, &b.token, 1, 3, &spec, &b), 1, "%s", emx_state_error(turn));
    cr_assert_eq(b.decision.action, EMX_ACTION_INSERT, "the profile does not make the second step insert the pause");
    cr_assert_eq(b.token, 5);
    cr_assert_eq(emx_forward_decide_ahead(ahead, prompt, 3, 0, &spec, &a), 1, "%s", emx_state_error(ahead));
    int last = -1;
    cr_assert(emx_attention_scores(ahead, &last), "%s", emx_state_error(ahead));  // drops the queued step
    cr_assert_eq(last, 3, "the score rows are the dropped step's (position 3), not %d", last);
    cr_assert_eq(emx_forward_decide(ahead, &a.token, 1, 3, &spec, &a), 1, "%s", emx_state_error(ahead));
    same_result(a, b, "after a dropped step", 1);
    emx_state_free(ahead);
    emx_state_free(turn);
    emx_model_close(&m);
}
