// entropix.c — carrying out a decision of the strategy switch (entropix.h), and the pause token.
#include "sampler/entropix.h"

#include <math.h>
#include <string.h>

#include "sampler/philox.h"
#include "tokenizer/tokenizer.h"

const char *emx_case_name(EmxCase c) {
    static const char *const names[EMX_CASE_COUNT] = {"LELV", "HELV", "LEHV", "HEHV", "ADAPTIVE"};
    return c >= 0 && c < EMX_CASE_COUNT ? names[c] : "?";
}

int emx_entropix_execute(const EmxDecision *d, const float *logits, int n, const EmxMetrics *m,
                         const EmxProfile *p, uint64_t seed, uint64_t step, EmxCandidate *work,
                         double *score_out) {
    if (score_out) *score_out = NAN;
    switch (d->action) {
    case EMX_ACTION_ARGMAX:
        return emx_sample_argmax(logits, n);
    case EMX_ACTION_INSERT:
        return d->token >= 0 && d->token < n ? d->token : -1;
    case EMX_ACTION_SAMPLE:
        return emx_sample(logits, n, &d->params, emx_uniform_f64(seed, step, 0), work);
    case EMX_ACTION_BEST_OF_N:
        break;
    }
    // Best of N: one kept distribution, N draws from it on separate lanes, the best score wins.
    int kept = emx_sample_distribution(logits, n, &d->params, work);
    if (kept == 0) return -1;
    int best = -1;
    double best_score = -INFINITY;
    for (int i = 0; i < d->n_samples; i++) {
        int id = emx_sample_draw(work, kept, emx_uniform_f64(seed, step, (uint32_t)i));
        double s = emx_entropix_score(logits, id, m, p->ada_score_typicality);
        if (best < 0 || s > best_score) {  // strict: ties keep the earlier draw
            best = id;
            best_score = s;
        }
    }
    if (score_out) *score_out = best_score;
    return best;
}

int emx_pause_token_resolve(EmxFindTokenFn find, void *ctx) {
    static const char *const texts[] = {" ...", "..."};  // in order of preference (entropix.h)
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        int id = find(ctx, texts[i], strlen(texts[i]));
        if (id >= 0) return id;
    }
    return -1;
}

int emx_find_token_by_bytes(void *tokenizer, const char *text, size_t len) {
    const EmxTokenizer *tk = tokenizer;
    int n = emx_tokenizer_n_vocab(tk);
    for (int id = 0; id < n; id++) {
        if (emx_is_control(tk, id)) continue;  // an ordinary token, never a special one
        size_t blen = 0;
        const char *b = emx_token_bytes_ref(tk, id, &blen);
        if (b && blen == len && memcmp(b, text, len) == 0) return id;
    }
    return -1;
}
