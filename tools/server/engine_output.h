// engine_output.h — a generation in progress as the server streams it, shared by the three paths
// (engine.c: one stream; engine_pool.c: the agent pool; engine_branch.c: the branching decoder):
// the text so far with the stop strings held back, and the per-token entries (logprobs,
// metrics) waiting for their text.
#ifndef ENTROPIX_SERVER_ENGINE_OUTPUT_H
#define ENTROPIX_SERVER_ENGINE_OUTPUT_H

#include "runtime/cli/run_setup.h"
#include "runtime/token_log.h"
#include "tools/server/engine.h"

// Where each pending entry's token text starts in the generation's text (offsets, in order).
typedef struct {
    size_t *at;
    int n, cap;
} SrvMarks;

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
    cJSON *logprobs, *metrics;   // entries not yet emitted (each added before its token's text)
    SrvMarks lp_at, mx_at;       // their marks (srv_add_text sets them)
    int n_tokens;                // tokens chosen (committed), the stop token included
    int stopped;                 // a stop string matched
    int emit_failed, oom;
} Gen;

// Emits text[sent..upto) with the pending entries whose token's text starts in it; force: every
// pending entry, even without text (the end of the generation). An entry otherwise waits for
// its token's first byte, which may be held back.
int srv_flush_text(Gen *g, size_t upto, int force);

// Appends a token's text (the entries added since the last call are that token's), then emits
// what can no longer be part of a stop string (final: all of it). On a stop string's match the
// text ends before it, and so do the logprobs: the entries of the tokens with no byte before
// the match are dropped. Returns non-zero to stop: a stop string matched, the emit failed
// (client gone), out of memory.
int srv_add_text(Gen *g, const char *text, size_t len, int final);

// Frees what a Gen holds (its text, the pending entries and their marks).
void srv_gen_free(Gen *g);

// OpenAI's {token, logprob, bytes} for token id.
cJSON *srv_token_entry(const EmxTokenizer *tk, int id, double logprob);

#endif
