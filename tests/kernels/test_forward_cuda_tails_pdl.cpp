// test_forward_cuda_tails_pdl.cpp — the other tails of a step (runtime/cuda/forward_cuda_tail.c)
// with programmatic dependent launch against the same calls with EMX_CUDA_PDL=0, whole models on
// emulated cuda:0: a pool round's ban and proposals (emx_forward_propose), a lookahead round's feed
// and branch proposals (emx_forward_lookahead_propose), a branch pass's proposals
// (emx_forward_branches_propose) and the critic's logit pair (emx_forward_pair).
//
// Three states of one model: EMX_CUDA_PDL=0 (the reference: plain launches), PDL on through the
// captured graphs, PDL on through direct launches. Every call's result — each proposal's token and
// entropy, the pair's two logits, max and sum — bitwise the reference's. The emulator runs a
// programmatic launch's blocks up to their emx_pdl_wait before the kernel before it ends
// (tests/cuda_emu/src/launch_ex.cpp), so a tail kernel that read its input before its wait would
// see the previous call's logits, proposals or partials and differ.
// Also counted there: with PDL every tail kernel of a call is a programmatic launch but a lookahead
// round's first feed, which follows the copy of the branch passes' inputs (one a round); none with
// EMX_CUDA_PDL=0; the graph and the direct launches make as many; and a captured graph has a
// programmatic edge for each programmatic launch (none follows a copy or a memset).
// Vocabularies: stories260K's 512 (one block per agent), Qwen3's 151,936 and Gemma 3's 262,144
// (the many-block passes, sampling_mb.cuh, before the agents' blocks).
#include <string.h>

#include <set>
#include <vector>

#include "kb_util.h"
#include "pdl_test_util.h"

namespace {

// The agents' kernels and their many-block passes (kernels/sampling/agent_pool.cu), the pair's.
const std::initializer_list<const char *> AGENT_KERNELS = {"ban_token_kernel", "agents_", "mb_"};
const std::initializer_list<const char *> PAIR_KERNELS = {"logit_pair_kernel"};

const int kAgents = 3, kSteps = 3;  // a lookahead round: kSteps steps of kAgents branches
const EmxAgentParams kParams[kAgents] = {{0.0f, 0}, {0.9f, 22}, {1.2f, 40}};
const char *const kWhat[3] = {"off", "graph", "direct launches"};

struct Trio {
    EmxModel m;
    EmxState *s[3];  // off, graph, direct launches
    int vocab;
};

// The three states of name, branches reserved for a lookahead round, the prompt fed.
bool open_trio(const char *name, Trio *t, int ctx, int prompt) {
    if (!open_test_model(name, &t->m)) return false;
    t->vocab = (int)t->m.cfg.vocab_size;
    t->s[0] = state_pdl(&t->m, "0", ctx, 0, nullptr);
    t->s[1] = state_pdl(&t->m, nullptr, ctx, 0, t->s[0]);
    t->s[2] = state_pdl(&t->m, nullptr, ctx, 1, t->s[0]);
    std::vector<int> toks(prompt);
    for (int i = 0; i < prompt; i++) toks[i] = (5 + 31 * i) % t->vocab;
    char err[256];
    for (EmxState *s : t->s) {
        cr_assert_eq(emx_state_branches_reserve(s, kAgents, kSteps - 1, err, sizeof err), 0, "%s", err);
        cr_assert(emx_forward(s, toks.data(), prompt, 0), "%s", emx_state_error(s));
    }
    return true;
}

void close_trio(Trio *t) {
    for (EmxState *s : t->s) emx_state_free(s);
    emx_model_close(&t->m);
}

void expect_same_proposals(const char *name, const char *call, int k, int at, const EmxProposal *want,
                           const EmxProposal *got, int n) {
    for (int i = 0; i < n; i++) {
        cr_assert_eq(got[i].token, want[i].token, "%s %s at %d, PDL (%s): proposal %d token %d, off %d", name, call,
                     at, kWhat[k], i, got[i].token, want[i].token);
        cr_assert(memcmp(&got[i].entropy_bits, &want[i].entropy_bits, sizeof(double)) == 0,
                  "%s %s at %d, PDL (%s): proposal %d entropy %.17g, off %.17g", name, call, at, kWhat[k], i,
                  got[i].entropy_bits, want[i].entropy_bits);
    }
}

// The counts of one call on the three states: none programmatic off; with PDL all of the tail's
// kernels that ran (tail > 0) but `plain` of them; as many programmatic launches both ways when the
// two take the same path (`same_path`: not emx_forward_pair's one row, a decode step when direct,
// a pass of the pair's graphs when captured); when `captured` (the graph was made by this call) an
// edge for each of the graph's programmatic launches.
void expect_counts(const char *name, const char *call, const PdlCounts *used, long plain, bool same_path,
                   bool captured) {
#ifdef ENTROPIX_CUDA_EMU
    cr_assert_eq(used[0].pdl, 0, "%s %s: EMX_CUDA_PDL=0 made %ld programmatic launches", name, call, used[0].pdl);
    for (int k = 1; k < 3; k++) {
        cr_assert_gt(used[k].tail, 0, "%s %s: no tail kernel ran", name, call);
        cr_assert_eq(used[k].tail_pdl, used[k].tail - plain, "%s %s: PDL (%s): %ld of the tail's %ld kernels programmatic",
                     name, call, kWhat[k], used[k].tail_pdl, used[k].tail);
    }
    if (same_path)
        cr_assert_eq(used[2].pdl, used[1].pdl, "%s %s: direct launches: %ld programmatic, the graph %ld", name, call,
                     used[2].pdl, used[1].pdl);
    if (captured)
        cr_assert_eq(used[1].edges, used[1].pdl, "%s %s: %ld programmatic edges for %ld programmatic launches", name,
                     call, used[1].edges, used[1].pdl);
#else
    (void)name, (void)call, (void)used, (void)plain, (void)same_path, (void)captured;
#endif
}

// The greedy agent's (kParams[0]) choice for token at pos: a round without a ban on the reference
// state (the rounds that follow at pos write the same row again). Banned, it changes every agent's
// distribution: a proposal made from the row before the ban was written would differ.
int greedy_choice(Trio *t, int token, int pos, uint64_t seed, uint32_t lane, EmxProposal *scratch) {
    cr_assert_eq(emx_forward_propose(t->s[0], token, pos, kParams, kAgents, seed, pos + 1, lane, -1, scratch), 1, "%s",
                 emx_state_error(t->s[0]));
    return scratch[0].token;
}

void expect_not_banned(const char *name, const char *call, int pos, int ban, EmxProposal (*out)[kSteps * kAgents]) {
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < kAgents; i++)
            cr_assert(ban < 0 || out[k][i].token != ban, "%s %s at %d (%s): agent %d proposed the banned %d", name, call,
                      pos, kWhat[k], i, ban);
}

// `rounds` pool rounds from pos (every other one banning the greedy choice), then as many
// lookahead rounds after them (the same), each committing one branch on every state, then a
// branch pass's proposals at the end.
void agents_equal_pdl_off(const char *name, int rounds) {
    const int prompt = 4, ctx = prompt + rounds * (1 + kSteps) + kSteps + 2;
    Trio t;
    if (!open_trio(name, &t, ctx, prompt)) cr_skip_test("build/models/%s missing (make test-models)", name);
    EmxProposal out[3][kSteps * kAgents];
    PdlCounts used[3];
    int pos = prompt, token = 7 % t.vocab;
    for (int r = 0; r < rounds; r++, pos++) {
        const int ban = r % 2 ? greedy_choice(&t, token, pos, 42, 2, out[0]) : -1;
        for (int k = 0; k < 3; k++) {
            const PdlCounts before = pdl_counts_now(AGENT_KERNELS);
            cr_assert_eq(emx_forward_propose(t.s[k], token, pos, kParams, kAgents, 42, pos + 1, 2, ban, out[k]), 1,
                         "%s", emx_state_error(t.s[k]));
            used[k] = pdl_counts_now(AGENT_KERNELS) - before;
        }
        for (int k = 1; k < 3; k++) expect_same_proposals(name, "forward_propose", k, pos, out[0], out[k], kAgents);
        expect_not_banned(name, "forward_propose", pos, ban, out);
        expect_counts(name, "forward_propose", used, 0, true, r == 0);
        token = out[0][0].token >= 0 ? out[0][0].token : 1;
    }
    for (int r = 0; r < rounds; r++, pos += kSteps) {
        const int ban = r % 2 ? -1 : greedy_choice(&t, token, pos, 43, 1, out[0]);
        for (int k = 0; k < 3; k++) {
            const PdlCounts before = pdl_counts_now(AGENT_KERNELS);
            cr_assert_eq(emx_forward_lookahead_propose(t.s[k], token, pos, kParams, kAgents, 43, pos + 1, 1, ban,
                                                       kSteps, out[k]),
                         1, "%s", emx_state_error(t.s[k]));
            used[k] = pdl_counts_now(AGENT_KERNELS) - before;
            cr_assert_eq(emx_branch_commit(t.s[k], r % kAgents, kSteps - 1, pos + 1), 0, "%s", emx_state_error(t.s[k]));
        }
        for (int k = 1; k < 3; k++)
            expect_same_proposals(name, "forward_lookahead_propose", k, pos, out[0], out[k], kSteps * kAgents);
        expect_not_banned(name, "forward_lookahead_propose", pos, ban, out);
        expect_counts(name, "forward_lookahead_propose", used, 1, true, r == 0);  // the first feed follows a copy
        const EmxProposal &last = out[0][(kSteps - 1) * kAgents + r % kAgents];
        token = last.token >= 0 ? last.token : 1;
    }
    int fed[kAgents];
    for (int step = 0; step < kSteps - 1; step++) {  // branches after the committed rows 0..pos-1
        for (int b = 0; b < kAgents; b++) fed[b] = step ? (out[0][b].token >= 0 ? out[0][b].token : 0) : token;
        for (int k = 0; k < 3; k++) {
            const PdlCounts before = pdl_counts_now(AGENT_KERNELS);
            cr_assert_eq(emx_forward_branches_propose(t.s[k], fed, kAgents, pos, step, kParams, 44, pos + step, 0,
                                                      out[k]),
                         1, "%s", emx_state_error(t.s[k]));
            used[k] = pdl_counts_now(AGENT_KERNELS) - before;
        }
        for (int k = 1; k < 3; k++) expect_same_proposals(name, "branches_propose", k, step, out[0], out[k], kAgents);
        expect_counts(name, "branches_propose", used, 0, true, false);
    }
    close_trio(&t);
}

// Pair calls: a suffix, a rollback (the same row count replayed elsewhere), one row (the decode
// step's graph), two chunks (17 rows), a short one again.
struct PairCall {
    int n, pos;
};
const PairCall kPairCalls[] = {{5, 4}, {5, 6}, {1, 11}, {17, 12}, {3, 29}, {1, 32}};

// Bitwise, field by field: the struct's padding (after `max`) holds whatever its bytes held.
bool same_pair(const EmxLogitPair &a, const EmxLogitPair &b) {
    return memcmp(&a.logit_a, &b.logit_a, 4) == 0 && memcmp(&a.logit_b, &b.logit_b, 4) == 0 &&
           memcmp(&a.max, &b.max, 4) == 0 && memcmp(&a.sum, &b.sum, 8) == 0;
}

void pair_equals_pdl_off(const char *name) {
    Trio t;
    if (!open_trio(name, &t, 40, 4)) cr_skip_test("build/models/%s missing (make test-models)", name);
    const int id_a = 3 % t.vocab, id_b = 1001 % t.vocab;
    std::set<int> captured;
    for (const PairCall &c : kPairCalls) {
        std::vector<int> toks(c.n);
        for (int i = 0; i < c.n; i++) toks[i] = (int)((i * 7919u + c.pos * 104729u + 13u) % (unsigned)t.vocab);
        EmxLogitPair got[3];
        PdlCounts used[3];
        for (int k = 0; k < 3; k++) {
            const PdlCounts before = pdl_counts_now(PAIR_KERNELS);
            cr_assert_eq(emx_forward_pair(t.s[k], toks.data(), c.n, c.pos, id_a, id_b, &got[k]), 0, "%s",
                         emx_state_error(t.s[k]));
            used[k] = pdl_counts_now(PAIR_KERNELS) - before;
        }
        for (int k = 1; k < 3; k++)
            cr_assert(same_pair(got[k], got[0]),
                      "%s: %d rows at %d, PDL (%s): logits %.9g %.9g max %.9g sum %.17g, off %.9g %.9g %.9g %.17g",
                      name, c.n, c.pos, kWhat[k], got[k].logit_a, got[k].logit_b, got[k].max, got[k].sum,
                      got[0].logit_a, got[0].logit_b, got[0].max, got[0].sum);
        expect_counts(name, "forward_pair", used, 0, c.n > 1, captured.insert(c.n).second);
    }
    close_trio(&t);
}

}  // namespace

Test(forward_cuda_tails_pdl, stories260K_agents_equal_pdl_off, .timeout = 900) {
    agents_equal_pdl_off("stories260K.q8.bin", 3);
}
Test(forward_cuda_tails_pdl, stories260K_pair_equals_pdl_off, .timeout = 900) {
    pair_equals_pdl_off("stories260K.q8.bin");
}

// Names matched by the Makefile's EMU_FORWARD_ONLY (qwen3, gemma3): the reverse-schedule pass
// skips them.
Test(forward_cuda_tails_pdl, qwen3_agents_equal_pdl_off, .timeout = 900) { agents_equal_pdl_off("qwen3-tiny.q8.bin", 1); }
Test(forward_cuda_tails_pdl, qwen3_pair_equals_pdl_off, .timeout = 900) { pair_equals_pdl_off("qwen3-tiny.q8.bin"); }
Test(forward_cuda_tails_pdl, gemma3_agents_equal_pdl_off, .timeout = 900) {
    agents_equal_pdl_off("gemma3-tiny.q8.bin", 1);
}
Test(forward_cuda_tails_pdl, gemma3_pair_equals_pdl_off, .timeout = 900) { pair_equals_pdl_off("gemma3-tiny.q8.bin"); }
