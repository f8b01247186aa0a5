// engine_internal.h — what the single-stream path (engine.c) and the agent pool's path
// (engine_pool.c) share: the generation's text with its stop-string holdback, the per-token
// entries waiting for their text, and ./run's flags for a request.
#ifndef ENTROPIX_SERVER_ENGINE_INTERNAL_H
#define ENTROPIX_SERVER_ENGINE_INTERNAL_H

#include "runtime/cli/run_setup.h"
#include "runtime/token_log.h"
#include "tools/server/engine.h"

typedef struct {
    const SrvModel *sm;
    const SrvRequest *r;
    EmxRunSampler *rs;           // single stream only
    EmxLogprobTap *lpt;          // single stream: NULL when no logprobs
    const char *sampler_name;
    atomic_int *cancel;
    SrvEmit emit;
    void *emit_user;
    char *text;                  // every byte of text so far [len], emitted up to `sent`
    size_t len, cap, sent;
    cJSON *logprobs, *metrics;   // entries not yet emitted
    int n_tokens;                // tokens chosen (committed), the stop token included
    int stopped;                 // a stop string matched
    int emit_failed, oom;
} Gen;

// Emits text[sent..upto) with the pending entries; force: the entries even without text (the
// end of the generation). Entries otherwise wait for their text, which may be held back.
int srv_flush_text(Gen *g, size_t upto, int force);

// Appends text, then emits what can no longer be part of a stop string (final: all of it).
// Returns non-zero to stop: a stop string matched, the emit failed (client gone), out of memory.
int srv_add_text(Gen *g, const char *text, size_t len, int final);

// OpenAI's {token, logprob, bytes} for token id.
cJSON *srv_token_entry(const EmxTokenizer *tk, int id, double logprob);

// ./run's flags for this request: the server's, then the request's settings on top.
void srv_request_args(const SrvModel *sm, const SrvRequest *r, EmxCliArgs *a);

// srv_generate for sampler "agents" (engine_pool.c): the agent pool from the request's options
// as ./run builds it; the slot's state and cache are not touched (the pool has its replicas).
int srv_generate_pool(const SrvModel *sm, const EmxCliArgs *a, const SrvRequest *r, const int *ids, int n_ids,
                      atomic_int *cancel, SrvEmit emit, void *emit_user, SrvGenResult *res, SrvError *e);

// srv_generate for sampler "branch" (engine_branch.c): the branching decoder with the request's
// parameters on the slot's state; `cache` then holds the prompt and the output's valid rows.
int srv_generate_branch(const SrvModel *sm, EmxState *st, SrvCache *cache, const SrvRequest *r, const int *ids,
                        int n_ids, atomic_int *cancel, SrvEmit emit, void *emit_user, SrvGenResult *res, SrvError *e);

#endif
