// json_schema.c — JSON Schema (read with cJSON) -> GBNF text (json_schema.h), and the built-in
// json_object grammar of grammar.h.
//
// Each schema node becomes a rule "<hint>-<n>" (hint: the property or $defs name); the JSON
// primitives are the fixed rules of JSON_RULES below. An object's properties keep their declared
// order; the optional ones may each be left out, and the commas follow from which are present:
// the first present property is one of the properties up to the first required one, and each
// later one is written `"," kv` (required) or `("," kv)?` (optional).
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/errmsg.h"
#include "sampler/json_schema.h"
#include "sampler/json_schema_format.h"
#include "sampler/json_schema_pattern.h"

// The primitives (whitespace bounded as llama.cpp's: a model cannot loop on it; numbers of at
// most 16 digits per part; strings with JSON's escapes and no raw control characters).
static const char JSON_RULES[] =
    "space ::= | \" \" | \"\\n\" [ \\t]{0,20}\n"
    "value ::= object | array | string | number | boolean | null\n"
    "object ::= \"{\" space ( string \":\" space value ( \",\" space string \":\" space value )* )? \"}\" space\n"
    "array ::= \"[\" space ( value ( \",\" space value )* )? \"]\" space\n"
    "string ::= \"\\\"\" char* \"\\\"\" space\n"
    "char ::= [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n"
    "number ::= integral ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,16} )? space\n"
    "integer ::= integral space\n"
    "integral ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} )\n"
    "boolean ::= ( \"true\" | \"false\" ) space\n"
    "null ::= \"null\" space\n";

enum { MAX_REFS = 1024, NAME_MAX_LEN = 64, MAX_SCHEMA_DEPTH = 64 };

typedef EmxText Buf;

typedef struct {
    const cJSON *root;
    Buf out;  // rule definitions
    char *err;
    size_t errlen;
    int failed, n_rules, depth;
    unsigned formats;  // the formats used (bits of json_schema_format.h's indices)
    char *ref_path[MAX_REFS];
    char ref_name[MAX_REFS][NAME_MAX_LEN];
    int n_refs;
} Conv;

__attribute__((format(printf, 2, 3))) static int fail(Conv *c, const char *fmt, ...) {
    if (c->failed) return -1;
    c->failed = 1;
    char what[400], line[480];
    va_list ap;
    va_start(ap, fmt);
    emx_vseterr(what, sizeof what, fmt, ap);
    va_end(ap);
    // keys and pointers come from the schema: their control characters are escaped (one line)
    return emx_seterr(c->err, c->errlen, "json schema: %s", emx_escape(what, sizeof what, line, sizeof line));
}

// A JSON pointer one level down (~ and / escaped); "" is the root. Into out.
static void ptr_child(char *out, size_t cap, const char *ptr, const char *key) {
    size_t o = (size_t)snprintf(out, cap, "%s/", ptr);
    for (const char *k = key; *k && o + 3 < cap; k++) {
        if (*k == '~') out[o++] = '~', out[o++] = '0';
        else if (*k == '/') out[o++] = '~', out[o++] = '1';
        else out[o++] = *k;
    }
    out[o < cap ? o : cap - 1] = 0;
}

static const char *shown(const char *ptr) { return *ptr ? ptr : "/"; }

// A fresh rule name from a hint (only [A-Za-z0-9], at most 24 of them).
static void new_name(Conv *c, const char *hint, char *name) {
    char h[32];
    size_t o = 0;
    for (const char *p = hint; *p && o < 24; p++)
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9')) h[o++] = *p;
    h[o] = 0;
    snprintf(name, NAME_MAX_LEN, "%s-%d", o ? h : "s", ++c->n_rules);
}

// A GBNF string literal of the bytes s (escaping what GBNF needs).
static void put_literal(Buf *b, const char *s) {
    emx_text_put(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') emx_text_put(b, "\\%c", *p);
        else if (*p < 0x20 || *p == 0x7F) emx_text_put(b, "\\x%02X", *p);
        else emx_text_put(b, "%c", *p);
    }
    emx_text_put(b, "\"");
}

// A JSON value's exact text as a literal, then space.
static int put_json_literal(Conv *c, Buf *b, const cJSON *v) {
    char *text = cJSON_PrintUnformatted(v);
    if (!text) return fail(c, "out of memory");
    put_literal(b, text);
    emx_text_put(b, " space");
    free(text);
    return 0;
}

static int gen(Conv *c, const cJSON *sch, const char *ptr, const char *hint, char *name);

static const char *const SUPPORTED[] = {"type", "properties", "required", "additionalProperties", "items",
                                        "minItems", "maxItems", "enum", "const", "anyOf", "$ref", "$defs",
                                        "definitions", "minLength", "maxLength", "pattern", "format",
                                        "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL};
static const char *const ANNOTATIONS[] = {"title", "description", "$schema", "$id", "$comment", "default", "examples", NULL};

static int in_list(const char *const *list, const char *s) {
    for (int i = 0; list[i]; i++)
        if (strcmp(list[i], s) == 0) return 1;
    return 0;
}

static int check_keywords(Conv *c, const cJSON *sch, const char *ptr) {
    for (const cJSON *k = sch->child; k; k = k->next)
        if (!in_list(SUPPORTED, k->string) && !in_list(ANNOTATIONS, k->string))
            return fail(c, "'%s' at %s is not supported", k->string, shown(ptr));
    return 0;
}

// A non-negative integer keyword, or def when absent.
static int count_kw(Conv *c, const cJSON *sch, const char *kw, const char *ptr, long def, long *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(sch, kw);
    *out = def;
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 100000 || v->valuedouble != (double)(long)v->valuedouble)
        return fail(c, "'%s' at %s is not an integer from 0 to 100000", kw, shown(ptr));
    *out = (long)v->valuedouble;
    return 0;
}

// {m,n} (n < 0: unbounded) after a symbol.
static void put_repeat(Buf *b, long m, long n) {
    if (n < 0) emx_text_put(b, "{%ld,}", m);
    else emx_text_put(b, "{%ld,%ld}", m, n);
}

// A string with a pattern or a format (either, without length bounds).
static int gen_string_shaped(Conv *c, const cJSON *sch, const cJSON *pat, const cJSON *fmt, const char *ptr, Buf *b) {
    if (pat && fmt) return fail(c, "'pattern' and 'format' together at %s are not supported", shown(ptr));
    const char *kw = pat ? "pattern" : "format";
    if (cJSON_GetObjectItemCaseSensitive(sch, "minLength") || cJSON_GetObjectItemCaseSensitive(sch, "maxLength"))
        return fail(c, "'%s' with 'minLength' or 'maxLength' at %s is not supported", kw, shown(ptr));
    if (!cJSON_IsString(pat ? pat : fmt)) return fail(c, "'%s' at %s is not a string", kw, shown(ptr));
    if (fmt) {
        int f = emx_format_index(fmt->valuestring);
        if (f < 0)
            return fail(c, "format '%.100s' at %s is not supported (date, time, date-time, uuid, email, ipv4)",
                        fmt->valuestring, shown(ptr));
        c->formats |= 1u << f;
        emx_text_put(b, "\"\\\"\" %s \"\\\"\" space", emx_format_rule_name(f));
        return 0;
    }
    char msg[300];
    emx_text_put(b, "\"\\\"\" ");
    if (emx_pattern_to_gbnf(pat->valuestring, "char", b, msg, sizeof msg))
        return fail(c, "'pattern' at %s: %s", shown(ptr), msg);
    emx_text_put(b, " \"\\\"\" space");
    return 0;
}

static int gen_string(Conv *c, const cJSON *sch, const char *ptr, Buf *b) {
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(sch, "pattern"), *fmt = cJSON_GetObjectItemCaseSensitive(sch, "format");
    if (pat || fmt) return gen_string_shaped(c, sch, pat, fmt, ptr, b);
    long lo, hi;
    if (count_kw(c, sch, "minLength", ptr, 0, &lo) || count_kw(c, sch, "maxLength", ptr, -1, &hi)) return -1;
    if (hi >= 0 && hi < lo) return fail(c, "maxLength below minLength at %s", shown(ptr));
    if (lo == 0 && hi < 0) emx_text_put(b, "string");
    else {
        emx_text_put(b, "\"\\\"\" char");
        put_repeat(b, lo, hi);
        emx_text_put(b, " \"\\\"\" space");
    }
    return 0;
}

static const char *const BOUNDS[] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};

// An integer with bounds: the exact range of integers they leave.
static int gen_integer(Conv *c, const cJSON *sch, const char *ptr, Buf *b) {
    int has_lo = 0, has_hi = 0;
    int64_t lo = 0, hi = 0;
    for (int k = 0; k < 4; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(sch, BOUNDS[k]);
        if (!v) continue;
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return fail(c, "'%s' at %s is not a number", BOUNDS[k], shown(ptr));
        double d = v->valuedouble;
        if (fabs(d) > (double)EMX_INT_BOUND_MAX)
            return fail(c, "'%s' at %s is beyond 2^53 - 1 in magnitude (not supported)", BOUNDS[k], shown(ptr));
        // the least integer allowed above a lower bound, the greatest below an upper one
        int64_t v64 = k == 0 ? (int64_t)ceil(d) : k == 1 ? (int64_t)floor(d) + 1 : k == 2 ? (int64_t)floor(d) : (int64_t)ceil(d) - 1;
        if (k < 2 && (!has_lo || v64 > lo)) lo = v64, has_lo = 1;
        if (k >= 2 && (!has_hi || v64 < hi)) hi = v64, has_hi = 1;
    }
    if (!has_lo && !has_hi) {
        emx_text_put(b, "integer");
        return 0;
    }
    if (has_lo && has_hi && lo > hi) return fail(c, "no integer is within the bounds at %s", shown(ptr));
    emx_int_range_gbnf(b, has_lo, lo, has_hi, hi);
    emx_text_put(b, " space");
    return 0;
}

// A number: "minimum": 0 (no minus sign) is the one bound written exactly.
static int gen_number(Conv *c, const cJSON *sch, const char *ptr, Buf *b) {
    int non_negative = 0;
    for (int k = 0; k < 4; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(sch, BOUNDS[k]);
        if (!v) continue;
        if (k == 0 && cJSON_IsNumber(v) && v->valuedouble == 0) {
            non_negative = 1;
            continue;
        }
        return fail(c, "'%s' on a number at %s is not supported (only \"minimum\": 0; an integer takes any bounds)",
                    BOUNDS[k], shown(ptr));
    }
    if (!non_negative) emx_text_put(b, "number");
    else emx_text_put(b, "( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,16} )? space");
    return 0;
}

static int gen_array(Conv *c, const cJSON *sch, const char *ptr, Buf *b) {
    long lo, hi;
    if (count_kw(c, sch, "minItems", ptr, 0, &lo) || count_kw(c, sch, "maxItems", ptr, -1, &hi)) return -1;
    if (hi >= 0 && hi < lo) return fail(c, "maxItems below minItems at %s", shown(ptr));
    char item[NAME_MAX_LEN] = "value", p2[512];
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(sch, "items");
    ptr_child(p2, sizeof p2, ptr, "items");
    if (items && gen(c, items, p2, "item", item)) return -1;
    if (hi == 0) {
        emx_text_put(b, "\"[\" space \"]\" space");
        return 0;
    }
    emx_text_put(b, "\"[\" space %s%s ( \",\" space %s )", lo == 0 ? "( " : "", item, item);
    put_repeat(b, lo ? lo - 1 : 0, hi < 0 ? -1 : hi - 1);
    emx_text_put(b, "%s \"]\" space", lo == 0 ? " )?" : "");
    return 0;
}

enum { MAX_PROPS = 256 };

static int gen_object(Conv *c, const cJSON *sch, const char *ptr, Buf *b) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(sch, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(sch, "required");
    const cJSON *extra = cJSON_GetObjectItemCaseSensitive(sch, "additionalProperties");
    if (extra && !cJSON_IsBool(extra) && !cJSON_IsObject(extra))
        return fail(c, "'additionalProperties' at %s is not a boolean", shown(ptr));
    int closed = extra && cJSON_IsFalse(extra);
    if (!props && !closed) {  // no properties named: any object
        emx_text_put(b, "object");
        return 0;
    }
    if (extra && !closed) return fail(c, "'additionalProperties' at %s: only false is supported beside properties", shown(ptr));
    if (props && !cJSON_IsObject(props)) return fail(c, "'properties' at %s is not an object", shown(ptr));
    if (req && !cJSON_IsArray(req)) return fail(c, "'required' at %s is not an array", shown(ptr));
    int n = cJSON_GetArraySize(props);
    if (n > MAX_PROPS) return fail(c, "over %d properties at %s", MAX_PROPS, shown(ptr));
    char(*kv)[NAME_MAX_LEN] = calloc(n ? (size_t)n : 1, NAME_MAX_LEN);
    int *required = calloc(n ? (size_t)n : 1, sizeof *required);
    if (!kv || !required) {
        free(kv);
        free(required);
        return fail(c, "out of memory");
    }
    int i = 0, rc = 0;
    char pp[512], p2[512];
    ptr_child(pp, sizeof pp, ptr, "properties");
    for (const cJSON *p = props ? props->child : NULL; p && rc == 0; p = p->next, i++) {
        char value[NAME_MAX_LEN];
        ptr_child(p2, sizeof p2, pp, p->string);
        if ((rc = gen(c, p, p2, p->string, value))) break;
        new_name(c, p->string, kv[i]);  // the rule `"key" space ":" space value`
        Buf def = {0};
        emx_text_put(&def, "%s-kv ::= ", kv[i]);
        cJSON *key = cJSON_CreateString(p->string);
        char *kt = key ? cJSON_PrintUnformatted(key) : NULL;
        cJSON_Delete(key);
        if (!kt) rc = fail(c, "out of memory");
        else put_literal(&def, kt);
        free(kt);
        emx_text_put(&def, " space \":\" space %s\n", value);
        emx_text_put(&c->out, "%s", def.n ? def.s : "");
        if (def.oom) rc = fail(c, "out of memory");
        free(def.s);
        for (const cJSON *r = req ? req->child : NULL; r; r = r->next)
            if (cJSON_IsString(r) && strcmp(r->valuestring, p->string) == 0) required[i] = 1;
    }
    for (const cJSON *r = req ? req->child : NULL; r && rc == 0; r = r->next)
        if (!cJSON_IsString(r) || !cJSON_GetObjectItemCaseSensitive(props, r->valuestring))
            rc = fail(c, "'required' at %s names '%s', which is not in its properties", shown(ptr),
                      cJSON_IsString(r) ? r->valuestring : "(not a string)");
    if (rc == 0) {
        emx_text_put(b, "\"{\" space");
        if (n) emx_text_put(b, " (");
        for (int first = 0; first < n; first++) {  // the first property present
            emx_text_put(b, "%s %s-kv", first ? " |" : "", kv[first]);
            for (int j = first + 1; j < n; j++) emx_text_put(b, required[j] ? " \",\" space %s-kv" : " ( \",\" space %s-kv )?", kv[j]);
            if (required[first]) break;
            if (first == n - 1) emx_text_put(b, " |");  // every property optional: none at all
        }
        if (n) emx_text_put(b, " )");
        emx_text_put(b, " \"}\" space");
    }
    free(kv);
    free(required);
    return rc;
}

static int gen_type(Conv *c, const cJSON *sch, const char *type, const char *ptr, Buf *b) {
    if (!strcmp(type, "object")) return gen_object(c, sch, ptr, b);
    if (!strcmp(type, "array")) return gen_array(c, sch, ptr, b);
    if (!strcmp(type, "string")) return gen_string(c, sch, ptr, b);
    if (!strcmp(type, "integer")) return gen_integer(c, sch, ptr, b);
    if (!strcmp(type, "number")) return gen_number(c, sch, ptr, b);
    if (!strcmp(type, "boolean") || !strcmp(type, "null")) {
        emx_text_put(b, "%s", type);
        return 0;
    }
    return fail(c, "type '%s' at %s is not supported", type, shown(ptr));
}

// $ref: the rule of "#", "#/$defs/x" or "#/definitions/x", made once (a recursive reference
// finds the rule's name already given).
static int gen_ref(Conv *c, const cJSON *ref, const char *ptr, char *name) {
    if (!cJSON_IsString(ref)) return fail(c, "'$ref' at %s is not a string", shown(ptr));
    const char *r = ref->valuestring;
    for (int i = 0; i < c->n_refs; i++)
        if (!strcmp(c->ref_path[i], r)) return snprintf(name, NAME_MAX_LEN, "%s", c->ref_name[i]) < 0;
    const cJSON *target = NULL;
    const char *def = NULL;
    if (!strcmp(r, "#")) target = c->root, def = "root";
    else if (!strncmp(r, "#/$defs/", 8)) def = r + 8, target = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c->root, "$defs"), def);
    else if (!strncmp(r, "#/definitions/", 14)) def = r + 14, target = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c->root, "definitions"), def);
    else return fail(c, "$ref '%.200s' at %s is not supported (only #, #/$defs/NAME and #/definitions/NAME)", r, shown(ptr));
    if (!target) return fail(c, "$ref '%.200s' at %s names no definition", r, shown(ptr));
    if (c->n_refs == MAX_REFS) return fail(c, "over %d definitions", MAX_REFS);
    int k = c->n_refs++;
    if (!(c->ref_path[k] = strdup(r))) return fail(c, "out of memory");
    new_name(c, def, c->ref_name[k]);
    snprintf(name, NAME_MAX_LEN, "%s", c->ref_name[k]);
    char tp[512];
    snprintf(tp, sizeof tp, "%.500s", r + 1);
    char inner[NAME_MAX_LEN];
    int rc = gen(c, target, tp, def, inner);
    emx_text_put(&c->out, "%s ::= %s\n", name, inner);
    return rc;
}

// Alternatives from an array keyword (enum: literal values; anyOf: schemas).
static int gen_alternatives(Conv *c, const cJSON *arr, const char *kw, const char *ptr, const char *hint, Buf *b) {
    if (!cJSON_IsArray(arr) || !arr->child) return fail(c, "'%s' at %s is not a non-empty array", kw, shown(ptr));
    char p2[512], idx[16], sub[NAME_MAX_LEN];
    int i = 0;
    emx_text_put(b, "( ");
    for (const cJSON *v = arr->child; v; v = v->next, i++) {
        if (i) emx_text_put(b, " | ");
        if (!strcmp(kw, "enum")) {
            if (put_json_literal(c, b, v)) return -1;
            continue;
        }
        snprintf(idx, sizeof idx, "%d", i);
        char pk[512];
        ptr_child(pk, sizeof pk, ptr, kw);
        ptr_child(p2, sizeof p2, pk, idx);
        if (gen(c, v, p2, hint, sub)) return -1;
        emx_text_put(b, "%s", sub);
    }
    emx_text_put(b, " )");
    return 0;
}

static int gen_body(Conv *c, const cJSON *sch, const char *ptr, const char *hint, Buf *b) {
    const cJSON *v;
    if ((v = cJSON_GetObjectItemCaseSensitive(sch, "const"))) return put_json_literal(c, b, v);
    if ((v = cJSON_GetObjectItemCaseSensitive(sch, "enum"))) return gen_alternatives(c, v, "enum", ptr, hint, b);
    if ((v = cJSON_GetObjectItemCaseSensitive(sch, "anyOf"))) return gen_alternatives(c, v, "anyOf", ptr, hint, b);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(sch, "type");
    if (cJSON_IsString(type)) return gen_type(c, sch, type->valuestring, ptr, b);
    if (cJSON_IsArray(type) && type->child) {
        emx_text_put(b, "( ");
        for (const cJSON *t = type->child; t; t = t->next) {
            if (!cJSON_IsString(t)) return fail(c, "'type' at %s holds a non-string", shown(ptr));
            if (t != type->child) emx_text_put(b, " | ");
            if (gen_type(c, sch, t->valuestring, ptr, b)) return -1;
        }
        emx_text_put(b, " )");
        return 0;
    }
    if (type) return fail(c, "'type' at %s is neither a string nor a non-empty array", shown(ptr));
    if (cJSON_GetObjectItemCaseSensitive(sch, "properties")) return gen_object(c, sch, ptr, b);
    if (cJSON_GetObjectItemCaseSensitive(sch, "items")) return gen_array(c, sch, ptr, b);
    static const char *const TYPED[] = {"pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL};
    for (int i = 0; TYPED[i]; i++)  // they hold of the strings or numbers among any values: not written
        if (cJSON_GetObjectItemCaseSensitive(sch, TYPED[i]))
            return fail(c, "'%s' at %s is supported only beside a \"type\"", TYPED[i], shown(ptr));
    emx_text_put(b, "value");  // no constraint: any JSON value
    return 0;
}

// The rule of schema `sch` at JSON pointer ptr: its name into name (a primitive's, a new
// rule's, or a definition's).
static int gen(Conv *c, const cJSON *sch, const char *ptr, const char *hint, char *name) {
    if (c->failed) return -1;
    if (cJSON_IsTrue(sch)) return snprintf(name, NAME_MAX_LEN, "value") < 0;
    if (cJSON_IsFalse(sch)) return fail(c, "schema false at %s matches nothing", shown(ptr));
    if (!cJSON_IsObject(sch)) return fail(c, "the schema at %s is not an object", shown(ptr));
    if (check_keywords(c, sch, ptr)) return -1;
    if (c->depth >= MAX_SCHEMA_DEPTH) return fail(c, "schema nested over %d deep at %s", MAX_SCHEMA_DEPTH, shown(ptr));
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(sch, "$ref");
    if (ref) return gen_ref(c, ref, ptr, name);
    c->depth++;
    Buf b = {0};
    int rc = gen_body(c, sch, ptr, hint, &b);
    c->depth--;
    new_name(c, hint, name);
    if (rc == 0) emx_text_put(&c->out, "%s ::= %s\n", name, b.n ? b.s : "");
    if (b.oom) rc = fail(c, "out of memory");
    free(b.s);
    return rc;
}

int emx_json_schema_to_gbnf(const char *schema, size_t len, char **gbnf, char *err, size_t errlen) {
    *gbnf = NULL;
    cJSON *root = cJSON_ParseWithLength(schema ? schema : "", schema ? len : 0);
    if (!root) return emx_seterr(err, errlen, "json schema: the schema is not valid JSON");
    Conv *c = calloc(1, sizeof *c);  // 70 KB of definition names: not on a server thread's stack
    if (!c) {
        cJSON_Delete(root);
        return emx_seterr(err, errlen, "json schema: out of memory");
    }
    c->root = root, c->err = err, c->errlen = errlen;
    char top[NAME_MAX_LEN];
    int rc = gen(c, root, "", "root", top);
    if (rc == 0 && c->out.oom) rc = fail(c, "out of memory");
    if (rc == 0) {
        Buf text = {0};
        emx_text_put(&text, "root ::= %s\n%s", top, emx_text_str(&c->out));
        emx_format_put_rules(&text, c->formats);
        emx_text_put(&text, "%s", JSON_RULES);
        if (text.oom) rc = fail(c, "out of memory"), free(text.s);
        else *gbnf = text.s;
    }
    for (int i = 0; i < c->n_refs; i++) free(c->ref_path[i]);
    free(c->out.s);
    free(c);
    cJSON_Delete(root);
    return rc ? -1 : 0;
}

int emx_grammar_from_json_schema(const char *schema, size_t len, EmxGrammar **out, char *err, size_t errlen) {
    *out = NULL;
    char *gbnf = NULL;
    if (emx_json_schema_to_gbnf(schema, len, &gbnf, err, errlen)) return -1;
    int rc = emx_grammar_parse(gbnf, strlen(gbnf), out, err, errlen);
    free(gbnf);
    return rc;
}

int emx_grammar_json_object(EmxGrammar **out, char *err, size_t errlen) {
    Buf text = {0};
    emx_text_put(&text, "root ::= object\n%s", JSON_RULES);
    if (text.oom) return emx_seterr(err, errlen, "grammar: out of memory");
    int rc = emx_grammar_parse(text.s, text.n, out, err, errlen);
    free(text.s);
    return rc;
}
