// agent_pool.h — the agent pool's proposal rule on the device (launcher of agent_pool.cu): every agent
// samples its proposal and the lowest-entropy one is chosen, so the host reads one token id per
// step. Semantics: sampler/agents.h (emx_agents_choose), the same tokens and winner
// for the same (seed, step); entropies equal to rounding (on a GPU the device's exp/log2 may
// differ from the C library's by an ulp). As in sampling.h, the one place a token can differ is
// a draw whose cumulative sum lands within rounding of u (a straddle): not under emulation.
#ifndef ENTROPIX_KERNELS_AGENTS_H
#define ENTROPIX_KERNELS_AGENTS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

// sampler/agents.h (EmxAgentParams, EmxProposal), inside the C linkage block.
#include "sampler/agents.h"

// Workspace bytes for a vocabulary of n and n_agents agents (one kept list per agent, plus the
// proposals).
size_t emx_cuda_agents_workspace_bytes(int n, int n_agents);

// One step of the pool: for agent i (RNG lane first_lane + i: a worker holding agents a0.. of the
// pool passes a0, so every agent draws on its own lane whichever worker runs it), the proposal of
// emx_agent_propose; then the winner
// (lowest entropy, ties to the lower index). Device pointers: logits [n], agents [n_agents],
// token_out (the winner's token, -1 if no agent proposes), winner_out (its index or -1),
// proposals_out [n_agents] (may be NULL). step is read from step_dev when that is not NULL (CUDA
// graph replays). ws: emx_cuda_agents_workspace_bytes(n, n_agents) bytes of device memory.
// pdl: every kernel launched with programmatic dependent launch (kernels/launch.cuh: the kernel
// before them on the stream must be a kernel, not a copy or memset: a step's tail after the
// classifier or the ban); 0: plain launches. Returns cudaErrorInvalidValue on bad arguments,
// else the launch's error.
cudaError_t emx_cuda_agents_step(const float *logits, int n, const EmxAgentParams *agents,
                                 int n_agents, uint64_t seed, uint64_t step,
                                 const uint64_t *step_dev, uint32_t first_lane, int *token_out, int *winner_out,
                                 EmxProposal *proposals_out, void *ws, cudaStream_t s, int pdl);

// The agents each on a row of their own: agent i samples from logits + i * row_stride (>= n;
// the pool's lookahead branches, branch i's row), with lane first_lane + i, as
// emx_cuda_agents_step does from one shared row; no winner is picked (the rows are different
// branches). proposals_out [n_agents] is required; ws and pdl as emx_cuda_agents_step's.
cudaError_t emx_cuda_agents_rows_step(const float *logits, size_t row_stride, int n, const EmxAgentParams *agents,
                                      int n_agents, uint64_t seed, uint64_t step, const uint64_t *step_dev,
                                      uint32_t first_lane, EmxProposal *proposals_out, void *ws, cudaStream_t s,
                                      int pdl);

// The tokens of a lookahead round's next branch pass, without a trip to the host: tokens[b] =
// props[b].token when that is >= 0 (branch b's latest proposal), else prev[b] (what it was fed
// at the step before; prev NULL: 0). A branch whose proposal failed keeps being fed its last
// token, as the pool's host loop feeds it (runtime/pool/pool_generate.c). Device pointers. pdl: as
// emx_cuda_agents_step's (after the previous step's proposals; not after the inputs' copy).
cudaError_t emx_cuda_agents_feed(const EmxProposal *props, int n, const int *prev, int *tokens, cudaStream_t s,
                                 int pdl);
// logits[*ban_dev] = -inf when 0 <= *ban_dev < n, else nothing: the token a rollback excludes,
// read on the device when the kernel runs (a CUDA graph's replays each see the current ban).
// pdl: as emx_cuda_agents_step's (after the classifier).
cudaError_t emx_cuda_ban_token(float *logits, int n, const int *ban_dev, cudaStream_t s, int pdl);

#ifdef __cplusplus
}
#endif

#endif
