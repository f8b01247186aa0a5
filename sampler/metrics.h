// metrics.h — the uncertainty measures the entropix sampler decides from (docs/entropix.md):
// entropy and varentropy of the next-token distribution, and statistics of the last position's
// attention (per-head entropy, varentropy, agreement between heads, interaction strength).
//
// Units: entropies in bits, varentropies in bits² (the sources' thresholds are in bits). All
// sums are in double. No input makes a NaN: -inf and NaN scores take no probability, +inf
// scores share all of it equally (softmax's limit, as sample.h decides), a row with nothing
// left has entropy 0.
//
// The core is a running statistic of one row of scores s (logits or attention scores):
//   m = max s,  Z = Σ e^{s-m},  and the sums Σ e^{s-m}·t, Σ e^{s-m}·t² of t = s - m.
// With p = e^{s-m}/Z (so E[t] = Σe·t / Z):
//   entropy     H = -Σ p ln p = ln Z - E[t]                       (nats)
//   varentropy  V = Var[-ln p] = Var[t] = E[t²] - E[t]²            (nats²)
// Keeping t relative to the running max keeps every exponential <= 1 and E[t] small, so the
// subtraction in V does not cancel badly. Two such statistics of disjoint parts of a row merge
// exactly (rescale each to the larger max), which is what lets one pass over the logits, or a
// split-K attention kernel, produce them chunk by chunk. The row functions are `static inline
// EMX_HD` so the CUDA kernels compile this same code.
#ifndef ENTROPIX_METRICS_H
#define ENTROPIX_METRICS_H

#include <math.h>

#include "sampler/hostdevice.h"

#define EMX_LN2 0.69314718055994530942

// ---------------------------------------------------------------------------------------------
// The combinable partial statistic of a row (or of a chunk of a row).

typedef struct {
    double max;      // m: largest finite score seen; -INFINITY while none
    double sum_e;    // Z = Σ e^{s-m} over the finite scores (0 while none)
    double sum_et;   // Σ e^{s-m}·(s-m)   (<= 0)
    double sum_et2;  // Σ e^{s-m}·(s-m)²
    int n_posinf;    // scores equal to +inf: when > 0 they hold all the mass, equally
} EmxSoftmaxStats;

static inline EMX_HD EmxSoftmaxStats emx_softmax_stats_empty(void) {
    EmxSoftmaxStats st = {-INFINITY, 0.0, 0.0, 0.0, 0};
    return st;
}

// Moves the sums of `st` to a new reference max m_new >= st->max: with d = m_old - m_new <= 0,
// e^{s-m_new} = r·e^{s-m_old} (r = e^d) and t_new = t_old + d. Empty stats stay empty (and
// never compute -inf·0).
static inline EMX_HD void emx_softmax_stats_rebase(EmxSoftmaxStats *st, double m_new) {
    if (st->sum_e == 0.0) {
        st->max = m_new;
        return;
    }
    double d = st->max - m_new, r = exp(d);
    st->sum_et2 = r * (st->sum_et2 + 2.0 * d * st->sum_et + d * d * st->sum_e);
    st->sum_et = r * (st->sum_et + d * st->sum_e);
    st->sum_e = r * st->sum_e;
    st->max = m_new;
}

// Adds one score (the online form: rescales when the max grows).
static inline EMX_HD void emx_softmax_stats_add(EmxSoftmaxStats *st, float s) {
    if (isnan(s) || s == -INFINITY) return;  // no probability at all
    if (s == INFINITY) {
        st->n_posinf++;
        return;
    }
    double x = (double)s;
    if (x > st->max) emx_softmax_stats_rebase(st, x);
    double t = x - st->max, e = exp(t);
    st->sum_e += e;
    st->sum_et += e * t;
    st->sum_et2 += e * t * t;
}

// The statistics of the union of two disjoint parts (order does not matter).
static inline EMX_HD EmxSoftmaxStats emx_softmax_stats_merge(EmxSoftmaxStats a,
                                                            EmxSoftmaxStats b) {
    double m = a.max > b.max ? a.max : b.max;
    emx_softmax_stats_rebase(&a, m);
    emx_softmax_stats_rebase(&b, m);
    EmxSoftmaxStats out = {m, a.sum_e + b.sum_e, a.sum_et + b.sum_et, a.sum_et2 + b.sum_et2,
                           a.n_posinf + b.n_posinf};
    return out;
}

// Statistics of a whole row s[0..n) in one pass.
static inline EMX_HD EmxSoftmaxStats emx_softmax_stats_row(const float *s, int n) {
    EmxSoftmaxStats st = emx_softmax_stats_empty();
    for (int i = 0; i < n; i++) emx_softmax_stats_add(&st, s[i]);
    return st;
}

// Entropy in nats. k tokens at +inf: ln k (uniform over them); nothing: 0.
static inline EMX_HD double emx_softmax_stats_entropy_nats(EmxSoftmaxStats st) {
    if (st.n_posinf > 0) return log((double)st.n_posinf);
    if (st.sum_e == 0.0) return 0.0;
    double h = log(st.sum_e) - st.sum_et / st.sum_e;
    return h > 0.0 ? h : 0.0;  // rounding can leave -1e-17 for a one-hot row
}

// Varentropy (variance of the surprisal -ln p) in nats²; 0 for +inf ties or nothing.
static inline EMX_HD double emx_softmax_stats_varentropy_nats2(EmxSoftmaxStats st) {
    if (st.n_posinf > 0 || st.sum_e == 0.0) return 0.0;
    double mean = st.sum_et / st.sum_e;
    double v = st.sum_et2 / st.sum_e - mean * mean;
    return v > 0.0 ? v : 0.0;  // a variance; rounding can leave a tiny negative
}

// ln Σ e^s (so ln p_i = s_i - lse); +inf with +inf scores, -inf with nothing.
static inline EMX_HD double emx_softmax_stats_lse(EmxSoftmaxStats st) {
    if (st.n_posinf > 0) return INFINITY;
    if (st.sum_e == 0.0) return -INFINITY;
    return st.max + log(st.sum_e);
}

// Probability of score s in the row whose statistics are st (0 for -inf/NaN, and for finite
// scores when the row has +inf scores).
static inline EMX_HD double emx_softmax_stats_prob(EmxSoftmaxStats st, float s) {
    if (isnan(s) || s == -INFINITY) return 0.0;
    if (st.n_posinf > 0) return s == INFINITY ? 1.0 / st.n_posinf : 0.0;
    return exp((double)s - st.max) / st.sum_e;
}

// ---------------------------------------------------------------------------------------------
// The metrics of one decoding step.

typedef struct {
    double logits_entropy_bits;          // H of softmax(logits), no temperature
    double logits_varentropy_bits2;      // V = variance of -log2 p under p
    double logits_lse_nats;              // ln Σ e^logit: log p(i) = logit_i - lse (best-of-N)
    double attn_entropy_bits;            // mean over heads of H_h = entropy of softmax(S_h)
    double attn_varentropy_heads_bits2;  // variance across heads of H_h, ddof 0 (entropix's
                                         // "attn_varentropy": not a varentropy)
    double attn_varentropy_true_bits2;   // mean over heads of Var_h[-log2 A_h] (entropix-local)
    double attn_agreement;               // mean over h,k of |A_h(k) - mean_h' A_h'(k)|
                                         // (probability, in [0, 2/valid_len])
    double attn_interaction_strength;    // mean over h,k of |S_h(k)| (score units, i.e. nats)
} EmxMetrics;

// Which layers' attention the attention metrics come from.
enum {
    EMX_ATTN_LAYER_LAST = -1,  // the last layer (the sources' choice; the default)
    EMX_ATTN_LAYERS_ALL = -2,  // every layer's metrics computed alone, then averaged
};                             // >= 0: that layer

// The layers [*first, *last] that `layer` selects out of n_layers (the metrics average them).
// Returns 0, or -1 if n_layers < 1 or an index is out of range.
static inline EMX_HD int emx_attn_layer_range(int layer, int n_layers, int *first, int *last) {
    if (n_layers < 1) return -1;
    if (layer == EMX_ATTN_LAYER_LAST) {
        *first = *last = n_layers - 1;
    } else if (layer == EMX_ATTN_LAYERS_ALL) {
        *first = 0;
        *last = n_layers - 1;
    } else if (layer >= 0 && layer < n_layers) {
        *first = *last = layer;
    } else {
        return -1;
    }
    return 0;
}

// One layer's attention metrics (the attn_* fields of EmxMetrics, same units).
typedef struct {
    double entropy_bits;
    double varentropy_heads_bits2;
    double varentropy_true_bits2;
    double agreement;
    double interaction_strength;
} EmxAttnLayerMetrics;

// Fills the logits_* fields from logits[0..n) in one pass over memory (chunks of the row are
// reduced with a fixed max, which vectorises, and merged). Returns the number of tokens that
// can have probability (not -inf, not NaN); 0 leaves H = V = 0 and lse = -inf.
int emx_logits_metrics(const float *logits, int n, EmxMetrics *m);

// The plain definition, for tests: pass 1 max, pass 2 log-sum-exp, pass 3 Σ p·(-log2 p) and
// Σ p·(-log2 p - H)². Same special cases and return value as emx_logits_metrics.
int emx_logits_entropy_reference(const float *logits, int n, double *entropy_bits,
                                 double *varentropy_bits2);

// Two tokens' logits and what their log-probabilities need from the rest of the row, so that a
// backend can return a handful of numbers instead of the row (the agent pool's critic,
// runtime/pool/critic.h). Non-finite logits (NaN, +-inf) count as -inf: no probability, left out
// of max and sum. log p(id) = (logit_id - max) - log(sum) for a finite logit_id (in that order:
// with logits near 1e30, max + log(sum) would round log(sum) away).
typedef struct {
    float logit_a, logit_b;  // logits[id_a], logits[id_b], as they are (non-finite included)
    float max;               // the largest finite logit; -inf when none is finite
    double sum;              // sum over finite logits of exp((double)l - max); 0 when none
} EmxLogitPair;

// The CPU's definition: max in one pass, then the sum in index order, in double. The CUDA twin
// (kernels/logits_metrics.h, emx_cuda_logit_pair) takes the same max and sums in another order.
// Returns 0, or -1 when n < 1 or an id is outside [0, n) (*out untouched).
int emx_logit_pair(const float *logits, int n, int id_a, int id_b, EmxLogitPair *out);

// Metrics of one layer from its score rows scores[h * stride + k], h < n_heads, k < valid_len
// (valid_len = pos + 1: only the valid keys, the current token's own key included; entries
// past valid_len are never read). scratch holds valid_len doubles (the head-mean attention).
// head_entropy_bits / head_varentropy_bits2 [n_heads] receive the per-head values if not NULL.
// Returns 0, or -1 if n_heads < 1, valid_len < 1 or stride < valid_len.
int emx_attention_layer_metrics(const float *scores, int n_heads, int stride, int valid_len,
                                double *scratch, double *head_entropy_bits,
                                double *head_varentropy_bits2, EmxAttnLayerMetrics *out);

// Fills the attn_* fields from the forward pass's scores [n_layers][n_heads][stride] (stride =
// the state's ctx) for the layer(s) `layer` selects (EMX_ATTN_LAYER_LAST, EMX_ATTN_LAYERS_ALL or
// an index). scratch: valid_len doubles. Returns 0, or -1 on bad dimensions or layer.
int emx_attention_metrics(const float *scores, int n_layers, int n_heads, int stride,
                          int valid_len, int layer, double *scratch, EmxMetrics *m);
// The same with a sliding window: layer l's metrics are those of its keys first_key[l] ..
// valid_len - 1 alone (the keys its query saw; a local layer's scores before them are -inf), as
// if its rows started there: every mean over keys (agreement, interaction strength) is over the
// visible keys. first_key NULL, or an entry <= 0: every key (emx_attention_metrics).
int emx_attention_metrics_window(const float *scores, int n_layers, int n_heads, int stride, int valid_len,
                                 const int *first_key, int layer, double *scratch, EmxMetrics *m);

#endif
