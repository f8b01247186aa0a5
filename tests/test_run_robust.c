// test_run_robust.c — ./run against careless and hostile use of its files and streams: an output
// naming an input (directly, by symlink, by hard link) is refused before anything is written; a
// failing run leaves an existing output untouched; a full disk or a closed stdout is an error in
// both modes; a reader closing the pipe stops the run; a prompt file is read no further than the
// context can hold; Ctrl-C stops a run with what it made kept; a KV cache larger than the memory
// is refused before it is allocated; the timing summary's sampler share is a share of the decode
// interval; a denormal --top-p is a value.
//
// The model is $EMX_BUILD/models/stories260K.f32.bin (ctx 512), copied to a temporary directory
// where a test may overwrite it.
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/cli/cli_args.h"
#include "runtime/model.h"
#include "base/read_file.h"
#include "runtime/cli/run_io.h"
#include "runtime/cpu/cpu_state_size.h"
#include "run_util.h"
#include "test_util.h"

typedef struct {
    char dir[64];
    char model[128];  // a copy of stories260K in dir
} Tmp;

static void tmp_setup(Tmp *t) {
    snprintf(t->dir, sizeof t->dir, "/tmp/emx_robust_XXXXXX");
    cr_assert_not_null(mkdtemp(t->dir));
    snprintf(t->model, sizeof t->model, "%s/model.bin", t->dir);
    char src[1024];
    test_build_path(src, sizeof src, "models/stories260K.f32.bin");
    size_t n = 0;
    char *bytes = test_read_file(src, &n);
    cr_assert(bytes, "%s is missing: make test-models", src);
    FILE *f = fopen(t->model, "wb");
    cr_assert(f && fwrite(bytes, 1, n, f) == n && fclose(f) == 0);
    free(bytes);
}

static void tmp_cleanup(Tmp *t) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", t->dir);
    cr_expect_eq(system(cmd), 0);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    cr_assert(f && fputs(text, f) >= 0 && fclose(f) == 0, "cannot write %s", path);
}

// The file's bytes, to compare before and after a run.
static char *bytes_of(const char *path, size_t *n) {
    char *b = test_read_file(path, n);
    cr_assert(b, "cannot read %s", path);
    return b;
}

// ---------------------------------------------------------------------------------------------
// An output that is an input

// Runs args (the model first) and expects a refusal naming `needle`, the model's bytes unchanged.
static void expect_refused(const Tmp *t, const char *const *args, const char *needle) {
    expect_error_keeps(run_binary(), args, 2, needle, t->model);
}

Test(run_robust, metrics_or_log_naming_an_input_is_refused, .timeout = 300) {
    Tmp t;
    tmp_setup(&t);
    char sym[160], hard[160], prompt[160], profile[160];
    snprintf(sym, sizeof sym, "%s/sym.bin", t.dir);
    snprintf(hard, sizeof hard, "%s/hard.bin", t.dir);
    cr_assert_eq(symlink(t.model, sym), 0);
    cr_assert_eq(link(t.model, hard), 0);
    const char *const direct[] = {t.model, "-t", "1", "-n", "4", "-s", "1", "--metrics", t.model, NULL};
    expect_refused(&t, direct, "is the model file");
    const char *const via_sym[] = {t.model, "-t", "1", "-n", "4", "-s", "1", "--metrics", sym, NULL};
    expect_refused(&t, via_sym, "an output may not overwrite an input");
    const char *const via_hard[] = {t.model, "-t", "1", "-n", "4", "-s", "1", "--metrics", hard, NULL};
    expect_refused(&t, via_hard, "an output may not overwrite an input");
    const char *const sym_model[] = {sym, "-t", "1", "-n", "4", "-s", "1", "--metrics", hard, NULL};
    expect_refused(&t, sym_model, "is the model file");
    const char *const pool_log[] = {t.model, "-t", "1", "-n", "4", "-s", "1", "--agents", "2", "--log", sym, NULL};
    expect_refused(&t, pool_log, "--log");
    const char *const critic[] = {t.model, "-t", "1", "-n", "4", "--agents", "2", "--critic-model", hard,
                                  "--metrics", t.model, NULL};
    expect_refused(&t, critic, "an output may not overwrite an input");

    snprintf(prompt, sizeof prompt, "%s/prompt.txt", t.dir);
    write_text(prompt, "Once upon a time");
    const char *const prompt_out[] = {t.model, "-t", "1", "-n", "4", "-f", prompt, "--metrics", prompt, NULL};
    expect_error(prompt_out, 2, "the prompt file (-f)");
    snprintf(profile, sizeof profile, "%s/p.profile", t.dir);
    write_text(profile, "# a profile\n");
    const char *const profile_out[] = {t.model, "-t", "1", "-n", "4", "--profile", profile, "--metrics", profile, NULL};
    expect_error(profile_out, 2, "the profile file");
    size_t n = 0;
    char *text = bytes_of(prompt, &n);
    cr_expect_str_eq(text, "Once upon a time");
    free(text);
    tmp_cleanup(&t);
}

Test(run_robust, two_outputs_naming_one_file_are_refused, .timeout = 300) {
    Tmp t;
    tmp_setup(&t);
    char out[160], alias[200];
    snprintf(out, sizeof out, "%s/out.txt", t.dir);
    snprintf(alias, sizeof alias, "%s/./out.txt", t.dir);
    const char *const fresh[] = {t.model, "-t", "1", "-n", "4", "--agents", "2", "--metrics", out, "--log", alias, NULL};
    expect_error(fresh, 2, "are the same file");
    cr_expect_neq(access(out, F_OK), 0, "the refused run created %s", out);
    write_text(out, "kept\n");
    expect_error(fresh, 2, "are the same file");
    size_t n = 0;
    char *text = bytes_of(out, &n);
    cr_expect_str_eq(text, "kept\n");
    free(text);
    // /dev/null may be both outputs (and an input): nothing there can be overwritten.
    const char *const devnull[] = {t.model, "-t", "1", "-n", "4", "-s", "1", "--agents", "2", "--metrics", "/dev/null",
                                   "--log", "/dev/null", NULL};
    RunResult r = run(devnull);
    cr_expect_eq(r.code, 0, "stderr: %s", r.err);
    run_free(&r);
    tmp_cleanup(&t);
}

Test(run_robust, failing_run_leaves_an_existing_output_untouched, .timeout = 300) {
    Tmp t;
    tmp_setup(&t);
    char out[160], missing[160];
    snprintf(out, sizeof out, "%s/metrics.jsonl", t.dir);
    snprintf(missing, sizeof missing, "%s/no-such-model.bin", t.dir);
    write_text(out, "{\"earlier\": 1}\n");
    const char *const bad_model[] = {missing, "-t", "1", "-n", "4", "--metrics", out, NULL};
    expect_error(bad_model, 1, "no-such-model.bin");
    const char *const bad_pool[] = {missing, "-t", "1", "-n", "4", "--agents", "2", "--log", out, NULL};
    expect_error(bad_pool, 1, "no-such-model.bin");
    const char *const bad_prompt[] = {t.model, "-t", "1", "-n", "4", "-f", missing, "--metrics", out, NULL};
    expect_error(bad_prompt, 1, "-f");
    // A grammar that does not parse is a usage error, told before the model opens; a logit bias
    // past the vocabulary is refused by the sampler's set-up (after the model and the prompt):
    // both before --metrics is opened.
    const char *const bad_grammar[] = {t.model, "-t", "1", "-n", "4", "--grammar", "root ::= (", "--metrics", out, NULL};
    expect_error(bad_grammar, 2, "grammar");
    const char *const bad_schema[] = {t.model, "-t", "1", "-n", "4", "--json-schema", "{bad", "--metrics", out, NULL};
    expect_error(bad_schema, 2, "schema");
    const char *const bad_bias[] = {t.model, "-t", "1", "-n", "4", "--logit-bias", "999999+1", "--metrics", out, NULL};
    expect_error(bad_bias, 1, "999999");
    size_t n = 0;
    char *text = bytes_of(out, &n);
    cr_expect_str_eq(text, "{\"earlier\": 1}\n");
    free(text);
    tmp_cleanup(&t);
}

// ---------------------------------------------------------------------------------------------
// Writes that fail

// Runs ./run with stdout on `out_fd` (-1: closed) and SIGPIPE at its default or ignored; stderr
// captured. Returns the exit status (128 + signal when killed) and the stderr text in *err.
static int run_with_stdout(const char *const *args, int out_fd, int ignore_sigpipe, char **err) {
    char err_path[] = "/tmp/emx_robust_err_XXXXXX";
    int err_fd = mkstemp(err_path);
    cr_assert(err_fd >= 0);
    const char *argv[32];
    int argc = 0;
    argv[argc++] = run_binary();
    for (int i = 0; args[i]; i++) argv[argc++] = args[i];
    argv[argc] = NULL;
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        signal(SIGPIPE, ignore_sigpipe ? SIG_IGN : SIG_DFL);
        dup2(err_fd, 2);
        if (out_fd >= 0) dup2(out_fd, 1);
        else close(1);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    *err = slurp_fd(err_fd, NULL);
    close(err_fd);
    unlink(err_path);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void expect_write_error(const char *const *args, int out_fd, const char *needle) {
    char *err = NULL;
    int code = run_with_stdout(args, out_fd, 0, &err);
    cr_expect_eq(code, 1, "%s: exit %d, expected 1 (stderr: %s)", args[2], code, err);
    cr_expect_eq(count_lines(err), 1, "stderr is not one line: [%s]", err);
    cr_expect(strstr(err, needle), "stderr [%s] lacks [%s]", err, needle);
    free(err);
}

Test(run_robust, full_disk_or_closed_stdout_is_an_error, .timeout = 300) {
    Tmp t;
    tmp_setup(&t);
    int full = open("/dev/full", O_WRONLY);
    cr_assert(full >= 0, "/dev/full: %s", strerror(errno));
    const char *const single[] = {t.model, "-t", "1", "-n", "8", "-s", "1", NULL};
    const char *const raw[] = {t.model, "-t", "1", "-n", "8", "-s", "1", "--raw", "-p", "Once", NULL};
    const char *const pool[] = {t.model, "-t", "1", "-n", "8", "-s", "1", "--agents", "2", NULL};
    const char *const pool_raw[] = {t.model, "-t", "1", "-n", "8", "-s", "1", "--agents", "2", "-p", "Once", NULL};
    const char *const *modes[] = {single, raw, pool, pool_raw};
    for (int i = 0; i < 4; i++) {
        expect_write_error(modes[i], full, "run: writing the generated text to stdout: No space left on device");
        expect_write_error(modes[i], -1, "run: writing the generated text to stdout: Bad file descriptor");
    }
    close(full);
    tmp_cleanup(&t);
}

Test(run_robust, full_disk_under_metrics_or_log_is_an_error, .timeout = 300) {
    Tmp t;
    tmp_setup(&t);
    const char *const single[] = {t.model, "-t", "1", "-n", "8", "-s", "1", "--metrics", "/dev/full", NULL};
    expect_error(single, 1, "--metrics /dev/full: No space left on device");
    const char *const greedy[] = {t.model, "-t", "1", "-n", "8", "--temp", "0", "--metrics", "/dev/full", NULL};
    expect_error(greedy, 1, "--metrics /dev/full: No space left on device");
    const char *const pool_m[] = {t.model, "-t", "1", "-n", "8", "-s", "1", "--agents", "2", "--metrics", "/dev/full", NULL};
    expect_error(pool_m, 1, "--metrics /dev/full: No space left on device");
    const char *const pool_l[] = {t.model, "-t", "1", "-n", "8", "-s", "1", "--agents", "2", "--log", "/dev/full", NULL};
    expect_error(pool_l, 1, "--log /dev/full: No space left on device");
    tmp_cleanup(&t);
}

// A reader that closed the pipe: the run stops as a Unix filter does (killed by SIGPIPE), or,
// where SIGPIPE is ignored, with the one-line error. Never exit 0 with the text lost.
Test(run_robust, closed_pipe_stops_the_run, .timeout = 300) {
    Tmp t;
    tmp_setup(&t);
    const char *const single[] = {t.model, "-t", "1", "-n", "64", "-s", "1", NULL};
    const char *const pool[] = {t.model, "-t", "1", "-n", "64", "-s", "1", "--agents", "2", NULL};
    const char *const *modes[] = {single, pool};
    for (int i = 0; i < 2; i++)
        for (int ign = 0; ign <= 1; ign++) {
            int fds[2];
            cr_assert_eq(pipe(fds), 0);
            close(fds[0]);  // the reader is gone before the first byte
            char *err = NULL;
            int code = run_with_stdout(modes[i], fds[1], ign, &err);
            close(fds[1]);
            if (ign) {
                cr_expect_eq(code, 1, "SIGPIPE ignored: exit %d (stderr: %s)", code, err);
                cr_expect(strstr(err, "run: writing the generated text to stdout: Broken pipe"), "stderr: %s", err);
            } else {
                cr_expect_eq(code, 128 + SIGPIPE, "exit %d, expected SIGPIPE (stderr: %s)", code, err);
            }
            free(err);
        }
    tmp_cleanup(&t);
}

// ---------------------------------------------------------------------------------------------
// Prompt files

// The child's address space capped at 1 GiB: an unbounded read of /dev/zero fails fast (ENOMEM)
// instead of taking the machine's memory, so the test stays safe on the code it checks. Not
// under AddressSanitizer, whose shadow memory needs terabytes of address space (its build of
// ./run is the same code, checked with the cap in the plain build).
static RunResult run_capped(const char *const *args) {
    if (EMX_TEST_SANITIZED) return run(args);
    struct rlimit old, cap = {.rlim_cur = 1ull << 30, .rlim_max = 1ull << 30};
    cr_assert_eq(getrlimit(RLIMIT_AS, &old), 0);
    if (old.rlim_max != RLIM_INFINITY && old.rlim_max < cap.rlim_max) cap.rlim_cur = cap.rlim_max = old.rlim_max;
    cr_assert_eq(setrlimit(RLIMIT_AS, &cap), 0);  // this test process only (criterion forks one per test)
    RunResult r = run(args);
    return r;
}

Test(run_robust, prompt_file_is_bounded_by_the_context, .timeout = 300) {
    Tmp t;
    tmp_setup(&t);
    const char *const zero[] = {t.model, "-t", "1", "-n", "4", "-f", "/dev/zero", NULL};
    RunResult r = run_capped(zero);
    cr_expect_eq(r.code, 1, "stderr: %s", r.err);
    cr_expect_eq(count_lines(r.err), 1, "stderr: %s", r.err);
    cr_expect(strstr(r.err, "run: -f /dev/zero: the prompt is longer than ") &&
                  strstr(r.err, " bytes, more than the context of 512 tokens can hold"),
              "stderr: %s", r.err);
    run_free(&r);
    // A regular file over the bound: the same message, before tokenising it.
    char big[160];
    snprintf(big, sizeof big, "%s/big.txt", t.dir);
    FILE *f = fopen(big, "wb");
    cr_assert(f);
    for (int i = 0; i < 200000; i++) fputs("Once ", f);  // 1 MB
    cr_assert_eq(fclose(f), 0);
    const char *const file[] = {t.model, "-t", "1", "-n", "4", "-c", "64", "-f", big, NULL};
    expect_error(file, 1, "bytes, more than the context of 64 tokens can hold");
    // Within the bound in bytes, over the context in tokens: the token count says so.
    f = fopen(big, "wb");
    cr_assert(f);
    for (int i = 0; i < 100; i++) fputs("Once ", f);
    cr_assert_eq(fclose(f), 0);
    const char *const tokens[] = {t.model, "-t", "1", "-n", "4", "-c", "64", "-f", big, NULL};
    expect_error(tokens, 1, "context is 64 (-c)");
    tmp_cleanup(&t);
}

Test(run_robust, directory_as_prompt_or_profile_says_so, .timeout = 300) {
    Tmp t;
    tmp_setup(&t);
    const char *const f_dir[] = {t.model, "-t", "1", "-n", "4", "-f", t.dir, NULL};
    expect_error(f_dir, 1, "Is a directory");
    const char *const profile_dir[] = {t.model, "-t", "1", "-n", "4", "--profile", t.dir, NULL};
    expect_error(profile_dir, 2, "is a directory");
    tmp_cleanup(&t);
}

// Ctrl-C in a single stream: the run stops after a token, keeps its text, writes its report and
// timings, exits 130. Deterministic: --metrics - puts a JSON line a token on stdout, far more
// than a pipe holds, and the test stops reading after the first byte (the handler is set before
// the first byte is written), so the run cannot finish before the signal; a write blocked when
// it comes goes on (SA_RESTART) once the test reads again.
Test(run_robust, ctrl_c_keeps_the_text_report_and_timings, .timeout = 300) {
    Tmp t;
    tmp_setup(&t);
    char report[160];
    snprintf(report, sizeof report, "%s/r.html", t.dir);
    const char *argv[] = {run_binary(), t.model, "-t", "1", "-n", "400", "-s", "1", "--raw", "-p", "Once",
                          "--metrics", "-", "--report", report, NULL};
    int out[2];
    char err_path[] = "/tmp/emx_robust_err_XXXXXX";
    int err_fd = mkstemp(err_path);
    cr_assert(pipe(out) == 0 && err_fd >= 0);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        dup2(out[1], 1);
        dup2(err_fd, 2);
        close(out[0]);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(out[1]);
    char first;
    cr_assert_eq(read(out[0], &first, 1), 1, "no output");
    cr_assert_eq(kill(pid, SIGINT), 0);
    size_t cap = 1 << 20, n = 1;
    char *text = malloc(cap);
    text[0] = first;
    for (ssize_t k; (k = read(out[0], text + n, cap - 1 - n)) > 0;) n += (size_t)k;
    text[n] = 0;
    close(out[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    char *err = slurp_fd(err_fd, NULL);
    close(err_fd);
    unlink(err_path);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 130, "status %d: %s", status, err);
    int tokens = -1;
    const char *said = strstr(err, "run: interrupted (Ctrl-C) after ");
    cr_assert(said && sscanf(said, "run: interrupted (Ctrl-C) after %d tokens", &tokens) == 1, "%s", err);
    cr_expect(tokens >= 1 && tokens < 400, "%d tokens", tokens);
    cr_expect(strstr(err, "generated: ") != NULL, "no timings: %s", err);
    int lines = 0;  // after the echoed prompt, one complete JSON line a token
    for (const char *c = strchr(text, '{'); c && (c = strstr(c, "{\"index\":")); c++) lines++;
    cr_expect_eq(lines, tokens, "%d metrics lines for %d tokens", lines, tokens);
    struct stat sb;
    cr_expect(stat(report, &sb) == 0 && sb.st_size > 0, "no report written");
    free(text);
    free(err);
    tmp_cleanup(&t);
}

// ---------------------------------------------------------------------------------------------
// Memory

// EMX_MEMAVAILABLE_MB stands in for the machine's memory (mem_available.h), so the figures are fixed.
Test(run_robust, kv_cache_larger_than_memory_is_refused, .timeout = 300) {
    Tmp t;
    tmp_setup(&t);
    EmxModel m;
    char err[256];
    cr_assert_eq(emx_model_open(&m, t.model, err, sizeof err), 0, "%s", err);
    uint64_t kv32 = 0, kv16 = 0;
    const uint64_t one = emx_cpu_state_bytes(&m.cfg, 512, 1, EMX_KV_F32, &kv32);
    const uint64_t one16 = emx_cpu_state_bytes(&m.cfg, 512, 1, EMX_KV_F16, &kv16);
    cr_expect(kv16 * 2 == kv32 && one - one16 == kv16, "an f16 cache is half the f32 one: %llu of %llu",
              (unsigned long long)kv16, (unsigned long long)kv32);
    emx_model_close(&m);
    // Room for one state, not for four.
    char avail[32];
    snprintf(avail, sizeof avail, "%llu", (unsigned long long)(one >> 20) + 1);
    cr_assert_gt(4 * one, ((one >> 20) + 1) << 20, "stories260K's states are too small for this test");
    cr_assert_eq(setenv("EMX_MEMAVAILABLE_MB", avail, 1), 0);
    const char *const single[] = {t.model, "-t", "1", "-n", "4", "-s", "1", NULL};
    RunResult r = run(single);
    cr_expect_eq(r.code, 0, "one state in %s MiB: %s", avail, r.err);
    run_free(&r);
    const char *const workers[] = {t.model, "-t", "1", "-n", "4", "-s", "1", "--workers", "4", "--check-every", "0", NULL};
    expect_error(workers, 1, "cpu: the KV cache does not fit: it needs ");
    const char *const one_worker[] = {t.model, "-t", "1", "-n", "4", "-s", "1", "--workers", "1", "--check-every", "0", NULL};
    r = run(one_worker);
    cr_expect_eq(r.code, 0, "one worker in %s MiB: %s", avail, r.err);
    run_free(&r);
    cr_assert_eq(setenv("EMX_MEMAVAILABLE_MB", "1", 1), 0);
    expect_error(single, 1, "at ctx 512, 1 state), the machine has 1.0 MiB available (a smaller --ctx-size may)");
    const char *const small[] = {t.model, "-t", "1", "-n", "4", "-s", "1", "-c", "32", NULL};
    r = run(small);
    cr_expect_eq(r.code, 0, "-c 32 in 1 MiB: %s", r.err);
    run_free(&r);
    unsetenv("EMX_MEMAVAILABLE_MB");
    tmp_cleanup(&t);
}

Test(run_robust, mem_check_figures) {
    char err[256];
    cr_expect_eq(emx_mem_check(100 << 20, 60 << 20, 0, 64, "1 state", err, sizeof err), 0);  // unknown: accepted
    cr_expect_eq(emx_mem_check(100 << 20, 60 << 20, 100 << 20, 64, "1 state", err, sizeof err), 0);
    cr_assert_eq(emx_mem_check(100 << 20, 60 << 20, 50 << 20, 64, "1 state", err, sizeof err), -1);
    cr_expect_str_eq(err, "cpu: the KV cache does not fit: it needs 100.0 MiB (KV cache 60.0, activations 40.0 at "
                          "ctx 64, 1 state), the machine has 50.0 MiB available (a smaller --ctx-size may)");
}

// ---------------------------------------------------------------------------------------------
// The timing summary

// "generated: N tokens, decode X ms (...)" and "sampler: NAME, Y ms/token (Z% of decode)": the
// sampler's time is part of the decode interval, whatever the machine's speed.
static void expect_consistent_timing(const char *const *args) {
    RunResult r = run(args);
    cr_assert_eq(r.code, 0, "stderr: %s", r.err);
    const char *g = strstr(r.err, "generated: "), *s = strstr(r.err, "sampler: ");
    cr_assert(g && s, "stderr: %s", r.err);
    int n = 0;
    double dec = 0, per = 0, pct = 0;
    cr_assert_eq(sscanf(g, "generated: %d tokens, decode %lf ms", &n, &dec), 2, "%s", g);
    char name[32] = {0};
    cr_assert_eq(sscanf(s, "sampler: %31[^,], %lf ms/token (%lf%% of decode)", name, &per, &pct), 3, "%s", s);
    cr_expect(!strcmp(name, "entropix") || !strcmp(name, "greedy") || !strcmp(name, "combined"), "sampler %s", name);
    cr_expect_leq(pct, 100.0, "sampler share %.1f%% of decode: %s", pct, r.err);
    // printed to 0.01 ms and 0.001 ms/token: allow the rounding
    cr_expect_leq(per * n, dec + 0.005 + 0.0005 * n, "sampler %.3f x %d ms > decode %.2f ms: %s", per, n, dec, r.err);
    run_free(&r);
}

Test(run_robust, sampler_share_is_of_the_decode_interval, .timeout = 300) {
    Tmp t;
    tmp_setup(&t);
    const char *const one[] = {t.model, "-t", "1", "-n", "1", "-s", "1", NULL};
    const char *const one_combined[] = {t.model, "-t", "1", "-n", "1", "-s", "1", "--sampler", "combined", NULL};
    const char *const many[] = {t.model, "-t", "1", "-n", "16", "-s", "1", NULL};
    for (int i = 0; i < 3; i++) expect_consistent_timing(one);
    expect_consistent_timing(one_combined);
    expect_consistent_timing(many);
    tmp_cleanup(&t);
}

// ---------------------------------------------------------------------------------------------
// Flag values

Test(run_robust, denormal_probabilities_are_values) {
    char err[256];
    EmxCliArgs a;
    char *argv[] = {"run", "m.bin", "--top-p", "1e-320", "--min-p", "1e-400", "--temp", "4e-45", NULL};
    cr_expect_eq(emx_cli_parse(8, argv, &a, err, sizeof err), 0, "%s", err);
    cr_expect_geq(a.sampling.top_p, 0.0f);
    cr_expect_leq(a.sampling.top_p, 1e-38f);
    char *over[] = {"run", "m.bin", "--top-p", "1e400", NULL};
    cr_expect_eq(emx_cli_parse(4, over, &a, err, sizeof err), 2);
    cr_expect(strstr(err, "out of range"), "%s", err);
}
