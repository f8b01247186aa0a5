// tool_calls.h — tool calling between the request and the model's chat template: which
// families can (Qwen3's template writes calls as <tool_call>{"name": N, "arguments":
// A}</tool_call>, Llama 3's as the answer {"name": N, "parameters": A}), the grammar that
// forces a call (tool_choice "required" or a named function), and the calls read back from
// the generated text.
#ifndef ENTROPIX_SERVER_TOOL_CALLS_H
#define ENTROPIX_SERVER_TOOL_CALLS_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "tools/server/request.h"

// Checks r's tools against the model's template family (a 400 naming tools or messages when the
// template has no tool calling) and, when tool_choice forces a call, sets r->grammar to the
// call's GBNF: the family's call syntax around a JSON object {"name": const, "arguments": the
// function's parameters schema} (emx_json_schema_to_gbnf), one alternative per allowed tool.
// 0, or -1 with e.
int srv_tools_prepare(uint32_t family, SrvRequest *r, SrvError *e);

// 1 when the answer is read for calls: tools given and tool_choice is not none.
int srv_tools_active(const SrvRequest *r);

// Qwen3: the <tool_call> blocks of text[0..len) whose JSON parses into {"name": string,
// "arguments": object}; Llama 3: the whole text (after an optional <|python_tag|>) when it
// parses into {"name": string, "parameters" (or "arguments"): object}. An array of OpenAI tool calls {id: "call_<id_base>_<k>", type: "function",
// function: {name, arguments: the arguments as JSON text}} (with "index": k when indexed), or
// NULL when there is none. *content: the text outside those blocks with its surrounding
// whitespace removed (malloc'd), NULL when that is empty or there is no call.
cJSON *srv_tool_calls_parse(uint32_t family, const char *text, size_t len, const char *id_base, int indexed,
                           char **content);

#endif
