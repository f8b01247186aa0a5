// tool_args.h — the command lines of the tools in tools/ (bench, calibrate), parsed from a table
// of options: `-x VALUE` / `--long VALUE` flags that set an int (checked against a range) or a
// string, bare `--switch` flags that set an int to 1, and positional arguments. Errors are one line on stderr, "tool: ...", and exit code 2.
// Header-only: each tool is one program.
#ifndef ENTROPIX_TOOL_ARGS_H
#define ENTROPIX_TOOL_ARGS_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { TOOL_INT, TOOL_STR, TOOL_FLAG };

typedef struct {
    const char *flag;  // "-n", "--runs"
    int kind;          // TOOL_INT, TOOL_STR or TOOL_FLAG (no value: sets *dst to 1)
    void *dst;         // int * (TOOL_INT, TOOL_FLAG) or const char **
    int lo, hi;        // TOOL_INT: the allowed range
} ToolOpt;

// Parses argv[0..argc) against opts; positionals fill pos[0..max_pos). Returns 0 (parsed),
// 1 (-h/--help given: print the usage, exit 0) or 2 (a usage error, already printed).
static inline int tool_parse_args(const char *tool, int argc, char **argv, const ToolOpt *opts,
                                  int n_opts, const char **pos, int max_pos) {
    int n_pos = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return 1;
        if (a[0] != '-' || a[1] == 0) {
            if (n_pos == max_pos) {
                fprintf(stderr, "%s: unexpected argument '%s'\n", tool, a);
                return 2;
            }
            pos[n_pos++] = a;
            continue;
        }
        const ToolOpt *o = NULL;
        for (int k = 0; k < n_opts && !o; k++)
            if (!strcmp(a, opts[k].flag)) o = &opts[k];
        if (!o) {
            fprintf(stderr, "%s: unknown option '%s' (see --help)\n", tool, a);
            return 2;
        }
        if (o->kind == TOOL_FLAG) {
            *(int *)o->dst = 1;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "%s: %s: missing value\n", tool, a);
            return 2;
        }
        const char *v = argv[++i];
        if (o->kind == TOOL_STR) {
            *(const char **)o->dst = v;
            continue;
        }
        char *end;
        errno = 0;
        long x = strtol(v, &end, 10);
        if (end == v || *end || errno || x < o->lo || x > o->hi) {
            fprintf(stderr, "%s: %s: '%s' is not an integer in [%d, %d]\n", tool, a, v, o->lo, o->hi);
            return 2;
        }
        *(int *)o->dst = (int)x;
    }
    return 0;
}

#endif
