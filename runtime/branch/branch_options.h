// branch_options.h — the branching decoder's parameters (runtime/branch/branch_decode.h), their
// defaults, names and checks, and the answer alphabet as a list. docs/branch.md says what each
// one means.
#ifndef ENTROPIX_BRANCH_OPTIONS_H
#define ENTROPIX_BRANCH_OPTIONS_H

#include <stddef.h>

// Branches one fork holds: one batched pass runs them all. The CUDA backend's batched matvec
// takes at most 16 rows (kernels/matvec.h EMX_MATVEC_MAX_BATCH); the CPU's batch holds
// min(ctx, 256), so 16 fits both.
#define EMX_BRANCH_MAX_K 16
// Answer alphabet: entries, bytes of one entry, tokens of one entry (an entry's teacher-forced
// pass runs one step per token).
#define EMX_BRANCH_MAX_ALPHABET 256
#define EMX_BRANCH_MAX_ENTRY_BYTES 64
#define EMX_BRANCH_MAX_ENTRY_TOKENS 16
// The margin rule without an answer alphabet reads the branch's last this many tokens.
#define EMX_BRANCH_MARGIN_WINDOW 8

// How the branches of a fork are compared.
typedef enum {
    EMX_BRANCH_RULE_PROB = 0,  // the branch's own probability (with an alphabet: the answer's
                               // expected probability over the branches)
    EMX_BRANCH_RULE_MARGIN,    // mean p(top1) - p(top2) over the answer's tokens (CoT-decoding)
    EMX_BRANCH_RULE_ENTROPY,   // lowest mean logits entropy over the branch's tokens
} EmxBranchRule;

typedef struct {
    double entropy_bits;  // τ: a step forks when its logits entropy exceeds this (bits) ...
                          // ... and its top token has p < 0.5
    int k;                // at most k branches per fork, 2..EMX_BRANCH_MAX_K
    int max_forks;        // B: forks per generation, >= 0 (0: greedy, with commitment if any)
    double gate;          // a token is a candidate when p >= gate * p(top), in (0, 1]
    int lookahead;        // L: tokens per branch before the rule decides; 0: until every branch
                          // has ended (a stop token, the budget or the context)
    int rule;             // EmxBranchRule
    const char *cue;      // the answer cue; NULL: EMX_BRANCH_DEFAULT_CUE
    char **alphabet;      // the answer alphabet; n_alphabet 0: no answer commitment
    int n_alphabet;
} EmxBranchParams;

#define EMX_BRANCH_DEFAULT_CUE "The answer is"

// The defaults: τ 2.0 bits, k 5, B 1, gate 0.1, L 0 (to the end), rule prob, no alphabet.
EmxBranchParams emx_branch_params_default(void);

// "prob", "margin", "entropy"; "?" for anything else.
const char *emx_branch_rule_name(int rule);
// Parses a rule's name. 0, or -1 for anything else.
int emx_branch_rule_parse(const char *name, int *rule);

// Every field in its range, each message naming the ./run flag ("--branch-k: 20 is out of
// range [2, 16]"). Returns 0, or -1 with err.
int emx_branch_params_check(const EmxBranchParams *p, char *err, size_t errlen);

// Splits "A,B,C" into *alphabet (malloc'd strings, freed by emx_branch_alphabet_free). An entry
// is taken verbatim (spaces included); an empty entry, a repeated one, more than
// EMX_BRANCH_MAX_ALPHABET entries or one over EMX_BRANCH_MAX_ENTRY_BYTES bytes is an error
// naming it. Returns 0, or -1 with err.
int emx_branch_alphabet_parse(const char *csv, char ***alphabet, int *n, char *err, size_t errlen);
// The same checks on a list given as an array (a task file's field). 0, or -1 with err.
int emx_branch_alphabet_check(char *const *alphabet, int n, char *err, size_t errlen);
void emx_branch_alphabet_free(char **alphabet, int n);

#endif
