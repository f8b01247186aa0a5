// sample.h — the basic samplers: greedy, temperature, top-k, top-p (nucleus), min-p, combined.
//
// Pure functions of (logits, parameters, one uniform number u in [0, 1)) -> token id. The
// randomness comes from outside (philox.h: u = emx_uniform_f64(seed, step, lane)), so a
// decision can be replayed, and the same code can run on a device.
//
// Semantics of the combined sampler (llama.cpp's order: top-k -> top-p -> min-p -> temperature):
//   0. Logits that are -inf or NaN are never candidates. If none is left, the result is -1.
//   1. temperature <= 0, or top_k == 1: greedy (argmax, the lowest id on ties); u is unused.
//   2. Candidates are ranked by logit, highest first (equal logits: lower id first).
//      Filters are computed on p = softmax(logits) (temperature 1; see temperature_first),
//      each on the candidates the previous one left, renormalised:
//        top-k  (top_k > 0):     keep the top_k best ranked.
//        top-p  (top_p < 1):     keep the shortest ranked prefix whose mass is >= top_p
//                                (the nucleus, accumulated from the most likely token;
//                                top_p <= 0 keeps only the best token).
//        min-p  (0 < min_p <= 1): keep p_i >= min_p * p_max.
//      Each filter keeps at least the best token.
//   3. The kept tokens get probabilities softmax(logit / temperature), renormalised over them.
//   4. The draw is the inverse CDF in double over the kept tokens in rank order: the first
//      token whose cumulative probability exceeds u (tokens of zero probability are never drawn).
//      Exception: with every filter off, the kept tokens are all finite ones in id order
//      (ranking the whole vocabulary would cost more than the draw; the draw is just as exact).
//   +inf logits: the +inf tokens share all the probability equally (the limit of softmax).
// Off values: top_k <= 0 (or >= n), top_p >= 1, min_p <= 0.
// With temperature_first set, the filters see softmax(logits / temperature) instead
// (HuggingFace's order: temperature -> top-k -> top-p -> min-p); the final distribution in
// step 3 is the same formula, only the kept set can differ.
#ifndef ENTROPIX_SAMPLE_H
#define ENTROPIX_SAMPLE_H

#include <stddef.h>

typedef struct {
    float temperature;      // <= 0: greedy
    int top_k;              // <= 0: off
    float top_p;            // >= 1: off
    float min_p;            // <= 0: off
    int temperature_first;  // 0: llama.cpp order (default), 1: HF order (see above)
} EmxSamplerParams;

// llama.cpp's defaults except temperature (ours 0.8 too): T 0.8, top-k 40, top-p 0.95, min-p 0.05.
#define EMX_SAMPLER_PARAMS_DEFAULT \
    ((EmxSamplerParams){.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f})

// One kept token and its probability in the final (renormalised) distribution.
typedef struct {
    int id;
    float logit;
    double p;
} EmxCandidate;

// Argmax over logits[0..n): the lowest id among equal maxima; -inf and NaN never win.
// Returns -1 if no logit is finite or +inf (n == 0, all -inf/NaN).
int emx_sample_argmax(const float *logits, int n);

// The distribution the combined sampler draws from: writes the kept tokens to work[0..m) in
// rank order (highest logit first, lower id on ties) with their final probabilities p (summing
// to 1) and returns m >= 1; 0 if no token can be chosen. work must hold n entries.
// Greedy parameters give the single argmax token with p = 1.
int emx_sample_distribution(const float *logits, int n, const EmxSamplerParams *sp,
                            EmxCandidate *work);

// Inverse-CDF draw from cand[0..m) (probabilities p): the first i whose cumulative sum
// exceeds u * total, computed in double; zero-probability entries are never returned.
// Returns the chosen token id, or -1 if m == 0.
int emx_sample_draw(const EmxCandidate *cand, int m, double u);

// The combined sampler: emx_sample_distribution then emx_sample_draw. u in [0, 1).
// work must hold n entries. Returns the token id, or -1 if no token can be chosen.
int emx_sample(const float *logits, int n, const EmxSamplerParams *sp, double u,
               EmxCandidate *work);

#endif
