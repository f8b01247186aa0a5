// summary.c — the summary's numbers (summary.h).
#include "tools/eval/summary.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/eval/checks.h"
#include "tools/eval/stats.h"

struct EvalSummary {
    const EvalSummaryInput *in;
    const EvalResult **cell;  // [n_items][n_configs][n_seeds]: the result, or NULL
    int *unit;                // [n_items] the first item with the same prompt (a unit's id)
    const char **mode;        // [n_items] the most common answer of the item's family (NULL: open)
};

static const EvalResult *cell(const EvalSummary *s, int i, int ci, int seed) {
    return s->cell[((size_t)i * (size_t)s->in->n_configs + (size_t)ci) * (size_t)s->in->n_seeds + (size_t)seed];
}

static int in_block(const EvalItem *it, const char *family) { return !family || strcmp(it->family, family) == 0; }

static int is_open(const EvalItem *it) { return it->check == EVAL_CHECK_OPEN; }

// Item order by (family, id), for finding a result's item; by prompt, for the units.
static int cmp_family_id(const EvalItem *a, const EvalItem *b) {
    const int c = strcmp(a->family, b->family);
    return c ? c : strcmp(a->id, b->id);
}

static int cmp_prompt(const EvalItem *a, const EvalItem *b) {
    if (a->chat != b->chat) return a->chat - b->chat;
    if (!a->system != !b->system) return a->system ? 1 : -1;
    const int c = a->system ? strcmp(a->system, b->system) : 0;
    return c ? c : strcmp(a->prompt ? a->prompt : "", b->prompt ? b->prompt : "");
}

typedef struct {
    const EvalItem *const *items;
    int (*cmp)(const EvalItem *, const EvalItem *);
} Order;

// qsort has no context argument: the items are sorted as (index, order) pairs.
typedef struct {
    int i;
    const Order *o;
} Ref;

static int cmp_ref(const void *a, const void *b) {
    const Ref *x = a, *y = b;
    const int c = x->o->cmp(x->o->items[x->i], y->o->items[y->i]);
    return c ? c : x->i - y->i;
}

static Ref *sorted(const EvalSummaryInput *in, const Order *o) {
    Ref *r = malloc((size_t)(in->n_items ? in->n_items : 1) * sizeof *r);
    if (!r) return NULL;
    for (int i = 0; i < in->n_items; i++) r[i] = (Ref){i, o};
    qsort(r, (size_t)in->n_items, sizeof *r, cmp_ref);
    return r;
}

static int index_results(EvalSummary *s) {
    const EvalSummaryInput *in = s->in;
    const Order o = {in->items, cmp_family_id};
    Ref *by_id = sorted(in, &o);
    if (!by_id) return -1;
    for (int k = 0; k < in->results->n; k++) {  // in file order: a later result of a cell wins
        const EvalResult *r = &in->results->r[k];
        int ci = 0;
        while (ci < in->n_configs && strcmp(in->configs[ci].spec, r->config) != 0) ci++;
        if (ci == in->n_configs || r->seed >= (uint64_t)in->n_seeds) continue;
        int lo = 0, hi = in->n_items;
        while (lo < hi) {  // the first item with (family, id) >= the result's
            const int mid = (lo + hi) / 2;
            const EvalItem *it = in->items[by_id[mid].i];
            const int c = strcmp(it->family, r->family) ? strcmp(it->family, r->family) : strcmp(it->id, r->id);
            if (c < 0) lo = mid + 1;
            else hi = mid;
        }
        for (int j = lo; j < in->n_items; j++) {  // --limit can list no item twice, but two files can
            const EvalItem *it = in->items[by_id[j].i];
            if (strcmp(it->family, r->family) || strcmp(it->id, r->id)) break;
            s->cell[((size_t)by_id[j].i * (size_t)in->n_configs + (size_t)ci) * (size_t)in->n_seeds + r->seed] = r;
        }
    }
    free(by_id);
    return 0;
}

static int find_units(EvalSummary *s) {
    const Order o = {s->in->items, cmp_prompt};
    Ref *by_prompt = sorted(s->in, &o);
    if (!by_prompt) return -1;
    for (int j = 0; j < s->in->n_items; j++) {  // equal prompts are adjacent, lowest index first
        const int i = by_prompt[j].i;
        const int same = j > 0 && cmp_prompt(s->in->items[by_prompt[j - 1].i], s->in->items[i]) == 0;
        s->unit[i] = same ? s->unit[by_prompt[j - 1].i] : i;
    }
    free(by_prompt);
    return 0;
}

static int same_answer(const EvalItem *a, const EvalItem *b) {
    if (a->check == EVAL_CHECK_NUMBER && b->check == EVAL_CHECK_NUMBER) return a->answer_num == b->answer_num;
    return strcmp(a->answer, b->answer) == 0;
}

// Each family's most common answer (numbers by value; a tie: the one seen first).
static int find_modes(EvalSummary *s) {
    const EvalSummaryInput *in = s->in;
    int *fam = malloc((size_t)(in->n_items ? in->n_items : 1) * sizeof *fam);
    if (!fam) return -1;
    for (int i = 0; i < in->n_items; i++) {
        const EvalItem *it = in->items[i];
        if (is_open(it) || s->mode[i]) continue;
        int n = 0;  // the family's answered items, in order
        for (int j = i; j < in->n_items; j++)
            if (!is_open(in->items[j]) && strcmp(in->items[j]->family, it->family) == 0) fam[n++] = j;
        int best = fam[0], best_n = 0;
        for (int a = 0; a < n; a++) {
            int count = 0, earlier = 0;
            for (int b = 0; b < n && !earlier; b++)
                if (same_answer(in->items[fam[a]], in->items[fam[b]])) earlier = b < a, count++;
            if (!earlier && count > best_n) best = fam[a], best_n = count;  // counted at its first item
        }
        for (int a = 0; a < n; a++) s->mode[fam[a]] = in->items[best]->answer;
    }
    free(fam);
    return 0;
}

EvalSummary *eval_summary_new(const EvalSummaryInput *in) {
    EvalSummary *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->in = in;
    const size_t n = (size_t)(in->n_items ? in->n_items : 1);
    s->cell = calloc(n * (size_t)in->n_configs * (size_t)in->n_seeds, sizeof *s->cell);
    s->unit = calloc(n, sizeof *s->unit);
    s->mode = calloc(n, sizeof *s->mode);
    if (!s->cell || !s->unit || !s->mode || index_results(s) != 0 || find_units(s) != 0 || find_modes(s) != 0) {
        eval_summary_free(s);
        return NULL;
    }
    return s;
}

void eval_summary_free(EvalSummary *s) {
    if (!s) return;
    free(s->cell);
    free(s->unit);
    free(s->mode);
    free(s);
}

void eval_summary_block(const EvalSummary *s, const char *family, int *n_items, int *n_prompts, int *n_answered,
                        int *n_open) {
    *n_items = *n_prompts = *n_answered = *n_open = 0;
    for (int i = 0; i < s->in->n_items; i++) {
        const EvalItem *it = s->in->items[i];
        if (!in_block(it, family)) continue;
        (*n_items)++;
        *n_open += is_open(it);
        *n_answered += !is_open(it);
        // a unit counts once: at its first item in this block
        int first = 1;
        for (int j = s->unit[i]; j < i && first; j++) first = !(s->unit[j] == s->unit[i] && in_block(s->in->items[j], family));
        *n_prompts += first;
    }
}

// The seeds a config has results for: 1 for a deterministic one.
static int seeds_of(const EvalSummary *s, int ci) { return s->in->configs[ci].deterministic ? 1 : s->in->n_seeds; }

// Item i's mean correctness over config ci's seeds; NaN when a result is missing.
static double item_mean(const EvalSummary *s, int ci, int i) {
    const int seeds = seeds_of(s, ci);
    long ok = 0;
    for (int k = 0; k < seeds; k++) {
        const EvalResult *r = cell(s, i, ci, k);
        if (!r) return NAN;
        ok += r->correct == 1;
    }
    return (double)ok / seeds;
}

// The paired comparison of per-item scores m[i] against the first config's m0[i] over the block's
// items with both (NaN: absent): diff over items, b/c and the sign test over units.
typedef struct {
    double diff, p;
    long b, c;
    int n_units;
} Paired;

static Paired pair(const EvalSummary *s, const char *family, const double *m, const double *m0) {
    const int n = s->in->n_items;
    Paired out = {0};
    double *sum = calloc((size_t)(n ? n : 1), sizeof *sum), *sum0 = calloc((size_t)(n ? n : 1), sizeof *sum0);
    int *cnt = calloc((size_t)(n ? n : 1), sizeof *cnt);
    int n_items = 0;
    if (sum && sum0 && cnt)
        for (int i = 0; i < n; i++) {
            if (!in_block(s->in->items[i], family) || isnan(m[i]) || isnan(m0[i])) continue;
            out.diff += m[i] - m0[i], n_items++;
            const int u = s->unit[i];
            sum[u] += m[i], sum0[u] += m0[i], cnt[u]++;
        }
    for (int u = 0; cnt && u < n; u++) {
        if (!cnt[u]) continue;
        out.n_units++;  // a unit's score: the mean of its items' (the same divisor on both sides)
        out.b += sum0[u] > sum[u];
        out.c += sum0[u] < sum[u];
    }
    out.diff = n_items ? out.diff / n_items : 0.0;
    out.p = eval_sign_test_p(out.b, out.c);
    free(sum), free(sum0), free(cnt);
    return out;
}

// The per-item means of config ci (NaN: absent, or not in the block, or open).
static double *means(const EvalSummary *s, int ci, const char *family) {
    double *m = malloc((size_t)(s->in->n_items ? s->in->n_items : 1) * sizeof *m);
    for (int i = 0; m && i < s->in->n_items; i++) {
        const EvalItem *it = s->in->items[i];
        m[i] = in_block(it, family) && !is_open(it) ? item_mean(s, ci, i) : NAN;
    }
    return m;
}

// AUROCs of the confidence measures over the results in r[0..n).
static void aurocs(const EvalResult *const *r, int n, EvalRow *row) {
    double *score = calloc((size_t)(n ? n : 1), sizeof *score);  // calloc: gcc cannot tell k <= n
    int *ok = calloc((size_t)(n ? n : 1), sizeof *ok);
    row->auroc_margin = row->auroc_entropy = NAN;
    if (!score || !ok) {
        free(score);
        free(ok);
        return;
    }
    int k = 0;
    for (int i = 0; i < n; i++)
        if (isfinite(r[i]->answer_margin)) score[k] = r[i]->answer_margin, ok[k++] = r[i]->correct == 1;
    row->n_auroc_margin = k;
    row->auroc_margin = eval_auroc(score, ok, k);
    k = 0;
    for (int i = 0; i < n; i++)  // lower entropy = more confident
        if (isfinite(r[i]->mean_entropy_bits)) score[k] = -r[i]->mean_entropy_bits, ok[k++] = r[i]->correct == 1;
    row->n_auroc_entropy = k;
    row->auroc_entropy = eval_auroc(score, ok, k);
    free(score);
    free(ok);
}

// The totals of config ci's results over the block's answered items with every result.
static void add_results(const EvalSummary *s, int ci, const char *family, const double *m, EvalRow *row,
                        const EvalResult **list, int *n_list) {
    long not_argmax = 0, measured_tokens = 0, oracle_ok = 0;
    *n_list = 0;
    for (int i = 0; i < s->in->n_items; i++) {
        if (!in_block(s->in->items[i], family) || isnan(m[i])) continue;
        row->n_items++;
        for (int k = 0; k < seeds_of(s, ci); k++) {
            const EvalResult *r = cell(s, i, ci, k);
            list[(*n_list)++] = r;
            row->n++;
            row->correct += r->correct == 1;
            row->mean_tokens += r->n_tokens;
            row->time_s += r->time_s;
            for (int c = 0; c < EMX_CASE_COUNT; c++) row->cases[c] += r->cases[c];
            if (r->n_not_argmax >= 0) not_argmax += r->n_not_argmax, measured_tokens += r->n_tokens;
            if (r->oracle >= 0) oracle_ok += r->oracle, row->n_oracle++;
        }
    }
    row->not_argmax = measured_tokens ? (double)not_argmax / (double)measured_tokens : NAN;
    row->oracle = row->n_oracle ? (double)oracle_ok / (double)row->n_oracle : NAN;
}

void eval_summary_row(const EvalSummary *s, int ci, const char *family, EvalRow *row) {
    memset(row, 0, sizeof *row);
    row->not_argmax = row->auroc_margin = row->auroc_entropy = row->oracle = NAN;
    double *m = means(s, ci, family), *m0 = ci == 0 ? m : means(s, 0, family);
    const EvalResult **list = malloc((size_t)(s->in->n_items ? s->in->n_items : 1) * (size_t)s->in->n_seeds * sizeof *list);
    if (m && m0 && list) {
        int n_list = 0;
        add_results(s, ci, family, m, row, list, &n_list);
        aurocs(list, n_list, row);
        const Paired pd = pair(s, family, m, m0);
        row->diff = pd.diff, row->b = pd.b, row->c = pd.c, row->p = pd.p, row->n_units = pd.n_units;
    } else {
        row->p = 1.0;
    }
    const double tokens = row->mean_tokens;
    row->accuracy = row->n ? (double)row->correct / (double)row->n : 0.0;
    eval_wilson(row->correct, row->n, &row->ci_lo, &row->ci_hi);
    row->mean_tokens = row->n ? tokens / (double)row->n : 0.0;
    row->tok_s = row->time_s > 0 ? tokens / row->time_s : 0.0;
    if (m0 != m) free(m0);
    free(m);
    free(list);
}

void eval_summary_open_row(const EvalSummary *s, int ci, const char *family, EvalOpenRow *row) {
    memset(row, 0, sizeof *row);
    double d1 = 0, d2 = 0, lp = 0, tokens = 0;
    long n_d1 = 0, n_d2 = 0, lp_tokens = 0, not_argmax = 0, measured = 0;
    for (int i = 0; i < s->in->n_items; i++) {
        const EvalItem *it = s->in->items[i];
        if (!in_block(it, family) || !is_open(it)) continue;
        for (int k = 0; k < seeds_of(s, ci); k++) {
            const EvalResult *r = cell(s, i, ci, k);
            if (!r) continue;
            row->n++;
            tokens += r->n_tokens;
            if (r->repetition_loop >= 0) row->n_loops += r->repetition_loop, row->n_loop_known++;
            if (isfinite(r->distinct_1)) d1 += r->distinct_1, n_d1++;
            if (isfinite(r->distinct_2)) d2 += r->distinct_2, n_d2++;
            // per token: each generation's mean weighted by its tokens
            if (isfinite(r->mean_logprob_nats)) lp += r->mean_logprob_nats * r->n_tokens, lp_tokens += r->n_tokens;
            if (r->n_not_argmax >= 0) not_argmax += r->n_not_argmax, measured += r->n_tokens;
        }
    }
    row->loop_share = row->n_loop_known ? (double)row->n_loops / (double)row->n_loop_known : NAN;
    row->distinct_1 = n_d1 ? d1 / (double)n_d1 : NAN;
    row->distinct_2 = n_d2 ? d2 / (double)n_d2 : NAN;
    row->mean_logprob_nats = lp_tokens ? lp / (double)lp_tokens : NAN;
    row->not_argmax = measured ? (double)not_argmax / (double)measured : NAN;
    row->mean_tokens = row->n ? tokens / (double)row->n : 0.0;
}

// Item i's answer under the named baseline, or NULL when it does not apply.
static const char *baseline_answer(const EvalSummary *s, int i, const char *name) {
    const EvalItem *it = s->in->items[i];
    if (is_open(it)) return NULL;
    if (strcmp(name, "mode") == 0) return s->mode[i];
    if (strcmp(name, "first-option") == 0) return it->check == EVAL_CHECK_CHOICE ? "A" : NULL;
    if (strcmp(name, "always-1") == 0) return it->check == EVAL_CHECK_NUMBER ? "1" : NULL;
    const int k = eval_item_baseline(it, name);
    return k >= 0 ? it->baseline_answers[k] : NULL;
}

// The baseline's row: its answer checked as a generation's text would be.
static void baseline_row(const EvalSummary *s, const char *family, const double *m0, double *score,
                         EvalBaselineRow *row) {
    int uniform = 1;
    row->answer = NULL;
    for (int i = 0; i < s->in->n_items; i++) {
        const char *a = in_block(s->in->items[i], family) ? baseline_answer(s, i, row->name) : NULL;
        score[i] = NAN;
        if (!a) continue;
        char *x = NULL;
        score[i] = eval_check(s->in->items[i], a, &x);
        free(x);
        row->n_items++;
        row->correct += score[i] == 1.0;
        if (row->answer && strcmp(row->answer, a) != 0) uniform = 0;
        if (!row->answer) row->answer = a;
    }
    if (!uniform) row->answer = NULL;
    row->accuracy = row->n_items ? (double)row->correct / row->n_items : 0.0;
    eval_wilson(row->correct, row->n_items, &row->ci_lo, &row->ci_hi);
    const Paired pd = pair(s, family, score, m0);
    row->diff = pd.diff, row->b = pd.b, row->c = pd.c, row->p = pd.p, row->n_units = pd.n_units;
}

static int has_name(const EvalBaselineRow *rows, int n, const char *name) {
    for (int k = 0; k < n; k++)
        if (strcmp(rows[k].name, name) == 0) return 1;
    return 0;
}

int eval_summary_baselines(const EvalSummary *s, const char *family, EvalBaselineRow *rows, int cap) {
    static const char *const fixed[] = {"mode", "first-option", "always-1"};
    int n = 0;
    for (int f = 0; f < 3 && n < cap; f++)
        for (int i = 0; i < s->in->n_items; i++)
            if (in_block(s->in->items[i], family) && baseline_answer(s, i, fixed[f])) {
                memset(&rows[n], 0, sizeof rows[n]);
                snprintf(rows[n].name, sizeof rows[n].name, "%s", fixed[f]);
                n++;
                break;
            }
    for (int i = 0; i < s->in->n_items; i++) {
        const EvalItem *it = s->in->items[i];
        for (int k = 0; in_block(it, family) && k < it->n_baselines && n < cap; k++)
            if (!has_name(rows, n, it->baseline_names[k])) {
                memset(&rows[n], 0, sizeof rows[n]);
                snprintf(rows[n].name, sizeof rows[n].name, "%s", it->baseline_names[k]);
                n++;
            }
    }
    double *m0 = means(s, 0, family), *score = malloc((size_t)(s->in->n_items ? s->in->n_items : 1) * sizeof *score);
    for (int k = 0; k < n; k++) {
        if (m0 && score) baseline_row(s, family, m0, score, &rows[k]);
    }
    free(m0);
    free(score);
    return n;
}
