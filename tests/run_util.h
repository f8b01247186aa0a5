// run_util.h — running the ./run binary from a test: argv in, exit code and the captured
// stdout/stderr out, and the one-line error contract. Header-only (static inline) so each test
// file that spawns ./run includes it.
//
// The binary is $EMX_RUN (default "./run"); the CUDA build's is $EMX_GPU_RUN.
#ifndef ENTROPIX_RUN_UTIL_H
#define ENTROPIX_RUN_UTIL_H

#include <criterion/criterion.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"

extern char **environ;

typedef struct {
    char *out, *err;  // NUL-terminated captures (free with run_free)
    size_t out_len;
    int code;         // exit status, or 128 + signal
} RunResult;

static inline const char *run_binary(void) {
    const char *p = getenv("EMX_RUN");
    return p && *p ? p : "./run";
}

// The CUDA build of ./run, $EMX_GPU_RUN (make test: build/emu/run, on emulated GPUs; make
// test-gpu: build/cuda/run), or a skip that says what is missing.
static inline const char *gpu_run_binary(void) {
    const char *p = getenv("EMX_GPU_RUN");
    if (!p || !*p) cr_skip_test("EMX_GPU_RUN is not set (make test sets it to build/emu/run)");
    if (access(p, X_OK) != 0) cr_skip_test("EMX_GPU_RUN=%s is not an executable (make build/emu/run)", p);
    return p;
}

static inline char *slurp_fd(int fd, size_t *len) {
    off_t n = lseek(fd, 0, SEEK_END);
    char *buf = malloc((size_t)n + 1);
    lseek(fd, 0, SEEK_SET);
    size_t got = 0;
    while (got < (size_t)n) {
        ssize_t k = read(fd, buf + got, (size_t)n - got);
        if (k <= 0) break;
        got += (size_t)k;
    }
    buf[got] = 0;
    if (len) *len = got;
    return buf;
}

// Runs the program `prog` with args (NULL-terminated, without argv[0]) and the file in_path as
// its stdin (NULL: the test's own); stdout and stderr go to temporary files (no pipe can fill up
// and block).
static inline RunResult run_prog_in(const char *prog, const char *const *args, const char *in_path) {
    char out_path[] = "/tmp/emx_cli_out_XXXXXX", err_path[] = "/tmp/emx_cli_err_XXXXXX";
    int out_fd = mkstemp(out_path), err_fd = mkstemp(err_path);
    cr_assert(out_fd >= 0 && err_fd >= 0, "mkstemp failed");
    const char *argv[64];
    int argc = 0;
    argv[argc++] = prog;
    for (int i = 0; args[i]; i++) argv[argc++] = args[i];
    argv[argc] = NULL;

    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
    posix_spawn_file_actions_adddup2(&fa, err_fd, 2);
    if (in_path) posix_spawn_file_actions_addopen(&fa, 0, in_path, O_RDONLY, 0);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    cr_assert_eq(rc, 0, "posix_spawn %s failed", argv[0]);
    int status = 0;
    waitpid(pid, &status, 0);

    RunResult r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = slurp_fd(out_fd, &r.out_len);
    r.err = slurp_fd(err_fd, NULL);
    close(out_fd);
    close(err_fd);
    unlink(out_path);
    unlink(err_path);
    return r;
}

static inline RunResult run_prog(const char *prog, const char *const *args) { return run_prog_in(prog, args, NULL); }

// Runs ./run (run_binary()) with args.
static inline RunResult run(const char *const *args) { return run_prog(run_binary(), args); }

static inline void run_free(RunResult *r) {
    free(r->out);
    free(r->err);
}

static inline int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

// The usage/runtime error contract: exit code, exactly one line on stderr containing `needle`.
static inline void expect_error_prog(const char *prog, const char *const *args, int code,
                                     const char *needle) {
    RunResult r = run_prog(prog, args);
    cr_expect_eq(r.code, code, "%s %s...: exit %d, expected %d (stderr: %s)", prog,
                 args[0] ? args[0] : "", r.code, code, r.err);
    cr_expect_eq(count_lines(r.err), 1, "stderr is not one line: [%s]", r.err);
    cr_expect(strstr(r.err, needle) != NULL, "stderr [%s] lacks [%s]", r.err, needle);
    cr_expect(strchr(r.err, '\n') == r.err + strlen(r.err) - 1, "stderr [%s]", r.err);
    run_free(&r);
}

static inline void expect_error(const char *const *args, int code, const char *needle) {
    expect_error_prog(run_binary(), args, code, needle);
}

// The error contract, and the file at `path` (an input the refused run named as an output)
// byte for byte as it was.
static inline void expect_error_keeps(const char *prog, const char *const *args, int code, const char *needle,
                                      const char *path) {
    size_t n0 = 0, n1 = 0;
    char *before = test_read_file(path, &n0);
    cr_assert(before, "%s unreadable", path);
    expect_error_prog(prog, args, code, needle);
    char *after = test_read_file(path, &n1);
    cr_expect(after && n0 == n1 && memcmp(before, after, n0) == 0, "%s changed: %zu bytes, was %zu", path, n1, n0);
    free(before);
    free(after);
}

#endif
