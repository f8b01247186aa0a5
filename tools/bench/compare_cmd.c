// compare_cmd.c — another runtime's decode speed from a shell command (compare_cmd.h).
#include "tools/bench/compare_cmd.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/errmsg.h"
#include "tools/bench/subprocess.h"

extern char **environ;

// The length of the unit at s ("tok/s", "tokens/s", "t/s", then not a letter), else 0.
static size_t unit_len(const char *s) {
    static const char *units[] = {"tokens/s", "tok/s", "t/s"};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        size_t n = strlen(units[i]);
        if (!strncmp(s, units[i], n) && !isalnum((unsigned char)s[n])) return n;
    }
    return 0;
}

int emx_compare_parse_tps(const char *text, double *tps, char *err, size_t errlen) {
    int found = 0;
    for (const char *s = text; *s; s++) {
        // A number starts with a digit (or ".5") not glued to a word or another number.
        int starts = isdigit((unsigned char)s[0]) || (s[0] == '.' && isdigit((unsigned char)s[1]));
        if (!starts || (s > text && (isalnum((unsigned char)s[-1]) || s[-1] == '.' || s[-1] == '_'))) continue;
        char *end;
        double v = strtod(s, &end);
        const char *u = end;
        while (*u == ' ' || *u == '\t') u++;
        size_t n = unit_len(u);
        if (n) {
            *tps = v;
            found = 1;
            s = u + n - 1;
        } else {
            s = end - 1;  // past this number: its digits are not numbers of their own
        }
    }
    if (!found) {
        emx_seterr(err, errlen, "--compare-cmd: no '<number> tok/s' (or tokens/s, t/s) in its output");
        return -1;
    }
    return 0;
}

// environ without our four variables, then ours: a NULL-terminated copy (the strings are not
// copied; vars holds ours). Returns NULL when out of memory.
static char **child_env(char vars[4][64]) {
    static const char *names[] = {"EMX_BENCH_N_PROMPT=", "EMX_BENCH_N_GEN=", "EMX_BENCH_THREADS=", "EMX_BENCH_DEVICE="};
    size_t n = 0;
    while (environ[n]) n++;
    char **env = malloc((n + 5) * sizeof *env);
    if (!env) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int ours = 0;
        for (int j = 0; j < 4; j++) ours |= !strncmp(environ[i], names[j], strlen(names[j]));
        if (!ours) env[k++] = environ[i];
    }
    for (int j = 0; j < 4; j++) env[k++] = vars[j];
    env[k] = NULL;
    return env;
}

int emx_compare_cmd_run(const char *cmd, const EmxCompareRun *run, double *tps, char *err, size_t errlen) {
    char vars[4][64];
    snprintf(vars[0], sizeof vars[0], "EMX_BENCH_N_PROMPT=%d", run->n_prompt);
    snprintf(vars[1], sizeof vars[1], "EMX_BENCH_N_GEN=%d", run->n_gen);
    snprintf(vars[2], sizeof vars[2], "EMX_BENCH_THREADS=%d", run->threads);
    snprintf(vars[3], sizeof vars[3], "EMX_BENCH_DEVICE=%.40s", run->device ? run->device : "cpu");
    char **env = child_env(vars);
    if (!env) {
        emx_seterr(err, errlen, "--compare-cmd: out of memory");
        return -1;
    }
    const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    EmxBenchProc p;
    int rc = emx_bench_proc_run("--compare-cmd", "/bin/sh", argv, env, &p, err, errlen);
    free(env);
    if (rc != 0) return -1;
    rc = emx_bench_proc_failed(&p, "--compare-cmd", err, errlen) ? -1 : emx_compare_parse_tps(p.out, tps, err, errlen);
    emx_bench_proc_free(&p);
    return rc;
}
