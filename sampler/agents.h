// agents.h — the agent pool's proposal rule (docs/agents.md).
//
// N agents share one context (one forward pass, one logits row); each holds a (temperature,
// top_k) configuration and proposes the next token: it samples from its own distribution, and
// the controller keeps the proposal of LOWEST entropy (ties: the lower agent index).
//
// Unspecified by the original design, decided here (docs/agents.md): the entropy of a proposal is
// the entropy, in bits, of the distribution the agent actually sampled from: q =
// softmax(logit / T) over the tokens its top-k kept, renormalised (emx_sample_distribution with
// top_p = 1, min_p = 0). Consequence: a greedy agent (temperature <= 0 or top_k == 1) samples from
// a single token, entropy 0, so whenever one is in the pool it always wins (the lowest index among
// greedy agents), and a pool's choice is then just argmax. Non-greedy agents only compete among
// themselves: lower temperature and smaller top-k make lower entropy, so the rule favours the most
// conservative configuration of the pool on every step.
//
// Randomness: agent i draws with lane i, u = emx_uniform_f64(seed, step, i) (sampler/philox.h),
// so a step can be replayed and the device (kernels/sampling/agent_pool.cu) gives the same tokens.
#ifndef ENTROPIX_AGENTS_H
#define ENTROPIX_AGENTS_H

#include <stdint.h>

#include "sampler/sample.h"

typedef struct {
    float temperature;  // <= 0: greedy
    int top_k;          // <= 0 (or >= the number of candidates): off
} EmxAgentParams;       // one agent's configuration

typedef struct {
    int token;            // -1: no token can be chosen
    double entropy_bits;  // of the distribution sampled from; NAN when token is -1
} EmxProposal;

// Agent `lane`'s proposal: q = emx_sample_distribution(logits, n, {temperature, top_k, top_p = 1,
// min_p = 0}), entropy_bits = -sum q log2 q over the kept tokens (0 for one token),
// token = emx_sample_draw(q, m, emx_uniform_f64(seed, step, lane)). work holds n entries.
// Returns 0, or -1 if no token can be chosen (every logit -inf/NaN, n <= 0): token -1, entropy NAN.
int emx_agent_propose(const float *logits, int n, const EmxAgentParams *a, uint64_t seed,
                      uint64_t step, uint32_t lane, EmxCandidate *work /* [n] */,
                      EmxProposal *out);

// Every agent proposes (lane = its index into agents[0..n_agents)); proposals[n_agents] receives
// each proposal. Returns the winner's index (lowest entropy, ties to the lower index), or -1 if
// no agent proposes a token.
int emx_agents_choose(const float *logits, int n, const EmxAgentParams *agents, int n_agents,
                      uint64_t seed, uint64_t step, EmxCandidate *work /* [n] */,
                      EmxProposal *proposals /* [n_agents] */);

// Entropy in bits of q[0..m).p: -sum p log2 p in index order, p <= 0 skipped (shared with the
// device's expression order so both give the same double).
double emx_agent_entropy_bits(const EmxCandidate *q, int m);

#endif
