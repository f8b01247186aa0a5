// stats.c — Wilson interval and the exact sign test (stats.h).
#include "tools/eval/stats.h"

#include <math.h>
#include <stdlib.h>

void eval_wilson(long k, long n, double *lo, double *hi) {
    if (n <= 0) {
        *lo = 0.0;
        *hi = 1.0;
        return;
    }
    const double z = 1.959963984540054, z2 = z * z, nn = (double)n, p = (double)k / nn;
    const double den = 1.0 + z2 / nn;
    const double mid = (p + z2 / (2.0 * nn)) / den;
    const double half = z / den * sqrt(p * (1.0 - p) / nn + z2 / (4.0 * nn * nn));
    *lo = fmax(0.0, mid - half);
    *hi = fmin(1.0, mid + half);
}

double eval_sign_test_p(long b, long c) {
    const long n = b + c, m = b < c ? b : c;
    if (n <= 0) return 1.0;
    // P(X <= m) = sum_i C(n, i) / 2^n, each term in logs (n can be thousands: 2^n overflows)
    double sum = 0.0;
    const double lg_n1 = lgamma((double)n + 1.0), ln2n = (double)n * log(2.0);
    for (long i = 0; i <= m; i++)
        sum += exp(lg_n1 - lgamma((double)i + 1.0) - lgamma((double)(n - i) + 1.0) - ln2n);
    const double p = 2.0 * sum;
    return p < 1.0 ? p : 1.0;
}

typedef struct {
    double score;
    int positive;
} Scored;

static int by_score(const void *a, const void *b) {
    const double x = ((const Scored *)a)->score, y = ((const Scored *)b)->score;
    return (x > y) - (x < y);
}

double eval_auroc(const double *score, const int *positive, int n) {
    long n_pos = 0, n_neg = 0;
    for (int i = 0; i < n; i++) n_pos += positive[i] != 0, n_neg += positive[i] == 0;
    if (n_pos == 0 || n_neg == 0) return NAN;
    Scored *v = malloc((size_t)n * sizeof *v);
    if (!v) return NAN;
    for (int i = 0; i < n; i++) v[i] = (Scored){score[i], positive[i] != 0};
    qsort(v, (size_t)n, sizeof *v, by_score);
    // walk the groups of equal scores upwards: a positive beats every negative below its group and
    // ties with its group's negatives
    double u = 0.0;
    long neg_below = 0;
    for (int i = 0; i < n;) {
        int j = i;
        long pos = 0, neg = 0;
        for (; j < n && v[j].score == v[i].score; j++) pos += v[j].positive, neg += !v[j].positive;
        u += (double)pos * (double)neg_below + 0.5 * (double)pos * (double)neg;
        neg_below += neg;
        i = j;
    }
    free(v);
    return u / ((double)n_pos * (double)n_neg);
}
