// textstats.c — repetition loops and distinct-n over token ids (textstats.h).
#include "tools/eval/textstats.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

int eval_repetition_loop(const int *ids, int n) {
    for (int k = 1; k <= EVAL_LOOP_MAX_PERIOD; k++) {
        const int len = 3 * k > EVAL_LOOP_MIN_TOKENS ? 3 * k : EVAL_LOOP_MIN_TOKENS;
        if (len > n) break;  // longer periods need longer tails still
        int periodic = 1;
        for (int i = n - len + k; i < n && periodic; i++) periodic = ids[i] == ids[i - k];
        if (periodic) return 1;
    }
    return 0;
}

static int cmp_u64(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

double eval_distinct_n(const int *ids, int n, int order) {
    if (order < 1 || order > 2 || n < order) return NAN;
    const int m = n - order + 1;
    uint64_t *g = malloc((size_t)m * sizeof *g);
    if (!g) return -1;
    for (int i = 0; i < m; i++)  // an n-gram as one key: ids are below 2^32
        g[i] = order == 1 ? (uint32_t)ids[i] : ((uint64_t)(uint32_t)ids[i] << 32) | (uint32_t)ids[i + 1];
    qsort(g, (size_t)m, sizeof *g, cmp_u64);
    int distinct = 0;
    for (int i = 0; i < m; i++) distinct += i == 0 || g[i] != g[i - 1];
    free(g);
    return (double)distinct / m;
}
