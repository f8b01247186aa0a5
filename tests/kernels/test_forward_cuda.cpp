// test_forward_cuda.cpp — the CUDA backend of forward.h (runtime/cuda/forward_cuda.c) against the CPU
// backend, through the public API only: the same model opened once, a "cpu" state and a
// "cuda:N" state fed the same tokens.
//
// Tolerance of logits and scores. The two backends do the same arithmetic up to f32 summation
// order (a warp's shuffle tree against the CPU's SIMD lanes) and the f32 (device) vs double
// (CPU) sums of squares in RMSNorm: for f32 weights that leaves at most ~1e-6 of max|logit|
// (measured; as the dense kernel tests found), and we allow 2e-4, 8x below what a 1% error in
// the RoPE angles gives. q8/q4 weights read int8 activations on both backends, and rounding an
// activation to int8 is a step function: a last-bit difference that lands on a rounding
// boundary moves that activation by a whole step (amax/127 of its group), and the position's K
// and V rows carry it to every later position. Measured: qwen3-tiny q4 agrees to 6e-6 of
// max|logit| up to position 10, then 0.9% from position 11 on (the attention outputs of both
// backends agree to < 1e-4 there: one activation flipped). So quantised models get 3e-2 of
// max|logit| — a flipped step, not a wrong kernel: the f32 runs of the same models pin those
// down at 2e-4, and tests/kernels/test_matvec.cpp checks the int8 paths alone. Within one
// backend, the decode graph and direct launches run the same kernels on the same data:
// bitwise equal.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "kb_util.h"
#include "forward_test_util.h"
#ifdef ENTROPIX_CUDA_EMU
#include "tests/cuda_emu/include/emu/kernel_runs.h"
#endif

#include <algorithm>
#include <string>
#include <vector>

extern "C" {
#include "runtime/forward.h"
#include "runtime/model.h"
}

namespace {

const int kPrompt[] = {1, 9707, 11, 1879, 0, 576, 3974, 42, 17, 300, 5, 77, 1000, 8, 64, 3, 12, 99, 4};
const int kPromptLen = 19;  // more than one 16-row chunk
const int kCtx = 40;

// kPrompt with every id taken modulo the vocabulary (stories260K has 512 tokens).
std::vector<int> prompt_for(const EmxModel &m) {
    std::vector<int> t(kPrompt, kPrompt + kPromptLen);
    for (int &x : t) x %= (int)m.cfg.vocab_size;
    return t;
}

// Prefill, then a few decode steps: logits and the last position's score rows of every layer
// on both backends.
void logits_match(const char *name, float tol) {
    EmxModel m;
    if (!open_test_model(name, &m)) cr_skip_test("build/models/%s missing (make test-models converts it)", name);
    const int vocab = (int)m.cfg.vocab_size;
    std::vector<int> toks = prompt_for(m);
    EmxState *cpu = new_state(&m, "cpu", kCtx), *gpu = new_state(&m, "cuda:0", kCtx);
    cr_assert_str_eq(emx_state_device(gpu), "cuda:0");
    double worst = 0;
    int pos = 0;
    for (int step = 0; step < 4; step++) {
        const int n = step == 0 ? kPromptLen : 1;
        const float *want = emx_forward(cpu, toks.data(), n, pos);
        std::vector<float> w(want, want + vocab);
        const float *got = emx_forward(gpu, toks.data(), n, pos);
        cr_assert(got, "%s: %s", name, emx_state_error(gpu));
        char what[160];
        snprintf(what, sizeof what, "%s logits at step %d (pos %d)", name, step, pos);
        worst = fmax(worst, compare(what, got, w.data(), (size_t)vocab, tol));
        int lp_cpu, lp_gpu;
        const float *sc = emx_attention_scores(cpu, &lp_cpu), *sg = emx_attention_scores(gpu, &lp_gpu);
        cr_assert_eq(lp_cpu, lp_gpu);
        for (uint32_t l = 0; l < m.cfg.n_layers; l++)
            for (uint32_t h = 0; h < m.cfg.n_heads; h++) {
                const size_t at = ((size_t)l * m.cfg.n_heads + h) * kCtx;
                snprintf(what, sizeof what, "%s scores layer %u head %u step %d", name, l, h, step);
                compare(what, sg + at, sc + at, (size_t)lp_cpu + 1, tol);
            }
        pos += n;
        toks[0] = (toks[0] * 31 + 7) % vocab;  // the next decode token
    }
    cr_log_info("%s: worst logit difference %.2e of max|logit|", name, worst);
    emx_state_free(gpu);
    emx_state_free(cpu);
    emx_model_close(&m);
}

}  // namespace

Test(forward_cuda, stories260K_logits_match_cpu) {
    for (const char *d : {"f32", "q8", "q4"})
        logits_match((std::string("stories260K.") + d + ".bin").c_str(), d[0] == 'f' ? 2e-4f : 3e-2f);
}
Test(forward_cuda, qwen3_tiny_logits_match_cpu, .timeout = 600) {
    for (const char *d : {"f32", "q8", "q4"})
        logits_match((std::string("qwen3-tiny.") + d + ".bin").c_str(), d[0] == 'f' ? 2e-4f : 3e-2f);
}
Test(forward_cuda, llama3_tiny_logits_match_cpu, .timeout = 600) {
    for (const char *d : {"f32", "q8", "q4"})
        logits_match((std::string("llama3-tiny.") + d + ".bin").c_str(), d[0] == 'f' ? 2e-4f : 3e-2f);
}

// The decode step replayed from a CUDA graph against the same kernels launched one by one:
// bitwise equal logits and score rows at every position (the graph reads the token, position
// and key count from device memory, so a wrong capture shows as a stale position).
Test(forward_cuda, graph_replay_equals_direct_launches) {
    EmxModel m;
    if (!open_test_model("stories260K.q8.bin", &m)) cr_skip_test("build/models/stories260K.q8.bin missing");
    const int vocab = (int)m.cfg.vocab_size;
    EmxState *graph = new_state(&m, "cuda:0", kCtx, 0), *direct = new_state(&m, "cuda:0", kCtx, 1, graph);
    EmxStateInfo gi, di;
    emx_state_info(graph, &gi);
    cr_assert_eq(gi.uses_graphs, 1);
    cr_assert_eq(gi.decode_graph_nodes, 0, "no graph before the first decode step");
    const std::vector<int> toks = prompt_for(m);
    cr_assert(emx_forward(graph, toks.data(), 5, 0) && emx_forward(direct, toks.data(), 5, 0));
    for (int pos = 5; pos < 12; pos++) {
        const int tok = toks[pos];
        const float *g = emx_forward(graph, &tok, 1, pos);
        cr_assert(g, "%s", emx_state_error(graph));
        std::vector<float> gl(g, g + vocab);
        const float *d = emx_forward(direct, &tok, 1, pos);
        cr_assert(d, "%s", emx_state_error(direct));
        cr_assert(memcmp(gl.data(), d, (size_t)vocab * sizeof(float)) == 0, "logits differ at pos %d", pos);
        const size_t ns = (size_t)m.cfg.n_layers * m.cfg.n_heads * kCtx;
        std::vector<float> gs(emx_attention_scores(graph, nullptr), emx_attention_scores(graph, nullptr) + ns);
        const float *ds = emx_attention_scores(direct, nullptr);
        for (size_t lh = 0; lh < (size_t)m.cfg.n_layers * m.cfg.n_heads; lh++)
            cr_assert(memcmp(&gs[lh * kCtx], ds + lh * kCtx, (size_t)(pos + 1) * sizeof(float)) == 0,
                      "score row %zu differs at pos %d", lh, pos);
    }
    emx_state_info(graph, &gi);
    emx_state_info(direct, &di);
    cr_assert_gt(gi.decode_graph_nodes, (int)m.cfg.n_layers * 5, "the graph holds the whole step (5 kernels a layer fused)");
    cr_assert_eq(di.uses_graphs, 0);
    cr_assert_eq(di.weight_bytes_on_device, gi.weight_bytes_on_device, "shared weights");
    cr_log_info("decode graph: %d nodes", gi.decode_graph_nodes);
    emx_state_free(direct);
    emx_state_free(graph);
    emx_model_close(&m);
}

// emx_forward_all_logits and the branch functions (the agent pool's lookahead) against the CPU
// (f32 weights: no int8 activations, so the tight tolerance holds; see the top).
Test(forward_cuda, all_logits_and_branches_match_cpu) {
    EmxModel m;
    if (!open_test_model("stories260K.f32.bin", &m)) cr_skip_test("build/models/stories260K.f32.bin missing");
    const size_t vocab = m.cfg.vocab_size;
    EmxState *cpu = new_state(&m, "cpu", kCtx), *gpu = new_state(&m, "cuda:0", kCtx);
    const int n = 18;
    std::vector<float> lc((size_t)n * vocab), lg((size_t)n * vocab);
    const std::vector<int> toks = prompt_for(m);
    cr_assert_eq(emx_forward_all_logits(cpu, toks.data(), n, 0, lc.data()), 0);
    cr_assert_eq(emx_forward_all_logits(gpu, toks.data(), n, 0, lg.data()), 0, "%s", emx_state_error(gpu));
    for (int i = 0; i < n; i++) compare("all_logits row", &lg[(size_t)i * vocab], &lc[(size_t)i * vocab], vocab, 2e-4f);
    // 5 branches of 3 steps over the 18-token prefix, then branch 3 committed
    char err[256];
    const int nb = 5, steps = 3;
    cr_assert_eq(emx_state_branches_reserve(cpu, nb, steps, err, sizeof err), 0, "%s", err);
    cr_assert_eq(emx_state_branches_reserve(gpu, nb, steps, err, sizeof err), 0, "%s", err);
    std::vector<float> bc((size_t)nb * vocab), bg((size_t)nb * vocab);
    for (int j = 0; j < steps; j++) {
        int bt[nb];
        for (int b = 0; b < nb; b++) bt[b] = (17 + 101 * b + 7 * j) % (int)vocab;
        cr_assert_eq(emx_forward_branches(cpu, bt, nb, n, j, bc.data()), 0);
#ifdef ENTROPIX_CUDA_EMU
        const long attn_before = emu::kernel_runs("attention_");
#endif
        cr_assert_eq(emx_forward_branches(gpu, bt, nb, n, j, bg.data()), 0, "%s", emx_state_error(gpu));
#ifdef ENTROPIX_CUDA_EMU
        // the 5 branches' attention: one launch of the kernel and one of the combine per layer
        const long attn = emu::kernel_runs("attention_") - attn_before;
        cr_assert_eq(attn, 2L * (long)m.cfg.n_layers, "step %d: %ld attention kernels for %u layers", j, attn,
                     m.cfg.n_layers);
#endif
        for (int b = 0; b < nb; b++) compare("branch logits", &bg[(size_t)b * vocab], &bc[(size_t)b * vocab], vocab, 2e-4f);
    }
    cr_assert_eq(emx_branch_commit(cpu, 3, steps, n), 0);
    cr_assert_eq(emx_branch_commit(gpu, 3, steps, n), 0, "%s", emx_state_error(gpu));
    const size_t bytes = emx_state_kv_rows_bytes(cpu, n + steps);
    cr_assert_eq(bytes, emx_state_kv_rows_bytes(gpu, n + steps));
    std::vector<float> kc(bytes / 4), kg(bytes / 4);
    cr_assert_eq(emx_state_kv_rows_read(cpu, 0, n + steps, kc.data()), 0);
    cr_assert_eq(emx_state_kv_rows_read(gpu, 0, n + steps, kg.data()), 0);
    compare("cache rows after the commit", kg.data(), kc.data(), kc.size(), 2e-4f);
    // rows written back travel unchanged: the GPU's rows into the CPU state give its logits
    cr_assert_eq(emx_state_kv_rows_write(cpu, 0, n + steps, kg.data()), 0);
    const int next = 5;
    const float *a = emx_forward(cpu, &next, 1, n + steps);
    std::vector<float> av(a, a + vocab);
    const float *b = emx_forward(gpu, &next, 1, n + steps);
    compare("decode after the commit", b, av.data(), vocab, 2e-4f);
    emx_state_free(gpu);
    emx_state_free(cpu);
    emx_model_close(&m);
}

// Robustness: a model that does not fit says so with the figures before allocating; a bad
// device, a bad position and a token out of range are one-line errors.
Test(forward_cuda, errors_name_the_problem) {
    EmxModel m;
    if (!open_test_model("qwen3-tiny.f32.bin", &m)) cr_skip_test("build/models/qwen3-tiny.f32.bin missing");
    EmxStateOptions opt = {};
    opt.ctx = kCtx;
    char err[512];
    opt.device = "cuda:9";
    cr_assert_null(emx_state_new(&m, &opt, err, sizeof err));
    cr_assert(strstr(err, "cuda:9") && strstr(err, "no such GPU"), "%s", err);
    opt.device = "gpu0";
    cr_assert_null(emx_state_new(&m, &opt, err, sizeof err));
    cr_assert(strstr(err, "'gpu0'"), "%s", err);
#ifdef EMU_CUDA_RUNTIME_H  // the emulator's device memory can be made small (a real GPU's cannot)
    setenv("EMU_DEVICE_MEMORY_MB", "20", 1);  // qwen3-tiny f32: 39 MiB of weights
    opt.device = "cuda:1";
    cr_assert_null(emx_state_new(&m, &opt, err, sizeof err));
    cr_assert(strstr(err, "does not fit") && strstr(err, "MiB free of 20.0"), "%s", err);
    unsetenv("EMU_DEVICE_MEMORY_MB");
#else
    cr_log_info("the does-not-fit message is checked under the emulator only");
#endif
    EmxState *s = new_state(&m, "cuda:0", kCtx);
    const int bad = (int)m.cfg.vocab_size;
    cr_assert_null(emx_forward(s, &bad, 1, 0));
    cr_assert(strstr(emx_state_error(s), "token id 151936 out of range"), "%s", emx_state_error(s));
    const int ok = 5;
    cr_assert_null(emx_forward(s, &ok, 1, kCtx));
    cr_assert(strstr(emx_state_error(s), "outside the context of 40"), "%s", emx_state_error(s));
    cr_assert_not_null(emx_forward(s, &ok, 1, 0), "a failed call leaves the state usable");
    emx_state_free(s);
    emx_model_close(&m);
}

// The agent pool's proposals where the logits are: the GPU's proposals equal emx_agent_propose on
// the host over the same logits (the ones emx_forward returned), with the ban and the lane
// offset; the CPU backend says it does not propose (0).
Test(forward_cuda, proposals_on_the_device_equal_the_host_rule) {
    EmxModel m;
    if (!open_test_model("stories260K.f32.bin", &m)) cr_skip_test("build/models/stories260K.f32.bin missing");
    const int vocab = (int)m.cfg.vocab_size, na = 4;
    const EmxAgentParams agents[na] = {{0.3f, 5}, {0.9f, 22}, {1.5f, 100}, {0.0f, 0}};
    EmxState *gpu = new_state(&m, "cuda:0", kCtx), *cpu = new_state(&m, "cpu", kCtx);
    const std::vector<int> toks = prompt_for(m);
    std::vector<EmxCandidate> work((size_t)vocab);
    EmxProposal got[na];
    cr_assert_eq(emx_state_propose(cpu, agents, na, 1, 2, 0, -1, got), 0);
    for (int pos = 0; pos < 6; pos++) {
        const float *l = emx_forward(gpu, &toks[pos], 1, pos);
        cr_assert(l, "%s", emx_state_error(gpu));
        std::vector<float> logits(l, l + vocab);
        const int ban = pos % 2 ? -1 : (int)(std::max_element(logits.begin(), logits.end()) - logits.begin());
        if (ban >= 0) logits[(size_t)ban] = -INFINITY;
        cr_assert_eq(emx_state_propose(gpu, agents, na, 42, (uint64_t)pos, 3, ban, got), 1, "%s", emx_state_error(gpu));
        for (int i = 0; i < na; i++) {
            EmxProposal want;
            emx_agent_propose(logits.data(), vocab, &agents[i], 42, (uint64_t)pos, (uint32_t)(3 + i), work.data(), &want);
            cr_assert_eq(got[i].token, want.token, "pos %d agent %d", pos, i);
            cr_assert(fabs(got[i].entropy_bits - want.entropy_bits) <= 1e-9 * fabs(want.entropy_bits) + 1e-12,
                      "pos %d agent %d: entropy %.17g, host %.17g", pos, i, got[i].entropy_bits, want.entropy_bits);
            cr_assert_neq(got[i].token, ban, "the banned token was proposed");
        }
    }
    emx_state_free(cpu);
    emx_state_free(gpu);
    emx_model_close(&m);
}

// A pool round in one call: emx_forward_propose gives, bit for bit, what emx_forward followed by
// emx_state_propose gives on a twin state (the same kernels on the same data): every proposal's
// token and entropy, with and without a ban, over several positions (the round's graph replayed),
// with a new seed half way (the graph captured again), and the KV cache it leaves (the next
// emx_forward's logits). Then what it refuses, and the CPU, which does not fuse (0).
void round_equals_forward_then_propose(const char *name, int no_graphs) {
    EmxModel m;
    if (!open_test_model(name, &m)) cr_skip_test("build/models/%s missing (make test-models converts it)", name);
    const int vocab = (int)m.cfg.vocab_size, na = 4, first = 4, last = 10;
    const EmxAgentParams agents[na] = {{0.3f, 5}, {0.9f, 22}, {1.5f, 100}, {0.0f, 0}};
    EmxState *fused = new_state(&m, "cuda:0", kCtx, no_graphs), *twin = new_state(&m, "cuda:0", kCtx, no_graphs, fused);
    const std::vector<int> toks = prompt_for(m);
    cr_assert(emx_forward(fused, toks.data(), first, 0) && emx_forward(twin, toks.data(), first, 0));
    EmxProposal got[na], want[na];
    for (int pos = first; pos < last; pos++) {
        const uint64_t seed = pos < 7 ? 42 : 43, step = (uint64_t)pos + 1 + ((uint64_t)pos << 32);
        const float *l = emx_forward(twin, &toks[pos], 1, pos);
        cr_assert(l, "%s", emx_state_error(twin));
        const int ban = pos % 2 ? -1 : (int)(std::max_element(l, l + vocab) - l);
        cr_assert_eq(emx_state_propose(twin, agents, na, seed, step, 3, ban, want), 1, "%s", emx_state_error(twin));
        cr_assert_eq(emx_forward_propose(fused, toks[pos], pos, agents, na, seed, step, 3, ban, got), 1, "%s",
                     emx_state_error(fused));
        for (int i = 0; i < na; i++) {
            cr_assert_eq(got[i].token, want[i].token, "%s pos %d agent %d", name, pos, i);
            cr_assert(memcmp(&got[i].entropy_bits, &want[i].entropy_bits, sizeof(double)) == 0,
                      "%s pos %d agent %d: entropy %.17g, forward then propose %.17g", name, pos, i,
                      got[i].entropy_bits, want[i].entropy_bits);
            cr_assert_neq(got[i].token, ban, "the banned token was proposed");
        }
    }
    // the round left no host logits to propose from: the next emx_forward brings them
    cr_assert_eq(emx_state_propose(fused, agents, na, 1, 1, 0, -1, got), -1);
    cr_assert(strstr(emx_state_error(fused), "proposal round"), "%s", emx_state_error(fused));
    // refused rounds name the problem and run nothing
    cr_assert_eq(emx_forward_propose(fused, vocab, last, agents, na, 1, 1, 0, -1, got), -1);
    cr_assert(strstr(emx_state_error(fused), "out of range"), "%s", emx_state_error(fused));
    cr_assert_eq(emx_forward_propose(fused, 1, kCtx, agents, na, 1, 1, 0, -1, got), -1);
    cr_assert(strstr(emx_state_error(fused), "outside the context"), "%s", emx_state_error(fused));
    cr_assert_eq(emx_forward_propose(fused, 1, last, agents, 0, 1, 1, 0, -1, got), -1);
    // the cache the rounds wrote: the next position's logits equal the twin's, bit for bit
    const float *a = emx_forward(fused, &toks[last], 1, last), *b = emx_forward(twin, &toks[last], 1, last);
    cr_assert(a && b);
    cr_assert(memcmp(a, b, (size_t)vocab * sizeof(float)) == 0, "%s: the rounds left another cache", name);
    EmxState *cpu = new_state(&m, "cpu", kCtx);
    cr_assert_eq(emx_forward_propose(cpu, toks[0], 0, agents, na, 1, 1, 0, -1, got), 0, "the CPU does not fuse");
    emx_state_free(cpu);
    emx_state_free(twin);
    emx_state_free(fused);
    emx_model_close(&m);
}

Test(forward_cuda, round_in_one_graph_equals_forward_then_propose) {
    round_equals_forward_then_propose("stories260K.f32.bin", 0);
}
Test(forward_cuda, round_as_direct_launches_equals_forward_then_propose) {
    round_equals_forward_then_propose("stories260K.f32.bin", 1);
}
// Qwen3's vocabulary of 151,936: the agents' passes over it run on many blocks (sampling_mb.cuh)
Test(forward_cuda, round_in_one_graph_at_qwen3_vocabulary) { round_equals_forward_then_propose("qwen3-tiny.q8.bin", 0); }

// The lookahead branches' proposals beside their logits: emx_forward_branches_propose gives what
// emx_forward_branches on a twin state, then emx_agent_propose on each branch's row on the host,
// gives (tokens exactly, entropies within 1e-9 relative: a GPU's exp and log2 may differ from
// the C library's by an ulp), over steps of 3 branches each fed its own proposal; the CPU says
// it does not (0), and a pass over more branches than reserved is refused with the reason.
void branch_proposals_match(const char *name) {
    EmxModel m;
    if (!open_test_model(name, &m)) cr_skip_test("build/models/%s missing (make test-models converts it)", name);
    const int vocab = (int)m.cfg.vocab_size, nb = 3, steps = 3, prefix = 6;
    const EmxAgentParams agents[nb] = {{0.0f, 0}, {0.8f, 40}, {1.3f, 0}};
    EmxState *dev = new_state(&m, "cuda:0", kCtx), *twin = new_state(&m, "cuda:0", kCtx, 0, dev);
    char err[256];
    cr_assert_eq(emx_state_branches_reserve(dev, nb, steps, err, sizeof err), 0, "%s", err);
    cr_assert_eq(emx_state_branches_reserve(twin, nb, steps, err, sizeof err), 0, "%s", err);
    const std::vector<int> toks = prompt_for(m);
    cr_assert(emx_forward(dev, toks.data(), prefix, 0) && emx_forward(twin, toks.data(), prefix, 0));
    int bt[nb] = {toks[prefix], toks[prefix + 1], toks[prefix + 2]};
    std::vector<float> logits((size_t)nb * vocab);
    std::vector<EmxCandidate> work((size_t)vocab);
    EmxProposal got[nb];
    for (int j = 0; j < steps; j++) {
        const uint64_t step = (uint64_t)(prefix + j + 1) | (uint64_t)1 << 32;
        cr_assert_eq(emx_forward_branches_propose(dev, bt, nb, prefix, j, agents, 42, step, 5, got), 1, "%s",
                     emx_state_error(dev));
        cr_assert_eq(emx_forward_branches(twin, bt, nb, prefix, j, logits.data()), 0, "%s", emx_state_error(twin));
        for (int b = 0; b < nb; b++) {
            EmxProposal want;
            emx_agent_propose(logits.data() + (size_t)b * vocab, vocab, &agents[b], 42, step, (uint32_t)(5 + b),
                              work.data(), &want);
            cr_assert_eq(got[b].token, want.token, "%s step %d branch %d", name, j, b);
            cr_assert(fabs(got[b].entropy_bits - want.entropy_bits) <= 1e-9 * fabs(want.entropy_bits) + 1e-12,
                      "%s step %d branch %d: entropy %.17g, host %.17g", name, j, b, got[b].entropy_bits,
                      want.entropy_bits);
            bt[b] = got[b].token >= 0 ? got[b].token : 0;
        }
    }
    EmxProposal four[4];
    const EmxAgentParams four_agents[4] = {{0.5f, 5}, {0.5f, 5}, {0.5f, 5}, {0.5f, 5}};
    const int four_tokens[4] = {1, 2, 3, 4};
    cr_assert_eq(emx_forward_branches_propose(dev, four_tokens, 4, prefix, 0, four_agents, 1, 1, 0, four), -1);
    cr_assert(strstr(emx_state_error(dev), "branches: bad call (n 4"), "%s", emx_state_error(dev));
    EmxState *cpu = new_state(&m, "cpu", kCtx);
    cr_assert_eq(emx_forward_branches_propose(cpu, bt, nb, prefix, 0, agents, 1, 1, 0, got), 0, "the CPU proposes on its side");
    emx_state_free(cpu);
    emx_state_free(twin);
    emx_state_free(dev);
    emx_model_close(&m);
}

Test(forward_cuda, branch_proposals_beside_their_logits) { branch_proposals_match("stories260K.f32.bin"); }
// the many-block passes, each over its own branch's row
Test(forward_cuda, branch_proposals_at_qwen3_vocabulary) { branch_proposals_match("qwen3-tiny.q8.bin"); }

// A lookahead round in one call: emx_forward_lookahead_propose gives, bit for bit, what
// emx_forward_propose and then emx_forward_branches_propose step by step give on a twin state,
// each branch fed its latest proposal by the host (the rule the device applies): every step's
// proposals (tokens and entropies), with and without a ban, over rounds at new prefixes (the
// round's graph replayed), a new seed half way (captured again), each round committing one
// branch as the pool does, and the cache that leaves (the next emx_forward's logits). Then what
// it refuses, and the CPU, which does not fuse (0).
void lookahead_round_equals_its_steps(const char *name, int no_graphs, int rounds) {
    EmxModel m;
    if (!open_test_model(name, &m)) cr_skip_test("build/models/%s missing (make test-models converts it)", name);
    const int vocab = (int)m.cfg.vocab_size, na = 3, L = 4, first = 4, lane = 2;
    const EmxAgentParams agents[na] = {{0.0f, 0}, {0.9f, 22}, {1.4f, 0}};
    EmxState *dev = new_state(&m, "cuda:0", kCtx, no_graphs), *twin = new_state(&m, "cuda:0", kCtx, no_graphs, dev);
    char err[256];
    cr_assert_eq(emx_state_branches_reserve(dev, na, L - 1, err, sizeof err), 0, "%s", err);
    cr_assert_eq(emx_state_branches_reserve(twin, na, L - 1, err, sizeof err), 0, "%s", err);
    const std::vector<int> toks = prompt_for(m);
    cr_assert(emx_forward(dev, toks.data(), first, 0) && emx_forward(twin, toks.data(), first, 0));
    EmxProposal got[L * na], want[L * na];
    int pos = first, token = toks[first];
    for (int r = 0; r < rounds; r++, pos += L) {
        const uint64_t seed = r < rounds / 2 ? 42 : 43, step = (uint64_t)pos + 1 + ((uint64_t)r << 32);
        const int ban = r % 2 ? (int)(token * 7 % vocab) : -1;
        cr_assert_eq(emx_forward_lookahead_propose(dev, token, pos, agents, na, seed, step, lane, ban, L, got), 1, "%s",
                     emx_state_error(dev));
        cr_assert_eq(emx_forward_propose(twin, token, pos, agents, na, seed, step, lane, ban, want), 1, "%s",
                     emx_state_error(twin));
        int fed[na] = {0, 0, 0};
        for (int j = 1; j < L; j++) {
            for (int b = 0; b < na; b++)
                if (want[(j - 1) * na + b].token >= 0) fed[b] = want[(j - 1) * na + b].token;
            cr_assert_eq(emx_forward_branches_propose(twin, fed, na, pos + 1, j - 1, agents, seed, step + j, lane,
                                                      want + j * na), 1, "%s", emx_state_error(twin));
        }
        for (int k = 0; k < L * na; k++) {
            cr_assert_eq(got[k].token, want[k].token, "%s round %d step %d agent %d", name, r, k / na, k % na);
            cr_assert(memcmp(&got[k].entropy_bits, &want[k].entropy_bits, sizeof(double)) == 0,
                      "%s round %d step %d agent %d: entropy %.17g, step by step %.17g", name, r, k / na, k % na,
                      got[k].entropy_bits, want[k].entropy_bits);
        }
        for (int b = 0; b < na; b++) cr_assert_neq(got[b].token, ban, "the banned token was proposed");
        // commit branch r % na's first L - 1 tokens; its last one is the next round's token
        const int w = r % na;
        cr_assert_eq(emx_branch_commit(dev, w, L - 1, pos + 1), 0, "%s", emx_state_error(dev));
        cr_assert_eq(emx_branch_commit(twin, w, L - 1, pos + 1), 0, "%s", emx_state_error(twin));
        token = got[(L - 1) * na + w].token >= 0 ? got[(L - 1) * na + w].token : 1;
    }
    // the cache the rounds and commits wrote: the next position's logits equal the twin's
    const float *a = emx_forward(dev, &token, 1, pos);
    cr_assert(a, "%s", emx_state_error(dev));
    std::vector<float> la(a, a + vocab);
    const float *b = emx_forward(twin, &token, 1, pos);
    cr_assert(b && memcmp(la.data(), b, (size_t)vocab * sizeof(float)) == 0, "%s: the rounds left another cache", name);
    // refused: more agents than branches reserved, more steps than the tails hold, past the context
    EmxAgentParams four[4] = {agents[0], agents[1], agents[2], agents[0]};
    EmxProposal many[8 * 4];
    cr_assert_eq(emx_forward_lookahead_propose(dev, 1, 5, four, 4, 1, 1, 0, -1, L, many), -1);
    cr_assert(strstr(emx_state_error(dev), "lookahead_propose: 4 steps of 4 agents"), "%s", emx_state_error(dev));
    cr_assert_eq(emx_forward_lookahead_propose(dev, 1, 5, agents, na, 1, 1, 0, -1, L + 1, many), -1);
    cr_assert_eq(emx_forward_lookahead_propose(dev, 1, kCtx - 2, agents, na, 1, 1, 0, -1, L, many), -1);
    cr_assert(strstr(emx_state_error(dev), "context 40"), "%s", emx_state_error(dev));
    EmxState *cpu = new_state(&m, "cpu", kCtx);
    cr_assert_eq(emx_forward_lookahead_propose(cpu, 1, 0, agents, na, 1, 1, 0, -1, L, many), 0, "the CPU does not fuse");
    emx_state_free(cpu);
    emx_state_free(twin);
    emx_state_free(dev);
    emx_model_close(&m);
}

Test(forward_cuda, lookahead_round_in_one_graph_equals_its_steps) {
    lookahead_round_equals_its_steps("stories260K.f32.bin", 0, 6);
}
Test(forward_cuda, lookahead_round_as_direct_launches_equals_its_steps) {
    lookahead_round_equals_its_steps("stories260K.f32.bin", 1, 3);
}
Test(forward_cuda, lookahead_round_at_qwen3_vocabulary, .timeout = 600) {
    lookahead_round_equals_its_steps("qwen3-tiny.q8.bin", 0, 2);
}
