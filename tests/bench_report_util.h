// bench_report_util.h — reading `build/tools/bench speed`'s report in tests: its keys in order, a
// line's value, a number; and where the bench binaries are. Header-only (static inline) for
// test_bench.c, test_bench_decoders.c and test_bench_bw_model.c.
#ifndef ENTROPIX_BENCH_REPORT_UTIL_H
#define ENTROPIX_BENCH_REPORT_UTIL_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"

// The keys of the report, in order, on every device (tools/bench/speed_report.h); the prefill
// and decode lines carry the sizes ("prefill pp4:").
static const char *const REPORT_KEYS[] = {"device:", "model:", "prefill pp", "decode tg", "bytes/token:",
                                          "KV cache:", "achieved GB/s:", "peak GB/s:", "of peak:",
                                          "launches/step:", "memcpy GB/s:", "read GB/s:",
                                          "of read:"};
enum { N_REPORT_KEYS = sizeof REPORT_KEYS / sizeof REPORT_KEYS[0] };

// The value of the line that starts with key (after the key's colon and the padding), copied
// into val; 0 if there is no such line.
static inline int report_value(const char *out, const char *key, char *val, size_t cap) {
    for (const char *line = out; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        if (strncmp(line, key, strlen(key)) != 0) continue;
        const char *v = strchr(line, ':');
        if (!v) return 0;
        v++;
        while (*v == ' ') v++;
        size_t n = strcspn(v, "\n");
        snprintf(val, cap, "%.*s", (int)n, v);
        return 1;
    }
    return 0;
}

// Every key present, in REPORT_KEYS' order, each line once.
static inline void expect_report_lines(const char *out) {
    const char *at = out;
    for (int k = 0; k < N_REPORT_KEYS; k++) {
        const char *line = NULL;
        for (const char *l = out; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL)
            if (!strncmp(l, REPORT_KEYS[k], strlen(REPORT_KEYS[k]))) {
                cr_expect(line == NULL, "'%s' twice in [%s]", REPORT_KEYS[k], out);
                line = l;
            }
        cr_expect(line != NULL, "no '%s' line in [%s]", REPORT_KEYS[k], out);
        if (line) cr_expect(line >= at, "'%s' out of order in [%s]", REPORT_KEYS[k], out);
        if (line) at = line;
    }
}

static inline double report_number(const char *out, const char *key) {
    char v[256];
    cr_assert(report_value(out, key, v, sizeof v), "no '%s' in [%s]", key, out);
    char *end;
    double x = strtod(v, &end);
    cr_assert(end != v, "'%s' is not a number: [%s]", key, v);
    return x;
}

static inline void expect_dash(const char *out, const char *key) {
    char v[256];
    cr_assert(report_value(out, key, v, sizeof v), "no '%s' in [%s]", key, out);
    cr_expect_str_eq(v, "-", "%s", key);
}

// The CPU build's bench (its absence fails the test: make builds it) and a test model's path.
static inline void cpu_bench_and_model(char *bin, char *mp, const char *model) {
    char rel[128];
    test_build_path(bin, 1024, "cpu/tools/bench");
    snprintf(rel, sizeof rel, "models/%s", model);
    test_build_path(mp, 1024, rel);
    if (access(bin, X_OK) != 0) cr_assert_fail("%s is not built", bin);
}

// tools/bench linked with the CUDA backend under the emulator ($EMX_GPU_BENCH); the test skips,
// saying why, where it is not given or not built.
static inline const char *gpu_bench(void) {
    const char *b = getenv("EMX_GPU_BENCH");
    if (!b || !*b) cr_skip_test("EMX_GPU_BENCH is not set (make test sets it to build/emu/tools/bench)");
    if (access(b, X_OK) != 0) cr_skip_test("EMX_GPU_BENCH=%s is not built (make build/emu/tools/bench)", b);
    return b;
}

#endif
