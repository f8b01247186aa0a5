// test_forward_cuda_kv16.cpp — the CUDA backend with an f16 KV cache (EmxStateOptions.cache_type
// EMX_KV_F16), through the public API: against the CPU's f32 cache, against the same device's
// f32 cache, and the cache's own contents.
//
// What f16 changes: each key and value is rounded to f16 (round to nearest even, relative error
// at most 2^-11) as RoPE writes it, and the attention widens it exactly; nothing else. Layer 0's
// rows come from the embedding alone, so there the f16 cache holds exactly the f32 cache's values
// rounded. Later layers see attention outputs that moved by those roundings, so logits drift by a
// small fraction: measured on the f32 test models (prefill of 19 tokens, then 3 decode steps),
// the same under the emulator and on an H200: 2.1e-4 of max|logit| (stories260K), 6.1e-4
// (qwen3-tiny), 1.45e-3 (llama3-tiny). Allowed: 1e-2, 7x above the worst.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <criterion/criterion.h>

#include "kb_util.h"
#include "forward_test_util.h"

#include <string>
#include <vector>

extern "C" {
#include "base/dtype.h"
#include "runtime/forward.h"
#include "runtime/model.h"
}

namespace {

const int kPrompt[] = {1, 9707, 11, 1879, 0, 576, 3974, 42, 17, 300, 5, 77, 1000, 8, 64, 3, 12, 99, 4};
const int kPromptLen = 19;  // two 16-row chunks
const int kCtx = 40;
const float kTol = 1e-2f;

std::vector<int> prompt_for(const EmxModel &m) {
    std::vector<int> t(kPrompt, kPrompt + kPromptLen);
    for (int &x : t) x %= (int)m.cfg.vocab_size;
    return t;
}

bool is_f16_value(float v) { return emx_f16_to_f32(emx_f32_to_f16(v)) == v; }

// Prefill and 3 decode steps: the f16-cache GPU's logits against the CPU's f32 cache.
void logits_near_cpu(const char *name) {
    EmxModel m;
    if (!open_test_model(name, &m)) cr_skip_test("build/models/%s missing (make test-models converts it)", name);
    const int vocab = (int)m.cfg.vocab_size;
    std::vector<int> toks = prompt_for(m);
    EmxState *cpu = new_state(&m, "cpu", kCtx, 0, nullptr, EMX_KV_F32);
    EmxState *gpu = new_state(&m, "cuda:0", kCtx, 0, nullptr, EMX_KV_F16);
    EmxStateInfo info;
    emx_state_info(gpu, &info);
    cr_assert_eq(info.cache_type, EMX_KV_F16);
    double worst = 0;
    for (int step = 0, pos = 0; step < 4; step++) {
        const int n = step == 0 ? kPromptLen : 1;
        const float *want = emx_forward(cpu, toks.data(), n, pos);
        std::vector<float> w(want, want + vocab);
        const float *got = emx_forward(gpu, toks.data(), n, pos);
        cr_assert(got, "%s: %s", name, emx_state_error(gpu));
        char what[160];
        snprintf(what, sizeof what, "%s (f16 cache) logits at step %d (pos %d)", name, step, pos);
        worst = fmax(worst, compare(what, got, w.data(), (size_t)vocab, kTol));
        pos += n;
        toks[0] = (toks[0] * 31 + 7) % vocab;
    }
    cr_log_info("%s: f16 cache, worst logit difference %.2e of max|logit|", name, worst);
    emx_state_free(gpu);
    emx_state_free(cpu);
    emx_model_close(&m);
}

}  // namespace

Test(forward_cuda_kv16, logits_near_the_cpu_f32_cache, .timeout = 900) {
    for (const char *name : {"stories260K.f32.bin", "qwen3-tiny.f32.bin", "llama3-tiny.f32.bin"}) logits_near_cpu(name);
}

// Every value in the f16 cache is an f16 value; layer 0's rows, which depend on the embedding
// alone, are exactly the f32 cache's (same device, same kernels) rounded to f16; the host copy
// and the f32 rows read out agree.
Test(forward_cuda_kv16, cache_holds_the_f32_values_rounded) {
    EmxModel m;
    if (!open_test_model("stories260K.f32.bin", &m)) cr_skip_test("build/models/stories260K.f32.bin missing");
    const std::vector<int> toks = prompt_for(m);
    EmxState *f32 = new_state(&m, "cuda:0", kCtx, 0, nullptr, EMX_KV_F32);
    EmxState *f16 = new_state(&m, "cuda:0", kCtx, 0, f32, EMX_KV_F16);
    cr_assert(emx_forward(f32, toks.data(), kPromptLen, 0) && emx_forward(f16, toks.data(), kPromptLen, 0));
    float *k32, *v32, *k16, *v16;
    int kv_dim;
    emx_state_kv_cache(f32, &k32, &v32, &kv_dim);
    emx_state_kv_cache(f16, &k16, &v16, &kv_dim);
    cr_assert(k32 && v32 && k16 && v16, "%s", emx_state_error(f16));
    const size_t row = (size_t)kv_dim, layer = (size_t)kCtx * row, used = (size_t)kPromptLen * row;
    for (size_t i = 0; i < used; i++) {
        cr_assert(k16[i] == emx_f16_to_f32(emx_f32_to_f16(k32[i])), "layer 0 key [%zu]: %.9g, f32 %.9g", i, k16[i], k32[i]);
        cr_assert(v16[i] == emx_f16_to_f32(emx_f32_to_f16(v32[i])), "layer 0 value [%zu]: %.9g, f32 %.9g", i, v16[i],
                  v32[i]);
    }
    for (uint32_t l = 0; l < m.cfg.n_layers; l++)
        for (size_t i = 0; i < used; i++)
            cr_assert(is_f16_value(k16[l * layer + i]) && is_f16_value(v16[l * layer + i]), "layer %u [%zu] not f16", l, i);
    // emx_state_kv_rows_read: the same values, f32, keys then values [n_layers][n][kv_dim]
    std::vector<float> rows(emx_state_kv_rows_bytes(f16, kPromptLen) / sizeof(float));
    cr_assert_eq(rows.size(), 2 * m.cfg.n_layers * used);
    cr_assert_eq(emx_state_kv_rows_read(f16, 0, kPromptLen, rows.data()), 0, "%s", emx_state_error(f16));
    for (uint32_t l = 0; l < m.cfg.n_layers; l++) {
        cr_assert(memcmp(&rows[l * used], k16 + l * layer, used * sizeof(float)) == 0, "layer %u keys", l);
        cr_assert(memcmp(&rows[(m.cfg.n_layers + l) * used], v16 + l * layer, used * sizeof(float)) == 0, "layer %u values", l);
    }
    emx_state_free(f16);
    emx_state_free(f32);
    emx_model_close(&m);
}

// KV rows travel between caches of both types: the f16 state's rows written into a second f16
// state come back bit for bit (an f16 value rounds to itself), and that state then decodes
// exactly as the first; written into an f32 state they are kept as given.
// What auto means (emx_kv_type_resolve): f16 on a GPU for 16-bit or quantised weights, f32 for
// f32 weights and on the CPU, the reference.
Test(forward_cuda_kv16, auto_is_f16_on_a_gpu_for_16_bit_and_quantised_weights) {
    const struct {
        const char *model, *device;
        EmxKvType want;
    } cases[] = {{"stories260K.q8.bin", "cuda:0", EMX_KV_F16}, {"qwen3-tiny.bf16.bin", "cuda:0", EMX_KV_F16},
                 {"llama3-tiny.q4.bin", "cuda:0", EMX_KV_F16}, {"stories260K.f32.bin", "cuda:0", EMX_KV_F32},
                 {"stories260K.q8.bin", "cpu", EMX_KV_F32}};
    for (const auto &c : cases) {
        EmxModel m;
        if (!open_test_model(c.model, &m)) cr_skip_test("build/models/%s missing (make test-models converts it)", c.model);
        EmxState *s = new_state(&m, c.device, kCtx, 0, nullptr, EMX_KV_AUTO);
        EmxStateInfo info;
        emx_state_info(s, &info);
        cr_expect_eq(info.cache_type, c.want, "%s on %s: auto gave %s, want %s", c.model, c.device,
                     emx_kv_type_name(info.cache_type), emx_kv_type_name(c.want));
        for (EmxKvType t : {EMX_KV_F32, EMX_KV_F16})  // an explicit type stays as asked
            cr_expect_eq(emx_kv_type_resolve(t, &m, 1), t);
        emx_state_free(s);
        emx_model_close(&m);
    }
}

Test(forward_cuda_kv16, rows_travel_between_cache_types) {
    EmxModel m;
    if (!open_test_model("stories260K.q8.bin", &m)) cr_skip_test("build/models/stories260K.q8.bin missing");
    const size_t vocab = m.cfg.vocab_size;
    const std::vector<int> toks = prompt_for(m);
    EmxState *a = new_state(&m, "cuda:0", kCtx, 0, nullptr, EMX_KV_F16);
    EmxState *b = new_state(&m, "cuda:0", kCtx, 0, a, EMX_KV_F16), *c = new_state(&m, "cuda:0", kCtx, 0, a, EMX_KV_F32);
    cr_assert(emx_forward(a, toks.data(), 12, 0), "%s", emx_state_error(a));
    const size_t n = emx_state_kv_rows_bytes(a, 12) / sizeof(float);
    std::vector<float> ra(n), rb(n), rc(n);
    cr_assert_eq(emx_state_kv_rows_read(a, 0, 12, ra.data()), 0);
    cr_assert_eq(emx_state_kv_rows_write(b, 0, 12, ra.data()), 0, "%s", emx_state_error(b));
    cr_assert_eq(emx_state_kv_rows_write(c, 0, 12, ra.data()), 0, "%s", emx_state_error(c));
    cr_assert_eq(emx_state_kv_rows_read(b, 0, 12, rb.data()), 0);
    cr_assert_eq(emx_state_kv_rows_read(c, 0, 12, rc.data()), 0);
    cr_assert(memcmp(ra.data(), rb.data(), n * sizeof(float)) == 0, "f16 -> f16 rows changed");
    cr_assert(memcmp(ra.data(), rc.data(), n * sizeof(float)) == 0, "f16 -> f32 rows changed");
    const int next = toks[12];
    const float *la = emx_forward(a, &next, 1, 12);
    std::vector<float> va(la, la + vocab);
    const float *lb = emx_forward(b, &next, 1, 12);
    cr_assert(lb && memcmp(va.data(), lb, vocab * sizeof(float)) == 0, "decode from the copied rows differs");
    emx_state_free(c);
    emx_state_free(b);
    emx_state_free(a);
    emx_model_close(&m);
}

// The decode graph and direct launches over an f16 cache: bitwise equal (the graph captures the
// cache's element type with its pointers); branches and their commit near the CPU's.
Test(forward_cuda_kv16, graph_and_branches, .timeout = 600) {
    EmxModel m;
    if (!open_test_model("stories260K.f32.bin", &m)) cr_skip_test("build/models/stories260K.f32.bin missing");
    const size_t vocab = m.cfg.vocab_size;
    const std::vector<int> toks = prompt_for(m);
    EmxState *graph = new_state(&m, "cuda:0", kCtx, 0, nullptr, EMX_KV_F16);
    EmxState *direct = new_state(&m, "cuda:0", kCtx, 1, graph, EMX_KV_F16);
    EmxState *cpu = new_state(&m, "cpu", kCtx, 0, nullptr, EMX_KV_F32);
    const int n = 10;
    cr_assert(emx_forward(graph, toks.data(), n, 0) && emx_forward(direct, toks.data(), n, 0) &&
              emx_forward(cpu, toks.data(), n, 0));
    for (int pos = n; pos < n + 4; pos++) {
        const float *g = emx_forward(graph, &toks[pos], 1, pos);
        cr_assert(g, "%s", emx_state_error(graph));
        std::vector<float> gl(g, g + vocab);
        const float *d = emx_forward(direct, &toks[pos], 1, pos);
        cr_assert(d && memcmp(gl.data(), d, vocab * sizeof(float)) == 0, "graph and direct differ at pos %d", pos);
        cr_assert(emx_forward(cpu, &toks[pos], 1, pos));
    }
    const int prefix = n + 4, nb = 3, steps = 2;
    char err[256];
    cr_assert_eq(emx_state_branches_reserve(graph, nb, steps, err, sizeof err), 0, "%s", err);
    cr_assert_eq(emx_state_branches_reserve(cpu, nb, steps, err, sizeof err), 0, "%s", err);
    std::vector<float> bg(nb * vocab), bc(nb * vocab);
    for (int j = 0; j < steps; j++) {
        int bt[nb];
        for (int b = 0; b < nb; b++) bt[b] = (17 + 101 * b + 7 * j) % (int)vocab;
        cr_assert_eq(emx_forward_branches(graph, bt, nb, prefix, j, bg.data()), 0, "%s", emx_state_error(graph));
        cr_assert_eq(emx_forward_branches(cpu, bt, nb, prefix, j, bc.data()), 0);
        for (int b = 0; b < nb; b++) compare("f16 branch logits", &bg[b * vocab], &bc[b * vocab], vocab, kTol);
    }
    cr_assert_eq(emx_branch_commit(graph, 1, steps, prefix), 0, "%s", emx_state_error(graph));
    cr_assert_eq(emx_branch_commit(cpu, 1, steps, prefix), 0);
    const int next = 5;
    const float *c = emx_forward(cpu, &next, 1, prefix + steps);
    std::vector<float> cl(c, c + vocab);
    const float *g = emx_forward(graph, &next, 1, prefix + steps);
    cr_assert(g, "%s", emx_state_error(graph));
    compare("decode after an f16 commit", g, cl.data(), vocab, kTol);
    emx_state_free(cpu);
    emx_state_free(direct);
    emx_state_free(graph);
    emx_model_close(&m);
}
