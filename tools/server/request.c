// request.c — OpenAI request bodies to SrvRequest, every field checked (request.h).
#include "tools/server/request.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cli/cli_args.h"
#include "runtime/cli/run_pool.h"
#include "sampler/profile.h"
#include "tokenizer/tok_utf8.h"
#include "tools/server/guard.h"
#include "tools/server/request_branch.h"
#include "tools/server/request_json.h"
#include "tools/server/request_rules.h"
#include "tools/server/request_tools.h"

static char *dup_checked(const char *s, const char *param, SrvError *e) {
    char *d = strdup(s);
    if (!d) srv_fail(e, 500, param, NULL, "out of memory");
    return d;
}

// content: a string, or an array of {"type": "text", "text": "..."} parts (joined).
static char *message_content(const cJSON *c, SrvError *e) {
    if (cJSON_IsString(c)) return dup_checked(c->valuestring, "messages", e);
    if (!cJSON_IsArray(c)) {
        srv_fail(e, 400, "messages", NULL, "a message's content must be a string or an array of text parts, not %s",
                 c ? srv_type_name(c) : "absent");
        return NULL;
    }
    size_t total = 1;
    const cJSON *part;
    cJSON_ArrayForEach(part, c) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") != 0 || !cJSON_IsString(text)) {
            srv_fail(e, 400, "messages", NULL, "only text content parts ({\"type\": \"text\", \"text\": ...}) are supported");
            return NULL;
        }
        total += strlen(text->valuestring);
    }
    char *out = malloc(total);
    if (!out) {
        srv_fail(e, 500, "messages", NULL, "out of memory");
        return NULL;
    }
    size_t o = 0;
    cJSON_ArrayForEach(part, c) {
        const char *t = cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring;
        memcpy(out + o, t, strlen(t));
        o += strlen(t);
    }
    out[o] = 0;
    return out;
}

static int parse_messages(const cJSON *root, SrvRequest *r, SrvError *e) {
    const cJSON *msgs = srv_field(root, "messages");
    if (!msgs) return srv_fail(e, 400, "messages", NULL, "messages is required");
    if (!cJSON_IsArray(msgs)) return srv_fail(e, 400, "messages", NULL, "messages must be an array, not %s", srv_type_name(msgs));
    const int n = cJSON_GetArraySize(msgs);
    if (n < 1 || n > SRV_MAX_MESSAGES)
        return srv_fail(e, 400, "messages", NULL, "messages has %d entries; it must have 1 to %d", n, SRV_MAX_MESSAGES);
    if (!(r->messages = calloc((size_t)n, sizeof *r->messages))) return srv_fail(e, 500, "messages", NULL, "out of memory");
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        const int i = r->n_messages;
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role))
            return srv_fail(e, 400, "messages", NULL, "messages[%d] must be an object with a string role", i);
        const char *rn = role->valuestring;
        if (strcmp(rn, "developer") == 0) rn = "system";  // OpenAI's newer name for the system role
        char q[128];
        if (strcmp(rn, "system") != 0 && strcmp(rn, "user") != 0 && strcmp(rn, "assistant") != 0 && strcmp(rn, "tool") != 0)
            return srv_fail(e, 400, "messages", NULL,
                            "messages[%d].role '%s' is not supported (system, user, assistant, developer, tool)", i,
                            srv_quote(rn, strlen(rn), 40, q, sizeof q));
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
        // an assistant's calls come with content null (or absent): the templates' empty content
        const int calls = !strcmp(rn, "assistant") && cJSON_IsArray(srv_field(m, "tool_calls"));
        char *content = calls && (!c || cJSON_IsNull(c)) ? dup_checked("", "messages", e) : message_content(c, e);
        if (!content) return -1;
        r->messages[i].content = content;
        r->n_messages++;
        if (!(r->messages[i].role = dup_checked(rn, "messages", e))) return -1;
        if (srv_parse_message_tools(m, i, &r->messages[i], e)) return -1;
    }
    return 0;
}

static int parse_prompt(const cJSON *root, SrvRequest *r, SrvError *e) {
    const cJSON *p = srv_field(root, "prompt");
    if (!p) return srv_fail(e, 400, "prompt", NULL, "prompt is required");
    // The API also takes a batch of prompts or token arrays; one string (alone or in an
    // array) is what one generation answers.
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 && cJSON_IsString(cJSON_GetArrayItem(p, 0)))
        p = cJSON_GetArrayItem(p, 0);
    if (!cJSON_IsString(p))
        return srv_fail(e, 400, "prompt", NULL, "prompt must be a string (batches and token arrays are not supported), not %s",
                        srv_type_name(p));
    return (r->prompt = dup_checked(p->valuestring, "prompt", e)) ? 0 : -1;
}

static int parse_stop(const cJSON *root, SrvRequest *r, SrvError *e) {
    const cJSON *s = srv_field(root, "stop");
    if (!s) return 0;
    const cJSON *one = s;
    if (cJSON_IsArray(s)) {
        if (cJSON_GetArraySize(s) > SRV_MAX_STOP)
            return srv_fail(e, 400, "stop", NULL, "stop has %d strings; at most %d are allowed", cJSON_GetArraySize(s), SRV_MAX_STOP);
        one = NULL;
    } else if (!cJSON_IsString(s)) {
        return srv_fail(e, 400, "stop", NULL, "stop must be a string or an array of strings, not %s", srv_type_name(s));
    }
    const cJSON *it = one;
    if (!one) it = s->child;
    for (; it; it = one ? NULL : it->next) {
        if (!cJSON_IsString(it)) return srv_fail(e, 400, "stop", NULL, "stop[%d] must be a string, not %s", r->n_stop, srv_type_name(it));
        const size_t n = strlen(it->valuestring);
        if (n == 0 || n > SRV_MAX_STOP_LEN)
            return srv_fail(e, 400, "stop", NULL, "a stop string is %zu bytes; it must have 1 to %d", n, SRV_MAX_STOP_LEN);
        if (!(r->stop[r->n_stop] = dup_checked(it->valuestring, "stop", e))) return -1;
        r->n_stop++;
    }
    return 0;
}

static int parse_sampling(const cJSON *root, SrvRequest *r, SrvError *e) {
    int has = 0;
    double d = 0;
    if (srv_get_int(root, "max_tokens", 1, SRV_MAX_TOKENS, &has, &d, e) ||
        srv_get_int(root, "max_completion_tokens", 1, SRV_MAX_TOKENS, &has, &d, e))
        return -1;
    if (has) r->max_tokens = (int)d;
    if (srv_get_number(root, "temperature", 0, 2, 0, &r->has_temperature, &r->temperature, e) ||
        srv_get_number(root, "top_p", 0, 1, 1, &r->has_top_p, &r->top_p, e))
        return -1;
    if (srv_get_int(root, "seed", -1, 9007199254740992.0, &r->has_seed, &d, e)) return -1;  // 2^53: exact in JSON
    if (r->has_seed && d < 0) r->has_seed = 0, r->draw_seed = 1;  // llama.cpp's -1: a seed drawn for this request
    else if (r->has_seed) r->seed = (uint64_t)d;
    has = 0;
    if (srv_get_int(root, "n", 1, SRV_MAX_N, &has, &d, e)) return -1;
    r->n = has ? (int)d : 1;
    r->best_of = r->n;
    has = 0;  // best_of: the legacy completions' (OpenAI's chat has none: there it is an unknown field)
    if (r->kind == SRV_COMPLETION && srv_get_int(root, "best_of", 1, SRV_MAX_N, &has, &d, e)) return -1;
    if (has && (int)d < r->n)
        return srv_fail(e, 400, "best_of", NULL, "best_of is %d; it must be at least n (%d)", (int)d, r->n);
    if (has) r->best_of = (int)d;
    if (srv_field(root, "suffix")) return srv_fail(e, 400, "suffix", NULL, "suffix is not supported");
    if (r->kind == SRV_COMPLETION && (srv_field(root, "tools") || srv_field(root, "tool_choice")))
        return srv_fail(e, 400, srv_field(root, "tools") ? "tools" : "tool_choice", NULL,
                        "tools are a chat request's: use /v1/chat/completions");
    if (srv_parse_tools(root, r, e)) return -1;
    return srv_parse_rules(root, r, e);
}

static int parse_logprobs(const cJSON *root, SrvRequest *r, SrvError *e) {
    int has = 0;
    double d = 0;
    if (r->kind == SRV_COMPLETION) {  // completions: logprobs is the number of alternatives
        if (srv_get_int(root, "logprobs", 0, SRV_MAX_LOGPROBS, &has, &d, e)) return -1;
        if (has) r->logprobs = 1, r->top_logprobs = (int)d;
        int echo = 0;
        if (srv_get_bool(root, "echo", &echo, e)) return -1;
        if (echo) return srv_fail(e, 400, "echo", NULL, "echo is not supported");
        return 0;
    }
    if (srv_get_bool(root, "logprobs", &r->logprobs, e)) return -1;
    if (srv_get_int(root, "top_logprobs", 0, SRV_MAX_LOGPROBS, &has, &d, e)) return -1;
    if (has && !r->logprobs) return srv_fail(e, 400, "top_logprobs", NULL, "top_logprobs needs logprobs: true");
    if (has) r->top_logprobs = (int)d;
    return 0;
}

enum { AK_INT, AK_NUMBER, AK_STRING, AK_BOOL, AK_REFUSED };

// The agent pool's keys, under tools/eval/config.c's names, and the ./run flag each stands for
// (critic: --check-every 5 or 0, as eval's critic=on/off).
static const struct { const char *key, *flag, *param; int kind; } agent_keys[] = {
    {"n", "--agents", "entropix.n", AK_INT},
    {"agents", "--agents", "entropix.agents", AK_INT},
    {"agent_configs", "--agent-configs", "entropix.agent_configs", AK_STRING},
    {"lookahead", "--lookahead", "entropix.lookahead", AK_INT},
    {"workers", "--workers", "entropix.workers", AK_INT},
    {"check_every", "--check-every", "entropix.check_every", AK_INT},
    {"window", "--critic-window", "entropix.window", AK_INT},
    {"critic_window", "--critic-window", "entropix.critic_window", AK_INT},
    {"margin", "--critic-margin", "entropix.margin", AK_NUMBER},
    {"critic_margin", "--critic-margin", "entropix.critic_margin", AK_NUMBER},
    {"rollback", "--rollback", "entropix.rollback", AK_INT},
    {"max_rollbacks", "--max-rollbacks", "entropix.max_rollbacks", AK_INT},
    {"critic", "--check-every", "entropix.critic", AK_BOOL},
    {"devices", NULL, "entropix.devices", AK_REFUSED},
    {"critic_model", NULL, "entropix.critic_model", AK_REFUSED},
};
#define N_AGENT_KEYS ((int)(sizeof agent_keys / sizeof agent_keys[0]))
#define EXTENSION_KEYS "sampler, profile, top_k, min_p, metrics; agents: n, agent_configs, lookahead, workers, " \
                       "check_every, window, margin, rollback, max_rollbacks, critic; branch: tau, k, forks, gate, " \
                       "lookahead, rule, alphabet, cue"

// Every key of the extension is one it knows: a misspelt option must not silently do nothing.
static int check_extension_keys(const cJSON *x, SrvError *e) {
    static const char *const base[] = {"sampler", "profile", "top_k", "min_p", "metrics"};
    const cJSON *it;
    cJSON_ArrayForEach(it, x) {
        int known = 0;
        for (int i = 0; i < 5; i++) known |= strcmp(it->string, base[i]) == 0;
        for (int i = 0; i < N_AGENT_KEYS; i++) known |= strcmp(it->string, agent_keys[i].key) == 0;
        known |= srv_branch_key(it->string);
        char q[128];
        if (!known)
            return srv_fail(e, 400, "entropix", NULL, "entropix.%s is not an option of the extension (" EXTENSION_KEYS ")",
                            srv_quote(it->string, strlen(it->string), 40, q, sizeof q));
    }
    return 0;
}

// Key k's value as ./run's flag value in buf (or the string itself). NULL with e set: wrong type.
static const char *agent_value(int k, const cJSON *v, char *buf, size_t cap, SrvError *e) {
    const char *param = agent_keys[k].param;
    switch (agent_keys[k].kind) {
    case AK_INT:  // an integer's digits; the range is ./run's parser's to check
        if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || fabs(v->valuedouble) > 9007199254740992.0)
            return srv_fail(e, 400, param, NULL, "%s must be an integer, not %s", param,
                            cJSON_IsNumber(v) ? "a fraction or a huge number" : srv_type_name(v)), NULL;
        snprintf(buf, cap, "%.0f", v->valuedouble);
        return buf;
    case AK_NUMBER:
        if (!cJSON_IsNumber(v))
            return srv_fail(e, 400, param, NULL, "%s must be a number, not %s", param, srv_type_name(v)), NULL;
        if (!isfinite(v->valuedouble))  // 1e309 parses to infinity
            return srv_fail(e, 400, param, NULL, "%s is too large: it must be a finite number", param), NULL;
        snprintf(buf, cap, "%.17g", v->valuedouble);
        return buf;
    case AK_STRING:
        if (!cJSON_IsString(v)) return srv_fail(e, 400, param, NULL, "%s must be a string, not %s", param, srv_type_name(v)), NULL;
        return v->valuestring;
    case AK_BOOL:
        if (!cJSON_IsBool(v)) return srv_fail(e, 400, param, NULL, "%s must be a boolean, not %s", param, srv_type_name(v)), NULL;
        return cJSON_IsTrue(v) ? "5" : "0";  // ./run's default K with a critic, or none
    default:
        return srv_fail(e, 400, param, NULL,
                        "%s is not served: the server runs one model, with the pool's workers on the CPU "
                        "(the critic is the served model)", param), NULL;
    }
}

// The pool's keys to ./run flags, each parsed alone by ./run's parser (so an error names its
// key), then all together into r->agents. Keys of the pool imply sampler "agents" (./run's rule).
static int parse_agents(const cJSON *x, SrvRequest *r, SrvError *e) {
    char vals[N_AGENT_KEYS][64];
    char *argv[4 + 2 * N_AGENT_KEYS + 1] = {"server", "MODEL", "--sampler", "agents"};
    int argc = 4, first = -1;
    const cJSON *ce = srv_field(x, "check_every");
    for (int k = 0; k < N_AGENT_KEYS; k++) {
        const cJSON *v = srv_field(x, agent_keys[k].key);
        if (!v || (r->sampler == EMX_SAMPLER_BRANCH && !strcmp(agent_keys[k].key, "lookahead"))) continue;  // its own
        const char *val = agent_value(k, v, vals[k], sizeof vals[k], e), *param = agent_keys[k].param;
        if (!val) return -1;
        if (first < 0) first = k;
        for (int j = 0; j < k; j++)  // n and agents, window and critic_window, ...: one of each
            if (agent_keys[j].kind != AK_BOOL && agent_keys[k].kind != AK_BOOL && srv_field(x, agent_keys[j].key) &&
                strcmp(agent_keys[j].flag, agent_keys[k].flag) == 0)
                return srv_fail(e, 400, param, NULL, "%s and %s are the same option: give one", agent_keys[j].param, param);
        if (agent_keys[k].kind == AK_BOOL && ce) {  // check_every decides; it must agree
            if (cJSON_IsNumber(ce) && (ce->valuedouble > 0) != cJSON_IsTrue(v))
                return srv_fail(e, 400, param, NULL, "%s is %s but entropix.check_every is %g", param,
                                cJSON_IsTrue(v) ? "true" : "false", ce->valuedouble);
            continue;
        }
        char *one[] = {"server", "MODEL", "--sampler", "agents", (char *)agent_keys[k].flag, (char *)val, NULL};
        EmxCliArgs a;
        char why[256];
        if (emx_cli_parse(6, one, &a, why, sizeof why) != 0) return srv_fail(e, 400, param, NULL, "%s: %s", param, why);
        argv[argc++] = (char *)agent_keys[k].flag, argv[argc++] = (char *)val;
    }
    if (first >= 0 && r->sampler >= 0 && r->sampler != EMX_SAMPLER_AGENTS)
        return srv_fail(e, 400, agent_keys[first].param, NULL, "%s is an agent pool option: it needs sampler agents, not %s",
                        agent_keys[first].param, emx_sampler_kind_name(r->sampler));
    if (first >= 0) r->sampler = EMX_SAMPLER_AGENTS;
    if (r->sampler != EMX_SAMPLER_AGENTS) return 0;
    EmxCliArgs a;
    char why[256];
    argv[argc] = NULL;
    if (emx_cli_parse(argc, argv, &a, why, sizeof why) != 0) return srv_fail(e, 400, "entropix", NULL, "entropix: %s", why);
    const struct { const char *param; int value, max; } caps[] = {
        {"entropix.workers", a.workers, SRV_MAX_WORKERS},       {"entropix.n", a.n_agents, SRV_MAX_AGENTS},
        {"entropix.rollback", a.rollback, SRV_MAX_ROLLBACK},    {"entropix.max_rollbacks", a.max_rollbacks, SRV_MAX_ROLLBACKS},
        {"entropix.window", a.critic_window, SRV_MAX_WINDOW},
    };
    for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++)
        if (caps[i].value > caps[i].max)
            return srv_fail(e, 400, caps[i].param, NULL, "%s is %d; this server allows at most %d", caps[i].param,
                            caps[i].value, caps[i].max);
    EmxRunPoolSetup ps;  // the agents' configs, and a worker for every agent
    if (emx_run_pool_setup(&a, &ps, why, sizeof why) != 0)
        return srv_fail(e, 400, a.agent_configs && strstr(why, "--agent-configs") ? "entropix.agent_configs" : "entropix.workers",
                        NULL, "entropix: %s", why);
    r->agents = (SrvAgents){.n_agents = a.n_agents, .lookahead = a.lookahead, .workers = a.workers,
                            .check_every = a.check_every, .check_every_given = a.check_every_given,
                            .critic_default_off = a.critic_default_off, .rollback = a.rollback,
                            .max_rollbacks = a.max_rollbacks, .critic_window = a.critic_window,
                            .critic_margin = a.critic_margin};
    if (a.agent_configs && !(r->agents.agent_configs = dup_checked(a.agent_configs, "entropix.agent_configs", e))) return -1;
    return 0;
}

static int parse_extension(const cJSON *root, SrvRequest *r, SrvError *e) {
    const cJSON *x = srv_field(root, "entropix");
    if (!x) return 0;
    if (!cJSON_IsObject(x)) return srv_fail(e, 400, "entropix", NULL, "entropix must be an object, not %s", srv_type_name(x));
    if (check_extension_keys(x, e)) return -1;
    const cJSON *s = srv_field(x, "sampler");
    if (s) {
        if (!cJSON_IsString(s)) return srv_fail(e, 400, "entropix.sampler", NULL, "entropix.sampler must be a string");
        for (int k = 0; k <= EMX_SAMPLER_BRANCH; k++)
            if (strcmp(s->valuestring, emx_sampler_kind_name(k)) == 0) r->sampler = k;
        char q[128];
        if (r->sampler < 0)
            return srv_fail(e, 400, "entropix.sampler", NULL,
                            "entropix.sampler '%s' is not one of entropix, greedy, combined, temp, topk, topp, minp, agents, "
                            "branch",
                            srv_quote(s->valuestring, strlen(s->valuestring), 40, q, sizeof q));
    }
    const cJSON *p = srv_field(x, "profile");
    if (p) {
        EmxProfile scratch;
        // Built-in names only: a path would let a client make the server read its files.
        if (!cJSON_IsString(p) || emx_profile_builtin(&scratch, p->valuestring) != 0)
            return srv_fail(e, 400, "entropix.profile", NULL, "entropix.profile must be a built-in profile's name");
        if (!(r->profile = dup_checked(p->valuestring, "entropix.profile", e))) return -1;
    }
    // top_k and min_p: at the top level (as llama-server and vLLM take them) or here, not both
    if ((r->has_top_k && srv_field(x, "top_k")) || (r->has_min_p && srv_field(x, "min_p")))
        return srv_fail(e, 400, r->has_top_k && srv_field(x, "top_k") ? "top_k" : "min_p", NULL,
                        "%s is given twice, at the top level and in entropix: give one",
                        r->has_top_k && srv_field(x, "top_k") ? "top_k" : "min_p");
    double d = r->top_k;
    if (srv_get_int(x, "top_k", -1, 1 << 20, &r->has_top_k, &d, e)) return -1;
    r->top_k = (int)d;
    if (srv_get_number(x, "min_p", 0, 1, 0, &r->has_min_p, &r->min_p, e)) return -1;
    if (srv_get_bool(x, "metrics", &r->metrics, e)) return -1;
    // the decoder's keys first: with sampler branch, lookahead is its own, not the pool's
    return srv_parse_branch(x, r, e) || parse_agents(x, r, e) ? -1 : 0;
}

static int parse_root(const cJSON *root, SrvRequest *r, SrvError *e) {
    if (!cJSON_IsObject(root)) return srv_fail(e, 400, NULL, NULL, "the body must be a JSON object, not %s", srv_type_name(root));
    // model: optional, as llama.cpp's server has it (one model is served: `curl -d '{"messages":...}'`
    // works); when given it must name the served model (the engine answers 404 otherwise).
    const cJSON *model = srv_field(root, "model");
    if (model && !cJSON_IsNull(model)) {
        if (!cJSON_IsString(model)) return srv_fail(e, 400, "model", NULL, "model must be a string, not %s", srv_type_name(model));
        if (!(r->model = dup_checked(model->valuestring, "model", e))) return -1;
    }
    if ((r->kind == SRV_CHAT ? parse_messages(root, r, e) : parse_prompt(root, r, e)) != 0) return -1;
    if (parse_sampling(root, r, e) || parse_stop(root, r, e) || parse_logprobs(root, r, e)) return -1;
    if (srv_get_bool(root, "stream", &r->stream, e)) return -1;
    if (r->stream && r->best_of > r->n)  // the candidates are ranked once all have ended
        return srv_fail(e, 400, "best_of", NULL, "best_of (%d) past n (%d) cannot be streamed", r->best_of, r->n);
    const cJSON *so = srv_field(root, "stream_options");
    if (so) {
        if (!cJSON_IsObject(so)) return srv_fail(e, 400, "stream_options", NULL, "stream_options must be an object");
        if (!r->stream) return srv_fail(e, 400, "stream_options", NULL, "stream_options needs stream: true");
        if (srv_get_bool(so, "include_usage", &r->include_usage, e)) return -1;
    }
    return parse_extension(root, r, e);
}

// A "\u0000" escape (its backslash not itself escaped) anywhere in the body.
static int has_nul_escape(const char *body, size_t len) {
    for (size_t i = 0; i + 6 <= len; i++) {
        if (memcmp(body + i, "\\u0000", 6) != 0) continue;
        size_t n = 0;  // backslashes ending at i: odd means this one starts an escape
        while (n <= i && body[i - n] == '\\') n++;
        if (n % 2 == 1) return 1;
    }
    return 0;
}

int srv_request_parse(const char *body, size_t len, int kind, SrvRequest *r, SrvError *e) {
    memset(r, 0, sizeof *r);
    memset(e, 0, sizeof *e);
    r->kind = kind;
    r->max_tokens = -1;
    r->sampler = -1;
    r->rules = EMX_LOGIT_RULES_OFF;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    if (!root) {
        const size_t off = end && end >= body ? (size_t)(end - body) : 0;
        return srv_fail(e, 400, NULL, NULL, "the body is not valid JSON (at byte %zu)", off);
    }
    size_t off = (size_t)(end - body);
    while (off < len && strchr(" \t\r\n", body[off]) && body[off]) off++;
    int rc = off < len ? srv_fail(e, 400, NULL, NULL, "the body has bytes after its JSON value (at byte %zu)", off)
                       : srv_json_check_duplicates(root, e) != 0 ? -1
                                                                  : parse_root(root, r, e);
    // cJSON ends a string at an escaped NUL ("\u0000"): a prompt or message holding one would
    // be cut silently. Refused instead: the user's text is never changed behind their back.
    if (rc == 0 && has_nul_escape(body, len))
        rc = srv_fail(e, 400, NULL, NULL, "a string holds \\u0000, which cannot be passed to the model");
    cJSON_Delete(root);
    if (rc != 0) srv_request_free(r);
    return rc;
}

void srv_request_free(SrvRequest *r) {
    for (int i = 0; i < r->n_messages; i++)
        free(r->messages[i].role), free(r->messages[i].content), srv_message_tools_free(&r->messages[i]);
    srv_tools_free(r);
    free(r->messages);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->model);
    free(r->prompt);
    free(r->profile);
    free(r->json_schema), free(r->grammar);
    free(r->agents.agent_configs);
    free((char *)r->branch.cue);
    emx_branch_alphabet_free(r->branch.alphabet, r->branch.n_alphabet);
    const int kind = r->kind;
    memset(r, 0, sizeof *r);
    r->kind = kind;
}

char *srv_error_json(const SrvError *e) {
    cJSON *root = cJSON_CreateObject(), *o = cJSON_AddObjectToObject(root, "error");
    if (o) {
        // valid UTF-8 whatever a message quoted (srv_quote escapes a client's bytes; this is the last guard)
        size_t n = 0;
        char *message = tok_utf8_sanitize(e->message, strlen(e->message), &n);
        cJSON_AddStringToObject(o, "message", message ? message : "(out of memory)");
        free(message);
        cJSON_AddStringToObject(o, "type", e->type ? e->type : "invalid_request_error");
        if (e->param_path[0]) cJSON_AddStringToObject(o, "param", e->param_path);
        else if (e->param) cJSON_AddStringToObject(o, "param", e->param);
        else cJSON_AddNullToObject(o, "param");
        if (e->code) cJSON_AddStringToObject(o, "code", e->code);
        else cJSON_AddNullToObject(o, "code");
    }
    char *s = o ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return s;
}
