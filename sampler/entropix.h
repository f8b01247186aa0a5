// entropix.h — the classic entropix strategy switch (docs/entropix.md): from the step's
// metrics, choose how to pick the next token.
//
// Cases, checked in this order, the first match wins (H, V: logits entropy in bits and
// varentropy in bits²; every comparison strict, so a value exactly on a threshold does not
// match that condition):
//   LELV "flowing"                 H < lelv_entropy_below   && V < lelv_varentropy_below   argmax
//   HELV "treading carefully"      H > helv_entropy_above   && V < helv_varentropy_below   insert
//        the pause token once per run of consecutive HELV steps, else sample with
//        T = min(helv_temp_max, T0·(helv_temp_base + helv_temp_attn_entropy·attn_ent))
//   LEHV "exploring forks"         H < lehv_entropy_below   && V > lehv_varentropy_above   sample,
//        T = min(lehv_temp_max, T0·(lehv_temp_base + lehv_temp_interaction·IS)),
//        top_k = max(lehv_top_k_min, int(top_k0·(1 + lehv_top_k_disagreement·(1 - agreement))))
//   HEHV "resampling in the mist"  H > hehv_entropy_above   && V > hehv_varentropy_above   sample,
//        T = max(hehv_temp_min, T0·(hehv_temp_base + hehv_temp_attn_varentropy·attn_vent)),
//        top_p = max(hehv_top_p_min, top_p0 - hehv_top_p_attn_entropy·attn_ent)
//   ADAPTIVE (otherwise)  lu = H + V, au = attn_ent + attn_vent:
//        T     = T0·(1 + ada_temp_logits_unc·lu + ada_temp_attn_unc·au - ada_temp_agreement·agr)
//        top_p = clip(top_p0·(1 + ada_top_p_attn_varentropy·attn_vent), ada_top_p_min, _max)
//        top_k = clip(round(top_k0·(1 + ada_top_k_interaction·IS - ada_top_k_agreement·agr)),
//                     ada_top_k_min, ada_top_k_max)            (round: half to even, as jnp)
//        min_p = clip(min_p0·(1 - ada_min_p_logits_unc·lu), ada_min_p_min, ada_min_p_max)
//        draw ada_n_samples tokens, keep the best by the per-sample score below.
// Parameters a case does not adjust keep the base values (T0, top_k0, top_p0, min_p0). Last,
// every case's temperature is capped at temp_max (0: no cap; classic has none).
// attn_vent is the attention varentropy the profile names (attn_varentropy_def); classic uses
// the sources' one, the variance across heads of the per-head entropies.
//
// Best-of-N score (ours; the sources' score adds a bracket that is the same for every sample,
// so their best-of-N is just "the most likely draw", upstream issue #89). For a draw x with
// surprisal s(x) = -log2 p(x) under the model's untempered distribution:
//     score(x) = -s(x) - ada_score_typicality · |s(x) - H|          (bits)
// The first term prefers likely tokens; the second prefers tokens whose surprisal is typical
// of the distribution (locally typical sampling: a good continuation is about as surprising as
// the model expects the next token to be). With a weight w > 1 the score rises with s up to H
// (slope w - 1) and falls after it (slope -(w + 1)): the preferred draw is the most typical
// one, and a draw more surprising than typical costs more than one less surprising. w = 0
// gives the sources' behaviour back. Ties keep the earlier draw.
//
// decide() is `static inline EMX_HD`: pure arithmetic on the metrics and the profile, so the
// CUDA decode step can run the same decision on the device.
#ifndef ENTROPIX_ENTROPIX_H
#define ENTROPIX_ENTROPIX_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "sampler/hostdevice.h"
#include "sampler/metrics.h"
#include "sampler/sample.h"

// Which "attention varentropy" the formulas read.
enum {
    EMX_ATTN_VARENTROPY_HEADS = 0,  // variance across heads of per-head entropy (the sources')
    EMX_ATTN_VARENTROPY_TRUE = 1,   // mean over heads of per-head varentropy (entropix-local)
};

// Every constant of the switch (defaults: the classic profile, profile.c). See above for the
// formulas each one enters.
typedef struct {
    // Metrics
    int attn_layer;           // EMX_ATTN_LAYER_LAST, EMX_ATTN_LAYERS_ALL or a layer index
    int attn_varentropy_def;  // EMX_ATTN_VARENTROPY_HEADS or _TRUE
    // Base sampling parameters
    double temperature;       // T0
    int top_k;                // top_k0
    double top_p;             // top_p0
    double min_p;             // min_p0
    double temp_max;          // no case samples hotter than this (0: no cap)
    // LELV
    double lelv_entropy_below, lelv_varentropy_below;
    // HELV
    double helv_entropy_above, helv_varentropy_below;
    int helv_insert_pause;    // 0: never insert, always sample
    int pause_token_id;       // -1: resolve by text at run time (emx_pause_token_resolve)
    double helv_temp_base, helv_temp_attn_entropy, helv_temp_max;
    int helv_n_samples;       // draws when HELV samples (1: one draw; more: the best by score)
    // LEHV
    double lehv_entropy_below, lehv_varentropy_above;
    double lehv_temp_base, lehv_temp_interaction, lehv_temp_max;
    double lehv_top_k_disagreement;
    int lehv_top_k_min;
    int lehv_n_samples;       // draws (1: one draw; more: the best by score)
    // HEHV
    double hehv_entropy_above, hehv_varentropy_above;
    double hehv_temp_base, hehv_temp_attn_varentropy, hehv_temp_min;
    double hehv_top_p_attn_entropy, hehv_top_p_min;
    int hehv_n_samples;       // draws (1: one draw; more: the best by score)
    // ADAPTIVE
    double ada_temp_logits_unc, ada_temp_attn_unc, ada_temp_agreement;
    double ada_top_p_attn_varentropy, ada_top_p_min, ada_top_p_max;
    double ada_top_k_interaction, ada_top_k_agreement;
    int ada_top_k_min, ada_top_k_max;
    double ada_min_p_logits_unc, ada_min_p_min, ada_min_p_max;
    int ada_n_samples;
    double ada_score_typicality;  // w of the best-of-N score (of every case that draws several)
} EmxProfile;

typedef enum {
    EMX_CASE_LELV = 0,   // flowing
    EMX_CASE_HELV,       // treading carefully
    EMX_CASE_LEHV,       // exploring forks
    EMX_CASE_HEHV,       // resampling in the mist
    EMX_CASE_ADAPTIVE,
    EMX_CASE_COUNT
} EmxCase;

typedef enum {
    EMX_ACTION_ARGMAX = 0,  // the most likely token
    EMX_ACTION_INSERT,      // emit `token` (the pause token) without sampling
    EMX_ACTION_SAMPLE,      // one draw with `params`
    EMX_ACTION_BEST_OF_N,   // n_samples draws with `params`, the best by score
} EmxAction;

typedef struct {
    EmxCase kase;
    EmxAction action;
    int token;                // INSERT: the token to emit; otherwise -1
    EmxSamplerParams params;  // SAMPLE, BEST_OF_N: the effective parameters
    int n_samples;            // BEST_OF_N: number of draws
} EmxDecision;

// What the switch remembers between steps.
typedef struct {
    int pause_inserted;  // 1 once the pause token was inserted in the current run of HELV steps
} EmxEntropixState;

static inline EMX_HD double emx_attn_varentropy(const EmxMetrics *m, const EmxProfile *p) {
    return p->attn_varentropy_def == EMX_ATTN_VARENTROPY_TRUE ? m->attn_varentropy_true_bits2
                                                               : m->attn_varentropy_heads_bits2;
}

static inline EMX_HD double emx_clip(double x, double lo, double hi) {
    return x < lo ? lo : x > hi ? hi : x;
}

// The case rule alone: which of the five cases the metrics fall in (thresholds only).
static inline EMX_HD EmxCase emx_entropix_case(const EmxMetrics *m, const EmxProfile *p) {
    const double H = m->logits_entropy_bits, V = m->logits_varentropy_bits2;
    if (H < p->lelv_entropy_below && V < p->lelv_varentropy_below) return EMX_CASE_LELV;
    if (H > p->helv_entropy_above && V < p->helv_varentropy_below) return EMX_CASE_HELV;
    if (H < p->lehv_entropy_below && V > p->lehv_varentropy_above) return EMX_CASE_LEHV;
    if (H > p->hehv_entropy_above && V > p->hehv_varentropy_above) return EMX_CASE_HEHV;
    return EMX_CASE_ADAPTIVE;
}

// The profile's base values (T0, top_k0, top_p0, min_p0): what a case does not adjust.
static inline EMX_HD EmxSamplerParams emx_profile_base_params(const EmxProfile *p) {
    EmxSamplerParams s;
    s.temperature = (float)p->temperature;
    s.top_k = p->top_k;
    s.top_p = (float)p->top_p;
    s.min_p = (float)p->min_p;
    s.temperature_first = 0;
    return s;
}

// The sampling parameters case c gives at metrics m, whatever case m falls in (calibration
// reads every case's temperature at the median metrics). LELV: temperature 0 (argmax). Every
// case's temperature is then capped at temp_max (0: no cap).
static inline EMX_HD EmxSamplerParams emx_entropix_case_params(EmxCase c, const EmxMetrics *m,
                                                               const EmxProfile *p) {
    const double H = m->logits_entropy_bits, V = m->logits_varentropy_bits2;
    const double ae = m->attn_entropy_bits, av = emx_attn_varentropy(m, p);
    const double agr = m->attn_agreement, is = m->attn_interaction_strength, t0 = p->temperature;
    EmxSamplerParams s = emx_profile_base_params(p);  // each case adjusts some
    double t = t0;
    switch (c) {
    case EMX_CASE_LELV:
        s.temperature = 0.0f;  // greedy, should anyone sample with these params
        return s;
    case EMX_CASE_HELV:
        t = fmin(p->helv_temp_max, t0 * (p->helv_temp_base + p->helv_temp_attn_entropy * ae));
        break;
    case EMX_CASE_LEHV: {
        t = fmin(p->lehv_temp_max, t0 * (p->lehv_temp_base + p->lehv_temp_interaction * is));
        int k = (int)(p->top_k * (1.0 + p->lehv_top_k_disagreement * (1.0 - agr)));  // truncates
        s.top_k = k > p->lehv_top_k_min ? k : p->lehv_top_k_min;
        break;
    }
    case EMX_CASE_HEHV:
        t = fmax(p->hehv_temp_min, t0 * (p->hehv_temp_base + p->hehv_temp_attn_varentropy * av));
        s.top_p = (float)fmax(p->hehv_top_p_min, p->top_p - p->hehv_top_p_attn_entropy * ae);
        break;
    default: {  // ADAPTIVE
        const double lu = H + V, au = ae + av;
        t = t0 * (1.0 + p->ada_temp_logits_unc * lu + p->ada_temp_attn_unc * au - p->ada_temp_agreement * agr);
        s.top_p = (float)emx_clip(p->top_p * (1.0 + p->ada_top_p_attn_varentropy * av), p->ada_top_p_min,
                                  p->ada_top_p_max);
        double k = nearbyint(p->top_k * (1.0 + p->ada_top_k_interaction * is -
                                         p->ada_top_k_agreement * agr));  // half to even
        s.top_k = (int)emx_clip(k, p->ada_top_k_min, p->ada_top_k_max);
        s.min_p = (float)emx_clip(p->min_p * (1.0 - p->ada_min_p_logits_unc * lu), p->ada_min_p_min,
                                  p->ada_min_p_max);
        break;
    }
    }
    s.temperature = (float)(p->temp_max > 0 && t > p->temp_max ? p->temp_max : t);
    return s;
}

// The decision for one step. pause_token: the resolved pause token id (-1: none, HELV then
// samples). Pure: the caller applies emx_entropix_state_update afterwards.
static inline EMX_HD EmxDecision emx_entropix_decide(const EmxMetrics *m, const EmxProfile *p,
                                                     const EmxEntropixState *st,
                                                     int pause_token) {
    EmxDecision d;
    d.kase = emx_entropix_case(m, p);
    d.token = -1;
    d.n_samples = 1;
    d.params = emx_entropix_case_params(d.kase, m, p);
    if (d.kase == EMX_CASE_LELV) {
        d.action = EMX_ACTION_ARGMAX;
        return d;
    }
    if (d.kase == EMX_CASE_HELV && p->helv_insert_pause && pause_token >= 0 && !st->pause_inserted) {
        d.action = EMX_ACTION_INSERT;
        d.token = pause_token;
        d.params = emx_profile_base_params(p);  // nothing is sampled
        return d;
    }
    // ADAPTIVE always takes the best of its draws; the other cases draw once unless their
    // profile asks for more (classic: 1).
    const int n = d.kase == EMX_CASE_HELV   ? p->helv_n_samples
                  : d.kase == EMX_CASE_LEHV ? p->lehv_n_samples
                  : d.kase == EMX_CASE_HEHV ? p->hehv_n_samples
                                            : p->ada_n_samples;
    d.n_samples = n > 1 ? n : 1;
    d.action = d.kase == EMX_CASE_ADAPTIVE || n > 1 ? EMX_ACTION_BEST_OF_N : EMX_ACTION_SAMPLE;
    return d;
}

// After the decision was carried out: a HELV run remembers an insertion; any other case ends
// the run (the next HELV step may insert again).
static inline EMX_HD void emx_entropix_state_update(EmxEntropixState *st, const EmxDecision *d) {
    if (d->kase != EMX_CASE_HELV)
        st->pause_inserted = 0;
    else if (d->action == EMX_ACTION_INSERT)
        st->pause_inserted = 1;
}

// Best-of-N score of token `id` (see above), in bits: -s - w·|s - H|, s = -log2 p(id).
static inline EMX_HD double emx_entropix_score(const float *logits, int id, const EmxMetrics *m,
                                               double typicality) {
    double s = -((double)logits[id] - m->logits_lse_nats) / EMX_LN2;
    return -s - typicality * fabs(s - m->logits_entropy_bits);
}

// Carries out a decision: returns the chosen token (or -1 if no token can be chosen). Draws
// use Philox (seed, step, lane): lane 0 for SAMPLE, lanes 0..n_samples-1 for BEST_OF_N (one
// counter per draw, so the draws are independent and replayable). work: [n] scratch for the
// basic sampler. *score_out (if not NULL) receives the chosen draw's score for BEST_OF_N, NAN
// otherwise. m must be this step's metrics (for lse and H).
int emx_entropix_execute(const EmxDecision *d, const float *logits, int n, const EmxMetrics *m,
                         const EmxProfile *p, uint64_t seed, uint64_t step, EmxCandidate *work,
                         double *score_out);

// Names for logs: "LELV", "HELV", "LEHV", "HEHV", "ADAPTIVE".
const char *emx_case_name(EmxCase c);

// The pause ("clarification") token. The sources insert Llama-3 id 2564, the text " ...". We
// insert the same text for every family, resolved by text so no id is hard-coded:
//   Llama 3  " ..." = id 2564  (tokenizer.json: "Ġ...")
//   Qwen3    " ..." = id 2503  (tokenizer.json: "Ġ...")
//   SmolLM2  " ..." = id 4563  (GGUF tokenizer.ggml.tokens: "Ġ...")
// In all three it is one ordinary (non-special) token, a pause the model has seen in
// ordinary text, so inserting it keeps the text natural and the model in distribution; a
// special or reserved token would be out of distribution. A vocabulary without " ..." falls
// back to "..." (Llama 3 1131, Qwen3 1112, SmolLM2 2026); without either (e.g. llama2.c's
// 512-token vocabulary), there is no pause token and HELV samples.
//
// find(ctx, text, len) returns the id of the token whose decoded bytes are exactly text[0..len),
// or -1. Returns the pause token id or -1.
typedef int (*EmxFindTokenFn)(void *ctx, const char *text, size_t len);
int emx_pause_token_resolve(EmxFindTokenFn find, void *ctx);

// An EmxFindTokenFn over a tokenizer (ctx: const EmxTokenizer *): the lowest non-control id
// whose bytes (emx_token_bytes_ref) equal text. A scan of the vocabulary: call it once per run.
int emx_find_token_by_bytes(void *tokenizer, const char *text, size_t len);

#endif
