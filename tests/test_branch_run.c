// test_branch_run.c — the branching decoder as programs: ./run --sampler branch is greedy's text
// when no fork happens and does not depend on the seed; its bad flags fail in one line; the CUDA
// build ($EMX_GPU_RUN: build/emu/run under make test) gives the CPU's text on f32 models; eval's
// branch configurations parse as ./run's flags and give ./run's text.
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run_util.h"
#include "test_util.h"
#include "runtime/branch/branch_options.h"
#include "tools/eval/config.h"

static const char *model_path(const char *name) {
    static char path[2][512];
    static int k;
    char rel[128];
    snprintf(rel, sizeof rel, "models/%s", name);
    char *p = path[k++ & 1];
    test_build_path(p, 512, rel);
    if (access(p, R_OK) != 0) cr_skip_test("%s missing (make test-models converts it)", p);
    return p;
}

// stdout of ./run (prog) with args after the model; exit 0 asserted. Free with run_free.
static RunResult run_ok(const char *prog, const char *model, const char *const *extra) {
    const char *args[40] = {model_path(model)};
    int n = 1;
    for (int i = 0; extra[i]; i++) args[n++] = extra[i];
    args[n] = NULL;
    RunResult r = run_prog(prog, args);
    cr_assert_eq(r.code, 0, "%s: %s", prog, r.err);
    return r;
}

// The line of stderr that starts with `key` ("branch:"), or "".
static void line_of(const char *err, const char *key, char *out, size_t cap) {
    const char *p = strstr(err, key);
    size_t n = p ? strcspn(p, "\n") : 0;
    snprintf(out, cap, "%.*s", (int)n, p ? p : "");
}

Test(branch_run, no_fork_is_greedy_and_seed_free, .timeout = 300) {
    const char *greedy[] = {"-p", "Once upon a time", "-n", "50", "--sampler", "greedy", "-t", "1", NULL};
    const char *branch[] = {"-p", "Once upon a time", "-n", "50", "--branch-entropy", "1000", "-t", "1", NULL};
    RunResult g = run_ok(run_binary(), "stories260K.f32.bin", greedy), b = run_ok(run_binary(), "stories260K.f32.bin", branch);
    cr_expect_str_eq(b.out, g.out, "no fork: the text is greedy's");
    cr_expect(strstr(b.err, "branch: 0 forks"), "%s", b.err);
    run_free(&g), run_free(&b);
    // forks, and two seeds: it samples nothing
    const char *s1[] = {"-p", "Once upon a time", "-n", "40", "--sampler", "branch", "--branch-entropy", "0",
                        "--branch-forks", "3", "--branch-lookahead", "4", "-s", "1", "-t", "1", NULL};
    const char *s2[] = {"-p", "Once upon a time", "-n", "40", "--sampler", "branch", "--branch-entropy", "0",
                        "--branch-forks", "3", "--branch-lookahead", "4", "-s", "987654", "-t", "1", NULL};
    RunResult a = run_ok(run_binary(), "stories260K.f32.bin", s1), c = run_ok(run_binary(), "stories260K.f32.bin", s2);
    cr_expect_str_eq(a.out, c.out, "the seed changed the text");
    cr_expect(strstr(a.err, "branch: 3 forks (at most 3)"), "%s", a.err);
    cr_expect(!strstr(a.err, "seed:"), "a time-based seed is no part of this run: %s", a.err);
    run_free(&a), run_free(&c);
}

Test(branch_run, bad_flags_are_one_line, .timeout = 120) {
    char m[512];
    snprintf(m, sizeof m, "%s", model_path("stories260K.f32.bin"));
    const struct {
        const char *a[6];
        int code;
        const char *needle;
    } cases[] = {
        {{"--branch-k", "17"}, 2, "--branch-k: 17 is out of range [2, 16]"},
        {{"--branch-k", "1"}, 2, "--branch-k: 1 is out of range [2, 16]"},
        {{"--branch-gate", "0"}, 2, "--branch-gate: 0 is out of range (0, 1]"},
        {{"--branch-gate", "1.5"}, 2, "--branch-gate: 1.5 is out of range (0, 1]"},
        {{"--branch-entropy", "-1"}, 2, "--branch-entropy: -1 is out of range [0, 1000]"},
        {{"--branch-forks", "x"}, 2, "--branch-forks: 'x' is not an integer"},
        {{"--branch-rule", "vote"}, 2, "--branch-rule: 'vote' is not prob, margin or entropy"},
        {{"--answer-alphabet", "A,,B"}, 2, "--answer-alphabet: entry 2 is empty"},
        {{"--answer-alphabet", "A,B,"}, 2, "--answer-alphabet: entry 3 is empty"},
        {{"--answer-alphabet", ""}, 2, "--answer-alphabet: entry 1 is empty"},
        {{"--answer-alphabet", "A,B,A"}, 2, "--answer-alphabet: 'A' is given twice (entries 1 and 3)"},
        {{"--answer-cue", ""}, 2, "--answer-cue: the cue is empty"},
        {{"--sampler", "greedy", "--branch-k", "3"}, 2, "the branching decoder's flags need --sampler branch (not greedy)"},
        {{"--sampler", "branch", "--metrics", "/tmp/emx_branch_m.jsonl"}, 2, "--metrics is not available with --sampler branch"},
        {{"--branch-k", "3", "--report", "/tmp/emx_branch_r.html"}, 2, "--report is not available with --sampler branch"},
        {{"--answer-alphabet", "a very long entry of many words indeed"}, 1, "entry 'a very long entry of many words indeed' is 22 tokens (at most 16)"},
        {{"--answer-alphabet", "A,B", "-c", "6"}, 1, "no room for the answer"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *args[12] = {m, "-p", "Hi"};
        int n = 3;
        for (int k = 0; cases[i].a[k]; k++) args[n++] = cases[i].a[k];
        args[n] = NULL;
        expect_error(args, cases[i].code, cases[i].needle);
    }
}

// The CUDA build's text and decoder summary against the CPU's, f32 weights and an f32 cache
// (tests/test_run_cuda.c says why: then both backends make the same choices).
static void same_on_gpu(const char *model, const char *const *extra) {
    const char *gpu = gpu_run_binary();
    const char *a[40];
    int n = 0;
    for (; extra[n]; n++) a[n] = extra[n];
    a[n++] = "--cache-type", a[n++] = "f32", a[n++] = "--device", a[n++] = "cpu", a[n] = NULL;
    RunResult c = run_ok(run_binary(), model, a);
    a[n - 1] = "cuda:0";
    RunResult g = run_ok(gpu, model, a);
    cr_assert(c.out_len > 10, "cpu generated almost nothing: '%s'", c.out);
    cr_expect_str_eq(g.out, c.out, "%s: the CUDA backend's text differs from the CPU's", model);
    char lc[512], lg[512];
    line_of(c.err, "branch:", lc, sizeof lc), line_of(g.err, "branch:", lg, sizeof lg);
    cr_expect(lc[0] && strcmp(lc, lg) == 0, "summaries differ:\n%s\n%s", lc, lg);
    run_free(&c), run_free(&g);
}

// stories260K only: its 512-token vocabulary keeps the emulated classifier cheap (a qwen3-tiny
// pass of 151,936 logits takes seconds under the emulator, and a commitment runs several).
Test(branch_run, cuda_same_text_as_cpu, .timeout = 900) {
    const char *a[] = {"-p", "Once upon a time", "-n", "24", "--sampler", "branch", "--branch-entropy", "0",
                       "--branch-forks", "2", "--branch-lookahead", "3", NULL};
    same_on_gpu("stories260K.f32.bin", a);
    const char *b[] = {"-p", "Lily", "-n", "12", "--branch-entropy", "0", "--answer-alphabet", "Lily,Tom,a dog",
                       NULL};
    same_on_gpu("stories260K.f32.bin", b);
}

// ---------------------------------------------------------------------------------------------
// eval

Test(branch_run, eval_configs_parse, .timeout = 60) {
    EvalConfig c;
    char err[512];
    cr_assert_eq(eval_config_parse("branch:tau=1.5,k=3,forks=2,gate=0.2,lookahead=4,rule=margin,alphabet=A;B,cue=Answer is,"
                                   "commit=1", "m.bin", &c, err, sizeof err), 0, "%s", err);
    const EmxCliArgs *a = &c.args;
    cr_expect(a->sampler == EMX_SAMPLER_BRANCH && a->branch_entropy == 1.5f && a->branch_k == 3 && a->branch_forks == 2);
    cr_expect(a->branch_gate == 0.2f && a->branch_lookahead == 4 && a->branch_rule == EMX_BRANCH_RULE_MARGIN && c.commit_item == 1);
    cr_expect_str_eq(a->answer_alphabet, "A,B");
    cr_expect_str_eq(a->answer_cue, "Answer is");
    cr_expect(c.deterministic, "branch runs once, whatever the seed");
    eval_config_free(&c);
    cr_assert_eq(eval_config_parse("agents:lookahead=3", "m.bin", &c, err, sizeof err), 0, "%s", err);
    cr_expect_eq(c.args.lookahead, 3, "agents keep their own lookahead");
    eval_config_free(&c);
    const char *bad[][2] = {{"greedy:commit=1", "key 'commit': only for branch"},
                            {"branch:k=20", "key 'k': --branch-k: 20 is out of range [2, 16]"},
                            {"branch:alphabet=A;;B", "key 'alphabet': --answer-alphabet: entry 2 is empty"},
                            {"branch:commit=yes", "key 'commit': 'yes': expected 1 or 0"},
                            {"branch:gate=0", "key 'gate': --branch-gate: 0 is out of range (0, 1]"}};
    for (int i = 0; i < 5; i++) {
        cr_expect_eq(eval_config_parse(bad[i][0], "m.bin", &c, err, sizeof err), -1, "%s parsed", bad[i][0]);
        cr_expect(strstr(err, bad[i][1]), "%s: [%s]", bad[i][0], err);
    }
}

static const char *eval_binary(void) {
    static char path[512];
    test_build_path(path, sizeof path, "cpu/tools/eval");
    return path;
}

// eval's text of a branch configuration is ./run's for the same prompt and flags.
Test(branch_run, eval_text_is_runs, .timeout = 300) {
    const char *m = model_path("stories260K.f32.bin");
    char dir[] = "/tmp/emx_branch_eval_XXXXXX", tasks[128], out[128];
    cr_assert(mkdtemp(dir));
    snprintf(tasks, sizeof tasks, "%s/t.jsonl", dir), snprintf(out, sizeof out, "%s/r.jsonl", dir);
    FILE *f = fopen(tasks, "w");
    fputs("{\"id\":\"s1\",\"prompt\":\"Once upon a time\",\"answer\":\"Lily\",\"check\":\"contains\",\"max_tokens\":20}\n", f);
    fclose(f);
    RunResult r = run_prog(eval_binary(), (const char *[]){m, tasks, "-o", out, "-t", "1", "--seeds", "3", "--config",
                                                           "branch:tau=0,forks=2,lookahead=3", "--config",
                                                           "branch:tau=0,alphabet=Lily;Tom,rule=entropy", NULL});
    cr_assert_eq(r.code, 0, "%s", r.err);
    run_free(&r);
    char *s = test_read_file(out, NULL);
    cr_assert(s);
    const char *flags[2][12] = {{"--branch-entropy", "0", "--branch-forks", "2", "--branch-lookahead", "3", NULL},
                                {"--branch-entropy", "0", "--answer-alphabet", "Lily,Tom", "--branch-rule", "entropy", NULL}};
    int lines = 0;
    for (char *line = strtok(s, "\n"); line; line = strtok(NULL, "\n"), lines++) {
        cJSON *o = cJSON_Parse(line);
        const int k = strstr(cJSON_GetObjectItem(o, "config")->valuestring, "alphabet") != NULL;
        const char *args[24] = {"-p", "Once upon a time", "-n", "20", "--raw", "-t", "1", "--sampler", "branch"};
        int n = 9;
        for (int i = 0; flags[k][i]; i++) args[n++] = flags[k][i];
        args[n] = NULL;
        RunResult rr = run_ok(run_binary(), "stories260K.f32.bin", args);
        char want[1024];
        snprintf(want, sizeof want, "Once upon a time%s\n", cJSON_GetObjectItem(o, "text")->valuestring);
        cr_expect_str_eq(rr.out, want, "config %d", k);
        cr_expect_eq(cJSON_GetObjectItem(o, "seed")->valuedouble, 0, "one run under seed 0");
        run_free(&rr);
        cJSON_Delete(o);
    }
    cr_expect_eq(lines, 2, "one result per config: branch is deterministic");
    free(s);
    // commit=1 takes each item's answer_alphabet: an item without one (and no alphabet key to
    // fall back on) stops the run before anything is generated
    RunResult e = run_prog(eval_binary(), (const char *[]){m, tasks, "-o", out, "-t", "1", "--config", "branch:commit=1",
                                                           NULL});
    cr_expect_eq(e.code, 2, "%s", e.err);
    cr_expect(strstr(e.err, "t.jsonl:1: config 'branch:commit=1' (commit=1) needs the item's answer_alphabet") &&
                  count_lines(e.err) == 1, "%s", e.err);
    run_free(&e);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
}
