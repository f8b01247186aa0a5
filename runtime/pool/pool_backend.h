// pool_backend.h — what a backend provides for runtime/pool/pool_forward.h: a second table beside
// its core one (runtime/forward_backend.h), reached through the core table's `pool` entry (NULL
// when the backend has none). runtime/pool/pool_forward.c calls through it; the semantics of each
// entry are those of the pool_forward.h function of the same name. The agent pool and the
// branching decoder own this interface: it grows with what they need, and the single-sequence
// core does not.
#ifndef ENTROPIX_POOL_BACKEND_H
#define ENTROPIX_POOL_BACKEND_H

#include "runtime/forward_backend.h"
#include "runtime/pool/pool_forward.h"

typedef struct EmxPoolBackend EmxPoolBackend;

// Entries marked NULL may be left out; the others a backend providing the table must fill
// (emx_pool_require checks them).
struct EmxPoolBackend {
    int (*propose)(EmxState *s, const EmxAgentParams *agents, int n_agents, uint64_t seed, uint64_t step,
                   uint32_t first_lane, int ban, EmxProposal *proposals);  // NULL: 0
    int (*forward_propose)(EmxState *s, int token, int pos, const EmxAgentParams *agents, int n_agents,
                           uint64_t seed, uint64_t step, uint32_t first_lane, int ban,
                           EmxProposal *proposals);  // NULL: 0
    int (*forward_lookahead_propose)(EmxState *s, int token, int pos, const EmxAgentParams *agents, int n_agents,
                                     uint64_t seed, uint64_t step, uint32_t first_lane, int ban, int n_steps,
                                     EmxProposal *proposals);  // NULL: 0
    // NULL: emx_forward_pair is emx_forward then emx_logit_pair on the host row
    int (*forward_pair)(EmxState *s, const int *tokens, int n, int pos, int id_a, int id_b, EmxLogitPair *out);
    int (*branches_reserve)(EmxState *s, int max_branches, int tail_cap, char *err, size_t errlen);
    void (*branches_release)(EmxState *s);  // NULL: the tails stay
    int (*forward_branches)(EmxState *s, const int *tokens, int n, int prefix, int step, float *logits);
    int (*forward_branches_propose)(EmxState *s, const int *tokens, int n, int prefix, int step,
                                    const EmxAgentParams *agents, uint64_t seed, uint64_t rng_step,
                                    uint32_t first_lane, EmxProposal *proposals);  // NULL: 0
    int (*branch_commit)(EmxState *s, int branch, int n_steps, int prefix);
    size_t (*kv_rows_bytes)(const EmxState *s, int n);
    int (*kv_rows_read)(EmxState *s, int pos, int n, void *buf);
    int (*kv_rows_write)(EmxState *s, int pos, int n, const void *buf);
};

#endif
