// test_forward_cuda_ring.cpp — a sliding-window model on CUDA keeps each local layer's keys in a
// ring of its window (runtime/kv_ring.h), not the whole context: the model's results are those
// of the CPU, the rings' memory is what the layout says, and calls that need keys a ring no
// longer holds are refused with a reason.
//
// Model: gemma3-tiny f32 (5 local layers with a window of 8 keys, 1 global). At 32 positions the
// CUDA state's rings hold 8 + 16 - 1 = 23 rows (its passes write at most 16 rows before reading:
// no GEMM chunk below 33 positions) while the CPU's state keeps every row (8 + 32 - 1 >= 32): the
// comparison is of a wrapped ring against a plain cache. At 300 positions both hold rings of
// 8 + 256 - 1 = 263 rows, written by a 280-token prompt in two GEMM chunks.
// References: the CPU backend (itself tested against Hugging Face transformers past its rings,
// tests/test_arch.c), logits within 2e-4 of max|logit| (test_forward_cuda.cpp's f32 bound:
// summation order only); rows moved between CUDA states: bitwise.
#include <math.h>
#include <string.h>

#include <criterion/criterion.h>

#include <string>
#include <vector>

#include "forward_test_util.h"
#include "kb_util.h"

namespace {

const char *kModel = "gemma3-tiny.f32.bin";
const int kCtx = 32, kRing = 23;  // kRing: 8 + 16 - 1
const float kTol = 2e-4f;

// n token ids, a fixed walk through the vocabulary.
std::vector<int> walk(const EmxModel &m, int n, int seed) {
    std::vector<int> t(n);
    for (int i = 0; i < n; i++) t[i] = (int)((seed + 7919u * (unsigned)i * (unsigned)i + 31u * (unsigned)i) % m.cfg.vocab_size);
    return t;
}

struct Pair {
    EmxModel m;
    EmxState *cpu, *gpu;
};

Pair open_pair(int ctx, int no_graphs = 0) {
    Pair p;
    if (!open_test_model(kModel, &p.m)) cr_skip_test("build/models/%s missing (make test-models converts it)", kModel);
    p.cpu = new_state(&p.m, "cpu", ctx);
    p.gpu = new_state(&p.m, "cuda:0", ctx, no_graphs);
    return p;
}

void close_pair(Pair &p) {
    emx_state_free(p.gpu);
    emx_state_free(p.cpu);
    emx_model_close(&p.m);
}

// tokens[pos..pos+n) on both; the logits and every layer's score row of the last position compared.
void step_both(Pair &p, const std::vector<int> &t, int pos, int n, const char *what) {
    const int vocab = (int)p.m.cfg.vocab_size;
    const float *w = emx_forward(p.cpu, t.data() + pos, n, pos);
    cr_assert(w, "%s: cpu: %s", what, emx_state_error(p.cpu));
    const std::vector<float> want(w, w + vocab);
    const float *got = emx_forward(p.gpu, t.data() + pos, n, pos);
    cr_assert(got, "%s: cuda at %d: %s", what, pos, emx_state_error(p.gpu));
    char name[160];
    snprintf(name, sizeof name, "%s: logits at %d", what, pos + n - 1);
    compare(name, got, want.data(), (size_t)vocab, kTol);
    int lc, lg;
    const float *sc = emx_attention_scores(p.cpu, &lc), *sg = emx_attention_scores(p.gpu, &lg);
    cr_assert_eq(lc, lg);
    const int ctx = emx_state_ctx(p.cpu);
    for (uint32_t l = 0; l < p.m.cfg.n_layers; l++) {
        const int first = emx_attention_first_key(p.cpu, (int)l, lc);  // before it: -inf on both
        const size_t at = (size_t)l * p.m.cfg.n_heads * ctx + first;
        snprintf(name, sizeof name, "%s: layer %u's score row at %d", what, l, lc);
        compare(name, sg + at, sc + at, (size_t)(lc + 1 - first), kTol);
    }
}

}  // namespace

// A prompt of 20 (16 + 4 rows), then one token at a time to the end of the context: the rings
// wrap at position 23 and hold positions 9..31 at the end (decode graph; the rollback test below
// runs direct launches). The state
// reports the rings' bytes; emx_state_kv_cache gives the held rows where the CPU has them and
// zeros for the positions the rings gave up.
Test(forward_cuda_ring, decode_past_the_ring_matches_cpu, .timeout = 600) {
    {
        Pair p = open_pair(kCtx);
        const std::vector<int> t = walk(p.m, kCtx, 5);
        step_both(p, t, 0, 20, "prompt");
        for (int pos = 20; pos < kCtx; pos++) step_both(p, t, pos, 1, "decode");

        const size_t kv_dim = (size_t)p.m.cfg.n_kv_heads * p.m.cfg.head_dim, row = kv_dim * sizeof(float);
        EmxStateInfo gi;
        emx_state_info(p.gpu, &gi);
        cr_assert_eq(gi.kv_cache_bytes, 2 * (5 * kRing + kCtx) * row, "5 rings of %d rows and 1 layer of %d", kRing, kCtx);

        float *ck, *cv, *gk, *gv;
        int dc, dg;
        emx_state_kv_cache(p.cpu, &ck, &cv, &dc);
        emx_state_kv_cache(p.gpu, &gk, &gv, &dg);
        cr_assert(gk && gv && dc == dg && (size_t)dg == kv_dim);
        for (uint32_t l = 0; l < p.m.cfg.n_layers; l++)
            for (int pos = 0; pos < kCtx; pos++) {
                const size_t at = ((size_t)l * kCtx + pos) * kv_dim;
                const bool gone = l != 5 && pos < kCtx - kRing;  // layer 5 is the global one
                char what[96];
                snprintf(what, sizeof what, "layer %u's key row %d", l, pos);
                if (!gone) {
                    compare(what, gk + at, ck + at, kv_dim, kTol);
                    compare(what, gv + at, cv + at, kv_dim, kTol);
                } else {
                    for (size_t i = 0; i < kv_dim; i++) cr_assert(gk[at + i] == 0 && gv[at + i] == 0, "%s: not zero", what);
                }
            }
        close_pair(p);
    }
}

// 300 positions: rings of 263 rows on both backends; a 280-token prompt in two GEMM chunks of 140
// rows, each written before its attention reads the window before it, then decode steps.
Test(forward_cuda_ring, gemm_prefill_past_the_ring_matches_cpu, .timeout = 900) {
    const int ctx = 300;
    Pair p = open_pair(ctx);
    const std::vector<int> t = walk(p.m, ctx, 11);
    step_both(p, t, 0, 280, "gemm prompt");
    for (int pos = 280; pos < 284; pos++) step_both(p, t, pos, 1, "after a gemm prompt");
    EmxStateInfo gi;
    emx_state_info(p.gpu, &gi);
    const size_t row = (size_t)p.m.cfg.n_kv_heads * p.m.cfg.head_dim * sizeof(float);
    cr_assert_eq(gi.kv_cache_bytes, 2 * (5 * 263 + ctx) * row, "5 rings of 263 rows and 1 layer of %d", ctx);
    close_pair(p);
}

// A rollback inside the rings runs (and equals the CPU's); one further back than the rings hold
// is refused with the position and the key named, by emx_forward and by emx_forward_multi.
// Direct launches.
Test(forward_cuda_ring, rollback_within_the_ring_runs_and_past_it_is_refused, .timeout = 600) {
    Pair p = open_pair(kCtx, 1);
    const std::vector<int> t = walk(p.m, kCtx, 3);
    step_both(p, t, 0, 16, "prompt");
    for (int pos = 16; pos < kCtx; pos++) step_both(p, t, pos, 1, "decode");
    // written up to 31: the rings hold 9..31; a query at 16 needs keys 9..16, one at 15 needs key 8
    step_both(p, t, 16, 1, "rolled back to 16");
    cr_assert_null(emx_forward(p.gpu, t.data() + 15, 1, 15), "a query at 15 needs key 8, which the rings gave up");
    const char *why = emx_state_error(p.gpu);
    cr_assert(strstr(why, "position 15") && strstr(why, "key 8"), "%s", why);
    EmxState *states[1] = {p.gpu};
    const float *lg[1];
    cr_assert_eq(emx_forward_multi(states, t.data() + 15, (const int[]){15}, 1, lg), -1);
    cr_assert(strstr(emx_state_error(p.gpu), "key 8"), "%s", emx_state_error(p.gpu));
    // from the start again: a fresh prompt at 0 needs no earlier key
    step_both(p, t, 0, 4, "a new prompt at 0");
    close_pair(p);
}

// Two sequences in one step (emx_forward_multi) past the rings' end, a lookahead branch committed
// across it (tail rows 21..23 into ring rows 21, 22, 0), then decode: every logit as the CPU's.
Test(forward_cuda_ring, multi_and_a_branch_commit_across_the_ring_match_cpu, .timeout = 900) {
    Pair p = open_pair(kCtx);
    EmxState *cpu2 = new_state(&p.m, "cpu", kCtx), *gpu2 = new_state(&p.m, "cuda:0", kCtx, 0, p.gpu);
    const int vocab = (int)p.m.cfg.vocab_size;
    const std::vector<int> a = walk(p.m, kCtx, 1), b = walk(p.m, kCtx, 2);
    step_both(p, a, 0, 16, "prompt a");
    cr_assert(emx_forward(cpu2, b.data(), 16, 0) && emx_forward(gpu2, b.data(), 16, 0));
    for (int pos = 16; pos < 21; pos++) {  // both sequences a token a step
        EmxState *gs[2] = {p.gpu, gpu2};
        const int toks[2] = {a[pos], b[pos]}, at[2] = {pos, pos};
        const float *got[2];
        cr_assert_eq(emx_forward_multi(gs, toks, at, 2, got), 0, "%s", emx_state_error(p.gpu));
        const float *w0 = emx_forward(p.cpu, &toks[0], 1, pos);
        compare("multi row 0", got[0], w0, (size_t)vocab, kTol);
        const float *w1 = emx_forward(cpu2, &toks[1], 1, pos);
        compare("multi row 1", got[1], w1, (size_t)vocab, kTol);
    }
    // two branches from prefix 21, three steps each; branch 1 committed: positions 21..23
    char err[256];
    cr_assert_eq(emx_state_branches_reserve(p.gpu, 2, 3, err, sizeof err), 0, "%s", err);
    cr_assert_eq(emx_state_branches_reserve(p.cpu, 2, 3, err, sizeof err), 0, "%s", err);
    std::vector<float> lg((size_t)2 * vocab), lc((size_t)2 * vocab);
    for (int step = 0; step < 3; step++) {
        const int toks[2] = {a[21 + step], b[21 + step]};
        cr_assert_eq(emx_forward_branches(p.gpu, toks, 2, 21, step, lg.data()), 0, "%s", emx_state_error(p.gpu));
        cr_assert_eq(emx_forward_branches(p.cpu, toks, 2, 21, step, lc.data()), 0);
        compare("branch logits", lg.data(), lc.data(), lg.size(), kTol);
    }
    cr_assert_eq(emx_branch_commit(p.gpu, 1, 3, 21), 0, "%s", emx_state_error(p.gpu));
    cr_assert_eq(emx_branch_commit(p.cpu, 1, 3, 21), 0);
    std::vector<int> after(a);
    for (int j = 0; j < 3; j++) after[21 + j] = b[21 + j];  // what the sequence now holds
    for (int pos = 24; pos < kCtx; pos++) step_both(p, after, pos, 1, "after the commit");
    emx_state_free(gpu2);
    emx_state_free(cpu2);
    close_pair(p);
}

// KV rows read back from a CUDA state: refused for positions its rings gave up; the rows it holds
// written into another state rebuild its cache: the next position's logits bitwise the same.
Test(forward_cuda_ring, kv_rows_travel_within_the_ring, .timeout = 600) {
    Pair p = open_pair(kCtx);
    EmxState *other = new_state(&p.m, "cuda:0", kCtx, 0, p.gpu);
    const int vocab = (int)p.m.cfg.vocab_size;
    const std::vector<int> t = walk(p.m, kCtx, 9);
    cr_assert(emx_forward(p.gpu, t.data(), 16, 0));
    for (int pos = 16; pos < kCtx - 1; pos++) cr_assert(emx_forward(p.gpu, t.data() + pos, 1, pos));  // written to 30
    std::vector<uint8_t> buf(emx_state_kv_rows_bytes(p.gpu, 22));
    cr_assert_eq(emx_state_kv_rows_read(p.gpu, 0, 4, buf.data()), -1, "rows 0..3 are gone from the rings (8..30 held)");
    cr_assert(strstr(emx_state_error(p.gpu), "hold positions 8..30"), "%s", emx_state_error(p.gpu));
    // the other state: the first 9 positions itself, rows 9..30 from the first (wrapping its rings)
    cr_assert(emx_forward(other, t.data(), 9, 0));
    cr_assert_eq(emx_state_kv_rows_read(p.gpu, 9, 22, buf.data()), 0, "%s", emx_state_error(p.gpu));
    cr_assert_eq(emx_state_kv_rows_write(other, 9, 22, buf.data()), 0, "%s", emx_state_error(other));
    const float *x = emx_forward(p.gpu, t.data() + 31, 1, 31);
    const std::vector<float> want(x, x + vocab);
    const float *y = emx_forward(other, t.data() + 31, 1, 31);
    cr_assert(y, "%s", emx_state_error(other));
    cr_assert(memcmp(y, want.data(), (size_t)vocab * sizeof(float)) == 0, "logits at 31 differ");
    emx_state_free(other);
    close_pair(p);
}

// The device memory a state takes, measured (cudaMemGetInfo before and after it is made; its
// weights shared with another state): from 1024 to 2048 positions it grows by less than one
// cache row per layer and position would take (only the global layer's cache grows, with the
// score rows and the attention's workspace), while the state reports its rings' bytes.
static uint64_t state_device_bytes(const EmxModel *m, int ctx, const EmxState *owner, EmxStateInfo *info) {
    size_t free0 = 0, free1 = 0, total = 0;
    cr_assert_eq(cudaMemGetInfo(&free0, &total), cudaSuccess);
    EmxState *s = new_state(m, "cuda:0", ctx, 0, owner);
    cr_assert_eq(cudaMemGetInfo(&free1, &total), cudaSuccess);
    emx_state_info(s, info);
    emx_state_free(s);
    return free0 - free1;
}

Test(forward_cuda_ring, a_state_grows_by_its_global_layers_only) {
    EmxModel m;
    if (!open_test_model(kModel, &m)) cr_skip_test("build/models/%s missing", kModel);
    EmxState *owner = new_state(&m, "cuda:0", 16);
    EmxStateInfo i1, i2;
    const uint64_t at1k = state_device_bytes(&m, 1024, owner, &i1), at2k = state_device_bytes(&m, 2048, owner, &i2);
    const uint64_t row = (uint64_t)m.cfg.n_kv_heads * m.cfg.head_dim * sizeof(float);
    cr_assert_eq(i1.kv_cache_bytes, 2 * (5 * 263 + 1024) * row);
    cr_assert_eq(i2.kv_cache_bytes, 2 * (5 * 263 + 2048) * row);
    cr_assert_eq(i1.kv_ring_rows, 263);
    const uint64_t grew = at2k - at1k, global = 2 * 1024 * row, every = 2 * (uint64_t)m.cfg.n_layers * 1024 * row;
    cr_assert(grew >= global && grew < every, "1024 more positions took %llu bytes: the global layer's rows %llu, "
              "every layer's %llu", (unsigned long long)grew, (unsigned long long)global, (unsigned long long)every);
    cr_log_info("gemma3-tiny on the device: %llu bytes at 1024 positions, %llu at 2048 (a full cache would add %llu)",
                (unsigned long long)at1k, (unsigned long long)at2k, (unsigned long long)every);
    emx_state_free(owner);
    emx_model_close(&m);
}
