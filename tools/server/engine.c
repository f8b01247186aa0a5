// engine.c — one request's generation (engine.h).
#include "tools/server/engine.h"
#include "tools/server/engine_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/errmsg.h"
#include "runtime/cli/run_setup.h"
#include "runtime/generate.h"
#include "runtime/token_log.h"
#include "sampler/json_schema.h"
#include "tools/server/request_tools.h"
#include "tools/server/tool_calls.h"
#include "tools/server/guard.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tok_utf8.h"

// JSON text as Python's json.dumps writes it (indent > 0: indented), malloc'd; NULL on failure.
static char *py_json_text(const char *json, int indent) {
    cJSON *v = cJSON_Parse(json);
    char *s = v ? srv_py_json_indent(v, indent) : NULL;
    cJSON_Delete(v);
    return s;
}

// The conversation through the model's template, with the request's tools and calls. Qwen3's
// template writes each tool as tojson and a call's arguments string as it is; Llama 3's each
// tool as tojson(indent=4) and the arguments as tojson of the object they hold.
static char *render_chat(const SrvModel *sm, const SrvRequest *r, char *err, size_t errlen) {
    const uint32_t family = sm->model.cfg.chat_template;
    const int llama = family == EMX_CHAT_LLAMA3;
    size_t n_calls = 0;
    for (int i = 0; i < r->n_messages; i++) n_calls += (size_t)r->messages[i].n_tool_calls;
    EmxChatMessage msgs[SRV_MAX_MESSAGES];
    const char *tools[SRV_MAX_TOOLS];
    char *owned[SRV_MAX_TOOLS] = {0};
    EmxChatToolCall *calls = calloc(n_calls + 1, sizeof *calls);
    char **args = calloc(n_calls + 1, sizeof *args);
    char *text = NULL;
    int ok = calls && args && r->n_messages <= SRV_MAX_MESSAGES && r->n_tools <= SRV_MAX_TOOLS;
    for (size_t c = 0, i = 0; ok && i < (size_t)r->n_messages; i++) {
        const SrvMessage *m = &r->messages[i];
        msgs[i] = (EmxChatMessage){m->role, m->content, calls + c, m->n_tool_calls};
        for (int k = 0; k < m->n_tool_calls; k++, c++) {
            const char *a = llama ? (args[c] = py_json_text(m->tool_calls[k].arguments, 0)) : m->tool_calls[k].arguments;
            ok = ok && a;
            calls[c] = (EmxChatToolCall){m->tool_calls[k].name, a};
        }
    }
    for (int t = 0; ok && t < r->n_tools; t++) {
        tools[t] = llama ? (owned[t] = py_json_text(r->tools[t].json, 4)) : r->tools[t].json;
        ok = tools[t] != NULL;
    }
    if (ok) {
        EmxChatOptions co = {.add_generation_prompt = 1, .enable_thinking = !sm->defaults.no_think,
                             .tools = tools, .n_tools = r->n_tools};
        text = emx_chat_render(family, msgs, r->n_messages, &co, err, errlen);
    } else {
        emx_seterr(err, errlen, "out of memory");
    }
    for (size_t c = 0; args && c < n_calls; c++) free(args[c]);
    for (int t = 0; t < r->n_tools; t++) free(owned[t]);
    free(calls), free(args);
    return text;
}

int srv_prompt_ids(const SrvModel *sm, const SrvRequest *r, int **ids, int *n_ids, SrvError *e) {
    char err[320] = {0};
    *ids = NULL;
    *n_ids = 0;
    if (r->kind == SRV_COMPLETION) {  // raw, exactly as ./run -p TEXT --raw
        EmxPromptSpec ps = {.text = r->prompt, .len = strlen(r->prompt)};
        if (emx_prompt_ids(&sm->model, sm->tk, &ps, ids, n_ids, err, sizeof err) != 0)
            return srv_fail(e, 400, "prompt", NULL, "%s", err);
    } else {
        const uint32_t family = sm->model.cfg.chat_template;
        if (family == EMX_CHAT_NONE)
            return srv_fail(e, 400, "messages", NULL, "model %s has no chat template: use /v1/completions", sm->id);
        char *text = render_chat(sm, r, err, sizeof err);
        if (!text) return srv_fail(e, 400, "messages", NULL, "%s", err);
        // As emx_prompt_ids tokenizes a chat (so system + user gives ./run's ids): special
        // tokens parsed, and the template's own BOS instead of the tokenizer's.
        int flags = EMX_ENC_SPECIAL | (emx_chat_template_adds_bos(family) ? 0 : EMX_ENC_BOS);
        size_t n = 0;
        EmxEncodeDrops drops;
        int rc = emx_encode_ex(sm->tk, text, strlen(text), flags, ids, &n, &drops, err, sizeof err);
        free(text);
        if (rc != 0) return srv_fail(e, 400, "messages", NULL, "%s", err);
        *n_ids = (int)n;
    }
    if (*n_ids > sm->ctx) {
        free(*ids);
        *ids = NULL;
        return srv_fail(e, 400, r->kind == SRV_CHAT ? "messages" : "prompt", "context_length_exceeded",
                        "the prompt is %d tokens; the context is %d", *n_ids, sm->ctx);
    }
    return 0;
}

static int add_entries(Gen *g, int index, int id, int pos, int is_stop) {
    if (g->lpt) {
        if (!g->logprobs && !(g->logprobs = cJSON_CreateArray())) return g->oom = 1;
        // The chosen logprob as a float, as its top_logprobs entry has it (the same number twice).
        cJSON *o = srv_token_entry(g->sm->tk, id, (float)g->lpt->last.chosen), *top = cJSON_CreateArray();
        for (int j = 0; j < g->lpt->last.n && j < g->r->top_logprobs; j++)
            cJSON_AddItemToArray(top, srv_token_entry(g->sm->tk, g->lpt->last.id[j], g->lpt->last.logprob[j]));
        cJSON_AddItemToObject(o, "top_logprobs", top);
        cJSON_AddItemToArray(g->logprobs, o);
    }
    if (g->r->metrics) {  // the --metrics line of ./run, as an object
        EmxTokenRecord rec = emx_run_sampler_record(g->rs, g->sm->tk, g->sampler_name, index, id, pos, is_stop);
        char *line = emx_token_log_string(&rec);
        cJSON *o = line ? cJSON_Parse(line) : NULL;
        free(line);
        if (!o || (!g->metrics && !(g->metrics = cJSON_CreateArray()))) return cJSON_Delete(o), g->oom = 1;
        cJSON_AddItemToArray(g->metrics, o);
    }
    return 0;
}

static int on_token(void *user, int index, int id, int pos, const char *text, size_t len, int is_stop) {
    Gen *g = user;
    g->n_tokens = index + 1;
    if (*g->cancel) return 1;
    // A stop token is not part of the completion: no entries (OpenAI's logprobs list the
    // returned tokens only), except in the metrics, where ./run logs it too.
    if (!is_stop && g->lpt && add_entries(g, index, id, pos, 0)) return 1;
    if (g->r->metrics) {
        EmxLogprobTap *lpt = g->lpt;
        g->lpt = NULL;
        int rc = add_entries(g, index, id, pos, is_stop);
        g->lpt = lpt;
        if (rc) return 1;
    }
    return srv_add_text(g, text, len, 0);
}

void srv_request_args(const SrvModel *sm, const SrvRequest *r, EmxCliArgs *a) {
    *a = sm->defaults;
    if (r->has_temperature) a->sampling.temperature = (float)r->temperature, a->temp_given = 1;
    if (r->has_top_p) a->sampling.top_p = (float)r->top_p, a->top_p_given = 1;
    if (r->has_top_k) a->sampling.top_k = r->top_k, a->top_k_given = 1;
    if (r->has_min_p) a->sampling.min_p = (float)r->min_p, a->min_p_given = 1;
    if (r->profile) a->profile = r->profile, a->n_profile_sets = 0;
    const int g = r->rules_given;  // each rule the request gave replaces the server's
    EmxLogitRules *rl = &a->rules;
    if (g & SRV_RULE_PRESENCE) rl->penalties.presence_penalty = r->rules.penalties.presence_penalty;
    if (g & SRV_RULE_FREQUENCY) rl->penalties.frequency_penalty = r->rules.penalties.frequency_penalty;
    if (g & SRV_RULE_REPEAT) rl->penalties.repeat_penalty = r->rules.penalties.repeat_penalty;
    if (g & SRV_RULE_REPEAT_LAST_N) rl->penalties.repeat_last_n = r->rules.penalties.repeat_last_n;
    if (g & SRV_RULE_BIAS) memcpy(rl->bias, r->rules.bias, sizeof rl->bias), rl->n_bias = r->rules.n_bias;
    if (r->json_object || r->json_schema || r->grammar) {  // the request's grammar replaces the server's
        a->grammar_file = a->json_schema_file = NULL;
        a->json_object = r->json_object, a->json_schema = r->json_schema, a->grammar = r->grammar;
    }
    if (r->sampler >= 0) a->sampler = r->sampler, a->sampler_given = 1;
    // ./run's rule: a bare temperature 0 (no sampler named) means greedy.
    if (!a->sampler_given && r->has_temperature && r->temperature <= 0) a->sampler = EMX_SAMPLER_GREEDY;
    // Greedy is temperature 0: a server default of greedy (--temp 0 or --sampler greedy) yields to
    // a request's temperature above 0, which samples with it as OpenAI's servers do; only a request
    // that names greedy itself keeps it whatever its temperature.
    if (r->sampler < 0 && a->sampler == EMX_SAMPLER_GREEDY && r->has_temperature && r->temperature > 0)
        a->sampler = EMX_SAMPLER_COMBINED;
    if (a->sampler != EMX_SAMPLER_AGENTS) return;
    const SrvAgents *ag = &r->agents;  // the pool's flags as the request parser read them
    a->n_agents = ag->n_agents, a->agent_configs = ag->agent_configs, a->lookahead = ag->lookahead;
    a->workers = ag->workers, a->devices = "cpu", a->check_every = ag->check_every;
    a->check_every_given = ag->check_every_given, a->critic_default_off = ag->critic_default_off;
    a->rollback = ag->rollback, a->max_rollbacks = ag->max_rollbacks, a->critic_window = ag->critic_window;
    a->critic_margin = ag->critic_margin, a->critic_model = NULL;
}

// 1 when name is the served model's id followed by SRV_ENTROPIX_ALIAS.
static int is_entropix_alias(const SrvModel *sm, const char *name) {
    const size_t n = strlen(sm->id);
    return !strncmp(name, sm->id, n) && !strcmp(name + n, SRV_ENTROPIX_ALIAS);
}

// The request's own grammar compiles (an error is the client's: 400 naming the field).
static int check_grammar(const SrvRequest *r, SrvError *e) {
    if (!r->json_schema && !r->grammar) return 0;
    EmxGrammar *g = NULL;
    char why[256];
    const int rc = r->grammar ? emx_grammar_parse(r->grammar, strlen(r->grammar), &g, why, sizeof why)
                              : emx_grammar_from_json_schema(r->json_schema, strlen(r->json_schema), &g, why, sizeof why);
    if (g) emx_grammar_free(g);
    if (rc != 0) return srv_fail(e, 400, r->grammar ? "grammar" : "response_format", NULL, "%s", why);
    return 0;
}

int srv_request_check_model(const SrvModel *sm, SrvRequest *r, SrvError *e) {
    char q[128];
    if (r->model && strcmp(r->model, sm->id) != 0) {
        if (!is_entropix_alias(sm, r->model))
            return srv_fail(e, 404, "model", "model_not_found", "the model '%s' does not exist (this server has '%s' and "
                            "'%s" SRV_ENTROPIX_ALIAS "')", srv_quote(r->model, strlen(r->model), 80, q, sizeof q), sm->id, sm->id);
        if (r->sampler >= 0 && r->sampler != EMX_SAMPLER_ENTROPIX)
            return srv_fail(e, 400, "model", NULL, "the model '%s' runs the entropix sampler, but entropix.sampler is %s",
                            srv_quote(r->model, strlen(r->model), 80, q, sizeof q), emx_sampler_kind_name(r->sampler));
        r->sampler = EMX_SAMPLER_ENTROPIX;
    }
    if (r->kind == SRV_CHAT && srv_tools_prepare(sm->model.cfg.chat_template, r, e) != 0) return -1;
    EmxCliArgs a;
    srv_request_args(sm, r, &a);
    if (r->best_of > 1 && (a.sampler == EMX_SAMPLER_AGENTS || a.sampler == EMX_SAMPLER_BRANCH))
        return srv_fail(e, 400, r->n > 1 ? "n" : "best_of", NULL, "%s is %d; sampler %s gives one choice",
                        r->n > 1 ? "n" : "best_of", r->n > 1 ? r->n : r->best_of, emx_sampler_kind_name(a.sampler));
    const int grammar = a.json_object || a.json_schema || a.grammar || a.json_schema_file || a.grammar_file;
    if (!emx_logit_rules_active(&a.rules) && !grammar) return 0;
    const char *param = r->rules_given & SRV_RULE_BIAS ? "logit_bias" : r->rules_given ? "presence_penalty"
                        : r->tool_grammar ? "tool_choice" : r->grammar ? "grammar" : "response_format";
    if (a.sampler == EMX_SAMPLER_AGENTS || a.sampler == EMX_SAMPLER_BRANCH)
        return srv_fail(e, 400, param, NULL, "the penalties, logit_bias, response_format and grammar are not available "
                        "with sampler %s", emx_sampler_kind_name(a.sampler));
    if (check_grammar(r, e) != 0) return -1;
    char why[160];
    if (emx_logit_rules_check(&a.rules, (int)sm->model.cfg.vocab_size, why, sizeof why) != 0)
        return srv_fail(e, 400, "logit_bias", NULL, "%s", why);
    return 0;
}

int srv_request_is_pool(const SrvModel *sm, const SrvRequest *r) {
    EmxCliArgs a;
    srv_request_args(sm, r, &a);
    return a.sampler == EMX_SAMPLER_AGENTS;
}

int srv_request_runs_alone(const SrvModel *sm, const SrvRequest *r) {
    EmxCliArgs a;
    srv_request_args(sm, r, &a);
    return a.sampler == EMX_SAMPLER_AGENTS || a.sampler == EMX_SAMPLER_BRANCH;
}

int srv_cache_match(const SrvCache *c, const int *ids, int n_ids) {
    int k = 0;
    while (k < c->n && k < n_ids - 1 && c->ids[k] == ids[k]) k++;
    return k;
}

// Generates from ids[0..n_ids), of which `cache` holds rows 0..n_cached-1; cache->ids then
// records the whole prompt and every chosen token, cache->n the rows written for sure.
static int run_loop(Gen *g, EmxState *st, SrvCache *cache, const int *ids, int n_ids, int n_cached, int n_predict,
                    EmxSampler *sampler, EmxGenerateStats *stats, SrvError *e) {
    char *flushed = NULL, err[320] = {0};
    size_t flushed_len = 0;
    FILE *out = open_memstream(&flushed, &flushed_len);  // the decoder's final flush lands here
    if (!out) return srv_fail(e, 500, NULL, NULL, "out of memory");
    // Rows past the common prefix are overwritten from here on: until the prompt's forward
    // has run, only the prefix is known (and stays so if that forward fails).
    cache->n = n_cached;
    memcpy(cache->ids + n_cached, ids + n_cached, (size_t)(n_ids - n_cached) * sizeof *ids);
    EmxGenerateOptions go = {.n_predict = n_predict, .out = out, .out_name = "the response", .on_token = on_token,
                             .on_token_user = g, .n_cached = n_cached, .ids_out = cache->ids + n_ids,
                             .ids_cap = cache->cap - n_ids};
    int rc = emx_generate(st, g->sm->tk, ids, n_ids, sampler, &go, stats, err, sizeof err);
    // A token was chosen: the prompt's rows are written, and so is every chosen token's but
    // the last (it is not fed, or its forward is the one that failed or was not run).
    if (stats->n_generated > 0) cache->n = n_ids + stats->n_generated - 1;
    fclose(out);
    if (rc != 0 && !g->stopped && !g->emit_failed && !*g->cancel && !g->oom) {
        free(flushed);
        return srv_fail(e, 500, NULL, NULL, "generation failed: %s", err);
    }
    if (!g->stopped && !g->emit_failed && !*g->cancel) srv_add_text(g, flushed ? flushed : "", flushed_len, 1);
    free(flushed);
    if (!g->emit_failed && (g->logprobs || g->metrics)) srv_flush_text(g, g->sent, 1);  // entries left over
    if (g->oom) return srv_fail(e, 500, NULL, NULL, "out of memory");
    return 0;
}

int srv_generate(const SrvModel *sm, EmxState *st, SrvCache *cache, const SrvRequest *r, const int *ids, int n_ids,
                 atomic_int *cancel, SrvEmit emit, void *emit_user, SrvGenResult *res, SrvError *e) {
    memset(res, 0, sizeof *res);
    EmxCliArgs a;
    srv_request_args(sm, r, &a);
    if (a.sampler == EMX_SAMPLER_AGENTS) return srv_generate_pool(sm, &a, r, ids, n_ids, cancel, emit, emit_user, res, e);
    if (a.sampler == EMX_SAMPLER_BRANCH)
        return srv_generate_branch(sm, st, cache, srv_cache_match(cache, ids, n_ids), r, ids, n_ids, cancel, emit, emit_user,
                                   res, e);
    char err[320] = {0};
    EmxProfile profile = sm->profile;  // loaded at startup; a request may name a built-in one instead
    if (a.sampler == EMX_SAMPLER_ENTROPIX && r->profile && emx_profile_builtin(&profile, r->profile) != 0)
        return srv_fail(e, 400, "entropix.profile", NULL, "entropix.profile must be a built-in profile's name");
    emx_run_profile_flags(&a, &profile);
    const int room = sm->ctx - n_ids + 1;  // every chosen token but the last is fed back
    if (r->max_tokens > room)
        return srv_fail(e, 400, "max_tokens", "context_length_exceeded",
                        "max_tokens is %d; the context of %d has room for %d after the prompt's %d tokens", r->max_tokens,
                        sm->ctx, room, n_ids);
    const int n_predict = r->max_tokens > 0 ? r->max_tokens : (a.n_predict < 0 || a.n_predict > room ? room : a.n_predict);
    res->seed = srv_request_seed(sm, r);
    res->sampler = emx_sampler_kind_name(a.sampler);
    EmxRunSampler rs = {.trie = sm->trie};  // a grammar's mask walks the server's one trie
    if (emx_run_sampler_init(&rs, &a, &profile, &sm->model, sm->tk, sm->ctx, res->seed, r->metrics, err, sizeof err) != 0) {
        emx_run_sampler_free(&rs);
        return srv_fail(e, 500, NULL, NULL, "%s", err);
    }
    emx_run_sampler_prompt(&rs, ids, n_ids);
    EmxLogprobTap lpt;
    EmxSampler *sampler = rs.sampler;
    if (r->logprobs) emx_logprob_tap_init(&lpt, sampler, r->top_logprobs), sampler = &lpt.base;
    Gen g = {.sm = sm, .r = r, .rs = &rs, .lpt = r->logprobs ? &lpt : NULL, .sampler_name = res->sampler,
             .cancel = cancel, .emit = emit, .emit_user = emit_user};
    EmxGenerateStats stats = {0};
    const int n_cached = srv_cache_match(cache, ids, n_ids);
    int rc = run_loop(&g, st, cache, ids, n_ids, n_cached, n_predict, sampler, &stats, e);
    res->n_prompt = n_ids;
    res->n_cached = n_cached;
    res->n_completion = g.n_tokens - (stats.stop == EMX_STOP_TOKEN && !g.stopped ? 1 : 0);
    res->finish_reason = g.stopped || stats.stop == EMX_STOP_TOKEN ? "stop" : "length";
    res->decode_s = stats.decode_s;
    if (rs.entropix) {
        for (int c = 0; c < EMX_CASE_COUNT && c < 8; c++) res->cases[c] = rs.es.case_counts[c];
        res->n_inserted = rs.es.n_inserted;
    }
    emx_run_sampler_free(&rs);
    srv_gen_free(&g);
    return rc;
}
