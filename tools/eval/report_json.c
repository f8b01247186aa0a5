// report_json.c — the summary as JSON (report.h): the table's numbers, NaN written as null.
#include "tools/eval/report.h"

#include <cjson/cJSON.h>
#include <math.h>

#define MAX_BASELINES 64

static void add_num(cJSON *o, const char *k, double v) {
    if (isfinite(v)) cJSON_AddNumberToObject(o, k, v);
    else cJSON_AddNullToObject(o, k);
}

static cJSON *config_json(const EvalSummaryInput *in, int ci, const EvalRow *r) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "config", in->configs[ci].spec);
    cJSON_AddNumberToObject(j, "n_items", r->n_items);
    cJSON_AddNumberToObject(j, "n", (double)r->n);
    cJSON_AddNumberToObject(j, "correct", (double)r->correct);
    cJSON_AddNumberToObject(j, "accuracy", r->accuracy);
    cJSON_AddNumberToObject(j, "ci95_low", r->ci_lo);
    cJSON_AddNumberToObject(j, "ci95_high", r->ci_hi);
    cJSON_AddNumberToObject(j, "diff_vs_first", r->diff);
    cJSON_AddNumberToObject(j, "b", (double)r->b);
    cJSON_AddNumberToObject(j, "c", (double)r->c);
    cJSON_AddNumberToObject(j, "p", r->p);
    cJSON_AddNumberToObject(j, "n_units", r->n_units);
    cJSON_AddNumberToObject(j, "mean_tokens", r->mean_tokens);
    cJSON_AddNumberToObject(j, "tok_per_s", r->tok_s);
    cJSON_AddNumberToObject(j, "time_s", r->time_s);
    add_num(j, "not_argmax", r->not_argmax);
    add_num(j, "auroc_margin", r->auroc_margin);
    cJSON_AddNumberToObject(j, "n_auroc_margin", (double)r->n_auroc_margin);
    add_num(j, "auroc_entropy", r->auroc_entropy);
    cJSON_AddNumberToObject(j, "n_auroc_entropy", (double)r->n_auroc_entropy);
    add_num(j, "oracle", r->oracle);
    cJSON_AddNumberToObject(j, "n_oracle", (double)r->n_oracle);
    cJSON *cases = cJSON_AddObjectToObject(j, "cases");
    for (int k = 0; k < EMX_CASE_COUNT; k++) cJSON_AddNumberToObject(cases, emx_case_name((EmxCase)k), (double)r->cases[k]);
    return j;
}

static cJSON *baseline_json(const EvalBaselineRow *b) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "baseline", b->name);
    if (b->answer) cJSON_AddStringToObject(j, "answer", b->answer);
    else cJSON_AddNullToObject(j, "answer");
    cJSON_AddNumberToObject(j, "n", b->n_items);
    cJSON_AddNumberToObject(j, "correct", (double)b->correct);
    cJSON_AddNumberToObject(j, "accuracy", b->accuracy);
    cJSON_AddNumberToObject(j, "ci95_low", b->ci_lo);
    cJSON_AddNumberToObject(j, "ci95_high", b->ci_hi);
    cJSON_AddNumberToObject(j, "diff_vs_first", b->diff);
    cJSON_AddNumberToObject(j, "b", (double)b->b);
    cJSON_AddNumberToObject(j, "c", (double)b->c);
    cJSON_AddNumberToObject(j, "p", b->p);
    cJSON_AddNumberToObject(j, "n_units", b->n_units);
    return j;
}

static cJSON *open_json(const EvalSummaryInput *in, int ci, const EvalOpenRow *r) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "config", in->configs[ci].spec);
    cJSON_AddNumberToObject(j, "n", (double)r->n);
    cJSON_AddNumberToObject(j, "repetition_loops", (double)r->n_loops);
    add_num(j, "loop_share", r->loop_share);
    add_num(j, "distinct_1", r->distinct_1);
    add_num(j, "distinct_2", r->distinct_2);
    add_num(j, "mean_logprob_nats", r->mean_logprob_nats);
    add_num(j, "not_argmax", r->not_argmax);
    cJSON_AddNumberToObject(j, "mean_tokens", r->mean_tokens);
    return j;
}

static cJSON *block_json(const EvalSummaryInput *in, const EvalSummary *s, const char *family) {
    int n_items, n_prompts, n_answered, n_open;
    eval_summary_block(s, family, &n_items, &n_prompts, &n_answered, &n_open);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "family", family ? family : "overall");
    cJSON_AddNumberToObject(o, "n_items", n_items);
    cJSON_AddNumberToObject(o, "n_distinct_prompts", n_prompts);
    cJSON_AddNumberToObject(o, "n_open", n_open);
    cJSON *rows = cJSON_AddArrayToObject(o, "configs"), *open = cJSON_AddArrayToObject(o, "open_ended");
    for (int ci = 0; ci < in->n_configs && n_answered; ci++) {
        EvalRow r;
        eval_summary_row(s, ci, family, &r);
        cJSON_AddItemToArray(rows, config_json(in, ci, &r));
    }
    cJSON *base = cJSON_AddArrayToObject(o, "baselines");
    EvalBaselineRow b[MAX_BASELINES];
    const int nb = n_answered ? eval_summary_baselines(s, family, b, MAX_BASELINES) : 0;
    for (int k = 0; k < nb; k++) cJSON_AddItemToArray(base, baseline_json(&b[k]));
    for (int ci = 0; ci < in->n_configs && n_open; ci++) {
        EvalOpenRow r;
        eval_summary_open_row(s, ci, family, &r);
        cJSON_AddItemToArray(open, open_json(in, ci, &r));
    }
    return o;
}

int eval_summary_json(FILE *f, const EvalSummaryInput *in, const char *model_path) {
    EvalSummary *s = eval_summary_new(in);
    if (!s) return -1;
    cJSON *doc = cJSON_CreateObject();
    cJSON_AddStringToObject(doc, "model", model_path);
    cJSON_AddNumberToObject(doc, "seeds", in->n_seeds);
    cJSON *fams = cJSON_AddArrayToObject(doc, "families");
    for (int i = 0; i < in->n_items; i++)
        if (eval_first_of_family(in, i)) cJSON_AddItemToArray(fams, block_json(in, s, in->items[i]->family));
    cJSON_AddItemToObject(doc, "overall", block_json(in, s, NULL));
    eval_summary_free(s);
    char *text = cJSON_Print(doc);
    cJSON_Delete(doc);
    if (!text) return -1;
    int bad = fprintf(f, "%s\n", text) < 0;
    cJSON_free(text);
    return bad || fflush(f) != 0 ? -1 : 0;
}
