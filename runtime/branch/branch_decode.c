// branch_decode.c — the branching decoder's loop (branch_decode.h; docs/branch.md): greedy
// steps, forks run as batched branch passes over the shared prefix, the decision, the output.
#include "runtime/branch/branch_decode.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/errmsg.h"
#include "runtime/branch/branch_internal.h"

// ---------------------------------------------------------------------------------------------
// Tracks

static void track_free(Track *t) {
    free(t->tok), free(t->logp), free(t->ent), free(t->mar);
    memset(t, 0, sizeof *t);
}

// Token id chosen from a row analysed as rs onto t.
static int push_chosen(Dec *d, Track *t, int id, const float *row, const RowStats *rs) {
    if (branch_track_push(t, id, (double)row[id] - rs->lse, rs->h_bits, rs->margin) != 0)
        return emx_seterr(d->err, d->errlen, "branch: out of memory");
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Output: the text as it becomes final, to opt->out and to the result

static int out_append(Dec *d, const char *s, size_t k) {
    if (!k) return 0;
    if (d->text_len + k + 1 > d->text_cap) {
        size_t cap = d->text_cap ? 2 * d->text_cap : 256;
        while (cap < d->text_len + k + 1) cap *= 2;
        char *t = realloc(d->text, cap);
        if (!t) return emx_seterr(d->err, d->errlen, "branch: out of memory");
        d->text = t, d->text_cap = cap;
    }
    memcpy(d->text + d->text_len, s, k);
    d->text_len += k;
    d->text[d->text_len] = 0;
    const EmxBranchHooks *h = d->hooks;
    if (h && h->on_text) {
        if (!d->halted && h->on_text(h->user, s, k) != 0) d->halted = 1;
        return d->halted ? -1 : 0;
    }
    FILE *f = d->opt->out;
    if (f && (fwrite(s, 1, k, f) != k || fflush(f) != 0 || ferror(f)))
        return emx_seterr(d->err, d->errlen, "writing the generated text to %s: %s",
                          d->opt->out_name ? d->opt->out_name : "the output", strerror(errno ? errno : EIO));
    return 0;
}

// A token of the output: its text printed (a stop token prints nothing), its id kept.
static int emit(Dec *d, int id) {
    int *t = realloc(d->res->tokens, (size_t)(d->res->n_tokens + 1) * sizeof *t);
    if (!t) return emx_seterr(d->err, d->errlen, "branch: out of memory");
    d->res->tokens = t;
    t[d->res->n_tokens++] = id;
    if (emx_is_stop(d->tk, id)) return 0;
    return out_append(d, d->buf, emx_decoder_push(&d->dec, id, d->buf, d->cap));
}

// The text of seq's generated tokens [0, prefix_gen), then t's (a stop token left out), then
// extra[0..n_extra): decoded after the prompt, as the output is.
static char *path_text(const Dec *d, int prefix_gen, const Track *t, const int *extra, int n_extra) {
    EmxDecoder dec;
    emx_decoder_init(&dec, d->tk, !d->opt->print_control);
    size_t len = 0, cap = 64;
    char *s = malloc(cap);
    const int n = d->n_prompt + prefix_gen, nt = t ? t->len : 0;
    for (int i = 0; s && i < n + nt + n_extra; i++) {
        const int id = i < n ? d->seq[i] : i < n + nt ? t->tok[i - n] : extra[i - n - nt];
        if (i >= n && emx_is_stop(d->tk, id)) continue;
        const size_t k = emx_decoder_push(&dec, id, d->buf, d->cap);
        if (i < d->n_prompt || !k) continue;
        if (len + k + 1 > cap) {
            while (len + k + 1 > cap) cap *= 2;
            char *g = realloc(s, cap);
            if (!g) free(s);
            s = g;
            if (!s) break;
        }
        memcpy(s + len, d->buf, k);
        len += k;
    }
    if (s) {
        const size_t k = emx_decoder_flush(&dec, d->buf, d->cap);
        char *g = realloc(s, len + k + 1);
        if (!g) free(s);
        s = g;
        if (s) memcpy(s + len, d->buf, k), s[len + k] = 0;
    }
    return s;
}

// ---------------------------------------------------------------------------------------------
// Paths

// Records t as a path; c: its decision's numbers (NULL: it was no candidate). extra: the cue
// and answer tokens its text ends with.
static int add_path(Dec *d, const Track *t, int fork, int branch, int prefix_gen, const Cand *c, int output,
                    const int *extra, int n_extra) {
    EmxBranchResult *r = d->res;
    EmxBranchPath *ps = realloc(r->paths, (size_t)(r->n_paths + 1) * sizeof *ps);
    if (!ps) return emx_seterr(d->err, d->errlen, "branch: out of memory");
    r->paths = ps;
    EmxBranchPath *p = &ps[r->n_paths++];
    memset(p, 0, sizeof *p);
    const size_t n = (size_t)(t->len ? t->len : 1), na = (size_t)d->bp->n_alphabet;
    *p = (EmxBranchPath){.fork = fork, .branch = branch, .start = prefix_gen, .end = t->end, .output = output,
                         .n_tokens = t->len, .prob = c ? c->prob : 0.0, .score = c ? c->score : NAN, .answer = -1, .answer_margin = NAN};
    p->tokens = malloc(n * sizeof *p->tokens);
    p->logp = malloc(n * sizeof(double)), p->entropy = malloc(n * sizeof(double)), p->margin = malloc(n * sizeof(double));
    p->text = path_text(d, prefix_gen, t, extra, n_extra);
    if (!p->tokens || !p->logp || !p->entropy || !p->margin || !p->text)
        return emx_seterr(d->err, d->errlen, "branch: out of memory");
    if (t->len > 0) {  // (an empty main line, -n 0, has no arrays)
        memcpy(p->tokens, t->tok, (size_t)t->len * sizeof *p->tokens);
        memcpy(p->logp, t->logp, (size_t)t->len * sizeof(double));
        memcpy(p->entropy, t->ent, (size_t)t->len * sizeof(double));
        memcpy(p->margin, t->mar, (size_t)t->len * sizeof(double));
    }
    if (c && na && c->answer >= 0) {
        p->answer = c->answer, p->answer_margin = c->answer_margin;
        p->answer_q = malloc(na * sizeof(double)), p->answer_p = malloc(na * sizeof(double));
        if (!p->answer_q || !p->answer_p) return emx_seterr(d->err, d->errlen, "branch: out of memory");
        memcpy(p->answer_q, c->answer_q, na * sizeof(double));
        memcpy(p->answer_p, c->answer_p, na * sizeof(double));
    }
    return 0;
}

// ---------------------------------------------------------------------------------------------
// The final decision: among a final fork's ended branches, or the main line alone

// The cue and entry `answer`'s tokens into buf (its room: branch_commit_room). Returns the count.
static int answer_tokens(const Dec *d, const Cand *c, int answer, int *buf) {
    const Tokens *cue = branch_cue(d, c), *e = &d->entries[answer];
    memcpy(buf, cue->ids, (size_t)cue->n * sizeof *buf);
    memcpy(buf + cue->n, e->ids, (size_t)e->n * sizeof *buf);
    return cue->n + e->n;
}

// Saves each fork candidate's fed rows (its tail copied into the cache, then read out): the
// answers' passes reuse the tails. 0, or -1.
static int save_rows(Dec *d, Cand *cands, int n) {
    for (int i = 0; i < n; i++) {
        Cand *c = &cands[i];
        if (c->fork < 0 || c->n_rows == 0) continue;
        if (!(c->rows = malloc(emx_state_kv_rows_bytes(d->st, c->n_rows))))
            return emx_seterr(d->err, d->errlen, "branch: out of memory");
        if (emx_branch_commit(d->st, c->branch, c->n_rows, c->at) != 0 ||
            emx_state_kv_rows_read(d->st, c->at, c->n_rows, c->rows) != 0)
            return branch_fail_forward(d, c->at);
    }
    return 0;
}

// The rule's choice among the scored candidates, printed, every candidate recorded as a path.
static int decide_and_print(Dec *d, Cand *cands, int n) {
    const int commit = d->bp->n_alphabet > 0;
    int rc = 0, answer = -1;
    const double t0 = emx_now_s();
    const int w = branch_decide(d->bp, cands, n, commit, &answer, &d->res->answer_score);
    d->choose_s += emx_now_s() - t0;
    d->res->answer = answer;
    const Track *wt = cands[w].tr;
    if (cands[w].fork >= 0)  // a fork's winner is printed now; the main line was printed as it went
        for (int j = 0; j < wt->len - (commit && wt->end == EMX_BRANCH_END_STOP) && rc == 0; j++)
            rc = emit(d, wt->tok[j]);
    else if (commit && wt->end == EMX_BRANCH_END_STOP)
        d->res->n_tokens--;  // the stop token is replaced by the cue
    int *extra = malloc((size_t)(2 * (commit ? branch_commit_room(d) : 0) + 1) * sizeof *extra), n_extra = 0;
    if (!extra) return emx_seterr(d->err, d->errlen, "branch: out of memory");
    int *own = extra + (commit ? branch_commit_room(d) : 0);
    if (commit) n_extra = answer_tokens(d, &cands[w], answer, extra);
    for (int j = 0; j < n_extra && rc == 0; j++) rc = emit(d, extra[j]);
    for (int i = 0; i < n && rc == 0; i++) {  // a path's text ends with its own answer, the output's with the output's
        const int n_own = !commit ? 0 : i == w ? n_extra : answer_tokens(d, &cands[i], cands[i].answer, own);
        rc = add_path(d, cands[i].tr, cands[i].fork, cands[i].branch, cands[i].prefix_gen, &cands[i], i == w,
                      i == w ? extra : own, n_own);
    }
    free(extra);
    return rc;
}

// The final decision among cands: with commitment each one's answers scored first; then the
// rule's choice printed and every candidate recorded as a path.
static int finish(Dec *d, Cand *cands, int n) {
    const int commit = d->bp->n_alphabet > 0;
    // Complete answers decide: a path the budget cut short has the probability of a prefix, which
    // a complete one (ended by its stop token) cannot match, so it competes only when none stopped.
    int n_stopped = 0;
    for (int i = 0; i < n; i++) n_stopped += cands[i].tr->end == EMX_BRANCH_END_STOP;
    if (n_stopped > 0 && n_stopped < n) {
        int m = 0;
        for (int i = 0; i < n; i++) {
            if (cands[i].tr->end == EMX_BRANCH_END_STOP) cands[m++] = cands[i];
            else if (add_path(d, cands[i].tr, cands[i].fork, cands[i].branch, cands[i].prefix_gen, NULL, 0, NULL, 0) != 0)
                return -1;
        }
        n = m;
    }
    for (int i = 0; i < n; i++) {  // the cue follows a space unless the text ends in whitespace
        char *text = path_text(d, cands[i].prefix_gen, cands[i].tr, NULL, 0);
        if (!text) return emx_seterr(d->err, d->errlen, "branch: out of memory");
        const size_t k = strlen(text);
        cands[i].use_space = k > 0 && !strchr(" \n\t\r", text[k - 1]);
        free(text);
    }
    int rc = commit && (save_rows(d, cands, n) != 0 || branch_commit_score(d, cands, n) != 0);
    for (int i = 0; i < n; i++) free(cands[i].rows), cands[i].rows = NULL;
    if (rc == 0) rc = decide_and_print(d, cands, n);
    for (int i = 0; i < n; i++) free(cands[i].answer_q), free(cands[i].answer_p);
    return rc;
}

// ---------------------------------------------------------------------------------------------
// A fork

// The fork's winner w, still growing, becomes the main line: its rows committed into the cache,
// its tokens printed, its last token fed (d->logits: the next step's). *pos moves past it.
static int commit_winner(Dec *d, int w, int *pos) {
    const Track *t = &d->forks[w];
    if (t->len > 1 && emx_branch_commit(d->st, w, t->len - 1, *pos) != 0) return branch_fail_forward(d, *pos);
    for (int j = 0; j < t->len; j++) {
        d->seq[*pos + j] = t->tok[j];
        if (branch_track_push(&d->main, t->tok[j], t->logp[j], t->ent[j], t->mar[j]) != 0)
            return emx_seterr(d->err, d->errlen, "branch: out of memory");
        if (emit(d, t->tok[j]) != 0) return -1;
    }
    const int last = *pos + t->len - 1;
    if (branch_halted(d)) return -1;
    const float *l = emx_forward(d->st, &t->tok[t->len - 1], 1, last);
    if (!l) return branch_fail_forward(d, last);
    memcpy(d->logits, l, (size_t)d->V * sizeof(float));
    d->n_valid = d->main.len;
    *pos = last + 1;
    return 0;
}

// The end of a branch after its latest token: a stop token, or the room (R tokens) used up.
static int track_end(const Dec *d, const Track *t, int room) {
    return emx_is_stop(d->tk, t->tok[t->len - 1]) ? EMX_BRANCH_END_STOP : t->len == room ? EMX_BRANCH_END_BUDGET : 0;
}

// Every branch grows greedily, one batched pass per step, until each has ended or has `steps`
// tokens. 0, or -1.
static int grow(Dec *d, int n, int pos, int steps, int room) {
    for (int s = 0; s + 1 < steps; s++) {
        int toks[EMX_BRANCH_MAX_K], alive = 0;
        for (int b = 0; b < n; b++) {  // an ended branch still takes its row: rows are independent
            toks[b] = d->forks[b].tok[d->forks[b].len - 1];
            alive += d->forks[b].end == 0;
        }
        if (!alive) break;
        if (branch_halted(d)) return -1;
        if (emx_forward_branches(d->st, toks, n, pos, s, d->blogits) != 0) return branch_fail_forward(d, pos + s);
        d->res->n_branch_passes++;
        const double t0 = emx_now_s();
        for (int b = 0; b < n; b++) {
            Track *t = &d->forks[b];
            if (t->end) continue;
            const float *row = d->blogits + (size_t)b * d->V;
            RowStats rs;
            branch_row_stats(row, d->V, &rs);
            if (rs.argmax < 0)
                return emx_seterr(d->err, d->errlen, "no token to choose at position %d of branch %d (the logits are "
                                  "NaN or -inf)", pos + s + 1, b);
            if (push_chosen(d, t, rs.argmax, row, &rs) != 0) return -1;
            t->end = track_end(d, t, room);
        }
        d->choose_s += emx_now_s() - t0;
    }
    return 0;
}

// Forks at pos (its row d->logits, analysed as rs) into ids[0..n). Returns 0 when the fork was
// decided after L tokens and its winner goes on as the main line (*pos moved on), 1 when the
// fork is final (cands[0..*n_final): its ended branches), -1 on error.
static int run_fork(Dec *d, const RowStats *rs, const int *ids, int n, int *pos, Cand *cands, int *n_final) {
    const int fork = d->res->n_forks++, n_gen = d->main.len;
    d->res->n_branches += n;
    const int room = d->budget - n_gen < d->ctx - *pos + 1 ? d->budget - n_gen : d->ctx - *pos + 1;
    const int steps = d->bp->lookahead > 0 && d->bp->lookahead < room ? d->bp->lookahead : room;
    if (steps > 1 && emx_state_branches_reserve(d->st, n, steps - 1, d->err, d->errlen) != 0) return -1;
    for (int b = 0; b < n; b++) {
        Track *t = &d->forks[b];
        t->len = 0;
        if (push_chosen(d, t, ids[b], d->logits, rs) != 0) return -1;
        t->end = track_end(d, t, room);
    }
    if (grow(d, n, *pos, steps, room) != 0) return -1;
    Cand all[EMX_BRANCH_MAX_K];
    int running = 0;
    for (int b = 0; b < n; b++) {
        all[b] = (Cand){.tr = &d->forks[b], .at = *pos, .prefix_gen = n_gen, .fork = fork, .branch = b,
                        .n_rows = d->forks[b].len - 1, .answer = -1};
        running += d->forks[b].end == 0;
    }
    int w = -1, unused;
    double unused_score;
    if (running) w = branch_decide(d->bp, all, n, 0, &unused, &unused_score);  // cut after L tokens
    // final: every branch has ended, or the rule chose one that has (then those still growing are
    // cut and the ended ones decide, as at the end of a final fork)
    const int final = w < 0 || d->forks[w].end != 0;
    for (int b = 0; b < n; b++) {  // the paths out of the running: losers, or cut short by L
        Track *t = &d->forks[b];
        if (final ? t->end != 0 : b == w) continue;
        if (!t->end) t->end = EMX_BRANCH_END_CUT;
        if (add_path(d, t, fork, b, n_gen, &all[b], 0, NULL, 0) != 0) return -1;
    }
    if (!final) return commit_winner(d, w, pos);
    *n_final = 0;
    for (int b = 0; b < n; b++)
        if (d->forks[b].end != EMX_BRANCH_END_CUT) cands[(*n_final)++] = all[b];
    return 1;
}

// ---------------------------------------------------------------------------------------------
// The loop

// The greedy loop with its forks, from the prompt's logits in d->logits, then the final decision.
static int decode_loop(Dec *d) {
    Cand cands[EMX_BRANCH_MAX_K];
    int n_final = 0, pos = d->n_prompt, final_fork = 0;
    for (;;) {
        if (branch_halted(d)) return -1;
        if (d->main.len >= d->budget) {  // -n 0
            d->main.end = EMX_BRANCH_END_BUDGET;
            break;
        }
        double t0 = emx_now_s();
        RowStats rs;
        branch_row_stats(d->logits, d->V, &rs);
        if (rs.argmax < 0)
            return emx_seterr(d->err, d->errlen, "no token to choose at position %d (the logits are NaN or -inf)", pos);
        int ids[EMX_BRANCH_MAX_K], n = 0;
        if (d->res->n_forks < d->bp->max_forks && rs.h_bits > d->bp->entropy_bits && rs.p_top < 0.5)
            n = branch_candidates(d->logits, d->V, &rs, d->bp->k, d->bp->gate, ids);
        d->choose_s += emx_now_s() - t0;
        if (n >= 2) {
            const int rc = run_fork(d, &rs, ids, n, &pos, cands, &n_final);
            if (rc < 0) return -1;
            if (rc == 1) {
                final_fork = 1;
                break;
            }
            continue;  // the winner's last token was fed: the next step's logits are there
        }
        const int id = rs.argmax;
        d->seq[pos] = id;
        if (push_chosen(d, &d->main, id, d->logits, &rs) != 0 || emit(d, id) != 0) return -1;
        if (emx_is_stop(d->tk, id)) {
            d->main.end = EMX_BRANCH_END_STOP;
            break;
        }
        if (d->main.len >= d->budget) {  // the budget leaves room to feed every token but the last
            d->main.end = EMX_BRANCH_END_BUDGET;
            break;
        }
        if (branch_halted(d)) return -1;
        const float *l = emx_forward(d->st, &id, 1, pos);
        if (!l) return branch_fail_forward(d, pos);
        memcpy(d->logits, l, (size_t)d->V * sizeof(float));
        d->n_valid = d->main.len;
        pos++;
    }
    if (!final_fork) {
        cands[0] = (Cand){.tr = &d->main, .at = d->n_prompt, .fork = -1, .n_rows = d->main.len > 1 ? d->main.len - 1 : 0,
                          .answer = -1};
        n_final = 1;
    }
    return finish(d, cands, n_final);
}

// The most tokens the context leaves the output before its commitment (with an alphabet: less
// the cue's and the longest entry's tokens). -1 (d->err) when not even an empty answer fits.
static int budget_cap(Dec *d) {
    const int room = d->bp->n_alphabet ? branch_commit_room(d) : 0;
    const int cap = d->bp->n_alphabet ? d->ctx - d->n_prompt - room : d->ctx - d->n_prompt + 1;
    if (cap < 0)
        return emx_seterr(d->err, d->errlen, "no room for the answer: the prompt is %d tokens, the cue and the longest "
                          "entry need %d more, the context holds %d (-c)", d->n_prompt, room, d->ctx);
    return cap;
}

// The options emx_branch_decode reads, the prompt against the context, and the budget: -n, at
// most what the context holds (with commitment, less the cue's and the longest entry's tokens).
static int setup_budget(Dec *d, const EmxGenerateOptions *opt) {
    if (opt->on_token || opt->ids_out || opt->ignore_stop)
        return emx_seterr(d->err, d->errlen, "branch: on_token, ids_out and ignore_stop are not supported");
    if (d->n_prompt < 1) return emx_seterr(d->err, d->errlen, "generate: empty prompt (it needs at least a BOS token)");
    if (opt->n_cached < 0 || opt->n_cached >= d->n_prompt)
        return emx_seterr(d->err, d->errlen, "generate: n_cached %d is outside 0..%d (prompt %d tokens)", opt->n_cached,
                          d->n_prompt - 1, d->n_prompt);
    if (d->n_prompt > d->ctx) return emx_seterr(d->err, d->errlen, "prompt is %d tokens, context is %d", d->n_prompt, d->ctx);
    const int cap = budget_cap(d);
    if (cap < 0) return -1;
    d->budget = opt->n_predict >= 0 && opt->n_predict < cap ? opt->n_predict : cap;
    return 0;
}

static int dec_init(Dec *d) {
    const int rows = d->bp->k > d->bp->n_alphabet ? d->bp->k : d->bp->n_alphabet;
    const size_t V = (size_t)d->V;
    d->seq = malloc((size_t)(d->ctx + 1) * sizeof *d->seq);
    d->logits = malloc(V * sizeof(float));
    d->blogits = malloc((size_t)(rows < EMX_BRANCH_MAX_K ? rows : EMX_BRANCH_MAX_K) * V * sizeof(float));
    d->forks = calloc((size_t)d->bp->k, sizeof *d->forks);
    d->cap = emx_decoder_max_out(d->tk);
    d->buf = malloc(d->cap);
    if (!d->seq || !d->logits || !d->blogits || !d->forks || !d->buf)
        return emx_seterr(d->err, d->errlen, "branch: out of memory");
    emx_decoder_init(&d->dec, d->tk, !d->opt->print_control);
    return d->bp->n_alphabet ? branch_commit_prepare(d) : 0;
}

static void dec_free(Dec *d) {
    if (d->bp->n_alphabet) branch_commit_free(d);
    if (d->forks)
        for (int b = 0; b < d->bp->k; b++) track_free(&d->forks[b]);
    track_free(&d->main);
    free(d->forks), free(d->seq), free(d->logits), free(d->blogits), free(d->buf), free(d->text);
}

// The prompt through the decoder (its state is the sequence's; echoed in raw mode) and its
// uncached part through the model. 0, or -1.
static int run_prompt(Dec *d) {
    for (int i = 0; i < d->n_prompt; i++) {
        d->seq[i] = d->prompt[i];
        const size_t k = emx_decoder_push(&d->dec, d->prompt[i], d->buf, d->cap);
        if (d->opt->echo_prompt && k && d->opt->out && !(d->hooks && d->hooks->on_text) &&
            (fwrite(d->buf, 1, k, d->opt->out) != k || fflush(d->opt->out) != 0))
            return emx_seterr(d->err, d->errlen, "writing the generated text to %s: %s",
                              d->opt->out_name ? d->opt->out_name : "the output", strerror(errno ? errno : EIO));
    }
    const int from = d->opt->n_cached;
    const float *l = emx_forward(d->st, d->prompt + from, d->n_prompt - from, from);
    if (!l)
        return emx_seterr(d->err, d->errlen, "forward pass failed on the prompt (%d tokens, context %d): %s",
                          d->n_prompt - from, d->ctx, emx_state_error(d->st));
    memcpy(d->logits, l, (size_t)d->V * sizeof(float));
    return 0;
}

int emx_branch_decode(EmxState *st, const EmxTokenizer *tk, const int *prompt, int n_prompt,
                      const EmxBranchParams *bp, const EmxGenerateOptions *opt, EmxBranchResult *res,
                      EmxGenerateStats *stats, char *err, size_t errlen) {
    return emx_branch_decode_hooked(st, tk, prompt, n_prompt, bp, opt, NULL, res, stats, err, errlen);
}

int emx_branch_check(const EmxTokenizer *tk, const EmxBranchParams *bp, int n_prompt, int ctx, int *room, char *err,
                     size_t errlen) {
    *room = 0;
    if (emx_branch_params_check(bp, err, errlen) != 0) return -1;
    if (!bp->n_alphabet) return 0;
    Dec d = {.tk = tk, .bp = bp, .V = emx_tokenizer_n_vocab(tk), .ctx = ctx, .n_prompt = n_prompt, .err = err,
             .errlen = errlen};
    int rc = branch_commit_prepare(&d);
    if (rc == 0) *room = branch_commit_room(&d);
    if (rc == 0) rc = budget_cap(&d) < 0 ? -1 : 0;
    branch_commit_free(&d);
    return rc;
}

int emx_branch_decode_hooked(EmxState *st, const EmxTokenizer *tk, const int *prompt, int n_prompt,
                             const EmxBranchParams *bp, const EmxGenerateOptions *opt, const EmxBranchHooks *hooks,
                             EmxBranchResult *res, EmxGenerateStats *stats, char *err, size_t errlen) {
    memset(res, 0, sizeof *res);
    memset(stats, 0, sizeof *stats);
    res->answer = -1;
    res->answer_score = NAN;
    if (emx_branch_params_check(bp, err, errlen) != 0 || emx_pool_require(st, "the branching decoder", err, errlen) != 0)
        return -1;
    Dec d = {.st = st, .tk = tk, .bp = bp, .opt = opt, .res = res, .V = emx_tokenizer_n_vocab(tk),
             .ctx = emx_state_ctx(st), .n_prompt = n_prompt, .prompt = prompt, .hooks = hooks, .err = err,
             .errlen = errlen};
    stats->n_prompt = n_prompt - opt->n_cached;
    int rc = dec_init(&d) != 0 || setup_budget(&d, opt) != 0 ? -1 : 0;
    errno = 0;
    const double t0 = emx_now_s();
    if (rc == 0) rc = run_prompt(&d);
    const double t1 = emx_now_s();
    stats->prefill_s = t1 - t0;
    if (rc == 0) rc = decode_loop(&d);
    if (rc == 0) rc = out_append(&d, d.buf, emx_decoder_flush(&d.dec, d.buf, d.cap));
    if (rc != 0 && d.halted) rc = 0, res->interrupted = 1;  // a hook's stop: what was made is the result
    stats->decode_s = emx_now_s() - t1;
    stats->sample_s = d.choose_s;
    stats->n_generated = res->n_tokens;
    // how the output ended: its stop token, else the budget (-n's, or the context's room)
    stats->stop = d.budget == opt->n_predict ? EMX_STOP_N_PREDICT : EMX_STOP_CONTEXT;
    for (int i = 0; i < res->n_paths; i++)
        if (res->paths[i].output && res->paths[i].end == EMX_BRANCH_END_STOP) stats->stop = EMX_STOP_TOKEN;
    if (res->interrupted) stats->stop = 0;
    res->stop = stats->stop;
    res->n_valid = d.n_valid;
    res->text = d.text ? d.text : calloc(1, 1);
    d.text = NULL;
    dec_free(&d);
    if (rc != 0 || !res->text) {
        if (rc == 0) emx_seterr(err, errlen, "branch: out of memory");
        emx_branch_result_free(res);
        return -1;
    }
    return 0;
}

void emx_branch_result_free(EmxBranchResult *res) {
    for (int i = 0; i < res->n_paths; i++) {
        EmxBranchPath *p = &res->paths[i];
        free(p->tokens), free(p->logp), free(p->entropy), free(p->margin), free(p->text), free(p->answer_q),
            free(p->answer_p);
    }
    free(res->paths), free(res->tokens), free(res->text);
    memset(res, 0, sizeof *res);
    res->answer = -1;
}

void emx_branch_print_stats(FILE *f, const EmxBranchParams *bp, const EmxBranchResult *res) {
    fprintf(f, "branch: %d fork%s (at most %d), %d branches, %d branch passes, %d answer passes", res->n_forks,
            res->n_forks == 1 ? "" : "s", bp->max_forks, res->n_branches, res->n_branch_passes, res->n_answer_passes);
    for (int i = 0; i < res->n_paths; i++) {
        const EmxBranchPath *p = &res->paths[i];
        if (!p->output) continue;
        if (p->fork >= 0 && bp->rule != EMX_BRANCH_RULE_PROB)
            fprintf(f, "; output: fork %d branch %d (%s %.3f, prob %.3f)", p->fork, p->branch,
                    emx_branch_rule_name(bp->rule), p->score, p->prob);
        else if (p->fork >= 0)
            fprintf(f, "; output: fork %d branch %d (prob %.3f)", p->fork, p->branch, p->prob);
        else
            fprintf(f, "; output: the main line");
    }
    if (res->answer >= 0) fprintf(f, "; answer '%s' (%.3f)", bp->alphabet[res->answer], res->answer_score);
    fprintf(f, "\n");
}
