// agent_pool.cu — the agent pool's step on the device (API in agent_pool.h, semantics in
// sampler/agents.h): every agent samples from its own (temperature, top_k) distribution of the
// shared logits row, and the proposal of lowest entropy wins. The lookahead branches' variant
// (emx_cuda_agents_rows_step) gives each agent a row of its own, its branch's, and no winner.
//
// Mapping: one block of SB = 1024 threads per agent (grid = n_agents), each doing exactly what
// the single sampler of sampling.cu does (sampling_device.cuh: one scan for max/argmax, a radix
// select of the best top_k rank keys without sorting the vocabulary, a bitonic sort of that
// batch, softmax(l/T) over the kept tokens in double), then its thread 0 sums the entropy
// -Σ q log2 q over the kept list in rank order (sampler/agents.c's order) and draws with lane =
// first_lane + agent index. A second launch of one thread picks the winner (lowest entropy, strict <, so ties
// go to the lower index): blocks cannot wait on each other within a launch, and the pick is 8
// comparisons. The agents' blocks run concurrently on different SMs, so a pool of 8 costs about
// one sampler's time, not 8. From n = 8192 on, the passes over the vocabulary run first on many
// blocks (sampling_mb.cuh, grid (n / 2048, n_agents): one scan shared by all agents, or one per
// agent on rows of their own, then each agent's radix levels and gather), and each agent's
// block reads only their results and its batch.
// Bytes per step (one-block path): each agent block reads the logits 3-5 times (4n bytes each: scan, 2-4 radix
// passes, gather) — the 8 blocks read the same row, which mostly hits L2 — and writes/reads 16
// bytes per kept token (top_k of them; the whole vocabulary when top_k is off, then a serial
// walk of thread 0, ~1 ms at 152k tokens: the slow path of sampling.cu). Out: 16 bytes per
// proposal, 8 bytes for token and winner.
// With the launchers' pdl every kernel here (and the many-block passes) is a programmatic launch
// (a step's tail after the classifier, kernels/launch.cuh): each triggers its successor on entry
// and waits for its predecessor before it reads anything (the logits, the passes' partials, the
// proposals, the ban and the agents' parameters, which copies before the step wrote).
#include <math.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "kernels/sampling/agent_pool.h"
#include "kernels/sampling/sampling_mb.cuh"

extern "C" {
#include "sampler/philox.h"
}

namespace {

// One kept list per agent (sampling_mb.cuh's layout, kept_bytes each), one after the other in the
// workspace.
__device__ KeptList agent_kept_list(void *ws, int n, int agent) {
    return kept_list((char *)ws + (size_t)agent * kept_bytes(n), n);
}

// Block b = agent b: its proposal into props[b] (workspace) and, when given, proposals_out[b].
__global__ void __launch_bounds__(SB, 1)
agents_propose_kernel(const float *__restrict__ logits, size_t stride, int n, const EmxAgentParams *agents, u64 seed,
                      u64 step, const u64 *step_dev, uint32_t first_lane, char *kept_ws, EmxProposal *props,
                      EmxProposal *proposals_out, MbWs mw) {
    emx_pdl_trigger();
    emx_pdl_wait();  // the logits (the classifier's, the ban's) and the passes' partials
    const Smem sm = block_smem();
    const int b = blockIdx.x;
    logits += b * stride;  // its own row, or (stride 0) the shared one
    const EmxAgentParams a = agents[b];
    EmxSamplerParams sp;  // sampler/agents.c: the agent's filters only (top-p and min-p off)
    sp.temperature = a.temperature;
    sp.top_k = a.top_k;
    sp.top_p = 1.0f;
    sp.min_p = 0.0f;
    sp.temperature_first = 0;
    const KeptList kl = agent_kept_list(kept_ws, n, b);
    const int m = distribution_block(logits, n, sp, sm, kl, mb_row(mw, b));
    if (threadIdx.x == 0) {
        EmxProposal pr;
        if (m <= 0) {
            pr.token = -1;
            pr.entropy_bits = NAN;
        } else {
            double h = 0.0;  // emx_agent_entropy_bits: the same terms in the same order
            for (int i = 0; i < m; i++)
                if (kl.p[i] > 0.0) h -= kl.p[i] * log2(kl.p[i]);
            const u64 st = step_dev ? *step_dev : step;
            pr.entropy_bits = h;
            pr.token = draw(kl, m, emx_uniform_f64(seed, st, first_lane + (uint32_t)b));
        }
        props[b] = pr;
        if (proposals_out) proposals_out[b] = pr;
    }
}

// One thread: the lowest entropy among the agents that propose, ties to the lower index.
__global__ void agents_pick_kernel(const EmxProposal *props, int n_agents, int *token_out, int *winner_out) {
    emx_pdl_trigger();
    emx_pdl_wait();  // the proposals
    int w = -1;
    for (int i = 0; i < n_agents; i++) {
        if (props[i].token < 0) continue;
        if (w < 0 || props[i].entropy_bits < props[w].entropy_bits) w = i;
    }
    *winner_out = w;
    *token_out = w >= 0 ? props[w].token : -1;
}

// One thread: the banned token's logit to -inf (a rollback's ban, read on the device so that a
// captured round serves every ban, none included).
__global__ void ban_token_kernel(float *logits, int n, const int *ban) {
    emx_pdl_trigger();
    emx_pdl_wait();  // the classifier writes the row this kernel writes into
    const int b = *ban;
    if (b >= 0 && b < n) logits[b] = -INFINITY;
}

// A thread per branch: its next token, the latest proposal's when there is one (token >= 0), else
// the one it was fed before (prev: NULL before the first branch pass, then 0).
__global__ void agents_feed_kernel(const EmxProposal *props, int n, const int *prev, int *tokens) {
    emx_pdl_trigger();
    emx_pdl_wait();  // the previous step's proposals
    const int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b < n) tokens[b] = props[b].token >= 0 ? props[b].token : prev ? prev[b] : 0;
}

// The proposals of n_agents agents, agent b on logits + b * stride (0: all on the same row),
// into the workspace's records (props) and proposals_out when given.
cudaError_t agents_propose(const float *logits, size_t stride, int n, const EmxAgentParams *agents, int n_agents,
                           uint64_t seed, uint64_t step, const uint64_t *step_dev, uint32_t first_lane,
                           EmxProposal *proposals_out, void *ws, cudaStream_t s, int pdl, EmxProposal **props) {
    if (!logits || n < 1 || !agents || n_agents < 1 || n_agents > 65535 || !ws) return cudaErrorInvalidValue;
    char *kept_ws = (char *)ws;
    *props = (EmxProposal *)(kept_ws + (size_t)n_agents * kept_bytes(n));
    // the passes over the vocabulary on many blocks, one row of them per agent (sampling_mb.cuh)
    const MbWs mw =
        mb_ws_at((char *)*props + mb_align((size_t)n_agents * sizeof(EmxProposal)), n, n_agents, stride);
    if (mw.G > 0) {
        ParamSrc ps = {};
        ps.kind = PS_AGENTS;
        ps.agents = agents;
        const cudaError_t e = mb_launch(logits, n, ps, true, false, mw, s, pdl != 0);
        if (e != cudaSuccess) return e;
    }
    return EMX_LAUNCH(pdl, n_agents, SB, 0, s, agents_propose_kernel, logits, stride, n, agents, (u64)seed, (u64)step,
                      (const u64 *)step_dev, first_lane, kept_ws, *props, proposals_out, mw);
}

}  // namespace

extern "C" cudaError_t emx_cuda_ban_token(float *logits, int n, const int *ban_dev, cudaStream_t s, int pdl) {
    if (!logits || n < 1 || !ban_dev) return cudaErrorInvalidValue;
    return EMX_LAUNCH(pdl, 1, 1, 0, s, ban_token_kernel, logits, n, ban_dev);
}

extern "C" cudaError_t emx_cuda_agents_feed(const EmxProposal *props, int n, const int *prev, int *tokens,
                                            cudaStream_t s, int pdl) {
    if (!props || !tokens || n < 1) return cudaErrorInvalidValue;
    return EMX_LAUNCH(pdl, (n + 127) / 128, 128, 0, s, agents_feed_kernel, props, n, prev, tokens);
}

extern "C" size_t emx_cuda_agents_workspace_bytes(int n, int n_agents) {
    if (n < 1 || n_agents < 1) return 0;
    return (size_t)n_agents * kept_bytes(n) + mb_align((size_t)n_agents * sizeof(EmxProposal)) +
           mb_ws_bytes(n, n_agents);
}

extern "C" cudaError_t emx_cuda_agents_step(const float *logits, int n, const EmxAgentParams *agents,
                                            int n_agents, uint64_t seed, uint64_t step,
                                            const uint64_t *step_dev, uint32_t first_lane, int *token_out,
                                            int *winner_out, EmxProposal *proposals_out, void *ws, cudaStream_t s,
                                            int pdl) {
    if (!token_out || !winner_out) return cudaErrorInvalidValue;
    EmxProposal *props = NULL;
    const cudaError_t e = agents_propose(logits, 0, n, agents, n_agents, seed, step, step_dev, first_lane,
                                         proposals_out, ws, s, pdl, &props);
    if (e != cudaSuccess) return e;
    return EMX_LAUNCH(pdl, 1, 1, 0, s, agents_pick_kernel, props, n_agents, token_out, winner_out);
}

extern "C" cudaError_t emx_cuda_agents_rows_step(const float *logits, size_t row_stride, int n,
                                                 const EmxAgentParams *agents, int n_agents, uint64_t seed,
                                                 uint64_t step, const uint64_t *step_dev, uint32_t first_lane,
                                                 EmxProposal *proposals_out, void *ws, cudaStream_t s, int pdl) {
    if (row_stride < (size_t)n || !proposals_out) return cudaErrorInvalidValue;
    EmxProposal *props = NULL;
    return agents_propose(logits, row_stride, n, agents, n_agents, seed, step, step_dev, first_lane, proposals_out, ws,
                          s, pdl, &props);
}
