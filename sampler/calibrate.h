// calibrate.h — a profile from a model's own metric distribution (tools/calibrate).
//
// Fixed thresholds do not transfer: the classic ones were set on one model family with scores
// over a zero-padded cache; a 49k-vocabulary model has a far heavier-tailed next-token
// distribution (varentropy of tens of bits² on confident tokens), and masked attention has
// other scales. Calibration measures this model's metrics over a text (teacher-forced, one
// position at a time) and places each threshold at a percentile of them:
//
//   case / threshold            percentile   reading
//   LELV  H below               P30(H)       the confident third of the tokens ...
//         V below               P30(V)       ... whose alternatives are also few
//   HELV  H above               P85(H)       very uncertain ...
//         V below               P30(V)       ... but evenly so (a flat top, no long tail);
//                                            rare on purpose: each HELV run inserts a pause
//   LEHV  H below               P50(H)       a likely token ...
//         V above               P70(V)       ... with a heavy tail of others (a fork)
//   HEHV  H above               P70(H)       uncertain ...
//         V above               P70(V)       ... and uneven: lost
//   otherwise ADAPTIVE
// H and V are correlated, so the joint cases take fewer tokens than the percentiles suggest
// (tools/calibrate prints the resulting distribution). The coefficients that multiply an
// attention metric are rescaled as the masked-bits profile does (profile.c), with this
// model's medians in place of SmolLM2's: c' = c·x_ref/median(x), x_ref the typical value the
// sources' constants were tuned at (attention entropy 11.9 bits, interaction strength 0.2);
// terms on metrics that were ≈ 0 there (spread across heads) are switched off. Everything
// else is kept from the base profile.
#ifndef ENTROPIX_CALIBRATE_H
#define ENTROPIX_CALIBRATE_H

#include <stddef.h>

#include "sampler/entropix.h"
#include "sampler/metrics.h"

// The metric samples of a calibration run, one entry per position.
typedef struct {
    double *h, *v;      // logits entropy (bits), varentropy (bits²)
    double *ae, *av;    // attention entropy (bits), attention varentropy (the profile's def)
    double *agr, *is;   // agreement, interaction strength
    size_t n, cap;
} EmxMetricSamples;

// Appends one step's metrics (av per `attn_varentropy_def`). Returns 0, or -1 out of memory.
int emx_metric_samples_add(EmxMetricSamples *s, const EmxMetrics *m, int attn_varentropy_def);
void emx_metric_samples_free(EmxMetricSamples *s);

// The q-th percentile (q in [0, 100]) of x[0..n), linear interpolation between the closest
// ranks (numpy's default): sorted[(n-1)·q/100] interpolated. x is not modified. NAN if n == 0.
double emx_percentile(const double *x, size_t n, double q);

// The percentiles above and the medians the coefficients are rescaled with.
typedef struct {
    double h_p30, h_p50, h_p70, h_p85, v_p30, v_p50, v_p70;
    double ae_median, av_median, is_median, agr_median;
} EmxCalibration;

// out = base with the thresholds and attention coefficients set from the samples (above).
// Returns 0, or -1 if there are fewer than 2 samples.
int emx_calibrate_profile(const EmxProfile *base, const EmxMetricSamples *s, EmxProfile *out,
                          EmxCalibration *cal);

// Each case's temperature under p at the samples' median metrics (H, V, and the attention
// medians), whatever case those metrics fall in (LELV: 0). Returns how many cases exceed max_t.
// A case hotter than the model's own temperature (1) at a typical step re-rolls the tokens that
// greedy keeps, which is where entropix lost to greedy on short answers (docs/entropix.md):
// tools/calibrate warns about each one.
int emx_case_temperatures_at_median(const EmxProfile *p, const EmxCalibration *cal, double max_t,
                                    double temps[EMX_CASE_COUNT]);

// The fraction of the samples each case of profile p takes (the switch's case rule alone).
void emx_case_distribution(const EmxProfile *p, const EmxMetricSamples *s,
                           double frac[EMX_CASE_COUNT]);

#endif
