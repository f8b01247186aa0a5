// request.h — an OpenAI-style request body (POST /v1/chat/completions, /v1/completions) parsed
// into a struct with every type and range checked: a pure function of the bytes, no model, no
// I/O (tests/test_server_request.c, and libFuzzer's tests/fuzz/fuzz_server.c). What depends on
// the model (the model's name, the prompt against the context) is checked later, by the engine.
//
// Fields read (OpenAI's names and meanings; docs/server.md):
//   model (string, optional: NULL when absent or null), messages (chat: [{role: system|user|assistant|developer|tool,
//   content: string | [{type: "text", text}], tool_calls, tool_call_id}], at least one) or prompt (completions: string,
//   or an array holding one string), max_tokens / max_completion_tokens (1 ..
//   SRV_MAX_TOKENS), temperature (0 .. 2), top_p (0 < p <= 1), seed (integer >= 0; -1: drawn), stop
//   (string or array of up to SRV_MAX_STOP non-empty strings), stream, stream_options
//   {include_usage}, logprobs (chat: bool; completions: integer 0 .. 20), top_logprobs (chat,
//   0 .. 20, needs logprobs), n (1 .. SRV_MAX_N), best_of (completions: n .. SRV_MAX_N, not streamed
//   past n; chat ignores it as an unknown field), echo (completions: false only), and top_k, min_p,
//   the penalties and logit_bias (request_rules.h), tools, tool_choice and parallel_tool_calls
//   (request_tools.h). null is the same as absent. Unknown fields are ignored, as
//   most OpenAI-compatible servers do, so newer clients keep working.
//   The extension "entropix": {sampler, profile (a built-in profile's name), top_k, min_p (or at the top level),
//   metrics (bool)}, and for sampler "agents" the pool's options under tools/eval's names (n or
//   agents, agent_configs, lookahead, workers, check_every, window or critic_window, margin or
//   critic_margin, rollback, max_rollbacks, critic (bool)), each checked by ./run's own parser
//   as the flag it stands for; devices and critic_model are refused; for sampler "branch" the
//   branching decoder's (request_branch.h). A key the extension does not know is refused (a
//   misspelt option must not silently do nothing).
#ifndef ENTROPIX_SERVER_REQUEST_H
#define ENTROPIX_SERVER_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/branch/branch_options.h"
#include "runtime/logit_filter.h"
#include "tools/server/srv_error.h"

#define SRV_MAX_STOP 4
#define SRV_MAX_STOP_LEN 256
#define SRV_MAX_MESSAGES 1024
#define SRV_MAX_TOKENS (1 << 20)
#define SRV_MAX_LOGPROBS 20
#define SRV_MAX_N 16          // choices per request (each a generation on the request's slot)
// The agent pool's options a client may set, bounded beyond ./run's own ranges: what one
// request may cost the server (each is docs/server.md's; the pool's memory is admitted apart).
#define SRV_MAX_WORKERS 8     // CPU workers (a model replica each)
#define SRV_MAX_AGENTS 32     // agents (./run: 64)
#define SRV_MAX_ROLLBACK 64   // tokens a BAD verdict drops (./run: 2^30)
#define SRV_MAX_ROLLBACKS 16  // rollbacks before a BAD verdict is let through (./run: 2^30)
#define SRV_MAX_WINDOW 2048   // tokens of text the critic reads (./run: 2^20; the critic's context is 2048)
// The branching decoder's (k is ./run's 2..16, an entry ./run's 64 bytes and 16 tokens).
#define SRV_MAX_FORKS 16      // forks per generation (./run: 2^20)
#define SRV_MAX_ALPHABET 128  // answer entries (./run: 256): each candidate's answer costs a pass per
                              // 16 entries and entry token
#define SRV_MAX_CUE 256       // bytes of the answer cue (./run: no bound)

enum srv_kind { SRV_CHAT = 1, SRV_COMPLETION = 2 };
enum { SRV_RULE_PRESENCE = 1, SRV_RULE_FREQUENCY = 2, SRV_RULE_REPEAT = 4, SRV_RULE_REPEAT_LAST_N = 8, SRV_RULE_BIAS = 16 };

#define SRV_MAX_TOOLS 64
#define SRV_MAX_TOOL_CALLS 64  // per assistant message

// An assistant message's function call (OpenAI's tool_calls[i]): all owned.
typedef struct {
    char *id, *name;
    char *arguments;  // JSON text, as the client sent the string
} SrvToolCall;

typedef struct {
    char *role;      // "system", "user", "assistant", "tool" (developer is read as system)
    char *content;   // malloc'd UTF-8 (text parts joined; "" for an assistant's null content)
    char *tool_call_id;        // role tool: the call it answers (owned)
    SrvToolCall *tool_calls;   // role assistant: [n_tool_calls] (owned)
    int n_tool_calls;
} SrvMessage;

// tools[i] (type "function"): the function's name, its parameters schema as JSON text (NULL:
// none given), and the whole tool object as the chat templates' tojson writes it.
typedef struct {
    char *name, *parameters, *json;
    int strict;
} SrvTool;

enum srv_tool_choice { SRV_TOOLS_AUTO = 0, SRV_TOOLS_NONE, SRV_TOOLS_REQUIRED, SRV_TOOLS_FUNCTION };

// The agent pool's settings (sampler "agents"): the EmxCliArgs fields ./run's parser gave the
// flags the extension's keys stand for (its defaults where a key is absent).
typedef struct {
    int n_agents;             // --agents
    char *agent_configs;      // --agent-configs (owned) or NULL
    int lookahead, workers, check_every, check_every_given, critic_default_off;
    int rollback, max_rollbacks, critic_window;
    float critic_margin;
} SrvAgents;

typedef struct {
    int kind;                 // enum srv_kind
    char *model;
    SrvMessage *messages;     // chat: [n_messages]
    int n_messages;
    char *prompt;             // completions; NUL-terminated (a NUL inside is refused)
    int max_tokens;           // -1: not given
    int n;                    // choices, 1 .. SRV_MAX_N
    int best_of;              // candidates generated, n .. SRV_MAX_N (completions' best_of; n when absent):
                              // the n of the highest mean logprob per token are returned
    int has_temperature, has_top_p, has_seed;
    double temperature, top_p;
    uint64_t seed;
    int draw_seed;            // seed -1: one drawn from the clock, whatever the server's -s
    char *stop[SRV_MAX_STOP];
    int n_stop;
    int stream, include_usage;
    int logprobs;             // 0/1: token logprobs wanted
    int top_logprobs;         // alternatives per token (0 .. SRV_MAX_LOGPROBS)
    // the "entropix" extension
    int sampler;              // enum emx_sampler_kind, -1: the server's default
    char *profile;            // built-in profile name or NULL
    int has_top_k, top_k;     // -1 .. (0 / -1: off); at the top level or in the extension
    int has_min_p;
    double min_p;
    EmxLogitRules rules;      // the penalties and logit_bias (request_rules.h) ...
    int rules_given;          // ... those given (SRV_RULE_* bits): the others are the server's
    int json_object;          // response_format json_object
    char *json_schema;        // response_format json_schema's schema, as JSON text (owned) or NULL
    char *grammar;            // grammar: GBNF text (owned) or NULL
    SrvTool *tools;           // tools (request_tools.h): [n_tools]
    int n_tools;
    int tool_choice;          // enum srv_tool_choice (auto when tools are given, none otherwise)
    int tool_choice_index;    // SRV_TOOLS_FUNCTION: the tool it names
    int parallel_tool_calls;  // accepted (default 1); at most one call is constrained per turn
    int tool_grammar;         // grammar is the forced call's, built by srv_tools_prepare
    int tool_family;          // the model's template family (srv_tools_prepare): the call syntax

    int metrics;              // return each token's entropix metrics
    SrvAgents agents;         // sampler == EMX_SAMPLER_AGENTS only
    EmxBranchParams branch;   // sampler == EMX_SAMPLER_BRANCH only: ./run's parameters from the
                              // request's keys; the cue and the alphabet owned
} SrvRequest;

// Parses body[0..len) for endpoint kind into *r (zeroed first). Returns 0, or -1 with e filled
// (status 400; r then holds nothing to free, but srv_request_free is safe on it).
int srv_request_parse(const char *body, size_t len, int kind, SrvRequest *r, SrvError *e);
void srv_request_free(SrvRequest *r);

// The error as the JSON body {"error": {"message", "type", "param", "code"}} (malloc'd; NULL
// when out of memory).
char *srv_error_json(const SrvError *e);

#endif
