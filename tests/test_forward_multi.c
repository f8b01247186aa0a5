// test_forward_multi.c — several sequences in one step (forward.h emx_forward_multi) and the
// forward group that builds such steps from threads' own emx_forward calls (forward_group.h).
//
// emx_forward_multi: states at different positions with different histories, one row each;
// every state's logits, attention scores and new KV rows must be bitwise those of a twin state
// fed the same token alone (a matmul row's result does not depend on its batch). The group:
// threads generating through emx_generate on grouped states get the ids they get alone; a
// member that stops early releases the others; the steps really are batched (counted).
#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/forward.h"
#include "runtime/forward_group.h"
#include "runtime/generate.h"
#include "runtime/model.h"
#include "test_util.h"

#define N_ST 4
#define CTX 64
#define STEPS 3

static void open_model(EmxModel *m, const char *name) {
    char path[1024], rel[256], err[512];
    snprintf(rel, sizeof rel, "models/%s", name);
    test_build_path(path, sizeof path, rel);
    if (access(path, R_OK) != 0) cr_assert_fail("%s is missing: convert it with `make test-models`", path);
    cr_assert_eq(emx_model_open(m, path, err, sizeof err), 0, "%s", err);
}

static EmxState *new_state(const EmxModel *m, int threads) {
    char err[512];
    EmxState *s = emx_state_new(m, &(EmxStateOptions){.n_threads = threads, .ctx = CTX}, err, sizeof err);
    cr_assert(s, "%s", err);
    return s;
}

// State i's history: a prompt of 2 + 3i tokens (so the rows sit at different positions).
static int history(int i, int vocab, int *ids) {
    const int n = 2 + 3 * i;
    for (int j = 0; j < n; j++) ids[j] = (1 + 13 * i + 29 * j) % vocab;
    return n;
}

// Scores of the last position of s and t, [n_layers][n_heads][ctx] over keys 0..last: equal?
static int same_scores(const EmxModel *m, const EmxState *s, const EmxState *t) {
    int ls, lt;
    const float *a = emx_attention_scores(s, &ls), *b = emx_attention_scores(t, &lt);
    if (ls != lt) return 0;
    const size_t rows = (size_t)m->cfg.n_layers * m->cfg.n_heads;
    for (size_t r = 0; r < rows; r++)
        if (memcmp(a + r * CTX, b + r * CTX, (size_t)(ls + 1) * sizeof(float))) return 0;
    return 1;
}

// KV rows 0..last of every layer of s and t: equal?
static int same_kv(const EmxModel *m, EmxState *s, EmxState *t, int last) {
    float *ks, *vs, *kt, *vt;
    int kv;
    emx_state_kv_cache(s, &ks, &vs, &kv);
    emx_state_kv_cache(t, &kt, &vt, NULL);
    for (size_t l = 0; l < m->cfg.n_layers; l++) {
        const size_t at = l * CTX * (size_t)kv, bytes = (size_t)(last + 1) * kv * sizeof(float);
        if (memcmp(ks + at, kt + at, bytes) || memcmp(vs + at, vt + at, bytes)) return 0;
    }
    return 1;
}

static void multi_equals_single(const char *name) {
    EmxModel m;
    open_model(&m, name);
    const int vocab = (int)m.cfg.vocab_size;
    const size_t V = (size_t)vocab;
    EmxState *multi[N_ST], *twin[N_ST];
    int pos[N_ST], ids[64];
    for (int i = 0; i < N_ST; i++) {
        multi[i] = new_state(&m, 2);  // the batch runs on 2 threads, each twin alone on 1
        twin[i] = new_state(&m, 1);
        const int n = history(i, vocab, ids);
        cr_assert(emx_forward(multi[i], ids, n, 0));
        cr_assert(emx_forward(twin[i], ids, n, 0));
        pos[i] = n;
    }
    for (int step = 0; step < STEPS; step++) {
        // every step a different subset and order of the states, led by a different one
        EmxState *sts[N_ST], *tws[N_ST];
        int toks[N_ST], at[N_ST], n = 0;
        for (int k = 0; k < N_ST; k++) {
            const int i = (k + step) % N_ST;
            if (step == 1 && i == 2) continue;  // state 2 sits this step out
            sts[n] = multi[i], tws[n] = twin[i];
            toks[n] = (7 + 31 * i + 11 * step) % vocab, at[n] = pos[i];
            n++;
        }
        const float *lg[N_ST];
        cr_assert_eq(emx_forward_multi(sts, toks, at, n, lg), 0, "%s: %s", name, emx_state_error(sts[0]));
        for (int r = 0; r < n; r++) {
            const float *want = emx_forward(tws[r], &toks[r], 1, at[r]);
            cr_assert(want);
            cr_expect(memcmp(lg[r], want, V * sizeof(float)) == 0, "%s step %d row %d: logits differ", name, step, r);
            int last = -1;
            cr_expect(emx_attention_scores(sts[r], &last) && last == at[r], "%s: last_pos %d, want %d", name, last, at[r]);
            cr_expect(same_scores(&m, sts[r], tws[r]), "%s step %d row %d: attention scores differ", name, step, r);
            cr_expect(same_kv(&m, sts[r], tws[r], at[r]), "%s step %d row %d: KV cache differs", name, step, r);
        }
        for (int i = 0; i < N_ST; i++) pos[i] += !(step == 1 && i == 2);
    }
    for (int i = 0; i < N_ST; i++) emx_state_free(multi[i]), emx_state_free(twin[i]);
    emx_model_close(&m);
}

Test(forward_multi, equals_single_stories260K_f32, .timeout = 120) { multi_equals_single("stories260K.f32.bin"); }
Test(forward_multi, equals_single_stories260K_q8, .timeout = 120) { multi_equals_single("stories260K.q8.bin"); }
Test(forward_multi, equals_single_qwen3_q8, .timeout = 120) { multi_equals_single("qwen3-tiny.q8.bin"); }
Test(forward_multi, equals_single_qwen3_q4, .timeout = 120) { multi_equals_single("qwen3-tiny.q4.bin"); }
Test(forward_multi, equals_single_llama3_q8, .timeout = 120) { multi_equals_single("llama3-tiny.q8.bin"); }
Test(forward_multi, equals_single_llama3_q4, .timeout = 120) { multi_equals_single("llama3-tiny.q4.bin"); }

// Bad calls are refused whole, with a reason, and run nothing.
Test(forward_multi, refuses_bad_calls, .timeout = 120) {
    EmxModel m, other;
    open_model(&m, "stories260K.f32.bin");
    open_model(&other, "qwen3-tiny.q8.bin");
    EmxState *a = new_state(&m, 1), *b = new_state(&m, 1), *c = new_state(&other, 1);
    const int t0[] = {1, 2, 3};
    cr_assert(emx_forward(a, t0, 3, 0));
    cr_assert(emx_forward(b, t0, 3, 0));
    const float *lg[2];
    int last;
    EmxState *mixed[] = {a, c}, *twice[] = {a, a}, *ok[] = {a, b};
    const int toks[] = {5, 6}, at[] = {3, 3};
    cr_expect_eq(emx_forward_multi(mixed, toks, at, 2, lg), -1);
    cr_expect(strstr(emx_state_error(a), "different models"), "%s", emx_state_error(a));
    cr_expect_eq(emx_forward_multi(twice, toks, at, 2, lg), -1);
    cr_expect(strstr(emx_state_error(a), "twice"), "%s", emx_state_error(a));
    const int bad_tok[] = {5, 1 << 20}, bad_pos[] = {3, CTX};
    cr_expect_eq(emx_forward_multi(ok, bad_tok, at, 2, lg), -1);
    cr_expect_eq(emx_forward_multi(ok, toks, bad_pos, 2, lg), -1);
    cr_expect(strstr(emx_state_error(a), "out of range"), "%s", emx_state_error(a));
    cr_expect_eq(emx_forward_multi(ok, toks, at, 0, lg), -1);
    emx_attention_scores(a, &last);
    cr_expect_eq(last, 2, "a refused call ran state a (last_pos %d)", last);
    emx_attention_scores(b, &last);
    cr_expect_eq(last, 2, "a refused call ran state b (last_pos %d)", last);
    emx_state_free(a), emx_state_free(b), emx_state_free(c);
    emx_model_close(&m), emx_model_close(&other);
}

// ---------------------------------------------------------------------------------------------
// The group.

typedef struct {
    EmxState *st;
    int token0, pos0, n_steps;  // one-token steps: token0 + k at pos0 + k
    int bad_step;               // that step's token is out of range (vocab); -1: none
    EmxForwardGroup *g;
    int leave_when_waiting;     // leave once that many rows of the others wait for this member
    float *logits;              // [n_steps][vocab] what each step returned (-1e30 first: refused)
    size_t vocab;
} Stepper;

static void *stepper_main(void *arg) {
    Stepper *p = arg;
    for (int k = 0; k < p->n_steps; k++) {
        const int t = k == p->bad_step ? (int)p->vocab : p->token0 + k;
        const float *lg = emx_forward(p->st, &t, 1, p->pos0 + k);
        if (lg) memcpy(p->logits + k * p->vocab, lg, p->vocab * sizeof(float));
        else p->logits[k * p->vocab] = -1e30f;  // marks a refused step
    }
    // the others' next rows wait for this member (it holds the step) until it leaves: leaving
    // must wake them. Polled, not timed: the count is reached whatever the machine's speed.
    for (EmxForwardGroupStats st = {0}; emx_forward_group_stats(p->g, &st), st.waiting < p->leave_when_waiting;)
        sched_yield();
    emx_forward_group_leave(p->st);
    return NULL;
}

// Three members that joined together, then step on their own threads: every step holds all
// members still in the group (they never prefill), so the counts are exact: 5 steps, 3 + 3 + 3
// + 2 + 2 rows (the member of 3 steps leaves and must release the others), and every row's
// logits are those of its twin alone. Member 0's first token is out of range: the batched step
// refuses, each row then runs alone, member 0 gets NULL and the others their logits.
Test(forward_group, steps_batch_rows_and_leaving_releases, .timeout = 120) {
    EmxModel m;
    open_model(&m, "qwen3-tiny.q4.bin");
    const size_t V = m.cfg.vocab_size;
    char err[256];
    EmxForwardGroup *g = emx_forward_group_new(4, err, sizeof err);
    cr_assert(g, "%s", err);
    const int n_steps[3] = {5, 3, 5};
    Stepper p[3];
    EmxState *twin[3];
    pthread_t th[3];
    int ids[64];
    for (int i = 0; i < 3; i++) {
        const int n = history(i, (int)V, ids);
        p[i] = (Stepper){new_state(&m, 1), 40 + i, n, n_steps[i], i == 0 ? 0 : -1, g, i == 1 ? 2 : 0,
                         malloc(n_steps[i] * V * sizeof(float)), V};
        twin[i] = new_state(&m, 1);
        cr_assert(emx_forward(p[i].st, ids, n, 0) && emx_forward(twin[i], ids, n, 0));
        cr_assert_eq(emx_forward_group_join(g, p[i].st, err, sizeof err), 0, "%s", err);
    }
    cr_expect_eq(emx_forward_group_join(g, p[0].st, err, sizeof err), -1);
    cr_expect(strstr(err, "already in a group"), "%s", err);
    for (int i = 0; i < 3; i++) cr_assert_eq(pthread_create(&th[i], NULL, stepper_main, &p[i]), 0);
    for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
    EmxForwardGroupStats st;
    emx_forward_group_stats(g, &st);
    cr_expect_eq(st.members, 0);
    cr_expect(st.steps == 5 && st.rows == 13, "%ld steps, %ld rows: want 5 and 13", st.steps, st.rows);
    for (int i = 0; i < 3; i++) {
        for (int k = 0; k < p[i].n_steps; k++) {
            const int t = k == p[i].bad_step ? (int)V : p[i].token0 + k;
            const float *want = emx_forward(twin[i], &t, 1, p[i].pos0 + k);
            if (!want) {
                cr_expect(i == 0 && k == 0 && p[i].logits[0] == -1e30f, "member %d step %d", i, k);
                continue;
            }
            cr_expect(memcmp(p[i].logits + k * V, want, V * sizeof(float)) == 0, "member %d step %d: logits differ", i, k);
        }
        emx_state_free(p[i].st), emx_state_free(twin[i]), free(p[i].logits);
    }
    emx_forward_group_free(g);
    emx_model_close(&m);
}

Test(forward_group, join_refuses_a_full_group, .timeout = 60) {
    EmxModel m;
    open_model(&m, "stories260K.f32.bin");
    char err[256];
    EmxForwardGroup *g = emx_forward_group_new(1, err, sizeof err);
    cr_assert(g, "%s", err);
    EmxState *a = new_state(&m, 1), *b = new_state(&m, 1);
    cr_assert_eq(emx_forward_group_join(g, a, err, sizeof err), 0, "%s", err);
    cr_expect_eq(emx_forward_group_join(g, b, err, sizeof err), -1);
    cr_expect(strstr(err, "full (1 members)"), "%s", err);
    emx_state_free(a);  // leaves the group on its way out
    EmxForwardGroupStats st;
    emx_forward_group_stats(g, &st);
    cr_expect_eq(st.members, 0);
    cr_expect_eq(emx_forward_group_join(g, b, err, sizeof err), 0, "%s", err);
    emx_forward_group_free(g);  // lets b go
    const int t[] = {1, 2};
    cr_expect(emx_forward(b, t, 2, 0), "b runs on its own after its group is gone");
    emx_state_free(b);
    emx_model_close(&m);
    cr_expect_null(emx_forward_group_new(0, err, sizeof err));
}

// Generations through emx_generate (prefill alone, decode in the group, seeded sampling).
typedef struct {
    const EmxModel *m;
    EmxTokenizer *tk;
    EmxState *st;
    EmxForwardGroup *g;         // NULL: alone
    const int *prompt;
    int n_prompt, n_predict;
    uint64_t seed;
    int ids[64], n_ids, rc;
    char err[256];
} GenJob;

static void *gen_main(void *arg) {
    GenJob *j = arg;
    EmxBasicSampler bs;
    const int nv = emx_tokenizer_n_vocab(j->tk);
    EmxSamplerParams sp = {.temperature = 1.0f};
    j->rc = emx_basic_sampler_init(&bs, &sp, j->seed, nv, j->err, sizeof j->err);
    if (j->rc) return NULL;
    EmxGenerateOptions go = {.n_predict = j->n_predict, .ignore_stop = 1, .ids_out = j->ids, .ids_cap = 64};
    EmxGenerateStats stats;
    j->rc = emx_generate(j->st, j->tk, j->prompt, j->n_prompt, &bs.base, &go, &stats, j->err, sizeof j->err);
    j->n_ids = stats.n_generated;
    if (j->g) emx_forward_group_leave(j->st);
    emx_basic_sampler_free(&bs);
    return NULL;
}

static void run_gens(GenJob *jobs, int n) {
    char err[256];
    pthread_t th[4];
    for (int i = 0; i < n; i++)  // a server's slot joins as its generation starts
        if (jobs[i].g) cr_assert_eq(emx_forward_group_join(jobs[i].g, jobs[i].st, err, sizeof err), 0, "%s", err);
    for (int i = 0; i < n; i++) cr_assert_eq(pthread_create(&th[i], NULL, gen_main, &jobs[i]), 0);
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < n; i++) cr_assert_eq(jobs[i].rc, 0, "job %d: %s", i, jobs[i].err);
}

static void grouped_generations(const char *name, int n_members) {
    EmxModel m;
    open_model(&m, name);
    char err[256];
    EmxTokenizer *tk = emx_tokenizer_new(&m.tok, err, sizeof err);
    cr_assert(tk, "%s", err);
    static int prompts[3][16];
    const int n_prompt[3] = {5, 9, 2}, n_predict[3] = {20, 4, 16};  // member 1 leaves early
    GenJob alone[3], grouped[3];
    EmxForwardGroup *g = emx_forward_group_new(n_members, err, sizeof err);
    cr_assert(g, "%s", err);
    for (int i = 0; i < n_members; i++) {
        for (int k = 0; k < n_prompt[i]; k++) prompts[i][k] = (3 + 17 * i + 5 * k) % (int)m.cfg.vocab_size;
        alone[i] = (GenJob){.m = &m, .tk = tk, .st = new_state(&m, 1), .prompt = prompts[i], .n_prompt = n_prompt[i],
                            .n_predict = n_predict[i], .seed = 100 + (uint64_t)i};
        grouped[i] = alone[i];
        grouped[i].st = new_state(&m, 1), grouped[i].g = g;
    }
    run_gens(alone, n_members);
    run_gens(grouped, n_members);
    long want_rows = 0;
    EmxForwardGroupStats st;
    emx_forward_group_stats(g, &st);
    for (int i = 0; i < n_members; i++) {
        cr_expect_eq(grouped[i].n_ids, n_predict[i]);
        cr_expect_eq(grouped[i].n_ids, alone[i].n_ids);
        cr_expect_arr_eq(grouped[i].ids, alone[i].ids, sizeof(int) * (size_t)alone[i].n_ids,
                         "%s member %d: the grouped ids differ from alone", name, i);
        want_rows += n_predict[i] - 1;  // every token but the last is fed back, one at a time
        emx_state_free(alone[i].st), emx_state_free(grouped[i].st);
    }
    cr_expect_eq(st.rows, want_rows, "%ld rows ran in the group, want %ld", st.rows, want_rows);
    cr_expect(st.steps >= 1 && st.steps <= st.rows);
    // not exclusive: the prefills ran on the members' threads, the steps on the group's
    cr_expect_eq(st.passes_elsewhere, st.prefills, "%ld of %ld prefills on members' threads", st.passes_elsewhere,
                 st.prefills);
    emx_forward_group_free(g);
    emx_tokenizer_free(tk);
    emx_model_close(&m);
}

Test(forward_group, generate_same_ids_stories260K_q8, .timeout = 120) { grouped_generations("stories260K.q8.bin", 3); }
Test(forward_group, generate_same_ids_llama3_q4, .timeout = 120) { grouped_generations("llama3-tiny.q4.bin", 3); }
Test(forward_group, generate_group_of_one, .timeout = 120) { grouped_generations("qwen3-tiny.q8.bin", 1); }

// One pass at a time (emx_forward_group_set_exclusive): member A's row waits for member B, and B
// then runs a prefill. In an exclusive group A's step does not run beside it: when the prefill
// returns no step has run (B holds the step again and has not submitted: that is exact, not
// timed), and no pass ever started while another ran. Then B's and A's rows batch, and A's last
// row runs alone once B has left: 4 steps, 3 + 3 rows + 1. Without the rule, B's prefill lets
// A's step run at once, beside it. B's prefill runs on the group's thread, as the steps do.
Test(forward_group, exclusive_prefill_runs_alone, .timeout = 120) {
    EmxModel m;
    open_model(&m, "llama3-tiny.q8.bin");
    const size_t V = m.cfg.vocab_size;
    char err[256];
    EmxForwardGroup *g = emx_forward_group_new(2, err, sizeof err);
    cr_assert(g, "%s", err);
    emx_forward_group_set_exclusive(g, 1);
    int ids[64];
    const int na = history(0, (int)V, ids);
    Stepper a = {new_state(&m, 1), 40, na, 4, -1, g, 0, malloc(4 * V * sizeof(float)), V};
    EmxState *b = new_state(&m, 1);
    cr_assert(emx_forward(a.st, ids, na, 0));
    cr_assert_eq(emx_forward_group_join(g, a.st, err, sizeof err), 0, "%s", err);
    cr_assert_eq(emx_forward_group_join(g, b, err, sizeof err), 0, "%s", err);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, stepper_main, &a), 0);
    EmxForwardGroupStats st = {0};
    while (emx_forward_group_stats(g, &st), st.waiting < 1) sched_yield();  // A's row waits for B
    const int nb = history(1, (int)V, ids);
    cr_assert(emx_forward(b, ids, nb, 0), "B's prefill");
    emx_forward_group_stats(g, &st);
    cr_expect(st.steps == 0 && st.prefills == 1, "after B's prefill: %ld steps, %ld prefills", st.steps, st.prefills);
    for (int k = 0; k < 3; k++) {
        const int t = 50 + k;
        cr_assert(emx_forward(b, &t, 1, nb + k));
    }
    emx_forward_group_leave(b);
    pthread_join(th, NULL);
    emx_forward_group_stats(g, &st);
    cr_expect(st.steps == 4 && st.rows == 7, "%ld steps, %ld rows: want 4 and 7", st.steps, st.rows);
    cr_expect_eq(st.overlaps, 0, "a pass started beside another %ld times", st.overlaps);
    // every pass on the group's own thread (one OpenMP team), B's prefill included
    cr_expect_eq(st.passes_elsewhere, 0, "%ld passes ran on members' threads", st.passes_elsewhere);
    emx_state_free(a.st), emx_state_free(b), free(a.logits);
    emx_forward_group_free(g);
    emx_model_close(&m);
}
