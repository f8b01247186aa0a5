// request_json.c — a request's fields read with their types and ranges checked (request_json.h).
#include "tools/server/request_json.h"

#include <math.h>

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

