// cli.c — parsing eval's command line (cli.h).
#include "tools/eval/cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/errmsg.h"

static int parse_int(const char *flag, const char *s, long lo, long hi, int *out, char *err, size_t errlen) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno == ERANGE || v < lo || v > hi) {
        emx_seterr(err, errlen, "%s: '%s' is not an integer in [%ld, %ld]", flag, s, lo, hi);
        return 2;
    }
    *out = (int)v;
    return 0;
}

static int usage_err(char *err, size_t errlen, const char *fmt, const char *arg) {
    emx_seterr(err, errlen, fmt, arg);
    return 2;
}

int eval_parse_args(int argc, char **argv, EvalArgs *a, char *err, size_t errlen) {
    memset(a, 0, sizeof *a);
    a->seeds = 3;
    a->out = EVAL_DEFAULT_OUT;
    a->device = "auto";
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "-h") || !strcmp(f, "--help")) {
            a->help = 1;
            return 0;
        }
        if (!strcmp(f, "--version")) {
            a->version = 1;
            return 0;
        }
        if (f[0] != '-' || !f[1]) {
            if (!a->model) a->model = f;
            else if (a->n_tasks == EVAL_MAX_FILES) return usage_err(err, errlen, "more than 64 task files at '%s'", f);
            else a->tasks[a->n_tasks++] = f;
            continue;
        }
        static const char *const valued[] = {"--config", "--seeds", "--limit", "-o", "--json", "--device", "-t",
                                             "--report-dir"};
        int k = 0;
        while (k < 8 && strcmp(f, valued[k]) != 0) k++;
        if (k == 8) return usage_err(err, errlen, "unknown option '%s' (see --help)", f);
        if (i + 1 >= argc) return usage_err(err, errlen, "%s needs a value", f);
        const char *v = argv[++i];
        int rc = 0;
        switch (k) {
        case 0:
            if (a->n_configs == EVAL_MAX_CONFIGS) return usage_err(err, errlen, "more than 32 configs at '%s'", v);
            a->configs[a->n_configs++] = v;
            break;
        case 1: rc = parse_int(f, v, 1, 1000, &a->seeds, err, errlen); break;
        case 2: rc = parse_int(f, v, 0, 1 << 30, &a->limit, err, errlen); break;
        case 3: a->out = v; break;
        case 4: a->json = v; break;
        case 5: a->device = v; break;
        case 6: rc = parse_int(f, v, 0, 4096, &a->threads, err, errlen); break;
        case 7: a->report_dir = v; break;
        }
        if (rc) return rc;
    }
    if (!a->model || a->n_tasks == 0)
        return usage_err(err, errlen, "%s (usage: eval MODEL.bin TASKS.jsonl [...] [options]; see --help)",
                         !a->model ? "missing model file" : "missing task file");
    if (a->n_configs == 0) {
        a->configs[0] = "greedy";
        a->configs[1] = "combined";
        a->configs[2] = "entropix";
        a->n_configs = 3;
    }
    return 0;
}

void eval_usage(FILE *f) {
    fputs("usage: eval MODEL.bin TASKS.jsonl [TASKS2.jsonl ...] [options]\n"
          "Answer accuracy of sampler configurations on task files, with statistics (docs/eval.md).\n"
          "  --config NAME[:k=v,...]  a sampler configuration, repeatable (default: greedy, combined,\n"
          "                          entropix); NAME is ./run's --sampler, keys are its flags: temp,\n"
          "                          top_k, top_p, min_p, profile, profile_set, metric_layers, n (agents),\n"
          "                          agent_configs, lookahead, workers, devices, critic=off|on,\n"
          "                          check_every, window, margin, critic_model, rollback, max_rollbacks,\n"
          "                          no_think=1; branch: tau, k, forks, gate, lookahead, rule, alphabet,\n"
          "                          cue, commit=1 (values with commas written with ';'). The first is\n"
          "                          the baseline.\n"
          "  --seeds N               seeds 0..N-1 per item and config (default 3; greedy runs once)\n"
          "  --limit N               the first N items of each task file (default: all)\n"
          "  -o FILE                 results, one JSON line each, appended as they finish (default\n"
          "                          " EVAL_DEFAULT_OUT "); a rerun with the same file skips what is there\n"
          "  --json FILE             the summary as JSON too\n"
          "  --report-dir DIR        an HTML report (./run --report's page) per generation, named\n"
          "                          DIR/FAMILY-ID-CONFIG-sSEED.html; DIR is created if missing (its\n"
          "                          folder must exist)\n"
          "  --device D              cpu, cuda:N or auto (default), as ./run's\n"
          "  -t N                    CPU threads (default: all cores)\n"
          "  --version               the version and the backends of this build\n"
          "Exit: 0 ok, 1 runtime error, 2 bad flag, task file or config (nothing is generated).\n",
          f);
}
