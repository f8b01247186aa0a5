// metrics.c — host loops over the row statistics of metrics.h: logits entropy/varentropy, the
// two-pass reference, and the attention metrics of one layer or several.
#include "sampler/metrics.h"
#include "sampler/vocab_simd.h"

#include <math.h>
#include <stddef.h>

// Chunk of the logits reduced with one fixed max: 4 KiB of floats stays in L1 between the
// max pass and the exp pass, so the row is read from memory once.
#define LOGITS_CHUNK 1024

// Maximum of the logits that can be chosen, their count, and whether any is +inf.
static float row_max(const float *s, int n, int *n_valid, int *any_posinf) {
    return emx_vocab_max(s, n, n_valid, any_posinf);
}

#ifdef EMX_VOCAB_SIMD
// e^t, t e^t and t^2 e^t of s[0..n) - m summed four lanes at a time (vocab_simd.h); the lanes'
// sums are added in a fixed order, so the result depends on nothing but the row.
static void exp_sums(const float *s, int n, double m, double *z, double *zt, double *zt2) {
    const __m256d mv = _mm256_set1_pd(m), ninf = _mm256_set1_pd(-INFINITY), zero = _mm256_setzero_pd();
    __m256d vz = zero, vzt = zero, vzt2 = zero;
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        __m256d x = _mm256_cvtps_pd(_mm_loadu_ps(s + i));
        __m256d valid = _mm256_cmp_pd(x, ninf, _CMP_GT_OQ);  // -inf and NaN take no probability
        __m256d t = _mm256_and_pd(_mm256_sub_pd(x, mv), valid);
        __m256d e = _mm256_and_pd(emx_vexp4(t), valid);
        __m256d et = _mm256_mul_pd(e, t);
        vz = _mm256_add_pd(vz, e);
        vzt = _mm256_add_pd(vzt, et);
        vzt2 = _mm256_fmadd_pd(et, t, vzt2);
    }
    double lz[4], lzt[4], lzt2[4];
    _mm256_storeu_pd(lz, vz);
    _mm256_storeu_pd(lzt, vzt);
    _mm256_storeu_pd(lzt2, vzt2);
    *z = (lz[0] + lz[1]) + (lz[2] + lz[3]);
    *zt = (lzt[0] + lzt[1]) + (lzt[2] + lzt[3]);
    *zt2 = (lzt2[0] + lzt2[1]) + (lzt2[2] + lzt2[3]);
    for (; i < n; i++) {
        if (!(s[i] > -INFINITY)) continue;
        double t = (double)s[i] - m, e = exp(t);
        *z += e;
        *zt += e * t;
        *zt2 += e * t * t;
    }
}
#else
static void exp_sums(const float *s, int n, double m, double *z, double *zt, double *zt2) {
    *z = *zt = *zt2 = 0.0;
    for (int i = 0; i < n; i++) {
        if (!(s[i] > -INFINITY)) continue;  // -inf and NaN take no probability
        double t = (double)s[i] - m, e = exp(t);
        *z += e;
        *zt += e * t;
        *zt2 += e * t * t;
    }
}
#endif

// Statistics of s[0..n) with a fixed max: the inner loop has no data-dependent rescaling.
static EmxSoftmaxStats chunk_stats(const float *s, int n, int *n_valid) {
    int any_posinf = 0;
    float mx = row_max(s, n, n_valid, &any_posinf);
    if (any_posinf) return emx_softmax_stats_row(s, n);  // rare: count them the general way
    EmxSoftmaxStats st = emx_softmax_stats_empty();
    if (mx == -INFINITY) return st;  // all -inf/NaN: no mass here
    st.max = (double)mx;
    exp_sums(s, n, st.max, &st.sum_e, &st.sum_et, &st.sum_et2);
    return st;
}

int emx_logits_metrics(const float *logits, int n, EmxMetrics *m) {
    EmxSoftmaxStats st = emx_softmax_stats_empty();
    int n_valid = 0;
    for (int i0 = 0; i0 < n; i0 += LOGITS_CHUNK) {
        int len = n - i0 < LOGITS_CHUNK ? n - i0 : LOGITS_CHUNK;
        int valid;
        st = emx_softmax_stats_merge(st, chunk_stats(logits + i0, len, &valid));
        n_valid += valid;
    }
    m->logits_entropy_bits = emx_softmax_stats_entropy_nats(st) / EMX_LN2;
    m->logits_varentropy_bits2 = emx_softmax_stats_varentropy_nats2(st) / (EMX_LN2 * EMX_LN2);
    m->logits_lse_nats = emx_softmax_stats_lse(st);
    return n_valid;
}

int emx_logits_entropy_reference(const float *logits, int n, double *entropy_bits,
                                 double *varentropy_bits2) {
    *entropy_bits = *varentropy_bits2 = 0.0;
    double mx = -INFINITY;
    int n_valid = 0, n_posinf = 0;
    for (int i = 0; i < n; i++) {
        if (!(logits[i] > -INFINITY)) continue;
        n_valid++;
        n_posinf += logits[i] == INFINITY;
        if (logits[i] > mx) mx = logits[i];
    }
    if (n_valid == 0) return 0;
    if (n_posinf > 0) {  // the +inf tokens share the mass: uniform over them
        *entropy_bits = log2((double)n_posinf);
        return n_valid;
    }
    double z = 0.0;
    for (int i = 0; i < n; i++)
        if (logits[i] > -INFINITY) z += exp((double)logits[i] - mx);
    double log_z = log(z), h = 0.0;  // ln p = (l - max) - ln z: keeps its digits at |l| ~ 1e38
    for (int i = 0; i < n; i++) {
        if (!(logits[i] > -INFINITY)) continue;
        double lp = ((double)logits[i] - mx) - log_z;  // finite
        h -= exp(lp) * lp;
    }
    double v = 0.0;
    for (int i = 0; i < n; i++) {
        if (!(logits[i] > -INFINITY)) continue;
        double lp = ((double)logits[i] - mx) - log_z, d = -lp - h;
        v += exp(lp) * d * d;
    }
    *entropy_bits = h / EMX_LN2;
    *varentropy_bits2 = v / (EMX_LN2 * EMX_LN2);
    return n_valid;
}

int emx_attention_layer_metrics(const float *scores, int n_heads, int stride, int valid_len,
                                double *scratch, double *head_entropy_bits,
                                double *head_varentropy_bits2, EmxAttnLayerMetrics *out) {
    if (n_heads < 1 || valid_len < 1 || stride < valid_len) return -1;
    // Pass 1: per-head statistics -> entropy, true varentropy; the head-mean attention row.
    // Entropy mean and spread across heads by Welford's update (no E[H²] - E[H]² cancellation).
    double mean_h = 0.0, m2_h = 0.0, sum_v = 0.0, sum_abs = 0.0;
    for (int k = 0; k < valid_len; k++) scratch[k] = 0.0;
    for (int h = 0; h < n_heads; h++) {
        const float *row = scores + (long)h * stride;  // [valid_len]
        EmxSoftmaxStats st = emx_softmax_stats_row(row, valid_len);
        double hb = emx_softmax_stats_entropy_nats(st) / EMX_LN2;
        double vb = emx_softmax_stats_varentropy_nats2(st) / (EMX_LN2 * EMX_LN2);
        if (head_entropy_bits) head_entropy_bits[h] = hb;
        if (head_varentropy_bits2) head_varentropy_bits2[h] = vb;
        double delta = hb - mean_h;
        mean_h += delta / (h + 1);
        m2_h += delta * (hb - mean_h);
        sum_v += vb;
        for (int k = 0; k < valid_len; k++) {
            scratch[k] += emx_softmax_stats_prob(st, row[k]) / n_heads;
            if (isfinite(row[k])) sum_abs += fabs((double)row[k]);  // non-finite counts as 0
        }
    }
    // Pass 2: agreement = mean L1 deviation of each head's attention from the head mean.
    double dev = 0.0;
    for (int h = 0; h < n_heads; h++) {
        const float *row = scores + (long)h * stride;
        EmxSoftmaxStats st = emx_softmax_stats_row(row, valid_len);
        for (int k = 0; k < valid_len; k++)
            dev += fabs(emx_softmax_stats_prob(st, row[k]) - scratch[k]);
    }
    out->entropy_bits = mean_h;
    out->varentropy_heads_bits2 = m2_h / n_heads;  // ddof 0, like jnp.var
    out->varentropy_true_bits2 = sum_v / n_heads;
    out->agreement = dev / ((double)n_heads * valid_len);
    out->interaction_strength = sum_abs / ((double)n_heads * valid_len);
    return 0;
}

int emx_attention_metrics(const float *scores, int n_layers, int n_heads, int stride,
                          int valid_len, int layer, double *scratch, EmxMetrics *m) {
    return emx_attention_metrics_window(scores, n_layers, n_heads, stride, valid_len, NULL, layer, scratch, m);
}

int emx_attention_metrics_window(const float *scores, int n_layers, int n_heads, int stride, int valid_len,
                                 const int *first_key, int layer, double *scratch, EmxMetrics *m) {
    int first, last;  // the layers [first, last] averaged
    if (emx_attn_layer_range(layer, n_layers, &first, &last) != 0) return -1;
    EmxAttnLayerMetrics sum = {0}, one;
    for (int l = first; l <= last; l++) {
        // a local layer's row from its first visible key: keys [k0, valid_len)
        const int k0 = first_key && first_key[l] > 0 && first_key[l] < valid_len ? first_key[l] : 0;
        const float *ls = scores + (long)l * n_heads * stride + k0;  // [n_heads][stride]
        if (emx_attention_layer_metrics(ls, n_heads, stride, valid_len - k0, scratch, NULL, NULL,
                                        &one) != 0)
            return -1;
        sum.entropy_bits += one.entropy_bits;
        sum.varentropy_heads_bits2 += one.varentropy_heads_bits2;
        sum.varentropy_true_bits2 += one.varentropy_true_bits2;
        sum.agreement += one.agreement;
        sum.interaction_strength += one.interaction_strength;
    }
    double n = last - first + 1;
    m->attn_entropy_bits = sum.entropy_bits / n;
    m->attn_varentropy_heads_bits2 = sum.varentropy_heads_bits2 / n;
    m->attn_varentropy_true_bits2 = sum.varentropy_true_bits2 / n;
    m->attn_agreement = sum.agreement / n;
    m->attn_interaction_strength = sum.interaction_strength / n;
    return 0;
}

int emx_logit_pair(const float *logits, int n, int id_a, int id_b, EmxLogitPair *out) {
    if (!logits || n < 1 || id_a < 0 || id_a >= n || id_b < 0 || id_b >= n) return -1;
    float mx = -INFINITY;
    for (int i = 0; i < n; i++)
        if (isfinite(logits[i]) && logits[i] > mx) mx = logits[i];
    double sum = 0.0;  // every term exp(l - mx) <= 1; the max's own term is 1
    for (int i = 0; i < n; i++)
        if (isfinite(logits[i])) sum += exp((double)logits[i] - (double)mx);
    out->logit_a = logits[id_a];
    out->logit_b = logits[id_b];
    out->max = mx;
    out->sum = sum;
    return 0;
}
