// config.c — sampler configurations as ./run flags (config.h).
#include "tools/eval/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/errmsg.h"
#include "runtime/cli/run_setup.h"

// key -> ./run flag. Values with commas (agent_configs, devices) are written with ';' in a config,
// since ',' separates the keys.
static const struct { const char *key, *flag; } key_flags[] = {
    {"temp", "--temp"}, {"top_k", "--top-k"}, {"top_p", "--top-p"}, {"min_p", "--min-p"},
    {"profile", "--profile"}, {"profile_set", "--profile-set"}, {"metric_layers", "--metric-layers"},
    {"n", "--agents"}, {"agents", "--agents"}, {"agent_configs", "--agent-configs"}, {"lookahead", "--lookahead"},
    {"workers", "--workers"}, {"devices", "--devices"}, {"check_every", "--check-every"},
    {"critic_window", "--critic-window"}, {"window", "--critic-window"}, {"critic_margin", "--critic-margin"},
    {"margin", "--critic-margin"}, {"critic_model", "--critic-model"}, {"rollback", "--rollback"},
    {"max_rollbacks", "--max-rollbacks"}, {"critic", NULL}, {"no_think", "--no-think"},
    {"tau", "--branch-entropy"}, {"k", "--branch-k"}, {"forks", "--branch-forks"}, {"gate", "--branch-gate"},
    {"rule", "--branch-rule"}, {"alphabet", "--answer-alphabet"}, {"cue", "--answer-cue"}, {"commit", NULL},
};
#define N_KEYS ((int)(sizeof key_flags / sizeof key_flags[0]))
#define KEY_LIST "temp, top_k, top_p, min_p, profile, profile_set, metric_layers, n, agent_configs, lookahead, " \
                 "workers, devices, critic=off, check_every, window, margin, critic_model, rollback, max_rollbacks, no_think=1, " \
                 "tau, k, forks, gate, rule, alphabet, cue, commit=1"

static int push(EvalConfig *c, const char *s) {
    if (c->argc >= EVAL_CONFIG_MAX_ARGS - 1) return -1;
    if (!(c->argv[c->argc] = strdup(s))) return -1;
    c->argc++;
    return 0;
}

// One "key=value" appended to c->argv as ./run flags. Returns 0 or -1 with the reason in why.
static int add_key(EvalConfig *c, const char *key, const char *val, char *why, size_t whylen) {
    int k = 0;
    while (k < N_KEYS && strcmp(key_flags[k].key, key) != 0) k++;
    if (k == N_KEYS) return emx_seterr(why, whylen, "unknown key (" KEY_LIST ")");
    if (!*val) return emx_seterr(why, whylen, "empty value");
    if (strcmp(key, "critic") == 0) {  // critic=off / on: ./run's --check-every 0 / 5 (its default
                                       // without --critic-model is no critic; a later check_every wins)
        if (strcmp(val, "off") == 0) return push(c, "--check-every") || push(c, "0") ? emx_seterr(why, whylen, "too many keys") : 0;
        if (strcmp(val, "on") == 0) return push(c, "--check-every") || push(c, "5") ? emx_seterr(why, whylen, "too many keys") : 0;
        return emx_seterr(why, whylen, "'%s': expected on or off", val);
    }
    if (strcmp(key, "commit") == 0) {  // branch: the answer alphabet and cue of each item
        if (strcmp(val, "1") == 0) return c->commit_item = 1, 0;
        if (strcmp(val, "0") == 0) return 0;
        return emx_seterr(why, whylen, "'%s': expected 1 or 0", val);
    }
    if (strcmp(key, "no_think") == 0) {
        if (strcmp(val, "1") == 0) return push(c, "--no-think") ? emx_seterr(why, whylen, "too many keys") : 0;
        if (strcmp(val, "0") == 0) return 0;
        return emx_seterr(why, whylen, "'%s': expected 1 or 0", val);
    }
    char *v = strdup(val);
    if (!v) return emx_seterr(why, whylen, "out of memory");
    for (char *p = v; *p; p++)
        if (*p == ';') *p = ',';
    // the branching decoder's lookahead is its own flag (the agents' --lookahead is another)
    const char *flag = strcmp(key, "lookahead") == 0 && strcmp(c->argv[3], "branch") == 0 ? "--branch-lookahead"
                                                                                          : key_flags[k].flag;
    int rc = push(c, flag) || push(c, v);
    free(v);
    return rc ? emx_seterr(why, whylen, "too many keys") : 0;
}

// Parses c->argv[0..argc) with ./run's parser. Returns 0 or -1 with its message in why.
static int parse_argv(EvalConfig *c, char *why, size_t whylen) {
    c->argv[c->argc] = NULL;
    return emx_cli_parse(c->argc, c->argv, &c->args, why, whylen) == 0 ? 0 : -1;
}

static void reset_argv(EvalConfig *c, int keep) {
    while (c->argc > keep) free(c->argv[--c->argc]);
    c->argv[c->argc] = NULL;
}

int eval_config_parse(const char *spec, const char *model_path, EvalConfig *c, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    char why[400];
    char *s = strdup(spec);
    c->spec = strdup(spec);
    if (!s || !c->spec || push(c, "eval") || push(c, model_path) || push(c, "--sampler")) {
        free(s);
        return emx_seterr(err, errlen, "config '%s': out of memory", spec);
    }
    char *colon = strchr(s, ':');
    if (colon) *colon = 0;
    int rc = push(c, s) || parse_argv(c, why, sizeof why);
    if (rc) emx_seterr(err, errlen, "config '%s': sampler '%s': %s", spec, s, why);
    // each key alone first, so an error names its key; then all together
    for (char *kv = colon ? colon + 1 : NULL, *next; !rc && kv; kv = next) {
        next = strchr(kv, ',');
        if (next) *next++ = 0;
        char *eq = strchr(kv, '=');
        if (eq) *eq = 0;
        const int before = c->argc;
        if (!eq) rc = emx_seterr(why, sizeof why, "expected key=value");
        else if (add_key(c, kv, eq + 1, why, sizeof why) == 0) {
            EvalConfig one = {.argc = 0};
            for (int i = 0; i < 4; i++) one.argv[one.argc++] = c->argv[i];
            for (int i = before; i < c->argc; i++) one.argv[one.argc++] = c->argv[i];
            one.argv[one.argc] = NULL;
            rc = emx_cli_parse(one.argc, one.argv, &one.args, why, sizeof why) != 0;
        } else rc = 1;
        if (rc) {
            reset_argv(c, before);
            emx_seterr(err, errlen, "config '%s': key '%s': %s", spec, kv, why);
        }
    }
    if (!rc && parse_argv(c, why, sizeof why) != 0) rc = emx_seterr(err, errlen, "config '%s': %s", spec, why);
    if (!rc && c->args.sampler == EMX_SAMPLER_ENTROPIX && emx_run_build_profile(&c->args, &c->profile, why, sizeof why) != 0)
        rc = emx_seterr(err, errlen, "config '%s': key 'profile': %s", spec, why);
    free(s);
    c->deterministic = c->args.sampler == EMX_SAMPLER_GREEDY || c->args.sampler == EMX_SAMPLER_BRANCH;
    if (!rc && c->commit_item && c->args.sampler != EMX_SAMPLER_BRANCH)
        rc = emx_seterr(err, errlen, "config '%s': key 'commit': only for branch", spec);
    if (rc) eval_config_free(c);
    return rc ? -1 : 0;
}

void eval_config_free(EvalConfig *c) {
    reset_argv(c, 0);
    free(c->spec);
    c->spec = NULL;
}

void eval_config_flags(const EvalConfig *c, char *out, size_t cap) {
    size_t n = 0;
    out[0] = 0;
    for (int i = 2; i < c->argc && n < cap; i++)
        n += (size_t)snprintf(out + n, cap - n, "%s%s", i > 2 ? " " : "", c->argv[i]);
}
