// run_branch.c — ./run --sampler branch (run_branch.h).
#include "runtime/cli/run_branch.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "runtime/generate.h"

int emx_run_branch_params(const EmxCliArgs *a, EmxBranchParams *bp, char *err, size_t errlen) {
    *bp = emx_branch_params_default();
    bp->entropy_bits = a->branch_entropy;
    bp->k = a->branch_k;
    bp->max_forks = a->branch_forks;
    bp->gate = a->branch_gate;
    bp->lookahead = a->branch_lookahead;
    bp->rule = a->branch_rule;
    bp->cue = a->answer_cue;
    if (a->answer_alphabet &&
        emx_branch_alphabet_parse(a->answer_alphabet, &bp->alphabet, &bp->n_alphabet, err, errlen) != 0)
        return -1;
    if (emx_branch_params_check(bp, err, errlen) != 0) {
        emx_branch_alphabet_free(bp->alphabet, bp->n_alphabet);
        bp->alphabet = NULL, bp->n_alphabet = 0;
        return -1;
    }
    return 0;
}

// --verbose: every path, one line each.
static void print_paths(const EmxBranchParams *bp, const EmxBranchResult *res) {
    static const char *const ends[] = {"?", "stop", "budget", "cut"};
    for (int i = 0; i < res->n_paths; i++) {
        const EmxBranchPath *p = &res->paths[i];
        fprintf(stderr, "branch path %d: %s%d/%d, %d tokens, end %s, prob %.4f, score %.4f", i,
                p->fork < 0 ? "main line " : "fork ", p->fork, p->branch, p->n_tokens,
                ends[p->end >= 1 && p->end <= 3 ? p->end : 0], p->prob, p->score);
        if (p->answer >= 0) fprintf(stderr, ", answer '%s' (p %.4f)", bp->alphabet[p->answer], p->answer_p[p->answer]);
        fprintf(stderr, "%s: \"", p->output ? ", output" : "");
        for (const char *c = p->text; *c; c++) fputs(*c == '\n' ? "\\n" : *c == '"' ? "\\\"" : (char[2]){*c, 0}, stderr);
        fprintf(stderr, "\"\n");
    }
}

int emx_run_branch(const EmxCliArgs *a, EmxState *st, const EmxTokenizer *tk, const int *ids, int n_ids, int chat) {
    char err[512] = {0};
    EmxBranchParams bp;
    if (emx_run_branch_params(a, &bp, err, sizeof err) != 0) {
        fprintf(stderr, "run: %s\n", err);
        return 2;
    }
    if (a->verbose)
        fprintf(stderr, "branch: entropy > %g bits and p(top) < 0.5, k %d, gate %g, forks %d, lookahead %d, rule %s, "
                        "alphabet of %d%s%s\n", bp.entropy_bits, bp.k, bp.gate, bp.max_forks, bp.lookahead,
                emx_branch_rule_name(bp.rule), bp.n_alphabet, bp.n_alphabet ? ", cue " : "",
                bp.n_alphabet ? (bp.cue ? bp.cue : EMX_BRANCH_DEFAULT_CUE) : "");
    EmxGenerateOptions go = {.n_predict = a->n_predict, .out = stdout, .out_name = "stdout", .echo_prompt = !chat};
    EmxBranchResult res;
    EmxGenerateStats stats;
    const int rc = emx_branch_decode(st, tk, ids, n_ids, &bp, &go, &res, &stats, err, sizeof err);
    errno = 0;
    const int out_failed = printf("\n") < 0 || fflush(stdout) != 0 || ferror(stdout);
    int status = 0;
    if (rc != 0) {
        fprintf(stderr, "run: %s\n", err);
        status = 1;
    } else if (out_failed) {
        fprintf(stderr, "run: writing the generated text to stdout: %s\n", strerror(errno ? errno : EIO));
        status = 1;
    } else {
        if (stats.stop == EMX_STOP_CONTEXT)
            fprintf(stderr, "run: stopped at the end of the context (%d tokens; -c)\n", emx_state_ctx(st));
        emx_generate_print_stats(stderr, &stats, "branch");
        emx_branch_print_stats(stderr, &bp, &res);
        if (a->verbose) print_paths(&bp, &res);
    }
    if (rc == 0) emx_branch_result_free(&res);
    emx_branch_alphabet_free(bp.alphabet, bp.n_alphabet);
    return status;
}
