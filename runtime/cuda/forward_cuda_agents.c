// forward_cuda_agents.c — the agent pool's side of the CUDA backend: the agents' proposals
// made where the logits are (emx_state_propose), a round — the decode step of the last
// committed token, the ban and the proposals — as one captured graph (emx_forward_propose), a
// lookahead round — that and its branch passes, each fed on the device with the step before's
// proposals — as one captured graph too (emx_forward_lookahead_propose), the lookahead
// branches' tails, passes and commit (emx_forward_branches, emx_forward_branches_propose,
// emx_branch_commit), KV rows copied between states (emx_state_kv_rows_read/write), and the
// backend's table of runtime/pool/pool_backend.h that points to them and to the critic's pair
// pass (forward_cuda_pair.c). The kernels are kernels/sampling/agent_pool.cu's; the rounds' tails are
// forward_cuda_tail.c's propose_kernels and lookahead_kernels.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "base/errmsg.h"
#include "kernels/rope.h"
#include "runtime/cpu/cpu_ops.h"
#include "runtime/cuda/forward_cuda_state.h"
#include "runtime/pool/pool_backend.h"

static void drop_graph(CudaState *s, int tail) {
    if (s->step_graph[tail]) cudaGraphExecDestroy(s->step_graph[tail]);
    s->step_graph[tail] = NULL;
}

// The agents' buffers for n agents and n_props proposal records (grown on demand; growing moves
// them, so the rounds' graphs, which hold their addresses, go with them).
static int agents_reserve(CudaState *s, int n, int n_props) {
    if (n <= s->agents_cap && n_props <= s->props_cap) return 0;
    if (n < s->agents_cap) n = s->agents_cap;
    if (n_props < s->props_cap) n_props = s->props_cap;
    cudaFree(s->agents_d);
    cudaFree(s->props_d);
    cudaFree(s->pick_d);
    cudaFree(s->agents_ws);
    cudaFreeHost(s->props_h);
    s->agents_d = NULL, s->props_d = NULL, s->props_h = NULL, s->pick_d = NULL, s->agents_ws = NULL;
    s->agents_cap = s->props_cap = 0;
    drop_graph(s, TAIL_PROPOSE);
    drop_graph(s, TAIL_LOOKAHEAD);
    if (dev_alloc(s, (void **)&s->agents_d, (size_t)n * sizeof(EmxAgentParams), "agents") ||
        dev_alloc(s, (void **)&s->props_d, (size_t)n_props * sizeof(EmxProposal), "proposals") ||
        dev_alloc(s, (void **)&s->pick_d, 2 * sizeof(int), "proposals") ||
        dev_alloc(s, &s->agents_ws, emx_cuda_agents_workspace_bytes(s->vocab, n), "the agents' workspace"))
        return -1;
    CU(cudaMallocHost((void **)&s->props_h, (size_t)n_props * sizeof(EmxProposal)));
    s->agents_cap = n;
    s->props_cap = n_props;
    return 0;
}

// The agents' parameters to agents_d (buffers grown first: n_props records), queued on the stream.
static int agents_upload(CudaState *s, const EmxAgentParams *agents, int n, int n_props) {
    if (agents_reserve(s, n, n_props)) return -1;
    CU(cudaMemcpyAsync(s->agents_d, agents, (size_t)n * sizeof(EmxAgentParams), cudaMemcpyHostToDevice, s->stream));
    return 0;
}

// The agents, seed and lanes the rounds' graphs are captured for: another set drops both.
static void round_for(CudaState *s, int n_agents, uint64_t seed, uint32_t first_lane) {
    if (s->round_agents != n_agents || s->round_seed != seed || s->round_lane != first_lane) {
        drop_graph(s, TAIL_PROPOSE);
        drop_graph(s, TAIL_LOOKAHEAD);
    }
    s->round_agents = n_agents, s->round_seed = seed, s->round_lane = first_lane;
}

static int agents_refused(CudaState *s, const char *call, int n_agents, int ban) {
    if (n_agents >= 1 && n_agents <= 65535 && ban < s->vocab) return 0;
    snprintf(s->err, sizeof s->err, "%s: %s: %d agents, ban %d", s->device_name, call, n_agents, ban);
    return -1;
}

int emx_cuda_state_propose(EmxState *st, const EmxAgentParams *agents, int n_agents, uint64_t seed, uint64_t step,
                           uint32_t first_lane, int ban, EmxProposal *proposals) {
    CudaState *s = (CudaState *)st;
    if (cuda_settle(s) || agents_refused(s, "propose", n_agents, ban)) return -1;
    if (!s->logits_fresh) {
        snprintf(s->err, sizeof s->err, "%s: propose: no logits of an emx_forward to propose from (a branch pass, "
                 "all-logits pass, proposal round or banned token came after it)", s->device_name);
        return -1;
    }
    CU(cudaSetDevice(s->device));
    if (agents_upload(s, agents, n_agents, n_agents)) return -1;
    // logits row 0 is the latest emx_forward's; the banned token is removed there (the row is
    // rewritten by the next pass anyway)
    static const float minus_inf = -INFINITY;
    if (ban >= 0) {
        CU(cudaMemcpyAsync(s->logits + ban, &minus_inf, sizeof(float), cudaMemcpyHostToDevice, s->stream));
        s->logits_fresh = 0;
    }
    CU(emx_cuda_agents_step(s->logits, s->vocab, s->agents_d, n_agents, seed, step, NULL, first_lane, s->pick_d,
                            s->pick_d + 1, s->props_d, s->agents_ws, s->stream, 0));  // after copies: no PDL
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
    if (agents_upload(s, agents, n_agents, n_agents)) return -1;  // the graph reads them there
    round_for(s, n_agents, seed, first_lane);
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
    if (agents_upload(s, agents, n, n) || cuda_branch_pass(s, tokens, n, prefix, step)) return -1;
    // the proposals follow the branch pass's classifier: PDL where the state takes it
    CU(emx_cuda_agents_rows_step(s->logits, (size_t)s->vocab, s->vocab, s->agents_d, n, seed, rng_step, NULL,
                                 first_lane, s->props_d, s->agents_ws, s->stream, s->pdl));
    CU(cudaMemcpyAsync(s->props_h, s->props_d, (size_t)n * sizeof(EmxProposal), cudaMemcpyDeviceToHost, s->stream));
    CU(cudaStreamSynchronize(s->stream));
    memcpy(proposals, s->props_h, (size_t)n * sizeof(EmxProposal));
    return 1;
}

// The branch passes' inputs for a round of `steps` (grown on demand; a move drops the graph).
static int lookahead_reserve(CudaState *s, int steps) {
    if (steps - 1 <= s->bin_cap) return 0;
    cudaFree(s->bin_d);
    cudaFreeHost(s->bin_h);
    s->bin_d = NULL, s->bin_h = NULL, s->bin_cap = 0;
    drop_graph(s, TAIL_LOOKAHEAD);
    if (dev_alloc(s, (void **)&s->bin_d, (size_t)(steps - 1) * sizeof(StepInput), "lookahead inputs")) return -1;
    CU(cudaMallocHost((void **)&s->bin_h, (size_t)(steps - 1) * sizeof(StepInput)));
    s->bin_cap = steps - 1;
    return 0;
}

// A lookahead round in one graph (step_graph[TAIL_LOOKAHEAD], per agents, seed, lanes and
// steps): the decode step of token at pos and step 0's proposals, as emx_forward_propose, then
// steps 1..n_steps-1 (forward_cuda_tail.c's lookahead_kernels): the branch pass of step j - 1
// after prefix pos + 1, its rows at position pos + j, fed on the device. What changes from round
// to round is in in_h (token, position, ban, RNG step) and bin_h (each step's positions, key
// count, tail start and RNG step), both copied by the graph's nodes.
int emx_cuda_state_forward_lookahead_propose(EmxState *st, int token, int pos, const EmxAgentParams *agents,
                                             int n_agents, uint64_t seed, uint64_t step, uint32_t first_lane, int ban,
                                             int n_steps, EmxProposal *proposals) {
    CudaState *s = (CudaState *)st;
    if (n_steps == 1)
        return emx_cuda_state_forward_propose(st, token, pos, agents, n_agents, seed, step, first_lane, ban, proposals);
    if (agents_refused(s, "lookahead_propose", n_agents, ban) || cuda_step_check(s, &token, 1, pos)) return -1;
    if (n_steps < 1 || n_agents > s->br_max || n_steps - 1 > s->br_tail || pos + n_steps > s->ctx) {
        snprintf(s->err, sizeof s->err, "%s: lookahead_propose: %d steps of %d agents at position %d (tails reserved: "
                 "%d branches of %d steps; context %d)", s->device_name, n_steps, n_agents, pos, s->br_max, s->br_tail,
                 s->ctx);
        return -1;
    }
    CU(cudaSetDevice(s->device));
    if (agents_upload(s, agents, n_agents, n_agents * n_steps) || lookahead_reserve(s, n_steps)) return -1;
    round_for(s, n_agents, seed, first_lane);
    if (s->round_steps != n_steps) drop_graph(s, TAIL_LOOKAHEAD);
    s->round_steps = n_steps;
    s->in_h->rng_step = step;
    s->in_h->ban = ban;
    for (int j = 1; j < n_steps; j++) {  // step j: every branch's row at pos + j, after prefix pos + 1
        StepInput *in = &s->bin_h[j - 1];
        for (int i = 0; i < n_agents; i++) {
            in->tokens[i] = 0;  // fed on the device
            in->pos[i] = pos + j;
            in->rows[i] = i;
        }
        in->n_keys = pos + j + 1;
        in->tail_start = pos + 1;
        in->rng_step = step + (uint64_t)j;
        in->ban = -1;
    }
    if (cuda_step_run(s, &token, 1, pos, TAIL_LOOKAHEAD)) return -1;
    memcpy(proposals, s->props_h, (size_t)n_steps * n_agents * sizeof(EmxProposal));
    return 1;
}

// ---------------------------------------------------------------------------------------------
// Branches (forward.h): the tails on the device, the attention reading the prefix from the
// cache and the rest from the branch's tail (EmxAttentionArgs tail_k/tail_v); the pass itself is
// forward_cuda_step.c's cuda_branch_pass.

int emx_cuda_state_branches_reserve(EmxState *st, int max_branches, int tail_cap, char *err, size_t errlen) {
    CudaState *s = (CudaState *)st;
    if (cuda_settle(s)) return emx_seterr(err, errlen, "%s", s->err);
    if (max_branches < 1 || max_branches > CHUNK || tail_cap < 1 || tail_cap > s->ctx) {
        emx_seterr(err, errlen, "branches: %d branches of %d positions do not fit (at most %d branches, ctx %d)",
                 max_branches, tail_cap, CHUNK, s->ctx);
        return -1;
    }
    if (max_branches <= s->br_max && tail_cap <= s->br_tail) return 0;
    const size_t n = (size_t)s->m->cfg.n_layers * tail_cap * max_branches * s->kv_dim * s->kv_esize;
    void *k = NULL, *v = NULL;
    if (cu(s, cudaSetDevice(s->device), "cudaSetDevice") || dev_alloc(s, &k, n, "branch KV tails") ||
        dev_alloc(s, &v, n, "branch KV tails")) {
        cudaFree(k);
        emx_seterr(err, errlen, "branches: %s", s->err);
        return -1;
    }
    cudaFree(s->br_key);
    cudaFree(s->br_value);
    drop_graph(s, TAIL_LOOKAHEAD);  // it holds the tails' addresses
    s->br_key = k;
    s->br_value = v;
    s->br_max = max_branches;
    s->br_tail = tail_cap;
    return 0;
}

void emx_cuda_state_branches_release(EmxState *st) {
    CudaState *s = (CudaState *)st;
    cuda_settle_quiet(s);
    if (!s->br_key && !s->br_value) return;
    cudaSetDevice(s->device);
    drop_graph(s, TAIL_LOOKAHEAD);  // it holds the tails' addresses
    cudaFree(s->br_key);
    cudaFree(s->br_value);
    s->br_key = s->br_value = NULL;
    s->br_max = s->br_tail = 0;
}

int emx_cuda_state_forward_branches(EmxState *st, const int *tokens, int n, int prefix, int step, float *logits) {
    CudaState *s = (CudaState *)st;
    if (cuda_branch_pass(s, tokens, n, prefix, step)) return -1;
    CU(cudaMemcpyAsync(logits, s->logits, (size_t)n * s->vocab * sizeof(float), cudaMemcpyDeviceToHost, s->stream));
    CU(cudaStreamSynchronize(s->stream));
    return 0;
}

int emx_cuda_state_branch_commit(EmxState *st, int branch, int n_steps, int prefix) {
    CudaState *s = (CudaState *)st;
    if (cuda_settle(s)) return -1;
    if (branch < 0 || branch >= s->br_max || n_steps < 0 || n_steps > s->br_tail || prefix < 0 ||
        prefix + n_steps > s->ctx) {
        snprintf(s->err, sizeof s->err, "%s: branch commit: bad call", s->device_name);
        return -1;
    }
    CU(cudaSetDevice(s->device));
    // tail row j of layer l, branch b: ((l * br_tail + j) * br_max + b) * kv_dim elements in; the
    // cache row of position p in layer l: where layers_d says (a ring wraps). One launch for the
    // keys, one for the values.
    const size_t row = (size_t)s->kv_dim * s->kv_esize, n_layers = s->m->cfg.n_layers;
    const size_t src_row = (size_t)s->br_max * row, src_layer = (size_t)s->br_tail * src_row;
    const size_t from = (size_t)branch * row;
    CU(emx_cuda_kv_rows_copy(s->key, s->layers_d, prefix, (const char *)s->br_key + from, src_layer, src_row, row,
                             n_steps, (int)n_layers, s->stream));
    CU(emx_cuda_kv_rows_copy(s->value, s->layers_d, prefix, (const char *)s->br_value + from, src_layer, src_row,
                             row, n_steps, (int)n_layers, s->stream));
    if (n_steps) emx_kv_ring_wrote(&s->ring, prefix + n_steps - 1);
    CU(cudaStreamSynchronize(s->stream));
    return 0;
}

// ---------------------------------------------------------------------------------------------
// KV rows copied between states (emx_state_kv_rows_read/write)

static size_t cuda_kv_rows_bytes(const EmxState *st, int n) {
    const CudaState *s = (const CudaState *)st;
    return 2 * (size_t)s->m->cfg.n_layers * n * s->kv_dim * sizeof(float);
}

// buf: keys then values, each [n_layers][n][kv_dim] f32 (the CPU backend's packing), whatever
// the cache's type: rows travel between states of either. An f16 cache's rows go through host
// staging: widened when read (exact), rounded when written (as the kernels round).
static int kv_rows_copy(CudaState *s, int pos, int n, float *buf, int to_cache) {
    if (cuda_settle(s)) return -1;
    if (pos < 0 || n < 0 || pos + n > s->ctx) {
        snprintf(s->err, sizeof s->err, "%s: KV rows %d..%d outside the context", s->device_name, pos, pos + n - 1);
        return -1;
    }
    const char *gone = to_cache ? NULL : emx_kv_ring_read_refusal(&s->ring, pos, n);
    if (gone) return snprintf(s->err, sizeof s->err, "%s: %s", s->device_name, gone), -1;
    CU(cudaSetDevice(s->device));
    const size_t row = (size_t)n * s->kv_dim, layers = s->m->cfg.n_layers, bytes = row * s->kv_esize;
    const int half = s->kv_type == EMX_KV_F16;
    uint16_t *staged = half ? malloc(2 * layers * bytes) : NULL;  // [2][n_layers][n][kv_dim] f16
    if (half && !staged) {
        snprintf(s->err, sizeof s->err, "%s: KV rows: out of host memory", s->device_name);
        return -1;
    }
    if (half && to_cache) emx_f32_to_f16_row(staged, buf, 2 * layers * row);
    const enum cudaMemcpyKind kind = to_cache ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
    int rc = 0;
    const size_t row_bytes = (size_t)s->kv_dim * s->kv_esize;  // of the cache, of staged, of an f32 buf
    for (size_t l = 0; l < layers && !rc; l++) {
        char *bk = half ? (char *)(staged + l * row) : (char *)(buf + l * row);
        char *bv = half ? (char *)(staged + (layers + l) * row) : (char *)(buf + (layers + l) * row);
        // the rows in runs that do not wrap past a ring's end, in position order (a write of more
        // rows than a ring holds keeps the last of them, as the CPU's)
        const EmxKvLayer at = s->layers[l];
        for (int j = 0, run; j < n && !rc; j += run) {
            const int first = (pos + j) % at.rows;
            run = n - j < at.rows - first ? n - j : at.rows - first;
            const size_t cache = (size_t)(at.row0 + first) * s->kv_dim, b = (size_t)j * row_bytes;
            void *k = kv_at(s, s->key, cache), *v = kv_at(s, s->value, cache);
            const size_t len = (size_t)run * row_bytes;
            rc = cu(s, cudaMemcpyAsync(to_cache ? k : bk + b, to_cache ? bk + b : k, len, kind, s->stream),
                    "cudaMemcpyAsync") ||
                 cu(s, cudaMemcpyAsync(to_cache ? v : bv + b, to_cache ? bv + b : v, len, kind, s->stream),
                    "cudaMemcpyAsync");
        }
    }
    if (to_cache && n) emx_kv_ring_wrote(&s->ring, pos + n - 1);
    rc = rc || cu(s, cudaStreamSynchronize(s->stream), "cudaStreamSynchronize");
    if (!rc && half && !to_cache) emx_dequantize_row(EMX_F16, staged, 1, 2 * layers * row, 0, buf);
    free(staged);
    return rc ? -1 : 0;
}

static int cuda_kv_rows_read(EmxState *st, int pos, int n, void *buf) {
    return kv_rows_copy((CudaState *)st, pos, n, buf, 0);
}
static int cuda_kv_rows_write(EmxState *st, int pos, int n, const void *buf) {
    return kv_rows_copy((CudaState *)st, pos, n, (float *)buf, 1);
}

const EmxPoolBackend emx_cuda_pool_backend = {
    .propose = emx_cuda_state_propose,
    .forward_propose = emx_cuda_state_forward_propose,
    .forward_lookahead_propose = emx_cuda_state_forward_lookahead_propose,
    .forward_pair = emx_cuda_state_forward_pair,
    .branches_reserve = emx_cuda_state_branches_reserve,
    .branches_release = emx_cuda_state_branches_release,
    .forward_branches = emx_cuda_state_forward_branches,
    .forward_branches_propose = emx_cuda_state_forward_branches_propose,
    .branch_commit = emx_cuda_state_branch_commit,
    .kv_rows_bytes = cuda_kv_rows_bytes,
    .kv_rows_read = cuda_kv_rows_read,
    .kv_rows_write = cuda_kv_rows_write,
};
