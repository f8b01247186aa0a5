// agents.c — the agent pool's proposal rule (semantics in agents.h).
#include "sampler/agents.h"

#include <math.h>

#include "sampler/philox.h"

double emx_agent_entropy_bits(const EmxCandidate *q, int m) {
    double h = 0.0;
    for (int i = 0; i < m; i++)
        if (q[i].p > 0.0) h -= q[i].p * log2(q[i].p);  // 0 log 0 = 0; one token: -1*0 = 0
    return h;
}

int emx_agent_propose(const float *logits, int n, const EmxAgentParams *a, uint64_t seed,
                      uint64_t step, uint32_t lane, EmxCandidate *work, EmxProposal *out) {
    // The filters the agent does not have are off: top-p 1, min-p 0.
    EmxSamplerParams sp = {.temperature = a->temperature, .top_k = a->top_k, .top_p = 1.0f,
                           .min_p = 0.0f, .temperature_first = 0};
    int m = emx_sample_distribution(logits, n, &sp, work);
    if (m <= 0) {
        *out = (EmxProposal){.token = -1, .entropy_bits = NAN};
        return -1;
    }
    out->entropy_bits = emx_agent_entropy_bits(work, m);
    out->token = emx_sample_draw(work, m, emx_uniform_f64(seed, step, lane));
    return 0;
}

int emx_agents_choose(const float *logits, int n, const EmxAgentParams *agents, int n_agents,
                      uint64_t seed, uint64_t step, EmxCandidate *work, EmxProposal *proposals) {
    int winner = -1;
    for (int i = 0; i < n_agents; i++) {
        if (emx_agent_propose(logits, n, &agents[i], seed, step, (uint32_t)i, work,
                              &proposals[i]) != 0)
            continue;
        // strict <: an equal entropy keeps the earlier (lower-index) agent
        if (winner < 0 || proposals[i].entropy_bits < proposals[winner].entropy_bits) winner = i;
    }
    return winner;
}
