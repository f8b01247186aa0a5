// test_agents.c — the agent pool's proposal rule (sampler/agents.h): entropy of each proposal on
// closed forms and against an independent double computation (sort everything, softmax of
// logit / T over the top-k by log-sum-exp), the winner as argmin with ties to the lower index,
// the token as emx_sample's with the same parameters and u, and -inf / NaN never proposed.
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sampler/agents.h"
#include "sampler/philox.h"
#include "sampler/sample.h"

// Deterministic test inputs: logits in [-scale, scale) from Philox (seed 77, lane i).
static void random_logits(float *l, int n, uint64_t row, float scale) {
    for (int i = 0; i < n; i++)
        l[i] = scale * (2.0f * emx_uniform_f32(77, row, (uint32_t)i) - 1.0f);
}

// --- Independent reference: entropy in bits of softmax(l / T) over the top_k best (ties: lower id).
static const float *g_sort_logits;
static int by_logit_desc(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    float lx = g_sort_logits[x], ly = g_sort_logits[y];
    if (lx != ly) return lx > ly ? -1 : 1;
    return x - y;
}
static double reference_entropy_bits(const float *l, int n, float t, int top_k) {
    int *order = malloc(sizeof(int) * (size_t)n), nv = 0;
    for (int i = 0; i < n; i++)
        if (!isnan(l[i]) && l[i] != -INFINITY) order[nv++] = i;
    g_sort_logits = l;
    qsort(order, (size_t)nv, sizeof(int), by_logit_desc);
    int k = (top_k > 0 && top_k < nv) ? top_k : nv;
    if (t <= 0 || top_k == 1) k = 1;
    double h = 0.0;
    if (k > 1) {
        // H = log Z - sum q_i x_i with x_i = (l_i - max)/T, q_i = exp(x_i)/Z; in nats, then bits.
        double max = l[order[0]], z = 0.0, qx = 0.0;
        for (int j = 0; j < k; j++) z += exp(((double)l[order[j]] - max) / t);
        for (int j = 0; j < k; j++) {
            double x = ((double)l[order[j]] - max) / t;
            qx += exp(x) / z * x;
        }
        h = (log(z) - qx) / log(2.0);
    }
    free(order);
    return h;
}

Test(agents, uniform_logits_give_log2_k) {
    enum { N = 300 };
    float l[N];
    EmxCandidate work[N];
    for (int i = 0; i < N; i++) l[i] = 1.5f;
    const int ks[] = {2, 4, 8, 64, 256};  // powers of two: 1/k and log2(1/k) exact, so H exact
    for (size_t j = 0; j < sizeof ks / sizeof ks[0]; j++) {
        EmxAgentParams a = {1.0f, ks[j]};
        EmxProposal p;
        cr_assert_eq(emx_agent_propose(l, N, &a, 1, 2, 0, work, &p), 0);
        cr_assert_eq(p.entropy_bits, log2((double)ks[j]), "k=%d: %.17g", ks[j], p.entropy_bits);
        cr_assert(p.token >= 0 && p.token < ks[j], "top-k of equal logits = the lowest ids");
    }
    const int others[] = {3, 5, 7, 100, 0};  // 0: top-k off, all N tokens
    for (size_t j = 0; j < sizeof others / sizeof others[0]; j++) {
        EmxAgentParams a = {1.0f, others[j]};
        EmxProposal p;
        cr_assert_eq(emx_agent_propose(l, N, &a, 1, 2, 0, work, &p), 0);
        double want = log2((double)(others[j] ? others[j] : N));
        // 1/k is rounded: a few ulps of the sum of k terms
        cr_assert(fabs(p.entropy_bits - want) <= 1e-14 * want, "k=%d: %.17g vs %.17g", others[j],
                  p.entropy_bits, want);
    }
}

Test(agents, greedy_has_zero_entropy_and_is_argmax) {
    enum { N = 1000 };
    float l[N];
    EmxCandidate work[N];
    random_logits(l, N, 1, 5.0f);
    const EmxAgentParams greedy[] = {{0.0f, 0}, {-1.0f, 50}, {0.7f, 1}, {NAN, 10}};
    for (size_t j = 0; j < 4; j++) {
        EmxProposal p;
        cr_assert_eq(emx_agent_propose(l, N, &greedy[j], 9, 3, 2, work, &p), 0);
        cr_assert_eq(p.entropy_bits, 0.0);
        cr_assert(!signbit(p.entropy_bits), "entropy of one token is +0");
        cr_assert_eq(p.token, emx_sample_argmax(l, N));
    }
}

Test(agents, two_points_closed_form) {
    EmxCandidate work[2];
    const float pairs[][3] = {{0.0f, 0.0f, 1.0f}, {1.0f, 0.0f, 1.0f}, {2.0f, -1.0f, 0.5f},
                              {-3.0f, 4.0f, 1.7f}, {10.0f, 9.0f, 2.0f}, {0.0f, 30.0f, 1.0f}};
    for (size_t j = 0; j < sizeof pairs / sizeof pairs[0]; j++) {
        float l[2] = {pairs[j][0], pairs[j][1]};
        float t = pairs[j][2];
        // p of the first token = 1 / (1 + e^{-(a-b)/T}); H = -p log2 p - (1-p) log2 (1-p)
        double p = 1.0 / (1.0 + exp(-((double)l[0] - l[1]) / t)), q = 1.0 - p;
        double want = (p > 0 ? -p * log2(p) : 0) + (q > 0 ? -q * log2(q) : 0);
        EmxAgentParams a = {t, 0};
        EmxProposal pr;
        cr_assert_eq(emx_agent_propose(l, 2, &a, 5, 6, 7, work, &pr), 0);
        // q = 1 - p loses relative precision when p is near 1: absolute bound on H (<= 1 bit)
        cr_assert(fabs(pr.entropy_bits - want) <= 1e-12, "pair %zu: %.17g vs %.17g", j,
                  pr.entropy_bits, want);
    }
    float eq[2] = {0.25f, 0.25f};
    EmxAgentParams a = {0.3f, 0};
    EmxProposal pr;
    emx_agent_propose(eq, 2, &a, 1, 1, 1, work, &pr);
    cr_assert_eq(pr.entropy_bits, 1.0, "two equal logits: exactly one bit");
}

Test(agents, entropy_matches_independent_reference) {
    enum { N = 2000 };
    float *l = malloc(sizeof(float) * N);
    EmxCandidate *work = malloc(sizeof(EmxCandidate) * N);
    const float temps[] = {0.05f, 0.3f, 0.7f, 1.0f, 1.3f, 2.0f};
    const int ks[] = {0, 2, 3, 17, 40, 100, 1999, 2000, 5000};
    int row = 0;
    for (size_t ti = 0; ti < 6; ti++)
        for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++, row++) {
            random_logits(l, N, (uint64_t)row, row % 2 ? 8.0f : 2.0f);
            if (row % 3 == 0) l[row] = l[row + 1];  // an exact tie somewhere
            EmxAgentParams a = {temps[ti], ks[ki]};
            EmxProposal p;
            cr_assert_eq(emx_agent_propose(l, N, &a, 11, (uint64_t)row, 0, work, &p), 0);
            double want = reference_entropy_bits(l, N, temps[ti], ks[ki]);
            // Two different double formulas over <= 2000 terms: a few 1e-15 relative each
            cr_assert(fabs(p.entropy_bits - want) <= 1e-11 * want + 1e-13,
                      "T=%g k=%d: %.17g vs %.17g", temps[ti], ks[ki], p.entropy_bits, want);
        }
    free(l);
    free(work);
}

Test(agents, token_is_emx_sample_with_lane_as_agent_index) {
    enum { N = 500, AGENTS = 8 };
    float l[N];
    EmxCandidate work[N];
    EmxAgentParams ag[AGENTS];
    EmxProposal pr[AGENTS];
    for (int row = 0; row < 50; row++) {
        random_logits(l, N, 1000 + (uint64_t)row, 4.0f);
        for (int i = 0; i < AGENTS; i++) {
            ag[i].temperature = 2.0f * emx_uniform_f32(5, (uint64_t)row, (uint32_t)i) + 0.01f;
            ag[i].top_k = (int)(emx_uniform_f32(6, (uint64_t)row, (uint32_t)i) * 101.0f);
        }
        uint64_t seed = 1234 + (uint64_t)row, step = 42 + (uint64_t)row;
        int w = emx_agents_choose(l, N, ag, AGENTS, seed, step, work, pr);
        cr_assert(w >= 0 && w < AGENTS);
        for (int i = 0; i < AGENTS; i++) {
            EmxSamplerParams sp = {.temperature = ag[i].temperature, .top_k = ag[i].top_k,
                                   .top_p = 1.0f, .min_p = 0.0f};
            int want = emx_sample(l, N, &sp, emx_uniform_f64(seed, step, (uint32_t)i), work);
            cr_assert_eq(pr[i].token, want, "row %d agent %d", row, i);
        }
    }
}

Test(agents, winner_is_argmin_ties_to_lower_index) {
    enum { N = 400, AGENTS = 8 };
    float l[N];
    EmxCandidate work[N];
    EmxAgentParams ag[AGENTS];
    EmxProposal pr[AGENTS];
    for (int row = 0; row < 40; row++) {
        random_logits(l, N, 2000 + (uint64_t)row, 3.0f);
        int na = 1 + row % AGENTS;
        for (int i = 0; i < na; i++) {
            ag[i].temperature = 0.2f + 1.8f * emx_uniform_f32(8, (uint64_t)row, (uint32_t)i);
            ag[i].top_k = 2 + (int)(emx_uniform_f32(9, (uint64_t)row, (uint32_t)i) * 99.0f);
        }
        if (row % 4 == 1 && na > 2) ag[na - 1] = ag[1];  // an exact entropy tie: index 1 wins it
        int w = emx_agents_choose(l, N, ag, na, 3, (uint64_t)row, work, pr);
        int want = 0;
        for (int i = 1; i < na; i++)
            if (pr[i].entropy_bits < pr[want].entropy_bits) want = i;
        cr_assert_eq(w, want, "row %d", row);
        for (int i = 0; i < na; i++) cr_assert(pr[w].entropy_bits <= pr[i].entropy_bits);
    }
    // Identical agents: the first.
    random_logits(l, N, 7, 3.0f);
    EmxAgentParams same[3] = {{0.9f, 30}, {0.9f, 30}, {0.9f, 30}};
    cr_assert_eq(emx_agents_choose(l, N, same, 3, 1, 1, work, pr), 0);
    cr_assert_eq(pr[0].entropy_bits, pr[2].entropy_bits);
    // A greedy agent always wins (entropy 0); among two greedy agents, the lower index.
    EmxAgentParams g[5] = {{1.0f, 2}, {0.01f, 2}, {0.0f, 0}, {1.0f, 1}, {0.5f, 0}};
    cr_assert_eq(emx_agents_choose(l, N, g, 5, 1, 1, work, pr), 2);
    cr_assert_eq(pr[2].token, emx_sample_argmax(l, N));
    cr_assert_eq(pr[3].entropy_bits, 0.0);
    cr_assert(pr[1].entropy_bits > 0.0, "T=0.01 over two tokens is not one-hot for these logits");
}

Test(agents, minus_inf_and_nan_never_proposed) {
    enum { N = 64, AGENTS = 6 };
    float l[N];
    EmxCandidate work[N];
    EmxProposal pr[AGENTS];
    EmxAgentParams ag[AGENTS] = {{2.0f, 0}, {1.0f, 0}, {1.5f, 60}, {0.0f, 0}, {1.0f, 3}, {2.0f, 1}};
    for (int row = 0; row < 200; row++) {
        random_logits(l, N, 3000 + (uint64_t)row, 0.5f);  // flat: every kept token is drawable
        for (int i = 0; i < N; i++)
            if (i % 3 != 0) l[i] = (i % 2) ? -INFINITY : NAN;  // 1 in 3 is a candidate
        if (row % 2) l[0] = 100.0f;  // a huge logit among them
        int w = emx_agents_choose(l, N, ag, AGENTS, 17, (uint64_t)row, work, pr);
        cr_assert(w >= 0);
        for (int i = 0; i < AGENTS; i++) {
            cr_assert(pr[i].token >= 0 && pr[i].token % 3 == 0, "row %d agent %d: token %d", row,
                      i, pr[i].token);
            cr_assert(isfinite(pr[i].entropy_bits) && pr[i].entropy_bits >= 0.0);
        }
    }
    for (int i = 0; i < N; i++) l[i] = (i % 2) ? -INFINITY : NAN;  // nothing to choose
    cr_assert_eq(emx_agents_choose(l, N, ag, AGENTS, 17, 1, work, pr), -1);
    for (int i = 0; i < AGENTS; i++) {
        cr_assert_eq(pr[i].token, -1);
        cr_assert(isnan(pr[i].entropy_bits));
    }
    EmxProposal p;
    cr_assert_eq(emx_agent_propose(l, 0, &ag[0], 1, 1, 0, work, &p), -1, "empty vocabulary");
    cr_assert_eq(p.token, -1);
}
