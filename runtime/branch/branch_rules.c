// branch_rules.c — the branching decoder's arithmetic: a row of logits analysed, a fork's
// candidates, and the rules that decide among branches (docs/branch.md "Choosing a branch").
#include <math.h>
#include <string.h>

#include "runtime/branch/branch_internal.h"
#include "sampler/metrics.h"
#include "sampler/sample.h"

void branch_row_stats(const float *logits, int n, RowStats *rs) {
    EmxMetrics m;
    memset(&m, 0, sizeof m);
    emx_logits_metrics(logits, n, &m);  // the entropy --metrics logs, and ln Σ e^logit
    rs->h_bits = m.logits_entropy_bits;
    rs->lse = m.logits_lse_nats;
    rs->argmax = emx_sample_argmax(logits, n);  // greedy's own choice: the same token, ties and all
    if (rs->argmax < 0) {
        rs->top = rs->p_top = rs->margin = NAN;
        return;
    }
    rs->top = logits[rs->argmax];
    double second = -INFINITY;
    for (int i = 0; i < n; i++)
        if (i != rs->argmax && logits[i] > second) second = logits[i];  // NaN never compares greater
    rs->p_top = exp(rs->top - rs->lse);
    rs->margin = rs->p_top - (second == -INFINITY ? 0.0 : exp(second - rs->lse));
}

// a ranks before b: a higher logit, or the same logit and a lower id (sample.c's order).
static int ranks_before(const float *logits, int a, int b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
}

int branch_candidates(const float *logits, int n, const RowStats *rs, int k, double gate, int *ids) {
    if (rs->argmax < 0) return 0;
    // p_i >= gate * p_top  <=>  e^(l_i - l_top) >= gate; a cheap bound first, the exact test after
    const double bound = rs->top + log(gate) - 1e-6;
    int m = 0;
    for (int i = 0; i < n; i++) {
        const float l = logits[i];
        if (!(l >= bound) || !(exp((double)l - rs->top) >= gate)) continue;
        if (m == k && !ranks_before(logits, i, ids[k - 1])) continue;
        int at = m < k ? m++ : k - 1;  // insertion into the sorted top k
        while (at > 0 && ranks_before(logits, i, ids[at - 1])) {
            ids[at] = ids[at - 1];
            at--;
        }
        ids[at] = i;
    }
    return m;
}

// Tokens [from, to) of the track's numbers x, averaged; NAN when empty.
static double mean_of(const double *x, int from, int to) {
    if (to <= from) return NAN;
    double s = 0;
    for (int i = from; i < to; i++) s += x[i];
    return s / (to - from);
}

// The rule's value of one candidate (prob is set by the caller).
static double rule_score(int rule, const Cand *c, int with_answers) {
    const Track *t = c->tr;
    const int stopped = t->end == EMX_BRANCH_END_STOP;
    if (rule == EMX_BRANCH_RULE_PROB) return c->prob;
    if (rule == EMX_BRANCH_RULE_MARGIN) {
        if (with_answers) return c->answer_margin;
        // the branch's last tokens before its end, the fork token and a stop token left out
        const int last = t->len - stopped, first = last - EMX_BRANCH_MARGIN_WINDOW > 1 ? last - EMX_BRANCH_MARGIN_WINDOW : 1;
        return last > 1 ? mean_of(t->mar, first, last) : t->mar[0];
    }
    // entropy: every token after the fork token, a stop token included (choosing to stop is a choice)
    return t->len > 1 ? mean_of(t->ent, 1, t->len) : t->ent[0];
}

// The entry with the largest Σ_c P(c)·p(a | c, cue); ties: the earlier entry.
static int expected_answer(const Cand *cands, int n, int n_alpha, double *score) {
    int best = 0;
    double best_s = -1;
    for (int a = 0; a < n_alpha; a++) {
        double s = 0;
        for (int i = 0; i < n; i++) s += cands[i].prob * cands[i].answer_p[a];
        if (s > best_s) best = a, best_s = s;
    }
    *score = best_s;
    return best;
}

int branch_decide(const EmxBranchParams *bp, Cand *cands, int n, int with_answers, int *answer,
                  double *answer_score) {
    double max_lp = -INFINITY;
    for (int i = 0; i < n; i++) {
        const Track *t = cands[i].tr;
        // under commitment the stop token is replaced by the cue: not the path's token
        const int len = t->len - (with_answers && t->end == EMX_BRANCH_END_STOP);
        double s = 0;
        for (int j = 0; j < len; j++) s += t->logp[j];
        cands[i].logp_sum = s;
        if (s > max_lp) max_lp = s;
    }
    double z = 0;
    for (int i = 0; i < n; i++) z += exp(cands[i].logp_sum - max_lp);
    for (int i = 0; i < n; i++) {
        cands[i].prob = exp(cands[i].logp_sum - max_lp) / z;
        cands[i].score = rule_score(bp->rule, &cands[i], with_answers);
    }
    *answer = -1;
    *answer_score = NAN;
    int best = 0;
    if (bp->rule == EMX_BRANCH_RULE_PROB && with_answers) {
        const int win = expected_answer(cands, n, bp->n_alphabet, answer_score);
        *answer = win;
        // the branch that gives the winner most, among those that committed to it (else all)
        int any = 0;
        for (int i = 0; i < n; i++) any |= cands[i].answer == win;
        double best_v = -1;
        for (int i = 0; i < n; i++) {
            const double v = cands[i].prob * cands[i].answer_p[win];
            if ((!any || cands[i].answer == win) && v > best_v) best = i, best_v = v;
        }
        return best;
    }
    const int lower = bp->rule == EMX_BRANCH_RULE_ENTROPY;
    for (int i = 1; i < n; i++)  // strict: the earlier (more probable first token) wins ties
        if (lower ? cands[i].score < cands[best].score : cands[i].score > cands[best].score) best = i;
    if (with_answers) {
        *answer = cands[best].answer;
        *answer_score = cands[best].answer_p[*answer];
    }
    return best;
}
