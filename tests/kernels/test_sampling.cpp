// test_sampling.cpp — kernels/sampling/sampling.cu against the CPU sampler: emx_sample (sampler/sample.h)
// on many random logit vectors and parameter sets, and the entropix switch (emx_entropix_decide
// + emx_entropix_execute + emx_entropix_state_update) on random logits and metrics.
//
// Equality is exact: the same token for the same (seed, step, lane). The one allowed exception
// (sampling.h) is a draw or a nucleus boundary that a cumulative sum reaches within rounding:
// a mismatch passes only if the CPU itself gives another token when u is moved by a relative
// 1e-12 or top_p / min_p by one float ulp (then it is a straddle, and it is counted and printed);
// with the emulator's exp being the C library's, none is expected (none was seen).
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include <vector>

#include "kb_util.h"
#include "kernels/logits_metrics.h"
#include "kernels/sampling/sampling.h"

extern "C" {
#include "sampler/entropix.h"
#include "sampler/metrics.h"
#include "sampler/philox.h"
#include "sampler/profile.h"
#include "sampler/sample.h"
}

namespace {

EmxSamplerParams random_params(Rng &rng, int n) {
    const float temps[] = {0.0f, 0.3f, 0.8f, 1.0f, 1.7f};
    const int ks[] = {0, 0, 1, 5, 40, 1500, n + 5};
    const float ps[] = {1.0f, 1.0f, 0.95f, 0.6f, 0.0f};
    const float mps[] = {0.0f, 0.0f, 0.05f, 0.3f, 1.0f};
    EmxSamplerParams sp;
    sp.temperature = temps[rng.below(5)];
    sp.top_k = ks[rng.below(7)];
    sp.top_p = ps[rng.below(5)];
    sp.min_p = mps[rng.below(5)];
    sp.temperature_first = rng.below(3) == 0;
    return sp;
}

// Does the CPU's answer change when u or top_p moves by a relative 1e-12? Then a device answer
// that differs is a rounding straddle, not a bug.
bool cpu_straddles(const std::vector<float> &l, const EmxSamplerParams &sp, double u, std::vector<EmxCandidate> &work) {
    const int n = (int)l.size();
    const int lo = emx_sample(l.data(), n, &sp, u * (1 - 1e-12), work.data());
    const int hi = emx_sample(l.data(), n, &sp, fmin(u * (1 + 1e-12) + 1e-300, 0.9999999999999999), work.data());
    EmxSamplerParams a = sp, b = sp, c = sp, d = sp;
    a.top_p = nextafterf(sp.top_p, 0.0f);
    b.top_p = nextafterf(sp.top_p, 2.0f);
    c.min_p = nextafterf(sp.min_p, 0.0f);  // an exp() an ulp off moves a min-p boundary like this
    d.min_p = nextafterf(sp.min_p, 2.0f);
    const int pa = emx_sample(l.data(), n, &a, u, work.data()), pb = emx_sample(l.data(), n, &b, u, work.data());
    const int ma = emx_sample(l.data(), n, &c, u, work.data()), mb = emx_sample(l.data(), n, &d, u, work.data());
    return lo != hi || pa != pb || ma != mb;
}

struct Dev {
    DevBuf<float> logits;
    DevBuf<int> token;
    DevBuf<uint8_t> ws;
    explicit Dev(int n) : logits(n), token(1), ws(emx_cuda_sample_workspace_bytes(n)) {}
};

void run_random_cases(int n, int n_cases, uint64_t seed0) {
    Rng rng(seed0);
    Dev dev(n);
    std::vector<EmxCandidate> work(n);
    int straddles = 0;
    for (int c = 0; c < n_cases; c++) {
        const std::vector<float> l = random_logits(rng, n, c);
        const EmxSamplerParams sp = random_params(rng, n);
        const uint64_t seed = rng.next(), step = rng.below(1000);
        const uint32_t lane = (uint32_t)rng.below(4);
        const double u = emx_uniform_f64(seed, step, lane);
        const int ref = emx_sample(l.data(), n, &sp, u, work.data());
        dev.logits.upload(l);
        CUDA_OK(emx_cuda_sample(dev.logits.p, n, &sp, seed, step, nullptr, lane, dev.token.p, dev.ws.p, 0, 0));
        const int got = dev.token.get();
        if (got == ref) continue;
        const bool straddle = cpu_straddles(l, sp, u, work);
        cr_assert(straddle,
                  "n %d case %d: device token %d, cpu %d (T %g top_k %d top_p %g min_p %g temp_first %d u %.17g)",
                  n, c, got, ref, sp.temperature, sp.top_k, sp.top_p, sp.min_p, sp.temperature_first, u);
        straddles++;
    }
    if (straddles) printf("sampling n=%d: %d of %d draws differ from the CPU by a rounding straddle\n", n, straddles, n_cases);
}

}  // namespace

Test(sampling, random_small_vocab) { run_random_cases(50, 300, 1); }
Test(sampling, random_vocab_1000) { run_random_cases(1000, 150, 2); }
// 3001 tokens: top_k 1500 and flat min-p rows keep more than one batch of 1024 sorted keys
Test(sampling, random_vocab_3001_multi_batch) { run_random_cases(3001, 40, 3); }
Test(sampling, random_vocab_49157) { run_random_cases(49157, 12, 4); }  // SmolLM2's size (+5)

namespace {

// ---------------------------------------------------------------------------------------------
// Qwen3's and Llama 3's vocabularies: the passes over the logits on many blocks
// (sampling_mb.cuh). Every token must be the CPU's and the one-block twin's (the same straddle
// policy as above, for the twin too: its z is summed in another order).

// Each case's parameters from a fixed cycle, so every kind of filter meets every kind of row.
EmxSamplerParams vocab_params(int c, int n) {
    const EmxSamplerParams ps[] = {
        {0.0f, 0, 1.0f, 0.0f, 0},    // greedy
        {0.8f, 0, 1.0f, 0.0f, 0},    // temperature only: every token, in id order
        {0.8f, 40, 0.95f, 0.05f, 0}, // the usual mix
        {1.0f, 0, 0.9f, 0.0f, 0},    // top-p only (z over the whole vocabulary)
        {1.3f, 0, 0.6f, 0.0f, 1},    // top-p only, temperature first
        {1.0f, 0, 1.0f, 0.05f, 0},   // min-p only
        {0.7f, 0, 0.95f, 0.3f, 1},   // top-p and min-p
        {1.0f, 1500, 1.0f, 0.0f, 0}, // top-k beyond one batch of 1024
        {1.2f, 7, 1.0f, 0.0f, 0},    // small top-k
        {1.0f, n + 5, 0.8f, 0.02f, 0}, // top-k off by size
        {0.5f, 1, 0.9f, 0.0f, 0},    // top-k 1: greedy
    };
    return ps[c % (int)(sizeof ps / sizeof ps[0])];
}

// The device tokens (fast, one-block version) against the CPU's for one row; returns straddles.
int check_vocab_case(Dev &dev, DevBuf<int> &naive, const std::vector<float> &l, const EmxSamplerParams &sp,
                     uint64_t seed, uint64_t step, std::vector<EmxCandidate> &work, const char *what, int c) {
    const int n = (int)l.size();
    const double u = emx_uniform_f64(seed, step, 0);
    const int ref = emx_sample(l.data(), n, &sp, u, work.data());
    const unsigned long long before = emx_cuda_sample_many_block_launches(), wide0 = emx_cuda_sample_wide_draws();
    CUDA_OK(emx_cuda_sample(dev.logits.p, n, &sp, seed, step, nullptr, 0, dev.token.p, dev.ws.p, 0, 0));
    cr_assert_eq(emx_cuda_sample_many_block_launches(), before + 1, "n %d: the many-block passes did not run", n);
    const bool wide = sp.temperature > 0.0f && sp.top_k <= 0;  // top-k off: the select on mass
    cr_assert_eq(emx_cuda_sample_wide_draws(), wide0 + (wide ? 1 : 0), "n %d (top_k %d): wide draw taken %d times",
                 n, sp.top_k, (int)(emx_cuda_sample_wide_draws() - wide0));
    CUDA_OK(emx_cuda_sample_one_block(dev.logits.p, n, &sp, seed, step, nullptr, 0, naive.p, dev.ws.p, 0));
    cr_assert_eq(emx_cuda_sample_many_block_launches(), before + 1, "n %d: the one-block version ran the passes", n);
    const int got = dev.token.get(), got1 = naive.get();
    if (got == ref && got1 == ref) return 0;
    cr_assert(cpu_straddles(l, sp, u, work),
              "%s n %d case %d: many blocks %d, one block %d, cpu %d (T %g top_k %d top_p %g min_p %g tf %d u %.17g)",
              what, n, c, got, got1, ref, sp.temperature, sp.top_k, sp.top_p, sp.min_p, sp.temperature_first, u);
    return 1;
}

void run_vocab_cases(int n, int n_cases, uint64_t seed0) {
    cr_assert_eq(emx_cuda_sample_grid(n), (n + 2047) / 2048, "n %d: one block per 2048 logits", n);
    Rng rng(seed0);
    Dev dev(n);
    DevBuf<int> naive(1);
    std::vector<EmxCandidate> work(n);
    int straddles = 0;
    for (int c = 0; c < n_cases; c++) {
        const std::vector<float> l = random_logits(rng, n, c);
        dev.logits.upload(l);
        straddles += check_vocab_case(dev, naive, l, vocab_params(c, n), rng.next(), rng.below(1000), work, "random", c);
    }
    if (straddles) printf("sampling n=%d: %d of %d draws differ by a rounding straddle\n", n, straddles, n_cases);
}

// Rows that take the rare branches: nothing valid, NaN and -inf holes, +inf tokens, every logit
// tied (the three levels cannot narrow the range: the tail resumes the select on the ids), a
// one-hot row (the first level settles it), a few ties among -inf.
void run_vocab_special_rows(int n) {
    Dev dev(n);
    DevBuf<int> naive(1);
    std::vector<EmxCandidate> work(n);
    std::vector<std::vector<float>> rows;
    rows.push_back(std::vector<float>(n, -INFINITY));
    std::vector<float> nan_row(n, NAN);
    nan_row[n - 1] = -INFINITY;
    rows.push_back(nan_row);
    std::vector<float> one(n, -INFINITY);
    one[n / 3] = 3.0f;
    rows.push_back(one);
    Rng rng(55);
    std::vector<float> inf = random_logits(rng, n, 0);
    inf[n - 2] = INFINITY;
    inf[17] = INFINITY;
    rows.push_back(inf);
    rows.push_back(std::vector<float>(n, 0.125f));
    std::vector<float> four(n, -INFINITY);
    for (int i : {9, 4090, n / 2, n - 1}) four[i] = -2.0f;
    rows.push_back(four);
    std::vector<float> holes = random_logits(rng, n, 1);
    for (int i = 0; i < n; i += 2) holes[i] = i % 4 ? NAN : -INFINITY;
    rows.push_back(holes);
    int straddles = 0;
    for (size_t r = 0; r < rows.size(); r++) {
        dev.logits.upload(rows[r]);
        for (int c = 0; c < 11; c++) straddles += check_vocab_case(dev, naive, rows[r], vocab_params(c, n), 42, r * 11 + c, work, "special", (int)r);
    }
    cr_assert_eq(straddles, 0, "special rows: no cumulative sum is near u here");
}

}  // namespace

namespace {

// A (seed, step) whose u = emx_uniform_f64(seed, step, 0) lies in [lo, hi): the draws at the ends
// of the distribution (the first kept token, the last one).
void find_u(double lo, double hi, uint64_t *seed, uint64_t *step) {
    for (uint64_t st = 0;; st++)
        if (const double u = emx_uniform_f64(9, st, 0); u >= lo && u < hi) {
            *seed = 9;
            *step = st;
            return;
        }
}

// Top-k off over Qwen3's vocabulary where the kept set is most of it: a flat row, a row of heavy
// ties (thousands of tokens share each logit: the pick narrows them by id), a peaked row, each
// with u near 0, near 1 and in between; every token the CPU's (or a counted straddle).
void run_wide_rows(int n) {
    Dev dev(n);
    DevBuf<int> naive(1);
    std::vector<EmxCandidate> work(n);
    Rng rng(77);
    std::vector<std::vector<float>> rows(3, std::vector<float>(n));
    for (float &x : rows[0]) x = rng.normal() * 0.05f;                 // flat: top-p 0.99 keeps ~99%
    for (float &x : rows[1]) x = roundf(rng.normal() * 4.0f) * 0.25f;  // ties
    for (float &x : rows[2]) x = rng.normal() * 6.0f;                  // peaked
    const EmxSamplerParams ps[] = {
        {1.0f, 0, 0.99f, 0.0f, 0}, {1.5f, 0, 1.0f, 0.0f, 0}, {0.3f, 0, 0.95f, 0.0f, 1},
        {1.0f, 0, 1.0f, 0.9f, 0},  {1.0f, -1, 0.5f, 0.01f, 0},
    };
    uint64_t seeds[3], steps[3];
    find_u(0.0, 1e-5, &seeds[0], &steps[0]);
    find_u(1.0 - 1e-5, 1.0, &seeds[1], &steps[1]);
    find_u(0.4, 0.6, &seeds[2], &steps[2]);
    int straddles = 0, c = 0;
    for (const auto &l : rows) {
        dev.logits.upload(l);
        for (const EmxSamplerParams &sp : ps)
            for (int k = 0; k < 3; k++, c++) straddles += check_vocab_case(dev, naive, l, sp, seeds[k], steps[k], work, "wide", c);
    }
    // min-p 0.5 at its boundary: a third of the tokens weigh exp(l - max) = 0.5·(1 - 1e-6), inside
    // the floor's margin (sampling_device.cuh's filter_floor: 1e-6 relative), outside the exact
    // test even with min_p an ulp lower (no straddle): only the best is kept.
    std::vector<float> edge(n, -10.0f);
    const float below = (float)(log(0.5) - 1e-6);
    for (int i = 0; i < n; i += 3) edge[i] = below;
    edge[n / 2] = 0.0f;
    dev.logits.upload(edge);
    for (const EmxSamplerParams &sp : {EmxSamplerParams{1.0f, 0, 1.0f, 0.5f, 0}, EmxSamplerParams{1.0f, 0, 0.99f, 0.5f, 0}})
        for (int k = 0; k < 3; k++, c++) {
            cr_assert_eq(emx_sample(edge.data(), n, &sp, emx_uniform_f64(seeds[k], steps[k], 0), work.data()), n / 2);
            straddles += check_vocab_case(dev, naive, edge, sp, seeds[k], steps[k], work, "min-p edge", c);
        }
    if (straddles) printf("sampling wide rows n=%d: %d of %d draws differ by a rounding straddle\n", n, straddles, c);
}

}  // namespace

Test(sampling, vocab_151936_wide_rows) { run_wide_rows(151936); }

// The wide draw reads its step from device memory (as a graph replay does): the same token as by value.
Test(sampling, vocab_151936_wide_step_from_device) {
    const int n = 151936;
    Rng rng(78);
    Dev dev(n);
    dev.logits.upload(random_logits(rng, n, 0));
    DevBuf<uint64_t> step(1);
    DevBuf<int> by_value(1);
    const EmxSamplerParams sp = {1.0f, 0, 0.9f, 0.0f, 0};
    for (uint64_t st : {3ull, 41ull}) {
        step.upload(std::vector<uint64_t>{st});
        CUDA_OK(emx_cuda_sample(dev.logits.p, n, &sp, 5, 0, step.p, 0, dev.token.p, dev.ws.p, 0, 0));
        CUDA_OK(emx_cuda_sample(dev.logits.p, n, &sp, 5, st, nullptr, 0, by_value.p, dev.ws.p, 0, 0));
        cr_assert_eq(dev.token.get(), by_value.get(), "step %d: from device %d, by value %d", (int)st, dev.token.get(),
                     by_value.get());
    }
}

Test(sampling, vocab_151936_many_blocks) { run_vocab_cases(151936, 33, 61); }  // Qwen3
Test(sampling, vocab_128256_many_blocks) { run_vocab_cases(128256, 22, 62); }  // Llama 3
Test(sampling, vocab_151936_special_rows) { run_vocab_special_rows(151936); }
Test(sampling, small_vocab_one_block) {
    cr_assert_eq(emx_cuda_sample_grid(8191), 1);
    cr_assert_eq(emx_cuda_sample_grid(8192), 4);
    const int n = 3001;
    Rng rng(63);
    Dev dev(n);
    const std::vector<float> l = random_logits(rng, n, 0);
    dev.logits.upload(l);
    const EmxSamplerParams sp = vocab_params(2, n);
    const unsigned long long before = emx_cuda_sample_many_block_launches();
    CUDA_OK(emx_cuda_sample(dev.logits.p, n, &sp, 1, 2, nullptr, 0, dev.token.p, dev.ws.p, 0, 0));
    cr_assert_eq(emx_cuda_sample_many_block_launches(), before);
}

Test(sampling, special_rows) {
    const int n = 777;
    Dev dev(n);
    std::vector<EmxCandidate> work(n);
    std::vector<std::vector<float>> rows;
    rows.push_back(std::vector<float>(n, -INFINITY));  // nothing: -1
    std::vector<float> one(n, -INFINITY);
    one[500] = 3.0f;
    rows.push_back(one);  // one-hot
    std::vector<float> inf(n, 1.0f);
    inf[700] = INFINITY;
    inf[3] = INFINITY;
    inf[400] = INFINITY;
    rows.push_back(inf);  // +inf tokens share everything
    rows.push_back(std::vector<float>(n, 0.125f));  // all tied
    std::vector<float> four(n, -INFINITY);
    for (int i : {9, 90, 400, 776}) four[i] = -2.0f;
    rows.push_back(four);  // 4 tied tokens, top-p 0.5: the cumulative mass hits 0.5 exactly at 2
    std::vector<float> huge(n);
    Rng rng(5);
    for (float &x : huge) x = rng.normal() * 1e30f;
    rows.push_back(huge);
    EmxSamplerParams sps[] = {{0.8f, 40, 0.95f, 0.05f, 0}, {1.0f, 0, 1.0f, 0.0f, 0}, {1.0f, 2, 1.0f, 0.0f, 0},
                              {0.0f, 0, 1.0f, 0.0f, 0},    {1.3f, 0, 0.5f, 0.0f, 1}, {1.0f, 0, 1.0f, 0.2f, 0}};
    int r = 0;
    for (const auto &l : rows) {
        dev.logits.upload(l);
        for (const EmxSamplerParams &sp : sps)
            for (uint64_t step = 0; step < 6; step++) {
                const double u = emx_uniform_f64(42, step, 0);
                const int ref = emx_sample(l.data(), n, &sp, u, work.data());
                CUDA_OK(emx_cuda_sample(dev.logits.p, n, &sp, 42, step, nullptr, 0, dev.token.p, dev.ws.p, 0, 0));
                cr_assert_eq(dev.token.get(), ref, "row %d step %d (T %g k %d p %g minp %g): device %d, cpu %d", r,
                             (int)step, sp.temperature, sp.top_k, sp.top_p, sp.min_p, dev.token.get(), ref);
            }
        r++;
    }
}

// The step read from device memory gives the same draws as the step passed by value.
Test(sampling, step_from_device) {
    const int n = 300;
    Rng rng(6);
    Dev dev(n);
    std::vector<float> l = random_logits(rng, n, 0);
    dev.logits.upload(l);
    std::vector<EmxCandidate> work(n);
    EmxSamplerParams sp = {1.0f, 0, 0.9f, 0.0f, 0};
    DevBuf<uint64_t> d_step(1);
    for (uint64_t step = 100; step < 110; step++) {
        d_step.upload(&step, 1);
        CUDA_OK(emx_cuda_sample(dev.logits.p, n, &sp, 7, 0, d_step.p, 1, dev.token.p, dev.ws.p, 0, 0));
        cr_assert_eq(dev.token.get(), emx_sample(l.data(), n, &sp, emx_uniform_f64(7, step, 1), work.data()));
    }
}

// ---------------------------------------------------------------------------------------------
// The entropix switch on the device against decide + execute + state update on the host.

namespace {

// n_cases random metrics and logits; all_cases: every case of the switch must be reached. From
// n = 8192 on, the many-block passes must run once per step.
void entropix_cases(int n, int n_cases, uint64_t rseed, bool all_cases) {
    Rng rng(rseed);
    EmxProfile prof;
    emx_profile_classic(&prof);
    DevBuf<float> d_l(n);
    DevBuf<EmxMetrics> d_m(1);
    DevBuf<EmxEntropixState> d_st(1);
    DevBuf<int> d_tok(1);
    DevBuf<EmxDecision> d_dec(1);
    DevBuf<double> d_score(1);
    DevBuf<uint8_t> ws(emx_cuda_sample_workspace_bytes(n));
    std::vector<EmxCandidate> work(n);
    const double Hs[] = {0.05, 1.0, 4.0, 6.0, 9.0}, Vs[] = {0.05, 2.0, 6.0, 12.0};
    int seen[EMX_CASE_COUNT] = {0};
    for (int c = 0; c < n_cases; c++) {
        std::vector<float> l = random_logits(rng, n, c);
        EmxMetrics m = {};
        emx_logits_metrics(l.data(), n, &m);  // lse (and H, V) of these logits: the score needs lse
        m.logits_entropy_bits = Hs[rng.below(5)];
        m.logits_varentropy_bits2 = Vs[rng.below(4)];
        m.attn_entropy_bits = rng.uniform(0.0f, 8.0f);
        m.attn_varentropy_heads_bits2 = rng.uniform(0.0f, 3.0f);
        m.attn_varentropy_true_bits2 = rng.uniform(0.0f, 3.0f);
        m.attn_agreement = rng.uniform(0.0f, 0.5f);
        m.attn_interaction_strength = rng.uniform(0.0f, 4.0f);
        prof.attn_varentropy_def = rng.below(2);
        EmxEntropixState st = {rng.below(2)};
        const int pause = rng.below(3) == 0 ? -1 : rng.below(n);
        const uint64_t seed = rng.next(), step = rng.below(100000);

        const EmxDecision d = emx_entropix_decide(&m, &prof, &st, pause);
        double ref_score;
        const int ref = emx_entropix_execute(&d, l.data(), n, &m, &prof, seed, step, work.data(), &ref_score);
        EmxEntropixState ref_st = st;
        emx_entropix_state_update(&ref_st, &d);
        seen[d.kase]++;

        d_l.upload(l);
        d_m.upload(&m, 1);
        d_st.upload(&st, 1);
        const unsigned long long before = emx_cuda_sample_many_block_launches();
        CUDA_OK(emx_cuda_entropix_step(d_l.p, n, d_m.p, &prof, d_st.p, pause, seed, step, nullptr, d_tok.p, d_dec.p,
                                       d_score.p, ws.p, 0, 0));
        cr_assert_eq(emx_cuda_sample_many_block_launches(), before + (emx_cuda_sample_grid(n) > 1), "case %d: passes", c);
        const int got = d_tok.get();
        const EmxDecision gd = d_dec.get();
        const double gs = d_score.get();
        cr_assert_eq(gd.kase, d.kase, "case %d: kase %d, host %d", c, gd.kase, d.kase);
        cr_assert_eq(gd.action, d.action, "case %d: action", c);
        cr_assert_eq(d_st.get().pause_inserted, ref_st.pause_inserted, "case %d: state", c);
        cr_assert_eq(got, ref, "case %d (%s, action %d, T %g k %d p %g minp %g N %d): device %d, host %d", c,
                     emx_case_name(d.kase), d.action, d.params.temperature, d.params.top_k, d.params.top_p,
                     d.params.min_p, d.n_samples, got, ref);
        cr_assert((isnan(gs) && isnan(ref_score)) || gs == ref_score, "case %d: score %.17g, host %.17g", c, gs,
                  ref_score);
    }
    if (all_cases)
        for (int k = 0; k < EMX_CASE_COUNT; k++) cr_assert_gt(seen[k], 0, "case %s never exercised", emx_case_name((EmxCase)k));
}

}  // namespace

Test(sampling, entropix_switch_matches_host) { entropix_cases(1000, 120, 21, true); }
Test(sampling, entropix_switch_vocab_151936) { entropix_cases(151936, 16, 22, false); }

// The decode step's tail as a CUDA graph captured once (logits metrics -> entropix step) and
// replayed with new logits and a new step in device memory, as the runtime will run it: every
// replay must give the host's token, and the switch state must carry over between replays.
namespace {

void entropix_graph_replay(int n, int steps) {
    Rng rng(31);
    EmxProfile prof;
    emx_profile_classic(&prof);
    cudaStream_t stream;
    CUDA_OK(cudaStreamCreate(&stream));
    DevBuf<float> d_l(n);
    DevBuf<EmxMetrics> d_m(1);
    DevBuf<EmxEntropixState> d_st(1);
    DevBuf<uint64_t> d_step(1);
    DevBuf<int> d_tok(1);
    DevBuf<uint8_t> ws_lm(emx_cuda_logits_metrics_workspace_bytes(n)), ws_s(emx_cuda_sample_workspace_bytes(n));
    EmxMetrics attn = {};  // attention fields: fixed, as if the attention metrics kernel wrote them
    attn.attn_entropy_bits = 2.5;
    attn.attn_varentropy_heads_bits2 = 0.4;
    attn.attn_agreement = 0.1;
    attn.attn_interaction_strength = 1.2;
    d_m.upload(&attn, 1);
    EmxEntropixState st = {0};
    d_st.upload(&st, 1);
    const int pause = 17;
    const uint64_t seed = 0xC0FFEE;

    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    CUDA_OK(emx_cuda_logits_metrics(d_l.p, n, d_m.p, nullptr, nullptr, ws_lm.p, stream, 0));
    CUDA_OK(emx_cuda_entropix_step(d_l.p, n, d_m.p, &prof, d_st.p, pause, seed, 0, d_step.p, d_tok.p, nullptr,
                                   nullptr, ws_s.p, stream, 0));
    CUDA_OK(cudaStreamEndCapture(stream, &graph));
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));

    std::vector<EmxCandidate> work(n);
    int seen[EMX_CASE_COUNT] = {0};
    for (uint64_t step = 0; step < (uint64_t)steps; step++) {
        // logits shaped to reach every case: peaked (LELV), flat (HELV), mixtures (the others)
        std::vector<float> l(n);
        const int kind = (int)(step % 5);
        for (int i = 0; i < n; i++) l[i] = rng.normal() * (kind == 1 ? 0.05f : 2.0f);
        if (kind == 0) l[rng.below(n)] = 60.0f;
        if (kind == 2 || kind == 3) l[rng.below(n)] = kind == 2 ? 9.0f : 12.0f;
        d_l.upload(l);
        d_step.upload(&step, 1);
        CUDA_OK(cudaGraphLaunch(exec, stream));
        CUDA_OK(cudaStreamSynchronize(stream));

        EmxMetrics m = attn;
        emx_logits_metrics(l.data(), n, &m);
        const EmxDecision d = emx_entropix_decide(&m, &prof, &st, pause);
        const int ref = emx_entropix_execute(&d, l.data(), n, &m, &prof, seed, step, work.data(), nullptr);
        emx_entropix_state_update(&st, &d);
        seen[d.kase]++;
        cr_assert_eq(d_tok.get(), ref, "step %d (%s): device %d, host %d", (int)step, emx_case_name(d.kase), d_tok.get(), ref);
        cr_assert_eq(d_st.get().pause_inserted, st.pause_inserted, "step %d: state", (int)step);
    }
    CUDA_OK(cudaGraphExecDestroy(exec));
    CUDA_OK(cudaGraphDestroy(graph));
    CUDA_OK(cudaStreamDestroy(stream));
    int cases = 0;
    for (int k = 0; k < EMX_CASE_COUNT; k++) cases += seen[k] > 0;
    cr_assert_geq(cases, 3, "only %d of the switch's cases were reached", cases);
}

}  // namespace

Test(sampling, entropix_graph_replay) { entropix_graph_replay(600, 40); }
// the many-block passes captured with the tail, replayed with the step and state on the device
Test(sampling, entropix_graph_replay_vocab_128256) { entropix_graph_replay(128256, 10); }

Test(sampling, rejects_bad_arguments) {
    EmxSamplerParams sp = {1.0f, 0, 1.0f, 0.0f, 0};
    cr_assert_eq(emx_cuda_sample(nullptr, 10, &sp, 0, 0, nullptr, 0, nullptr, nullptr, 0, 0), cudaErrorInvalidValue);
}

// The wide draw's sums are exact: emx_cuda_fixed_sum against 128-bit integer sums on the host of
// values built as k·2^-s (so their fixed-point value k·2^(100-s) is known without rounding).
Test(sampling, fixed_point_sums_are_exact) {
    Rng rng(79);
    for (int kind = 0; kind < 4; kind++) {
        const int n = kind == 0 ? 100003 : 40000 + kind;
        std::vector<double> v(n);
        unsigned __int128 want = 0;
        for (int i = 0; i < n; i++) {
            if (kind == 0) {  // 1 - 2^-53: almost every addition carries into the high word
                v[i] = 1.0 - ldexp(1.0, -53);
                want += ((unsigned __int128)1 << 100) - ((unsigned __int128)1 << 47);
                continue;
            }
            const uint64_t k = rng.next() >> 11;  // 53 bits
            // kind 1: 2^-60 (random low words); 2: 2^-120 (truncated to their top bits); 3: mixed
            const int s = kind == 1 ? 60 : kind == 2 ? 120 : 30 + rng.below(90);
            if (kind == 3 && i == 7) {  // the largest weight class: the high word only
                v[i] = ldexp(1.0, 23);
                want += (unsigned __int128)1 << 123;
                continue;
            }
            v[i] = ldexp((double)k, -s);
            want += s <= 100 ? (unsigned __int128)k << (100 - s) : (unsigned __int128)(k >> (s - 100));
        }
        DevBuf<double> dv(v);
        DevBuf<uint64_t> out(2);
        CUDA_OK(emx_cuda_fixed_sum(dv.p, n, out.p, 0));
        const std::vector<uint64_t> got = out.download();
        cr_assert(got[0] == (uint64_t)want && got[1] == (uint64_t)(want >> 64),
                  "kind %d: device %016llx %016llx, host %016llx %016llx", kind, (unsigned long long)got[1],
                  (unsigned long long)got[0], (unsigned long long)(uint64_t)(want >> 64), (unsigned long long)(uint64_t)want);
    }
    cr_assert_eq(emx_cuda_fixed_sum(nullptr, 1, nullptr, 0), cudaErrorInvalidValue);
}
