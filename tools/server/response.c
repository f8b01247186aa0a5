// response.c — OpenAI response bodies and SSE chunks (response.h).
#include "tools/server/response.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tools/server/srv_error.h"
#include "tools/server/tool_calls.h"

void srv_response_init(SrvResponse *s, const SrvRequest *r, const char *model, unsigned long serial) {
    memset(s, 0, sizeof *s);
    s->r = r;
    s->model = model;
    s->created = (long)time(NULL);
    snprintf(s->id, sizeof s->id, "%s-%lx%lx", r->kind == SRV_CHAT ? "chatcmpl" : "cmpl", (unsigned long)s->created,
             serial);
}

void srv_response_free(SrvResponse *s) {
    free(s->text);
    cJSON_Delete(s->choices);
    cJSON_Delete(s->logprobs);
    cJSON_Delete(s->metrics);
    memset(s, 0, sizeof *s);
}

// Chat entries -> the completions' legacy logprobs object, text_offset counted from *offset.
static cJSON *legacy_logprobs(const cJSON *entries, size_t *offset) {
    cJSON *o = cJSON_CreateObject();
    cJSON *tokens = cJSON_AddArrayToObject(o, "tokens"), *lps = cJSON_AddArrayToObject(o, "token_logprobs");
    cJSON *tops = cJSON_AddArrayToObject(o, "top_logprobs"), *offs = cJSON_AddArrayToObject(o, "text_offset");
    const cJSON *e;
    cJSON_ArrayForEach(e, entries) {
        cJSON_AddItemToArray(tokens, cJSON_Duplicate(cJSON_GetObjectItem(e, "token"), 1));
        cJSON_AddItemToArray(lps, cJSON_Duplicate(cJSON_GetObjectItem(e, "logprob"), 1));
        cJSON *top = cJSON_CreateObject();
        const cJSON *t;
        cJSON_ArrayForEach(t, cJSON_GetObjectItem(e, "top_logprobs")) {
            const char *tok = cJSON_GetStringValue(cJSON_GetObjectItem(t, "token"));
            if (tok && !cJSON_GetObjectItemCaseSensitive(top, tok))  // two ids can share a text
                cJSON_AddNumberToObject(top, tok, cJSON_GetNumberValue(cJSON_GetObjectItem(t, "logprob")));
        }
        cJSON_AddItemToArray(tops, top);
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)*offset));
        *offset += (size_t)cJSON_GetArraySize(cJSON_GetObjectItem(e, "bytes"));
    }
    return o;
}

// choices[0] with text (content or delta) and entries; takes the entries.
static cJSON *choice(SrvResponse *s, cJSON *text, int delta, int role, cJSON *logprobs, cJSON *metrics,
                     const char *finish) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", s->index);
    if (s->r->kind == SRV_CHAT) {
        cJSON *m = cJSON_AddObjectToObject(c, delta ? "delta" : "message");
        if (role || !delta) cJSON_AddStringToObject(m, "role", "assistant");
        if (text) cJSON_AddItemToObject(m, "content", text);
    } else {
        cJSON_AddItemToObject(c, "text", text ? text : cJSON_CreateString(""));
    }
    if (!s->r->logprobs || !logprobs) {
        cJSON_AddNullToObject(c, "logprobs");
        cJSON_Delete(logprobs);
    } else if (s->r->kind == SRV_CHAT) {
        cJSON *lp = cJSON_AddObjectToObject(c, "logprobs");
        cJSON_AddItemToObject(lp, "content", logprobs);
    } else {
        cJSON_AddItemToObject(c, "logprobs", legacy_logprobs(logprobs, &s->offset));
        cJSON_Delete(logprobs);
    }
    if (metrics) cJSON_AddItemToObject(cJSON_AddObjectToObject(c, "entropix"), "tokens", metrics);
    if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
    else cJSON_AddNullToObject(c, "finish_reason");
    return c;
}

static cJSON *envelope(SrvResponse *s, int chunk) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", s->id);
    cJSON_AddStringToObject(o, "object", s->r->kind == SRV_COMPLETION ? "text_completion"
                                         : chunk                      ? "chat.completion.chunk"
                                                                      : "chat.completion");
    cJSON_AddNumberToObject(o, "created", (double)s->created);
    cJSON_AddStringToObject(o, "model", s->model);
    // As OpenAI: with include_usage every chunk has "usage", null but in the last one
    if (chunk && s->r->include_usage) cJSON_AddNullToObject(o, "usage");
    return o;
}

// "FIELDSdata: {json}\n\n" for o (deleted), one write: fields, SSE lines before the data ("" or
// "retry: 1000\n"), stay in the same event.
static int send_event_with(SrvResponse *s, const char *fields, cJSON *o) {
    char *j = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!j) return -1;
    const size_t f = strlen(fields), n = strlen(j);
    char *ev = malloc(f + n + 9);
    if (!ev) return free(j), -1;
    memcpy(ev, fields, f);
    memcpy(ev + f, "data: ", 6);
    memcpy(ev + f + 6, j, n);
    memcpy(ev + f + 6 + n, "\n\n", 3);
    int rc = s->write(s->write_user, ev, f + n + 8);
    free(ev);
    free(j);
    return rc;
}

static int send_event(SrvResponse *s, cJSON *o) { return send_event_with(s, "", o); }

static int send_choice(SrvResponse *s, cJSON *c) {
    cJSON *o = envelope(s, 1);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"), c);
    return send_event(s, o);
}

static int start_stream(SrvResponse *s) {
    if (s->started || s->r->kind != SRV_CHAT) return s->started = 1, 0;
    s->started = 1;  // OpenAI's first chat chunk: the role and an empty content
    return send_choice(s, choice(s, cJSON_CreateString(""), 1, 1, NULL, NULL, NULL));
}

static void append_entries(cJSON **to, cJSON *from) {
    if (!from) return;
    if (!*to) {
        *to = from;
        return;
    }
    while (from->child) cJSON_AddItemToArray(*to, cJSON_DetachItemViaPointer(from, from->child));
    cJSON_Delete(from);
}

int srv_response_emit(void *user, const char *text, size_t len, cJSON *logprobs, cJSON *metrics) {
    SrvResponse *s = user;
    if (s->r->stream && srv_tools_active(s->r)) {  // calls are read from the whole answer: held back
        if (start_stream(s) != 0) return cJSON_Delete(logprobs), cJSON_Delete(metrics), -1;
    } else if (s->r->stream) {
        if (start_stream(s) != 0) return cJSON_Delete(logprobs), cJSON_Delete(metrics), -1;
        return send_choice(s, choice(s, srv_text_json(text, len), 1, 0, logprobs, metrics, NULL));
    }
    if (s->len + len + 1 > s->cap) {
        size_t cap = (s->len + len + 1) * 2;
        char *t = realloc(s->text, cap);
        if (!t) return cJSON_Delete(logprobs), cJSON_Delete(metrics), -1;
        s->text = t, s->cap = cap;
    }
    memcpy(s->text + s->len, text, len);
    s->len += len;
    s->text[s->len] = 0;
    append_entries(&s->logprobs, logprobs);
    append_entries(&s->metrics, metrics);
    return 0;
}

// The prompt once, the completions of every choice (as OpenAI counts n > 1).
static cJSON *usage(const SrvResponse *s, const SrvGenResult *res) {
    cJSON *u = cJSON_CreateObject();
    const int completion = s->completion_done + res->n_completion;
    cJSON_AddNumberToObject(u, "prompt_tokens", res->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", completion);
    cJSON_AddNumberToObject(u, "total_tokens", res->n_prompt + completion);
    // As OpenAI: the prompt tokens whose rows came from the slot's cache (not computed again).
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "prompt_tokens_details"), "cached_tokens",
                            s->index > 0 ? s->first_cached : res->n_cached);  // the first choice's prefill
    return u;
}

static cJSON *extension(const SrvResponse *s, const SrvGenResult *res) {
    static const char *names[] = {"LELV", "HELV", "LEHV", "HEHV", "ADAPTIVE"};
    cJSON *x = cJSON_CreateObject();
    // With n > 1 the first choice's (choice i drew with seed + i). Written as the integer itself:
    // cJSON would print a double with 15 digits (8000000000000001 as 8e+15), not the seed that ran.
    char seed[24];
    snprintf(seed, sizeof seed, "%" PRIu64, s->index > 0 ? s->first_seed : res->seed);
    if (!res->branch) cJSON_AddItemToObject(x, "seed", cJSON_CreateRaw(seed));
    cJSON_AddStringToObject(x, "sampler", res->sampler ? res->sampler : "");
    const cJSON *b;  // the branching decoder's forks, answer and paths (it draws nothing: no seed)
    cJSON_ArrayForEach(b, res->branch) cJSON_AddItemToObject(x, b->string, cJSON_Duplicate(b, 1));
    if (res->sampler && strcmp(res->sampler, "entropix") == 0) {
        cJSON *c = cJSON_AddObjectToObject(x, "cases");
        for (int i = 0; i < 5; i++) cJSON_AddNumberToObject(c, names[i], (double)res->cases[i]);
        cJSON_AddNumberToObject(x, "pauses_inserted", (double)res->n_inserted);
    }
    if (res->cut) cJSON_AddTrueToObject(x, "shutdown");  // the server stopped it: the text is cut there
    if (res->pool) {  // what the agent pool did (./run's closing stats)
        cJSON *p = cJSON_AddObjectToObject(x, "pool");
        cJSON_AddNumberToObject(p, "rounds", res->n_rounds);
        cJSON_AddNumberToObject(p, "checks", res->n_checks);
        cJSON_AddNumberToObject(p, "bad", res->n_bad);
        cJSON_AddNumberToObject(p, "rollbacks", res->n_rollbacks);
        cJSON_AddNumberToObject(p, "rolled_back_tokens", res->n_rolled_back_tokens);
        cJSON_AddNumberToObject(p, "bad_accepted", res->n_bad_accepted);
    }
    return x;
}

// Tools: the calls in the choice's whole answer go in message (or delta).tool_calls, the text
// outside them in content (null when none), and the finish reason becomes "tool_calls".
static void read_calls(SrvResponse *s, cJSON *c, int delta) {
    if (s->r->kind != SRV_CHAT || !srv_tools_active(s->r)) return;
    char base[64], *content = NULL;
    const char *dash = strchr(s->id, '-');
    snprintf(base, sizeof base, "%s_%d", dash ? dash + 1 : s->id, s->index);
    cJSON *calls = srv_tool_calls_parse((uint32_t)s->r->tool_family, s->text ? s->text : "", s->len, base, delta, &content);
    if (!calls) return;
    cJSON *m = cJSON_GetObjectItem(c, delta ? "delta" : "message");
    cJSON_ReplaceItemInObject(m, "content", content ? cJSON_CreateString(content) : cJSON_CreateNull());
    if (delta && !content) cJSON_DeleteItemFromObject(m, "content");
    cJSON_AddItemToObject(m, "tool_calls", calls);
    cJSON_ReplaceItemInObject(c, "finish_reason", cJSON_CreateString("tool_calls"));
    free(content);
}

// The mean natural-log probability of the tokens of entries (-inf when there are none: an empty
// candidate ranks last): best_of's ranking, OpenAI's "highest log probability per token".
static double mean_logprob(const cJSON *entries) {
    double sum = 0;
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, entries) sum += cJSON_GetNumberValue(cJSON_GetObjectItem(e, "logprob")), n++;
    return n ? sum / n : -INFINITY;
}

// best_of past n: of the candidates in `all` (deleted), the n of the highest score, best first
// (ties: the earlier), re-indexed 0..n-1.
static cJSON *best_choices(const SrvResponse *s, cJSON *all) {
    const int m = cJSON_GetArraySize(all), n = s->r->n;
    if (s->r->best_of <= n || m <= n || m > SRV_MAX_N) return all;
    cJSON *kept = cJSON_CreateArray();
    int taken[SRV_MAX_N] = {0};
    for (int k = 0; k < n; k++) {
        int best = -1;
        for (int i = 0; i < m; i++)
            if (!taken[i] && (best < 0 || s->score[i] > s->score[best])) best = i;
        taken[best] = 1;
        cJSON *c = cJSON_Duplicate(cJSON_GetArrayItem(all, best), 1);
        cJSON_ReplaceItemInObject(c, "index", cJSON_CreateNumber(k));
        cJSON_AddItemToArray(kept, c);
    }
    cJSON_Delete(all);
    return kept;
}

// Non-stream (and a stream with tools): the choice's whole text and entries (taken: the next
// choice starts empty).
static cJSON *whole_choice(SrvResponse *s, const SrvGenResult *res) {
    const int delta = s->r->stream;
    if (s->r->logprobs && !s->logprobs) s->logprobs = cJSON_CreateArray();  // no tokens: an empty list
    if (s->index < SRV_MAX_N) s->score[s->index] = mean_logprob(s->logprobs);
    cJSON *c = choice(s, srv_text_json(s->text ? s->text : "", s->len), delta, !delta, s->logprobs, s->metrics,
                      res->finish_reason);
    read_calls(s, c, delta);
    s->logprobs = s->metrics = NULL;
    s->len = 0, s->offset = 0;
    return c;
}

// A stream with tools: the held-back answer in one chunk (its calls whole, as the openai client
// accumulates them) and the finish reason the last chunk reports.
static int flush_held(SrvResponse *s, const SrvGenResult *res, const char **finish) {
    *finish = res->finish_reason;
    if (s->r->kind != SRV_CHAT || !srv_tools_active(s->r)) return 0;
    cJSON *c = whole_choice(s, res);
    const cJSON *f = cJSON_GetObjectItem(c, "finish_reason");
    if (cJSON_IsString(f) && !strcmp(f->valuestring, "tool_calls")) *finish = "tool_calls";
    cJSON_ReplaceItemInObject(c, "finish_reason", cJSON_CreateNull());
    return send_choice(s, c);
}

int srv_response_next_choice(SrvResponse *s, const SrvGenResult *res) {
    if (s->index == 0) s->first_cached = res->n_cached, s->first_seed = res->seed;
    s->completion_done += res->n_completion;
    if (s->r->stream) {  // this choice's last chunk; the next one starts with its role again
        const char *finish;
        if (start_stream(s) != 0 || flush_held(s, res, &finish) != 0) return -1;
        cJSON *c = choice(s, s->r->kind == SRV_CHAT ? NULL : cJSON_CreateString(""), 1, 0, NULL, NULL, finish);
        if (send_choice(s, c) != 0) return -1;
        s->started = 0, s->offset = 0;
    } else {
        if (!s->choices) s->choices = cJSON_CreateArray();
        cJSON_AddItemToArray(s->choices, whole_choice(s, res));
    }
    s->index++;
    return 0;
}

int srv_response_stream_end(SrvResponse *s, const SrvGenResult *res) {
    const char *finish;
    if (start_stream(s) != 0 || flush_held(s, res, &finish) != 0) return -1;
    cJSON *c = choice(s, s->r->kind == SRV_CHAT ? NULL : cJSON_CreateString(""), 1, 0, NULL, NULL, finish);
    cJSON *o = envelope(s, 1);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"), c);
    cJSON_AddItemToObject(o, "entropix", extension(s, res));  // which sampler ran, its seed
    if (send_event(s, o) != 0) return -1;
    if (s->r->include_usage) {  // as OpenAI: a last chunk with no choices and the usage
        o = envelope(s, 1);
        cJSON_AddArrayToObject(o, "choices");
        cJSON_ReplaceItemInObject(o, "usage", usage(s, res));
        if (send_event(s, o) != 0) return -1;
    }
    return s->write(s->write_user, "data: [DONE]\n\n", 14);
}

int srv_response_stream_error(SrvResponse *s, const SrvError *e) {
    char *j = srv_error_json(e);
    if (!j) return -1;
    cJSON *o = cJSON_Parse(j);
    free(j);
    if (!o) return -1;
    // A 503's status line went out as 200 before it (a stream queued when the drain began), so no
    // Retry-After header can say when to try again: the event says it, in SSE's retry field
    // (milliseconds, what an EventSource waits before it reconnects) and in error.retry_after (seconds)
    char fields[32] = "";
    if (e->status == 503 || e->status == 429) {
        cJSON_AddNumberToObject(cJSON_GetObjectItem(o, "error"), "retry_after", SRV_RETRY_AFTER_S);
        snprintf(fields, sizeof fields, "retry: %d\n", SRV_RETRY_AFTER_S * 1000);
    }
    if (send_event_with(s, fields, o) != 0) return -1;
    return s->write(s->write_user, "data: [DONE]\n\n", 14);
}

char *srv_response_body(SrvResponse *s, const SrvGenResult *res) {
    cJSON *o = envelope(s, 0);
    cJSON *choices = s->choices ? s->choices : cJSON_CreateArray();
    s->choices = NULL;
    cJSON_AddItemToArray(choices, whole_choice(s, res));
    cJSON_AddItemToObject(o, "choices", best_choices(s, choices));
    cJSON_AddItemToObject(o, "usage", usage(s, res));
    cJSON_AddItemToObject(o, "entropix", extension(s, res));  // which sampler ran, its seed
    char *j = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return j;
}
