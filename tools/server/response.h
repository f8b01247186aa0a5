// response.h — a generation's output in the OpenAI API's shapes: one JSON body
// (chat.completion / text_completion) or server-sent events (chat.completion.chunk /
// text_completion chunks, each "data: {json}\n\n", ending "data: [DONE]\n\n").
//
// Logprobs arrive from the engine as chat entries ({token, logprob, bytes, top_logprobs:
// [{token, logprob, bytes}]}); a completion gets them as the legacy shape {tokens,
// token_logprobs, top_logprobs: [{token: logprob}], text_offset}. The "entropix" extension
// adds choices[0].entropix.tokens (the --metrics objects) and, at the end, a top-level
// "entropix" object {seed, sampler, cases, pauses_inserted; agents: pool {rounds, checks, bad,
// rollbacks, rolled_back_tokens, bad_accepted}; branch: no seed, but n_forks, n_branches,
// branch_passes, answer_passes, answer, answer_score, paths [{fork, branch, start, tokens, end,
// output, prob, score, answer, answer_p, text}]}.
#ifndef ENTROPIX_SERVER_RESPONSE_H
#define ENTROPIX_SERVER_RESPONSE_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "tools/server/engine.h"
#include "tools/server/request.h"

// Stream output: appends bytes to the connection; non-zero: the client is gone.
typedef int (*SrvWrite)(void *user, const char *data, size_t len);

typedef struct {
    const SrvRequest *r;
    char id[48];
    long created;
    const char *model;
    SrvWrite write;            // stream only
    void *write_user;
    int started;               // stream: the first chunk (the role) went out
    size_t offset;             // completions' text_offset so far
    // non-stream: the whole answer
    char *text;
    size_t len, cap;
    cJSON *logprobs, *metrics; // accumulated entries
    // n > 1: the choices run one after another
    int index;                 // the choice being generated
    cJSON *choices;            // non-stream: the finished ones
    int completion_done;       // their completion tokens
    int first_cached;          // the first one's cached prompt tokens (usage)
    uint64_t first_seed;       // and its seed (entropix.seed)
    double score[SRV_MAX_N];   // best_of: each candidate's mean logprob per token (-inf: no token)
} SrvResponse;

void srv_response_init(SrvResponse *s, const SrvRequest *r, const char *model, unsigned long serial);
void srv_response_free(SrvResponse *s);

// The engine's SrvEmit (user: the SrvResponse).
int srv_response_emit(void *user, const char *text, size_t len, cJSON *logprobs, cJSON *metrics);

// The current choice is finished (res: its result) and the next begins (n > 1): a stream sends
// the choice's last chunk (its finish_reason), a body keeps it. 0, or -1: the client is gone.
int srv_response_next_choice(SrvResponse *s, const SrvGenResult *res);

// Stream: the final chunk (finish_reason), the usage chunk when asked, "data: [DONE]".
int srv_response_stream_end(SrvResponse *s, const SrvGenResult *res);
// Stream: an error after the events started (the status line went out already).
int srv_response_stream_error(SrvResponse *s, const SrvError *e);
// Non-stream: the whole body (malloc'd; NULL: out of memory).
char *srv_response_body(SrvResponse *s, const SrvGenResult *res);

#endif
