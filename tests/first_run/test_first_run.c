// test_first_run.c — tools/gpu_first_run.sh, the first-contact script for a machine with a GPU,
// run end to end in --emulated mode (the CUDA emulation layer, small sizes), so that its first
// real run is not its first run; a failed step failing the run (the --fail-step test hook); its
// usage errors, and no report written over a user's files; and its report's reading of the logs
// a GPU run prints (bench speed/sampler/agents on a GPU, compute-sanitizer, Criterion, the kernel
// lab, Nsight Compute's CSV), from logs written here in those programs' formats.
//
// A separate binary (make test-first-run, run by make check): the emulated run takes minutes and
// runs make, the emulated binaries and the C suites itself, so it stays out of make test's -j2.
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/forward.h"
#include "tests/run_util.h"
#include "tests/test_util.h"

#define SCRIPT "tools/gpu_first_run.sh"

// The script as a child of this test. Criterion's worker process has BXFI_MAP in its
// environment; every Criterion binary the script runs would inherit it, take itself for a
// worker of ours and abort: it goes before the script starts.
static RunResult run_script(const char *const *args) {
    unsetenv("BXFI_MAP");
    return run_prog(SCRIPT, args);
}

static void tmp_dir(char dir[64]) {
    strcpy(dir, "/tmp/emx_first_run_XXXXXX");
    cr_assert_not_null(mkdtemp(dir), "mkdtemp failed");
}

static void tmp_remove(const char *dir) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0, "%s", cmd);
}

static const char *shared_dir(void) {
    const char *s = getenv("EMX_SHARED");
    return s && *s ? s : "../shared";
}

static cJSON *read_json(const char *dir) {
    char path[256];
    snprintf(path, sizeof path, "%s/report.json", dir);
    char *text = test_read_file(path, NULL);
    cr_assert_not_null(text, "%s is missing", path);
    cJSON *j = cJSON_Parse(text);
    cr_assert_not_null(j, "%s does not parse as JSON", path);
    free(text);
    return j;
}

static char *read_md(const char *dir) {
    char path[256];
    snprintf(path, sizeof path, "%s/report.md", dir);
    char *text = test_read_file(path, NULL);
    cr_assert_not_null(text, "%s is missing", path);
    return text;
}

static const cJSON *step_of(const cJSON *rep, const char *name) {
    const cJSON *s;
    cJSON_ArrayForEach(s, cJSON_GetObjectItem(rep, "steps")) {
        const cJSON *n = cJSON_GetObjectItem(s, "name");
        if (cJSON_IsString(n) && strcmp(n->valuestring, name) == 0) return s;
    }
    return NULL;
}

static const char *str_of(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItem(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static double fig(const cJSON *step, const char *key) {
    const cJSON *v = cJSON_GetObjectItem(cJSON_GetObjectItem(step, "figures"), key);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

// Every step of the emulated plan, as --list prints them (one name a line).
static char *emulated_steps(void) {
    RunResult r = run_prog(SCRIPT, (const char *const[]){"--emulated", "--list", NULL});
    cr_assert_eq(r.code, 0, "--list: exit %d: %s", r.code, r.err);
    free(r.err);
    return r.out;
}

// Each planned step is in the JSON with a status, a skipped one with its reason, a run one with
// its log; the Markdown names it. Returns the number of steps.
static int check_every_step(const cJSON *rep, const char *md, const char *dir) {
    char *names = emulated_steps(), *save = NULL;
    int n = 0;
    for (char *name = strtok_r(names, "\n", &save); name; name = strtok_r(NULL, "\n", &save), n++) {
        const cJSON *s = step_of(rep, name);
        cr_assert_not_null(s, "step %s is not in report.json", name);
        const char *status = str_of(s, "status"), *reason = str_of(s, "reason"), *log = str_of(s, "log");
        cr_assert_not_null(status, "step %s has no status", name);
        cr_expect(!strcmp(status, "pass") || !strcmp(status, "FAIL") || !strcmp(status, "skipped"), "%s: %s",
                  name, status);
        if (!strcmp(status, "skipped")) cr_expect(reason && *reason, "skipped step %s says not why", name);
        if (strcmp(status, "skipped") != 0) {
            char path[512];
            snprintf(path, sizeof path, "%s/%s", dir, log ? log : "(none)");
            cr_expect(log && access(path, R_OK) == 0, "step %s: no log %s", name, path);
        }
        char quoted[128];
        snprintf(quoted, sizeof quoted, "`%s`", name);
        cr_expect(strstr(md, quoted) != NULL, "report.md does not name step %s", name);
    }
    free(names);
    const cJSON *steps = cJSON_GetObjectItem(rep, "steps");
    cr_expect_eq(cJSON_GetArraySize(steps), n, "report.json has %d steps, --list %d", cJSON_GetArraySize(steps), n);
    return n;
}

Test(first_run, emulated_end_to_end, .timeout = 2400) {
    char dir[64];
    tmp_dir(dir);
    RunResult r = run_script((const char *const[]){"--emulated", "--out", dir, "--shared", shared_dir(),
                                                         "--jobs", "2", NULL});
    cr_expect_eq(r.code, 0, "exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.out, r.err);
    cr_expect(strstr(r.out, "every step that ran passed") != NULL, "%s", r.out);
    cJSON *rep = read_json(dir);
    char *md = read_md(dir);
    cr_expect(check_every_step(rep, md, dir) > 30);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(rep, "ok")), "report.json: ok is not true");
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(rep, "complete")), "report.json: complete is not true");
    cr_expect_str_eq(str_of(cJSON_GetObjectItem(rep, "meta"), "mode"), "emulated");

    // What needs the hardware is skipped and says so; the rest ran and passed.
    const char *hw[] = {"gpu-info", "memcheck-attention", "racecheck-attention", "synccheck-attention", "ncu"};
    for (size_t i = 0; i < sizeof hw / sizeof *hw; i++) {
        const cJSON *s = step_of(rep, hw[i]);
        cr_assert_not_null(s, "%s", hw[i]);
        cr_expect_str_eq(str_of(s, "status"), "skipped", "%s", hw[i]);
        cr_expect(strstr(str_of(s, "reason"), "needs a GPU") != NULL, "%s: %s", hw[i], str_of(s, "reason"));
    }
    const char *ran[] = {"build", "kernel-tests", "suite-run_cuda", "suite-bench", "speed-stories260K-q8",
                         "sampler-stories260K-q8", "agents-stories260K-q8", "agents-2gpu-stories260K-q8",
                         "bench-kernels", "lab-attention", "lab-agent_pool", "timeline-stories260K-q8",
                         "server-slots-stories260K-q8"};
    for (size_t i = 0; i < sizeof ran / sizeof *ran; i++) {
        const cJSON *s = step_of(rep, ran[i]);
        cr_assert_not_null(s, "%s", ran[i]);
        cr_expect_str_eq(str_of(s, "status"), "pass", "%s: %s", ran[i], str_of(s, "reason"));
    }
    // The figures come from the logs: bench's report lines, Criterion's synthesis, the lab's rows.
    cr_expect_gt(fig(step_of(rep, "speed-stories260K-q8"), "decode_tok_s"), 0);
    cr_expect_gt(fig(step_of(rep, "speed-stories260K-q4"), "launches_per_step"), 0);
    cr_expect_gt(fig(step_of(rep, "speed-stories260K-q8"), "peak_gbps"), 0);
    cr_expect_gt(fig(step_of(rep, "timeline-stories260K-q8"), "graph_us_per_token"), 0);
    const cJSON *slots = step_of(rep, "server-slots-stories260K-q8");
    cr_expect_gt(fig(slots, "parallel4_tok_s"), 0);
    cr_expect_gt(fig(slots, "parallel4_EMX_CUDA_FUSED_1_tok_s"), 0);  // the step on the separate kernels
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(slots, "figures"), "texts_equal")));
    const cJSON *phases = cJSON_GetObjectItem(cJSON_GetObjectItem(step_of(rep, "timeline-stories260K-q8"), "figures"),
                                              "phases");
    cr_expect_eq(cJSON_GetArraySize(phases), EMX_PHASES + 1, "the timeline's rows: one per phase, then their sum");
    cr_expect_gt(fig(step_of(rep, "sampler-stories260K-q8"), "entropix_tok_s"), 0);
    cr_expect_gt(fig(step_of(rep, "sampler-stories260K-q8"), "combined_tok_s"), 0);
    cr_expect_gt(fig(step_of(rep, "agents-stories260K-q8"), "lookahead4_vs_single"), 0);
    cr_expect_gt(fig(step_of(rep, "kernel-tests"), "tested"), 0);
    cr_expect_eq(fig(step_of(rep, "kernel-tests"), "failing"), 0);
    cr_expect_gt(fig(step_of(rep, "lab-attention"), "pass"), 0);
    cr_expect_eq(fig(step_of(rep, "lab-attention"), "fail"), 0);
    cr_expect(strstr(md, "| speed-stories260K-q8 |") != NULL, "no speed table row in report.md");
    cJSON_Delete(rep);
    free(md);
    run_free(&r);
    tmp_remove(dir);
}

Test(first_run, failed_step_fails_the_run, .timeout = 600) {
    char dir[64];
    tmp_dir(dir);
    RunResult r = run_script((const char *const[]){"--emulated", "--out", dir, "--shared", shared_dir(), "--only",
                                                         "machine,speed-stories260K-q8", "--fail-step",
                                                         "speed-stories260K-q8", NULL});
    cr_expect_eq(r.code, 1, "exit %d, expected 1\n%s%s", r.code, r.out, r.err);
    cr_expect(strstr(r.out, "FAILED") != NULL, "%s", r.out);
    cJSON *rep = read_json(dir);
    char *md = read_md(dir);
    check_every_step(rep, md, dir);
    cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(rep, "ok")), "report.json: ok is not false");
    const cJSON *failed = step_of(rep, "speed-stories260K-q8"), *machine = step_of(rep, "machine");
    cr_expect_str_eq(str_of(failed, "status"), "FAIL");
    cr_expect_str_eq(str_of(failed, "reason"), "exit status 1");
    cr_expect_str_eq(str_of(machine, "status"), "pass");
    cr_expect(strstr(str_of(step_of(rep, "build"), "reason"), "not selected") != NULL);
    cJSON_Delete(rep);
    free(md);
    run_free(&r);
    tmp_remove(dir);
}

// --prebuilt builds nothing: its build step checks that every program the later steps run is
// there. A copy of the script in a tree whose build/ is empty: the step fails naming the first
// missing program, and the run fails with a report.
Test(first_run, prebuilt_names_a_missing_program, .timeout = 120) {
    char dir[64], cmd[512], shared[4096];
    tmp_dir(dir);
    cr_assert_not_null(realpath(shared_dir(), shared), "no shared directory at %s", shared_dir());
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/tools/first_run' '%s/build' && cp %s '%s/tools/' && cp tools/first_run/report.py '%s/tools/first_run/'",
             dir, dir, SCRIPT, dir, dir);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    char script[128], out[128];
    snprintf(script, sizeof script, "%s/tools/gpu_first_run.sh", dir);
    snprintf(out, sizeof out, "%s/report", dir);
    unsetenv("BXFI_MAP");
    RunResult r = run_prog(script, (const char *const[]){"--emulated", "--prebuilt", "--out", out, "--shared", shared,
                                                          "--only", "machine,build", NULL});
    cr_expect_eq(r.code, 1, "exit %d, expected 1\n%s%s", r.code, r.out, r.err);
    cJSON *rep = read_json(out);
    const cJSON *build = step_of(rep, "build");
    cr_expect_str_eq(str_of(build, "status"), "FAIL");
    cr_expect_str_eq(str_of(step_of(rep, "machine"), "status"), "pass");
    char log[256];
    snprintf(log, sizeof log, "%s/%s", out, str_of(build, "log"));
    char *text = test_read_file(log, NULL);
    cr_assert_not_null(text, "no log %s", log);
    cr_expect(strstr(text, "--prebuilt: no build/cpu/run") != NULL, "%s", text);
    free(text);
    cJSON_Delete(rep);
    run_free(&r);
    // --benchmarks checks only what the benchmarks run: the converter first
    snprintf(out, sizeof out, "%s/report-benchmarks", dir);
    r = run_prog(script, (const char *const[]){"--emulated", "--prebuilt", "--benchmarks", "--out", out, "--shared",
                                               shared, "--only", "machine,build", NULL});
    cr_expect_eq(r.code, 1, "exit %d, expected 1\n%s%s", r.code, r.out, r.err);
    rep = read_json(out);
    build = step_of(rep, "build");
    snprintf(log, sizeof log, "%s/%s", out, str_of(build, "log"));
    text = test_read_file(log, NULL);
    cr_assert_not_null(text, "no log %s", log);
    cr_expect(strstr(text, "--prebuilt: no build/tools/convert") != NULL, "%s", text);
    free(text);
    cJSON_Delete(rep);
    run_free(&r);
    tmp_remove(dir);
}

// --benchmarks plans the machine, the build and every benchmark, and nothing else: no test,
// sanitizer, lab or ncu step.
Test(first_run, benchmarks_plan_only_the_benchmarks) {
    RunResult r = run_prog(SCRIPT, (const char *const[]){"--emulated", "--benchmarks", "--list", NULL});
    cr_assert_eq(r.code, 0, "--list: exit %d: %s", r.code, r.err);
    const char *const want[] = {"machine", "build", "speed-stories260K-q8", "paths-stories260K-q8",
                                "timeline-persistent-stories260K-q8", "server-slots-stories260K-q8",
                                "sampler-persistent-stories260K-q8", "agents-stories260K-q8"};
    char line[128];
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        snprintf(line, sizeof line, "%s%s\n", i == 0 ? "" : "\n", want[i]);
        cr_expect(i == 0 ? !strncmp(r.out, line, strlen(line)) : strstr(r.out, line) != NULL, "no %s in\n%s", want[i],
                  r.out);
    }
    const char *const unwanted[] = {"kernel-tests", "suite-", "memcheck-", "racecheck-", "lab-", "bench-kernels", "ncu"};
    for (size_t i = 0; i < sizeof unwanted / sizeof unwanted[0]; i++)
        cr_expect(strstr(r.out, unwanted[i]) == NULL, "%s in\n%s", unwanted[i], r.out);
    run_free(&r);
}

// tools/first_run/lease.sh (its pack builds with nvcc for minutes: not run here): a bad verb, a bad
// option value and a missing archive are one-line errors with exit 2.
Test(first_run, lease_errors_are_one_line) {
    const char *lease = "tools/first_run/lease.sh";
    expect_error_prog(lease, (const char *const[]){"frob", NULL}, 2, "lease: unknown verb 'frob': pack or run");
    expect_error_prog(lease, (const char *const[]){"pack", "--arch", "9.0", NULL}, 2,
                      "lease: --arch '9.0': a compute capability without its dot");
    expect_error_prog(lease, (const char *const[]){"run", "--budget", "0", NULL}, 2, "lease: --budget '0'");
    expect_error_prog(lease, (const char *const[]){"run", "--dir", "/nonexistent-lease", NULL}, 2,
                      "lease: no /nonexistent-lease/prebuilt.tar.xz");
    expect_error_prog(lease, (const char *const[]){"pack", "--shared", "/nonexistent-shared", NULL}, 2,
                      "lease: --shared /nonexistent-shared: no testdata/tokenizers there");
    // run in a checkout with its own build: the packed converter is not copied over the built one
    char dir[64], cmd[512];
    tmp_dir(dir);
    struct stat before, after;
    cr_assert_eq(stat("build/tools/convert", &before), 0, "build/tools/convert is not built");
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s/stage/build/tools' && echo packed > '%s/stage/build/tools/convert' && "
             "tar -C '%s/stage' -cJf '%s/prebuilt.tar.xz' .",
             dir, dir, dir, dir);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    expect_error_prog(lease, (const char *const[]){"run", "--dir", dir, NULL}, 2,
                      "lease: build/tools/convert exists and is not the packed one");
    cr_assert_eq(stat("build/tools/convert", &after), 0);
    cr_expect(after.st_size == before.st_size && after.st_mtime == before.st_mtime, "build/tools/convert was replaced");
    tmp_remove(dir);
}

Test(first_run, usage_errors_are_one_line_and_keep_files) {
    char dir[64], keep[128];
    tmp_dir(dir);
    snprintf(keep, sizeof keep, "%s/notes.txt", dir);
    FILE *f = fopen(keep, "w");
    cr_assert_not_null(f);
    fputs("my notes\n", f);
    fclose(f);
    expect_error_prog(SCRIPT, (const char *const[]){"--emulated", "--out", dir, NULL}, 2, "is not empty");
    char *kept = test_read_file(keep, NULL);
    cr_expect(kept && !strcmp(kept, "my notes\n"), "the user's file changed");
    free(kept);
    struct stat st;
    char report[128];
    snprintf(report, sizeof report, "%s/report.md", dir);
    cr_expect_neq(stat(report, &st), 0, "a report was written into a non-empty directory");
    expect_error_prog(SCRIPT, (const char *const[]){"--emulated", "--out", keep, NULL}, 2, "not a directory");
    expect_error_prog(SCRIPT, (const char *const[]){"--bogus", NULL}, 2, "unknown option '--bogus'");
    expect_error_prog(SCRIPT, (const char *const[]){"--out", NULL}, 2, "--out needs a value");
    expect_error_prog(SCRIPT, (const char *const[]){"--emulated", "--fail-step", "nosuch", NULL}, 2,
                      "no step 'nosuch'");
    expect_error_prog(SCRIPT, (const char *const[]){"--emulated", "--only", "build,ncuu", NULL}, 2, "no step 'ncuu'");
    expect_error_prog(SCRIPT, (const char *const[]){"--jobs", "0", NULL}, 2, "--jobs '0'");
    expect_error_prog(SCRIPT, (const char *const[]){"--budget", "x", NULL}, 2, "--budget 'x'");
    RunResult h = run_prog(SCRIPT, (const char *const[]){"--help", NULL});
    cr_expect_eq(h.code, 0);
    cr_expect(strstr(h.out, "--emulated") && strstr(h.out, "--fail-step"), "%s", h.out);
    run_free(&h);
    tmp_remove(dir);
}

static void write_file(const char *dir, const char *name, const char *text) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

// The logs of a GPU run, in the formats those programs print there (bench: tools/bench.c and
// speed_report.c, the GPU branches; compute-sanitizer's and Criterion's summary lines; Nsight
// Compute's --csv rows), read into the report's figures.
Test(first_run, report_reads_gpu_logs) {
    char dir[64], logs[96];
    tmp_dir(dir);
    snprintf(logs, sizeof logs, "%s/logs", dir);
    cr_assert_eq(mkdir(logs, 0700), 0);
    write_file(dir, "meta.txt", "mode=gpu\ngpus=1\ndevice=1 x NVIDIA H200\nsteps_planned=13\n");
    write_file(dir, "steps.tsv",
               "name\tkind\tstatus\texit\tseconds\ttimeout\tlog\treason\tcommand\n"
               "speed-qwen3-0.6b-q8\tspeed\tpass\t0\t20\t600\tlogs/1.log\t\tbench speed\n"
               "sampler-qwen3-0.6b-q8\tsampler\tpass\t0\t20\t600\tlogs/2.log\t\tbench sampler\n"
               "agents-qwen3-0.6b-q8\tagents\tpass\t0\t20\t600\tlogs/3.log\t\tbench agents\n"
               "memcheck-attention\tsanitizer\tFAIL\t1\t9\t300\tlogs/4.log\texit status 1\tcompute-sanitizer\n"
               "kernel-tests\ttests\tpass\t0\t20\t300\tlogs/5.log\t\tkernel_tests\n"
               "ncu\tncu\tpass\t0\t60\t600\tlogs/6.log\t\tncu\n"
               "agents-2gpu-qwen3-0.6b-q8\tagents\tskipped\t\t0\t0\t\tneeds 2 GPUs, this machine has 1\t\n"
               "speed-d4096-qwen3-0.6b-q8-f16\tspeed\tpass\t0\t20\t600\tlogs/7.log\t\tbench speed -d 4096\n"
               "lab-rmsnorm\tlab\tpass\t0\t1\t300\tlogs/8.log\t\tbuild/cuda/lab/rmsnorm\n"
               "timeline-qwen3-0.6b-q8\ttimeline\tpass\t0\t9\t600\tlogs/9.log\t\tbench speed --timeline\n"
               "server-slots-qwen3-0.6b-q8\tserver\tpass\t0\t30\t600\tlogs/10.log\t\tserver_parallel.py\n"
               "paths-qwen3-0.6b-q8\tpaths\tpass\t0\t30\t600\tlogs/11.log\t\tbench speed --persistent\n");
    // bench speed --persistent (tools/bench/decode_paths.c): the paths' rows (the persistent
    // kernel's with its L2 warming and without) and their ratios
    write_file(dir, "logs/11.log",
               "decode tg128:      610.50 tok/s, 1.638 ms/token\n"
               "\ndecode paths (cuda:0, NVIDIA H200; tg128 at depth 0, 3 rounds alternated):\n"
               "  path                                                          µs/token      tok/s   of bound\n"
               "  graph                                                         1638.00      610.5       7.8%\n"
               "  persistent kernel, 396 blocks, L2 warmed 20.0 MiB              702.25     1424.0      18.2%\n"
               "  persistent kernel, 396 blocks                                  750.50     1332.4      17.0%\n"
               "  persistent / graph: 2.33x tok/s; bound: 127.58 µs (612368384 bytes at 4800 GB/s, the GPU's properties)\n"
               "  L2 warmed / not warmed: 1.07x tok/s\n");
    // tools/bench/server_parallel.py --check-texts: the best run of each --parallel counts
    write_file(dir, "logs/10.log",
               "parallel 1: 2048 tokens in 4.0 s: 512.0 tok/s aggregate, median time to first token 40 ms\n"
               "parallel 8: 2048 tokens in 1.0 s: 2048.5 tok/s aggregate, median time to first token 90 ms\n"
               "parallel 1: 2048 tokens in 3.9 s: 525.1 tok/s aggregate, median time to first token 40 ms\n"
               "parallel 8: 2048 tokens in 1.1 s: 1900.0 tok/s aggregate, median time to first token 95 ms\n"
               "parallel 8 EMX_CUDA_FUSED=1: 2048 tokens in 1.6 s: 1280.0 tok/s aggregate, median time to first "
               "token 99 ms\n"
               "best: parallel 8 2048.5 tok/s / parallel 1 525.1 tok/s = 3.90x\n"
               "best: parallel 8 EMX_CUDA_FUSED=1 1280.0 tok/s / parallel 1 525.1 tok/s = 2.44x\n"
               "texts: every request's text the same in every run (16 requests)\n");
    // bench speed --timeline (tools/bench/timeline.c): two of its phase rows and the step rows
    write_file(dir, "logs/9.log",
               "decode tg128:      610.50 tok/s, 1.638 ms/token\n"
               "\ntimeline of one decode token (cuda:0, NVIDIA H200; tg128 at depth 0, 3 rounds alternated with the "
               "graph path):\n"
               "  phase                               µs/token   share    bytes/token   µs at peak  of bound\n"
               "  input + embedding                       5.25    0.3%           2048         0.00      0.1%\n"
               "  attention input (norm, q/k/v)         512.75   27.9%      150994944        31.46      6.1%\n"
               "  all phases (timed step)              1838.00  100.0%      612368384       127.58      6.9%\n"
               "  timed step, wall clock               1902.40   (direct launches, an event after each phase)\n"
               "  graph step, wall clock               1638.00   (0.86 of the timed step; 7.8% of the bound)\n");
    // the lab's table on a GPU (tools/lab/lab.h: a time, the bytes, GB/s and the share of the peak)
    write_file(dir, "logs/8.log",
               "lab rmsnorm: out = x / sqrt(mean(x^2) + eps) * w per row\n"
               "device: NVIDIA H200, 132 SMs, peak memory bandwidth 4800 GB/s\n"
               "version                     max abs    max rel check    time (us)        bytes      GB/s of peak\n"
               "naive (thread/row)         1.19e-06   5.41e-07  PASS        12.50        76032      6.08    0.1%\n"
               "fast (block/row)           2.38e-07   2.18e-07  FAIL         3.10        76032     24.53    0.5%\n"
               "lab rmsnorm: 1 version(s) FAILED the check against the CPU twin\n");
    write_file(dir, "logs/7.log",
               "prefill pp512 @ d4096: 1303.63 tok/s, 0.767 ms/token\n"
               "decode tg128 @ d4096: 281.70 tok/s, 3.550 ms/token\n");
    write_file(dir, "logs/1.log",
               "device:            cuda:0 (NVIDIA H200), decode steps replayed as a CUDA graph\n"
               "prefill pp512:     3381.00 tok/s, 0.296 ms/token\n"
               "decode tg128:      497.80 tok/s, 2.009 ms/token\n"
               "bytes/token:       649000000 = weights 640000000 + KV cache 9000000\n"
               "achieved GB/s:     323.072\npeak GB/s:         4814.00\nof peak:           6.711%\n"
               "launches/step:     426\nmemcpy GB/s:       -\n");
    write_file(dir, "logs/2.log",
               "  run 1 greedy   decode  363.00 tok/s, sampler 0.000 ms/token\n"
               "sampler    decode tok/s (median)   sampler ms/token (median)\n"
               "greedy         363.50                       -\nentropix       339.50                       -\n"
               "combined       356.10                       -\n"
               "overhead: decode 7.1% slower (tok/s ratio 0.934); the tokens are chosen on cuda:0, inside the "
               "decode step (2.75 ms greedy)\n"
               "combined: decode 2.1% slower (tok/s ratio 0.980); the tokens are chosen on cuda:0, inside the "
               "decode step (2.75 ms greedy)\n"
               "queued ahead: greedy 363.50 tok/s, with its steps in turn 351.20 (ratio 1.035: 96.35 us a token "
               "saved)\n");
    write_file(dir, "logs/3.log",
               "pool: cuda:0, 1 worker(s)\n"
               "configuration                decode tok/s (median)   vs single stream\n"
               "single stream (greedy)           450.80              1.000 (+0.0% time per token)\n"
               "8 agents, lookahead 1            392.50              0.871 (+14.9% time per token)\n"
               "8 agents, lookahead 4            118.80              0.264 (+279.5% time per token)\n"
               "8 agents, lookahead 1, critic every 5      301.20              0.668 (+49.7% time per token)\n"
               "critic: 12 judgments a run, 23.4% of the pool's decode time (median; verdicts forced GOOD)\n");
    write_file(dir, "logs/4.log",
               "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n"
               "========= Invalid __global__ read of size 4 bytes\n========= ERROR SUMMARY: 3 errors\n");
    write_file(dir, "logs/5.log",
               "[SKIP] gemm::tile: Test is disabled\n"
               "[SKIP] forward_cuda::qwen3: build/models/qwen3-tiny.f32.bin missing\n"
               "[====] Synthesis: Tested: 98 | Passing: 97 | Failing: 1 | Crashing: 0 \n");
    write_file(dir, "logs/6.log",
               "==PROF== Connected to process 7\n"
               "\"ID\",\"Process ID\",\"Process Name\",\"Host Name\",\"Kernel Name\",\"Context\",\"Stream\","
               "\"Block Size\",\"Grid Size\",\"Device\",\"CC\",\"Section Name\",\"Metric Name\",\"Metric Unit\","
               "\"Metric Value\"\n"
               "\"0\",\"7\",\"bench\",\"h\",\"rmsnorm_kernel(const float *, int)\",\"1\",\"7\",\"(256, 1, 1)\","
               "\"(1, 1, 1)\",\"0\",\"9.0\",\"Command line profiler metrics\",\"gpu__time_duration.sum\",\"usecond\","
               "\"4.90\"\n"
               "\"1\",\"7\",\"bench\",\"h\",\"matvec_q8(const signed char *)\",\"1\",\"7\",\"(256, 1, 1)\","
               "\"(1, 1, 1)\",\"0\",\"9.0\",\"Command line profiler metrics\",\"gpu__time_duration.sum\",\"nsecond\","
               "\"48,700\"\n"
               "\"2\",\"7\",\"bench\",\"h\",\"rmsnorm_kernel(const float *, int)\",\"1\",\"7\",\"(256, 1, 1)\","
               "\"(1, 1, 1)\",\"0\",\"9.0\",\"Command line profiler metrics\",\"gpu__time_duration.sum\",\"usecond\","
               "\"5.10\"\n");
    RunResult r = run_prog("tools/first_run/report.py", (const char *const[]){dir, NULL});
    cr_assert_eq(r.code, 0, "report.py: exit %d: %s", r.code, r.err);
    run_free(&r);
    cJSON *rep = read_json(dir);
    const cJSON *speed = step_of(rep, "speed-qwen3-0.6b-q8"), *sampler = step_of(rep, "sampler-qwen3-0.6b-q8");
    const cJSON *agents = step_of(rep, "agents-qwen3-0.6b-q8"), *san = step_of(rep, "memcheck-attention");
    const cJSON *tests = step_of(rep, "kernel-tests"), *ncu = step_of(rep, "ncu");
    cr_expect_eq(fig(speed, "prefill_tok_s"), 3381.0);
    cr_expect_eq(fig(speed, "decode_tok_s"), 497.8);
    cr_expect_eq(fig(speed, "decode_ms_per_token"), 2.009);
    cr_expect_eq(fig(speed, "achieved_gbps"), 323.072);
    cr_expect_eq(fig(speed, "peak_gbps"), 4814.0);
    cr_expect_eq(fig(speed, "of_peak_pct"), 6.711);
    cr_expect_eq(fig(speed, "launches_per_step"), 426);
    const cJSON *deep = step_of(rep, "speed-d4096-qwen3-0.6b-q8-f16");  // bench speed -d: "tg128 @ d4096"
    cr_expect_eq(fig(deep, "prefill_tok_s"), 1303.63);
    cr_expect_eq(fig(deep, "decode_tok_s"), 281.7);
    cr_expect_eq(fig(deep, "decode_ms_per_token"), 3.55);
    cr_expect_eq(fig(deep, "depth"), 4096);
    cr_expect_eq(fig(sampler, "greedy_tok_s"), 363.5);
    cr_expect_eq(fig(sampler, "entropix_tok_s"), 339.5);
    cr_expect_eq(fig(sampler, "entropix_slower_pct"), 7.1);
    cr_expect_eq(fig(sampler, "combined_tok_s"), 356.1);
    cr_expect_eq(fig(sampler, "combined_slower_pct"), 2.1);
    cr_expect_eq(fig(sampler, "greedy_in_turn_tok_s"), 351.2);
    cr_expect_eq(fig(sampler, "queued_ahead_ratio"), 1.035);
    cr_expect_eq(fig(sampler, "queued_ahead_us_saved"), 96.35);
    cr_expect_eq(fig(agents, "single_tok_s"), 450.8);
    cr_expect_eq(fig(agents, "lookahead1_vs_single"), 0.871);
    cr_expect_eq(fig(agents, "lookahead4_tok_s"), 118.8);
    cr_expect_eq(fig(agents, "lookahead1_vs_single"), 0.871, "the critic row is not lookahead 1's");
    cr_expect_eq(fig(agents, "critic_every"), 5);
    cr_expect_eq(fig(agents, "critic_tok_s"), 301.2);
    cr_expect_eq(fig(agents, "critic_vs_single"), 0.668);
    cr_expect_eq(fig(agents, "critic_judgments"), 12);
    cr_expect_eq(fig(agents, "critic_share_pct"), 23.4);
    cr_expect_eq(fig(san, "summaries"), 2);
    cr_expect_eq(fig(san, "errors"), 3);
    cr_expect_eq(fig(tests, "tested"), 98);
    cr_expect_eq(fig(tests, "failing"), 1);
    cr_expect_eq(fig(tests, "skipped"), 1, "a skip is counted, a test its --filter disabled is not");
    cr_expect_eq(fig(ncu, "launches"), 3);
    cr_expect_eq(fig(ncu, "total_us"), 58.7);
    // The kernels by time, the longest first, each name without its parameter list.
    const cJSON *top = cJSON_GetObjectItem(cJSON_GetObjectItem(ncu, "figures"), "top_kernels_us");
    cr_assert_eq(cJSON_GetArraySize(top), 2);
    cr_expect_str_eq(cJSON_GetArrayItem(cJSON_GetArrayItem(top, 0), 0)->valuestring, "matvec_q8");
    cr_expect_eq(cJSON_GetArrayItem(cJSON_GetArrayItem(top, 1), 1)->valuedouble, 10.0);
    cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(rep, "ok")), "a FAIL step: ok must be false");
    cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(rep, "complete")), "12 steps ended of 13 planned: not complete");
    const cJSON *lab = step_of(rep, "lab-rmsnorm");
    cr_expect_eq(fig(lab, "versions"), 2);
    cr_expect_eq(fig(lab, "fail"), 1);
    char *md = read_md(dir);
    cr_expect(strstr(md, "| speed-qwen3-0.6b-q8 | 3,381.00 | 497.80 | 2.009 | 323.07 | 6.71 | 426 |"), "%s", md);
    const cJSON *tl = step_of(rep, "timeline-qwen3-0.6b-q8");
    cr_expect_eq(fig(tl, "graph_us_per_token"), 1638.0);
    cr_expect_eq(fig(tl, "timed_us_per_token"), 1902.4);
    cr_expect_eq(fig(tl, "decode_tok_s"), 610.5);
    const cJSON *rows = cJSON_GetObjectItem(cJSON_GetObjectItem(tl, "figures"), "phases");
    cr_assert_eq(cJSON_GetArraySize(rows), 3, "two phases and the sum");
    const cJSON *qkv = cJSON_GetArrayItem(rows, 1);
    cr_expect_str_eq(cJSON_GetArrayItem(qkv, 0)->valuestring, "attention input (norm, q/k/v)");
    cr_expect_eq(cJSON_GetArrayItem(qkv, 1)->valuedouble, 512.75);
    cr_expect_eq(cJSON_GetArrayItem(qkv, 3)->valuedouble, 150994944.0);
    cr_expect_eq(cJSON_GetArrayItem(qkv, 5)->valuedouble, 6.1);
    cr_expect(strstr(md, "| attention input (norm, q/k/v) | 512.75 | 27.9 | 150994944 | 31.46 | 6.1 |"), "%s", md);
    cr_expect(strstr(md, "| graph step, wall clock | 1,638.00 |"), "%s", md);
    const cJSON *paths = step_of(rep, "paths-qwen3-0.6b-q8");
    cr_expect_eq(fig(paths, "graph_us_per_token"), 1638.0);
    cr_expect_eq(fig(paths, "persistent_us_per_token"), 702.25);
    cr_expect_eq(fig(paths, "persistent_of_bound_pct"), 18.2);
    cr_expect_eq(fig(paths, "persistent_vs_graph"), 2.33);
    cr_expect_eq(fig(paths, "persistent_cold_us_per_token"), 750.5);
    cr_expect_eq(fig(paths, "warmed_vs_not"), 1.07);
    cr_expect(strstr(md, "| paths-qwen3-0.6b-q8 | 1,638.00 | 702.25 | 2.330 | 18.2 | 750.50 | 1.070 | persistent kernel, 396 "
                         "blocks, L2 warmed 20.0 MiB |"),
              "%s", md);
    const cJSON *sl = step_of(rep, "server-slots-qwen3-0.6b-q8");
    cr_expect_eq(fig(sl, "parallel1_tok_s"), 525.1);
    cr_expect_eq(fig(sl, "parallel8_tok_s"), 2048.5);
    cr_expect_eq(fig(sl, "ratio"), 3.9);
    cr_expect_eq(fig(sl, "parallel8_EMX_CUDA_FUSED_1_tok_s"), 1280.0);
    cr_expect_eq(fig(sl, "ratio_EMX_CUDA_FUSED_1"), 2.44);
    cr_expect(strstr(md, "| server-slots-qwen3-0.6b-q8 | 525.10 | 2,048.50 | 3.90 | yes | EMX_CUDA_FUSED_1 2.44 |"), "%s", md);
    cr_expect(strstr(md, "needs 2 GPUs, this machine has 1") != NULL, "%s", md);
    cr_expect(strstr(md, "| `matvec_q8` | 48.70 |") != NULL, "%s", md);
    // every lab version's time, for docs/kernel-lab.md's table
    cr_expect(strstr(md, "| rmsnorm | naive (thread/row) | PASS | 12.50 | 76032 | 6.08 | 0.1 |") != NULL, "%s", md);
    cr_expect(strstr(md, "| rmsnorm | fast (block/row) | FAIL | 3.10 | 76032 | 24.53 | 0.5 |") != NULL, "%s", md);
    free(md);
    cJSON_Delete(rep);
    tmp_remove(dir);
}

// report.py --verdict: why a step whose command exited 0 fails all the same.
static char *verdict_of(const char *dir, const char *kind, const char *log_text) {
    char log[96];
    snprintf(log, sizeof log, "%s/step.log", dir);
    write_file(dir, "step.log", log_text);
    RunResult r = run_prog("tools/first_run/report.py", (const char *const[]){"--verdict", kind, log, NULL});
    cr_assert_eq(r.code, 0, "report.py --verdict: exit %d: %s", r.code, r.err);
    char *out = strdup(r.out);
    run_free(&r);
    return out;
}

// Criterion's synthesis does not count a skipped test: a kernel test run without the test models
// reads "Tested: 99 | Passing: 99" with 35 tests skipped. A skip fails its step unless the
// machine lacks the GPUs it needs.
Test(first_run, skipped_tests_fail_their_step_unless_for_gpus) {
    char dir[64];
    tmp_dir(dir);
    const char *synth = "[====] Synthesis: Tested: 99 | Passing: 99 | Failing: 0 | Crashing: 0 \n";
    char log[512], *v;
    snprintf(log, sizeof log, "[SKIP] gemm::tile: Test is disabled\n%s", synth);
    v = verdict_of(dir, "tests", log);
    cr_expect_str_eq(v, "\n", "a test the --filter left out is no skip: %s", v);
    free(v);
    snprintf(log, sizeof log, "[SKIP] forward_cuda::multi: needs 2 GPUs: 1 visible\n%s", synth);
    v = verdict_of(dir, "tests", log);
    cr_expect_str_eq(v, "\n", "a test for more GPUs than the machine has: %s", v);
    free(v);
    snprintf(log, sizeof log, "[SKIP] forward_cuda::qwen3: build/models/qwen3-tiny.f32.bin missing\n"
             "[SKIP] forward_cuda::llama3: build/models/llama3-tiny.f32.bin missing\n%s", synth);
    v = verdict_of(dir, "tests", log);
    cr_expect_str_eq(v, "2 test(s) skipped, the first forward_cuda::qwen3: build/models/qwen3-tiny.f32.bin missing\n");
    free(v);
    // under compute-sanitizer too, and its summary still checked
    snprintf(log, sizeof log, "[SKIP] attention::a: EMX_SHARED is not set\n%s========= ERROR SUMMARY: 0 errors\n",
             synth);
    v = verdict_of(dir, "sanitizer", log);
    cr_expect(strstr(v, "1 test(s) skipped") == v, "%s", v);
    free(v);
    v = verdict_of(dir, "sanitizer", "========= ERROR SUMMARY: 0 errors\n========= ERROR SUMMARY: 2 errors\n");
    cr_expect_str_eq(v, "compute-sanitizer reported errors or hazards\n");
    free(v);
    v = verdict_of(dir, "tests", "[====] Synthesis: Tested: 0 | Passing: 0 | Failing: 0 | Crashing: 0 \n");
    cr_expect(strstr(v, "no test ran") == v, "%s", v);
    free(v);
    tmp_remove(dir);
}

// Without --emulated on a machine with no GPU: one line that points to --emulated, and nothing
// written. (On a machine with a GPU there is nothing to check here, and the test says so.)
Test(first_run, no_gpu_without_emulated_is_an_error) {
    if (system("nvidia-smi -L 2>/dev/null | grep -q '^GPU'") == 0)
        cr_skip_test("this machine has a GPU: the no-GPU error cannot happen here");
    char dir[64], out[96];
    tmp_dir(dir);
    snprintf(out, sizeof out, "%s/report", dir);
    expect_error_prog(SCRIPT, (const char *const[]){"--out", out, NULL}, 2, "no GPU: 'nvidia-smi -L' lists none");
    struct stat st;
    cr_expect_neq(stat(out, &st), 0, "%s was created", out);
    tmp_remove(dir);
}
