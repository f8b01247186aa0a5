// test_eval_inputs.c — what tools/eval refuses before its first generation, in-process: a task
// line's byte limit, a non-finite number answer, a NUL character in a string, a (family, id)
// given twice across files, --report-dir page names (each part's '~' hash when a byte was
// replaced, the name and path limits, two generations sharing a page), and the results file's
// lock. The page names are checked against names computed by Python's standard library:
//   def fnv1a(s):  # 32-bit FNV-1a
//       h = 0x811c9dc5
//       for b in s.encode(): h = ((h ^ b) * 0x01000193) & 0xffffffff
//       return '%08x' % h
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/eval/pages.h"
#include "tools/eval/results.h"
#include "tools/eval/tasks.h"

// A task file with `text` under /tmp; returns its path (static buffer, one per slot), removed by the caller.
static const char *write_tasks(const char *text, int slot) {
    static char path[2][64];
    snprintf(path[slot], sizeof path[slot], "/tmp/emx_eval_inputs_XXXXXX");
    int fd = mkstemp(path[slot]);
    cr_assert(fd >= 0);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path[slot];
}

// Loads text as a task file: 0 or -1, err filled.
static int load(const char *text, char *err, size_t errlen) {
    const char *p = write_tasks(text, 0);
    EvalTaskFile tf;
    const int rc = eval_tasks_load(p, &tf, err, errlen);
    unlink(p);
    if (rc == 0) eval_tasks_free(&tf);
    return rc;
}

// One line of exactly `bytes` bytes (its prompt padded), then a newline.
static char *line_of(size_t bytes) {
    const char *head = "{\"id\":\"a\",\"answer\":\"x\",\"check\":\"exact\",\"prompt\":\"", *tail = "\"}\n";
    const size_t pad = bytes - strlen(head) - (strlen(tail) - 1);
    char *s = malloc(bytes + 2);
    cr_assert(s);
    strcpy(s, head);
    memset(s + strlen(head), 'P', pad);
    strcpy(s + strlen(head) + pad, tail);
    cr_assert_eq(strlen(s), bytes + 1);
    return s;
}

Test(eval_inputs, line_byte_limit) {
    char err[512] = "";
    char *ok = line_of(EVAL_MAX_LINE_BYTES), *over = line_of(EVAL_MAX_LINE_BYTES + 1);
    cr_expect_eq(load(ok, err, sizeof err), 0, "a line of 65536 bytes: %s", err);
    cr_expect_eq(load(over, err, sizeof err), -1, "a line of 65537 bytes accepted");
    cr_expect(strstr(err, ":1: the line is 65537 bytes; a task line is at most 65536"), "[%s]", err);
    free(ok);
    free(over);
}

Test(eval_inputs, non_finite_answers_and_nul_characters) {
    static const struct { const char *text, *want; } bad[] = {
        {"{\"id\":\"a\",\"prompt\":\"p\",\"answer\":1e999,\"check\":\"number\"}", ":1: field 'answer': not a finite number"},
        {"{\"id\":\"a\",\"prompt\":\"p\",\"answer\":-1e999,\"check\":\"number\"}", ":1: field 'answer': not a finite number"},
        {"{\"id\":\"a\",\"prompt\":\"p\",\"answer\":\"1e999\",\"check\":\"number\"}", "field 'answer': '1e999' is not a number"},
        {"{\"id\":\"a\",\"prompt\":\"Once\\u0000 upon\",\"answer\":\"1\",\"check\":\"number\"}",
         ":1: field 'prompt': holds a NUL character (U+0000)"},
        {"{\"id\":\"a\",\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\",\"content\":\"hi\\u0000\"}],"
         "\"answer\":\"1\",\"check\":\"number\"}", ":1: field 'messages': holds a NUL character"},
        {"{\"id\":\"a\\u0000b\",\"prompt\":\"p\",\"answer\":\"1\",\"check\":\"exact\"}", "field 'id': holds a NUL character"},
        {"{\"id\":\"a\",\"prompt\":\"p\",\"answer\":\"1\\u0000\",\"check\":\"exact\"}", "field 'answer': holds a NUL"},
        {"{\"id\":\"a\",\"prompt\":\"p\",\"answer\":\"1\",\"check\":\"word\",\"answer_alphabet\":[\"1\",\"\\u0000\"]}",
         "field 'answer_alphabet': holds a NUL"},
        {"\n{\"id\":\"a\",\"prompt\":\"p\",\"answer\":\"1\",\"check\":\"exact\",\"k\\u0000\":1}", ":2: field 'k': holds a NUL"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[512] = "";
        cr_expect_eq(load(bad[i].text, err, sizeof err), -1, "case %zu accepted: %s", i, bad[i].text);
        cr_expect(strstr(err, bad[i].want), "case %zu: [%s] lacks [%s]", i, err, bad[i].want);
        cr_expect(!strchr(err, '\n'), "case %zu: not one line", i);
    }
    // an escaped backslash before "u0000" is text, not a NUL: kept as written
    const char *p = write_tasks("{\"id\":\"a\",\"prompt\":\"x\\\\u0000y \\\"\\\\\\\\u0000\\\"\",\"answer\":\"1\",\"check\":\"exact\"}", 0);
    EvalTaskFile tf;
    char err[512] = "";
    const int rc = eval_tasks_load(p, &tf, err, sizeof err);
    unlink(p);
    cr_assert_eq(rc, 0, "%s", err);
    cr_expect_str_eq(tf.items[0].prompt, "x\\u0000y \"\\\\u0000\"");
    eval_tasks_free(&tf);
}

// Results are known by (family, id): the same pair in two files is refused at the later one.
Test(eval_inputs, family_and_id_unique_across_files) {
    const char *a = write_tasks("{\"id\":\"q\",\"family\":\"f\",\"prompt\":\"p\",\"answer\":\"1\",\"check\":\"exact\"}\n", 0);
    const char *b = write_tasks("{\"id\":\"r\",\"family\":\"f\",\"prompt\":\"p\",\"answer\":\"1\",\"check\":\"exact\"}\n"
                                "{\"id\":\"q\",\"family\":\"g\",\"prompt\":\"p\",\"answer\":\"1\",\"check\":\"exact\"}\n"
                                "{\"id\":\"q\",\"family\":\"f\",\"prompt\":\"p\",\"answer\":\"1\",\"check\":\"exact\"}\n", 1);
    EvalTaskFile fa, fb;
    char err[512] = "", want[256];
    cr_assert_eq(eval_tasks_load(a, &fa, err, sizeof err), 0, "%s", err);
    cr_assert_eq(eval_tasks_load(b, &fb, err, sizeof err), 0, "%s", err);
    const EvalItem *items[4] = {&fa.items[0], &fb.items[0], &fb.items[1], &fb.items[2]};
    cr_expect_eq(eval_items_unique(items, 3, err, sizeof err), 0, "the same id in another family: %s", err);
    cr_expect_eq(eval_items_unique(items, 4, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s:3: field 'id': 'q' of family 'f' repeats %s:1's", b, a);
    cr_expect(strstr(err, want), "[%s] lacks [%s]", err, want);
    unlink(a);
    unlink(b);
    eval_tasks_free(&fa);
    eval_tasks_free(&fb);
}

static EvalItem item(const char *family, const char *id, int line) {
    return (EvalItem){.family = (char *)family, .id = (char *)id, .file = "t.jsonl", .line = line};
}

// Names as pages.h says, against Python's fnv1a (above).
Test(eval_inputs, page_names) {
    static const struct { const char *family, *id, *config; unsigned seed; const char *want; } cases[] = {
        {"t", "a/b", "greedy", 0, "t-a_b~3a8e75c1-greedy-s0.html"},
        {"t", "a?b", "greedy", 0, "t-a_b~1ab552d1-greedy-s0.html"},
        {"t", "a:b", "greedy", 0, "t-a_b~08bd8540-greedy-s0.html"},
        {"t", "a_b", "greedy", 0, "t-a_b-greedy-s0.html"},
        {"arith", "a17", "combined:temp=0.7", 2, "arith-a17-combined_temp_0.7~41a90d20-s2.html"},
        {"story", "s/1", "agents:n=3,critic=on,check_every=2", 1, "story-s_1~0c971d92-agents_n_3_critic_on_check_every_2~ef828ada-s1.html"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const EvalItem it = item(cases[i].family, cases[i].id, 1);
        const EvalConfig c = {.spec = (char *)cases[i].config};
        char name[EVAL_PAGE_NAME_MAX + 1], path[512];
        cr_expect_eq(eval_page_name(name, sizeof name, &it, &c, cases[i].seed), strlen(cases[i].want));
        cr_expect_str_eq(name, cases[i].want);
        cr_expect_eq(eval_report_path(path, sizeof path, "out/pages", &it, &c, cases[i].seed), 0);
        char want[512];
        snprintf(want, sizeof want, "out/pages/%s", cases[i].want);
        cr_expect_str_eq(path, want);
    }
}

Test(eval_inputs, pages_checked_before_the_run) {
    char err[512] = "";
    const EvalConfig greedy = {.spec = "greedy", .deterministic = 1}, combined = {.spec = "combined"};
    const EvalConfig configs[2] = {greedy, combined};
    // "a/b", "a?b", "a_b", "a:b": four pages, no collision
    EvalItem distinct[4] = {item("t", "a/b", 1), item("t", "a?b", 2), item("t", "a_b", 3), item("t", "a:b", 4)};
    const EvalItem *dp[4] = {&distinct[0], &distinct[1], &distinct[2], &distinct[3]};
    cr_expect_eq(eval_pages_check(dp, 4, configs, 2, 3, "pages", err, sizeof err), 0, "%s", err);
    // the '-' between the parts: (t, a-b) and (t-a, b) are both t-a-b
    EvalItem joined[2] = {item("t", "a-b", 1), item("t-a", "b", 2)};
    const EvalItem *jp[2] = {&joined[0], &joined[1]};
    cr_expect_eq(eval_pages_check(jp, 2, configs, 1, 3, "pages", err, sizeof err), -1);
    cr_expect_str_eq(err, "t.jsonl:2: field 'id': 'b' (family 't-a') and t.jsonl:1's 'a-b' (family 't') would write the "
                          "same --report-dir page for config 'greedy': t-a-b-greedy-s0.html");
    // ... and across configs: (t, x-a) with config b, (t, x) with config a-b
    const EvalConfig bc[2] = {{.spec = "b"}, {.spec = "a-b"}};
    EvalItem across[2] = {item("t", "x-a", 1), item("t", "x", 2)};
    const EvalItem *ap[2] = {&across[0], &across[1]};
    cr_expect_eq(eval_pages_check(ap, 2, bc, 2, 1, "pages", err, sizeof err), -1);
    cr_expect(strstr(err, "t.jsonl:2: field 'id': 'x' (family 't') and t.jsonl:1's 'x-a'"), "[%s]", err);
    cr_expect(strstr(err, ": t-x-a-b-s0.html"), "[%s]", err);
}

// The name's limit counts its largest seed: "t-" + id + "-combined-s9.html" is id + 19 bytes.
Test(eval_inputs, page_name_and_path_limits) {
    char err[512] = "", id[256];
    const EvalConfig combined = {.spec = "combined"};
    memset(id, 'x', 224);
    id[224] = 0;
    EvalItem it = item("t", id, 7);
    const EvalItem *p[1] = {&it};
    cr_expect_eq(eval_pages_check(p, 1, &combined, 1, 10, "pages", err, sizeof err), 0, "243 bytes: %s", err);
    cr_expect_eq(eval_pages_check(p, 1, &combined, 1, 11, "pages", err, sizeof err), -1, "seed 10: 244 bytes");
    cr_expect(strstr(err, "t.jsonl:7: field 'id': the --report-dir page's name 't-xxx"), "[%s]", err);
    cr_expect(strstr(err, "(config 'combined') is 244 bytes, at most 243"), "[%s]", err);
    char path[EVAL_PAGE_PATH_MAX + 1];
    cr_expect_eq(eval_report_path(path, sizeof path, "pages", &it, &combined, 10), -1);
    // the path: dir + '/' + name at most 4083 bytes ("t-a-combined-s0.html": 20)
    it.id = "a";
    char *dir = malloc(4100);
    memset(dir, 'd', 4062);
    dir[4062] = 0;
    cr_expect_eq(eval_pages_check(p, 1, &combined, 1, 1, dir, err, sizeof err), 0, "4083 bytes: %s", err);
    cr_expect_eq(eval_report_path(path, sizeof path, dir, &it, &combined, 0), 0);
    cr_expect_eq(strlen(path), 4083);
    strcat(dir, "d");
    cr_expect_eq(eval_pages_check(p, 1, &combined, 1, 1, dir, err, sizeof err), -1);
    cr_expect(strstr(err, "t.jsonl:7: field 'id': the --report-dir page's path is 4084 bytes, at most 4083"), "[%s]", err);
    free(dir);
}

// A second open of one results file, in this process or another, is refused while the first
// holds it, and names the holder; what the file holds is not touched.
Test(eval_inputs, results_file_locked) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/emx_eval_results_XXXXXX");
    const int fd = mkstemp(path);
    cr_assert(fd >= 0);
    const char *line = "{\"model\":\"m.bin\",\"family\":\"f\",\"id\":\"a\",\"config\":\"greedy\",\"seed\":0,\"correct\":true,"
                       "\"n_tokens\":1,\"time_s\":0.1}\n";
    cr_assert_eq(write(fd, line, strlen(line)), (ssize_t)strlen(line));
    close(fd);
    EvalResults first, second;
    char err[512] = "", want[160];
    cr_assert_eq(eval_results_open(&first, path, "m.bin", err, sizeof err), 0, "%s", err);
    cr_expect_eq(first.n, 1);
    cr_expect_eq(eval_results_open(&second, path, "m.bin", err, sizeof err), -1, "a second writer was let in");
    snprintf(want, sizeof want, "-o %s: another eval is writing it (pid %d)", path, (int)getpid());
    cr_expect_str_eq(err, want);
    cr_expect_eq(eval_results_close(&first, err, sizeof err), 0, "%s", err);
    cr_expect_eq(eval_results_open(&second, path, "m.bin", err, sizeof err), 0, "after the first closed: %s", err);
    cr_expect_eq(second.n, 1, "the refused open changed the file");
    eval_results_close(&second, NULL, 0);
    unlink(path);
}
