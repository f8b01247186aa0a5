// tool_calls.c — the families' tool calling, the forced call's grammar and the calls read back
// (tool_calls.h).
#include "tools/server/tool_calls.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/model_format.h"
#include "sampler/grammar.h"
#include "sampler/json_schema.h"
#include "tokenizer/chat_template.h"

int srv_tools_active(const SrvRequest *r) { return r->n_tools > 0 && r->tool_choice != SRV_TOOLS_NONE; }

// A parameters schema's $defs / definitions, moved to the call schema's root (defs), where its
// "#/$defs/..." references resolve.
static void hoist_defs(cJSON *params, cJSON *defs) {
    static const char *const keys[] = {"$defs", "definitions"};
    for (int k = 0; k < 2 && cJSON_IsObject(params); k++) {
        cJSON *d = cJSON_DetachItemFromObjectCaseSensitive(params, keys[k]), *it;
        cJSON *to = cJSON_GetObjectItemCaseSensitive(defs, keys[k]);
        if (!to) to = cJSON_AddObjectToObject(defs, keys[k]);
        while (d && (it = d->child)) {
            cJSON_DetachItemViaPointer(d, it);
            cJSON_DeleteItemFromObjectCaseSensitive(to, it->string);  // a later tool's wins
            cJSON_AddItemToObject(to, it->string, it);
        }
        cJSON_Delete(d);
    }
}

// The JSON schema of the call object for the tools tool_choice allows: anyOf one per tool.
static char *call_schema(const SrvRequest *r) {
    cJSON *root = cJSON_CreateObject(), *any = cJSON_CreateArray();
    for (int i = 0; i < r->n_tools; i++) {
        if (r->tool_choice == SRV_TOOLS_FUNCTION && i != r->tool_choice_index) continue;
        cJSON *o = cJSON_CreateObject(), *props;
        cJSON_AddStringToObject(o, "type", "object");
        props = cJSON_AddObjectToObject(o, "properties");
        cJSON_AddStringToObject(cJSON_AddObjectToObject(props, "name"), "const", r->tools[i].name);
        const char *args_key = r->tool_family == EMX_CHAT_LLAMA3 ? "parameters" : "arguments";
        cJSON *params = r->tools[i].parameters ? cJSON_Parse(r->tools[i].parameters)
                                               : cJSON_Parse("{\"type\": \"object\", \"properties\": {}}");
        hoist_defs(params, root);
        cJSON_AddItemToObject(props, args_key, params ? params : cJSON_CreateObject());
        cJSON *req = cJSON_AddArrayToObject(o, "required");
        cJSON_AddItemToArray(req, cJSON_CreateString("name"));
        cJSON_AddItemToArray(req, cJSON_CreateString(args_key));
        cJSON_AddFalseToObject(o, "additionalProperties");
        cJSON_AddItemToArray(any, o);
    }
    cJSON_AddItemToObject(root, "anyOf", any);
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

// Qwen3's call: "<tool_call>\n" JSON "\n</tool_call>", the JSON's root rule renamed "call";
// Llama 3's: the JSON {"name", "parameters"} alone.
static int call_grammar(const SrvRequest *r, char **out, SrvError *e) {
    char *schema = call_schema(r), *gbnf = NULL, why[256];
    if (!schema) return srv_fail(e, 500, "tools", NULL, "out of memory");
    const int rc = emx_json_schema_to_gbnf(schema, strlen(schema), &gbnf, why, sizeof why);
    free(schema);
    if (rc != 0) return srv_fail(e, 400, "tools", NULL, "the forced call's parameters: %s", why);
    if (strncmp(gbnf, "root ::=", 8) != 0) return free(gbnf), srv_fail(e, 500, "tools", NULL, "unexpected schema grammar");
    static const char head[] = "root ::= \"<tool_call>\\n\" call \"\\n</tool_call>\"\ncall";
    char *g = gbnf;
    if (r->tool_family == EMX_CHAT_QWEN3) {
        if (!(g = malloc(strlen(gbnf) + sizeof head))) return free(gbnf), srv_fail(e, 500, "tools", NULL, "out of memory");
        memcpy(g, head, sizeof head - 1);
        strcpy(g + sizeof head - 1, gbnf + 4);
        free(gbnf);
    }
    EmxGrammar *parsed = NULL;
    if (emx_grammar_parse(g, strlen(g), &parsed, why, sizeof why) != 0) {
        free(g);
        return srv_fail(e, 400, "tools", NULL, "the forced call's parameters cannot be constrained: %s", why);
    }
    emx_grammar_free(parsed);
    *out = g;
    return 0;
}

int srv_tools_prepare(uint32_t family, SrvRequest *r, SrvError *e) {
    int history = 0;  // tool turns in the conversation
    for (int i = 0; i < r->n_messages; i++)
        history |= r->messages[i].n_tool_calls > 0 || !strcmp(r->messages[i].role, "tool");
    r->tool_family = (int)family;
    if ((r->n_tools > 0 || history) && family != EMX_CHAT_QWEN3 && family != EMX_CHAT_LLAMA3)
        return srv_fail(e, 400, r->n_tools > 0 ? "tools" : "messages", NULL,
                        "the model's chat template (%s) has no tool calling (qwen3's and llama3's have)",
                        emx_chat_template_name(family) ? emx_chat_template_name(family) : "?");
    if (r->tool_choice != SRV_TOOLS_REQUIRED && r->tool_choice != SRV_TOOLS_FUNCTION) return 0;
    if (r->tool_grammar) return 0;  // prepared already
    for (int i = 0; i < r->n_tools; i++)  // "#" would name the whole call, not the parameters
        if (r->tools[i].parameters && strstr(r->tools[i].parameters, "\"$ref\":\"#\""))
            return srv_fail(e, 400, "tools", NULL, "tools[%d].function.parameters refers to itself (\"$ref\": \"#\"): "
                            "a forced call cannot be constrained by it", i);
    if (r->grammar || r->json_schema || r->json_object)
        return srv_fail(e, 400, "tool_choice", NULL, "a forced tool call and a response_format or grammar: give one");
    if (call_grammar(r, &r->grammar, e) != 0) return -1;
    r->tool_grammar = 1;
    return 0;
}

static const char *find(const char *s, size_t n, const char *pat, size_t m) {
    for (size_t i = 0; i + m <= n; i++)
        if (memcmp(s + i, pat, m) == 0) return s + i;
    return NULL;
}

static int is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// The call in a block's JSON text, or NULL. Llama 3 names the arguments "parameters".
static cJSON *read_call(const char *json, size_t n, const char *id_base, int k, int indexed) {
    cJSON *o = cJSON_ParseWithLength(json, n);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name"), *args = cJSON_GetObjectItemCaseSensitive(o, "arguments");
    if (!args) args = cJSON_GetObjectItemCaseSensitive(o, "parameters");
    char *a = cJSON_IsString(name) && cJSON_IsObject(args) ? cJSON_PrintUnformatted(args) : NULL;
    if (!a) return cJSON_Delete(o), NULL;
    cJSON *c = cJSON_CreateObject(), *f;
    char id[96];
    snprintf(id, sizeof id, "call_%s_%d", id_base, k);
    if (indexed) cJSON_AddNumberToObject(c, "index", k);
    cJSON_AddStringToObject(c, "id", id);
    cJSON_AddStringToObject(c, "type", "function");
    f = cJSON_AddObjectToObject(c, "function");
    cJSON_AddStringToObject(f, "name", name->valuestring);
    cJSON_AddStringToObject(f, "arguments", a);
    free(a);
    cJSON_Delete(o);
    return c;
}

cJSON *srv_tool_calls_parse(uint32_t family, const char *text, size_t len, const char *id_base, int indexed,
                           char **content) {
    static const char open[] = "<tool_call>", close[] = "</tool_call>";
    *content = NULL;
    if (family == EMX_CHAT_LLAMA3) {  // the whole answer is the call, or there is none
        static const char tag[] = "<|python_tag|>";
        while (len && is_space(*text)) text++, len--;
        if (len >= sizeof tag - 1 && !memcmp(text, tag, sizeof tag - 1)) text += sizeof tag - 1, len -= sizeof tag - 1;
        cJSON *c = read_call(text, len, id_base, 0, indexed), *calls = c ? cJSON_CreateArray() : NULL;
        if (c) cJSON_AddItemToArray(calls, c);
        return calls;
    }
    cJSON *calls = NULL;
    char *rest = malloc(len + 1);  // the text outside the calls
    if (!rest) return NULL;
    size_t n_rest = 0, i = 0;
    while (i < len) {
        const char *at = find(text + i, len - i, open, sizeof open - 1);
        const char *end = at ? find(at, len - (size_t)(at - text), close, sizeof close - 1) : NULL;
        if (!end) break;
        const char *j = at + sizeof open - 1;
        cJSON *c = read_call(j, (size_t)(end - j), id_base, calls ? cJSON_GetArraySize(calls) : 0, indexed);
        const size_t upto = (size_t)((c ? at : end + sizeof close - 1) - text);
        memcpy(rest + n_rest, text + i, upto - i);
        n_rest += upto - i;
        if (c) {
            if (!calls) calls = cJSON_CreateArray();
            cJSON_AddItemToArray(calls, c);
        }
        i = (size_t)(end - text) + sizeof close - 1;
    }
    memcpy(rest + n_rest, text + i, len - i);
    n_rest += len - i;
    size_t a = 0;
    while (a < n_rest && is_space(rest[a])) a++;
    while (n_rest > a && is_space(rest[n_rest - 1])) n_rest--;
    if (calls && n_rest > a) {
        memmove(rest, rest + a, n_rest - a);
        rest[n_rest - a] = 0;
        *content = rest;
    } else {
        free(rest);
    }
    return calls;
}
