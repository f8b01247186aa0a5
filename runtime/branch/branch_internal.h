// branch_internal.h — what the branching decoder's files share (not an API): a track of tokens
// with their numbers, the decoder's state, the analysis of a row of logits (branch_rules.c), the
// answer commitment (branch_commit.c).
#ifndef ENTROPIX_BRANCH_INTERNAL_H
#define ENTROPIX_BRANCH_INTERNAL_H

#include <stdio.h>

#include "runtime/branch/branch_decode.h"

// A line of tokens and, for each, the numbers of the logits it was chosen from.
typedef struct {
    int *tok;
    double *logp, *ent, *mar;  // ln p(token), entropy (bits), p(top1) - p(top2)
    int len, cap;
    int end;                   // 0: still growing; else enum emx_branch_path_end
} Track;

// One row of logits, analysed: the greedy token and what the fork test and the rules read.
typedef struct {
    int argmax;          // the lowest id among the largest logits (greedy's choice); -1: none
    double top;          // its logit
    double lse;          // ln Σ e^logit (ln p(i) = logit_i - lse)
    double h_bits;       // entropy, bits
    double p_top;        // p(argmax)
    double margin;       // p(top1) - p(top2)
} RowStats;

// A path that competes in a decision: its track, where its first token sits, and (answer
// commitment) how to put its rows back into the cache.
typedef struct {
    Track *tr;
    int at;              // position of tr->tok[0]
    int prefix_gen;      // generated tokens before it (its text starts with them)
    int fork, branch;
    void *rows;          // fork branches: KV rows of its fed tokens (emx_state_kv_rows_read), or NULL
    int n_rows;          // rows of its tokens that are fed (in the cache, or in `rows`)
    // filled by the decision
    double logp_sum, prob, score;
    int answer;
    double *answer_q, *answer_p;  // [n_alphabet] (branch_commit_score allocates them)
    double answer_margin;
    int use_space;       // the cue is joined with a space (its text is non-empty and ends in no whitespace)
} Cand;

typedef struct {
    int *ids;
    int n;
} Tokens;

typedef struct {
    EmxState *st;
    const EmxTokenizer *tk;
    const EmxBranchParams *bp;
    const EmxGenerateOptions *opt;
    EmxBranchResult *res;
    int V, ctx, n_prompt, budget;
    const int *prompt;
    int *seq;                 // [ctx + 1] prompt, then every committed token
    Track main;               // the committed generated tokens
    float *logits;            // [V] the current step's logits (a copy)
    float *blogits;           // [max(k, alphabet rows)][V] a branch pass's logits
    Track *forks;             // [k] the current fork's branches
    // answer commitment (n_alphabet > 0)
    Tokens cue_sp, cue_nosp;  // the cue after a space, and right after whitespace (or nothing)
    Tokens *entries;          // [n_alphabet] each entry's tokens, after the cue
    int max_entry;            // the longest entry, tokens
    unsigned char *ends;      // [V] 1: a token that cannot continue an entry (its end)
    // output
    EmxDecoder dec;
    char *buf;                // [emx_decoder_max_out]
    size_t cap;
    char *text;               // the output's text so far
    size_t text_len, text_cap;
    double choose_s;          // host time spent analysing rows and deciding
    const EmxBranchHooks *hooks; // NULL: none
    int halted;               // a hook said stop: the run unwinds as on an error, and returns 0
    int n_valid;              // main-line tokens fed (their rows in the cache after the prompt's)
    char *err;
    size_t errlen;
} Dec;

// branch_rules.c
// The row's greedy token, entropy, p(top) and margin in one call (two passes over the row).
void branch_row_stats(const float *logits, int n, RowStats *rs);
// The fork's candidates from a row: at most k ids with p >= gate * p(top), in rank order
// (higher logit first, lower id on ties; the argmax first). Returns their count (>= 1 when the
// row has an argmax).
int branch_candidates(const float *logits, int n, const RowStats *rs, int k, double gate, int *ids);
// Decides among cands[0..n) by bp->rule (answers already scored when with_answers): fills each
// one's logp_sum, prob, score; returns the chosen index, and *answer (the output's answer,
// -1 without answers) and *answer_score.
int branch_decide(const EmxBranchParams *bp, Cand *cands, int n, int with_answers, int *answer,
                  double *answer_score);

// branch_commit.c
// Tokenises the cue and the entries and marks the tokens that end an entry. 0, or -1 (d->err).
int branch_commit_prepare(Dec *d);
// Positions a commitment needs after the generated text: the cue, then the longest entry.
int branch_commit_room(const Dec *d);
// Scores every alphabet entry after each candidate + cue (answer_q, answer_p: malloc'd, freed by
// the caller; answer, answer_margin). Candidates' rows: a fork's come from c->rows, the main line's are in the
// cache. Reuses the state's branch tails. 0, or -1 (d->err).
int branch_commit_score(Dec *d, Cand *cands, int n);
// The cue the candidate's text takes.
const Tokens *branch_cue(const Dec *d, const Cand *c);
void branch_commit_free(Dec *d);

// branch_track.c (used by branch_decode.c and branch_commit.c)
int branch_track_push(Track *t, int id, double logp, double ent, double mar);
int branch_fail_forward(Dec *d, int pos);
// 1 when the run must stop (a hook said so, now or before); the caller returns -1 (unwinding).
int branch_halted(Dec *d);

#endif
