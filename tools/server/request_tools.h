// request_tools.h — OpenAI's tool calling fields of a chat request, checked (request.c calls
// these): tools [{type: "function", function: {name, description, parameters, strict}}] (1 ..
// SRV_MAX_TOOLS, names [A-Za-z0-9_-]{1,64} and distinct), tool_choice ("none" | "auto" |
// "required" | {type: "function", function: {name}} naming one of the tools),
// parallel_tool_calls (bool), and in messages: an assistant's tool_calls [{id, type:
// "function", function: {name, arguments: a JSON string}}] (content then may be null) and a
// tool message's tool_call_id. Each error is a 400 naming the field. The legacy functions
// field is refused.
#ifndef ENTROPIX_SERVER_REQUEST_TOOLS_H
#define ENTROPIX_SERVER_REQUEST_TOOLS_H

#include <cjson/cJSON.h>

#include "tools/server/request.h"

// tools, tool_choice, parallel_tool_calls of root into r. 0, or -1 with e.
int srv_parse_tools(const cJSON *root, SrvRequest *r, SrvError *e);
// messages[i]'s tool_calls (assistant) or tool_call_id (tool) into m (its role already set).
int srv_parse_message_tools(const cJSON *msg, int i, SrvMessage *m, SrvError *e);
void srv_tools_free(SrvRequest *r);
void srv_message_tools_free(SrvMessage *m);

// v as Python's json.dumps(v, ensure_ascii=False) writes it (", " and ": " separators, keys in
// order): the bytes a chat template's `tojson` gives. malloc'd; NULL when out of memory.
// A number without a fraction is written as an integer (JSON text does not keep 1.0 apart).
char *srv_py_json(const cJSON *v);
// The same with json.dumps(v, indent=indent) (indent > 0): one item a line, "," between them.
char *srv_py_json_indent(const cJSON *v, int indent);

#endif
