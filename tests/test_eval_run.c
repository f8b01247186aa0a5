// test_eval_run.c — build/tools/eval as a program: its text for (item, config, seed) is ./run's
// for the same prompt, flags and -s; resuming from a killed run's results; bad inputs refused
// before anything runs; the agents configs; and the CUDA build's results equal the CPU's.
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "run_util.h"
#include "test_util.h"

static const char *eval_binary(void) {
    static char path[512];
    test_build_path(path, sizeof path, "cpu/tools/eval");
    return path;
}

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

// A temporary folder with a file of `text` in it (tasks.jsonl); its paths in dir/tasks/out.
typedef struct {
    char dir[64], tasks[128], out[128];
} Tmp;

static void tmp_make(Tmp *t, const char *name, const char *text) {
    snprintf(t->dir, sizeof t->dir, "/tmp/emx_eval_XXXXXX");
    cr_assert(mkdtemp(t->dir));
    snprintf(t->tasks, sizeof t->tasks, "%s/%s", t->dir, name);
    snprintf(t->out, sizeof t->out, "%s/results.jsonl", t->dir);
    FILE *f = fopen(t->tasks, "w");
    cr_assert(f);
    fputs(text, f);
    fclose(f);
}

static void tmp_remove(Tmp *t) {
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", t->dir);
    cr_expect_eq(system(cmd), 0);
}

// The results file's lines as JSON (NULL-terminated array; free with free_lines).
static cJSON **read_results(const char *path, int *n) {
    char *s = test_read_file(path, NULL);
    cr_assert(s, "%s missing", path);
    cJSON **v = calloc(4096, sizeof *v);
    *n = 0;
    for (char *line = strtok(s, "\n"); line && *n < 4095; line = strtok(NULL, "\n")) {
        v[*n] = cJSON_Parse(line);
        cr_assert(v[*n], "bad result line: %s", line);
        (*n)++;
    }
    free(s);
    return v;
}

static void free_lines(cJSON **v, int n) {
    for (int i = 0; i < n; i++) cJSON_Delete(v[i]);
    free(v);
}

static const char *jstr(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k)->valuestring; }
static double jnum(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k)->valuedouble; }

// Every result line's text against ./run's stdout for the same prompt, flags and seed.
// items[i] = {id, prompt or user message, system or NULL, "chat"/"raw"}; flags per config.
typedef struct {
    const char *id, *prompt, *system;
    int chat;
    const char *n;
} Item;

typedef struct {
    const char *spec;
    const char *flags[8];
} Config;

static void same_as_run(const char *model, const char *out, const Item *items, int n_items, const Config *cfgs,
                        int n_cfgs, int want_lines) {
    int n = 0;
    cJSON **lines = read_results(out, &n);
    cr_assert_eq(n, want_lines, "%d result lines, expected %d", n, want_lines);
    for (int i = 0; i < n; i++) {
        const Item *it = NULL;
        const Config *c = NULL;
        for (int k = 0; k < n_items; k++)
            if (!strcmp(items[k].id, jstr(lines[i], "id"))) it = &items[k];
        for (int k = 0; k < n_cfgs; k++)
            if (!strcmp(cfgs[k].spec, jstr(lines[i], "config"))) c = &cfgs[k];
        cr_assert(it && c);
        char seed[24];
        snprintf(seed, sizeof seed, "%.0f", jnum(lines[i], "seed"));
        const char *args[32] = {model, "-p", it->prompt, "-n", it->n, "-s", seed, "-t", "1", it->chat ? "--chat" : "--raw"};
        int a = 10;
        if (it->system) args[a++] = "--system", args[a++] = it->system;
        for (int k = 0; c->flags[k]; k++) args[a++] = c->flags[k];
        args[a] = NULL;
        RunResult r = run(args);
        cr_assert_eq(r.code, 0, "./run: %s", r.err);
        char *want = malloc(strlen(it->prompt) + strlen(jstr(lines[i], "text")) + 2);
        sprintf(want, "%s%s\n", it->chat ? "" : it->prompt, jstr(lines[i], "text"));
        cr_expect_str_eq(r.out, want, "%s, config %s, seed %s: eval's text differs from ./run's", it->id, c->spec, seed);
        free(want);
        run_free(&r);
    }
    free_lines(lines, n);
}

Test(eval_run, text_is_runs_stories260K, .timeout = 300) {
    const char *m = model_path("stories260K.f32.bin");
    Tmp t;
    tmp_make(&t, "story.jsonl",
             "{\"id\":\"s1\",\"prompt\":\"Once upon a time\",\"answer\":\"Lily\",\"check\":\"contains\",\"max_tokens\":24}\n"
             "{\"id\":\"s2\",\"prompt\":\"Tom had 3 apples\",\"answer\":\"3\",\"check\":\"number\",\"max_tokens\":16}\n");
    RunResult r = run_prog(eval_binary(), (const char *[]){m, t.tasks, "-o", t.out, "-t", "1", "--seeds", "2", "--config",
                                                           "greedy", "--config", "combined:temp=1.0,top_k=20", "--config",
                                                           "entropix", "--config", "entropix:profile=masked-bits", NULL});
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "== story (2 items, 2 distinct prompts)") && strstr(r.out, "== overall (2 items, 2 distinct prompts)"), "%s", r.out);
    run_free(&r);
    const Item items[] = {{"s1", "Once upon a time", NULL, 0, "24"}, {"s2", "Tom had 3 apples", NULL, 0, "16"}};
    const Config cfgs[] = {{"greedy", {"--sampler", "greedy"}},
                           {"combined:temp=1.0,top_k=20", {"--sampler", "combined", "--temp", "1.0", "--top-k", "20"}},
                           {"entropix", {"--sampler", "entropix"}},
                           {"entropix:profile=masked-bits", {"--profile", "masked-bits"}}};
    same_as_run(m, t.out, items, 2, cfgs, 4, 2 * (1 + 2 + 2 + 2));
    tmp_remove(&t);
}

Test(eval_run, text_is_runs_qwen3_chat, .timeout = 300) {
    const char *m = model_path("qwen3-tiny.f32.bin");
    Tmp t;
    tmp_make(&t, "chat.jsonl",
             "{\"id\":\"c1\",\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":"
             "\"What is 2+2?\"}],\"answer\":\"4\",\"check\":\"number\",\"max_tokens\":8}\n"
             "{\"id\":\"c2\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello there\"}],\"answer\":\"A\",\"check\":\"choice\",\"max_tokens\":6}\n"
             "{\"id\":\"r1\",\"prompt\":\"Hello there\",\"answer\":\"x\",\"check\":\"exact\",\"max_tokens\":6}\n");
    RunResult r = run_prog(eval_binary(), (const char *[]){m, t.tasks, "-o", t.out, "-t", "1", "--seeds", "1", "--config",
                                                           "entropix", "--config", "topk:temp=0.9,top_k=50", "--config",
                                                           "combined:no_think=1", NULL});
    cr_assert_eq(r.code, 0, "%s", r.err);
    run_free(&r);
    const Item items[] = {{"c1", "What is 2+2?", "Be brief.", 1, "8"}, {"c2", "Hello there", NULL, 1, "6"},
                          {"r1", "Hello there", NULL, 0, "6"}};
    const Config cfgs[] = {{"entropix", {"--sampler", "entropix"}},
                           {"topk:temp=0.9,top_k=50", {"--sampler", "topk", "--temp", "0.9", "--top-k", "50"}},
                           {"combined:no_think=1", {"--sampler", "combined", "--no-think"}}};
    same_as_run(m, t.out, items, 3, cfgs, 3, 9);
    tmp_remove(&t);
}

Test(eval_run, agents_with_and_without_critic, .timeout = 300) {
    const char *m = model_path("stories260K.f32.bin");
    Tmp t;
    tmp_make(&t, "pool.jsonl",
             "{\"id\":\"p1\",\"prompt\":\"Once upon a time\",\"answer\":\"Lily\",\"check\":\"contains\",\"max_tokens\":20}\n"
             "{\"id\":\"p2\",\"prompt\":\"The dog\",\"answer\":\"B\",\"check\":\"choice\",\"max_tokens\":12}\n"
             "{\"id\":\"p3\",\"prompt\":\"not run (--limit 2)\",\"answer\":\"B\",\"check\":\"choice\"}\n");
    RunResult r = run_prog(eval_binary(), (const char *[]){m, t.tasks, "-o", t.out, "-t", "1", "--limit", "2", "--seeds", "1",
                                                           "--config", "agents:n=3,critic=on", "--config", "agents:n=3,critic=off",
                                                           "--config", "agents:n=3,lookahead=2,check_every=2", NULL});
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "== pool (2 items, 2 distinct prompts)"), "%s", r.out);
    run_free(&r);
    const Item items[] = {{"p1", "Once upon a time", NULL, 0, "20"}, {"p2", "The dog", NULL, 0, "12"}};
    const Config cfgs[] = {{"agents:n=3,critic=on", {"--agents", "3", "--check-every", "5"}},
                           {"agents:n=3,critic=off", {"--agents", "3", "--check-every", "0"}},
                           {"agents:n=3,lookahead=2,check_every=2", {"--agents", "3", "--lookahead", "2", "--check-every", "2"}}};
    same_as_run(m, t.out, items, 2, cfgs, 3, 6);
    tmp_remove(&t);
}

static int count_substr(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p++) n++;
    return n;
}

// --limit 2, then the last line cut mid-write (a kill), then the whole file: the finished lines
// stay as they were, the cut one is redone, nothing is computed twice, the summary covers all.
Test(eval_run, resume_after_kill, .timeout = 300) {
    const char *m = model_path("stories260K.f32.bin");
    Tmp t;
    tmp_make(&t, "res.jsonl",
             "{\"id\":\"a\",\"prompt\":\"Once upon a time\",\"answer\":\"Lily\",\"check\":\"contains\",\"max_tokens\":12}\n"
             "{\"id\":\"b\",\"prompt\":\"Tom\",\"answer\":\"1\",\"check\":\"number\",\"max_tokens\":10}\n"
             "{\"id\":\"c\",\"prompt\":\"The sun\",\"answer\":\"A\",\"check\":\"choice\",\"max_tokens\":10}\n");
    const char *base[] = {m, t.tasks, "-o", t.out, "-t", "1", "--seeds", "2", "--config", "greedy", "--config", "combined", NULL};
    const char *args[24];
    int a = 0;
    for (; base[a]; a++) args[a] = base[a];
    args[a] = "--limit", args[a + 1] = "2", args[a + 2] = NULL;
    RunResult r = run_prog(eval_binary(), args);
    cr_assert_eq(r.code, 0, "%s", r.err);
    run_free(&r);
    size_t len = 0;
    char *first = test_read_file(t.out, &len);
    cr_assert_eq(count_lines(first), 2 + 4);
    // cut the last line in half, as a kill while writing it leaves it
    const char *last = first + len - 1;
    while (last > first && last[-1] != '\n') last--;
    const size_t keep = (size_t)(last - first), cut = keep + (len - keep) / 2;
    cr_assert_eq(truncate(t.out, (off_t)cut), 0);
    args[a] = NULL;
    r = run_prog(eval_binary(), args);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.err, "warning") && strstr(r.err, "dropping an incomplete last line"), "%s", r.err);
    cr_expect(strstr(r.err, "(5 from the results file)"), "%s", r.err);
    cr_expect(strstr(r.out, "== overall (3 items, 3 distinct prompts)"), "%s", r.out);
    cr_expect(strstr(r.out, "\ngreedy                            3 "), "the summary misses results:\n%s", r.out);
    cr_expect(strstr(r.out, "\ncombined                          6 "), "the summary misses results:\n%s", r.out);
    run_free(&r);
    char *second = test_read_file(t.out, NULL);
    cr_expect(strncmp(second, first, keep) == 0, "the finished lines were rewritten");
    cr_expect_eq(count_lines(second), 3 + 6);
    cr_expect_eq(count_substr(second, "\"id\":\"a\",\"config\":\"greedy\",\"seed\":0,"), 1);
    cr_expect_eq(count_substr(second, "\"config\":\"combined\",\"seed\":1,"), 3, "a result twice or missing:\n%s", second);
    // a third run computes nothing
    r = run_prog(eval_binary(), args);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.err, "9/9 done (9 from the results file)"), "%s", r.err);
    run_free(&r);
    char *third = test_read_file(t.out, NULL);
    cr_expect_str_eq(third, second);
    free(first);
    free(second);
    free(third);
    tmp_remove(&t);
}

// A results file written by hand: the summary's numbers against values computed independently.
// greedy i1..i4 = 1,1,0,0; combined seeds (0,1): i1 0,0  i2 1,1  i3 1,0  i4 1,1.
// greedy 2/4, combined 5/8; b (greedy higher) = 1 (i1), c = 2 (i3, i4); diff = (-1+0+.5+1)/4.
//   python3 -c "from statsmodels.stats.proportion import proportion_confint as pc; from scipy.stats import binomtest
//   print(pc(5,8,method='wilson'), pc(2,4,method='wilson'), binomtest(1,3,0.5).pvalue)"
Test(eval_run, summary_from_results, .timeout = 120) {
    const char *m = model_path("stories260K.f32.bin");
    Tmp t;
    tmp_make(&t, "fam.jsonl",
             "{\"id\":\"i1\",\"prompt\":\"a\",\"answer\":\"x\",\"check\":\"exact\"}\n{\"id\":\"i2\",\"prompt\":\"b\",\"answer\":\"x\",\"check\":\"exact\"}\n"
             "{\"id\":\"i3\",\"prompt\":\"c\",\"answer\":\"x\",\"check\":\"exact\"}\n{\"id\":\"i4\",\"prompt\":\"d\",\"answer\":\"x\",\"check\":\"exact\"}\n");
    FILE *f = fopen(t.out, "w");
    const char *cfg[] = {"greedy", "combined", "combined"};
    const int seed[] = {0, 0, 1}, ok[3][4] = {{1, 1, 0, 0}, {0, 1, 1, 1}, {0, 1, 0, 1}};
    for (int c = 0; c < 3; c++)
        for (int i = 0; i < 4; i++)
            fprintf(f, "{\"model\":\"%s\",\"family\":\"fam\",\"id\":\"i%d\",\"config\":\"%s\",\"seed\":%d,\"correct\":%s,"
                       "\"n_tokens\":10,\"time_s\":0.5}\n", m, i + 1, cfg[c], seed[c], ok[c][i] ? "true" : "false");
    fclose(f);
    char json[160];
    snprintf(json, sizeof json, "%s/summary.json", t.dir);
    RunResult r = run_prog(eval_binary(), (const char *[]){m, t.tasks, "-o", t.out, "--seeds", "2", "--config", "greedy",
                                                           "--config", "combined", "--json", json, NULL});
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.err, "12/12 done (12 from the results file)"), "%s", r.err);
    run_free(&r);
    char *s = test_read_file(json, NULL);
    cJSON *doc = cJSON_Parse(s);
    cr_assert(doc, "%s", s);
    const cJSON *rows = cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "overall"), "configs");
    const cJSON *g = cJSON_GetArrayItem(rows, 0), *c = cJSON_GetArrayItem(rows, 1);
    cr_expect_eq(jnum(g, "n"), 4);
    cr_expect_eq(jnum(c, "n"), 8);
    cr_expect_eq(jnum(c, "correct"), 5);
    cr_expect(fabs(jnum(g, "ci95_low") - 0.150038989152) < 1e-9 && fabs(jnum(g, "ci95_high") - 0.849961010848) < 1e-9);
    cr_expect(fabs(jnum(c, "ci95_low") - 0.305742394603) < 1e-9 && fabs(jnum(c, "ci95_high") - 0.863155714176) < 1e-9);
    cr_expect_eq(jnum(c, "b"), 1);
    cr_expect_eq(jnum(c, "c"), 2);
    cr_expect(fabs(jnum(c, "diff_vs_first") - 0.125) < 1e-12);
    cr_expect(fabs(jnum(c, "p") - 1.0) < 1e-12);
    cr_expect(fabs(jnum(c, "mean_tokens") - 10.0) < 1e-12);
    cr_expect(fabs(jnum(c, "tok_per_s") - 20.0) < 1e-9);
    cJSON_Delete(doc);
    free(s);
    tmp_remove(&t);
}

// Bad inputs: one line, exit 2, nothing generated (the -o file is not even created).
Test(eval_run, bad_inputs_run_nothing, .timeout = 120) {
    const char *m = model_path("stories260K.f32.bin");
    Tmp t;
    tmp_make(&t, "arith.jsonl",
             "{\"id\":\"a\",\"prompt\":\"p\",\"answer\":\"1\",\"check\":\"number\"}\n"
             "{\"id\":\"b\",\"prompt\":\"p\",\"answer\":\"1\",\"check\":\"numbr\"}\n");
    char good[160];
    snprintf(good, sizeof good, "%s/good.jsonl", t.dir);
    FILE *f = fopen(good, "w");
    fputs("{\"id\":\"a\",\"prompt\":\"p\",\"answer\":\"1\",\"check\":\"number\",\"max_tokens\":4}\n", f);
    fclose(f);
    // the good file first: still nothing runs
    expect_error_prog(eval_binary(), (const char *[]){m, good, t.tasks, "-o", t.out, NULL}, 2,
                      "arith.jsonl:2: field 'check': unknown check 'numbr' (number, exact, choice, regex, contains, word, open)");
    cr_expect(access(t.out, F_OK) != 0, "results written for a bad task file");
    expect_error_prog(eval_binary(), (const char *[]){m, good, "-o", t.out, "--config", "combined:temp=x", NULL}, 2,
                      "eval: config 'combined:temp=x': key 'temp': --temp: 'x' is not a number");
    expect_error_prog(eval_binary(), (const char *[]){m, good, "-o", t.out, "--config", "agents:critic=no", NULL}, 2,
                      "key 'critic'");
    expect_error_prog(eval_binary(), (const char *[]){m, good, "-o", t.out, "--seeds", "0", NULL}, 2, "--seeds");
    // the pool's flags are checked by ./run's code before anything runs
    expect_error_prog(eval_binary(), (const char *[]){m, good, "-o", t.out, "--config", "agents:n=2,workers=3", NULL}, 2,
                      "eval: config 'agents:n=2,workers=3': --workers 3 is more than the 2 agents");
    expect_error_prog(eval_binary(), (const char *[]){m, good, "-o", good, NULL}, 2, "eval: ");
    cr_expect(access(t.out, F_OK) != 0, "results written for a bad config");
    // chat items on a model without a chat template: refused before anything runs
    FILE *c = fopen(good, "a");
    fputs("{\"id\":\"c\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"answer\":\"1\",\"check\":\"number\"}\n", c);
    fclose(c);
    expect_error_prog(eval_binary(), (const char *[]){m, good, "-o", t.out, NULL}, 2,
                      "good.jsonl:2: field 'messages': ");
    cr_expect(access(t.out, F_OK) != 0);
    // results of another model in -o
    f = fopen(t.out, "w");
    fputs("{\"model\":\"other.bin\",\"family\":\"good\",\"id\":\"a\",\"config\":\"greedy\",\"seed\":0,\"correct\":true,"
          "\"n_tokens\":1,\"time_s\":0.1}\n", f);
    fclose(f);
    f = fopen(good, "w");
    fputs("{\"id\":\"a\",\"prompt\":\"p\",\"answer\":\"1\",\"check\":\"number\",\"max_tokens\":4}\n", f);
    fclose(f);
    expect_error_prog(eval_binary(), (const char *[]){m, good, "-o", t.out, NULL}, 2, "a result of model 'other.bin'");
    tmp_remove(&t);
}

// --report-dir: a page per (item, config, seed), named from them (tools/eval/pages.h: '/' and ':'
// as '_' and the original's FNV-1a hash, the names below computed by Python as
// tests/test_eval_inputs.c says), each with its JSON blob holding one token record per generated
// token (rolled-back ones marked); the reports change nothing in the results; an existing page
// is replaced; a folder that cannot be made is one line, exit 2.
static const char *page_part(const char *s) {
    static const char *const names[][2] = {
        {"s/1", "s_1~0c971d92"}, {"s2", "s2"}, {"greedy", "greedy"}, {"entropix", "entropix"},
        {"combined:temp=1.0", "combined_temp_1.0~e12d4f7e"},
        {"agents:n=3,critic=on,check_every=2", "agents_n_3_critic_on_check_every_2~ef828ada"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(s, names[i][0]) == 0) return names[i][1];
    cr_assert_fail("no page name for '%s'", s);
    return NULL;
}

// The tokens of the page's blob that were not rolled back; -1 when the page has no blob.
static int page_tokens(const char *path, int *n_all) {
    char *s = test_read_file(path, NULL);
    cr_assert(s, "%s missing", path);
    const char *tag = "<script type=\"application/json\"", *b = strstr(s, tag);
    char *e = b ? strstr(b, "</script>") : NULL;
    if (!b || !e || !(b = strchr(b, '>'))) return free(s), -1;
    *e = 0;
    cJSON *doc = cJSON_Parse(b + 1);
    free(s);
    cr_assert(doc, "%s: the blob does not parse", path);
    const cJSON *tokens = cJSON_GetObjectItem(doc, "tokens"), *state = cJSON_GetObjectItem(doc, "state");
    cr_assert(cJSON_IsArray(tokens) && cJSON_IsArray(state) && cJSON_GetArraySize(tokens) == cJSON_GetArraySize(state));
    int kept = 0;
    *n_all = cJSON_GetArraySize(tokens);
    for (int i = 0; i < *n_all; i++) kept += cJSON_GetArrayItem(cJSON_GetArrayItem(state, i), 0)->valueint == 0;
    cJSON_Delete(doc);
    return kept;
}

Test(eval_run, report_dir_pages, .timeout = 300) {
    const char *m = model_path("stories260K.f32.bin");
    Tmp t;
    tmp_make(&t, "story.jsonl",
             "{\"id\":\"s/1\",\"prompt\":\"Once upon a time\",\"answer\":\"Lily\",\"check\":\"contains\",\"max_tokens\":14}\n"
             "{\"id\":\"s2\",\"prompt\":\"Tom had 3 apples\",\"answer\":\"3\",\"check\":\"number\",\"max_tokens\":9}\n");
    char pages[160], plain[160], page[512];
    snprintf(pages, sizeof pages, "%s/pages", t.dir);
    snprintf(plain, sizeof plain, "%s/plain.jsonl", t.dir);
    cr_assert_eq(mkdir(pages, 0777), 0);  // one page there already, with other content: replaced
    snprintf(page, sizeof page, "%s/story-s2-entropix-s1.html", pages);
    FILE *f = fopen(page, "w");
    fputs("old page", f);
    fclose(f);
    const char *args[] = {m, t.tasks, "-o", t.out, "-t", "1", "--seeds", "2", "--config", "greedy", "--config",
                          "combined:temp=1.0", "--config", "entropix", "--config", "agents:n=3,critic=on,check_every=2",
                          "--report-dir", pages, NULL};
    RunResult r = run_prog(eval_binary(), args);
    cr_assert_eq(r.code, 0, "%s", r.err);
    run_free(&r);
    int n = 0;
    cJSON **lines = read_results(t.out, &n);
    cr_assert_eq(n, 2 * (1 + 2 + 2 + 2));
    for (int i = 0; i < n; i++) {
        snprintf(page, sizeof page, "%s/story-%s-%s-s%.0f.html", pages, page_part(jstr(lines[i], "id")),
                 page_part(jstr(lines[i], "config")), jnum(lines[i], "seed"));
        int all = 0;
        cr_expect_eq(page_tokens(page, &all), (int)jnum(lines[i], "n_tokens"), "%s: tokens of the page (%d with the "
                     "rolled-back ones) against n_tokens", page, all);
    }
    char cmd[256];
    snprintf(cmd, sizeof cmd, "test $(ls -A '%s' | wc -l) -eq %d", pages, n);
    cr_expect_eq(system(cmd), 0, "a page too many or a temporary file left in %s", pages);
    // the same run without pages: the same results
    args[3] = plain, args[16] = NULL;
    r = run_prog(eval_binary(), args);
    cr_assert_eq(r.code, 0, "%s", r.err);
    run_free(&r);
    int n2 = 0;
    cJSON **lines2 = read_results(plain, &n2);
    cr_assert_eq(n2, n);
    for (int i = 0; i < n; i++) {
        cr_expect_str_eq(jstr(lines2[i], "text"), jstr(lines[i], "text"), "line %d: the report changed the text", i);
        cr_expect_eq(jnum(lines2[i], "n_tokens"), jnum(lines[i], "n_tokens"));
    }
    free_lines(lines, n);
    free_lines(lines2, n2);
    // a folder that cannot be made: one line, exit 2 (checked before the model opens), nothing run
    snprintf(pages, sizeof pages, "%s/no/such/pages", t.dir);
    snprintf(plain, sizeof plain, "%s/none.jsonl", t.dir);
    args[3] = plain, args[16] = "--report-dir";
    expect_error_prog(eval_binary(), args, 2, "/no/such/pages: the folder ");
    cr_expect(access(plain, F_OK) != 0, "results written with a bad --report-dir");
    tmp_remove(&t);
}

// What eval checks of its inputs before the first generation, as a program: ids that differ
// only in bytes a page name cannot hold get pages of their own; two generations that would share
// a page, a page name past its limit, a task line past 64 KiB and a (family, id) given twice are
// one line, exit 2, nothing run; a results file another eval holds (flock) is refused, untouched.
Test(eval_run, inputs_checked_before_the_run, .timeout = 120) {
    const char *m = model_path("stories260K.f32.bin");
    Tmp t;
    tmp_make(&t, "t.jsonl",
             "{\"id\":\"a/b\",\"prompt\":\"Once\",\"answer\":\"x\",\"check\":\"contains\",\"max_tokens\":2}\n"
             "{\"id\":\"a?b\",\"prompt\":\"Once\",\"answer\":\"x\",\"check\":\"contains\",\"max_tokens\":2}\n"
             "{\"id\":\"a_b\",\"prompt\":\"Once\",\"answer\":\"x\",\"check\":\"contains\",\"max_tokens\":2}\n"
             "{\"id\":\"a:b\",\"prompt\":\"Once\",\"answer\":\"x\",\"check\":\"contains\",\"max_tokens\":2}\n");
    char pages[160], bad[160], cmd[400];
    snprintf(pages, sizeof pages, "%s/pages", t.dir);
    snprintf(bad, sizeof bad, "%s/bad.jsonl", t.dir);
    const char *args[] = {m, t.tasks, "-o", t.out, "-t", "1", "--config", "greedy", "--report-dir", pages, NULL};
    RunResult r = run_prog(eval_binary(), args);
    cr_assert_eq(r.code, 0, "%s", r.err);
    run_free(&r);
    snprintf(cmd, sizeof cmd, "test $(ls -A '%s' | wc -l) -eq 4", pages);
    cr_expect_eq(system(cmd), 0, "four ids, not four pages in %s", pages);
    // each bad file: exit 2, one line, no results file, no page folder
    static const struct { const char *text, *want; } cases[] = {
        {"{\"id\":\"a-b\",\"family\":\"t\",\"prompt\":\"p\",\"answer\":\"x\",\"check\":\"contains\"}\n"
         "{\"id\":\"b\",\"family\":\"t-a\",\"prompt\":\"p\",\"answer\":\"x\",\"check\":\"contains\"}\n",
         "bad.jsonl:2: field 'id': 'b' (family 't-a') and "},
        {"{\"id\":\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
         "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
         "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\","
         "\"prompt\":\"p\",\"answer\":\"x\",\"check\":\"contains\"}\n",
         "bad.jsonl:1: field 'id': the --report-dir page's name 'bad-xxx"},
        {"{\"id\":\"a\",\"family\":\"t\",\"prompt\":\"p\",\"answer\":\"x\",\"check\":\"contains\"}\n",
         "bad.jsonl:1: field 'id': 'a/b' of family 't' repeats"},
    };
    const char *bad_args[] = {m, t.tasks, bad, "-o", bad, "-t", "1", "--config", "greedy", "--report-dir", pages, NULL};
    char out2[160];
    snprintf(out2, sizeof out2, "%s/none.jsonl", t.dir);
    bad_args[4] = out2;
    snprintf(pages, sizeof pages, "%s/pages2", t.dir);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        FILE *f = fopen(bad, "w");
        fputs(cases[i].text, f);
        fclose(f);
        if (i == 2) {  // the same (family, id) as t.jsonl's first item
            f = fopen(bad, "w");
            fputs("{\"id\":\"a/b\",\"family\":\"t\",\"prompt\":\"p\",\"answer\":\"x\",\"check\":\"contains\"}\n", f);
            fclose(f);
        }
        expect_error_prog(eval_binary(), bad_args, 2, cases[i].want);
        cr_expect(access(out2, F_OK) != 0 && access(pages, F_OK) != 0, "case %zu: something was written", i);
    }
    // a line of 70,000 bytes: refused unparsed
    FILE *f = fopen(bad, "w");
    fputs("{\"id\":\"a\",\"answer\":\"x\",\"check\":\"contains\",\"prompt\":\"", f);
    for (int i = 0; i < 70000; i++) fputc('P', f);
    fputs("\"}\n", f);
    fclose(f);
    const char *long_args[] = {m, bad, "-o", out2, "-t", "1", NULL};
    expect_error_prog(eval_binary(), long_args, 2, "bad.jsonl:1: the line is 70054 bytes; a task line is at most 65536");
    // the results file held by another writer (this process's flock)
    const int fd = open(t.out, O_RDWR);
    cr_assert(fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0);
    struct stat before, after;
    cr_assert_eq(stat(t.out, &before), 0);
    char want[256];
    snprintf(want, sizeof want, "eval: -o %s: another eval is writing it (pid %d)", t.out, (int)getpid());
    args[8] = NULL;
    expect_error_prog(eval_binary(), args, 2, want);
    cr_assert_eq(stat(t.out, &after), 0);
    cr_expect(after.st_size == before.st_size && after.st_mtime == before.st_mtime, "the held results file changed");
    close(fd);
    tmp_remove(&t);
}
