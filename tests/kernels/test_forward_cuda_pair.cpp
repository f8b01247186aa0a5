// test_forward_cuda_pair.cpp — emx_forward_pair on the CUDA backend (runtime/cuda/forward_cuda_pair.c):
// the critic's pass, whose tail is two logits and the row's max and sum, and whose short passes
// are one captured graph per row count, replayed at other positions. Against emx_forward on a
// second state of the same device fed the same calls (direct launches for the chunked rows, the
// decode graph for one row, the GEMM path beyond 32 rows): the same kernels on the same data, so
// the logits, max, KV cache and score rows are bitwise equal; the sum is emx_logit_pair's over the
// returned row up to the order of its additions.
#include <math.h>
#include <string.h>

#include <criterion/criterion.h>

#include "kb_util.h"
#include "forward_test_util.h"

#include <vector>

extern "C" {
#include "runtime/forward.h"
#include "runtime/model.h"
#include "sampler/metrics.h"
}

namespace {

const int kCtx = 96;

struct Call {
    int n, pos, salt;
};

// What a critic does: a prompt, suffixes after it, a rollback to an earlier position with other
// tokens (a replay of a captured row count there), one row, two chunks (17 rows) at two
// positions, and a pass past the graphs (40 rows: the GEMM prefill).
const Call kCalls[] = {{19, 0, 1}, {5, 19, 2}, {5, 10, 3}, {1, 15, 4}, {17, 16, 5}, {17, 3, 6}, {5, 20, 7}, {40, 25, 8}};

void pair_equals_forward(const char *name, int id_a, int id_b) {
    EmxModel m;
    if (!open_test_model(name, &m)) cr_skip_test("build/models/%s missing (make test-models converts it)", name);
    const int vocab = (int)m.cfg.vocab_size;
    id_a %= vocab, id_b %= vocab;
    EmxState *pair = new_state(&m, "cuda:0", kCtx), *plain = new_state(&m, "cuda:0", kCtx, 0, pair);
    int last = -1;
    for (const Call &c : kCalls) {
        std::vector<int> toks(c.n);
        for (int i = 0; i < c.n; i++) toks[i] = (int)((i * 7919u + c.salt * 104729u + 13u) % (unsigned)vocab);
        EmxLogitPair got;
        cr_assert_eq(emx_forward_pair(pair, toks.data(), c.n, c.pos, id_a, id_b, &got), 0, "%s: %s", name,
                     emx_state_error(pair));
        const float *row = emx_forward(plain, toks.data(), c.n, c.pos);
        cr_assert(row, "%s: %s", name, emx_state_error(plain));
        EmxLogitPair want;
        cr_assert_eq(emx_logit_pair(row, vocab, id_a, id_b, &want), 0);
        cr_assert(memcmp(&got.logit_a, &want.logit_a, 4) == 0 && memcmp(&got.logit_b, &want.logit_b, 4) == 0 &&
                      memcmp(&got.max, &want.max, 4) == 0,
                  "%s: %d rows at %d: logits %.9g %.9g max %.9g, emx_forward's %.9g %.9g %.9g", name, c.n, c.pos,
                  got.logit_a, got.logit_b, got.max, want.logit_a, want.logit_b, want.max);
        cr_assert(close_to(got.sum, want.sum, 0.0, 1e-11), "%s: %d rows at %d: sum %.17g, host %.17g", name, c.n,
                  c.pos, got.sum, want.sum);
        last = c.pos + c.n - 1;
        int lp_pair, lp_plain;
        const size_t heads = (size_t)m.cfg.n_layers * m.cfg.n_heads;
        std::vector<float> sp(emx_attention_scores(pair, &lp_pair), emx_attention_scores(pair, nullptr) + heads * kCtx);
        const float *sq = emx_attention_scores(plain, &lp_plain);
        cr_assert_eq(lp_pair, last);
        cr_assert_eq(lp_plain, last);
        size_t lh = 0;
        while (lh < heads && memcmp(&sp[lh * kCtx], sq + lh * kCtx, (size_t)(last + 1) * 4) == 0) lh++;
        cr_assert_eq(lh, heads, "%s: %d rows at %d: score row %zu differs", name, c.n, c.pos, lh);
    }
    float *kp, *vp, *kq, *vq;
    int kv_dim;
    emx_state_kv_cache(pair, &kp, &vp, &kv_dim);
    const size_t per_layer = (size_t)kCtx * kv_dim, used = (size_t)(last + 1) * kv_dim;
    std::vector<float> k1(kp, kp + m.cfg.n_layers * per_layer), v1(vp, vp + m.cfg.n_layers * per_layer);
    emx_state_kv_cache(plain, &kq, &vq, &kv_dim);
    uint32_t l = 0;
    while (l < m.cfg.n_layers && memcmp(&k1[l * per_layer], kq + l * per_layer, used * 4) == 0 &&
           memcmp(&v1[l * per_layer], vq + l * per_layer, used * 4) == 0)
        l++;
    cr_assert_eq(l, m.cfg.n_layers, "%s: layer %u's KV rows differ", name, l);
    EmxStateInfo info;
    emx_state_info(pair, &info);
    cr_assert_eq(info.pair_graphs, 4, "%s: graphs for 19, 5, 1 and 17 rows (40 takes the GEMMs): %d", name,
                 info.pair_graphs);
    cr_assert_eq(info.vocab, vocab);
    emx_state_free(plain);
    emx_state_free(pair);
    emx_model_close(&m);
}

}  // namespace

Test(forward_cuda_pair, stories260K_equals_forward, .timeout = 600) { pair_equals_forward("stories260K.q8.bin", 300, 17); }
Test(forward_cuda_pair, qwen3_vocabulary_equals_forward, .timeout = 600) {
    pair_equals_forward("qwen3-tiny.q8.bin", 151000, 40);
}

// Direct launches (no graphs) give the same numbers; other ids drop the graphs and are
// captured again; bad calls are one-line errors and leave the state usable; the logits of a pair
// pass are not kept (emx_state_propose refuses).
Test(forward_cuda_pair, direct_launches_ids_and_errors, .timeout = 600) {
    EmxModel m;
    if (!open_test_model("stories260K.f32.bin", &m)) cr_skip_test("build/models/stories260K.f32.bin missing");
    EmxState *g = new_state(&m, "cuda:0", kCtx), *d = new_state(&m, "cuda:0", kCtx, 1, g);
    const int toks[6] = {1, 50, 200, 3, 9, 400};
    EmxLogitPair a, b;
    cr_assert_eq(emx_forward_pair(g, toks, 6, 0, 10, 11, &a), 0, "%s", emx_state_error(g));
    cr_assert_eq(emx_forward_pair(d, toks, 6, 0, 10, 11, &b), 0, "%s", emx_state_error(d));
    cr_assert(memcmp(&a.logit_a, &b.logit_a, 4) == 0 && memcmp(&a.max, &b.max, 4) == 0 && a.sum == b.sum,
              "graph and direct launches differ");
    EmxStateInfo info;
    emx_state_info(d, &info);
    cr_assert_eq(info.pair_graphs, 0, "no graphs without graphs");
    cr_assert_eq(emx_forward_pair(g, toks, 6, 0, 11, 10, &b), 0, "%s", emx_state_error(g));
    cr_assert(memcmp(&a.logit_a, &b.logit_b, 4) == 0 && memcmp(&a.logit_b, &b.logit_a, 4) == 0,
              "swapped ids: swapped logits");
    emx_state_info(g, &info);
    cr_assert_eq(info.pair_graphs, 1, "the first ids' graph was dropped, the second's captured");
    cr_assert_neq(emx_forward_pair(g, toks, 6, 0, 512, 1, &b), 0);
    cr_assert(strstr(emx_state_error(g), "ids 512, 1 outside the vocabulary of 512"), "%s", emx_state_error(g));
    cr_assert_neq(emx_forward_pair(g, toks, 6, kCtx - 5, 1, 2, &b), 0);
    cr_assert(strstr(emx_state_error(g), "outside the context"), "%s", emx_state_error(g));
    EmxAgentParams ag = {};
    ag.temperature = 1.0f;
    EmxProposal pr;
    cr_assert_lt(emx_state_propose(g, &ag, 1, 1, 1, 0, -1, &pr), 0, "no logits to propose from after a pair pass");
    cr_assert_eq(emx_forward_pair(g, toks, 6, 0, 10, 11, &b), 0, "usable after the errors: %s", emx_state_error(g));
    cr_assert(memcmp(&a.logit_a, &b.logit_a, 4) == 0 && memcmp(&a.logit_b, &b.logit_b, 4) == 0 &&
                  memcmp(&a.max, &b.max, 4) == 0 && a.sum == b.sum,
              "the same call, the same numbers");
    emx_state_free(d);
    emx_state_free(g);
    emx_model_close(&m);
}
