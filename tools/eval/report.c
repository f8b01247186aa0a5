// report.c — the summary table (report.h).
#include "tools/eval/report.h"

#include <math.h>
#include <string.h>

#define MAX_BASELINES 64  // rows of baselines per block at most (3 built in + the task files' names)

int eval_first_of_family(const EvalSummaryInput *in, int i) {
    for (int j = 0; j < i; j++)
        if (strcmp(in->items[j]->family, in->items[i]->family) == 0) return 0;
    return 1;
}

// v with fmt, or "-" when it is NaN.
static const char *num(char *buf, size_t cap, const char *fmt, double v) {
    if (isnan(v)) snprintf(buf, cap, "-");
    else snprintf(buf, cap, fmt, v);
    return buf;
}

static void print_header(FILE *f) {
    fprintf(f, "%-28s %6s %7s %17s %8s %9s %7s %7s %10s %12s %8s %7s %8s %8s  %s\n", "config", "n", "acc", "95% CI",
            "diff", "b/c", "p", "oracle", "not_argmax", "auroc:margin", "auroc:H", "tokens", "tok/s", "time_s",
            "cases LELV/HELV/LEHV/HEHV/ADAPTIVE");
}

static void print_row(FILE *f, const EvalSummaryInput *in, int ci, const EvalRow *r) {
    char bc[24], ci95[40], cases[96], diff[16], p[16], oracle[16], na[16], am[16], ah[16];
    snprintf(bc, sizeof bc, "%ld/%ld", r->b, r->c);
    snprintf(ci95, sizeof ci95, "[%.3f, %.3f]", r->ci_lo, r->ci_hi);
    long tot = 0;
    for (int k = 0; k < EMX_CASE_COUNT; k++) tot += r->cases[k];
    if (tot) snprintf(cases, sizeof cases, "%ld/%ld/%ld/%ld/%ld", r->cases[0], r->cases[1], r->cases[2], r->cases[3], r->cases[4]);
    else snprintf(cases, sizeof cases, "-");
    fprintf(f, "%-28s %6ld %7.3f %17s %8s %9s %7s %7s %10s %12s %8s %7.1f %8.1f %8.1f  %s\n", in->configs[ci].spec, r->n,
            r->accuracy, ci95, ci ? num(diff, sizeof diff, "%+.3f", r->diff) : "-", ci ? bc : "-",
            ci ? num(p, sizeof p, "%.4f", r->p) : "-", num(oracle, sizeof oracle, "%.3f", r->oracle),
            num(na, sizeof na, "%.3f", r->not_argmax), num(am, sizeof am, "%.3f", r->auroc_margin),
            num(ah, sizeof ah, "%.3f", r->auroc_entropy), r->mean_tokens, r->tok_s, r->time_s, cases);
}

static void print_baseline(FILE *f, const EvalBaselineRow *b) {
    char name[160], bc[24], ci95[40];
    if (b->answer) snprintf(name, sizeof name, "baseline:%.47s=%.60s", b->name, b->answer);
    else snprintf(name, sizeof name, "baseline:%.47s", b->name);
    snprintf(bc, sizeof bc, "%ld/%ld", b->b, b->c);
    snprintf(ci95, sizeof ci95, "[%.3f, %.3f]", b->ci_lo, b->ci_hi);
    fprintf(f, "%-28s %6d %7.3f %17s %+8.3f %9s %7.4f %7s %10s %12s %8s %7s %8s %8s  %s\n", name, b->n_items, b->accuracy,
            ci95, b->diff, bc, b->p, "-", "-", "-", "-", "-", "-", "-", "-");
}

static void print_open(FILE *f, const EvalSummaryInput *in, const EvalSummary *s, const char *family) {
    fprintf(f, "%-28s %6s %7s %10s %10s %16s %10s %7s\n", "config (open-ended)", "n", "loops", "distinct-1",
            "distinct-2", "logprob/token", "not_argmax", "tokens");
    for (int ci = 0; ci < in->n_configs; ci++) {
        EvalOpenRow r;
        eval_summary_open_row(s, ci, family, &r);
        char loops[16], d1[16], d2[16], lp[16], na[16];
        fprintf(f, "%-28s %6ld %7s %10s %10s %16s %10s %7.1f\n", in->configs[ci].spec, r.n,
                num(loops, sizeof loops, "%.3f", r.loop_share), num(d1, sizeof d1, "%.3f", r.distinct_1),
                num(d2, sizeof d2, "%.3f", r.distinct_2), num(lp, sizeof lp, "%.3f", r.mean_logprob_nats),
                num(na, sizeof na, "%.3f", r.not_argmax), r.mean_tokens);
    }
}

static void print_block(FILE *f, const EvalSummaryInput *in, const EvalSummary *s, const char *family, const char *title) {
    int n_items, n_prompts, n_answered, n_open;
    eval_summary_block(s, family, &n_items, &n_prompts, &n_answered, &n_open);
    fprintf(f, "\n== %s (%d item%s, %d distinct prompt%s%s)\n", title, n_items, n_items == 1 ? "" : "s", n_prompts,
            n_prompts == 1 ? "" : "s", n_answered ? "" : ", open-ended");
    if (n_answered) {
        print_header(f);
        for (int ci = 0; ci < in->n_configs; ci++) {
            EvalRow r;
            eval_summary_row(s, ci, family, &r);
            print_row(f, in, ci, &r);
        }
        EvalBaselineRow b[MAX_BASELINES];
        const int nb = eval_summary_baselines(s, family, b, MAX_BASELINES);
        for (int k = 0; k < nb; k++) print_baseline(f, &b[k]);
    }
    if (n_open) print_open(f, in, s, family);
}

int eval_summary_print(FILE *f, const EvalSummaryInput *in) {
    EvalSummary *s = eval_summary_new(in);
    if (!s) return -1;
    for (int i = 0; i < in->n_items; i++)
        if (eval_first_of_family(in, i)) print_block(f, in, s, in->items[i]->family, in->items[i]->family);
    print_block(f, in, s, NULL, "overall");
    eval_summary_free(s);
    fflush(f);
    return 0;
}
