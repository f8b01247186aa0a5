// pool_forward.c — pool_forward.h's functions: each forwards to the state's backend's pool table
// (pool_backend.h), or does what pool_forward.h says a backend without it gets.
#include "runtime/pool/pool_forward.h"

#include "base/errmsg.h"
#include "runtime/pool/pool_backend.h"

// The backend's pool table, or NULL.
static const EmxPoolBackend *pool_of(const EmxState *s) { return s->backend->pool; }

int emx_pool_require(const EmxState *s, const char *who, char *err, size_t errlen) {
    const EmxPoolBackend *p = pool_of(s);
    if (p && p->branches_reserve && p->forward_branches && p->branch_commit && p->kv_rows_bytes && p->kv_rows_read &&
        p->kv_rows_write)
        return 0;
    return emx_seterr(err, errlen, "%s needs branch passes and KV row copies (runtime/pool/pool_backend.h); "
                                   "backend %s has none", who, s->backend->name);
}

int emx_forward_pair(EmxState *s, const int *tokens, int n, int pos, int id_a, int id_b, EmxLogitPair *out) {
    const EmxPoolBackend *p = pool_of(s);
    if (!s->group && p && p->forward_pair) return p->forward_pair(s, tokens, n, pos, id_a, id_b, out);
    EmxStateInfo info;
    emx_state_info(s, &info);
    if (id_a < 0 || id_a >= info.vocab || id_b < 0 || id_b >= info.vocab) return -1;
    const float *logits = emx_forward(s, tokens, n, pos);
    return logits ? emx_logit_pair(logits, info.vocab, id_a, id_b, out) : -1;
}

int emx_state_propose(EmxState *s, const EmxAgentParams *agents, int n_agents, uint64_t seed, uint64_t step,
                      uint32_t first_lane, int ban, EmxProposal *proposals) {
    const EmxPoolBackend *p = pool_of(s);
    return p && p->propose ? p->propose(s, agents, n_agents, seed, step, first_lane, ban, proposals) : 0;
}

int emx_forward_propose(EmxState *s, int token, int pos, const EmxAgentParams *agents, int n_agents,
                        uint64_t seed, uint64_t step, uint32_t first_lane, int ban, EmxProposal *proposals) {
    // a member of a forward group steps through emx_forward (its batched step waits for every
    // member's row: runtime/forward_group.h)
    const EmxPoolBackend *p = pool_of(s);
    if (s->group || !p || !p->forward_propose) return 0;
    return p->forward_propose(s, token, pos, agents, n_agents, seed, step, first_lane, ban, proposals);
}

int emx_forward_lookahead_propose(EmxState *s, int token, int pos, const EmxAgentParams *agents, int n_agents,
                                  uint64_t seed, uint64_t step, uint32_t first_lane, int ban, int n_steps,
                                  EmxProposal *proposals) {
    const EmxPoolBackend *p = pool_of(s);
    if (s->group || !p || !p->forward_lookahead_propose) return 0;  // as emx_forward_propose
    return p->forward_lookahead_propose(s, token, pos, agents, n_agents, seed, step, first_lane, ban, n_steps,
                                        proposals);
}

int emx_state_branches_reserve(EmxState *s, int max_branches, int tail_cap, char *err, size_t errlen) {
    const EmxPoolBackend *p = pool_of(s);
    if (!p || !p->branches_reserve)
        return emx_seterr(err, errlen, "branches: backend %s has no branch passes (runtime/pool/pool_backend.h)",
                          s->backend->name);
    return p->branches_reserve(s, max_branches, tail_cap, err, errlen);
}

void emx_state_branches_release(EmxState *s) {
    const EmxPoolBackend *p = pool_of(s);
    if (p && p->branches_release) p->branches_release(s);
}

int emx_forward_branches(EmxState *s, const int *tokens, int n, int prefix, int step, float *logits) {
    const EmxPoolBackend *p = pool_of(s);
    return p && p->forward_branches ? p->forward_branches(s, tokens, n, prefix, step, logits) : -1;
}

int emx_forward_branches_propose(EmxState *s, const int *tokens, int n, int prefix, int step,
                                 const EmxAgentParams *agents, uint64_t seed, uint64_t rng_step, uint32_t first_lane,
                                 EmxProposal *proposals) {
    const EmxPoolBackend *p = pool_of(s);
    if (!p || !p->forward_branches_propose) return 0;
    return p->forward_branches_propose(s, tokens, n, prefix, step, agents, seed, rng_step, first_lane, proposals);
}

int emx_branch_commit(EmxState *s, int branch, int n_steps, int prefix) {
    const EmxPoolBackend *p = pool_of(s);
    return p && p->branch_commit ? p->branch_commit(s, branch, n_steps, prefix) : -1;
}

size_t emx_state_kv_rows_bytes(const EmxState *s, int n) {
    const EmxPoolBackend *p = pool_of(s);
    return p && p->kv_rows_bytes ? p->kv_rows_bytes(s, n) : 0;
}

int emx_state_kv_rows_read(EmxState *s, int pos, int n, void *buf) {
    const EmxPoolBackend *p = pool_of(s);
    return p && p->kv_rows_read ? p->kv_rows_read(s, pos, n, buf) : -1;
}

int emx_state_kv_rows_write(EmxState *s, int pos, int n, const void *buf) {
    const EmxPoolBackend *p = pool_of(s);
    return p && p->kv_rows_write ? p->kv_rows_write(s, pos, n, buf) : -1;
}
