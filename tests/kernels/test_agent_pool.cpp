// test_agents.cpp — kernels/agents.cu against the host rule emx_agents_choose (sampler/agents.h):
// random logits and agent pools (1..8 agents, temperature 0..2, top_k 0..100) at vocabularies of
// 1000, 3001 and 49157, the step read from device memory, and one CUDA graph replayed with the
// step changing in device memory.
//
// Equality is exact for every proposal's token, the winner and the chosen token, with the
// policy of test_sampling.cpp for the one allowed exception: a token that differs passes only if
// the CPU itself gives another token when u moves by a relative 1e-12 (a draw straddling a
// cumulative sum: possible on a GPU whose exp differs by an ulp; not expected under emulation,
// where exp and log2 are the C library's), and a winner that differs passes only if the two
// agents' entropies differ from the host's (not bit for bit) and are within 1e-9 relative of each
// other (a rounding tie); an exact tie must go to the lower index. Straddles are counted and printed.
// Entropies: within 1e-9 relative (on a GPU, exp/log2 may be an ulp off the C library's; the
// sum has at most top_k or n terms in the same order, so the error stays near 1e-14).
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include <vector>

#include "kernels/sampling/agent_pool.h"
#include "kernels/sampling/sampling.h"
#include "kb_util.h"

extern "C" {
#include "sampler/philox.h"
#include "sampler/sample.h"
}

namespace {

std::vector<EmxAgentParams> make_agents(Rng &rng) {
    std::vector<EmxAgentParams> a(1 + rng.below(8));
    for (EmxAgentParams &x : a) {
        x.temperature = rng.below(8) == 0 ? 0.0f : rng.uniform(0.0f, 2.0f);
        x.top_k = rng.below(101);
    }
    if (a.size() > 2 && rng.below(4) == 0) a.back() = a[1];  // an exact entropy tie
    return a;
}

bool close_rel(double a, double b, double rel) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    return fabs(a - b) <= rel * fmax(fabs(a), fabs(b));
}

// Does the CPU's token for agent i change when u moves by a relative 1e-12?
bool token_straddles(const std::vector<float> &l, const EmxAgentParams &a, double u, std::vector<EmxCandidate> &work) {
    EmxSamplerParams sp = {a.temperature, a.top_k, 1.0f, 0.0f, 0};
    const int n = (int)l.size();
    const int lo = emx_sample(l.data(), n, &sp, u * (1 - 1e-12), work.data());
    const int hi = emx_sample(l.data(), n, &sp, fmin(u * (1 + 1e-12) + 1e-300, 0.9999999999999999), work.data());
    return lo != hi;
}

struct Dev {
    DevBuf<float> logits;
    DevBuf<EmxAgentParams> agents;
    DevBuf<EmxProposal> props;
    DevBuf<int> token, winner;
    DevBuf<uint8_t> ws;
    explicit Dev(int n) : logits(n), agents(8), props(8), token(1), winner(1), ws(emx_cuda_agents_workspace_bytes(n, 8)) {}
};

// Device result vs host for one (logits, pool, seed, step); returns the number of straddles.
int check_case(Dev &dev, const std::vector<float> &l, const std::vector<EmxAgentParams> &ag, uint64_t seed,
               uint64_t step, bool device_step, std::vector<EmxCandidate> &work, const char *what, int c) {
    const int n = (int)l.size(), na = (int)ag.size();
    std::vector<EmxProposal> want(na);
    const int want_w = emx_agents_choose(l.data(), n, ag.data(), na, seed, step, work.data(), want.data());
    dev.logits.upload(l);
    dev.agents.upload(ag);
    DevBuf<uint64_t> d_step(1);
    d_step.upload(&step, 1);
    CUDA_OK(emx_cuda_agents_step(dev.logits.p, n, dev.agents.p, na, seed, device_step ? 0 : step,
                                 device_step ? d_step.p : nullptr, 0, dev.token.p, dev.winner.p, dev.props.p, dev.ws.p, 0, 0));
    const std::vector<EmxProposal> got = dev.props.download(na);
    int straddles = 0;
    for (int i = 0; i < na; i++) {
        cr_assert(close_rel(got[i].entropy_bits, want[i].entropy_bits, 1e-9),
                  "%s case %d agent %d (T %g k %d): entropy %.17g, host %.17g", what, c, i, ag[i].temperature,
                  ag[i].top_k, got[i].entropy_bits, want[i].entropy_bits);
        if (got[i].token == want[i].token) continue;
        cr_assert(token_straddles(l, ag[i], emx_uniform_f64(seed, step, (uint32_t)i), work),
                  "%s case %d agent %d (T %g k %d): device token %d, host %d", what, c, i, ag[i].temperature,
                  ag[i].top_k, got[i].token, want[i].token);
        straddles++;
    }
    const int got_w = dev.winner.get(), got_t = dev.token.get();
    bool same_entropies = true;  // bit for bit (always, under emulation): then no straddle excuses the winner
    for (int i = 0; i < na; i++)
        same_entropies &= (isnan(got[i].entropy_bits) && isnan(want[i].entropy_bits)) ||
                          got[i].entropy_bits == want[i].entropy_bits;
    if (got_w != want_w) {
        cr_assert(!same_entropies && got_w >= 0 && want_w >= 0 &&
                      close_rel(want[got_w].entropy_bits, want[want_w].entropy_bits, 1e-9),
                  "%s case %d: device winner %d, host %d", what, c, got_w, want_w);
        straddles++;
    }
    cr_assert_eq(got_t, got_w >= 0 ? got[got_w].token : -1, "%s case %d: token is not the winner's", what, c);
    if (got_w == want_w && got_w >= 0 && got[got_w].token == want[want_w].token)
        cr_assert_eq(got_t, want[want_w].token);
    return straddles;
}

void run_random_cases(int n, int n_cases, uint64_t seed0) {
    Rng rng(seed0);
    Dev dev(n);
    std::vector<EmxCandidate> work(n);
    int straddles = 0;
    for (int c = 0; c < n_cases; c++) {
        const std::vector<float> l = random_logits(rng, n, c);
        const std::vector<EmxAgentParams> ag = make_agents(rng);
        const uint64_t seed = rng.next(), step = rng.below(100000);
        straddles += check_case(dev, l, ag, seed, step, c % 2 == 1, work, "random", c);
    }
    if (straddles)
        printf("agents n=%d: %d of %d cases differ from the host by a rounding straddle\n", n, straddles, n_cases);
}

}  // namespace

Test(agents_cuda, random_vocab_1000) { run_random_cases(1000, 200, 1); }
// 3001: not a multiple of the block; several radix levels before the top_k fit
Test(agents_cuda, random_vocab_3001) { run_random_cases(3001, 80, 2); }
Test(agents_cuda, random_vocab_49157) { run_random_cases(49157, 12, 3); }  // SmolLM2's size (+5)
// Qwen3's and Llama 3's: the passes over the vocabulary on many blocks, one row per agent
Test(agents_cuda, random_vocab_151936) {
    cr_assert_gt(emx_cuda_sample_grid(151936), 1);
    run_random_cases(151936, 6, 8);
}
Test(agents_cuda, random_vocab_128256) { run_random_cases(128256, 4, 9); }

// A greedy agent (entropy 0) wins whatever the others; two of them: the lower index. A row with
// nothing to choose: every proposal -1 / NaN, winner and token -1.
Test(agents_cuda, special_pools_and_rows) {
    const int n = 777;
    Rng rng(5);
    Dev dev(n);
    std::vector<EmxCandidate> work(n);
    std::vector<float> l = random_logits(rng, n, 0);
    std::vector<EmxAgentParams> g = {{1.5f, 50}, {0.0f, 0}, {0.7f, 1}, {1.0f, 0}};
    check_case(dev, l, g, 9, 1, false, work, "greedy", 0);
    cr_assert_eq(dev.winner.get(), 1);
    cr_assert_eq(dev.token.get(), emx_sample_argmax(l.data(), n));
    std::vector<EmxAgentParams> same = {{0.9f, 30}, {0.9f, 30}, {0.9f, 30}};
    check_case(dev, l, same, 9, 2, false, work, "identical", 0);
    cr_assert_eq(dev.winner.get(), 0);
    std::vector<float> none(n, -INFINITY);
    none[4] = NAN;
    check_case(dev, none, g, 9, 3, false, work, "empty", 0);
    cr_assert_eq(dev.winner.get(), -1);
    cr_assert_eq(dev.token.get(), -1);
    const std::vector<EmxProposal> p = dev.props.download(4);
    for (const EmxProposal &x : p) cr_assert(x.token == -1 && isnan(x.entropy_bits));
    // proposals_out may be NULL
    dev.logits.upload(l);
    dev.agents.upload(same);
    CUDA_OK(emx_cuda_agents_step(dev.logits.p, n, dev.agents.p, 3, 9, 2, nullptr, 0, dev.token.p, dev.winner.p, nullptr,
                                 dev.ws.p, 0, 0));
    cr_assert_eq(dev.winner.get(), 0);
}

// The step read from device memory gives the same proposals as the step passed by value.
Test(agents_cuda, step_from_device) {
    const int n = 300;
    Rng rng(6);
    Dev dev(n);
    std::vector<EmxCandidate> work(n);
    const std::vector<float> l = random_logits(rng, n, 0);
    const std::vector<EmxAgentParams> ag = {{1.0f, 0}, {1.7f, 90}, {0.4f, 10}, {2.0f, 3}};
    for (uint64_t step = 100; step < 110; step++) check_case(dev, l, ag, 7, step, true, work, "step_dev", (int)step);
}

// The pool step captured once in a CUDA graph and replayed with new logits and a new step in
// device memory, as the runtime will run it.
namespace {

void graph_replay(int n, int steps) {
    Rng rng(31);
    cudaStream_t stream;
    CUDA_OK(cudaStreamCreate(&stream));
    Dev dev(n);
    DevBuf<uint64_t> d_step(1);
    const std::vector<EmxAgentParams> ag = {{1.2f, 40}, {0.8f, 0}, {2.0f, 7}, {0.5f, 100}, {1.0f, 2}};
    const int na = (int)ag.size();
    dev.agents.upload(ag);
    const uint64_t seed = 0xA6E57;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    CUDA_OK(emx_cuda_agents_step(dev.logits.p, n, dev.agents.p, na, seed, 0, d_step.p, 0, dev.token.p, dev.winner.p,
                                 dev.props.p, dev.ws.p, stream, 0));
    CUDA_OK(cudaStreamEndCapture(stream, &graph));
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    std::vector<EmxCandidate> work(n);
    std::vector<EmxProposal> want(na);
    int winners[8] = {0}, distinct_tokens = 0, last = -2;
    for (uint64_t step = 0; step < (uint64_t)steps; step++) {
        const std::vector<float> l = random_logits(rng, n, (int)step);
        dev.logits.upload(l);
        d_step.upload(&step, 1);
        CUDA_OK(cudaGraphLaunch(exec, stream));
        CUDA_OK(cudaStreamSynchronize(stream));
        const int w = emx_agents_choose(l.data(), n, ag.data(), na, seed, step, work.data(), want.data());
        const std::vector<EmxProposal> got = dev.props.download(na);
        for (int i = 0; i < na; i++) {
            cr_assert_eq(got[i].token, want[i].token, "step %d agent %d", (int)step, i);
            cr_assert(close_rel(got[i].entropy_bits, want[i].entropy_bits, 1e-9), "step %d agent %d entropy", (int)step, i);
        }
        cr_assert_eq(dev.winner.get(), w, "step %d", (int)step);
        cr_assert_eq(dev.token.get(), want[w].token, "step %d", (int)step);
        winners[w]++;
        distinct_tokens += dev.token.get() != last;
        last = dev.token.get();
    }
    CUDA_OK(cudaGraphExecDestroy(exec));
    CUDA_OK(cudaGraphDestroy(graph));
    CUDA_OK(cudaStreamDestroy(stream));
    cr_assert_gt(distinct_tokens, steps / 2, "the replays did not see the new logits/step");
}

}  // namespace

Test(agents_cuda, graph_replay) { graph_replay(600, 24); }
Test(agents_cuda, graph_replay_vocab_128256) { graph_replay(128256, 6); }

Test(agents_cuda, rejects_bad_arguments) {
    cr_assert_eq(emx_cuda_agents_step(nullptr, 10, nullptr, 1, 0, 0, nullptr, 0, nullptr, nullptr, nullptr, nullptr, 0, 0),
                 cudaErrorInvalidValue);
    cr_assert_eq(emx_cuda_agents_workspace_bytes(0, 3), (size_t)0);
}

// The next branch pass's tokens from a step's proposals (the host loop's rule, written out here):
// a proposal's token when >= 0, else the branch's previous token, 0 before any. 300 branches:
// three blocks, the last partial.
Test(agents_cuda, feed_takes_each_branchs_latest_token) {
    const int n = 300;
    std::vector<EmxProposal> props(n);
    std::vector<int> prev(n);
    for (int b = 0; b < n; b++) {
        props[b].token = b % 7 == 3 ? -1 : 1000 + b;  // every 7th proposal failed
        prev[b] = 50000 + b;
    }
    DevBuf<EmxProposal> d_props(props);
    DevBuf<int> d_prev(prev), d_tok(n);
    for (int first = 0; first <= 1; first++) {
        cr_assert_eq(emx_cuda_agents_feed(d_props.p, n, first ? nullptr : d_prev.p, d_tok.p, 0, 0), cudaSuccess);
        CUDA_OK(cudaDeviceSynchronize());
        const std::vector<int> got = d_tok.download();
        for (int b = 0; b < n; b++) {
            const int want = props[b].token >= 0 ? props[b].token : first ? 0 : prev[b];
            cr_assert_eq(got[b], want, "branch %d (first pass %d): fed %d, want %d", b, first, got[b], want);
        }
    }
    cr_assert_eq(emx_cuda_agents_feed(nullptr, n, nullptr, d_tok.p, 0, 0), cudaErrorInvalidValue);
    cr_assert_eq(emx_cuda_agents_feed(d_props.p, 0, nullptr, d_tok.p, 0, 0), cudaErrorInvalidValue);
}

// A worker holding agents a0.. of the pool passes first_lane = a0: agent i draws on lane a0 + i,
// as emx_agent_propose with that lane does on the host.
Test(agents_cuda, first_lane_offsets_the_draws) {
    const int n = 500, na = 3, a0 = 5;
    Rng rng(12);
    std::vector<float> l = random_logits(rng, n, 0);
    std::vector<EmxAgentParams> ag = {{1.3f, 0}, {0.9f, 50}, {1.5f, 200}};
    std::vector<EmxCandidate> work(n);
    Dev dev(n);
    dev.logits.upload(l);
    dev.agents.upload(ag);
    int moved = 0;
    for (uint64_t step = 0; step < 20; step++) {
        CUDA_OK(emx_cuda_agents_step(dev.logits.p, n, dev.agents.p, na, 77, step, nullptr, a0, dev.token.p, dev.winner.p,
                                     dev.props.p, dev.ws.p, 0, 0));
        const std::vector<EmxProposal> got = dev.props.download(na);
        for (int i = 0; i < na; i++) {
            EmxProposal want, lane_i;
            emx_agent_propose(l.data(), n, &ag[i], 77, step, (uint32_t)(a0 + i), work.data(), &want);
            emx_agent_propose(l.data(), n, &ag[i], 77, step, (uint32_t)i, work.data(), &lane_i);
            cr_assert_eq(got[i].token, want.token, "step %llu agent %d", (unsigned long long)step, i);
            moved += lane_i.token != want.token;
        }
    }
    cr_assert_gt(moved, 10, "the lanes must matter for this check to mean anything");
}

// The lookahead branches' variant: agent i samples from row i of its own (rows row_stride floats
// apart, padding between them), with lane first_lane + i, as emx_agent_propose on that row does
// on the host: the one-block path (n = 1000) and the many-block passes, which then scan every
// row (Qwen3's n = 151936). Row i is shifted by +15 i and has a clear winner of its own, so a
// pass that reads another row gives other tokens: the greedy agent's argmax (row 1) comes from
// the scan, and a top-k agent (rows 0, 2, 4) gathering its row's keys above a lower row's
// threshold gets the whole row, more than a batch holds.
static void rows_case(int n, int na, uint64_t seed) {
    const size_t stride = (size_t)n + 37;
    Rng rng(seed);
    std::vector<float> all(stride * (size_t)na, NAN);
    std::vector<EmxAgentParams> ag;
    for (int i = 0; i < na; i++) {
        std::vector<float> l = random_logits(rng, n, 0);
        for (float &x : l) x += 15.0f * (float)i;
        l[rng.below((uint32_t)n)] = 40.0f + 15.0f * (float)i;
        std::copy(l.begin(), l.end(), all.begin() + (ptrdiff_t)(stride * (size_t)i));
        ag.push_back(EmxAgentParams{i == 1 ? 0.0f : 0.5f + 0.3f * (float)i, i % 2 ? 0 : 30});
    }
    DevBuf<float> d_logits(all.size());
    DevBuf<EmxAgentParams> d_agents(na);
    DevBuf<EmxProposal> d_props(na);
    DevBuf<uint8_t> ws(emx_cuda_agents_workspace_bytes(n, na));
    d_logits.upload(all);
    d_agents.upload(ag);
    std::vector<EmxCandidate> work(n);
    for (uint64_t step = 0; step < 4; step++) {
        CUDA_OK(emx_cuda_agents_rows_step(d_logits.p, stride, n, d_agents.p, na, seed, step, nullptr, 2, d_props.p, ws.p,
                                          0, 0));
        const std::vector<EmxProposal> got = d_props.download(na);
        for (int i = 0; i < na; i++) {
            EmxProposal want;
            emx_agent_propose(all.data() + stride * (size_t)i, n, &ag[i], seed, step, (uint32_t)(2 + i), work.data(),
                              &want);
            cr_assert_eq(got[i].token, want.token, "n %d step %d agent %d", n, (int)step, i);
            cr_assert(close_rel(got[i].entropy_bits, want.entropy_bits, 1e-9), "n %d step %d agent %d: %.17g vs %.17g",
                      n, (int)step, i, got[i].entropy_bits, want.entropy_bits);
        }
    }
    cr_assert_eq(emx_cuda_agents_rows_step(d_logits.p, (size_t)n - 1, n, d_agents.p, na, seed, 0, nullptr, 0,
                                           d_props.p, ws.p, 0, 0),
                 cudaErrorInvalidValue, "rows closer than n floats overlap");
}

Test(agents_cuda, own_rows_one_block) { rows_case(1000, 5, 31); }
Test(agents_cuda, own_rows_many_blocks) { rows_case(151936, 3, 32); }
