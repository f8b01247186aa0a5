// pool_forward.h — the forward pass's extension for the agent pool and the branching decoder:
// proposals made where the logits are, a round of the pool in one call, lookahead branches over
// one shared prefix, the critic's pair pass, and KV rows copied between states.
//
// These run on a state of runtime/forward.h, through a second table a backend may provide beside
// its core one (EmxPoolBackend, runtime/pool/pool_backend.h). A backend without it runs every
// single-sequence call; here the proposal calls then return 0 (the caller proposes from the
// logits it has), emx_forward_pair runs emx_forward then emx_logit_pair, and the branch and KV
// row calls fail: the agent pool and the branching decoder check emx_pool_require first, which
// names the backend that lacks them. The CPU and CUDA backends provide it.
#ifndef ENTROPIX_POOL_FORWARD_H
#define ENTROPIX_POOL_FORWARD_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/forward.h"
#include "sampler/agents.h"
#include "sampler/metrics.h"

// 0 when s's backend provides the extension; else -1 with "<who> needs <what>; backend X has
// none", who being the caller ("the agent pool", "the branching decoder").
int emx_pool_require(const EmxState *s, const char *who, char *err, size_t errlen);

// Runs tokens[0..n) at pos.. as emx_forward does, but brings back only the logits of two ids
// of the last position and the row's max and sum (sampler/metrics.h's EmxLogitPair): all the
// agent pool's critic reads of a judgment (runtime/pool/critic.h). On a GPU the row never leaves
// the device and a short pass (n <= 32) is one captured graph per row count, replayed at any
// position; elsewhere it is emx_forward then emx_logit_pair. The state's attention scores and KV
// cache afterwards are emx_forward's; its logits are not kept (emx_state_propose refuses until
// the next emx_forward). Returns 0, or -1 on emx_forward's conditions (emx_state_error says why)
// or an id outside the vocabulary (checked before anything runs; a caller's precondition, which
// only a GPU's emx_state_error words).
int emx_forward_pair(EmxState *s, const int *tokens, int n, int pos, int id_a, int id_b, EmxLogitPair *out);

// ---------------------------------------------------------------------------------------------
// Branches: several continuations of one sequence run as one batch (the agent pool's
// lookahead). Every branch starts after the same prefix — positions 0..prefix-1 of this state's
// cache, shared, never copied — and keeps the KV rows of its own tokens in a tail of its own.
// Branch b's token at step j sits at position prefix + j and attends to the prefix, then to its
// tail's steps 0..j. The n branches of a step are one batched pass: each weight is read once for
// all of them, so N branches cost about one decode step, not N.
//
// Exactness: a row's result does not depend on the batch it is in (runtime/cpu/cpu_matmul.h), and
// the attention reads the prefix and the tail in the order a contiguous cache would be read, so
// branch b's logits are bitwise those of feeding its tokens to the sequence one at a time.

// Makes room for max_branches tails of tail_cap positions (grow only). Returns 0, or -1 with a
// one-line reason (more branches than a batch holds, out of memory).
int emx_state_branches_reserve(EmxState *s, int max_branches, int tail_cap, char *err, size_t errlen);
// Frees the tails (a later reserve makes them again): what a server's slot gives back after one
// request's branches, since the tails otherwise stay as large as the largest reserve.
void emx_state_branches_release(EmxState *s);

// Step `step` of branches 0..n-1: tokens[b] at position prefix + step into branch b's tail;
// logits [n][vocab] (caller's buffer) receive every branch's next-token logits. Steps 0..step-1
// must have been run with the same prefix (branches past n keep stale rows). The sequence's own
// logits, attention scores and cache are untouched. Returns 0, or -1 on a bad call.
int emx_forward_branches(EmxState *s, const int *tokens, int n, int prefix, int step, float *logits);

// emx_forward_branches with the proposals made where the logits are: branch i's next token
// proposed by agents[i] from its logits row, as emx_agent_propose(row i, agents[i], seed,
// rng_step, lane first_lane + i) (on a GPU: kernels/sampling/agent_pool.cu, the n rows at once; only the
// proposals come back, not n rows of vocab floats). One agent per branch. Returns 1 with
// proposals[0..n) filled, 0 when the backend does not (the CPU: nothing was run; call
// emx_forward_branches and propose from its logits), -1 on error.
int emx_forward_branches_propose(EmxState *s, const int *tokens, int n, int prefix, int step,
                                 const EmxAgentParams *agents, uint64_t seed, uint64_t rng_step, uint32_t first_lane,
                                 EmxProposal *proposals);

// Commits branch `branch`: copies its tail's steps 0..n_steps-1 into the cache at prefix.., as
// if its tokens had been fed to the sequence. Returns 0, or -1 on a bad call.
int emx_branch_commit(EmxState *s, int branch, int n_steps, int prefix);

// Cache rows pos..pos+n-1 of every layer packed into one buffer of emx_state_kv_rows_bytes(n)
// bytes (keys then values, each [n_layers][n][kv_dim] f32): how a committed branch's rows
// travel from the worker that ran it to the other replicas. Return 0, or -1 on a bad range.
size_t emx_state_kv_rows_bytes(const EmxState *s, int n);
int emx_state_kv_rows_read(EmxState *s, int pos, int n, void *buf);
int emx_state_kv_rows_write(EmxState *s, int pos, int n, const void *buf);

// ---------------------------------------------------------------------------------------------
// Proposals made where the logits are

// The agent pool's proposals from the logits of the latest emx_forward, made where the logits
// are (on a GPU: kernels/sampling/agent_pool.cu; only the proposals come back): proposals[i] is
// emx_agent_propose(logits with `ban` at -inf, agents[i], seed, step, lane first_lane + i).
// ban: a token id to exclude, or -1. Returns 1 with proposals[0..n_agents) filled, 0 when the
// backend does not (the CPU: the caller proposes from the logits it has), -1 on error.
int emx_state_propose(EmxState *s, const EmxAgentParams *agents, int n_agents, uint64_t seed, uint64_t step,
                      uint32_t first_lane, int ban, EmxProposal *proposals);

// A round of the agent pool in one call: token at pos run as emx_forward runs it, then the
// proposals emx_state_propose would make from its logits (the same ban, seed, step and lanes).
// On a GPU the decode step, the ban and the proposals are one captured CUDA graph: one launch
// and one synchronisation a round, and no logits cross to the host (so emx_forward's host
// logits are not updated, and emx_state_propose waits for the next emx_forward). Returns 1 with
// proposals[0..n_agents) filled, 0 when the backend does not (the CPU, or a state in a forward
// group: nothing was run; call emx_forward, then propose), -1 on error.
int emx_forward_propose(EmxState *s, int token, int pos, const EmxAgentParams *agents, int n_agents,
                        uint64_t seed, uint64_t step, uint32_t first_lane, int ban, EmxProposal *proposals);

// A lookahead round of n_steps in one call: emx_forward_propose's step 0 (token at pos, the ban,
// proposals[0..n_agents) from its logits), then for j = 1..n_steps-1 the branch pass of
// emx_forward_branches_propose(tokens, n_agents, pos + 1, j - 1, agents, seed, step + j,
// first_lane) into proposals[j * n_agents ..], where tokens[i] is branch i's latest proposal
// (step j-1's token when it is >= 0, else what branch i was fed at step j-1; 0 when it has none).
// A branch keeps being fed after a stop token like any other: rows are independent, so its later
// proposals change nothing else and the caller drops them. Needs emx_state_branches_reserve for
// n_agents branches of n_steps - 1 steps. On a GPU the whole round is one captured CUDA graph:
// one launch and one synchronisation. Returns 1 with proposals[0 .. n_steps * n_agents) filled,
// 0 when the backend does not (the CPU, or a state in a forward group: nothing was run), -1 on
// error.
int emx_forward_lookahead_propose(EmxState *s, int token, int pos, const EmxAgentParams *agents, int n_agents,
                                  uint64_t seed, uint64_t step, uint32_t first_lane, int ban, int n_steps,
                                  EmxProposal *proposals);

#endif
