// branch_commit.c — answer commitment (docs/branch.md "Answer commitment"): a finished path is
// continued, instead of with its stop token, by the cue and then each alphabet entry,
// teacher-forced; an entry's probability is the product of its tokens' probabilities and of the
// probability that it ends there. The entries of one path run as branches of one batched pass
// per token over the path + cue.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/errmsg.h"
#include "runtime/branch/branch_internal.h"

// text's tokens when it follows other text: after one space when `space` (an SPM vocabulary
// with a dummy prefix makes that space itself), else as it is. No BOS, no special tokens.
static int encode_piece(Dec *d, const char *text, int space, Tokens *out, const char *what) {
    const int spm_prefix = (emx_tokenizer_data(d->tk)->flags & EMX_TOKF_ADD_SPACE_PREFIX) != 0;
    const size_t len = strlen(text);
    char *s = malloc(len + 2);
    if (!s) return emx_seterr(d->err, d->errlen, "branch: out of memory");
    const int lead = space && !spm_prefix;
    s[0] = ' ';
    memcpy(s + lead, text, len + 1);
    size_t n = 0;
    int rc = emx_encode(d->tk, s, len + (size_t)lead, 0, &out->ids, &n, d->err, d->errlen);
    free(s);
    if (rc != 0) return -1;
    out->n = (int)n;
    if (n == 0) return emx_seterr(d->err, d->errlen, "%s '%s' has no tokens in this vocabulary", what, text);
    return 0;
}

// Whitespace at the end of text (or no text): the next piece is joined without a space.
static int ends_in_space(const char *text) {
    const size_t n = strlen(text);
    return n == 0 || text[n - 1] == ' ' || text[n - 1] == '\n' || text[n - 1] == '\t' || text[n - 1] == '\r';
}

int branch_commit_prepare(Dec *d) {
    const EmxBranchParams *bp = d->bp;
    const char *cue = bp->cue ? bp->cue : EMX_BRANCH_DEFAULT_CUE;
    if (encode_piece(d, cue, 1, &d->cue_sp, "--answer-cue") != 0 || encode_piece(d, cue, 0, &d->cue_nosp, "--answer-cue") != 0)
        return -1;
    d->entries = calloc((size_t)bp->n_alphabet, sizeof *d->entries);
    d->ends = malloc((size_t)d->V);
    if (!d->entries || !d->ends) return emx_seterr(d->err, d->errlen, "branch: out of memory");
    d->max_entry = 0;
    for (int a = 0; a < bp->n_alphabet; a++) {
        if (encode_piece(d, bp->alphabet[a], !ends_in_space(cue), &d->entries[a], "--answer-alphabet: entry") != 0)
            return -1;
        if (d->entries[a].n > EMX_BRANCH_MAX_ENTRY_TOKENS)
            return emx_seterr(d->err, d->errlen, "--answer-alphabet: entry '%s' is %d tokens (at most %d)",
                              bp->alphabet[a], d->entries[a].n, EMX_BRANCH_MAX_ENTRY_TOKENS);
        if (d->entries[a].n > d->max_entry) d->max_entry = d->entries[a].n;
    }
    // An entry ends where the next token cannot glue more letters or digits onto it: a control
    // token, an empty piece, or a piece whose first byte is ASCII but no letter or digit (a
    // space, punctuation, a newline). Pieces that start with a letter, a digit or a non-ASCII
    // byte would continue the word.
    for (int i = 0; i < d->V; i++) {
        size_t n = 0;
        const unsigned char *p = (const unsigned char *)emx_token_bytes_ref(d->tk, i, &n);
        const int word = p && n > 0 && (p[0] >= 0x80 || (p[0] >= '0' && p[0] <= '9') || (p[0] >= 'a' && p[0] <= 'z') ||
                                        (p[0] >= 'A' && p[0] <= 'Z'));
        d->ends[i] = emx_is_control(d->tk, i) || emx_is_stop(d->tk, i) || !word;
    }
    return 0;
}

int branch_commit_room(const Dec *d) {
    const int cue = d->cue_sp.n > d->cue_nosp.n ? d->cue_sp.n : d->cue_nosp.n;
    return cue + d->max_entry;
}

const Tokens *branch_cue(const Dec *d, const Cand *c) { return c->use_space ? &d->cue_sp : &d->cue_nosp; }

// Σ p over the tokens that end an entry, from a row whose log-sum-exp is lse.
static double end_mass(const Dec *d, const float *row, double lse) {
    double s = 0;
    for (int i = 0; i < d->V; i++)
        if (d->ends[i]) s += exp((double)row[i] - lse);
    return s;
}

// Entries [a0, a0 + n) after the cue: p(first token) from the cue's logits l0, then one batched
// branch pass per token over prefix positions 0..P-1 (every entry a row; a shorter entry's row is
// fed its last token again, and not read). q[a] and the margins' sums msum[a] are filled.
static int score_group(Dec *d, int P, const float *l0, const RowStats *r0, int a0, int n, double *q, double *msum) {
    int steps = 0, toks[EMX_BRANCH_MAX_K];
    for (int r = 0; r < n; r++) {
        const Tokens *e = &d->entries[a0 + r];
        q[a0 + r] = exp((double)l0[e->ids[0]] - r0->lse);
        msum[a0 + r] = r0->margin;
        if (e->n > steps) steps = e->n;
    }
    for (int j = 0; j < steps; j++) {
        for (int r = 0; r < n; r++) {
            const Tokens *e = &d->entries[a0 + r];
            toks[r] = e->ids[j < e->n ? j : e->n - 1];
        }
        if (branch_halted(d)) return -1;
        if (emx_forward_branches(d->st, toks, n, P, j, d->blogits) != 0) return branch_fail_forward(d, P + j);
        d->res->n_answer_passes++;
        for (int r = 0; r < n; r++) {
            const Tokens *e = &d->entries[a0 + r];
            if (j >= e->n) continue;
            const float *row = d->blogits + (size_t)r * d->V;
            RowStats rs;
            branch_row_stats(row, d->V, &rs);
            if (j + 1 < e->n) {
                q[a0 + r] *= exp((double)row[e->ids[j + 1]] - rs.lse);
                msum[a0 + r] += rs.margin;
            } else {
                q[a0 + r] *= end_mass(d, row, rs.lse);
            }
        }
    }
    return 0;
}

// One candidate: its rows back in the cache, its unfed last token and the cue fed, every entry
// scored.
static int score_one(Dec *d, Cand *c) {
    const Track *t = c->tr;
    const int fed_end = c->at + c->n_rows;
    if (branch_halted(d)) return -1;
    if (c->rows && c->n_rows && emx_state_kv_rows_write(d->st, c->at, c->n_rows, c->rows) != 0)
        return branch_fail_forward(d, c->at);
    const Tokens *cue = branch_cue(d, c);
    int *feed = malloc((size_t)(cue->n + 1) * sizeof *feed), n_feed = 0;
    if (!feed) return emx_seterr(d->err, d->errlen, "branch: out of memory");
    if (t->len > 0 && t->end != EMX_BRANCH_END_STOP) feed[n_feed++] = t->tok[t->len - 1];
    memcpy(feed + n_feed, cue->ids, (size_t)cue->n * sizeof *feed);
    n_feed += cue->n;
    const float *l = emx_forward(d->st, feed, n_feed, fed_end);
    free(feed);
    if (!l) return branch_fail_forward(d, fed_end);
    memcpy(d->logits, l, (size_t)d->V * sizeof(float));
    RowStats r0;
    branch_row_stats(d->logits, d->V, &r0);
    const int n_alpha = d->bp->n_alphabet;
    double msum[EMX_BRANCH_MAX_ALPHABET];
    c->answer_q = malloc((size_t)n_alpha * sizeof(double));
    c->answer_p = malloc((size_t)n_alpha * sizeof(double));
    if (!c->answer_q || !c->answer_p) return emx_seterr(d->err, d->errlen, "branch: out of memory");
    for (int a0 = 0; a0 < n_alpha; a0 += EMX_BRANCH_MAX_K) {
        const int n = n_alpha - a0 < EMX_BRANCH_MAX_K ? n_alpha - a0 : EMX_BRANCH_MAX_K;
        if (score_group(d, fed_end + n_feed, d->logits, &r0, a0, n, c->answer_q, msum) != 0) return -1;
    }
    double z = 0;
    c->answer = 0;
    for (int a = 0; a < n_alpha; a++) {
        z += c->answer_q[a];
        if (c->answer_q[a] > c->answer_q[c->answer]) c->answer = a;  // ties: the earlier entry
    }
    for (int a = 0; a < n_alpha; a++) c->answer_p[a] = z > 0 ? c->answer_q[a] / z : 0.0;
    c->answer_margin = msum[c->answer] / d->entries[c->answer].n;
    return 0;
}

int branch_commit_score(Dec *d, Cand *cands, int n) {
    const int rows = d->bp->n_alphabet < EMX_BRANCH_MAX_K ? d->bp->n_alphabet : EMX_BRANCH_MAX_K;
    // (after the fork's rows were saved: growing the tails does not keep them)
    if (emx_state_branches_reserve(d->st, rows, d->max_entry, d->err, d->errlen) != 0) return -1;
    for (int i = 0; i < n; i++)
        if (score_one(d, &cands[i]) != 0) return -1;
    return 0;
}

void branch_commit_free(Dec *d) {
    free(d->cue_sp.ids);
    free(d->cue_nosp.ids);
    if (d->entries)
        for (int a = 0; a < d->bp->n_alphabet; a++) free(d->entries[a].ids);
    free(d->entries);
    free(d->ends);
}
