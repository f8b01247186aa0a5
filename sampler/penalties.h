// penalties.h — the logit rules other runtimes apply before their samplers: a bias per token
// (OpenAI's logit_bias), the repetition penalty (llama.cpp's repeat_penalty, HF's and vLLM's
// repetition_penalty) and the presence and frequency penalties (OpenAI's). Pure functions of
// (logits, history, parameters): they change logits in place and draw nothing.
//
// Semantics, each as the runtime that named it defines it:
//   bias:        logits[id] += bias (-100 .. 100 as OpenAI: -100 in effect bans a token).
//   repetition:  each distinct token among the last repeat_last_n tokens of the context (prompt
//                and generated; -1: all of it) has its logit divided by r when positive and
//                multiplied by r when negative (the CTRL paper's rule; r > 1 discourages).
//   presence:    logits[id] -= presence   for each token generated at least once,
//   frequency:   logits[id] -= frequency * count(id)   over the generated tokens only (OpenAI's
//                formula; vLLM counts the same way). Negative values encourage repeats.
// Order: bias, then repetition, then presence and frequency (llama.cpp's and vLLM's order).
#ifndef ENTROPIX_PENALTIES_H
#define ENTROPIX_PENALTIES_H

#include <stdint.h>

// The ranges every front end takes (./run's flags, the server's fields, the C API's parameters),
// as llama.cpp and OpenAI take them; each front end names its own field in its message.
#define EMX_REPEAT_PENALTY_MAX 100.0    // repeat_penalty in (0, MAX]
#define EMX_REPEAT_LAST_N_MAX (1 << 30) // repeat_last_n in [-1, MAX]
#define EMX_PRESENCE_PENALTY_MAX 2.0    // presence_penalty and frequency_penalty in [-MAX, MAX]
#define EMX_LOGIT_BIAS_MAX 100.0        // a bias in [-MAX, MAX], or -inf (never chosen)

typedef struct {
    float repeat_penalty;     // 1: off; > 0
    int repeat_last_n;        // tokens of context it looks back over; -1: all, 0: off
    float presence_penalty;   // 0: off; -2 .. 2
    float frequency_penalty;  // 0: off; -2 .. 2
} EmxPenalties;

#define EMX_PENALTIES_OFF ((EmxPenalties){.repeat_penalty = 1.0f, .repeat_last_n = 64})

typedef struct {
    int id;
    float bias;
} EmxLogitBias;

// Whether p changes anything.
int emx_penalties_active(const EmxPenalties *p);

// logits[bias[i].id] += bias[i].bias for each entry whose id is in [0, n_vocab).
void emx_apply_logit_bias(float *logits, int n_vocab, const EmxLogitBias *bias, int n_bias);

// The penalties over a context of n_ctx tokens, the last n_gen of them generated (n_gen <=
// n_ctx). seen: scratch of n_vocab bytes, all zero on entry and on return; counts: scratch of
// n_vocab ints, all zero on entry and on return. Token ids outside [0, n_vocab) are ignored.
void emx_apply_penalties(float *logits, int n_vocab, const EmxPenalties *p, const int *ctx, int n_ctx, int n_gen,
                         uint8_t *seen, int *counts);

#endif
