// test_out_paths.c — every program's output flags under one policy (base/out_file.h): a file
// written whole (./run --report, calibrate -o, eval --json, bench --save, convert's model) is
// refused when its path is a FIFO, a symbolic link, a device or a missing folder, before
// anything runs, and the thing at the path is left as it was; a stream (--metrics, --log) goes
// through a symbolic link, to stdout as "-", and fails at once on a FIFO nobody reads instead of
// hanging; eval's -o in a missing folder says so, and its --report-dir is checked with them. The
// FIFO and the link are made in a temporary folder; /dev/null is tried last, only after the same
// refusal passed on the FIFO and the link (each cr_assert ends the test), and must still be the
// same character device after.
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "run_util.h"
#include "test_util.h"

typedef struct {
    char dir[64];
    char fifo[128], link[128], target[128], missing[128], model[1024], text[128];
} Paths;

static void paths_setup(Paths *p) {
    snprintf(p->dir, sizeof p->dir, "/tmp/emx_outp_XXXXXX");
    cr_assert_not_null(mkdtemp(p->dir));
    snprintf(p->fifo, sizeof p->fifo, "%s/fifo", p->dir);
    snprintf(p->link, sizeof p->link, "%s/link", p->dir);
    snprintf(p->target, sizeof p->target, "%s/target.txt", p->dir);
    snprintf(p->missing, sizeof p->missing, "%s/no/such/folder/out", p->dir);
    snprintf(p->text, sizeof p->text, "%s/text.txt", p->dir);
    cr_assert_eq(mkfifo(p->fifo, 0600), 0);
    FILE *f = fopen(p->target, "w");
    cr_assert(f && fputs("the target\n", f) >= 0 && fclose(f) == 0);
    cr_assert_eq(symlink(p->target, p->link), 0);
    f = fopen(p->text, "w");
    cr_assert(f);
    for (int i = 0; i < 20; i++) fputs("Once upon a time there was a little girl who liked to play. ", f);
    cr_assert_eq(fclose(f), 0);
    test_build_path(p->model, sizeof p->model, "models/stories260K.f32.bin");
    cr_assert_eq(access(p->model, R_OK), 0, "%s missing: make test-models", p->model);
}

// The FIFO is still a FIFO, the link still a link to the untouched target.
static void expect_untouched(const Paths *p) {
    struct stat sb;
    cr_assert_eq(lstat(p->fifo, &sb), 0);
    cr_assert(S_ISFIFO(sb.st_mode), "the FIFO was replaced");
    cr_assert_eq(lstat(p->link, &sb), 0);
    cr_assert(S_ISLNK(sb.st_mode), "the symbolic link was replaced");
    char *t = test_read_file(p->target, NULL);
    cr_assert(t && !strcmp(t, "the target\n"), "the link's target changed: %s", t ? t : "(gone)");
    free(t);
}

static void paths_cleanup(Paths *p) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", p->dir);
    cr_expect_eq(system(cmd), 0);
}

static const char *prog(char *buf, size_t cap, const char *rel) { return test_build_path(buf, cap, rel); }

// Runs prog with args, the output path at args[slot] replaced by each of the FIFO, the link and
// the missing folder in turn, then /dev/null: each refused with `code` and the kind named.
static void expect_each_refused(const Paths *p, const char *bin, const char **args, int slot, int code) {
    const char *const cases[][2] = {{p->fifo, "is a FIFO, not a regular file: refusing to replace it"},
                                    {p->link, "is a symbolic link, not a regular file: refusing to replace it"},
                                    {p->missing, "does not exist"}};
    for (int i = 0; i < 3; i++) {
        args[slot] = cases[i][0];
        RunResult r = run_prog(bin, args);  // asserted, not expected: /dev/null comes only after these pass
        cr_assert(r.code == code && strstr(r.err, cases[i][1]) && count_lines(r.err) == 1, "%s ... %s: exit %d: %s",
                  bin, cases[i][0], r.code, r.err);
        run_free(&r);
        expect_untouched(p);
    }
    struct stat before, after;
    cr_assert_eq(lstat("/dev/null", &before), 0);
    cr_assert(S_ISCHR(before.st_mode));
    args[slot] = "/dev/null";
    expect_error_prog(bin, args, code, "/dev/null is a character device, not a regular file: refusing to replace it");
    cr_assert_eq(lstat("/dev/null", &after), 0);
    cr_assert(S_ISCHR(after.st_mode) && after.st_rdev == before.st_rdev && after.st_ino == before.st_ino,
              "/dev/null was replaced");
}

Test(out_paths, run_report_refuses_special_paths, .timeout = 120) {
    Paths p;
    paths_setup(&p);
    const char *args[] = {p.model, "-t", "1", "-n", "4", "-s", "1", "--report", NULL, NULL};
    expect_each_refused(&p, run_binary(), args, 8, 2);
    paths_cleanup(&p);
}

Test(out_paths, calibrate_o_refuses_special_paths, .timeout = 120) {
    Paths p;
    paths_setup(&p);
    char bin[512];
    const char *args[] = {p.model, p.text, "-n", "64", "-c", "32", "-t", "1", "-o", NULL, NULL};
    expect_each_refused(&p, prog(bin, sizeof bin, "tools/calibrate"), args, 9, 2);
    paths_cleanup(&p);
}

Test(out_paths, eval_json_refuses_and_o_names_the_missing_folder, .timeout = 120) {
    Paths p;
    paths_setup(&p);
    char bin[512], tasks[160], out[160];
    snprintf(tasks, sizeof tasks, "%s/tasks.jsonl", p.dir);
    snprintf(out, sizeof out, "%s/results.jsonl", p.dir);
    FILE *f = fopen(tasks, "w");
    cr_assert(f && fputs("{\"id\": \"a-1\", \"family\": \"a\", \"prompt\": \"1 + 1 =\", \"answer\": \"2\", "
                         "\"check\": \"number\", \"max_tokens\": 2}\n", f) >= 0 && fclose(f) == 0);
    prog(bin, sizeof bin, "cpu/tools/eval");
    const char *args[] = {p.model, tasks, "--config", "greedy", "-t", "1", "-o", out, "--json", NULL, NULL};
    expect_each_refused(&p, bin, args, 9, 2);
    cr_expect_neq(access(out, F_OK), 0, "a refused run created %s", out);
    // -o in a missing folder: the reason, not "Success"
    const char *missing[] = {p.model, tasks, "--config", "greedy", "-t", "1", "-o", p.missing, NULL};
    expect_error_prog(bin, missing, 2, "the folder");
    expect_error_prog(bin, missing, 2, "does not exist");
    // -o on a FIFO: appended and read back, so refused (reading it would wait for a writer)
    const char *fifo[] = {p.model, tasks, "--config", "greedy", "-t", "1", "-o", p.fifo, NULL};
    expect_error_prog(bin, fifo, 2, "is a FIFO");
    expect_untouched(&p);
    paths_cleanup(&p);
}

// eval --report-dir, checked with -o and --json before the model is opened: a folder whose parent
// does not exist, a path that is a file, a FIFO or a link to a file is one line, exit 2, and
// nothing is made. The model named is not a model at all, so an error that came after opening it
// would be that file's, exit 1. An existing folder, or a new one in an existing folder, passes
// this check, with or without a trailing '/' (and is made only once the model has opened).
Test(out_paths, eval_report_dir_refused_before_the_model_opens, .timeout = 120) {
    Paths p;
    paths_setup(&p);
    char bin[512], tasks[160], out[160], fresh[160];
    snprintf(tasks, sizeof tasks, "%s/tasks.jsonl", p.dir);
    snprintf(out, sizeof out, "%s/results.jsonl", p.dir);
    snprintf(fresh, sizeof fresh, "%s/pages", p.dir);
    FILE *f = fopen(tasks, "w");
    cr_assert(f && fputs("{\"id\": \"a-1\", \"family\": \"a\", \"prompt\": \"1 + 1 =\", \"answer\": \"2\", "
                         "\"check\": \"number\", \"max_tokens\": 2}\n", f) >= 0 && fclose(f) == 0);
    prog(bin, sizeof bin, "cpu/tools/eval");
    const char *args[] = {p.text, tasks, "--config", "greedy", "-t", "1", "-o", out, "--report-dir", NULL, NULL};
    const char *const cases[][2] = {{p.missing, "/no/such/folder/out: the folder "},  // ... /no/such/folder does not exist
                                    {p.target, "target.txt is a regular file, not a folder"},
                                    {p.fifo, "fifo is a FIFO, not a folder"},
                                    {p.link, "link is a regular file, not a folder"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        args[9] = cases[i][0];
        expect_error_prog(bin, args, 2, cases[i][1]);
        expect_untouched(&p);
    }
    char parent[160];
    snprintf(parent, sizeof parent, "%s/no", p.dir);
    cr_expect_neq(access(parent, F_OK), 0, "a refused run made %s", parent);
    cr_expect_neq(access(out, F_OK), 0, "a refused run created %s", out);
    // a folder that can be made, and one that exists: the check passes, the model file is the error
    args[9] = fresh;
    expect_error_prog(bin, args, 1, "text.txt");
    cr_expect_neq(access(fresh, F_OK), 0, "%s was made before the model opened", fresh);
    args[9] = p.dir;
    expect_error_prog(bin, args, 1, "text.txt");
    char slashed[170];  // "pages/" names the folder pages
    snprintf(slashed, sizeof slashed, "%s//", fresh);
    args[9] = slashed;
    expect_error_prog(bin, args, 1, "text.txt");
    paths_cleanup(&p);
}

Test(out_paths, bench_save_refuses_special_paths_before_running, .timeout = 120) {
    Paths p;
    paths_setup(&p);
    char bin[512];
    const char *args[] = {"speed", p.model, "-t", "1", "--save", NULL, NULL};
    expect_each_refused(&p, prog(bin, sizeof bin, "cpu/tools/bench"), args, 5, 2);
    paths_cleanup(&p);
}

// An output naming one of the tool's inputs is refused before anything runs, and the input is
// left as it was: calibrate's model, text and --base profile, bench's model and --baseline.
Test(out_paths, calibrate_and_bench_refuse_an_output_naming_an_input, .timeout = 120) {
    Paths p;
    paths_setup(&p);
    char bin[512], model[160], base[160], baseline[160];
    snprintf(model, sizeof model, "%s/model.bin", p.dir);
    snprintf(base, sizeof base, "%s/base.profile", p.dir);
    snprintf(baseline, sizeof baseline, "%s/baseline.json", p.dir);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", p.model, model);
    cr_assert_eq(system(cmd), 0);
    FILE *f = fopen(base, "w");
    cr_assert(f && fputs("# a profile\n", f) >= 0 && fclose(f) == 0);
    f = fopen(baseline, "w");
    cr_assert(f && fputs("{}\n", f) >= 0 && fclose(f) == 0);
    prog(bin, sizeof bin, "tools/calibrate");
    const char *cal_model[] = {model, p.text, "-n", "64", "-c", "32", "-t", "1", "-o", model, NULL};
    expect_error_keeps(bin, cal_model, 2, "-o ", model);
    expect_error_keeps(bin, cal_model, 2, "is the model file", model);
    const char *cal_text[] = {model, p.text, "-n", "64", "-c", "32", "-t", "1", "-o", p.text, NULL};
    expect_error_keeps(bin, cal_text, 2, "an output may not overwrite an input", p.text);
    const char *cal_base[] = {model, p.text, "-n", "64", "-c", "32", "-t", "1", "--base", base, "-o", base, NULL};
    expect_error_keeps(bin, cal_base, 2, "is --base", base);
    prog(bin, sizeof bin, "cpu/tools/bench");
    const char *bench_model[] = {"speed", model, "-t", "1", "-p", "4", "-n", "2", "--runs", "1", "--save", model, NULL};
    expect_error_keeps(bin, bench_model, 2, "--save ", model);
    const char *bench_base[] = {"speed", model, "-t", "1", "--baseline", baseline, "--save", baseline, NULL};
    expect_error_keeps(bin, bench_base, 2, "is --baseline", baseline);
    paths_cleanup(&p);
}

Test(out_paths, convert_refuses_special_paths, .timeout = 120) {
    Paths p;
    paths_setup(&p);
    char bin[512], src[512], tok[512];
    test_shared_path(src, sizeof src, "testdata/stories260K/stories260K.bin");
    test_shared_path(tok, sizeof tok, "testdata/stories260K/tok512.bin");
    const char *args[] = {src, NULL, "--tokenizer", tok, "--dtype", "f32", NULL};
    expect_each_refused(&p, prog(bin, sizeof bin, "tools/convert"), args, 1, 1);
    paths_cleanup(&p);
}

// Streams: through a link (the link stays), "-" is stdout, a FIFO nobody reads fails at once.
Test(out_paths, run_metrics_streams, .timeout = 120) {
    Paths p;
    paths_setup(&p);
    const char *through[] = {p.model, "-t", "1", "-n", "4", "-s", "1", "--metrics", p.link, NULL};
    RunResult r = run(through);
    cr_expect_eq(r.code, 0, "%s", r.err);
    run_free(&r);
    struct stat sb;
    cr_assert_eq(lstat(p.link, &sb), 0);
    cr_expect(S_ISLNK(sb.st_mode), "the link was replaced");
    char *t = test_read_file(p.target, NULL);
    cr_expect(t && !strncmp(t, "{\"", 2), "the metrics did not go through the link: %s", t ? t : "");
    free(t);
    const char *to_stdout[] = {p.model, "-t", "1", "-n", "4", "-s", "1", "--metrics", "-", NULL};
    r = run(to_stdout);
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "{\"index\":0") || strstr(r.out, "\"index\""), "no metrics line on stdout: %s", r.out);
    run_free(&r);
    const char *fifo[] = {p.model, "-t", "1", "-n", "4", "-s", "1", "--metrics", p.fifo, NULL};
    expect_error(fifo, 1, "is a FIFO that nobody reads");
    const char *pool_log[] = {p.model, "-t", "1", "-n", "4", "-s", "1", "--agents", "2", "--log", p.fifo, NULL};
    expect_error(pool_log, 1, "--log");
    const char *dir[] = {p.model, "-t", "1", "-n", "4", "--metrics", p.dir, NULL};
    expect_error(dir, 2, "is a directory");
    paths_cleanup(&p);
}
