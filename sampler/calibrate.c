// calibrate.c — percentile thresholds from a model's metrics (calibrate.h).
#include "sampler/calibrate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sampler/profile.h"

int emx_metric_samples_add(EmxMetricSamples *s, const EmxMetrics *m, int attn_varentropy_def) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 1024;
        double **cols[6] = {&s->h, &s->v, &s->ae, &s->av, &s->agr, &s->is};
        for (int c = 0; c < 6; c++) {
            double *grown = realloc(*cols[c], sizeof(double) * cap);
            if (!grown) return -1;  // the columns already grown keep their data: still consistent
            *cols[c] = grown;
        }
        s->cap = cap;
    }
    s->h[s->n] = m->logits_entropy_bits;
    s->v[s->n] = m->logits_varentropy_bits2;
    s->ae[s->n] = m->attn_entropy_bits;
    s->av[s->n] = attn_varentropy_def == EMX_ATTN_VARENTROPY_TRUE ? m->attn_varentropy_true_bits2
                                                                   : m->attn_varentropy_heads_bits2;
    s->agr[s->n] = m->attn_agreement;
    s->is[s->n] = m->attn_interaction_strength;
    s->n++;
    return 0;
}

void emx_metric_samples_free(EmxMetricSamples *s) {
    free(s->h);
    free(s->v);
    free(s->ae);
    free(s->av);
    free(s->agr);
    free(s->is);
    memset(s, 0, sizeof *s);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double emx_percentile(const double *x, size_t n, double q) {
    if (n == 0) return NAN;
    double *sorted = malloc(sizeof(double) * n);
    if (!sorted) return NAN;
    memcpy(sorted, x, sizeof(double) * n);
    qsort(sorted, n, sizeof(double), cmp_double);
    double rank = (double)(n - 1) * (q < 0 ? 0 : q > 100 ? 100 : q) / 100.0;
    size_t lo = (size_t)floor(rank);
    size_t hi = lo + 1 < n ? lo + 1 : lo;
    double frac = rank - (double)lo;
    double r = sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
    free(sorted);
    return r;
}

// The typical values of the sources' padded-cache metrics (profile.c, masked-bits).
#define REF_ATTN_ENTROPY_BITS 11.9
#define REF_INTERACTION 0.2

// c·ref/median, or c unchanged if the median is not positive (nothing to scale by).
static double rescale(double c, double ref, double median) {
    return median > 0 ? c * ref / median : c;
}

int emx_calibrate_profile(const EmxProfile *base, const EmxMetricSamples *s, EmxProfile *out,
                          EmxCalibration *cal) {
    if (s->n < 2) return -1;
    EmxCalibration c = {
        .h_p30 = emx_percentile(s->h, s->n, 30), .h_p50 = emx_percentile(s->h, s->n, 50),
        .h_p70 = emx_percentile(s->h, s->n, 70), .h_p85 = emx_percentile(s->h, s->n, 85),
        .v_p30 = emx_percentile(s->v, s->n, 30), .v_p50 = emx_percentile(s->v, s->n, 50),
        .v_p70 = emx_percentile(s->v, s->n, 70),
        .ae_median = emx_percentile(s->ae, s->n, 50), .av_median = emx_percentile(s->av, s->n, 50),
        .is_median = emx_percentile(s->is, s->n, 50), .agr_median = emx_percentile(s->agr, s->n, 50),
    };
    EmxProfile p = *base;
    p.lelv_entropy_below = c.h_p30;
    p.lelv_varentropy_below = c.v_p30;
    p.helv_entropy_above = c.h_p85;
    p.helv_varentropy_below = c.v_p30;
    p.lehv_entropy_below = c.h_p50;
    p.lehv_varentropy_above = c.v_p70;
    p.hehv_entropy_above = c.h_p70;
    p.hehv_varentropy_above = c.v_p70;
    // Attention-fed coefficients, from the classic values (not the base's, which may already
    // be rescaled): every formula gives at this model's median what classic gave at the
    // sources' typical values.
    EmxProfile classic;
    emx_profile_classic(&classic);
    p.helv_temp_attn_entropy = rescale(classic.helv_temp_attn_entropy, REF_ATTN_ENTROPY_BITS, c.ae_median);
    p.hehv_top_p_attn_entropy = rescale(classic.hehv_top_p_attn_entropy, REF_ATTN_ENTROPY_BITS, c.ae_median);
    p.lehv_temp_interaction = rescale(classic.lehv_temp_interaction, REF_INTERACTION, c.is_median);
    p.ada_top_k_interaction = rescale(classic.ada_top_k_interaction, REF_INTERACTION, c.is_median);
    p.ada_temp_attn_unc = rescale(classic.ada_temp_attn_unc, REF_ATTN_ENTROPY_BITS, c.ae_median + c.av_median);
    p.hehv_temp_attn_varentropy = 0.0;  // the spread across heads was ≈ 0 under padding
    p.ada_top_p_attn_varentropy = 0.0;
    *out = p;
    if (cal) *cal = c;
    return 0;
}

int emx_case_temperatures_at_median(const EmxProfile *p, const EmxCalibration *cal, double max_t,
                                    double temps[EMX_CASE_COUNT]) {
    const EmxMetrics m = {.logits_entropy_bits = cal->h_p50, .logits_varentropy_bits2 = cal->v_p50,
                          .attn_entropy_bits = cal->ae_median, .attn_varentropy_heads_bits2 = cal->av_median,
                          .attn_varentropy_true_bits2 = cal->av_median, .attn_agreement = cal->agr_median,
                          .attn_interaction_strength = cal->is_median};
    int hot = 0;
    for (int c = 0; c < EMX_CASE_COUNT; c++) {
        temps[c] = emx_entropix_case_params((EmxCase)c, &m, p).temperature;
        hot += temps[c] > max_t;
    }
    return hot;
}

void emx_case_distribution(const EmxProfile *p, const EmxMetricSamples *s,
                           double frac[EMX_CASE_COUNT]) {
    long count[EMX_CASE_COUNT] = {0};
    for (size_t i = 0; i < s->n; i++) {
        EmxMetrics m = {.logits_entropy_bits = s->h[i], .logits_varentropy_bits2 = s->v[i],
                        .attn_entropy_bits = s->ae[i], .attn_varentropy_heads_bits2 = s->av[i],
                        .attn_varentropy_true_bits2 = s->av[i], .attn_agreement = s->agr[i],
                        .attn_interaction_strength = s->is[i]};
        count[emx_entropix_case(&m, p)]++;
    }
    for (int c = 0; c < EMX_CASE_COUNT; c++) frac[c] = s->n ? (double)count[c] / (double)s->n : 0.0;
}
