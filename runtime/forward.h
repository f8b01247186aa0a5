// forward.h — the forward pass: tokens in, logits and attention scores out.
//
// One interface, several backends; this is the CPU one, the reference every other backend is
// tested against. An EmxState is one sequence: activations, its KV cache and scratch. Many
// states may share one EmxModel.
#ifndef ENTROPIX_FORWARD_H
#define ENTROPIX_FORWARD_H

#include "model.h"

typedef struct {
    int n_threads;     // <= 0: all cores
    int ctx;           // KV cache positions (<= cfg.max_seq_len; <= 0: min(max_seq_len, 4096))
} EmxStateOptions;

typedef struct EmxState EmxState;

EmxState *emx_state_new(const EmxModel *m, const EmxStateOptions *opt, char *err, size_t errlen);
void emx_state_free(EmxState *s);
int emx_state_ctx(const EmxState *s);

// Runs tokens[0..n) at positions pos..pos+n-1 as one batched pass (prefill when n > 1) and
// returns the logits of the last position, f32 [vocab]. Positions >= pos in the KV cache are
// overwritten, so calling again with an earlier pos is a rollback (nothing else to undo).
// Returns NULL if pos + n > ctx or a token id is out of range.
const float *emx_forward(EmxState *s, const int *tokens, int n, int pos);

// Attention scores of the last position of the latest emx_forward: the scaled pre-softmax
// scores q·k/sqrt(head_dim) for every layer and query head over keys 0..last_pos (inclusive,
// the token's own key included). Layout [n_layers][n_heads][ctx]; entries past last_pos are
// unspecified. Written by the attention itself, so reading them costs nothing extra.
const float *emx_attention_scores(const EmxState *s, int *last_pos);

// The KV cache itself, for tests and tools: key and value f32 [n_layers][ctx][kv_dim] each
// (kv_dim = n_kv_heads * head_dim). Positions past the last one fed hold stale values from an
// earlier, longer sequence (or zeros), which no computation for an earlier position may read:
// a test writes garbage there to prove it.
void emx_state_kv_cache(EmxState *s, float **key, float **value, int *kv_dim);

// Like emx_forward, but writes the logits of every position: logits [n][vocab] (caller's
// buffer). For perplexity and scoring; costs n classifier products instead of one. The state's
// own logits and attention scores afterwards are those of the last position. Returns 0, or -1
// on the same conditions under which emx_forward returns NULL.
int emx_forward_all_logits(EmxState *s, const int *tokens, int n, int pos, float *logits);

// Changes the number of threads of later calls (<= 0: all cores), at most the count the state
// was created with (its per-thread scratch is sized for that).
void emx_forward_set_threads(EmxState *s, int n_threads);

#endif
