// request_branch.h — the "entropix" extension's keys of the branching decoder (sampler "branch",
// runtime/branch/branch_decode.h): tools/eval's names for ./run's flags, each checked by ./run's
// own parser as the flag it stands for, then together by the decoder's own checks and against
// the server's bounds (request.h). A pure function of the JSON, as request.c.
//
//   tau or entropy (--branch-entropy), k (--branch-k), forks (--branch-forks), gate
//   (--branch-gate), lookahead (--branch-lookahead: the agents' lookahead unless the sampler is
//   branch), rule (--branch-rule), cue or answer_cue (--answer-cue), alphabet or answer_alphabet
//   (--answer-alphabet, as an array of strings: an entry may hold a comma).
#ifndef ENTROPIX_SERVER_REQUEST_BRANCH_H
#define ENTROPIX_SERVER_REQUEST_BRANCH_H

#include <cjson/cJSON.h>

#include "tools/server/request.h"

// 1 when `key` is one of the branching decoder's keys above.
int srv_branch_key(const char *key);

// The decoder's keys of extension object x into r->branch, after x's sampler is in r->sampler
// (-1: none given). Any key but lookahead selects sampler "branch" (./run's rule); with another
// sampler it is refused. With branch, logprobs and entropix.metrics are refused (the branches
// are no single token stream). 0, or -1 with e (400, param the key).
int srv_parse_branch(const cJSON *x, SrvRequest *r, SrvError *e);

#endif
