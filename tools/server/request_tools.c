// request_tools.c — tools, tool_choice and the messages' tool calls (request_tools.h).
#include "tools/server/request_tools.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/server/guard.h"
#include "tools/server/request_json.h"

// ---------------------------------------------------------------------------------------------
// Python's json.dumps.

typedef struct {
    char *s;
    size_t n, cap;
    int failed;
} PyBuf;

static void pb_put(PyBuf *b, const char *s, size_t n) {
    if (b->failed) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->n + n + 1) * 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->failed = 1;
            return;
        }
        b->s = p, b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

static void pb_str(PyBuf *b, const char *s) { pb_put(b, s, strlen(s)); }

// A JSON string as json.dumps writes it with ensure_ascii=False: \" \\ \n \r \t \b \f escaped,
// other control characters as \u00XX, everything else (UTF-8 included) as it is.
static void pb_quoted(PyBuf *b, const char *s) {
    pb_put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        const char *map = *p == '"' ? "\\\"" : *p == '\\' ? "\\\\" : *p == '\n' ? "\\n" : *p == '\r' ? "\\r"
                        : *p == '\t' ? "\\t" : *p == '\b' ? "\\b" : *p == '\f' ? "\\f" : NULL;
        if (map) pb_str(b, map);
        else if (*p < 0x20 || *p == 0x7f) snprintf(esc, sizeof esc, "\\u%04x", *p), pb_str(b, esc);
        else pb_put(b, (const char *)p, 1);
    }
    pb_put(b, "\"", 1);
}

// Python's float repr: the shortest digits that read back the same.
static void pb_number(PyBuf *b, double d) {
    char t[40];
    if (d == floor(d) && fabs(d) < 9007199254740992.0) {
        snprintf(t, sizeof t, "%.0f", d);
    } else {
        for (int prec = 1; prec <= 17; prec++) {
            snprintf(t, sizeof t, "%.*g", prec, d);
            if (strtod(t, NULL) == d) break;
        }
    }
    pb_str(b, t);
}

// A newline and the indent of depth levels (indent > 0 only).
static void pb_newline(PyBuf *b, int indent, int depth) {
    pb_str(b, "\n");
    for (int i = 0; i < indent * depth; i++) pb_str(b, " ");
}

static void pb_value(PyBuf *b, const cJSON *v, int depth, int indent) {
    if (depth > 64) return (void)(b->failed = 1);
    if (cJSON_IsObject(v) || cJSON_IsArray(v)) {
        const int obj = cJSON_IsObject(v);
        pb_str(b, obj ? "{" : "[");
        const cJSON *it;
        cJSON_ArrayForEach(it, v) {
            if (it != v->child) pb_str(b, indent ? "," : ", ");
            if (indent) pb_newline(b, indent, depth + 1);
            if (obj) pb_quoted(b, it->string), pb_str(b, ": ");
            pb_value(b, it, depth + 1, indent);
        }
        if (indent && v->child) pb_newline(b, indent, depth);
        pb_str(b, obj ? "}" : "]");
    } else if (cJSON_IsString(v)) {
        pb_quoted(b, v->valuestring);
    } else if (cJSON_IsNumber(v)) {
        pb_number(b, v->valuedouble);
    } else {
        pb_str(b, cJSON_IsTrue(v) ? "true" : cJSON_IsFalse(v) ? "false" : "null");
    }
}

char *srv_py_json(const cJSON *v) { return srv_py_json_indent(v, 0); }

char *srv_py_json_indent(const cJSON *v, int indent) {
    PyBuf b = {0};
    pb_value(&b, v, 0, indent);
    if (b.failed) return free(b.s), NULL;
    return b.s;
}

// ---------------------------------------------------------------------------------------------
// The request's fields.

static int valid_name(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 64) return 0;
    for (size_t i = 0; i < n; i++)
        if (!(s[i] == '_' || s[i] == '-' || (s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'z') ||
              (s[i] >= 'A' && s[i] <= 'Z')))
            return 0;
    return 1;
}

static int parse_tool(const cJSON *t, int i, SrvTool *out, SrvError *e) {
    const cJSON *type = cJSON_IsObject(t) ? srv_field(t, "type") : NULL, *f = cJSON_IsObject(t) ? srv_field(t, "function") : NULL;
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") != 0 || !cJSON_IsObject(f))
        return srv_fail(e, 400, "tools", NULL, "tools[%d] must be {\"type\": \"function\", \"function\": {...}}", i);
    const cJSON *name = srv_field(f, "name"), *params = srv_field(f, "parameters"), *desc = srv_field(f, "description");
    char q[96];
    if (!cJSON_IsString(name) || !valid_name(name->valuestring))
        return srv_fail(e, 400, "tools", NULL, "tools[%d].function.name must be 1 to 64 of a-z, A-Z, 0-9, _ and -%s%s", i,
                        cJSON_IsString(name) ? ", not " : "",
                        cJSON_IsString(name) ? srv_quote(name->valuestring, strlen(name->valuestring), 40, q, sizeof q) : "");
    if (params && !cJSON_IsObject(params))
        return srv_fail(e, 400, "tools", NULL, "tools[%d].function.parameters must be an object (a JSON schema)", i);
    if (desc && !cJSON_IsString(desc))
        return srv_fail(e, 400, "tools", NULL, "tools[%d].function.description must be a string", i);
    const cJSON *strict = srv_field(f, "strict");
    if (strict && !cJSON_IsBool(strict)) return srv_fail(e, 400, "tools", NULL, "tools[%d].function.strict must be a boolean", i);
    out->strict = cJSON_IsTrue(strict);
    out->name = strdup(name->valuestring);
    out->parameters = params ? cJSON_PrintUnformatted(params) : NULL;
    out->json = srv_py_json(t);
    if (!out->name || (params && !out->parameters) || !out->json) return srv_fail(e, 500, "tools", NULL, "out of memory");
    return 0;
}

static int find_tool(const SrvRequest *r, const char *name) {
    for (int i = 0; i < r->n_tools; i++)
        if (!strcmp(r->tools[i].name, name)) return i;
    return -1;
}

static int parse_tool_choice(const cJSON *root, SrvRequest *r, SrvError *e) {
    const cJSON *c = srv_field(root, "tool_choice");
    r->tool_choice = r->n_tools > 0 ? SRV_TOOLS_AUTO : SRV_TOOLS_NONE;
    if (!c) return 0;
    char q[96];
    if (cJSON_IsString(c)) {
        const char *s = c->valuestring;
        if (!strcmp(s, "none")) return r->tool_choice = SRV_TOOLS_NONE, 0;
        if (strcmp(s, "auto") && strcmp(s, "required"))
            return srv_fail(e, 400, "tool_choice", NULL, "tool_choice '%s' is not none, auto, required or an object",
                            srv_quote(s, strlen(s), 24, q, sizeof q));
        if (r->n_tools == 0) return srv_fail(e, 400, "tool_choice", NULL, "tool_choice is %s but no tools are given", s);
        r->tool_choice = !strcmp(s, "auto") ? SRV_TOOLS_AUTO : SRV_TOOLS_REQUIRED;
        return 0;
    }
    const cJSON *type = cJSON_IsObject(c) ? srv_field(c, "type") : NULL, *f = cJSON_IsObject(c) ? srv_field(c, "function") : NULL;
    const cJSON *name = cJSON_IsObject(f) ? srv_field(f, "name") : NULL;
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") || !cJSON_IsString(name))
        return srv_fail(e, 400, "tool_choice", NULL, "tool_choice must be none, auto, required or {\"type\": \"function\", "
                        "\"function\": {\"name\": ...}}");
    if ((r->tool_choice_index = find_tool(r, name->valuestring)) < 0)
        return srv_fail(e, 400, "tool_choice", NULL, "tool_choice names the function '%s', which is not in tools",
                        srv_quote(name->valuestring, strlen(name->valuestring), 64, q, sizeof q));
    r->tool_choice = SRV_TOOLS_FUNCTION;
    return 0;
}

int srv_parse_tools(const cJSON *root, SrvRequest *r, SrvError *e) {
    r->parallel_tool_calls = 1;
    if (srv_field(root, "functions") || srv_field(root, "function_call"))
        return srv_fail(e, 400, srv_field(root, "functions") ? "functions" : "function_call", NULL,
                        "functions and function_call (legacy) are not supported: use tools and tool_choice");
    if (srv_get_bool(root, "parallel_tool_calls", &r->parallel_tool_calls, e)) return -1;
    const cJSON *tools = srv_field(root, "tools"), *t;
    if (tools) {
        const int n = cJSON_IsArray(tools) ? cJSON_GetArraySize(tools) : -1;
        if (n < 1 || n > SRV_MAX_TOOLS)
            return srv_fail(e, 400, "tools", NULL, "tools must be an array of 1 to %d functions", SRV_MAX_TOOLS);
        if (!(r->tools = calloc((size_t)n, sizeof *r->tools))) return srv_fail(e, 500, "tools", NULL, "out of memory");
        cJSON_ArrayForEach(t, tools) {
            if (parse_tool(t, r->n_tools, &r->tools[r->n_tools], e)) return r->n_tools++, -1;
            char q[96];
            if (find_tool(r, r->tools[r->n_tools].name) >= 0)
                return srv_fail(e, 400, "tools", NULL, "tools[%d]: the function '%s' is given twice", r->n_tools,
                                srv_quote(r->tools[r->n_tools].name, strlen(r->tools[r->n_tools].name), 64, q, sizeof q)),
                       r->n_tools++, -1;
            r->n_tools++;
        }
    }
    return parse_tool_choice(root, r, e);
}

static int parse_call(const cJSON *c, int i, int k, SrvToolCall *out, SrvError *e) {
    const cJSON *id = cJSON_IsObject(c) ? srv_field(c, "id") : NULL, *f = cJSON_IsObject(c) ? srv_field(c, "function") : NULL;
    const cJSON *type = cJSON_IsObject(c) ? srv_field(c, "type") : NULL;
    const cJSON *name = cJSON_IsObject(f) ? srv_field(f, "name") : NULL, *args = cJSON_IsObject(f) ? srv_field(f, "arguments") : NULL;
    if (!cJSON_IsString(id) || !cJSON_IsString(name) || !cJSON_IsString(args) ||
        (type && (!cJSON_IsString(type) || strcmp(type->valuestring, "function"))))
        return srv_fail(e, 400, "messages", NULL, "messages[%d].tool_calls[%d] must be {\"id\", \"type\": \"function\", "
                        "\"function\": {\"name\", \"arguments\": a JSON string}}", i, k);
    cJSON *parsed = cJSON_Parse(args->valuestring);
    const int ok = cJSON_IsObject(parsed);
    cJSON_Delete(parsed);
    if (!ok) return srv_fail(e, 400, "messages", NULL, "messages[%d].tool_calls[%d].function.arguments is not a JSON object", i, k);
    out->id = strdup(id->valuestring), out->name = strdup(name->valuestring), out->arguments = strdup(args->valuestring);
    if (!out->id || !out->name || !out->arguments) return srv_fail(e, 500, "messages", NULL, "out of memory");
    return 0;
}

int srv_parse_message_tools(const cJSON *msg, int i, SrvMessage *m, SrvError *e) {
    const cJSON *calls = srv_field(msg, "tool_calls"), *id = srv_field(msg, "tool_call_id"), *c;
    if (!strcmp(m->role, "tool")) {
        if (!cJSON_IsString(id))
            return srv_fail(e, 400, "messages", NULL, "messages[%d] has role tool but no tool_call_id string", i);
        if (!(m->tool_call_id = strdup(id->valuestring))) return srv_fail(e, 500, "messages", NULL, "out of memory");
    }
    if (!calls) return 0;
    const int n = cJSON_IsArray(calls) ? cJSON_GetArraySize(calls) : -1;
    if (strcmp(m->role, "assistant") != 0)
        return srv_fail(e, 400, "messages", NULL, "messages[%d] has tool_calls, which only assistant messages carry", i);
    if (n < 0 || n > SRV_MAX_TOOL_CALLS)
        return srv_fail(e, 400, "messages", NULL, "messages[%d].tool_calls must be an array of up to %d calls", i,
                        SRV_MAX_TOOL_CALLS);
    if (n > 0 && !(m->tool_calls = calloc((size_t)n, sizeof *m->tool_calls)))
        return srv_fail(e, 500, "messages", NULL, "out of memory");
    cJSON_ArrayForEach(c, calls) {
        const int k = m->n_tool_calls++;
        if (parse_call(c, i, k, &m->tool_calls[k], e)) return -1;
    }
    return 0;
}

void srv_message_tools_free(SrvMessage *m) {
    for (int k = 0; k < m->n_tool_calls; k++)
        free(m->tool_calls[k].id), free(m->tool_calls[k].name), free(m->tool_calls[k].arguments);
    free(m->tool_calls);
    free(m->tool_call_id);
}

void srv_tools_free(SrvRequest *r) {
    for (int i = 0; i < r->n_tools; i++) free(r->tools[i].name), free(r->tools[i].parameters), free(r->tools[i].json);
    free(r->tools);
}
