// request_branch.c — the branching decoder's keys of the "entropix" extension (request_branch.h).
#include "tools/server/request_branch.h"
#include "tools/server/request_json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cli/cli_args.h"
#include "runtime/cli/run_branch.h"

enum { BK_INT, BK_NUMBER, BK_STRING, BK_ALPHABET };

// The keys, under tools/eval/config.c's names (tau, k, forks, gate, lookahead, rule, cue,
// alphabet) and the brief ones' long forms, and the ./run flag each stands for.
static const struct { const char *key, *flag, *param; int kind; } branch_keys[] = {
    {"tau", "--branch-entropy", "entropix.tau", BK_NUMBER},
    {"entropy", "--branch-entropy", "entropix.entropy", BK_NUMBER},
    {"k", "--branch-k", "entropix.k", BK_INT},
    {"forks", "--branch-forks", "entropix.forks", BK_INT},
    {"gate", "--branch-gate", "entropix.gate", BK_NUMBER},
    {"lookahead", "--branch-lookahead", "entropix.lookahead", BK_INT},
    {"rule", "--branch-rule", "entropix.rule", BK_STRING},
    {"cue", "--answer-cue", "entropix.cue", BK_STRING},
    {"answer_cue", "--answer-cue", "entropix.answer_cue", BK_STRING},
    {"alphabet", "--answer-alphabet", "entropix.alphabet", BK_ALPHABET},
    {"answer_alphabet", "--answer-alphabet", "entropix.answer_alphabet", BK_ALPHABET},
};
#define N_BRANCH_KEYS ((int)(sizeof branch_keys / sizeof branch_keys[0]))
#define LOOKAHEAD 5  // branch_keys[LOOKAHEAD]: the agents' key too

int srv_branch_key(const char *key) {
    for (int k = 0; k < N_BRANCH_KEYS; k++)
        if (strcmp(key, branch_keys[k].key) == 0) return 1;
    return 0;
}

// Key k's value as ./run's flag value in buf (a string: itself). NULL with e set: wrong type.
static const char *flag_value(int k, const cJSON *v, char *buf, size_t cap, SrvError *e) {
    const char *param = branch_keys[k].param;
    if (branch_keys[k].kind == BK_STRING) {
        if (!cJSON_IsString(v)) return srv_fail(e, 400, param, NULL, "%s must be a string, not %s", param, srv_type_name(v)), NULL;
        return v->valuestring;
    }
    if (!cJSON_IsNumber(v)) return srv_fail(e, 400, param, NULL, "%s must be a number, not %s", param, srv_type_name(v)), NULL;
    if (!isfinite(v->valuedouble))  // 1e309 parses to infinity
        return srv_fail(e, 400, param, NULL, "%s is too large: it must be a finite number", param), NULL;
    if (branch_keys[k].kind == BK_INT) {  // the range is ./run's parser's to check
        if (v->valuedouble != floor(v->valuedouble) || fabs(v->valuedouble) > 9007199254740992.0)
            return srv_fail(e, 400, param, NULL, "%s must be an integer, not a fraction or a huge number", param), NULL;
        snprintf(buf, cap, "%.0f", v->valuedouble);
    } else {
        snprintf(buf, cap, "%.17g", v->valuedouble);
    }
    return buf;
}

// The alphabet: an array of 1 .. SRV_MAX_ALPHABET strings, each checked as ./run checks
// --answer-alphabet's entries. Into r->branch (owned).
static int parse_alphabet(int k, const cJSON *v, SrvRequest *r, SrvError *e) {
    const char *param = branch_keys[k].param;
    const int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (n < 0) return srv_fail(e, 400, param, NULL, "%s must be an array of strings, not %s", param, srv_type_name(v));
    if (n < 1 || n > SRV_MAX_ALPHABET)
        return srv_fail(e, 400, param, NULL, "%s has %d entries; this server allows 1 to %d", param, n, SRV_MAX_ALPHABET);
    if (!(r->branch.alphabet = calloc((size_t)n, sizeof(char *)))) return srv_fail(e, 500, param, NULL, "out of memory");
    const cJSON *it;
    cJSON_ArrayForEach(it, v) {
        if (!cJSON_IsString(it))
            return srv_fail(e, 400, param, NULL, "%s[%d] must be a string, not %s", param, r->branch.n_alphabet, srv_type_name(it));
        if (!(r->branch.alphabet[r->branch.n_alphabet] = strdup(it->valuestring)))
            return srv_fail(e, 500, param, NULL, "out of memory");
        r->branch.n_alphabet++;
    }
    char why[256];
    if (emx_branch_alphabet_check(r->branch.alphabet, n, why, sizeof why) != 0)
        return srv_fail(e, 400, param, NULL, "%s: %s", param, why);
    return 0;
}

// Does x hold a key of the decoder that selects it (any but lookahead)? Its index, or -1.
static int selecting_key(const cJSON *x) {
    for (int k = 0; k < N_BRANCH_KEYS; k++)
        if (k != LOOKAHEAD && srv_field(x, branch_keys[k].key)) return k;
    return -1;
}

// Each key parsed alone by ./run's parser (so an error names its key) into argv; the alphabet
// into r->branch. 0, or -1 with e.
static int parse_keys(const cJSON *x, SrvRequest *r, char **argv, int *argc, char (*vals)[64], SrvError *e) {
    for (int k = 0; k < N_BRANCH_KEYS; k++) {
        const cJSON *v = srv_field(x, branch_keys[k].key);
        if (!v) continue;
        const char *param = branch_keys[k].param;
        for (int j = 0; j < k; j++)  // tau and entropy, cue and answer_cue, ...: one of each
            if (srv_field(x, branch_keys[j].key) && strcmp(branch_keys[j].flag, branch_keys[k].flag) == 0)
                return srv_fail(e, 400, param, NULL, "%s and %s are the same option: give one", branch_keys[j].param, param);
        if (branch_keys[k].kind == BK_ALPHABET) {
            if (parse_alphabet(k, v, r, e) != 0) return -1;
            continue;
        }
        const char *val = flag_value(k, v, vals[k], sizeof vals[k], e);
        if (!val) return -1;
        if (branch_keys[k].kind == BK_STRING && strlen(val) > SRV_MAX_CUE)
            return srv_fail(e, 400, param, NULL, "%s is %zu bytes; this server allows at most %d", param, strlen(val),
                            SRV_MAX_CUE);
        char *one[] = {"server", "MODEL", "--sampler", "branch", (char *)branch_keys[k].flag, (char *)val, NULL};
        EmxCliArgs a;
        char why[256];
        if (emx_cli_parse(6, one, &a, why, sizeof why) != 0) return srv_fail(e, 400, param, NULL, "%s: %s", param, why);
        argv[(*argc)++] = (char *)branch_keys[k].flag, argv[(*argc)++] = (char *)val;
    }
    return 0;
}

int srv_parse_branch(const cJSON *x, SrvRequest *r, SrvError *e) {
    const int first = selecting_key(x);
    if (first >= 0 && r->sampler >= 0 && r->sampler != EMX_SAMPLER_BRANCH)
        return srv_fail(e, 400, branch_keys[first].param, NULL,
                        "%s is a branching decoder option: it needs sampler branch, not %s", branch_keys[first].param,
                        emx_sampler_kind_name(r->sampler));
    if (first >= 0) r->sampler = EMX_SAMPLER_BRANCH;
    if (r->sampler != EMX_SAMPLER_BRANCH) return 0;  // (lookahead alone is the agent pool's)
    // The decoder makes no single token stream: nothing for per-token entries to follow.
    if (r->logprobs)
        return srv_fail(e, 400, "logprobs", NULL, "logprobs is not available with entropix.sampler branch (its branches "
                        "are no single token stream)");
    if (r->metrics)
        return srv_fail(e, 400, "entropix.metrics", NULL, "entropix.metrics is not available with entropix.sampler "
                        "branch (its branches are no single token stream)");
    char vals[N_BRANCH_KEYS][64];
    char *argv[4 + 2 * N_BRANCH_KEYS + 1] = {"server", "MODEL", "--sampler", "branch"};
    int argc = 4;
    if (parse_keys(x, r, argv, &argc, vals, e) != 0) return -1;
    EmxCliArgs a;
    char why[256];
    argv[argc] = NULL;
    if (emx_cli_parse(argc, argv, &a, why, sizeof why) != 0) return srv_fail(e, 400, "entropix", NULL, "entropix: %s", why);
    if (a.branch_forks > SRV_MAX_FORKS)
        return srv_fail(e, 400, srv_field(x, "forks") ? "entropix.forks" : "entropix", NULL,
                        "entropix.forks is %d; this server allows at most %d", a.branch_forks, SRV_MAX_FORKS);
    EmxBranchParams bp;
    if (emx_run_branch_params(&a, &bp, why, sizeof why) != 0)  // (no --answer-alphabet here: nothing to free)
        return srv_fail(e, 400, "entropix", NULL, "entropix: %s", why);
    bp.alphabet = r->branch.alphabet, bp.n_alphabet = r->branch.n_alphabet;
    if (bp.cue && !(bp.cue = strdup(bp.cue))) return srv_fail(e, 500, "entropix.cue", NULL, "out of memory");
    r->branch = bp;  // the alphabet and the cue owned by r from here on
    if (emx_branch_params_check(&r->branch, why, sizeof why) != 0)
        return srv_fail(e, 400, "entropix", NULL, "entropix: %s", why);
    return 0;
}
