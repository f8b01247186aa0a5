// test_eval_summary.c — eval's summary (tools/eval/summary.h) on a hand-written task file and
// hand-made generations, written with eval_results_add and read back from the results file as a
// rerun reads them: the trivial baselines (mode with its tie rule and numbers by value,
// first-option, always-1, a task file's own), the distinct prompts and the sign test over units
// of identical prompts, the oracle over candidate paths, the AUROC of the answer margin and of
// the entropy, the share of tokens not the argmax and the open-ended metrics. Every expected
// number is worked out by hand in the comments. Then the keys of a results line and of --json
// from build/tools/eval on stories260K.
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run_util.h"
#include "test_util.h"
#include "tools/eval/checks.h"
#include "tools/eval/config.h"
#include "tools/eval/report.h"
#include "tools/eval/results.h"
#include "tools/eval/summary.h"
#include "tools/eval/tasks.h"

// fam: numbers (q4's "07" is the value 7: the mode is 7, three times); q1, q2 declare a baseline
// "echo" answering "p". ch: choices. tie: two answers once each (the mode is the first, "x").
// dup: d1-d3 one prompt, d4 another, d5-d6 a third. op: open-ended.
static const char TASKS[] =
    "{\"id\":\"q1\",\"family\":\"fam\",\"prompt\":\"p1\",\"answer\":1,\"check\":\"number\",\"baselines\":{\"echo\":\"p\"}}\n"
    "{\"id\":\"q2\",\"family\":\"fam\",\"prompt\":\"p2\",\"answer\":7,\"check\":\"number\",\"baselines\":{\"echo\":\"p\"}}\n"
    "{\"id\":\"q3\",\"family\":\"fam\",\"prompt\":\"p3\",\"answer\":7,\"check\":\"number\"}\n"
    "{\"id\":\"q4\",\"family\":\"fam\",\"prompt\":\"p4\",\"answer\":\"07\",\"check\":\"number\"}\n"
    "{\"id\":\"c1\",\"family\":\"ch\",\"prompt\":\"#1 A) x B) y C) z\",\"answer\":\"B\",\"check\":\"choice\"}\n"
    "{\"id\":\"c2\",\"family\":\"ch\",\"prompt\":\"#2 A) x B) y C) z\",\"answer\":\"B\",\"check\":\"choice\"}\n"
    "{\"id\":\"c3\",\"family\":\"ch\",\"prompt\":\"#3 A) x B) y C) z\",\"answer\":\"A\",\"check\":\"choice\"}\n"
    "{\"id\":\"c4\",\"family\":\"ch\",\"prompt\":\"#4 A) x B) y C) z\",\"answer\":\"C\",\"check\":\"choice\"}\n"
    "{\"id\":\"t1\",\"family\":\"tie\",\"prompt\":\"t1\",\"answer\":\"x\",\"check\":\"exact\"}\n"
    "{\"id\":\"t2\",\"family\":\"tie\",\"prompt\":\"t2\",\"answer\":\"y\",\"check\":\"exact\"}\n"
    "{\"id\":\"d1\",\"family\":\"dup\",\"prompt\":\"same\",\"answer\":\"s\",\"check\":\"exact\"}\n"
    "{\"id\":\"d2\",\"family\":\"dup\",\"prompt\":\"same\",\"answer\":\"s\",\"check\":\"exact\"}\n"
    "{\"id\":\"d3\",\"family\":\"dup\",\"prompt\":\"same\",\"answer\":\"s\",\"check\":\"exact\"}\n"
    "{\"id\":\"d4\",\"family\":\"dup\",\"prompt\":\"other\",\"answer\":\"s\",\"check\":\"exact\"}\n"
    "{\"id\":\"d5\",\"family\":\"dup\",\"prompt\":\"twin\",\"answer\":\"a\",\"check\":\"exact\"}\n"
    "{\"id\":\"d6\",\"family\":\"dup\",\"prompt\":\"twin\",\"answer\":\"b\",\"check\":\"exact\"}\n"
    "{\"id\":\"o1\",\"family\":\"op\",\"prompt\":\"story\",\"check\":\"open\"}\n";

// One generation: config 0 greedy / 1 combined, its text, and (margin not NaN) a one-token trace
// of that margin and entropy covering the whole text; paths: candidate texts.
typedef struct {
    const char *id;
    int config, seed;
    const char *text;
    double margin, entropy;
    int not_argmax;
    const char *paths[3];
} Gen;

#define NO NAN
static const Gen GENS[] = {
    // fam: greedy 1,0,1,0 (q2 "3" and q4 "5" wrong)
    {"q1", 0, 0, "1", 0.5, 1.0, 0, {0}}, {"q2", 0, 0, "3", 0.5, 1.0, 0, {0}},
    {"q3", 0, 0, "7", 0.5, 1.0, 0, {0}}, {"q4", 0, 0, "5", 0.5, 1.0, 0, {0}},
    // combined seed 0: q1 wrong, q2-q4 right; seed 1: q1, q3 right. Margins of the right ones
    // {0.9, 0.5, 0.5, 0.5, 0.8}, of the wrong ones {0.2, 0.5, 0.1}; entropies of the right ones
    // {1, 2, 2, 2, 1.5}, of the wrong ones {3, 2, 0.5}. q1 s0 has paths one of which is right,
    // q2 s0 paths none of which is.
    {"q1", 1, 0, "2", 0.2, 3.0, 1, {"x", "1", NULL}}, {"q2", 1, 0, "7", 0.9, 1.0, 0, {"5", "six", NULL}},
    {"q3", 1, 0, "7", 0.5, 2.0, 0, {0}}, {"q4", 1, 0, "7", 0.5, 2.0, 0, {0}},
    {"q1", 1, 1, "1", 0.5, 2.0, 0, {0}}, {"q2", 1, 1, "0", 0.5, 2.0, 1, {0}},
    {"q3", 1, 1, "7", 0.8, 1.5, 0, {0}}, {"q4", 1, 1, "9", 0.1, 0.5, 0, {0}},
    // ch: greedy B A A A (1,0,1,0); combined B always (1,1,0,0)
    {"c1", 0, 0, "B", NO, 0, 0, {0}}, {"c2", 0, 0, "A", NO, 0, 0, {0}}, {"c3", 0, 0, "A", NO, 0, 0, {0}},
    {"c4", 0, 0, "A", NO, 0, 0, {0}}, {"c1", 1, 0, "B", NO, 0, 0, {0}}, {"c2", 1, 0, "B", NO, 0, 0, {0}},
    {"c3", 1, 0, "B", NO, 0, 0, {0}}, {"c4", 1, 0, "B", NO, 0, 0, {0}}, {"c1", 1, 1, "B", NO, 0, 0, {0}},
    {"c2", 1, 1, "B", NO, 0, 0, {0}}, {"c3", 1, 1, "B", NO, 0, 0, {0}}, {"c4", 1, 1, "B", NO, 0, 0, {0}},
    // tie: greedy x x (1,0); combined y (0,1)
    {"t1", 0, 0, "x", NO, 0, 0, {0}}, {"t2", 0, 0, "x", NO, 0, 0, {0}}, {"t1", 1, 0, "y", NO, 0, 0, {0}},
    {"t2", 1, 0, "y", NO, 0, 0, {0}}, {"t1", 1, 1, "y", NO, 0, 0, {0}}, {"t2", 1, 1, "y", NO, 0, 0, {0}},
    // dup: greedy s s s t a a (1,1,1,0,1,0); combined t t t s b b (0,0,0,1,0,1), both seeds
    {"d1", 0, 0, "s", NO, 0, 0, {0}}, {"d2", 0, 0, "s", NO, 0, 0, {0}}, {"d3", 0, 0, "s", NO, 0, 0, {0}},
    {"d4", 0, 0, "t", NO, 0, 0, {0}}, {"d5", 0, 0, "a", NO, 0, 0, {0}}, {"d6", 0, 0, "a", NO, 0, 0, {0}},
    {"d1", 1, 0, "t", NO, 0, 0, {0}}, {"d2", 1, 0, "t", NO, 0, 0, {0}}, {"d3", 1, 0, "t", NO, 0, 0, {0}},
    {"d4", 1, 0, "s", NO, 0, 0, {0}}, {"d5", 1, 0, "b", NO, 0, 0, {0}}, {"d6", 1, 0, "b", NO, 0, 0, {0}},
    {"d1", 1, 1, "t", NO, 0, 0, {0}}, {"d2", 1, 1, "t", NO, 0, 0, {0}}, {"d3", 1, 1, "t", NO, 0, 0, {0}},
    {"d4", 1, 1, "s", NO, 0, 0, {0}}, {"d5", 1, 1, "b", NO, 0, 0, {0}}, {"d6", 1, 1, "b", NO, 0, 0, {0}},
};

// The open item's generations: ids and the log-probability of every token.
typedef struct {
    int config, seed, n;
    int ids[16];
    double logprob;
} OpenGen;

static const OpenGen OPEN[] = {
    {0, 0, 12, {5, 6, 5, 6, 5, 6, 5, 6, 5, 6, 5, 6}, -0.5},         // a loop; distinct-1 2/12, -2 2/11
    {1, 0, 10, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, -1.0},              // no loop; 1, 1
    {1, 1, 12, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, -2.0},         // a loop; 1/12, 1/11
};

typedef struct {
    char dir[64], tasks[128], out[128];
    EvalTaskFile tf;
    const EvalItem *items[32];
    EvalConfig configs[2];
    EvalResults res;
    EvalSummaryInput in;
    EvalSummary *s;
} Fixture;

static const EvalItem *item(Fixture *f, const char *id) {
    for (int i = 0; i < f->tf.n; i++)
        if (strcmp(f->tf.items[i].id, id) == 0) return &f->tf.items[i];
    cr_assert_fail("no item %s", id);
    return NULL;
}

static void add(Fixture *f, const EvalItem *it, int ci, int seed, EvalGen *g) {
    char err[256], *x = NULL;
    const int ok = eval_check(it, g->text, &x);
    cr_assert_eq(eval_results_add(&f->res, it, &f->configs[ci], (uint64_t)seed, g, x, ok, err, sizeof err), 0, "%s", err);
    free(x);
    eval_gen_free(g);
}

static void add_gen(Fixture *f, const Gen *s) {
    EvalGen g = {.text = strdup(s->text), .n_tokens = 1, .time_s = 0.5};
    if (!isnan(s->margin)) {
        cr_assert_eq(eval_trace_push_id(&g.trace, 1), 0);
        g.trace.steps[0].margin = (float)s->margin;
        g.trace.steps[0].entropy_bits = (float)s->entropy;
        g.trace.steps[0].logprob_nats = -1.0f;
        g.trace.steps[0].not_argmax = (unsigned char)s->not_argmax;
        eval_trace_text(&g.trace, 0, strlen(s->text), 0);
        g.trace.measured = 1;
    }
    while (g.n_paths < 3 && s->paths[g.n_paths]) g.n_paths++;
    g.paths = g.n_paths ? calloc((size_t)g.n_paths, sizeof *g.paths) : NULL;
    for (int p = 0; p < g.n_paths; p++) g.paths[p] = strdup(s->paths[p]);
    add(f, item(f, s->id), s->config, s->seed, &g);
}

static void add_open(Fixture *f, const OpenGen *o) {
    EvalGen g = {.text = strdup("once"), .n_tokens = o->n + 1, .time_s = 0.5};  // + a stop token
    for (int k = 0; k <= o->n; k++) {
        cr_assert_eq(eval_trace_push_id(&g.trace, k < o->n ? o->ids[k] : 2), 0);
        g.trace.steps[k].logprob_nats = (float)o->logprob;
        g.trace.steps[k].entropy_bits = 1.0f;
        g.trace.steps[k].margin = 0.5f;
        eval_trace_text(&g.trace, k, k == 0 ? 4 : 0, k == o->n);
    }
    g.trace.measured = 1;
    add(f, item(f, "o1"), o->config, o->seed, &g);
}

// The fixture: the task file, the two configs, every generation added, then the results file
// read back (what a rerun sees) into f->res, and the summary of it.
static void fixture(Fixture *f) {
    memset(f, 0, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/emx_eval_summary_XXXXXX");
    cr_assert(mkdtemp(f->dir));
    snprintf(f->tasks, sizeof f->tasks, "%s/t.jsonl", f->dir);
    snprintf(f->out, sizeof f->out, "%s/results.jsonl", f->dir);
    FILE *t = fopen(f->tasks, "w");
    fputs(TASKS, t);
    fclose(t);
    char err[512];
    cr_assert_eq(eval_tasks_load(f->tasks, &f->tf, err, sizeof err), 0, "%s", err);
    for (int i = 0; i < f->tf.n; i++) f->items[i] = &f->tf.items[i];
    cr_assert_eq(eval_config_parse("greedy", "m.bin", &f->configs[0], err, sizeof err), 0, "%s", err);
    cr_assert_eq(eval_config_parse("combined", "m.bin", &f->configs[1], err, sizeof err), 0, "%s", err);
    cr_assert_eq(eval_results_open(&f->res, f->out, "m.bin", err, sizeof err), 0, "%s", err);
    for (size_t k = 0; k < sizeof GENS / sizeof GENS[0]; k++) add_gen(f, &GENS[k]);
    for (size_t k = 0; k < sizeof OPEN / sizeof OPEN[0]; k++) add_open(f, &OPEN[k]);
    cr_assert_eq(eval_results_close(&f->res, err, sizeof err), 0, "%s", err);
    cr_assert_eq(eval_results_open(&f->res, f->out, "m.bin", err, sizeof err), 0, "%s", err);
    f->in = (EvalSummaryInput){.items = f->items, .n_items = f->tf.n, .configs = f->configs, .n_configs = 2,
                               .n_seeds = 2, .results = &f->res};
    cr_assert(f->s = eval_summary_new(&f->in));
}

static void fixture_free(Fixture *f) {
    eval_summary_free(f->s);
    eval_results_close(&f->res, NULL, 0);
    eval_config_free(&f->configs[0]);
    eval_config_free(&f->configs[1]);
    eval_tasks_free(&f->tf);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
    cr_expect_eq(system(cmd), 0);
}

static const EvalBaselineRow *find(const EvalBaselineRow *rows, int n, const char *name) {
    for (int k = 0; k < n; k++)
        if (strcmp(rows[k].name, name) == 0) return &rows[k];
    return NULL;
}

#define NEAR(a, b) (fabs((a) - (b)) < 1e-12)

// fam vs greedy 1,0,1,0: mode "7" scores 0,1,1,1 (b 1: q1; c 2: q2, q4; diff (-1+1+0+1)/4;
// p = binomtest(1, 3) = 1); always-1 1,0,0,0 (b 1: q3); echo 0,0 on q1, q2 (b 1: q1). ch vs
// greedy 1,0,1,0: mode "B" 1,1,0,0 (b 1, c 1); first-option "A" 0,0,1,0 (b 1: c1). tie: mode "x"
// 1,0. dup: mode "s" 1,1,1,1,0,0. Overall: mode (3+2+1+4)/16 over different answers.
Test(eval_summary, baselines_by_hand) {
    Fixture f;
    fixture(&f);
    EvalBaselineRow b[16];
    int n = eval_summary_baselines(f.s, "fam", b, 16);
    cr_assert_eq(n, 3, "mode, always-1, echo");
    cr_expect_str_eq(b[0].name, "mode");
    cr_expect_str_eq(b[1].name, "always-1");
    cr_expect_str_eq(b[2].name, "echo");
    cr_expect_str_eq(b[0].answer, "7");
    cr_expect(b[0].n_items == 4 && b[0].correct == 3 && b[0].b == 1 && b[0].c == 2 && NEAR(b[0].diff, 0.25) && NEAR(b[0].p, 1.0));
    // Wilson 3/4: python3 -c "import math;z=1.959963984540054;n=4;p=.75;d=1+z*z/n;m=(p+z*z/2/n)/d;
    //   h=z/d*math.sqrt(p*(1-p)/n+z*z/4/n/n);print(m-h,m+h)"
    cr_expect(fabs(b[0].ci_lo - 0.30064184258) < 1e-9 && fabs(b[0].ci_hi - 0.95441273919) < 1e-9, "[%.11f, %.11f]",
              b[0].ci_lo, b[0].ci_hi);
    cr_expect(b[1].n_items == 4 && b[1].correct == 1 && b[1].b == 1 && b[1].c == 0 && NEAR(b[1].diff, -0.25));
    cr_expect_str_eq(b[1].answer, "1");
    cr_expect(b[2].n_items == 2 && b[2].correct == 0 && b[2].b == 1 && b[2].c == 0 && NEAR(b[2].diff, -0.5));
    n = eval_summary_baselines(f.s, "ch", b, 16);
    cr_assert_eq(n, 2, "mode, first-option");
    cr_expect(!strcmp(b[0].name, "mode") && !strcmp(b[0].answer, "B") && b[0].correct == 2 && b[0].b == 1 && b[0].c == 1);
    cr_expect(!strcmp(b[1].name, "first-option") && !strcmp(b[1].answer, "A") && b[1].correct == 1 && b[1].b == 1 &&
              b[1].c == 0);
    n = eval_summary_baselines(f.s, "tie", b, 16);
    cr_assert_eq(n, 1);
    cr_expect(!strcmp(b[0].answer, "x") && b[0].correct == 1 && b[0].n_items == 2, "a tie goes to the answer seen first");
    n = eval_summary_baselines(f.s, "dup", b, 16);
    cr_expect(n == 1 && !strcmp(b[0].answer, "s") && b[0].correct == 4 && b[0].n_items == 6);
    // units same (1,1,1 vs 1,1,1): tie; other (0 vs 1): c; twin (1+0 vs 0+0): b
    cr_expect(b[0].b == 1 && b[0].c == 1 && b[0].n_units == 3, "b %ld c %ld units %d", b[0].b, b[0].c, b[0].n_units);
    cr_expect_eq(eval_summary_baselines(f.s, "op", b, 16), 0, "an open family has no baselines");
    n = eval_summary_baselines(f.s, NULL, b, 16);
    cr_assert_eq(n, 4, "mode, first-option, always-1, echo");
    const EvalBaselineRow *mode = find(b, n, "mode");
    cr_expect(mode && mode->answer == NULL && mode->n_items == 16 && mode->correct == 10);
    cr_expect(find(b, n, "first-option")->n_items == 4 && find(b, n, "always-1")->correct == 1);
    fixture_free(&f);
}

// dup, combined against greedy per item: d1-d3 b, d4 c, d5 b, d6 c (4 against 2); per unit:
// same b, other c, twin (1+0 against 0+1) a tie: 1 against 1. diff over items: (-1-1-1+1-1+1)/6.
Test(eval_summary, identical_prompts_are_one_unit) {
    Fixture f;
    fixture(&f);
    int n_items, n_prompts, n_answered, n_open;
    eval_summary_block(f.s, "dup", &n_items, &n_prompts, &n_answered, &n_open);
    cr_expect(n_items == 6 && n_prompts == 3 && n_answered == 6 && n_open == 0);
    eval_summary_block(f.s, NULL, &n_items, &n_prompts, &n_answered, &n_open);
    cr_expect(n_items == 17 && n_prompts == 14 && n_answered == 16 && n_open == 1, "%d %d %d %d", n_items, n_prompts,
              n_answered, n_open);
    EvalRow r;
    eval_summary_row(f.s, 1, "dup", &r);
    cr_expect(r.b == 1 && r.c == 1 && r.n_units == 3, "b %ld c %ld units %d (per item it would be 4/2)", r.b, r.c, r.n_units);
    cr_expect(NEAR(r.diff, -2.0 / 6.0) && NEAR(r.p, 1.0));
    cr_expect(r.n == 12 && r.correct == 4 && r.n_items == 6);
    // fam: greedy 1,0,1,0 against combined's means .5,.5,1,.5: b q1; c q2, q4; diff (-.5+.5+0+.5)/4
    eval_summary_row(f.s, 1, "fam", &r);
    cr_expect(r.b == 1 && r.c == 2 && r.n_units == 4 && NEAR(r.diff, 0.125) && r.correct == 5 && r.n == 8);
    eval_summary_row(f.s, 0, "fam", &r);
    cr_expect(r.correct == 2 && r.n == 4 && r.b == 0 && r.c == 0);
    fixture_free(&f);
}

// fam, combined: margins right {0.9, 0.5, 0.5, 0.5, 0.8}, wrong {0.2, 0.5, 0.1}: 0.9 and 0.8
// beat all 3 (6), each 0.5 beats 2 and ties 1 (7.5): 13.5/15. Confidence -H: right {-1, -2, -2,
// -2, -1.5}, wrong {-3, -2, -0.5}: -1 beats 2 (2), each -2 beats 1, ties 1 (4.5), -1.5 beats 2
// (2): 8.5/15. Not the argmax: 2 of 8 tokens. Oracle: 1 of the 2 results with paths.
Test(eval_summary, confidence_oracle_and_not_argmax) {
    Fixture f;
    fixture(&f);
    EvalRow r;
    eval_summary_row(f.s, 1, "fam", &r);
    cr_expect(NEAR(r.auroc_margin, 13.5 / 15.0) && r.n_auroc_margin == 8, "%f over %ld", r.auroc_margin, r.n_auroc_margin);
    cr_expect(NEAR(r.auroc_entropy, 8.5 / 15.0) && r.n_auroc_entropy == 8, "%f", r.auroc_entropy);
    cr_expect(NEAR(r.not_argmax, 2.0 / 8.0), "%f", r.not_argmax);
    cr_expect(NEAR(r.oracle, 0.5) && r.n_oracle == 2, "%f of %ld", r.oracle, r.n_oracle);
    eval_summary_row(f.s, 0, "fam", &r);  // greedy: every margin 0.5, right and wrong alike
    cr_expect(NEAR(r.auroc_margin, 0.5) && isnan(r.oracle) && r.n_oracle == 0 && NEAR(r.not_argmax, 0.0));
    eval_summary_row(f.s, 1, "ch", &r);  // nothing recorded
    cr_expect(isnan(r.auroc_margin) && isnan(r.auroc_entropy) && isnan(r.not_argmax) && r.n_auroc_margin == 0);
    // the stored lines: n_paths and oracle only with paths
    char *s = test_read_file(f.out, NULL);
    cr_expect(strstr(s, "\"id\":\"q1\",\"config\":\"combined\",\"seed\":0,") != NULL);
    cr_expect(strstr(s, "\"n_paths\":2,\"oracle\":true") && strstr(s, "\"n_paths\":2,\"oracle\":false"), "%s", s);
    int lines = 0;
    for (char *p = s; (p = strstr(p, "\"n_paths\"")); p++) lines++;
    cr_expect_eq(lines, 2);
    free(s);
    fixture_free(&f);
}

// op: greedy one loop of 1, distinct 2/12 and 2/11, -0.5 a token; combined: loops 1 of 2,
// distinct-1 (1 + 1/12)/2, distinct-2 (1 + 1/11)/2, logprob (11·-1 + 13·-2)/24 over tokens (the
// stop tokens count in the logprob, not in the ids).
Test(eval_summary, open_ended_metrics) {
    Fixture f;
    fixture(&f);
    EvalOpenRow o;
    eval_summary_open_row(f.s, 0, "op", &o);
    cr_expect(o.n == 1 && o.n_loops == 1 && NEAR(o.loop_share, 1.0));
    cr_expect(NEAR(o.distinct_1, 2.0 / 12) && NEAR(o.distinct_2, 2.0 / 11), "%f %f", o.distinct_1, o.distinct_2);
    cr_expect(NEAR(o.mean_logprob_nats, -0.5));
    eval_summary_open_row(f.s, 1, "op", &o);
    cr_expect(o.n == 2 && o.n_loops == 1 && NEAR(o.loop_share, 0.5));
    cr_expect(NEAR(o.distinct_1, (1 + 1.0 / 12) / 2) && NEAR(o.distinct_2, (1 + 1.0 / 11) / 2));
    cr_expect(fabs(o.mean_logprob_nats - (11 * -1.0 + 13 * -2.0) / 24.0) < 1e-6, "%f", o.mean_logprob_nats);
    EvalRow r;  // the open item is in no accuracy row
    eval_summary_row(f.s, 0, NULL, &r);
    cr_expect(r.n == 16 && r.n_items == 16);
    fixture_free(&f);
}

// build/tools/eval on stories260K: the keys of a results line and of --json.
Test(eval_summary, json_keys, .timeout = 120) {
    char model[512], bin[512];
    test_build_path(model, sizeof model, "models/stories260K.f32.bin");
    test_build_path(bin, sizeof bin, "cpu/tools/eval");
    if (access(model, R_OK) != 0) cr_assert_fail("%s is missing: convert it with `make test-models`", model);
    Fixture f = {0};
    snprintf(f.dir, sizeof f.dir, "/tmp/emx_eval_keys_XXXXXX");
    cr_assert(mkdtemp(f.dir));
    char tasks[128], out[128], json[128];
    snprintf(tasks, sizeof tasks, "%s/k.jsonl", f.dir);
    snprintf(out, sizeof out, "%s/r.jsonl", f.dir);
    snprintf(json, sizeof json, "%s/s.json", f.dir);
    FILE *t = fopen(tasks, "w");
    fputs("{\"id\":\"a\",\"prompt\":\"Once upon a time\",\"answer\":\"Lily\",\"check\":\"contains\",\"max_tokens\":16}\n"
          "{\"id\":\"b\",\"prompt\":\"Once upon a time\",\"check\":\"open\",\"max_tokens\":16}\n", t);
    fclose(t);
    RunResult r = run_prog(bin, (const char *[]){model, tasks, "-o", out, "--json", json, "-t", "1", "--seeds", "1",
                                                 "--config", "greedy", "--config", "combined", NULL});
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "== k (2 items, 1 distinct prompt)") && strstr(r.out, "baseline:mode=Lily"), "%s", r.out);
    run_free(&r);
    char *s = test_read_file(out, NULL);
    for (char *line = strtok(s, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        cr_assert(o);
        const int open = cJSON_IsNull(cJSON_GetObjectItem(o, "correct"));
        static const char *const always[] = {"mean_entropy_bits", "mean_logprob_nats", "n_not_argmax", NULL};
        for (int k = 0; always[k]; k++) cr_expect(cJSON_IsNumber(cJSON_GetObjectItem(o, always[k])), "%s: %s", always[k], line);
        cr_expect(!cJSON_GetObjectItem(o, "n_paths") && !cJSON_GetObjectItem(o, "oracle"));
        cr_expect_eq(cJSON_IsBool(cJSON_GetObjectItem(o, "repetition_loop")), open, "%s", line);
        cr_expect_eq(cJSON_IsNumber(cJSON_GetObjectItem(o, "distinct_2")), open, "%s", line);
        cr_expect(open || cJSON_IsNull(cJSON_GetObjectItem(o, "extracted")) || cJSON_IsNumber(cJSON_GetObjectItem(o, "answer_margin")),
                  "an extracted answer has its margin: %s", line);
        cJSON_Delete(o);
    }
    free(s);
    s = test_read_file(json, NULL);
    cJSON *doc = cJSON_Parse(s);
    cr_assert(doc, "%s", s);
    const cJSON *fam = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "families"), 0);
    cr_expect_eq(cJSON_GetObjectItem(fam, "n_distinct_prompts")->valueint, 1);
    cr_expect_eq(cJSON_GetObjectItem(fam, "n_open")->valueint, 1);
    const cJSON *row = cJSON_GetArrayItem(cJSON_GetObjectItem(fam, "configs"), 1);
    static const char *const keys[] = {"n_units", "not_argmax", "auroc_margin", "n_auroc_margin", "auroc_entropy",
                                       "n_auroc_entropy", "oracle", "n_oracle", NULL};
    for (int k = 0; keys[k]; k++) cr_expect(cJSON_GetObjectItem(row, keys[k]) != NULL, "configs[1] lacks %s", keys[k]);
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(row, "oracle")), "no paths: oracle null");
    const cJSON *base = cJSON_GetArrayItem(cJSON_GetObjectItem(fam, "baselines"), 0);
    cr_expect_str_eq(cJSON_GetObjectItem(base, "baseline")->valuestring, "mode");
    cr_expect_str_eq(cJSON_GetObjectItem(base, "answer")->valuestring, "Lily");
    const cJSON *open = cJSON_GetArrayItem(cJSON_GetObjectItem(fam, "open_ended"), 0);
    static const char *const okeys[] = {"config", "n", "repetition_loops", "loop_share", "distinct_1", "distinct_2",
                                        "mean_logprob_nats", "not_argmax", "mean_tokens", NULL};
    for (int k = 0; okeys[k]; k++) cr_expect(cJSON_GetObjectItem(open, okeys[k]) != NULL, "open_ended[0] lacks %s", okeys[k]);
    cJSON_Delete(doc);
    free(s);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f.dir);
    cr_expect_eq(system(cmd), 0);
}
