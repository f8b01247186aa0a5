// test_forward_cuda_multi.cpp — several CUDA states in one batched step (forward.h
// emx_forward_multi on runtime/cuda/forward_cuda_step.c), through the public API only.
//
// Four states of one model, sharing the uploaded weights, with different histories (so they sit
// at different positions), run a few steps as one emx_forward_multi each, rows in another order
// than the states were made (the same rows each step: from the second on, a captured graph
// replays the step; the_same_rows_replay_a_graph checks when it is captured and what it keys on). Each state's logits, attention score rows (every layer and head,
// keys 0..pos) and KV rows 0..pos must be BITWISE those of a twin state (same weights, same
// history) fed the same token alone with emx_forward (the decode graph): a row of the batched
// matvec does the same arithmetic as the one-row matvec (kernels/matvec.cu: the lanes of a warp
// sum one weight row against each activation row in turn, the batch only adds activation rows),
// the per-row norms, quantisation and rope are per row, and each row's attention is the
// one-query launch of the decode step over its own state's cache. Against the CPU, the
// tolerances of test_forward_cuda.cpp: logits within 2e-4 of max|logit| for f32 weights, 3e-2
// for q8/q4 (a flipped int8 activation step, see there); score rows within 2e-4 for f32 weights
// only: with int8 activations a flipped step moves a tiny model's small score rows by more than
// 3e-2 of their own maximum (measured 5.8% on qwen3-tiny q8, one row of one head). Whether the
// CUDA pass itself agrees with the CPU is test_forward_cuda.cpp's question; here the batched
// step is checked against that same pass, bitwise.
//
// Batched, not rows in turn: under the emulator the kernels are counted (emu/kernel_runs.h): one
// step of n rows launches each matvec once, as one single decode step does, where the twins' n
// single steps launch n times as many; RoPE, the KV writes and the attention of all rows are one
// launch a layer (emx_cuda_attention_decode_rows: no rope_kv, no per-row attention kernel); and
// the whole step is as many kernels as one row's decode step (the fused layer's five a layer,
// the norms and quantisations in the matvecs' prologues, for every row at once; with
// EMX_CUDA_FUSED=1 the separate kernels' batch instead, more kernels). Caches of f32 and f16 (the rows' f16 KV rows bitwise those of the
// twins, whose own decode step is the fused layer's one-row kernel).
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "kb_util.h"
#include "forward_test_util.h"

#include <string>
#include <vector>

#ifdef ENTROPIX_CUDA_EMU
#include "tests/cuda_emu/include/emu/kernel_runs.h"
#endif

extern "C" {
#include "runtime/forward.h"
#include "runtime/forward_group.h"
#include "runtime/generate.h"
#include "runtime/model.h"
}

namespace {

const int kCtx = 32;
const int kStates = 4;
const int kHistory[kStates] = {3, 9, 1, 6};  // prompt lengths: each state at its own position
const int kOrder[kStates] = {2, 0, 3, 1};    // row r of every step is state kOrder[r]
const int kSteps = 3;

long matvec_runs() { return emu_runs("matvec_"); }

// The kernels of a batched step that run per row on the separate path: rope_kv and attention's.
long per_row_runs() { return emu_runs("rope_kv") + emu_runs("attention_"); }

// n CUDA states of m: the first uploads the weights (or shares `share`'s), the others share them.
std::vector<EmxState *> cuda_states(const EmxModel *m, int n, const EmxState *share = nullptr,
                                    EmxKvType cache = EMX_KV_F32) {
    std::vector<EmxState *> v;
    for (int i = 0; i < n; i++) v.push_back(new_state(m, "cuda:0", kCtx, 0, i ? v[0] : share, cache));
    return v;
}

std::vector<int> history(const EmxModel &m, int i) {
    std::vector<int> t((size_t)kHistory[i]);
    for (int j = 0; j < kHistory[i]; j++) t[(size_t)j] = (1 + 13 * i + 29 * j) % (int)m.cfg.vocab_size;
    return t;
}

// Score rows [n_layers][n_heads][kCtx] of a and b over keys 0..last: bitwise (tol < 0) or within
// tol of the reference b's magnitude.
void check_scores(const EmxModel &m, const EmxState *a, const EmxState *b, float tol, const char *what,
                  int ctx = kCtx) {
    int la, lb;
    const float *sa = emx_attention_scores(a, &la);
    cr_assert(sa, "%s: %s", what, emx_state_error(a));
    std::vector<float> ca(sa, sa + (size_t)m.cfg.n_layers * m.cfg.n_heads * ctx);
    const float *sb = emx_attention_scores(b, &lb);
    cr_assert(sb, "%s", what);
    cr_assert_eq(la, lb, "%s: last position %d vs %d", what, la, lb);
    for (size_t lh = 0; lh < (size_t)m.cfg.n_layers * m.cfg.n_heads; lh++) {
        const float *x = &ca[lh * ctx], *y = sb + lh * ctx;
        if (tol < 0)
            cr_assert(memcmp(x, y, (size_t)(la + 1) * sizeof(float)) == 0, "%s: score row %zu differs", what, lh);
        else
            compare(what, x, y, (size_t)la + 1, tol);
    }
}

std::vector<float> kv_rows(EmxState *s, int n) {
    std::vector<float> v(emx_state_kv_rows_bytes(s, n) / sizeof(float));
    cr_assert_eq(emx_state_kv_rows_read(s, 0, n, v.data()), 0, "%s", emx_state_error(s));
    return v;
}

// fused_env: EMX_CUDA_FUSED while the batched states are made (their twins are made without):
// "1" keeps the batched step on the separate kernels.
void multi_equals_single(const char *name, float tol, EmxKvType cache = EMX_KV_F32, const char *fused_env = nullptr) {
    EmxModel m;
    if (!open_test_model(name, &m)) cr_skip_test("build/models/%s missing (make test-models converts it)", name);
    const int vocab = (int)m.cfg.vocab_size;
    if (fused_env) setenv("EMX_CUDA_FUSED", fused_env, 1);
    std::vector<EmxState *> multi = cuda_states(&m, kStates, nullptr, cache);
    unsetenv("EMX_CUDA_FUSED");
    const bool fused = !fused_env || atoi(fused_env) >= kStates;
    std::vector<EmxState *> twin = cuda_states(&m, kStates, multi[0], cache), cpu;
    cr_assert_eq(emx_forward_multi_batched(multi[0]), 1, "the CUDA backend has a batched multi-state step");
    for (int i = 0; i < kStates; i++) {
        cpu.push_back(new_state(&m, "cpu", kCtx, 0, nullptr, cache));
        const std::vector<int> h = history(m, i);
        for (EmxState *s : {multi[(size_t)i], twin[(size_t)i], cpu[(size_t)i]})
            cr_assert(emx_forward(s, h.data(), kHistory[i], 0), "%s: %s", name, emx_state_error(s));
    }
    long per_step = -1;
    for (int step = 0; step < kSteps; step++) {
        EmxState *rows[kStates];
        int tok[kStates], pos[kStates];
        for (int r = 0; r < kStates; r++) {
            const int i = kOrder[r];
            rows[r] = multi[(size_t)i];
            tok[r] = (5 + 17 * i + 31 * step) % vocab;
            pos[r] = kHistory[i] + step;
        }
        const float *lg[kStates];
        const long before = matvec_runs(), rows_before = emu_runs("attention_decode_rows"), per_row_before = per_row_runs();
        const long all_before = emu_runs("");
        cr_assert_eq(emx_forward_multi(rows, tok, pos, kStates, lg), 0, "%s: %s", name, emx_state_error(rows[0]));
        const long batched = matvec_runs() - before, attn_launches = emu_runs("attention_decode_rows") - rows_before;
        const long per_row = per_row_runs() - per_row_before - attn_launches, kernels = emu_runs("") - all_before;
        long single = 0, one_row_kernels = 0;
        for (int r = 0; r < kStates; r++) {
            const int i = kOrder[r];
            char what[160];
            snprintf(what, sizeof what, "%s step %d row %d (state %d, pos %d)", name, step, r, i, pos[r]);
            std::vector<float> got(lg[r], lg[r] + vocab);
            const long b0 = matvec_runs(), k0 = emu_runs("");
            const float *want = emx_forward(twin[(size_t)i], &tok[r], 1, pos[r]);
            single += matvec_runs() - b0;
            one_row_kernels = emu_runs("") - k0;
            cr_assert(want, "%s: %s", what, emx_state_error(twin[(size_t)i]));
            cr_assert(memcmp(got.data(), want, (size_t)vocab * sizeof(float)) == 0, "%s: logits differ from alone",
                      what);
            check_scores(m, multi[(size_t)i], twin[(size_t)i], -1, what);
            cr_assert(kv_rows(multi[(size_t)i], pos[r] + 1) == kv_rows(twin[(size_t)i], pos[r] + 1),
                      "%s: KV rows differ from alone", what);
            const float *c = emx_forward(cpu[(size_t)i], &tok[r], 1, pos[r]);
            std::vector<float> cv(c, c + vocab);
            compare(what, got.data(), cv.data(), (size_t)vocab, tol);
            if (tol <= 2e-4f) check_scores(m, multi[(size_t)i], cpu[(size_t)i], tol, what);  // see the top
        }
#ifdef ENTROPIX_CUDA_EMU
        // each weight matrix launched once for the 4 rows, as for one row alone
        cr_assert_eq(batched * kStates, single, "%s: %ld matvec launches for 4 rows batched, %ld for 4 alone", name,
                     batched, single);
        cr_assert(per_step < 0 || batched == per_step);
        per_step = batched;
        // RoPE, the KV writes and the attention of the 4 rows: one launch a layer, nothing per row
        cr_assert_eq(attn_launches, (long)m.cfg.n_layers, "%s: %ld attention launches a step", name, attn_launches);
        cr_assert_eq(per_row, 0, "%s: %ld rope_kv or per-row attention launches", name, per_row);
        // and the step is one row's step: the fused layer for all rows; or, kept off it, the
        // separate kernels' batch (each norm and quantisation a launch of its own)
        if (fused)
            cr_assert_eq(kernels, one_row_kernels, "%s: %ld kernels a step of 4 rows, %ld for one row alone", name,
                         kernels, one_row_kernels);
        else
            cr_assert_gt(kernels, one_row_kernels, "%s: EMX_CUDA_FUSED=%s: a step of 4 rows in one row's kernels", name,
                         fused_env);
#else
        (void)batched, (void)attn_launches, (void)per_row, (void)kernels, (void)one_row_kernels, (void)fused;  // none counted
#endif
    }
    cr_log_info("%s: %ld matvec launches a batched step", name, per_step);
    for (int i = 0; i < kStates; i++) {
        emx_state_free(cpu[(size_t)i]);
        emx_state_free(twin[(size_t)(kStates - 1 - i)]);  // the sharers go first
    }
    for (int i = kStates - 1; i >= 0; i--) emx_state_free(multi[(size_t)i]);
    emx_model_close(&m);
}

// The several-states step as a graph (forward_cuda_multi.c): (captures, nodes) of the state
// leading the rows.
std::pair<int, int> multi_graph(const EmxState *lead) {
    EmxStateInfo info;
    emx_state_info(lead, &info);
    return {info.multi_captures, info.multi_graph_nodes};
}

// One batched step of `rows` (states of `multi`, each with its twin in `twin`), each row's logits,
// score rows and KV rows bitwise its twin's fed the same token alone.
void step_equals_alone(const EmxModel &m, const std::vector<EmxState *> &multi, const std::vector<EmxState *> &twin,
                       const std::vector<int> &rows, int step, std::vector<int> &at, int ctx) {
    const int vocab = (int)m.cfg.vocab_size, n = (int)rows.size();
    std::vector<EmxState *> st;
    std::vector<int> tok, pos;
    for (int i : rows) st.push_back(multi[(size_t)i]), tok.push_back((3 + 11 * i + 7 * step) % vocab), pos.push_back(at[(size_t)i]);
    std::vector<const float *> lg((size_t)n);
    cr_assert_eq(emx_forward_multi(st.data(), tok.data(), pos.data(), n, lg.data()), 0, "%s", emx_state_error(st[0]));
    for (int r = 0; r < n; r++) {
        const int i = rows[(size_t)r];
        const std::vector<float> got(lg[(size_t)r], lg[(size_t)r] + vocab);
        const float *want = emx_forward(twin[(size_t)i], &tok[(size_t)r], 1, pos[(size_t)r]);
        cr_assert(want && memcmp(got.data(), want, (size_t)vocab * sizeof(float)) == 0,
                  "step %d row %d (state %d): logits differ from alone", step, r, i);
        check_scores(m, multi[(size_t)i], twin[(size_t)i], -1, "a graph's step", ctx);
        cr_assert(kv_rows(multi[(size_t)i], pos[(size_t)r] + 1) == kv_rows(twin[(size_t)i], pos[(size_t)r] + 1),
                  "step %d row %d: KV rows differ from alone", step, r);
        at[(size_t)i]++;
    }
}

}  // namespace

// The step as a graph: rows that come a second time in a row are captured, then replayed (the
// positions moving on, read from the row table at each replay: a row crosses from the attention's
// first 64-key chunk into its second while the graph replays), bitwise each row alone; other rows
// (one more state) run directly once, then get their own capture; a state freed and another made
// in its place (perhaps at its address, with its buffers) gets a correct step, never the freed
// one's; with no_graphs never a graph.
Test(forward_cuda_multi, the_same_rows_replay_a_graph, .timeout = 900) {
    EmxModel m;
    if (!open_test_model("stories260K.q8.bin", &m)) cr_skip_test("build/models/stories260K.q8.bin missing");
    const int ctx = 160, hist[3] = {61, 5, 40};
    std::vector<EmxState *> multi, twin;
    for (int i = 0; i < 6; i++) (i < 3 ? multi : twin).push_back(new_state(&m, "cuda:0", ctx, 0, i ? multi[0] : nullptr));
    std::vector<int> at(3);
    auto prefill = [&](int i, int len) {
        std::vector<int> h((size_t)len);
        for (int j = 0; j < len; j++) h[(size_t)j] = (1 + 13 * i + 29 * j) % (int)m.cfg.vocab_size;
        for (EmxState *s : {multi[(size_t)i], twin[(size_t)i]}) cr_assert(emx_forward(s, h.data(), len, 0));
        at[(size_t)i] = len;
    };
    for (int i = 0; i < 3; i++) prefill(i, hist[i]);
    int step = 0;
    step_equals_alone(m, multi, twin, {1, 0}, step++, at, ctx);
    cr_assert_eq(multi_graph(multi[1]).first, 0, "rows seen once: captured");
    for (int k = 0; k < 4; k++) step_equals_alone(m, multi, twin, {1, 0}, step++, at, ctx);  // row 0: 62 .. 65
    cr_assert(multi_graph(multi[1]).first == 1 && multi_graph(multi[1]).second > 0, "captures %d, nodes %d",
              multi_graph(multi[1]).first, multi_graph(multi[1]).second);
    step_equals_alone(m, multi, twin, {1, 0, 2}, step++, at, ctx);  // new rows: direct, then their capture
    cr_assert_eq(multi_graph(multi[1]).first, 1);
    step_equals_alone(m, multi, twin, {1, 0, 2}, step++, at, ctx);
    step_equals_alone(m, multi, twin, {1, 0, 2}, step++, at, ctx);
    cr_assert_eq(multi_graph(multi[1]).first, 2);
    emx_state_free(multi[2]);  // a state made in its place, prefilled anew
    emx_state_free(twin[2]);
    multi[2] = new_state(&m, "cuda:0", ctx, 0, multi[0]);
    twin[2] = new_state(&m, "cuda:0", ctx, 0, multi[0]);
    prefill(2, 9);
    for (int k = 0; k < 3; k++) step_equals_alone(m, multi, twin, {1, 0, 2}, step++, at, ctx);
    EmxState *direct = new_state(&m, "cuda:0", ctx, 1, multi[0]);  // no_graphs
    const int h3[3] = {1, 2, 3};
    cr_assert(emx_forward(direct, h3, 3, 0));
    for (int k = 0; k < 2; k++) {
        const int tok[2] = {5, 6}, pos[2] = {3 + k, at[0]};
        EmxState *rows[2] = {direct, multi[0]};
        const float *lg[2];
        cr_assert_eq(emx_forward_multi(rows, tok, pos, 2, lg), 0, "%s", emx_state_error(direct));
        at[0]++;
        const std::vector<float> w(lg[1], lg[1] + m.cfg.vocab_size);
        cr_assert(memcmp(w.data(), emx_forward(twin[0], &tok[1], 1, pos[1]), w.size() * sizeof(float)) == 0);
    }
    cr_assert_eq(multi_graph(direct).first, 0, "a state without graphs captured its step");
    emx_state_free(direct);
    for (int i = 2; i >= 0; i--) emx_state_free(twin[(size_t)i]);
    for (int i = 2; i >= 0; i--) emx_state_free(multi[(size_t)i]);
    emx_model_close(&m);
}

Test(forward_cuda_multi, stories260K_equals_single, .timeout = 600) {
    for (const char *d : {"f32", "q8"})
        multi_equals_single((std::string("stories260K.") + d + ".bin").c_str(), d[0] == 'f' ? 2e-4f : 3e-2f);
}
Test(forward_cuda_multi, qwen3_tiny_q8_equals_single, .timeout = 900) { multi_equals_single("qwen3-tiny.q8.bin", 3e-2f); }
// f16 caches: the rows' new keys and values rounded as each alone, bitwise (stories260K: Llama 2
// style; qwen2.5-tiny: the q/k/v biases). Against the CPU's f16 cache: a key whose f32 value
// differs in its last bits between the two may round to another f16, so the tolerance is
// test_forward_cuda_kv16.cpp's 1e-2 (measured here: 4e-4 of max|logit|, qwen2.5-tiny f32).
Test(forward_cuda_multi, f16_cache_equals_single, .timeout = 900) {
    multi_equals_single("stories260K.q8.bin", 3e-2f, EMX_KV_F16);
    multi_equals_single("qwen2.5-tiny.f32.bin", 1e-2f, EMX_KV_F16);
}
Test(forward_cuda_multi, llama3_tiny_q8_equals_single, .timeout = 900) {
    multi_equals_single("llama3-tiny.q8.bin", 3e-2f);
}
Test(forward_cuda_multi, llama3_tiny_q4_equals_single, .timeout = 900) {
    multi_equals_single("llama3-tiny.q4.bin", 3e-2f);
}
// EMX_CUDA_FUSED=1: the fused layer takes single rows only, so the batched step runs the separate
// kernels (and the one-launch attention), each row still bitwise its twin's fused decode step.
Test(forward_cuda_multi, separate_kernels_equal_single, .timeout = 900) {
    multi_equals_single("stories260K.q8.bin", 3e-2f, EMX_KV_F32, "1");
    multi_equals_single("llama3-tiny.q4.bin", 3e-2f, EMX_KV_F32, "1");
}
// EMX_CUDA_FUSED that is not a number of rows from 0 to EMX_FUSED_MAX_ROWS: no state, one line
// naming the variable and its value.
Test(forward_cuda_multi, bad_fused_setting_is_refused) {
    EmxModel m;
    if (!open_test_model("stories260K.q8.bin", &m)) cr_skip_test("build/models/stories260K.q8.bin missing");
    for (const char *bad : {"abc", "-1", "9", "2x", "1 "}) {
        setenv("EMX_CUDA_FUSED", bad, 1);
        EmxStateOptions opt = {};
        opt.ctx = kCtx;
        opt.device = "cuda:0";
        char err[512] = "";
        EmxState *s = emx_state_new(&m, &opt, err, sizeof err);
        unsetenv("EMX_CUDA_FUSED");
        cr_assert_null(s, "EMX_CUDA_FUSED=%s: a state was made", bad);
        const std::string want = std::string("EMX_CUDA_FUSED=") + bad + ": not a number of rows from 0 to 8";
        cr_assert(strstr(err, want.c_str()) && !strchr(err, '\n'), "EMX_CUDA_FUSED=%s: %s", bad, err);
    }
    emx_model_close(&m);
}

// Bad calls: -1, a one-line error naming the problem, and nothing run (no kernel launched under
// the emulator; the states' caches and positions untouched); the states stay usable.
Test(forward_cuda_multi, refuses_bad_calls, .timeout = 600) {
    EmxModel m, f;
    if (!open_test_model("stories260K.q8.bin", &m) || !open_test_model("stories260K.f32.bin", &f))
        cr_skip_test("build/models/stories260K.{q8,f32}.bin missing");
    std::vector<EmxState *> st = cuda_states(&m, 2);
    EmxState *other_model = new_state(&f, "cuda:0", kCtx), *unshared = new_state(&m, "cuda:0", kCtx);
    const int h[] = {1, 2, 3};
    for (EmxState *s : {st[0], st[1], other_model, unshared}) cr_assert(emx_forward(s, h, 3, 0));
    const std::vector<float> kv0 = kv_rows(st[0], 4), kv1 = kv_rows(st[1], 4);
    struct {
        EmxState *second;
        int tok1, pos1;
        const char *says;
    } cases[] = {
        {other_model, 4, 3, "does not share the first state's uploaded weights"},
        {unshared, 4, 3, "does not share the first state's uploaded weights"},
        {st[0], 4, 3, "rows 0 and 1 are one state"},
        {st[1], 4, kCtx, "row 1: position 32 outside the context of 32"},
        {st[1], 4, -1, "row 1: position -1 outside the context"},
        {st[1], 512, 3, "row 1: token id 512 out of range [0, 512)"},
    };
    for (const auto &c : cases) {
        EmxState *rows[2] = {st[0], c.second};
        const int tok[2] = {4, c.tok1}, pos[2] = {3, c.pos1};
        const float *lg[2];
#ifdef ENTROPIX_CUDA_EMU
        const long before = emu::kernel_runs("");
#endif
        cr_assert_eq(emx_forward_multi(rows, tok, pos, 2, lg), -1, "%s: accepted", c.says);
        const char *e = emx_state_error(st[0]);
        cr_assert(strstr(e, c.says) && strstr(e, "cuda:0: forward_multi: ") == e && !strchr(e, '\n'), "%s", e);
#ifdef ENTROPIX_CUDA_EMU
        cr_assert_eq(emu::kernel_runs(""), before, "%s: kernels ran", c.says);
#endif
    }
    EmxState *many[17];
    int tok[17], pos[17];
    const float *lg[17];
    for (int i = 0; i < 17; i++) many[i] = st[0], tok[i] = 4, pos[i] = 3;
    cr_assert_eq(emx_forward_multi(many, tok, pos, 17, lg), -1);
    cr_assert(strstr(emx_state_error(st[0]), "forward_multi: 17 rows (1..16 a step)"), "%s", emx_state_error(st[0]));
    cr_assert(kv_rows(st[0], 4) == kv0 && kv_rows(st[1], 4) == kv1, "a refused call changed a cache");
    int last;
    emx_attention_scores(st[1], &last);
    cr_assert_eq(last, 2, "a refused call moved a state");
    EmxState *rows[2] = {st[1], st[0]};
    cr_assert_eq(emx_forward_multi(rows, tok, pos, 2, lg), 0, "%s", emx_state_error(st[1]));
    emx_state_free(unshared);
    emx_state_free(other_model);
    emx_state_free(st[1]);
    emx_state_free(st[0]);
    emx_model_close(&f);
    emx_model_close(&m);
}

// The server's slots on a GPU: threads generating through emx_generate on CUDA states in one
// forward group (the sampler chooses on the host there: a member's steps go through the group,
// so emx_forward_decide says 0) get the ids the same requests get alone, and the group's steps
// hold several rows.
namespace {

struct GenJob {
    EmxTokenizer *tk;
    EmxState *st;
    EmxForwardGroup *g;  // NULL: alone
    std::vector<int> prompt;
    int n_predict;
    uint64_t seed;
    int ids[64], n_ids, rc;
    char err[256];
};

void *gen_main(void *arg) {
    GenJob *j = (GenJob *)arg;
    EmxBasicSampler bs;
    EmxSamplerParams sp = {};
    sp.temperature = 1.0f;
    j->rc = emx_basic_sampler_init(&bs, &sp, j->seed, emx_tokenizer_n_vocab(j->tk), j->err, sizeof j->err);
    if (j->rc) return nullptr;
    EmxGenerateOptions go = {};
    go.n_predict = j->n_predict, go.ignore_stop = 1, go.ids_out = j->ids, go.ids_cap = 64;
    EmxGenerateStats stats;
    j->rc = emx_generate(j->st, j->tk, j->prompt.data(), (int)j->prompt.size(), &bs.base, &go, &stats, j->err,
                         sizeof j->err);
    j->n_ids = stats.n_generated;
    if (j->g) emx_forward_group_leave(j->st);
    emx_basic_sampler_free(&bs);
    return nullptr;
}

void run_gens(std::vector<GenJob> &jobs) {
    char err[256];
    std::vector<pthread_t> th(jobs.size());
    for (GenJob &j : jobs)  // a server's slot joins as its generation starts
        if (j.g) cr_assert_eq(emx_forward_group_join(j.g, j.st, err, sizeof err), 0, "%s", err);
    for (size_t i = 0; i < jobs.size(); i++) cr_assert_eq(pthread_create(&th[i], nullptr, gen_main, &jobs[i]), 0);
    for (size_t i = 0; i < jobs.size(); i++) pthread_join(th[i], nullptr);
    for (GenJob &j : jobs) cr_assert_eq(j.rc, 0, "%s", j.err);
}

}  // namespace

Test(forward_cuda_multi, grouped_generations_equal_alone, .timeout = 900) {
    EmxModel m;
    if (!open_test_model("stories260K.q8.bin", &m)) cr_skip_test("build/models/stories260K.q8.bin missing");
    char err[256];
    EmxTokenizer *tk = emx_tokenizer_new(&m.tok, err, sizeof err);
    cr_assert(tk, "%s", err);
    EmxForwardGroup *g = emx_forward_group_new(3, err, sizeof err);
    cr_assert(g, "%s", err);
    std::vector<EmxState *> st = cuda_states(&m, 6);
    const int n_prompt[3] = {5, 9, 2}, n_predict[3] = {8, 3, 6};  // member 1 leaves early
    std::vector<GenJob> alone(3), grouped(3);
    for (int i = 0; i < 3; i++) {
        GenJob &a = alone[(size_t)i];
        a.tk = tk, a.st = st[(size_t)i], a.g = nullptr, a.n_predict = n_predict[i], a.seed = 100 + (uint64_t)i;
        for (int k = 0; k < n_prompt[i]; k++) a.prompt.push_back((3 + 17 * i + 5 * k) % (int)m.cfg.vocab_size);
        grouped[(size_t)i] = a;
        grouped[(size_t)i].st = st[(size_t)i + 3], grouped[(size_t)i].g = g;
    }
    // a member's emx_forward_decide declines: its steps must go through the group's step
    cr_assert_eq(emx_forward_group_join(g, st[5], err, sizeof err), 0, "%s", err);
    EmxDecideSpec spec = {};
    spec.kind = EMX_DECIDE_GREEDY;
    EmxDecideResult res;
    const int t = 1;
    cr_assert_eq(emx_forward_decide(st[5], &t, 1, 0, &spec, &res), 0);
    emx_forward_group_leave(st[5]);
    run_gens(alone);
    run_gens(grouped);
    EmxForwardGroupStats gs;
    emx_forward_group_stats(g, &gs);
    long want_rows = 0;
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(grouped[(size_t)i].n_ids, n_predict[i]);
        cr_assert_eq(alone[(size_t)i].n_ids, n_predict[i]);
        cr_assert_arr_eq(grouped[(size_t)i].ids, alone[(size_t)i].ids, sizeof(int) * (size_t)n_predict[i],
                         "member %d: the grouped ids differ from alone", i);
        want_rows += n_predict[i] - 1;  // every token but the last is fed back, one at a time
    }
    cr_assert_eq(gs.rows, want_rows, "%ld rows ran in the group, want %ld", gs.rows, want_rows);
    cr_assert(gs.steps >= 1 && gs.steps <= gs.rows);
    cr_log_info("group: %ld rows in %ld steps", gs.rows, gs.steps);
    emx_forward_group_free(g);
    for (int i = 5; i >= 0; i--) emx_state_free(st[(size_t)i]);
    emx_tokenizer_free(tk);
    emx_model_close(&m);
}
