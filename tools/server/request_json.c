// request_json.c — a request's fields read with their types and ranges checked (request_json.h).
#include "tools/server/request_json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/server/guard.h"

const char *srv_type_name(const cJSON *v) {
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsObject(v)) return "an object";
    return "null";
}

// The field, or NULL when absent or null (OpenAI treats null as "not given").
const cJSON *srv_field(const cJSON *obj, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

int srv_get_number(const cJSON *obj, const char *name, double lo, double hi, int lo_open, int *has, double *out,
                      SrvError *e) {
    const cJSON *v = srv_field(obj, name);
    if (!v) return 0;
    if (!cJSON_IsNumber(v)) return srv_fail(e, 400, name, NULL, "%s must be a number, not %s", name, srv_type_name(v));
    const double d = v->valuedouble;
    if (!isfinite(d) || d > hi || (lo_open ? d <= lo : d < lo))
        return srv_fail(e, 400, name, NULL, "%s is %g; it must be in %s%g, %g]", name, d, lo_open ? "(" : "[", lo, hi);
    *has = 1;
    *out = d;
    return 0;
}

int srv_get_int(const cJSON *obj, const char *name, double lo, double hi, int *has, double *out, SrvError *e) {
    const cJSON *v = srv_field(obj, name);
    if (!v) return 0;
    // cJSON keeps every number as a double: an integer is one whose value has no fraction.
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble))
        return srv_fail(e, 400, name, NULL, "%s must be an integer, not %s", name,
                        cJSON_IsNumber(v) ? "a fraction" : srv_type_name(v));
    if (!(v->valuedouble >= lo && v->valuedouble <= hi))
        return srv_fail(e, 400, name, NULL, "%s is %.17g; it must be in [%.17g, %.17g]", name, v->valuedouble, lo, hi);
    *has = 1;
    *out = v->valuedouble;
    return 0;
}

int srv_get_bool(const cJSON *obj, const char *name, int *out, SrvError *e) {
    const cJSON *v = srv_field(obj, name);
    if (!v) return 0;
    if (!cJSON_IsBool(v)) return srv_fail(e, 400, name, NULL, "%s must be a boolean, not %s", name, srv_type_name(v));
    *out = cJSON_IsTrue(v);
    return 0;
}


// ---------------------------------------------------------------------------------------------
// Duplicate keys.

static int by_key(const void *a, const void *b) {
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

// A key of object o given twice (NULL: none). Objects of a few keys are compared pairwise (the
// first duplicate in the text's order); larger ones sorted, so an object of many keys costs
// n log n, not n^2. *oom on a failed allocation.
static const cJSON *duplicate_key(const cJSON *o, int *oom) {
    int n = 0;
    for (const cJSON *c = o->child; c; c = c->next) n++;
    if (n <= 16) {
        for (const cJSON *a = o->child; a; a = a->next)
            for (const cJSON *b = o->child; b != a; b = b->next)
                if (!strcmp(a->string, b->string)) return a;
        return NULL;
    }
    const cJSON **keys = malloc((size_t)n * sizeof *keys);
    if (!keys) return *oom = 1, NULL;
    int i = 0;
    for (const cJSON *c = o->child; c; c = c->next) keys[i++] = c;
    qsort(keys, (size_t)n, sizeof *keys, by_key);
    const cJSON *dup = NULL;
    for (i = 1; i < n && !dup; i++)
        if (!strcmp(keys[i - 1]->string, keys[i]->string)) dup = keys[i];
    free(keys);
    return dup;
}

// Appends ".key" (the root's keys bare) or "[i]" to path[len..cap) (cut at cap); the new length.
static size_t path_push(char *path, size_t len, size_t cap, const cJSON *item, int index) {
    char q[96];
    int k = item->string ? snprintf(path + len, cap - len, "%s%s", len ? "." : "",
                                    srv_quote(item->string, strlen(item->string), 40, q, sizeof q))
                         : snprintf(path + len, cap - len, "[%d]", index);
    return k < 0 ? len : len + (size_t)k < cap ? len + (size_t)k : cap - 1;
}

// v and what it holds, depth first; path[0..len) names v ("" at the root).
static int check_duplicates(const cJSON *v, char *path, size_t len, size_t cap, SrvError *e) {
    if (cJSON_IsObject(v)) {
        int oom = 0;
        const cJSON *dup = duplicate_key(v, &oom);
        if (oom) return srv_fail(e, 500, NULL, NULL, "out of memory");
        if (dup) {
            char q[96];
            path_push(path, len, cap, dup, 0);
            srv_fail(e, 400, NULL, NULL, "duplicate key '%s'%s%s: give each key once",
                     srv_quote(dup->string, strlen(dup->string), 40, q, sizeof q), len ? " at " : "", len ? path : "");
            snprintf(e->param_path, sizeof e->param_path, "%s", path);
            e->param = e->param_path;
            return -1;
        }
    }
    int i = 0;
    for (const cJSON *c = v->child; c; c = c->next, i++) {
        if (!cJSON_IsObject(c) && !cJSON_IsArray(c)) continue;
        if (check_duplicates(c, path, path_push(path, len, cap, c, i), cap, e) != 0) return -1;
        path[len] = 0;
    }
    return 0;
}

int srv_json_check_duplicates(const cJSON *root, SrvError *e) {
    char path[sizeof e->param_path];
    path[0] = 0;
    return check_duplicates(root, path, 0, sizeof path, e);
}
