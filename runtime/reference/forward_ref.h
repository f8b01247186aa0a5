// forward_ref.h — the reference forward pass: plain C, f32, one token at a time.
//
// The file to read first to understand the model (forward_ref.c's top comment walks through it,
// shapes included). It is what the fast backends (runtime/cpu, runtime/cuda) are tested against
// position by position (tests/test_forward_ref.c, tests/kernels/test_forward_cuda_ref.cpp), and
// it is itself tested against the independent references in ../shared/testdata. Nothing in
// ./run uses it: speed is not its purpose.
//
//   RefModel *rm = ref_model_new(&model, err, sizeof err);   // every weight dequantised to f32
//   RefState *s = ref_state_new(rm, ctx, err, sizeof err);   // KV cache of ctx positions
//   for (int pos = 0; pos < n; pos++) logits = ref_forward(s, tokens[pos], pos);
#ifndef ENTROPIX_FORWARD_REF_H
#define ENTROPIX_FORWARD_REF_H

#include <stddef.h>

#include "runtime/model.h"

typedef struct RefModel RefModel;
typedef struct RefState RefState;

// Copies every tensor of m into f32 (q8/q4/q4_1/bf16/f16 dequantised as base/dtype.h defines
// them), so the reference reads its weights with plain indexing. m's configuration is copied
// too; m may be closed afterwards. Returns NULL with a one-line reason (out of memory, with the
// amount) in err.
RefModel *ref_model_new(const EmxModel *m, char *err, size_t errlen);
void ref_model_free(RefModel *rm);
const EmxConfig *ref_model_config(const RefModel *rm);

// A sequence over rm: activations and a KV cache of ctx positions (1 <= ctx <= max_seq_len).
// rm must outlive it; any number of states may share one model. NULL with a reason in err.
RefState *ref_state_new(const RefModel *rm, int ctx, char *err, size_t errlen);
void ref_state_free(RefState *s);

// Runs token at position pos (0 <= pos < ctx) and returns the logits, f32 [vocab], valid until
// the next call. Positions 0..pos-1 must have been run before (their keys and values are read
// from the cache); running pos again overwrites it, so an earlier pos is a rollback. NULL for a
// token id out of range or a position outside the cache.
const float *ref_forward(RefState *s, int token, int pos);

// Pre-softmax attention scores q·k/sqrt(head_dim) of the latest ref_forward's position, for
// every layer and query head over keys 0..*last_pos: [n_layers][n_heads][ctx] (the layout of
// emx_attention_scores), entries past *last_pos unspecified. *last_pos is -1 before any call.
const float *ref_attention_scores(const RefState *s, int *last_pos);

#endif
