// tools/lab/agent_pool.cu — the agent pool's proposal rule on the device (kernels/sampling/agent_pool.cu)
// against the CPU's emx_agents_choose: every agent (its own temperature and top-k, RNG lane =
// its index) samples a proposal, the lowest-entropy proposal wins. Checked: each agent's token
// (exactly) and entropy, the winner. `make lab K=agent_pool`.
#include "tools/lab/lab.h"

#include "kernels/sampling/agent_pool.h"

extern "C" {
#include "sampler/agents.h"
}

int main(int argc, char **argv) {
    Lab L;
    lab_init(&L, "agent_pool", argc, argv, "--n --agents",
             "proposal_i = sample(logits, T_i, top-k_i, lane i); winner = lowest entropy");
    const int n = lab_int(&L, "--n", 49152, 1, 1 << 24), n_agents = lab_int(&L, "--agents", 8, 1, 64);
    std::vector<EmxAgentParams> agents(n_agents);
    for (int i = 0; i < n_agents; i++) agents[i] = EmxAgentParams{0.4f + 0.2f * i, i % 2 ? 40 : 0};
    const uint64_t seed = 99, step = 3;
    std::vector<float> l = lab_random(n, 91, -4.0f, 4.0f), l2 = lab_random(n, 92, -4.0f, 4.0f);
    for (int i = 0; i < n; i++) l[i] += l2[i];
    std::vector<EmxCandidate> work(n);
    std::vector<EmxProposal> props(n_agents);
    const int winner = emx_agents_choose(l.data(), n, agents.data(), n_agents, seed, step, work.data(), props.data());
    // [token_0, entropy_0, ..., winner]
    std::vector<double> want;
    for (const EmxProposal &p : props) {
        want.push_back(p.token);
        want.push_back(p.entropy_bits);
    }
    want.push_back(winner);
    LabBuf<float> dl(l);
    LabBuf<EmxAgentParams> dagents(agents);
    LabBuf<int> dtok(1), dwin(1);
    LabBuf<EmxProposal> dprops(n_agents);
    LabBuf<uint8_t> ws(emx_cuda_agents_workspace_bytes(n, n_agents));
    char shape[64];
    snprintf(shape, sizeof shape, "n %d logits, %d agents (--n --agents)", n, n_agents);
    // tokens and the winner exactly; entropies are double sums in the same order (agents.h), up to
    // a GPU's exp/log2 ulp
    lab_header(&L, shape, "tokens and winner exactly; entropies |gpu - cpu| <= 1e-9 + 1e-9 * |cpu|");
    lab_version(&L, "block/agent (runtime)", 4.0 * n * n_agents, [&] {
        return emx_cuda_agents_step(dl.p, n, dagents.p, n_agents, seed, step, nullptr, 0, dtok.p, dwin.p, dprops.p, ws.p, L.stream, 0);
    }, [&] {
        std::vector<double> got;
        for (const EmxProposal &p : dprops.get()) {
            got.push_back(p.token);
            got.push_back(p.entropy_bits);
        }
        got.push_back(dwin.get()[0]);
        // the winner's token must also be the one returned
        const bool tok_ok = winner < 0 ? dtok.get()[0] == -1 : dtok.get()[0] == props[winner].token;
        LabErr e = lab_compare(got, want, 1e-9, 1e-9);
        e.pass = e.pass && tok_ok;
        return e;
    });
    return lab_finish(&L);
}
