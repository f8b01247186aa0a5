// cli_args.c — parsing ./run's command line (flags documented in emx_cli_usage and
// docs/cli.md). Every error is one line naming the flag and the value.
#include "runtime/cli/cli_args.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "base/errmsg.h"
#include "runtime/branch/branch_options.h"
#include "runtime/forward.h"
#include "sampler/profile.h"

static const char *const sampler_names[] = {
    [EMX_SAMPLER_COMBINED] = "combined", [EMX_SAMPLER_GREEDY] = "greedy",
    [EMX_SAMPLER_TEMP] = "temp",         [EMX_SAMPLER_TOPK] = "topk",
    [EMX_SAMPLER_TOPP] = "topp",         [EMX_SAMPLER_MINP] = "minp",
    [EMX_SAMPLER_ENTROPIX] = "entropix", [EMX_SAMPLER_AGENTS] = "agents",
    [EMX_SAMPLER_BRANCH] = "branch",
};
#define N_SAMPLERS ((int)(sizeof sampler_names / sizeof sampler_names[0]))

const char *emx_sampler_kind_name(int kind) {
    return kind >= 0 && kind < N_SAMPLERS ? sampler_names[kind] : "?";
}

__attribute__((format(printf, 3, 4)))
static int fail(char *err, size_t errlen, const char *fmt, ...) {  // emx_seterr with a usage error's status
    va_list ap;
    va_start(ap, fmt);
    emx_vseterr(err, errlen, fmt, ap);
    va_end(ap);
    return 2;
}

// Whole-string integer in [lo, hi]. Returns 0 or 2 with the message.
static int parse_int(const char *flag, const char *s, long lo, long hi, int *out, char *err,
                     size_t errlen) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end != 0) return fail(err, errlen, "%s: '%s' is not an integer", flag, s);
    if (errno == ERANGE || v < lo || v > hi)
        return fail(err, errlen, "%s: %s is out of range [%ld, %ld]", flag, s, lo, hi);
    *out = (int)v;
    return 0;
}

// Whole-string finite number in [lo, hi]. A number too small for a double (1e-400) or a
// float (1e-320) is a valid value that rounds to a denormal or zero, as any rounding does:
// strtod's ERANGE on underflow is no error, only an overflow (an infinity) is.
static int parse_float(const char *flag, const char *s, double lo, double hi, float *out,
                       char *err, size_t errlen) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end != 0 || isnan(v))
        return fail(err, errlen, "%s: '%s' is not a number", flag, s);
    if (!isfinite(v) || v < lo || v > hi)
        return fail(err, errlen, "%s: %s is out of range [%g, %g]", flag, s, lo, hi);
    *out = (float)v;
    return 0;
}

// -s: an unsigned 64-bit integer, or -1 (llama.cpp's "random").
static int parse_seed(const char *s, EmxCliArgs *a, char *err, size_t errlen) {
    if (strcmp(s, "-1") == 0) {
        a->seed_given = 0;
        return 0;
    }
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || *end != 0 || s[0] == '-' || s[0] == '+')
        return fail(err, errlen, "--seed: '%s' is not a non-negative integer (or -1)", s);
    if (errno == ERANGE) return fail(err, errlen, "--seed: %s does not fit in 64 bits", s);
    a->seed = (uint64_t)v;
    a->seed_given = 1;
    return 0;
}

// Is `arg` the flag spelt `s` (short) or `l` (long)? A long flag may carry "=value".
static int is_flag(const char *arg, const char *s, const char *l, const char **inline_val) {
    *inline_val = NULL;
    if (s && strcmp(arg, s) == 0) return 1;
    if (!l) return 0;
    size_t n = strlen(l);
    if (strncmp(arg, l, n) != 0) return 0;
    if (arg[n] == 0) return 1;
    if (arg[n] == '=') {
        *inline_val = arg + n + 1;
        return 1;
    }
    return 0;
}

// The generating model judges its own text poorly (SmolLM2-135M judged every check BAD and
// rolled back until --max-rollbacks gave in: 13 tok/s instead of ~100), so the critic runs only
// when asked for: a --critic-model, or an explicit --check-every.
static void critic_default(EmxCliArgs *a) {
    if (a->sampler == EMX_SAMPLER_AGENTS && !a->check_every_given && !a->critic_model) {
        a->check_every = 0;
        a->critic_default_off = 1;
    }
}

// ./run's defaults (docs/cli.md lists them).
static EmxCliArgs cli_defaults(void) {
    return (EmxCliArgs){
        .n_predict = 256,
        .sampling = EMX_SAMPLER_PARAMS_DEFAULT,
        .sampler = EMX_SAMPLER_ENTROPIX,
        .profile = EMX_PROFILE_DEFAULT,
        .metric_layer = -1,  // EMX_ATTN_LAYER_LAST
        .chat = EMX_CHAT_AUTO,
        .n_agents = 8,
        .lookahead = 1,
        .workers = 1,
        .devices = "cpu",
        .device = "auto",
        .check_every = 5,
        .rollback = 5,
        .max_rollbacks = 3,
        .critic_window = 64,
        .logprobs = -1,
        .branch_entropy = 2.0f,  // emx_branch_params_default's values
        .branch_k = 5,
        .branch_forks = 1,
        .branch_gate = 0.1f,
        .branch_rule = EMX_BRANCH_RULE_PROB,
        .rules = EMX_LOGIT_RULES_OFF,
    };
}

// A flag without a value: sets it and returns 1, or 0 when arg is no such flag.
static int set_switch(const char *arg, EmxCliArgs *a) {
    const char *iv;
    if (is_flag(arg, "-h", "--help", &iv) && !iv) return a->help = 1;
    if (is_flag(arg, NULL, "--version", &iv) && !iv) return a->version = 1;
    if (is_flag(arg, NULL, "--verbose", &iv) && !iv) return a->verbose = 1;
    if (is_flag(arg, NULL, "--verify", &iv) && !iv) return a->verify = 1;
    if (is_flag(arg, NULL, "--mmap", &iv) && !iv) return a->mmap = 1;
    if (is_flag(arg, NULL, "--chat", &iv) && !iv) return a->chat = EMX_CHAT_ON, 1;
    if (is_flag(arg, NULL, "--raw", &iv) && !iv) return a->chat = EMX_CHAT_RAW, 1;
    if (is_flag(arg, NULL, "--no-think", &iv) && !iv) return a->no_think = 1;
    if (is_flag(arg, "-cnv", "--conversation", &iv) && !iv) return a->conversation = 1;
    if (is_flag(arg, NULL, "--ignore-eos", &iv) && !iv) return a->ignore_eos = 1;
    if (is_flag(arg, "-e", "--escape", &iv) && !iv) return a->escape = 1;
    if (is_flag(arg, NULL, "--no-escape", &iv) && !iv) return a->escape = 0, 1;
    if (is_flag(arg, NULL, "--color", &iv) && !iv) return a->color = 1;
    return 0;
}

// Flags with a value: "-x VALUE", "--long VALUE" or "--long=VALUE". set_value's cases follow
// this table's order.
static const struct {
    const char *s, *l;
} valued[] = {
    {"-p", "--prompt"},  {"-f", "--file"},   {"-n", "--n-predict"}, {"-s", "--seed"},
    {NULL, "--temp"},    {NULL, "--top-k"},  {NULL, "--top-p"},     {NULL, "--min-p"},
    {"-c", "--ctx-size"}, {"-t", "--threads"}, {NULL, "--system"},  {NULL, "--sampler"},
    {NULL, "--profile"}, {NULL, "--profile-set"}, {NULL, "--metric-layers"},
    {NULL, "--metrics"},
    {NULL, "--agents"},  {NULL, "--agent-configs"}, {NULL, "--lookahead"}, {NULL, "--workers"},
    {NULL, "--devices"}, {NULL, "--check-every"}, {NULL, "--rollback"}, {NULL, "--max-rollbacks"},
    {NULL, "--critic-window"}, {NULL, "--critic-margin"}, {NULL, "--critic-model"}, {NULL, "--log"},
    {"-dev", "--device"}, {NULL, "--report"}, {NULL, "--logprobs"}, {NULL, "--cache-type"},
    {NULL, "--branch-entropy"}, {NULL, "--branch-k"}, {NULL, "--branch-forks"}, {NULL, "--branch-gate"},
    {NULL, "--branch-lookahead"}, {NULL, "--branch-rule"}, {NULL, "--answer-cue"}, {NULL, "--answer-alphabet"},
    {NULL, "--repeat-penalty"}, {NULL, "--repeat-last-n"}, {NULL, "--presence-penalty"}, {NULL, "--frequency-penalty"},
    {"-l", "--logit-bias"}, {NULL, "--grammar"}, {NULL, "--grammar-file"}, {"-j", "--json-schema"},
    {NULL, "--json-schema-file"}, {NULL, "--gguf-cache"}, {"-m", "--model"},
};
enum { VALUED_FIRST_AGENT_FLAG = 16, VALUED_LAST_AGENT_FLAG = 27 };  // --agents .. --log
enum { VALUED_FIRST_BRANCH_FLAG = 32, VALUED_LAST_BRANCH_FLAG = 39 };  // --branch-entropy .. --answer-alphabet
enum { VALUED_FIRST_RULE_FLAG = 40 };  // --repeat-penalty .. --json-schema-file: the logit rules

// --logit-bias ID+BIAS or ID-BIAS (llama.cpp's form): BIAS in [0, 100] as OpenAI's range, or
// "inf" after '-' (the token is never chosen).
static int parse_logit_bias(const char *name, const char *val, EmxLogitRules *r, char *err, size_t errlen) {
    char *end;
    errno = 0;
    const long id = strtol(val, &end, 10);
    if (end == val || (*end != '+' && *end != '-') || errno == ERANGE || id < 0 || id > INT32_MAX)
        return fail(err, errlen, "%s: '%s' is not TOKEN_ID+BIAS or TOKEN_ID-BIAS (e.g. 15043+1, 15043-inf)", name, val);
    const int minus = *end == '-';
    float b = 0;
    if (minus && strcmp(end + 1, "inf") == 0) b = INFINITY;
    else if (parse_float(name, end + 1, 0.0, EMX_LOGIT_BIAS_MAX, &b, err, errlen)) return 2;
    if (r->n_bias == EMX_MAX_LOGIT_BIAS) return fail(err, errlen, "%s: more than %d given", name, EMX_MAX_LOGIT_BIAS);
    r->bias[r->n_bias++] = (EmxLogitBias){.id = (int)id, .bias = minus ? -b : b};
    return 0;
}

// The logit rules' flags (valued[40..48]; runtime/logit_filter.h). 0, or 2 with err set.
static int set_rule_value(int which, const char *name, const char *val, EmxCliArgs *a, char *err, size_t errlen) {
    EmxPenalties *p = &a->rules.penalties;
    switch (which) {
    case 40:
        if (parse_float(name, val, 0.0, EMX_REPEAT_PENALTY_MAX, &p->repeat_penalty, err, errlen) || !(p->repeat_penalty > 0))
            return fail(err, errlen, "%s: %s is out of range (0, %g] (1: off)", name, val, EMX_REPEAT_PENALTY_MAX);
        return 0;
    case 41: return parse_int(name, val, -1, EMX_REPEAT_LAST_N_MAX, &p->repeat_last_n, err, errlen);
    case 42:
        return parse_float(name, val, -EMX_PRESENCE_PENALTY_MAX, EMX_PRESENCE_PENALTY_MAX, &p->presence_penalty, err, errlen);
    case 43:
        return parse_float(name, val, -EMX_PRESENCE_PENALTY_MAX, EMX_PRESENCE_PENALTY_MAX, &p->frequency_penalty, err,
                           errlen);
    case 44: return parse_logit_bias(name, val, &a->rules, err, errlen);
    default: {  // a grammar: one of the four flags, once
        const char **slot[] = {&a->grammar, &a->grammar_file, &a->json_schema, &a->json_schema_file};
        for (int i = 0; i < 4; i++)
            if (*slot[i]) return fail(err, errlen, "%s: a grammar is given already (--grammar, --grammar-file, "
                                      "--json-schema, --json-schema-file: one of them)", name);
        *slot[which - 45] = val;
        return 0;
    }
    }
}

// The branching decoder's flags (valued[32..39]). 0, or 2 with err set.
static int set_branch_value(int which, const char *name, const char *val, EmxCliArgs *a, char *err, size_t errlen) {
    switch (which) {
    case 32: return parse_float(name, val, 0.0, 1000.0, &a->branch_entropy, err, errlen);
    case 33: return parse_int(name, val, 2, EMX_BRANCH_MAX_K, &a->branch_k, err, errlen);
    case 34: return parse_int(name, val, 0, 1 << 20, &a->branch_forks, err, errlen);
    case 35:
        if (parse_float(name, val, 0.0, 1.0, &a->branch_gate, err, errlen) || !(a->branch_gate > 0.0f))
            return fail(err, errlen, "%s: %s is out of range (0, 1]", name, val);
        return 0;
    case 36: return parse_int(name, val, 0, 1 << 30, &a->branch_lookahead, err, errlen);
    case 37:
        if (emx_branch_rule_parse(val, &a->branch_rule) != 0)
            return fail(err, errlen, "%s: '%s' is not prob, margin or entropy", name, val);
        return 0;
    case 38:
        if (!*val) return fail(err, errlen, "%s: the cue is empty", name);
        a->answer_cue = val;
        return 0;
    default: {
        char **list;
        int n;
        if (emx_branch_alphabet_parse(val, &list, &n, err, errlen) != 0) return 2;  // the message names the flag
        emx_branch_alphabet_free(list, n);
        a->answer_alphabet = val;
        return 0;
    }
    }
}

// Sets valued[which] (long name `name`) to val. 0, or 2 with err set.
static int set_value(int which, const char *name, const char *val, EmxCliArgs *a, char *err, size_t errlen) {
    int rc = 0;
    switch (which) {
    case 0: a->prompt = val; break;
    case 1: a->prompt_file = val; break;
    case 2:
        if ((rc = parse_int(name, val, -1, 1L << 30, &a->n_predict, err, errlen))) return rc;
        a->n_predict_given = 1;
        break;
    case 3:
        if ((rc = parse_seed(val, a, err, errlen))) return rc;
        break;
    case 4:
        if ((rc = parse_float(name, val, 0.0, 100.0, &a->sampling.temperature, err, errlen)))
            return rc;
        a->temp_given = 1;
        break;
    case 5:
        if ((rc = parse_int(name, val, 0, 1000000, &a->sampling.top_k, err, errlen))) return rc;
        a->top_k_given = 1;
        break;
    case 6:
        if ((rc = parse_float(name, val, 0.0, 1.0, &a->sampling.top_p, err, errlen))) return rc;
        a->top_p_given = 1;
        break;
    case 7:
        if ((rc = parse_float(name, val, 0.0, 1.0, &a->sampling.min_p, err, errlen))) return rc;
        a->min_p_given = 1;
        break;
    case 8:
        if ((rc = parse_int(name, val, 0, 1L << 30, &a->ctx, err, errlen))) return rc;
        break;
    case 9:
        if ((rc = parse_int(name, val, 0, 4096, &a->threads, err, errlen))) return rc;
        break;
    case 10: a->system = val; break;
    case 11: {
        int k = 0;
        while (k < N_SAMPLERS && strcmp(val, sampler_names[k]) != 0) k++;
        if (k == N_SAMPLERS)
            return fail(err, errlen,
                        "--sampler: unknown sampler '%s' (combined, greedy, temp, topk, topp, "
                        "minp, entropix, agents, branch)", val);
        a->sampler = k;
        a->sampler_given = 1;
        break;
    }
    case 12: a->profile = val; break;
    case 13:
        if (!strchr(val, '='))
            return fail(err, errlen, "--profile-set: '%s' is not KEY=VALUE", val);
        if (a->n_profile_sets == EMX_CLI_MAX_PROFILE_SETS)
            return fail(err, errlen, "--profile-set: more than %d given (use a profile file)",
                        EMX_CLI_MAX_PROFILE_SETS);
        a->profile_sets[a->n_profile_sets++] = val;
        break;
    case 14:
        if (strcmp(val, "last") == 0) a->metric_layer = -1;
        else if (strcmp(val, "all") == 0) a->metric_layer = -2;
        else if (parse_int(name, val, 0, 1000000, &a->metric_layer, err, errlen))
            return fail(err, errlen, "--metric-layers: '%s' is not last, all or a layer index", val);
        a->metric_layer_given = 1;
        break;
    case 15: a->metrics_path = val; break;
    case 16: rc = parse_int(name, val, 1, 64, &a->n_agents, err, errlen); break;
    case 17: a->agent_configs = val; break;
    case 18: rc = parse_int(name, val, 1, 16, &a->lookahead, err, errlen); break;
    case 19: rc = parse_int(name, val, 1, 64, &a->workers, err, errlen); break;
    case 20: a->devices = val; break;
    case 21: rc = parse_int(name, val, 0, 1 << 30, &a->check_every, err, errlen), a->check_every_given = 1; break;
    case 22: rc = parse_int(name, val, 1, 1 << 30, &a->rollback, err, errlen); break;
    case 23: rc = parse_int(name, val, 0, 1 << 30, &a->max_rollbacks, err, errlen); break;
    case 24: rc = parse_int(name, val, 1, 1 << 20, &a->critic_window, err, errlen); break;
    case 25: rc = parse_float(name, val, -1000.0, 1000.0, &a->critic_margin, err, errlen); break;
    case 26: a->critic_model = val; break;
    case 27: a->log_path = val; break;
    case 28: a->device = val; break;
    case 29: a->report_path = val; break;
    case 30: rc = parse_int(name, val, 0, 20, &a->logprobs, err, errlen); break;
    case 31:
        if (emx_kv_type_parse(val, &a->cache_type) != 0)
            return fail(err, errlen, "--cache-type: '%s' is not auto, f32 or f16", val);
        break;
    case 49: a->gguf_cache = val; break;
    case 50:  // llama.cpp's way to name the model; the positional MODEL is the same
        if (a->model_path) return fail(err, errlen, "--model '%s': the model is already '%s'", val, a->model_path);
        a->model_path = val;
        break;
    default:
        return which >= VALUED_FIRST_RULE_FLAG ? set_rule_value(which, name, val, a, err, errlen)
                                               : set_branch_value(which, name, val, a, err, errlen);
    }
    return rc;
}

// -cnv: turns of one chat on one stream, read from stdin; what makes one page or log of a single
// generation, or reads stdin itself, has no place in it. 0, or 2 with err set.
static int check_conversation(const EmxCliArgs *a, char *err, size_t errlen) {
    const char *no = a->chat == EMX_CHAT_RAW ? "--raw" : a->report_path ? "--report" : a->metrics_path ? "--metrics"
                   : a->logprobs >= 0 ? "--logprobs" : a->color ? "--color" : a->ignore_eos ? "--ignore-eos"
                   : a->prompt_file && !strcmp(a->prompt_file, "-") ? "-f -" : NULL;
    if (no) return fail(err, errlen, "-cnv: %s is not available in a conversation", no);
    if (a->sampler == EMX_SAMPLER_AGENTS || a->sampler == EMX_SAMPLER_BRANCH)
        return fail(err, errlen, "-cnv: --sampler %s is not available in a conversation", sampler_names[a->sampler]);
    return 0;
}

// What holds only for the whole command line. 0, or 2 with err set.
static int check_whole(EmxCliArgs *a, int agent_flag, int branch_flag, char *err, size_t errlen) {
    // llama.cpp's habit: --temp 0 means greedy. With the entropix default that would still
    // switch strategies (and insert pause tokens), so a bare --temp 0 picks the greedy sampler.
    if (!a->sampler_given && a->temp_given && a->sampling.temperature <= 0.0f)
        a->sampler = EMX_SAMPLER_GREEDY;
    if (agent_flag && !a->sampler_given) a->sampler = EMX_SAMPLER_AGENTS;
    if (agent_flag && a->sampler != EMX_SAMPLER_AGENTS)
        return fail(err, errlen, "the agent pool's flags need --sampler agents (not %s)", sampler_names[a->sampler]);
    if (branch_flag && !a->sampler_given) a->sampler = EMX_SAMPLER_BRANCH;
    if (branch_flag && a->sampler != EMX_SAMPLER_BRANCH)
        return fail(err, errlen, "the branching decoder's flags need --sampler branch (not %s)", sampler_names[a->sampler]);
    // Its branches are not one token stream: the per-token logs have nothing to follow.
    if ((a->sampler == EMX_SAMPLER_AGENTS || a->sampler == EMX_SAMPLER_BRANCH) && a->ignore_eos)
        return fail(err, errlen, "--ignore-eos is not available with --sampler %s", sampler_names[a->sampler]);
    if (a->sampler == EMX_SAMPLER_BRANCH && (a->metrics_path || a->report_path || a->logprobs >= 0))
        return fail(err, errlen, "%s is not available with --sampler branch",
                    a->metrics_path ? "--metrics" : a->report_path ? "--report" : "--logprobs");
    // The pool's agents and the decoder's branches draw from logits of their own.
    const int grammar = a->grammar || a->grammar_file || a->json_schema || a->json_schema_file;
    if ((a->sampler == EMX_SAMPLER_AGENTS || a->sampler == EMX_SAMPLER_BRANCH) && (emx_logit_rules_active(&a->rules) || grammar))
        return fail(err, errlen, "--repeat-penalty, --presence-penalty, --frequency-penalty, --logit-bias and the grammar "
                    "flags are not available with --sampler %s", sampler_names[a->sampler]);
    critic_default(a);
    if (a->conversation && check_conversation(a, err, errlen)) return 2;
    if (a->help || a->version) return 0;
    if (!a->model_path) return fail(err, errlen, "missing model file (usage: run MODEL.bin [options]; see --help)");
    if (a->prompt && a->prompt_file)
        return fail(err, errlen, "-p and -f both give a prompt: use one of them");
    return 0;
}

static int hex_digit(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

char *emx_cli_unescape(const char *s, size_t *len) {
    char *out = malloc(strlen(s) + 1), *o = out;  // every escape is shorter than its text
    if (!out) return NULL;
    for (const char *p = s; *p; p++) {
        const char *named = p[0] == '\\' ? strchr("nrt'\"\\", p[1]) : NULL;
        if (named && p[1]) {
            *o++ = p[1] == 'n' ? '\n' : p[1] == 'r' ? '\r' : p[1] == 't' ? '\t' : p[1];
            p++;
        } else if (p[0] == '\\' && p[1] == 'x' && hex_digit(p[2]) >= 0 && hex_digit(p[3]) >= 0) {
            *o++ = (char)(hex_digit(p[2]) * 16 + hex_digit(p[3]));
            p += 3;
        } else {
            *o++ = *p;
        }
    }
    *o = 0;
    *len = (size_t)(o - out);
    return out;
}

int emx_cli_parse(int argc, char **argv, EmxCliArgs *a, char *err, size_t errlen) {
    *a = cli_defaults();
    int agent_flag = 0;  // an agent-pool flag was given: the pool is the sampler
    int branch_flag = 0; // a branching decoder's flag was given
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *iv;
        if (arg[0] != '-' || arg[1] == 0) {  // positional ("-" alone is a file name too)
            if (a->model_path)
                return fail(err, errlen, "unexpected argument '%s' (the model is '%s')", arg,
                            a->model_path);
            a->model_path = arg;
            continue;
        }
        if (strcmp(arg, "--") == 0) {  // everything after is positional
            for (i++; i < argc; i++) {
                if (a->model_path) return fail(err, errlen, "unexpected argument '%s'", argv[i]);
                a->model_path = argv[i];
            }
            break;
        }
        if (set_switch(arg, a)) continue;
        int which = -1;
        for (int k = 0; k < (int)(sizeof valued / sizeof valued[0]) && which < 0; k++)
            if (is_flag(arg, valued[k].s, valued[k].l, &iv)) which = k;
        if (which < 0) return fail(err, errlen, "unknown option '%s' (see --help)", arg);
        const char *val = iv;
        if (!val) {
            if (i + 1 >= argc) return fail(err, errlen, "%s: missing value", arg);
            val = argv[++i];
        }
        int rc = set_value(which, valued[which].l, val, a, err, errlen);  // messages name the long form
        if (rc) return rc;
        if (which >= VALUED_FIRST_AGENT_FLAG && which <= VALUED_LAST_AGENT_FLAG) agent_flag = 1;
        if (which >= VALUED_FIRST_BRANCH_FLAG && which <= VALUED_LAST_BRANCH_FLAG) branch_flag = 1;
    }
    return check_whole(a, agent_flag, branch_flag, err, errlen);
}

EmxSamplerParams emx_cli_effective_sampling(const EmxCliArgs *a) {
    EmxSamplerParams p = a->sampling;
    switch (a->sampler) {
    case EMX_SAMPLER_GREEDY: p.temperature = 0.0f; break;
    case EMX_SAMPLER_TEMP: p.top_k = 0; p.top_p = 1.0f; p.min_p = 0.0f; break;
    case EMX_SAMPLER_TOPK: p.top_p = 1.0f; p.min_p = 0.0f; break;
    case EMX_SAMPLER_TOPP: p.top_k = 0; p.min_p = 0.0f; break;
    case EMX_SAMPLER_MINP: p.top_k = 0; p.top_p = 1.0f; break;
    default: break;
    }
    return p;
}

void emx_cli_version(FILE *f, const char *prog) {
    fprintf(f, "entropix.c %s %s (backends: %s)\n", prog, EMX_VERSION_STRING, emx_backend_names());
}

// The --help text after the agent pool's flags.
static void usage_tail(FILE *f) {
    fputs(
        "Branching decoder (--sampler branch; any of these flags selects it; deterministic):\n"
        "      --branch-entropy T  fork at a step whose entropy exceeds T bits and whose top token\n"
        "                          has p < 0.5 (default 2)\n"
        "      --branch-k K        at most K branches per fork, 2..16 (default 5)\n"
        "      --branch-gate G     a branch's first token needs p >= G * p(top), (0, 1] (default 0.1)\n"
        "      --branch-forks B    forks per generation (default 1; 0 = greedy)\n"
        "      --branch-lookahead L  tokens per branch before the fork is decided (default 0 = until\n"
        "                          every branch has ended); then greedy goes on from the winner\n"
        "      --branch-rule R     prob (default): the most probable branch (with an alphabet: the\n"
        "                          answer most probable over the branches); margin: the largest\n"
        "                          p(top1) - p(top2) over the answer; entropy: the lowest entropy\n"
        "      --answer-alphabet A,B,C  each finished branch commits to the most probable entry,\n"
        "                          after the cue (answer commitment on)\n"
        "      --answer-cue TEXT   the cue before the answer (default \"The answer is\")\n"
        "                          (not with --metrics, --report, --logprobs)\n"
        "\n"
        "Other:\n"
        "      --verbose           model, prompt tokens and sampler settings to stderr\n"
        "      --verify            check the model file's recorded checksum before running\n"
        "      --gguf-cache DIR    where a GGUF given as the model is converted once and kept\n"
        "                          (default $EMX_CACHE, else $XDG_CACHE_HOME/entropix or\n"
        "                          ~/.cache/entropix)\n"
        "      --mmap              map the model file as it is (shared with other processes,\n"
        "                          read as used) instead of copying a file of 64 MiB or more\n"
        "                          into 2 MiB pages (faster decode: fewer page-table walks)\n"
        "  -h, --help              this help\n"
        "      --version           print the version and the backends of this build\n"
        "\n"
        "Exit status: 0 ok, 1 error (model, prompt, context), 2 usage error.\n",
        f);
}

void emx_cli_usage(FILE *f, const char *prog) {
    fprintf(f,
        "usage: %s MODEL.bin [options]    (or -m, --model MODEL.bin)\n"
        "Generates text with an entropix.c model file; the text goes to stdout as it is\n"
        "produced, timings to stderr.\n"
        "\n"
        "Prompt:\n"
        "  -p, --prompt TEXT       prompt text (default: empty = start from BOS, base models)\n"
        "  -f, --file FILE         read the prompt from FILE ('-': stdin)\n"
        "      --chat              wrap the prompt in the model's chat template\n"
        "      --raw               feed the prompt as is (echoed to stdout before the output)\n"
        "                          (default: --chat if the model file has a chat template)\n"
        "      --system TEXT       system message (chat mode)\n"
        "  -e, --escape            read \\n \\r \\t \\' \\\" \\\\ \\xHH in -p and --system as the\n"
        "                          characters they name (default: --no-escape, taken as written)\n"
        "      --no-think          Qwen3: thinking off, as the official template renders it\n"
        "  -cnv, --conversation    chat turn by turn: each stdin line is a message ('\\' at\n"
        "                          its end goes on); answers stream to stdout; -p is the\n"
        "                          first message; Ctrl-D ends it (-n: tokens per answer)\n"
        "\n"
        "Generation:\n"
        "  -n, --n-predict N       tokens to generate (default 256; -1 = until a stop token\n"
        "                          or the context is full; more than fits is an error)\n"
        "      --ignore-eos        go on past a stop token (it is fed back like any other)\n"
        "  -c, --ctx-size N        context length in tokens (default: min(model's, 4096))\n"
        "  -t, --threads N         CPU threads (default: all cores)\n"
        "  -dev, --device D        cpu, cuda:N, or auto (default): the first GPU when this build\n"
        "                          has the CUDA backend (--version says) and sees one, else the CPU\n"
        "      --cache-type T      the KV cache's elements: f32, f16 (half the cache's memory and\n"
        "                          the attention's bytes), or auto (default): f16 on a GPU for\n"
        "                          16-bit or quantised weights, else f32\n"
        "\n"
        "Sampling:\n"
        "      --sampler NAME      entropix (default): each token's strategy chosen from the\n"
        "                          entropy/varentropy of the logits and the attention;\n"
        "                          combined: temperature + top-k + top-p + min-p (llama.cpp's\n"
        "                          order); greedy; temp, topk, topp, minp (temperature + that\n"
        "                          filter only); agents: the agent pool (below); branch:\n"
        "                          greedy with forks where the model is unsure (below)\n"
        "      --temp T            temperature (default 0.8; entropix: the profile's base, 0.666,\n"
        "                          which its cases scale; a bare --temp 0 selects greedy)\n"
        "      --top-k N           keep the N most likely tokens (default 40; 0 = off)\n"
        "      --top-p P           keep the smallest set of most likely tokens with mass >= P\n"
        "                          (default 0.95; 1 = off)\n"
        "      --min-p P           keep tokens with p >= P * p(most likely) (default 0.05; 0 = off)\n"
        "                          (entropix: --top-k/--top-p/--min-p set the profile's base values)\n"
        "      --repeat-penalty R  divide (multiply, if negative) the logits of the tokens among\n"
        "                          the last --repeat-last-n of the context by R (default 1 = off)\n"
        "      --repeat-last-n N   tokens it looks back over, prompt included (default 64; -1 = all)\n"
        "      --presence-penalty P   subtract P from each generated token's logit (default 0)\n"
        "      --frequency-penalty F  subtract F x its count from each generated token's logit (default 0)\n"
        "  -l, --logit-bias ID+B   add B (0..100) to token ID's logit; ID-B subtracts, ID-inf bans\n"
        "      --grammar GBNF      the output follows this grammar (llama.cpp's GBNF, docs/grammar.md)\n"
        "      --grammar-file FILE the same, from a file\n"
        "  -j, --json-schema JSON  the output is JSON valid for this schema (OpenAI's strict subset)\n"
        "      --json-schema-file FILE  the same, from a file\n"
        "                          (these rules apply before any sampler but agents and branch)\n"
        "  -s, --seed N            random seed (default: time-based, printed to stderr; -1 = same)\n"
        "\n"
        "Entropix:\n"
        "      --profile NAME|FILE the switch's thresholds and coefficients: measured (default:\n"
        "                          chosen by answer accuracy), classic (the sources'), masked-bits,\n"
        "                          or a profile file (tools/calibrate writes one)\n"
        "      --profile-set K=V   override one profile constant (repeatable), e.g.\n"
        "                          --profile-set helv_insert_pause=0\n"
        "      --metric-layers L   attention metrics from: last (default), all (averaged), or a\n"
        "                          layer index\n"
        "      --metrics FILE      one JSON line per generated token: id, piece, every metric, the\n"
        "                          case, the effective temperature/top-k/top-p/min-p, inserted\n"
        "      --color             colour each token by the case that chose it (legend on stderr)\n"
        "      --logprobs N        --metrics lines get top_logprobs (the N most likely tokens,\n"
        "                          0..20, natural log, temperature 1) and the chosen token's logprob\n"
        "      --report FILE.html  one self-contained page of the run: the text coloured by case,\n"
        "                          each token's metrics and alternatives, plots, agents' rounds\n"
        "\n"
        "Agent pool (--sampler agents; any of these flags selects it):\n"
        "      --agents N          sampling agents (default 8), temperatures 0.3..1.5 and top-k\n"
        "                          5..100; each proposes a token, the lowest entropy wins\n"
        "      --agent-configs S   the agents' own T:k list, e.g. \"0.3:5,0.7:20,1.2:0\" (k 0 = off)\n"
        "      --lookahead L       each agent extends its branch L tokens before the choice\n"
        "                          (mean entropy decides; default 1 = token by token)\n"
        "      --workers N         CPU workers, each with a replica (default 1); same text for\n"
        "                          any N\n"
        "      --devices LIST      cpu (default) or cuda:0,cuda:1,...: one worker per GPU (CUDA build)\n"
        "      --check-every K     the critic judges every K committed tokens (default: no critic;\n"
        "                          5 with --critic-model; given, it turns on a critic over the\n"
        "                          same model, weights shared; 0 = off)\n"
        "      --critic-window W   tokens of text it reads (default 64)\n"
        "      --critic-margin M   BAD when log p(BAD) - log p(GOOD) > M (default 0)\n"
        "      --critic-model FILE critic model (turns the critic on)\n"
        "      --rollback R        tokens dropped on a BAD verdict (default 5)\n"
        "      --max-rollbacks N   rollbacks at one step before a BAD is accepted (default 3)\n"
        "      --log FILE          generation log: every step, proposal, verdict, rollback and\n"
        "                          the final text, written as it goes (Ctrl-C keeps it)\n"
        "                          -n defaults to 25000 in this mode, capped by the context\n"
        "\n",
        prog);
    usage_tail(f);
}
