// branch_options.c — the branching decoder's parameters: defaults, names, checks, the alphabet.
#include "runtime/branch/branch_options.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/errmsg.h"

EmxBranchParams emx_branch_params_default(void) {
    return (EmxBranchParams){.entropy_bits = 2.0, .k = 5, .max_forks = 1, .gate = 0.1, .lookahead = 0,
                             .rule = EMX_BRANCH_RULE_PROB, .cue = NULL, .alphabet = NULL, .n_alphabet = 0};
}

static const char *const rule_names[] = {"prob", "margin", "entropy"};

const char *emx_branch_rule_name(int rule) { return rule >= 0 && rule < 3 ? rule_names[rule] : "?"; }

int emx_branch_rule_parse(const char *name, int *rule) {
    for (int i = 0; i < 3; i++)
        if (strcmp(name, rule_names[i]) == 0) {
            *rule = i;
            return 0;
        }
    return -1;
}

int emx_branch_params_check(const EmxBranchParams *p, char *err, size_t errlen) {
    if (!(p->entropy_bits >= 0) || !isfinite(p->entropy_bits))
        return emx_seterr(err, errlen, "--branch-entropy: %g is not a finite number >= 0", p->entropy_bits);
    if (p->k < 2 || p->k > EMX_BRANCH_MAX_K)
        return emx_seterr(err, errlen, "--branch-k: %d is out of range [2, %d] (the branches one batched pass holds)",
                          p->k, EMX_BRANCH_MAX_K);
    if (p->max_forks < 0) return emx_seterr(err, errlen, "--branch-forks: %d is negative", p->max_forks);
    if (!(p->gate > 0 && p->gate <= 1))
        return emx_seterr(err, errlen, "--branch-gate: %g is out of range (0, 1]", p->gate);
    if (p->lookahead < 0) return emx_seterr(err, errlen, "--branch-lookahead: %d is negative", p->lookahead);
    if (p->rule < 0 || p->rule > EMX_BRANCH_RULE_ENTROPY)
        return emx_seterr(err, errlen, "--branch-rule: %d is not prob, margin or entropy", p->rule);
    if (p->cue && !*p->cue) return emx_seterr(err, errlen, "--answer-cue: the cue is empty");
    return p->n_alphabet ? emx_branch_alphabet_check(p->alphabet, p->n_alphabet, err, errlen) : 0;
}

int emx_branch_alphabet_check(char *const *alphabet, int n, char *err, size_t errlen) {
    if (n < 1) return emx_seterr(err, errlen, "--answer-alphabet: no entries");
    if (n > EMX_BRANCH_MAX_ALPHABET)
        return emx_seterr(err, errlen, "--answer-alphabet: %d entries (at most %d)", n, EMX_BRANCH_MAX_ALPHABET);
    for (int i = 0; i < n; i++) {
        const size_t len = strlen(alphabet[i]);
        if (len == 0) return emx_seterr(err, errlen, "--answer-alphabet: entry %d is empty", i + 1);
        if (len > EMX_BRANCH_MAX_ENTRY_BYTES)
            return emx_seterr(err, errlen, "--answer-alphabet: entry %d is %zu bytes (at most %d)", i + 1, len,
                              EMX_BRANCH_MAX_ENTRY_BYTES);
        for (int j = 0; j < i; j++)
            if (strcmp(alphabet[i], alphabet[j]) == 0)
                return emx_seterr(err, errlen, "--answer-alphabet: '%s' is given twice (entries %d and %d)",
                                  alphabet[i], j + 1, i + 1);
    }
    return 0;
}

int emx_branch_alphabet_parse(const char *csv, char ***alphabet, int *n, char *err, size_t errlen) {
    *alphabet = NULL;
    *n = 0;
    int count = 1;
    for (const char *c = csv; *c; c++) count += *c == ',';
    if (count > EMX_BRANCH_MAX_ALPHABET)
        return emx_seterr(err, errlen, "--answer-alphabet: %d entries (at most %d)", count, EMX_BRANCH_MAX_ALPHABET);
    char **list = calloc((size_t)count, sizeof *list);
    if (!list) return emx_seterr(err, errlen, "--answer-alphabet: out of memory");
    const char *at = csv;
    for (int i = 0; i < count; i++) {
        const char *end = strchr(at, ',');
        const size_t len = end ? (size_t)(end - at) : strlen(at);
        if (!(list[i] = malloc(len + 1))) {
            emx_branch_alphabet_free(list, count);
            return emx_seterr(err, errlen, "--answer-alphabet: out of memory");
        }
        memcpy(list[i], at, len);
        list[i][len] = 0;
        at = end ? end + 1 : at + len;
    }
    if (emx_branch_alphabet_check(list, count, err, errlen) != 0) {
        emx_branch_alphabet_free(list, count);
        return -1;
    }
    *alphabet = list;
    *n = count;
    return 0;
}

void emx_branch_alphabet_free(char **alphabet, int n) {
    if (!alphabet) return;
    for (int i = 0; i < n; i++) free(alphabet[i]);
    free(alphabet);
}
