// report.c — the summary table and its JSON (report.h).
#include "tools/eval/report.h"

#include <cjson/cJSON.h>
#include <string.h>

#include "tools/eval/stats.h"

// The item's mean correctness over the config's seeds, adding its results to row. Returns -1 when
// a result is missing (the item is left out of the row).
static double item_mean(const EvalSummaryInput *in, int ci, const EvalItem *it, EvalRow *row) {
    const EvalConfig *c = &in->configs[ci];
    const int seeds = c->deterministic ? 1 : in->n_seeds;
    long ok = 0;
    for (int s = 0; s < seeds; s++)
        if (!eval_results_find(in->results, it->family, it->id, c->spec, (uint64_t)s)) return -1.0;
    for (int s = 0; s < seeds; s++) {
        const EvalResult *r = eval_results_find(in->results, it->family, it->id, c->spec, (uint64_t)s);
        ok += r->correct;
        if (row) {
            row->n++;
            row->correct += r->correct;
            row->mean_tokens += r->n_tokens;
            row->time_s += r->time_s;
            for (int k = 0; k < EMX_CASE_COUNT; k++) row->cases[k] += r->cases[k];
        }
    }
    return (double)ok / seeds;
}

void eval_summary_row(const EvalSummaryInput *in, int ci, const char *family, EvalRow *row) {
    memset(row, 0, sizeof *row);
    double diff_sum = 0.0;
    int n_paired = 0;
    for (int i = 0; i < in->n_items; i++) {
        const EvalItem *it = in->items[i];
        if (family && strcmp(it->family, family) != 0) continue;
        double m = item_mean(in, ci, it, row);
        if (m < 0) continue;
        row->n_items++;
        double m0 = ci == 0 ? m : item_mean(in, 0, it, NULL);  // greedy's one result stands for every seed
        if (m0 < 0) continue;
        n_paired++;
        diff_sum += m - m0;
        row->b += m0 > m;
        row->c += m0 < m;
    }
    const double tokens = row->mean_tokens;
    row->accuracy = row->n ? (double)row->correct / (double)row->n : 0.0;
    eval_wilson(row->correct, row->n, &row->ci_lo, &row->ci_hi);
    row->diff = n_paired ? diff_sum / n_paired : 0.0;
    row->p = eval_sign_test_p(row->b, row->c);
    row->mean_tokens = row->n ? tokens / (double)row->n : 0.0;
    row->tok_s = row->time_s > 0 ? tokens / row->time_s : 0.0;
}

static void print_block(FILE *f, const EvalSummaryInput *in, const char *family, const char *title) {
    int n_items = 0;
    for (int i = 0; i < in->n_items; i++) n_items += !family || strcmp(in->items[i]->family, family) == 0;
    fprintf(f, "\n== %s (%d items)\n", title, n_items);
    fprintf(f, "%-28s %6s %7s %17s %8s %9s %7s %7s %8s %8s  %s\n", "config", "n", "acc", "95% CI", "diff", "b/c",
            "p", "tokens", "tok/s", "time_s", "cases LELV/HELV/LEHV/HEHV/ADAPTIVE");
    for (int ci = 0; ci < in->n_configs; ci++) {
        EvalRow r;
        eval_summary_row(in, ci, family, &r);
        char bc[24], ci95[40], cases[96];
        snprintf(bc, sizeof bc, "%ld/%ld", r.b, r.c);
        snprintf(ci95, sizeof ci95, "[%.3f, %.3f]", r.ci_lo, r.ci_hi);
        long tot = 0;
        for (int k = 0; k < EMX_CASE_COUNT; k++) tot += r.cases[k];
        if (tot) snprintf(cases, sizeof cases, "%ld/%ld/%ld/%ld/%ld", r.cases[0], r.cases[1], r.cases[2], r.cases[3], r.cases[4]);
        else snprintf(cases, sizeof cases, "-");
        if (ci == 0)
            fprintf(f, "%-28s %6ld %7.3f %17s %8s %9s %7s %7.1f %8.1f %8.1f  %s\n", in->configs[ci].spec, r.n, r.accuracy,
                    ci95, "-", "-", "-", r.mean_tokens, r.tok_s, r.time_s, cases);
        else
            fprintf(f, "%-28s %6ld %7.3f %17s %+8.3f %9s %7.4f %7.1f %8.1f %8.1f  %s\n", in->configs[ci].spec, r.n,
                    r.accuracy, ci95, r.diff, bc, r.p, r.mean_tokens, r.tok_s, r.time_s, cases);
    }
}

// Family i is the first item of its family? (families in first-seen order)
static int first_of_family(const EvalSummaryInput *in, int i) {
    for (int j = 0; j < i; j++)
        if (strcmp(in->items[j]->family, in->items[i]->family) == 0) return 0;
    return 1;
}

void eval_summary_print(FILE *f, const EvalSummaryInput *in) {
    for (int i = 0; i < in->n_items; i++)
        if (first_of_family(in, i)) print_block(f, in, in->items[i]->family, in->items[i]->family);
    print_block(f, in, NULL, "overall");
    fflush(f);
}

static cJSON *block_json(const EvalSummaryInput *in, const char *family) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "family", family ? family : "overall");
    cJSON *rows = cJSON_AddArrayToObject(o, "configs");
    for (int ci = 0; ci < in->n_configs; ci++) {
        EvalRow r;
        eval_summary_row(in, ci, family, &r);
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "config", in->configs[ci].spec);
        cJSON_AddNumberToObject(j, "n_items", r.n_items);
        cJSON_AddNumberToObject(j, "n", (double)r.n);
        cJSON_AddNumberToObject(j, "correct", (double)r.correct);
        cJSON_AddNumberToObject(j, "accuracy", r.accuracy);
        cJSON_AddNumberToObject(j, "ci95_low", r.ci_lo);
        cJSON_AddNumberToObject(j, "ci95_high", r.ci_hi);
        cJSON_AddNumberToObject(j, "diff_vs_first", r.diff);
        cJSON_AddNumberToObject(j, "b", (double)r.b);
        cJSON_AddNumberToObject(j, "c", (double)r.c);
        cJSON_AddNumberToObject(j, "p", r.p);
        cJSON_AddNumberToObject(j, "mean_tokens", r.mean_tokens);
        cJSON_AddNumberToObject(j, "tok_per_s", r.tok_s);
        cJSON_AddNumberToObject(j, "time_s", r.time_s);
        cJSON *cases = cJSON_AddObjectToObject(j, "cases");
        for (int k = 0; k < EMX_CASE_COUNT; k++) cJSON_AddNumberToObject(cases, emx_case_name((EmxCase)k), (double)r.cases[k]);
        cJSON_AddItemToArray(rows, j);
    }
    return o;
}

int eval_summary_json(FILE *f, const EvalSummaryInput *in, const char *model_path) {
    cJSON *doc = cJSON_CreateObject();
    cJSON_AddStringToObject(doc, "model", model_path);
    cJSON_AddNumberToObject(doc, "seeds", in->n_seeds);
    cJSON *fams = cJSON_AddArrayToObject(doc, "families");
    for (int i = 0; i < in->n_items; i++)
        if (first_of_family(in, i)) cJSON_AddItemToArray(fams, block_json(in, in->items[i]->family));
    cJSON_AddItemToObject(doc, "overall", block_json(in, NULL));
    char *s = cJSON_Print(doc);
    cJSON_Delete(doc);
    if (!s) return -1;
    int bad = fprintf(f, "%s\n", s) < 0;
    cJSON_free(s);
    return bad || fflush(f) != 0 ? -1 : 0;
}
