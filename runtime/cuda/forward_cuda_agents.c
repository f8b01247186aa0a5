// forward_cuda_agents.c — the agent pool's side of the CUDA backend: the agents' proposals
// made where the logits are (emx_state_propose), a round — the decode step of the last
// committed token, the ban and the proposals — as one captured graph (emx_forward_propose), and
// the lookahead branches' proposals beside their logits (emx_forward_branches_propose).
// The kernels are kernels/agent_pool.cu's; the round's tail is forward_cuda_step.c's
// propose_kernels.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "runtime/cuda/forward_cuda_state.h"

// The agents' buffers for n agents (grown on demand; growing moves them, so the round's graph,
// which holds their addresses, goes with them).
static int agents_reserve(CudaState *s, int n) {
    if (n <= s->agents_cap) return 0;
    cudaFree(s->agents_d);
    cudaFree(s->props_d);
    cudaFree(s->pick_d);
    cudaFree(s->agents_ws);
    cudaFreeHost(s->props_h);
    s->agents_d = NULL, s->props_d = NULL, s->props_h = NULL, s->pick_d = NULL, s->agents_ws = NULL;
    s->agents_cap = 0;
    if (s->step_graph[TAIL_PROPOSE]) cudaGraphExecDestroy(s->step_graph[TAIL_PROPOSE]);
    s->step_graph[TAIL_PROPOSE] = NULL;
    if (dev_alloc(s, (void **)&s->agents_d, (size_t)n * sizeof(EmxAgentParams), "agents") ||
        dev_alloc(s, (void **)&s->props_d, (size_t)n * sizeof(EmxProposal), "proposals") ||
        dev_alloc(s, (void **)&s->pick_d, 2 * sizeof(int), "proposals") ||
        dev_alloc(s, &s->agents_ws, emx_cuda_agents_workspace_bytes(s->vocab, n), "the agents' workspace"))
        return -1;
    CU(cudaMallocHost((void **)&s->props_h, (size_t)n * sizeof(EmxProposal)));
    s->agents_cap = n;
    return 0;
}

// The agents' parameters to agents_d (buffers grown first), queued on the stream.
static int agents_upload(CudaState *s, const EmxAgentParams *agents, int n) {
    if (agents_reserve(s, n)) return -1;
    CU(cudaMemcpyAsync(s->agents_d, agents, (size_t)n * sizeof(EmxAgentParams), cudaMemcpyHostToDevice, s->stream));
    return 0;
}

static int agents_refused(CudaState *s, const char *call, int n_agents, int ban) {
    if (n_agents >= 1 && n_agents <= 65535 && ban < s->vocab) return 0;
    snprintf(s->err, sizeof s->err, "%s: %s: %d agents, ban %d", s->device_name, call, n_agents, ban);
    return -1;
}

int emx_cuda_state_propose(EmxState *st, const EmxAgentParams *agents, int n_agents, uint64_t seed, uint64_t step,
                           uint32_t first_lane, int ban, EmxProposal *proposals) {
    CudaState *s = (CudaState *)st;
    if (agents_refused(s, "propose", n_agents, ban)) return -1;
    if (!s->logits_fresh) {
        snprintf(s->err, sizeof s->err, "%s: propose: no logits of an emx_forward to propose from (a branch pass, "
                 "all-logits pass, proposal round or banned token came after it)", s->device_name);
        return -1;
    }
    CU(cudaSetDevice(s->device));
    if (agents_upload(s, agents, n_agents)) return -1;
    // logits row 0 is the latest emx_forward's; the banned token is removed there (the row is
    // rewritten by the next pass anyway)
    static const float minus_inf = -INFINITY;
    if (ban >= 0) {
        CU(cudaMemcpyAsync(s->logits + ban, &minus_inf, sizeof(float), cudaMemcpyHostToDevice, s->stream));
        s->logits_fresh = 0;
    }
    CU(emx_cuda_agents_step(s->logits, s->vocab, s->agents_d, n_agents, seed, step, NULL, first_lane, s->pick_d,
                            s->pick_d + 1, s->props_d, s->agents_ws, s->stream));
    CU(cudaMemcpyAsync(proposals, s->props_d, (size_t)n_agents * sizeof(EmxProposal), cudaMemcpyDeviceToHost,
                       s->stream));
    CU(cudaStreamSynchronize(s->stream));
    return 1;
}

// A round: the decode step of token at pos and the proposals from its logits, one graph
// (step_graph[TAIL_PROPOSE]) for every round of the same agents, seed and lanes. The agents'
// parameters go to agents_d before the launch (the graph reads them there); token, position,
// step and ban travel in the step's input, which is the graph's first node.
int emx_cuda_state_forward_propose(EmxState *st, int token, int pos, const EmxAgentParams *agents, int n_agents,
                                   uint64_t seed, uint64_t step, uint32_t first_lane, int ban, EmxProposal *proposals) {
    CudaState *s = (CudaState *)st;
    if (agents_refused(s, "forward_propose", n_agents, ban) || cuda_step_check(s, &token, 1, pos)) return -1;
    CU(cudaSetDevice(s->device));
    if (agents_upload(s, agents, n_agents)) return -1;  // the graph reads them there
    if (s->step_graph[TAIL_PROPOSE] &&
        (s->round_agents != n_agents || s->round_seed != seed || s->round_lane != first_lane)) {
        cudaGraphExecDestroy(s->step_graph[TAIL_PROPOSE]);
        s->step_graph[TAIL_PROPOSE] = NULL;
    }
    s->round_agents = n_agents, s->round_seed = seed, s->round_lane = first_lane;
    s->in_h->rng_step = step;
    s->in_h->ban = ban;
    if (cuda_step_run(s, &token, 1, pos, TAIL_PROPOSE)) return -1;
    memcpy(proposals, s->props_h, (size_t)n_agents * sizeof(EmxProposal));
    return 1;
}

// A branch pass, then agent i's proposal from branch i's logits row: only the proposals come
// back (n records instead of n rows of vocab floats, and no proposals on the host).
int emx_cuda_state_forward_branches_propose(EmxState *st, const int *tokens, int n, int prefix, int step,
                                            const EmxAgentParams *agents, uint64_t seed, uint64_t rng_step,
                                            uint32_t first_lane, EmxProposal *proposals) {
    CudaState *s = (CudaState *)st;
    if (agents_refused(s, "branches_propose", n, -1)) return -1;
    CU(cudaSetDevice(s->device));
    if (agents_upload(s, agents, n) || cuda_branch_pass(s, tokens, n, prefix, step)) return -1;
    CU(emx_cuda_agents_rows_step(s->logits, (size_t)s->vocab, s->vocab, s->agents_d, n, seed, rng_step, NULL,
                                 first_lane, s->props_d, s->agents_ws, s->stream));
    CU(cudaMemcpyAsync(s->props_h, s->props_d, (size_t)n * sizeof(EmxProposal), cudaMemcpyDeviceToHost, s->stream));
    CU(cudaStreamSynchronize(s->stream));
    memcpy(proposals, s->props_h, (size_t)n * sizeof(EmxProposal));
    return 1;
}
