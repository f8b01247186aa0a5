// engine.h — one request's generation through ./run's code paths: the prompt rendered by the
// model's chat template (every turn) or taken raw, the sampler ./run would build from the same
// flags (run_setup.h: the same seed and settings give the same tokens as ./run), emx_generate,
// and the OpenAI extras on top: stop strings, logprobs, the entropix metrics.
//
// Output goes through SrvEmit: the text in pieces as it becomes final (held back while it could
// still be the start of a stop string), each piece with the per-token entries of the tokens
// that produced it. The response module turns the calls into a JSON body or SSE chunks.
#ifndef ENTROPIX_SERVER_ENGINE_H
#define ENTROPIX_SERVER_ENGINE_H

#include <cjson/cJSON.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/cli/cli_args.h"
#include "runtime/forward.h"
#include "runtime/model.h"
#include "sampler/grammar_mask.h"
#include "sampler/profile.h"
#include "tokenizer/tokenizer.h"
#include "tools/server/request.h"

typedef struct {
    EmxModel model;
    EmxTokenizer *tk;
    EmxCliArgs defaults;      // the server's sampler flags, as ./run parses them
    EmxProfile profile;       // --profile and --profile-set, loaded and checked once at startup: no
                              // request makes the server read a file
    const char *id;           // the model's name in the API (the file name without .bin)
    const EmxTokenTrie *trie; // the tokenizer's trie for a grammar's mask (sampler/grammar_mask.h),
                              // built once at startup
    int ctx;                  // each slot's context (tokens)
    long created;             // /v1/models' "created": the model file's modification time (Unix seconds)
} SrvModel;

// What a slot's KV cache holds: the rows of ids[0..n) (a prompt and the generated tokens that
// were fed back), kept from one request to the next so that a prompt that starts the same way
// (a chat that goes on) runs only its new part. ids has room for the context + 1 (the last
// chosen token is recorded, not fed).
typedef struct {
    int *ids;
    int n, cap;
} SrvCache;

// Prompt positions of ids[0..n_ids) whose rows `c` already holds: the common prefix, at most
// n_ids - 1 (the last prompt token always runs: its logits choose the first token).
int srv_cache_match(const SrvCache *c, const int *ids, int n_ids);

// What a finished generation reports.
typedef struct {
    int n_prompt, n_completion;     // usage (the final stop token not counted)
    int n_cached;                   // prompt tokens taken from the cache (usage.prompt_tokens_details)
    const char *finish_reason;      // "stop" (stop token or string), "length"
    uint64_t seed;                  // the seed used (drawn from the clock when the request gave none)
    const char *sampler;            // sampler name
    long cases[8];                  // entropix: tokens per case (LELV, HELV, LEHV, HEHV, ADAPTIVE)
    long n_inserted;
    double decode_s;
    // agents: what the pool did (EmxPoolStats)
    int pool, n_rounds, n_checks, n_bad, n_rollbacks, n_rolled_back_tokens, n_bad_accepted;
    int cut;                        // stopped by the server's shutdown (its drain deadline), not by the model
    cJSON *branch;                  // sampler branch: the top-level entropix object's fields (n_forks, the
                                    // answer, the paths); owned: cJSON_Delete it (NULL otherwise)
} SrvGenResult;

// Called with each piece of final text (len may be 0 when only entries are passed) and the
// per-token entries of its tokens: logprobs (OpenAI's chat entries {token, logprob, bytes,
// top_logprobs}; NULL when not asked) and metrics (the --metrics objects; NULL when not asked).
// The callee takes ownership of both arrays. Returns 0 to go on, non-zero to stop (client gone).
typedef int (*SrvEmit)(void *user, const char *text, size_t len, cJSON *logprobs, cJSON *metrics);

// Prompt ids for r (chat: every message through the template; completions: raw). Returns 0,
// or -1 with e filled (400: prompt longer than the context, a role order the template refuses).
int srv_prompt_ids(const SrvModel *sm, const SrvRequest *r, int **ids, int *n_ids, SrvError *e);

// The model's alias that selects the entropix sampler ("smollm2:entropix"): /v1/models lists it,
// and a request naming it runs entropix unless its extension names another sampler (refused).
#define SRV_ENTROPIX_ALIAS ":entropix"

// What r asks of the model before it is queued: its model field names the served model or its
// alias (404 otherwise; the alias sets r->sampler), and the logit rules fit the vocabulary and
// the sampler (the agent pool and the branching decoder take none). 0, or -1 with e.
int srv_request_check_model(const SrvModel *sm, SrvRequest *r, SrvError *e);

// 1 when r runs the agent pool (its own replicas: the slot's state is not used).
int srv_request_is_pool(const SrvModel *sm, const SrvRequest *r);
// 1 when r runs outside the slots' batched step: the agent pool, or the branching decoder (its
// forks are batched passes of their own on the slot's state).
int srv_request_runs_alone(const SrvModel *sm, const SrvRequest *r);

// Sampler "branch" before it is queued: what the decoder would refuse from the tokenizer alone
// (400 naming the key: an entry's or the cue's tokens; the prompt, context_length_exceeded, when
// the answer has no room) and max_tokens against the context. *bytes: what the run holds beside
// the slot's state at most, on the CPU (on_cpu; else 0): k branch tails of the budget, the
// answers' tails, a pass's logits. 0, or -1 with e.
int srv_branch_check(const SrvModel *sm, const SrvRequest *r, int n_ids, int on_cpu, uint64_t *bytes, SrvError *e);

// Runs r on state st (its own slot), whose rows `cache` describes: the prompt runs from
// srv_cache_match's position, and `cache` then holds what st holds (also after a failure or a
// cancel: only rows known to be written are kept). cancel: polled each token (non-zero: stop,
// the result is then partial). Sampler "agents" runs the agent pool instead, on replicas of its
// own (st and cache untouched; usage counts the prompt as computed); sampler "branch" runs the
// branching decoder on st (res->branch: its paths). Returns 0, or -1 with e filled (a 4xx for
// the request, 500 for the runtime).
int srv_generate(const SrvModel *sm, EmxState *st, SrvCache *cache, const SrvRequest *r, const int *ids, int n_ids,
                 atomic_int *cancel, SrvEmit emit, void *emit_user, SrvGenResult *res, SrvError *e);

// What every path shares (engine_output.c). The seed r runs with (its first choice's): its own,
// else the server's -s (not for seed -1), else one drawn from the clock (53 bits: exact in JSON,
// so a client can send it back).
uint64_t srv_request_seed(const SrvModel *sm, const SrvRequest *r);

// The generation's output. s[0..n) as a JSON string, invalid UTF-8 replaced by
// U+FFFD (NULL: out of memory).
cJSON *srv_text_json(const char *s, size_t n);

// Longest suffix of text[0..len) that is a proper prefix of one of the stop strings (the bytes
// to hold back), and the offset of the first complete stop string (-1: none). Exposed for tests.
size_t srv_stop_holdback(const char *text, size_t len, char *const *stop, int n_stop, long *match);

#endif
