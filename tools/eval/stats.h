// stats.h — the statistics of eval's summary (docs/eval.md "Statistics").
#ifndef ENTROPIX_EVAL_STATS_H
#define ENTROPIX_EVAL_STATS_H

// The Wilson score interval of k successes in n trials at 95% (z = 1.959963984540054).
// n == 0: [0, 1].
void eval_wilson(long k, long n, double *lo, double *hi);

// Exact two-sided sign test of b against c: min(1, 2 * P(X <= min(b, c))), X ~ Bin(b + c, 1/2)
// (the exact McNemar test when b and c count discordant pairs). b + c == 0: 1.
double eval_sign_test_p(long b, long c);

// The area under the ROC curve of score[0..n) as a predictor of positive[0..n) (1 / 0): the
// probability that a positive's score is above a negative's, ties counting one half, over every
// (positive, negative) pair (the Mann-Whitney U over n_pos * n_neg). NaN when either class is
// empty or memory runs out. The scores must not be NaN.
double eval_auroc(const double *score, const int *positive, int n);

#endif
