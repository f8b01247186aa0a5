// request_json.h — reading one field of a request's JSON with its type and range checked, the
// error naming the field (request.c, request_branch.c, request_rules.c). null is "not given",
// as OpenAI treats it.
#ifndef ENTROPIX_SERVER_REQUEST_JSON_H
#define ENTROPIX_SERVER_REQUEST_JSON_H

#include <cjson/cJSON.h>

#include "tools/server/request.h"

// The field, or NULL when absent or null.
const cJSON *srv_field(const cJSON *obj, const char *name);
// "a string", "a number", ... for an error message.
const char *srv_type_name(const cJSON *v);

// Each: absent leaves *has and *out alone and returns 0; else checks, sets *has = 1 and *out
// and returns 0, or -1 with e (400, param `name`). A number lies in [lo, hi] ((lo, hi] with
// lo_open); an integer is a number without a fraction.
int srv_get_number(const cJSON *obj, const char *name, double lo, double hi, int lo_open, int *has, double *out,
                   SrvError *e);
int srv_get_int(const cJSON *obj, const char *name, double lo, double hi, int *has, double *out, SrvError *e);
int srv_get_bool(const cJSON *obj, const char *name, int *out, SrvError *e);

// A key given twice in one object of the tree under root, at any depth: Python's json (OpenAI's
// and vLLM's servers) keeps the last value, cJSON the first, so a client could believe its second
// value was used. 0, or -1 with e: 400 "duplicate key 'K' at PATH", param PATH (messages[2].content,
// the root's keys bare). One pass; an object of many keys is sorted, not compared pairwise.
int srv_json_check_duplicates(const cJSON *root, SrvError *e);

#endif
