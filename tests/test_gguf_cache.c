// test_gguf_cache.c — ./run given a GGUF (runtime/convert/gguf_cache.h): the same text as the
// model file `convert --dtype keep` writes from it; the cache file converted once and then reused
// (no note, same inode and mtime), converted again when the GGUF changes (the old one removed),
// never written beside the GGUF; a cache folder that cannot be written, a write that fails
// midway (a file-size limit standing for a full disk) and a damaged GGUF each give one line and
// leave no file; two runs opening one GGUF at once both answer, and one file remains.
//
// The GGUFs are ../shared/testdata's stories260K (F32), llama3-tiny (F16) and qwen3-tiny (BF16),
// copied into a temporary folder per test.
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gguf_test_util.h"
#include "run_util.h"
#include "test_util.h"

// The names in folder (hidden ones too, . and .. aside), joined by spaces, sorted by readdir.
static int list_folder(const char *folder, char *names, size_t cap) {
    names[0] = 0;
    DIR *d = opendir(folder);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        size_t used = strlen(names);
        snprintf(names + used, cap - used, "%s%s", used ? " " : "", e->d_name);
        n++;
    }
    closedir(d);
    return n;
}

// The one file the cache holds (its path in out), asserted to be alone and a .bin.
static void the_cache_file(const GgufTmp *t, char *out, size_t cap) {
    char names[1024];
    cr_assert_eq(list_folder(t->cache, names, sizeof names), 1, "the cache holds [%s], want one file", names);
    size_t n = strlen(names);
    cr_assert(n > 4 && !strcmp(names + n - 4, ".bin") && names[0] != '.', "cache file [%s]", names);
    snprintf(out, cap, "%s/%s", t->cache, names);
}

// ./run MODEL greedy on a fixed prompt; returns its stdout (the text), stderr in *err_out.
static char *greedy_text(const char *model, const char *cache, char **err_out) {
    const char *const args[] = {model, "-p", "Once upon a time", "-n", "24", "--temp", "0", "-t", "1",
                                "--raw", "--gguf-cache", cache, NULL};
    RunResult r = run(args);
    cr_assert_eq(r.code, 0, "run %s: exit %d: %s", model, r.code, r.err);
    if (err_out) *err_out = strdup(r.err);
    char *text = strdup(r.out);
    run_free(&r);
    return text;
}

static const char *const GGUFS[] = {"testdata/stories260K/stories260K.gguf", "testdata/tiny/llama3-tiny/llama3-tiny.f16.gguf",
                                    "testdata/tiny/qwen3-tiny/qwen3-tiny.bf16.gguf"};

Test(gguf_cache, same_text_as_the_converted_model_and_never_beside_the_gguf, .timeout = 120) {
    for (size_t i = 0; i < sizeof GGUFS / sizeof GGUFS[0]; i++) {
        GgufTmp t;
        gguf_tmp_setup(&t, "gguf_cache", GGUFS[i]);
        char conv[1024], bin[160];
        test_build_path(conv, sizeof conv, "tools/convert");
        snprintf(bin, sizeof bin, "%s/converted.bin", t.dir);
        const char *const cargs[] = {t.gguf, bin, "--dtype", "keep", NULL};
        RunResult c = run_prog(conv, cargs);
        cr_assert_eq(c.code, 0, "convert %s: %s", GGUFS[i], c.err);
        run_free(&c);
        char *err = NULL;
        char *want = greedy_text(bin, t.cache, NULL), *got = greedy_text(t.gguf, t.cache, &err);
        cr_expect_str_eq(got, want, "%s: the GGUF's text differs from the converted model's", GGUFS[i]);
        cr_expect(strstr(err, "converting ") && strstr(err, "(once; reused while"), "no note: [%s]", err);
        char names[512];
        cr_expect_eq(list_folder(t.dir, names, sizeof names), 3, "%s holds [%s]", t.dir, names);  // gguf, bin, cache/
        char cached[256];
        the_cache_file(&t, cached, sizeof cached);
        size_t n1 = 0, n2 = 0;  // the writer is reproducible: the same bytes as convert's
        char *b1 = test_read_file(bin, &n1), *b2 = test_read_file(cached, &n2);
        cr_expect(b1 && b2 && n1 == n2 && !memcmp(b1, b2, n1), "%s: cache file differs from convert --dtype keep's",
                  GGUFS[i]);
        free(b1), free(b2), free(want), free(got), free(err);
        gguf_tmp_cleanup(&t);
    }
}

Test(gguf_cache, reused_while_unchanged_converted_again_when_changed, .timeout = 60) {
    GgufTmp t;
    gguf_tmp_setup(&t, "gguf_cache", GGUFS[0]);
    char *err = NULL;
    char *first = greedy_text(t.gguf, t.cache, &err);
    free(err);
    char cached[256];
    the_cache_file(&t, cached, sizeof cached);
    struct stat s1, s2;
    cr_assert_eq(stat(cached, &s1), 0);
    char *second = greedy_text(t.gguf, t.cache, &err);
    cr_expect_str_eq(second, first);
    cr_expect(!strstr(err, "converting"), "second run converted again: [%s]", err);
    free(err);
    cr_assert_eq(stat(cached, &s2), 0);
    cr_expect(s1.st_ino == s2.st_ino && s1.st_mtim.tv_sec == s2.st_mtim.tv_sec &&
              s1.st_mtim.tv_nsec == s2.st_mtim.tv_nsec, "the cache file was rewritten");
    // A new modification time (the same bytes): converted again, the old file removed.
    struct timespec times[2] = {{.tv_sec = 1000000000}, {.tv_sec = 1000000000}};
    cr_assert_eq(utimensat(AT_FDCWD, t.gguf, times, 0), 0);
    char *third = greedy_text(t.gguf, t.cache, &err);
    cr_expect(strstr(err, "converting"), "a touched GGUF was not converted again: [%s]", err);
    cr_expect_str_eq(third, first);
    char now[256];
    the_cache_file(&t, now, sizeof now);
    cr_expect_str_neq(now, cached, "the new state has the old name");
    free(first), free(second), free(third), free(err);
    gguf_tmp_cleanup(&t);
}

// Nothing but the lock-free, tmp-free cache folder (or none) after a failure.
static void expect_no_file(const char *folder) {
    char names[512];
    int n = list_folder(folder, names, sizeof names);
    cr_expect(n <= 0, "%s holds [%s] after a failure", folder, names);
}

Test(gguf_cache, unwritable_cache_and_failed_write_are_one_line, .timeout = 60) {
    GgufTmp t;
    gguf_tmp_setup(&t, "gguf_cache", GGUFS[0]);
    // A folder nothing can be created in: a mode of 0555, or (root ignores modes) /proc.
    const char *ro = t.cache;
    if (geteuid() == 0) ro = "/proc";
    else cr_assert_eq(mkdir(t.cache, 0555), 0);
    const char *const args[] = {t.gguf, "-p", "x", "-n", "2", "-t", "1", "--gguf-cache", ro, NULL};
    expect_error(args, 1, "cannot write in the cache folder");
    if (geteuid() != 0) {
        expect_no_file(t.cache);
        cr_assert_eq(chmod(t.cache, 0755), 0);
    }
    // A write stopped at 64 KiB, as a full disk stops it (EFBIG instead of ENOSPC).
    char cache2[128];
    snprintf(cache2, sizeof cache2, "%s/c2", t.dir);
    cr_assert_eq(mkdir(cache2, 0755), 0);
    struct rlimit old;
    cr_assert_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
    struct rlimit cap = {64 << 10, old.rlim_max};  // the soft limit only: raised back below
    signal(SIGXFSZ, SIG_IGN);  // inherited by the child: a write past the limit fails instead
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &cap), 0);
    const char *const full[] = {t.gguf, "-p", "x", "-n", "2", "-t", "1", "--gguf-cache", cache2, NULL};
    RunResult r = run(full);
    // The note that a conversion starts, then the one-line error.
    const char *line2 = strchr(r.err, '\n');
    cr_expect_eq(r.code, 1);
    cr_expect(!strncmp(r.err, "run: converting ", 16) && line2 && count_lines(r.err) == 2 &&
              !strncmp(line2 + 1, "run: the converted model was not written to the cache (", 55) &&
              strstr(line2, "File too large"), "stderr [%s]", r.err);
    run_free(&r);
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
    expect_no_file(cache2);
    gguf_tmp_cleanup(&t);
}

Test(gguf_cache, damaged_gguf_gives_the_converters_error, .timeout = 60) {
    GgufTmp t;
    gguf_tmp_setup(&t, "gguf_cache", GGUFS[0]);
    cr_assert_eq(truncate(t.gguf, 4096), 0);
    char conv[1024], bin[160];
    test_build_path(conv, sizeof conv, "tools/convert");
    snprintf(bin, sizeof bin, "%s/x.bin", t.dir);
    const char *const cargs[] = {t.gguf, bin, NULL};
    RunResult c = run_prog(conv, cargs);
    cr_assert_eq(c.code, 1);
    cr_assert(!strncmp(c.err, "convert: ", 9), "[%s]", c.err);
    char why[512];
    snprintf(why, sizeof why, "run: %s", c.err + 9);  // the reader's line, under run's name
    run_free(&c);
    const char *const args[] = {t.gguf, "-p", "x", "-n", "2", "-t", "1", "--gguf-cache", t.cache, NULL};
    RunResult r = run(args);
    cr_expect_eq(r.code, 1);
    cr_expect_str_eq(r.err, why);
    run_free(&r);
    expect_no_file(t.cache);
    gguf_tmp_cleanup(&t);
}

Test(gguf_cache, two_runs_at_once_share_one_conversion, .timeout = 60) {
    GgufTmp t;
    gguf_tmp_setup(&t, "gguf_cache", GGUFS[2]);  // qwen3-tiny: 20 MB to write, long enough for the runs to overlap
    const char *argv[] = {run_binary(), t.gguf, "-p", "hi", "-n", "4", "--temp", "0", "-t", "1", "--raw",
                          "--gguf-cache", t.cache, NULL};
    pid_t pid[2];
    posix_spawn_file_actions_t fa;  // their text to /dev/null: only the exit and the cache matter here
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(posix_spawn(&pid[i], argv[0], &fa, NULL, (char *const *)argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    for (int i = 0; i < 2; i++) {
        int status = 0;
        waitpid(pid[i], &status, 0);
        cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "run %d: status %d", i, status);
    }
    char cached[256];
    the_cache_file(&t, cached, sizeof cached);  // one file: no lock, no temporary file left
    gguf_tmp_cleanup(&t);
}
