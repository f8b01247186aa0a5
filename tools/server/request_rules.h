// request_rules.h — the request's sampling fields beyond temperature and top_p, as llama-server
// and vLLM take them at the top level of the body: top_k and min_p (also accepted inside the
// "entropix" extension: one of the two), and the logit rules (runtime/logit_filter.h):
//   presence_penalty, frequency_penalty   -2 .. 2 (OpenAI's)
//   repetition_penalty (vLLM's name) or repeat_penalty (llama-server's)   (0, 100], 1: off
//   repeat_last_n   -1 .. 2^30: the tokens it looks back over (llama-server's; default 64)
//   logit_bias   {"token id": bias in -100 .. 100}, at most 300 entries (OpenAI's)
//   response_format   {"type": "text"}, {"type": "json_object"} (any JSON object) or {"type":
//                "json_schema", "json_schema": {"name", "schema", "strict"}} (OpenAI's; the schema
//                compiled by sampler/json_schema.h, strict or not), or
//   grammar      GBNF text (llama-server's; sampler/grammar.h): one of the two
// A pure function of the JSON, as request.c; the ids are checked against the vocabulary by the
// engine, which knows it.
#ifndef ENTROPIX_SERVER_REQUEST_RULES_H
#define ENTROPIX_SERVER_REQUEST_RULES_H

#include <cjson/cJSON.h>

#include "tools/server/request.h"

// The fields of body root into r (r->rules starts as EMX_LOGIT_RULES_OFF). 0, or -1 with e.
int srv_parse_rules(const cJSON *root, SrvRequest *r, SrvError *e);

#endif
