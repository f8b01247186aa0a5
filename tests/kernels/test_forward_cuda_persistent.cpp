// test_forward_cuda_persistent.cpp — the decode step as one persistent kernel
// (runtime/cuda/forward_cuda_persistent.c, kernels/persistent/decode_persistent.cu) against the fused graph
// path it replaces, whole models on emulated cuda:0.
//
// A state made with EmxStateOptions.persistent and one without (the graph of five fused kernels a
// layer) prefill the same prompt, then decode greedily; at every step the logits, every layer's
// score row and the KV rows are BITWISE equal (the persistent kernel's phases run the fused
// kernels' code: kernels/matvec_fused.cuh, kernels/attention_decode.cuh), through the graph and
// through direct launches. Counted on the emulator: a persistent step is one cooperative launch
// and nothing else, no fused matvec or attention kernel, the embedding and the classifier
// inside it (q4 models' q8 ones too: the state's decode_path says none is apart), or launched
// on their own where the path says they are apart. The grid: what the occupancy API and the SM count give (the emulator's EMU_SM_COUNT:
// half the SMs, half the blocks), or fewer (EMX_CUDA_PERSISTENT_BLOCKS: one block running every
// phase alone, three), the same bits each time. Gemma 3's layers (sandwich norms, GeGLU) too. A
// model the kernel does not take (stories260K) decodes through the graph path, bitwise, and says
// why. Decisions
// (emx_forward_decide: greedy, entropix, a sampled draw) equal the graph path's with their
// statistics made in the persistent launch, no metrics kernel run, and entropix's passes over the
// vocabulary too: its step is the launch and the decision's one block.
// The models' vocabularies are real (128k-152k rows in the classifier): these run in the forward
// pass only (the Makefile's EMU_FORWARD_ONLY); test_decode_persistent.cpp runs the kernel under
// both emulator schedules.
#include <stdlib.h>
#include <string.h>

#include <string>
#include <vector>

#include "forward_test_util.h"
#include "kb_util.h"

namespace {



// A state asking for the persistent kernel (persistent) or not, with EMX_CUDA_PERSISTENT_BLOCKS
// set to `blocks` (NULL: unset) while it is made.
EmxState *state_of(const EmxModel *m, int persistent, const char *blocks, int ctx, int no_graphs,
                   const EmxState *share, EmxKvType cache = EMX_KV_AUTO) {
    EmxStateOptions opt = {};
    opt.n_threads = 1;
    opt.ctx = ctx;
    opt.device = "cuda:0";
    opt.no_graphs = no_graphs;
    opt.share_weights = share;
    opt.cache_type = cache;
    opt.persistent = persistent;
    if (blocks)
        setenv("EMX_CUDA_PERSISTENT_BLOCKS", blocks, 1);
    else
        unsetenv("EMX_CUDA_PERSISTENT_BLOCKS");
    char err[512];
    EmxState *s = emx_state_new(m, &opt, err, sizeof err);
    unsetenv("EMX_CUDA_PERSISTENT_BLOCKS");
    cr_assert(s, "emx_state_new: %s", err);
    return s;
}

std::string decode_path(const EmxState *s) {
    EmxStateInfo info;
    emx_state_info(s, &info);
    return info.decode_path ? info.decode_path : "(null)";
}

// The persistent kernel's grid (EmxStateInfo.persistent_blocks), the decode path's text checked to
// name it: "persistent kernel, N block(s)...", or 0 and a path that is not the persistent kernel.
int path_blocks(const EmxState *s) {
    EmxStateInfo info;
    emx_state_info(s, &info);
    const std::string path = decode_path(s);
    const std::string named = "persistent kernel, " + std::to_string(info.persistent_blocks) + " block";
    cr_assert(info.persistent_blocks > 0 ? path.rfind(named, 0) == 0 : path.rfind("persistent", 0) != 0,
              "%d blocks, decode path '%s'", info.persistent_blocks, path.c_str());
    return info.persistent_blocks;
}

// The states decode `steps` greedy tokens after a prompt, each step's logits, score rows and KV
// rows compared with states[0]'s (the graph path). taken[k]: states[k] runs the persistent
// kernel (one cooperative launch a step, nothing else); else the graph path's kernels.
void decode_equal(const char *name, const EmxModel &m, std::vector<EmxState *> states, std::vector<bool> taken,
                  int ctx, int steps) {
    const int vocab = (int)m.cfg.vocab_size, L = (int)m.cfg.n_layers, prompt = 4;
    std::vector<int> toks(prompt);
    for (int i = 0; i < prompt; i++) toks[i] = (1 + 37 * i) % vocab;
    for (EmxState *s : states) cr_assert(emx_forward(s, toks.data(), prompt, 0), "%s", emx_state_error(s));
    int tok = 5 % vocab;
    const size_t ns = (size_t)L * m.cfg.n_heads * ctx;
    for (int step = 0; step < steps; step++) {
        const int pos = prompt + step;
        const float *r = emx_forward(states[0], &tok, 1, pos);
        cr_assert(r, "%s", emx_state_error(states[0]));
        const std::vector<float> rl(r, r + vocab);
        const std::vector<float> rs(emx_attention_scores(states[0], nullptr), emx_attention_scores(states[0], nullptr) + ns);
        const size_t bytes = emx_state_kv_rows_bytes(states[0], pos + 1);
        std::vector<uint8_t> rk(bytes), k2(bytes);
        cr_assert_eq(emx_state_kv_rows_read(states[0], 0, pos + 1, rk.data()), 0);
        for (size_t k = 1; k < states.size(); k++) {
            const long all0 = emu_runs(""), coop0 = emu_cooperative_runs("decode_persistent_kernel");
            const long mv0 = emu_runs("matvec_fused"), attn0 = emu_runs("attention_decode"), emb0 = emu_runs("embedding");
            const float *f = emx_forward(states[k], &tok, 1, pos);
            cr_assert(f, "%s", emx_state_error(states[k]));
            const long all = emu_runs("") - all0, coop = emu_cooperative_runs("decode_persistent_kernel") - coop0;
            const long mv = emu_runs("matvec_fused") - mv0, attn = emu_runs("attention_decode") - attn0;
            const long emb = emu_runs("embedding") - emb0;
            const std::string path = decode_path(states[k]);
            cr_assert(memcmp(rl.data(), f, (size_t)vocab * sizeof(float)) == 0, "%s (%s): logits differ at pos %d", name,
                      path.c_str(), pos);
            const float *fs = emx_attention_scores(states[k], nullptr);
            for (size_t lh = 0; lh < (size_t)L * m.cfg.n_heads; lh++)
                cr_assert(memcmp(&rs[lh * ctx], fs + lh * ctx, (size_t)(pos + 1) * sizeof(float)) == 0,
                          "%s (%s): score row %zu differs at pos %d", name, path.c_str(), lh, pos);
            cr_assert_eq(emx_state_kv_rows_read(states[k], 0, pos + 1, k2.data()), 0);
            cr_assert(memcmp(rk.data(), k2.data(), bytes) == 0, "%s (%s): KV rows differ at pos %d", name, path.c_str(), pos);
#ifdef ENTROPIX_CUDA_EMU
            if (taken[k]) {  // one launch, and the embedding and classifier apart only where the path says so
                const bool apart = path.find("apart") != std::string::npos;
                cr_log_info("%s (%s): %ld kernels a step", name, path.c_str(), all);
                cr_assert_eq(coop, 1, "%s (%s): %ld cooperative launches a step", name, path.c_str(), coop);
                cr_assert_eq(attn, 0, "%s (%s): the attention kernel ran", name, path.c_str());
                cr_assert(apart ? emb + mv >= 1 && emb <= 1 && mv <= 1 : emb + mv == 0, "%s (%s): embedding %ld, "
                          "fused matvecs %ld", name, path.c_str(), emb, mv);
                cr_assert_eq(all, 1 + emb + mv, "%s (%s): %ld kernels a step", name, path.c_str(), all);
            } else {
                cr_assert_eq(coop, 0, "%s (%s): the persistent kernel ran", name, path.c_str());
                cr_assert_gt(attn, 0, "%s (%s): the fused attention did not run", name, path.c_str());
            }
#else
            (void)all, (void)coop, (void)mv, (void)attn, (void)emb, (void)taken;
#endif
        }
        tok = logits_argmax(rl.data(), vocab);
    }
}

// The graph path, the persistent kernel through its graph, and through direct launches.
void persistent_equals_graph(const char *name, int steps, EmxKvType cache = EMX_KV_AUTO) {
    EmxModel m;
    if (!open_test_model(name, &m)) cr_skip_test("build/models/%s missing (make test-models)", name);
    const int ctx = 16;
    EmxState *graph = state_of(&m, 0, nullptr, ctx, 0, nullptr, cache);
    EmxState *per = state_of(&m, 1, nullptr, ctx, 0, graph, cache);
    EmxState *direct = state_of(&m, 1, nullptr, ctx, 1, graph, cache);
    cr_assert_eq(decode_path(graph), std::string("graph"));
    cr_assert_gt(path_blocks(per), 1, "%s: %s", name, decode_path(per).c_str());
    cr_assert(decode_path(per).find("apart") == std::string::npos, "%s: %s", name, decode_path(per).c_str());
    decode_equal(name, m, {graph, per, direct}, {false, true, true}, ctx, steps);
    for (EmxState *s : {direct, per, graph}) emx_state_free(s);
    emx_model_close(&m);
}

// emx_forward_decide every step on the graph path and the persistent kernel (graph, direct
// launches): the same token, decision, score and metrics, bitwise. kind: entropix (the logits' and
// the profile's attention metrics made in the persistent launch, then its decision kernels),
// greedy (the argmax made in the launch: the step is that one kernel; entropix from 8192 logits
// on: the launch alone, whose last phases are its passes over the vocabulary and whose last block
// decides), or a sampled draw with the metrics asked for (made in the launch; with top-k off the
// sampler's kernels after it, with top_k > 1 from 8192 logits on the draw in the launch too).
// Counted on the emulator: the persistent states run no metrics kernel, the graph path does.
void decide_equal(const char *name, int steps, int kind, int top_k = 0) {
    EmxModel m;
    if (!open_test_model(name, &m)) cr_skip_test("build/models/%s missing (make test-models)", name);
    const int ctx = 16, vocab = (int)m.cfg.vocab_size;
    EmxState *st[3] = {state_of(&m, 0, nullptr, ctx, 0, nullptr), nullptr, nullptr};
    st[1] = state_of(&m, 1, nullptr, ctx, 0, st[0]);
    st[2] = state_of(&m, 1, nullptr, ctx, 1, st[0]);
    const EmxDecideSpec spec = decide_spec(kind, 99, 0.9f, top_k, 0.9f);
    const bool in_launch = vocab >= 8192 && (kind == EMX_DECIDE_ENTROPIX || (kind == EMX_DECIDE_SAMPLE && top_k > 1));
    const int toks[3] = {3 % vocab, 50 % vocab, 7 % vocab};
    EmxDecideResult out[3];
    for (int k = 0; k < 3; k++) cr_assert_eq(emx_forward_decide(st[k], toks, 3, 0, &spec, &out[k]), 1, "%s", emx_state_error(st[k]));
    for (int step = 0; step < steps; step++) {
        const int tok = out[0].token;
        for (int k = 0; k < 3; k++) {
            const long all0 = emu_runs(""), lm0 = emu_runs("logits_"), am0 = emu_runs("attn_"), mb0 = emu_runs("mb_");
            cr_assert_eq(emx_forward_decide(st[k], &tok, 1, 3 + step, &spec, &out[k]), 1, "%s", emx_state_error(st[k]));
            const long all = emu_runs("") - all0, metrics = emu_runs("logits_") - lm0 + emu_runs("attn_") - am0;
            const long passes = emu_runs("mb_") - mb0;
#ifdef ENTROPIX_CUDA_EMU
            cr_assert(k ? metrics == 0 : metrics >= (kind == EMX_DECIDE_GREEDY ? 2 : 4),
                      "%s, %s: %ld metrics kernels a step", name, k ? "persistent" : "graph", metrics);
            if (k && kind == EMX_DECIDE_GREEDY) cr_assert_eq(all, 1, "%s: %ld kernels a greedy step", name, all);
            if (in_launch)  // the choice in the persistent launch: its passes no kernels of their own
                cr_assert(k ? passes == 0 && all == 1 : passes == 6, "%s, %s: %ld kernels, %ld of the passes a step",
                          name, k ? "persistent" : "graph", all, passes);
            else if (kind == EMX_DECIDE_ENTROPIX)  // one block decides after the launch
                cr_assert(k ? all == 2 : passes == 0, "%s, %s: %ld kernels a step", name, k ? "persistent" : "graph",
                          all);
#else
            (void)all, (void)metrics, (void)passes, (void)in_launch;
#endif
        }
        for (int k = 1; k < 3; k++) {
            cr_assert_eq(out[k].token, out[0].token, "%s: token %d, graph path %d at step %d", name, out[k].token,
                         out[0].token, step);
            cr_assert(memcmp(&out[k].decision, &out[0].decision, sizeof out[0].decision) == 0 &&
                          memcmp(&out[k].score, &out[0].score, sizeof out[0].score) == 0 &&
                          memcmp(&out[k].metrics, &out[0].metrics, sizeof out[0].metrics) == 0,
                      "%s: the decision, score or metrics differ at step %d", name, step);
        }
    }
    for (EmxState *s : st) emx_state_free(s);
    emx_model_close(&m);
}

}  // namespace

Test(forward_cuda_persistent, qwen3_tiny_entropix_decides_as_the_graph_path, .timeout = 900) {
    decide_equal("qwen3-tiny.q8.bin", 3, EMX_DECIDE_ENTROPIX);
}

// A q4_1f export (Q4_K's: its classifier q8): the entropix decision in the launch after the q8
// classifier.
Test(forward_cuda_persistent, qwen3_tiny_q4_1f_entropix_decides_as_the_graph_path, .timeout = 900) {
    decide_equal("qwen3-tiny.q4_1f.bin", 2, EMX_DECIDE_ENTROPIX);
}

Test(forward_cuda_persistent, qwen3_tiny_greedy_and_sampled_decide_as_the_graph_path, .timeout = 900) {
    decide_equal("qwen3-tiny.q8.bin", 2, EMX_DECIDE_GREEDY);
    decide_equal("qwen3-tiny.q8.bin", 2, EMX_DECIDE_SAMPLE);      // top-k off: the wide draw's kernels
    decide_equal("qwen3-tiny.q8.bin", 2, EMX_DECIDE_SAMPLE, 40);  // top-k on: the draw in the launch
}

// q4 (its embedding and classifier q8, in the launch), and f32 weights with an f16 cache.
Test(forward_cuda_persistent, llama3_tiny_equals_graph_path, .timeout = 900) {
    persistent_equals_graph("llama3-tiny.q4.bin", 2);
    persistent_equals_graph("llama3-tiny.f32.bin", 1, EMX_KV_F16);
}

// Qwen3's per-head q/k norms, Qwen2's biases, inside the attention phase.
Test(forward_cuda_persistent, qwen3_qwen25_tiny_equal_graph_path, .timeout = 900) {
    persistent_equals_graph("qwen3-tiny.q8.bin", 2);
    persistent_equals_graph("qwen2.5-tiny.q8.bin", 1, EMX_KV_F16);
}

// The grid from the device, never a fixed count: half the SMs give half the blocks; fewer blocks
// asked for (one block runs every phase alone; three) give the same bits.
Test(forward_cuda_persistent, llama3_tiny_grid_sizes, .timeout = 900) {
    EmxModel m;
    if (!open_test_model("llama3-tiny.q8.bin", &m)) cr_skip_test("build/models/llama3-tiny.q8.bin missing");
    const int ctx = 16;
    EmxState *graph = state_of(&m, 0, nullptr, ctx, 0, nullptr);
    EmxState *full = state_of(&m, 1, nullptr, ctx, 0, graph);
    const char *sms = getenv("EMU_SM_COUNT");
    const std::string saved = sms ? sms : "";
    const int n_sms = sms ? atoi(sms) : 4;
    setenv("EMU_SM_COUNT", std::to_string(n_sms * 2).c_str(), 1);
    EmxState *twice = state_of(&m, 1, nullptr, ctx, 0, graph);
    if (sms)
        setenv("EMU_SM_COUNT", saved.c_str(), 1);
    else
        unsetenv("EMU_SM_COUNT");
    cr_assert_eq(path_blocks(twice), 2 * path_blocks(full), "%s against %s", decode_path(twice).c_str(),
                 decode_path(full).c_str());
    EmxState *one = state_of(&m, 1, "1", ctx, 0, graph);
    EmxState *three = state_of(&m, 1, "3", ctx, 1, graph);
    cr_assert_eq(path_blocks(one), 1, "%s", decode_path(one).c_str());
    cr_assert_eq(path_blocks(three), 3, "%s", decode_path(three).c_str());
    decode_equal("llama3-tiny.q8.bin", m, {graph, one, three}, {false, true, true}, ctx, 2);
    for (EmxState *s : {three, one, twice, full, graph}) emx_state_free(s);
    emx_model_close(&m);
}

// Gemma 3's layers (sandwich norms, GeGLU, sliding-window layers, the embedding's scale) in the
// persistent kernel: bitwise the graph path, q8 and q4 with an f16 cache; entropix decisions
// with their metrics in the launch.
Test(forward_cuda_persistent, gemma3_tiny_equals_graph_path, .timeout = 900) {
    persistent_equals_graph("gemma3-tiny.q8.bin", 2);
    persistent_equals_graph("gemma3-tiny.q4.bin", 1, EMX_KV_F16);
    decide_equal("gemma3-tiny.q8.bin", 2, EMX_DECIDE_ENTROPIX);
}

// Asked for where it does not apply (stories260K's q8 export: layers of mixed dtypes):
// the graph path decodes (bitwise the state that did not ask), and the state says why.
Test(forward_cuda_persistent, stories260K_falls_back_to_the_graph_path, .timeout = 900) {
    EmxModel m;
    if (!open_test_model("stories260K.q8.bin", &m)) cr_skip_test("build/models/stories260K.q8.bin missing");
    const int ctx = 16;
    EmxState *graph = state_of(&m, 0, nullptr, ctx, 0, nullptr);
    EmxState *asked = state_of(&m, 1, nullptr, ctx, 0, graph);
    const std::string path = decode_path(asked);
    cr_assert(path.find("graph (the persistent kernel does not take it: ") == 0, "%s", path.c_str());
    cr_assert_eq(path_blocks(asked), 0);
    decode_equal("stories260K.q8.bin", m, {graph, asked}, {false, false}, ctx, 1);
    emx_state_free(asked);
    emx_state_free(graph);
    emx_model_close(&m);
}

// Quantised weights beside an f32 cache (asked for: auto gives them the f16 one), a pair the
// kernel is not built for: the graph path decodes, bitwise the state that did not ask.
Test(forward_cuda_persistent, q8_weights_with_an_f32_cache_fall_back, .timeout = 900) {
    EmxModel m;
    if (!open_test_model("qwen3-tiny.q8.bin", &m)) cr_skip_test("build/models/qwen3-tiny.q8.bin missing");
    const int ctx = 16;
    EmxState *graph = state_of(&m, 0, nullptr, ctx, 0, nullptr, EMX_KV_F32);
    EmxState *asked = state_of(&m, 1, nullptr, ctx, 0, graph, EMX_KV_F32);
    const std::string path = decode_path(asked);
    cr_assert(path.find("graph (the persistent kernel does not take it: a cache it is not built for") == 0, "%s",
              path.c_str());
    cr_assert_eq(path_blocks(asked), 0);
    decode_equal("qwen3-tiny.q8.bin", m, {graph, asked}, {false, false}, ctx, 1);
    emx_state_free(asked);
    emx_state_free(graph);
    emx_model_close(&m);
}
