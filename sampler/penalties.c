// penalties.c — logit bias and the repetition, presence and frequency penalties (penalties.h).
#include "sampler/penalties.h"

int emx_penalties_active(const EmxPenalties *p) {
    return (p->repeat_penalty != 1.0f && p->repeat_last_n != 0) || p->presence_penalty != 0.0f ||
           p->frequency_penalty != 0.0f;
}

void emx_apply_logit_bias(float *logits, int n_vocab, const EmxLogitBias *bias, int n_bias) {
    for (int i = 0; i < n_bias; i++)
        if (bias[i].id >= 0 && bias[i].id < n_vocab) logits[bias[i].id] += bias[i].bias;
}

// The repetition penalty once per distinct token of the window (a token seen twice is not
// penalised twice: llama.cpp's and HF's rule).
static void apply_repetition(float *logits, int n_vocab, float r, const int *win, int n_win, uint8_t *seen) {
    for (int i = 0; i < n_win; i++) {
        const int id = win[i];
        if (id < 0 || id >= n_vocab || seen[id]) continue;
        seen[id] = 1;
        logits[id] = logits[id] > 0 ? logits[id] / r : logits[id] * r;
    }
    for (int i = 0; i < n_win; i++)
        if (win[i] >= 0 && win[i] < n_vocab) seen[win[i]] = 0;
}

void emx_apply_penalties(float *logits, int n_vocab, const EmxPenalties *p, const int *ctx, int n_ctx, int n_gen,
                         uint8_t *seen, int *counts) {
    if (p->repeat_penalty != 1.0f && p->repeat_last_n != 0) {
        const int n_win = p->repeat_last_n < 0 || p->repeat_last_n > n_ctx ? n_ctx : p->repeat_last_n;
        apply_repetition(logits, n_vocab, p->repeat_penalty, ctx + n_ctx - n_win, n_win, seen);
    }
    if (p->presence_penalty == 0.0f && p->frequency_penalty == 0.0f) return;
    const int *gen = ctx + n_ctx - n_gen;
    for (int i = 0; i < n_gen; i++)
        if (gen[i] >= 0 && gen[i] < n_vocab) counts[gen[i]]++;
    for (int i = 0; i < n_gen; i++) {  // each distinct token once: its count is then reset to 0
        const int id = gen[i];
        if (id < 0 || id >= n_vocab || counts[id] == 0) continue;
        logits[id] -= p->frequency_penalty * (float)counts[id] + p->presence_penalty;
        counts[id] = 0;
    }
}
