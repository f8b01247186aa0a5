// report.c — the --report page's data and writer (report.h).
#include "runtime/report/report.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/errmsg.h"
#include "base/out_file.h"
#include "tokenizer/tok_utf8.h"

typedef struct {
    char *json;      // the token's --metrics object
    int pos;         // its sequence position
    int rolled;      // 1: a rollback took it back
    int round;       // agents: the round that committed it (0: single stream)
} Tok;

struct EmxReport {
    const EmxTokenizer *tk;
    cJSON *meta;     // the page's header: model, prompt, sampler, thresholds, agents
    cJSON *events;   // agents: rounds, verdicts, rollbacks, each with "at" (a token index)
    Tok *tok;
    int n, cap;
    int oom;         // a token or event was lost to memory: the page says it is incomplete
};

// A JSON string of bytes that may be invalid UTF-8 or hold NUL (U+FFFD / '?' instead).
static cJSON *add_text(cJSON *o, const char *key, const char *s, size_t len) {
    size_t n = 0;
    char *clean = tok_utf8_sanitize(s ? s : "", s ? len : 0, &n);
    if (!clean) return NULL;
    for (size_t i = 0; i < n; i++)
        if (clean[i] == 0) clean[i] = '?';
    cJSON *item = cJSON_AddStringToObject(o, key, clean);
    free(clean);
    return item;
}

static void add_thresholds(cJSON *meta, const EmxProfile *p) {
    cJSON *t = cJSON_AddObjectToObject(meta, "thresholds");
    if (!t || !p) return;
    // [name, value] of each line the cases' conditions draw on the two plots
    const struct { const char *plot, *name; double v; } th[] = {
        {"logits_entropy_bits", "LELV H <", p->lelv_entropy_below},
        {"logits_entropy_bits", "HELV H >", p->helv_entropy_above},
        {"logits_entropy_bits", "LEHV H <", p->lehv_entropy_below},
        {"logits_entropy_bits", "HEHV H >", p->hehv_entropy_above},
        {"logits_varentropy_bits2", "LELV V <", p->lelv_varentropy_below},
        {"logits_varentropy_bits2", "HELV V <", p->helv_varentropy_below},
        {"logits_varentropy_bits2", "LEHV V >", p->lehv_varentropy_above},
        {"logits_varentropy_bits2", "HEHV V >", p->hehv_varentropy_above},
    };
    for (size_t i = 0; i < sizeof th / sizeof th[0]; i++) {
        cJSON *arr = cJSON_GetObjectItemCaseSensitive(t, th[i].plot);
        if (!arr) arr = cJSON_AddArrayToObject(t, th[i].plot);
        cJSON *e = cJSON_CreateObject();
        if (!arr || !e) {
            cJSON_Delete(e);
            return;
        }
        cJSON_AddStringToObject(e, "name", th[i].name);
        cJSON_AddNumberToObject(e, "value", th[i].v);
        cJSON_AddItemToArray(arr, e);
    }
}

EmxReport *emx_report_new(const EmxReportInfo *info, const EmxTokenizer *tk) {
    EmxReport *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->tk = tk;
    r->meta = cJSON_CreateObject();
    r->events = cJSON_CreateArray();
    if (!r->meta || !r->events) {
        emx_report_free(r);
        return NULL;
    }
    cJSON *m = r->meta;
    add_text(m, "model", info->model, info->model ? strlen(info->model) : 0);
    add_text(m, "prompt", info->prompt, info->prompt_len);
    cJSON_AddStringToObject(m, "sampler", info->sampler ? info->sampler : "?");
    cJSON_AddBoolToObject(m, "entropix", info->entropix);
    if (info->profile_name) add_text(m, "profile", info->profile_name, strlen(info->profile_name));
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)info->seed);  // beyond a double's 2^53
    cJSON_AddStringToObject(m, "seed", seed);
    cJSON_AddNumberToObject(m, "n_prompt", info->n_prompt);
    add_thresholds(m, info->profile);
    if (info->agents) {
        cJSON *ag = cJSON_AddArrayToObject(m, "agents");
        for (int i = 0; ag && i < info->n_agents; i++) {
            cJSON *e = cJSON_CreateObject();
            if (!e) break;
            cJSON_AddNumberToObject(e, "temperature", info->agents[i].temperature);
            cJSON_AddNumberToObject(e, "top_k", info->agents[i].top_k);
            cJSON_AddItemToArray(ag, e);
        }
    }
    return r;
}

static int push(EmxReport *rep, char *json, int pos, int round) {
    if (!json) {
        rep->oom = 1;
        return -1;
    }
    if (rep->n == rep->cap) {
        int cap = rep->cap ? 2 * rep->cap : 256;
        Tok *t = realloc(rep->tok, (size_t)cap * sizeof *t);
        if (!t) {
            free(json);
            rep->oom = 1;
            return -1;
        }
        rep->tok = t, rep->cap = cap;
    }
    rep->tok[rep->n++] = (Tok){json, pos, 0, round};
    return 0;
}

int emx_report_add_token(EmxReport *rep, const EmxTokenRecord *r) {
    EmxTokenRecord t = *r;
    t.tk = rep->tk;
    if (t.logprobs && t.n_logprobs < EMX_REPORT_TOP) t.n_logprobs = EMX_REPORT_TOP;  // clipped to lp->n
    return push(rep, emx_token_log_string(&t), r->pos, 0);
}

// The JSON {"id", "piece"} of token id.
static cJSON *token_json(const EmxReport *rep, int id) {
    cJSON *e = cJSON_CreateObject();
    if (!e) return NULL;
    cJSON_AddNumberToObject(e, "id", id);
    size_t len = 0;
    const char *s = id >= 0 ? emx_token_bytes_ref(rep->tk, id, &len) : NULL;
    if (s) add_text(e, "piece", s, len);
    else cJSON_AddNullToObject(e, "piece");
    return e;
}

static void round_event(EmxReport *rep, const EmxPoolEvent *ev, cJSON *e) {
    cJSON_AddNumberToObject(e, "winner", ev->winner);
    cJSON_AddNumberToObject(e, "n", ev->n_tokens);
    cJSON *props = cJSON_AddArrayToObject(e, "proposals");
    for (int a = 0; props && a < ev->n_agents; a++) {
        cJSON *p = token_json(rep, ev->agent_token[a]);
        if (!p) break;
        cJSON_AddNumberToObject(p, "agent", a);
        cJSON_AddNumberToObject(p, "score", ev->agent_score[a]);  // NaN -> null: no token
        cJSON_AddItemToArray(props, p);
    }
    for (int j = 0; j < ev->n_tokens; j++) {
        const int pos = ev->pos + j, id = ev->tokens[j];
        EmxSamplerParams sp = {.temperature = NAN, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f};
        EmxMetrics mm = {.logits_entropy_bits = ev->logits_entropy[j], .logits_varentropy_bits2 = ev->logits_varentropy[j],
                         .logits_lse_nats = NAN, .attn_entropy_bits = NAN, .attn_varentropy_heads_bits2 = NAN,
                         .attn_varentropy_true_bits2 = NAN, .attn_agreement = NAN, .attn_interaction_strength = NAN};
        cJSON *ag = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(rep->meta, "agents"), ev->winner);
        if (ag) {
            sp.temperature = (float)cJSON_GetObjectItemCaseSensitive(ag, "temperature")->valuedouble;
            sp.top_k = cJSON_GetObjectItemCaseSensitive(ag, "top_k")->valueint;
        }
        int n_prompt = cJSON_GetObjectItemCaseSensitive(rep->meta, "n_prompt")->valueint;
        EmxTokenRecord r = {.index = pos - n_prompt, .id = id, .pos = pos, .is_stop = emx_is_stop(rep->tk, id),
                            .sampler = "agents", .metrics = &mm, .params = &sp, .score = NAN, .is_agent = 1,
                            .agent = ev->winner, .proposal_entropy_bits = ev->entropy[j],
                            .logprobs = ev->logprobs ? &ev->logprobs[j] : NULL, .n_logprobs = EMX_REPORT_TOP,
                            .tk = rep->tk};
        r.piece = emx_token_bytes_ref(rep->tk, id, &r.piece_len);
        push(rep, emx_token_log_string(&r), pos, ev->round);
    }
}

void emx_report_pool_event(void *user, const EmxPoolEvent *ev) {
    EmxReport *rep = user;
    cJSON *e = cJSON_CreateObject();
    if (!e) {
        rep->oom = 1;
        return;
    }
    cJSON_AddNumberToObject(e, "round", ev->round);
    cJSON_AddNumberToObject(e, "pos", ev->pos);
    cJSON_AddNumberToObject(e, "at", rep->n);  // the token index the event comes before
    if (ev->kind == EMX_POOL_EVENT_ROUND) {
        cJSON_AddStringToObject(e, "kind", "round");
        round_event(rep, ev, e);
    } else if (ev->kind == EMX_POOL_EVENT_VERDICT) {
        cJSON_AddStringToObject(e, "kind", "verdict");
        cJSON_AddBoolToObject(e, "bad", ev->bad);
        cJSON_AddBoolToObject(e, "accepted", ev->accepted);
        cJSON_AddNumberToObject(e, "logp_good", ev->logp_good);
        cJSON_AddNumberToObject(e, "logp_bad", ev->logp_bad);
    } else {
        cJSON_AddStringToObject(e, "kind", "rollback");
        cJSON_AddNumberToObject(e, "n_dropped", ev->n_dropped);
        cJSON_AddItemToObject(e, "ban", token_json(rep, ev->ban));
        // the live tokens at positions >= pos are the ones dropped, newest first
        for (int i = rep->n - 1; i >= 0 && rep->tok[i].pos >= ev->pos; i--)
            if (!rep->tok[i].rolled) rep->tok[i].rolled = 1;
    }
    cJSON_AddItemToArray(rep->events, e);
}

// Writes s with '<', '>' and '&' as \u escapes: the blob sits in a <script> element, where
// "</script>" or "<!--" in a token would end or change it. In JSON these bytes occur only
// inside strings (cJSON writes no others), where the escape means the same character.
static void put_escaped(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '<') fputs("\\u003c", f);
        else if (*s == '>') fputs("\\u003e", f);
        else if (*s == '&') fputs("\\u0026", f);
        else fputc(*s, f);
    }
}

static void write_data(const EmxReport *rep, FILE *f) {
    cJSON_AddBoolToObject(rep->meta, "incomplete", rep->oom);
    char *meta = cJSON_PrintUnformatted(rep->meta);
    char *events = cJSON_PrintUnformatted(rep->events);
    fputs("{\"meta\":", f);
    put_escaped(f, meta ? meta : "{\"incomplete\":true}");
    fputs(",\"tokens\":[", f);
    for (int i = 0; i < rep->n; i++) {
        if (i) fputc(',', f);
        put_escaped(f, rep->tok[i].json);
    }
    fputs("],\"state\":[", f);
    for (int i = 0; i < rep->n; i++) fprintf(f, "%s[%d,%d]", i ? "," : "", rep->tok[i].rolled, rep->tok[i].round);
    fputs("],\"events\":", f);
    put_escaped(f, events ? events : "[]");
    fputs("}", f);
    free(meta);
    free(events);
    cJSON_DeleteItemFromObjectCaseSensitive(rep->meta, "incomplete");
}

int emx_report_write(EmxReport *rep, const char *path, char *err, size_t errlen) {
    static const char marker[] = "/*EMX_REPORT_DATA*/";
    const char *at = strstr(emx_report_template, marker);
    if (!at) {
        emx_seterr(err, errlen, "%s: the built-in report template has no data marker", path);
        return -1;
    }
    EmxOut o;  // written whole: a temporary file beside it, renamed over it (base/out_file.h)
    if (emx_out_open(&o, path, EMX_OUT_REPLACE, err, errlen) != 0) return -1;
    fwrite(emx_report_template, 1, (size_t)(at - emx_report_template), o.f);
    write_data(rep, o.f);
    fputs(at + sizeof marker - 1, o.f);
    return emx_out_close(&o, err, errlen);
}

void emx_report_free(EmxReport *rep) {
    if (!rep) return;
    for (int i = 0; i < rep->n; i++) free(rep->tok[i].json);
    free(rep->tok);
    cJSON_Delete(rep->meta);
    cJSON_Delete(rep->events);
    free(rep);
}
