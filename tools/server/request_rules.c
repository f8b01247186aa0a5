// request_rules.c — top_k, min_p, the penalties and logit_bias of a request (request_rules.h).
#include "tools/server/request_rules.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tools/server/guard.h"
#include "tools/server/request_json.h"

// logit_bias: {"15043": -100, ...}. Each key a token id in decimal, each value in
// [-EMX_LOGIT_BIAS_MAX, EMX_LOGIT_BIAS_MAX] (OpenAI's [-100, 100]).
static int parse_logit_bias(const cJSON *root, EmxLogitRules *rules, SrvError *e) {
    const cJSON *o = srv_field(root, "logit_bias"), *it;
    if (!o) return 0;
    if (!cJSON_IsObject(o))
        return srv_fail(e, 400, "logit_bias", NULL, "logit_bias must be an object of token ids to biases, not %s",
                        srv_type_name(o));
    cJSON_ArrayForEach(it, o) {
        char q[64];
        const char *k = it->string, *quoted = srv_quote(k, strlen(k), 24, q, sizeof q);
        char *end;
        errno = 0;
        const long id = strtol(k, &end, 10);
        if (end == k || *end || k[0] == '-' || k[0] == '+' || errno == ERANGE || id > 2147483647L)
            return srv_fail(e, 400, "logit_bias", NULL, "logit_bias key '%s' is not a token id", quoted);
        if (!cJSON_IsNumber(it) || !(fabs(it->valuedouble) <= EMX_LOGIT_BIAS_MAX))
            return srv_fail(e, 400, "logit_bias", NULL, "logit_bias['%s'] must be a number in [-%g, %g]", quoted,
                            EMX_LOGIT_BIAS_MAX, EMX_LOGIT_BIAS_MAX);
        if (rules->n_bias == EMX_MAX_LOGIT_BIAS)
            return srv_fail(e, 400, "logit_bias", NULL, "logit_bias has more than %d entries", EMX_MAX_LOGIT_BIAS);
        rules->bias[rules->n_bias++] = (EmxLogitBias){.id = (int)id, .bias = (float)it->valuedouble};
    }
    return 0;
}

// response_format {"type": "text" | "json_object" | "json_schema", "json_schema": {"name",
// "schema", "strict"}} (OpenAI's), or grammar: GBNF text (llama-server's): one of them.
static int parse_format(const cJSON *root, SrvRequest *r, SrvError *e) {
    const cJSON *f = srv_field(root, "response_format"), *g = srv_field(root, "grammar");
    if (g && !cJSON_IsString(g)) return srv_fail(e, 400, "grammar", NULL, "grammar must be a string (GBNF), not %s", srv_type_name(g));
    if (g && !(r->grammar = strdup(g->valuestring))) return srv_fail(e, 500, "grammar", NULL, "out of memory");
    if (!f) return 0;
    const cJSON *type = cJSON_IsObject(f) ? srv_field(f, "type") : NULL;
    if (!cJSON_IsString(type))
        return srv_fail(e, 400, "response_format", NULL, "response_format must be an object with a string type");
    if (!strcmp(type->valuestring, "text")) return 0;
    if (g) return srv_fail(e, 400, "grammar", NULL, "grammar and a response_format of %s: give one", type->valuestring);
    if (!strcmp(type->valuestring, "json_object")) return r->json_object = 1, 0;
    char q[64];
    if (strcmp(type->valuestring, "json_schema") != 0)
        return srv_fail(e, 400, "response_format", NULL, "response_format type '%s' is not text, json_object or json_schema",
                        srv_quote(type->valuestring, strlen(type->valuestring), 24, q, sizeof q));
    const cJSON *js = srv_field(f, "json_schema"), *schema = cJSON_IsObject(js) ? srv_field(js, "schema") : NULL;
    if (!cJSON_IsObject(schema))
        return srv_fail(e, 400, "response_format", NULL, "response_format json_schema needs json_schema.schema, an object");
    if (!(r->json_schema = cJSON_PrintUnformatted(schema))) return srv_fail(e, 500, "response_format", NULL, "out of memory");
    return 0;
}

int srv_parse_rules(const cJSON *root, SrvRequest *r, SrvError *e) {
    EmxPenalties *p = &r->rules.penalties;
    int has = 0;
    double d = 0;
    if (srv_get_int(root, "top_k", -1, 1 << 20, &r->has_top_k, &d, e)) return -1;
    if (r->has_top_k) r->top_k = (int)d;
    if (srv_get_number(root, "min_p", 0, 1, 0, &r->has_min_p, &r->min_p, e)) return -1;
    const double pm = EMX_PRESENCE_PENALTY_MAX;  // presence and frequency (sampler/penalties.h)
    if (srv_get_number(root, "presence_penalty", -pm, pm, 0, &has, &d, e)) return -1;
    if (has) p->presence_penalty = (float)d, r->rules_given |= SRV_RULE_PRESENCE, has = 0;
    if (srv_get_number(root, "frequency_penalty", -pm, pm, 0, &has, &d, e)) return -1;
    if (has) p->frequency_penalty = (float)d, r->rules_given |= SRV_RULE_FREQUENCY, has = 0;
    if (srv_field(root, "repetition_penalty") && srv_field(root, "repeat_penalty"))
        return srv_fail(e, 400, "repeat_penalty", NULL, "repetition_penalty and repeat_penalty are the same option: give one");
    const char *rep = srv_field(root, "repeat_penalty") ? "repeat_penalty" : "repetition_penalty";
    if (srv_get_number(root, rep, 0, EMX_REPEAT_PENALTY_MAX, 1, &has, &d, e)) return -1;
    if (has) p->repeat_penalty = (float)d, r->rules_given |= SRV_RULE_REPEAT, has = 0;
    if (srv_get_int(root, "repeat_last_n", -1, EMX_REPEAT_LAST_N_MAX, &has, &d, e)) return -1;
    if (has) p->repeat_last_n = (int)d, r->rules_given |= SRV_RULE_REPEAT_LAST_N;
    if (srv_field(root, "logit_bias")) r->rules_given |= SRV_RULE_BIAS;
    return parse_logit_bias(root, &r->rules, e) || parse_format(root, r, e) ? -1 : 0;
}
