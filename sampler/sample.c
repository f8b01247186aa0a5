// sample.c — the basic samplers (semantics in sample.h).
//
// Cost per call for a vocabulary of n: top-k selects with a k-entry heap (O(n log k), no sort
// of the whole vocabulary); top-p without top-k looks in the best 64 first (enough for a
// confident model), else sorts only the tokens that can be in the nucleus (nucleus_of_all);
// min-p alone needs one pass plus a sort of the survivors. Probabilities are in double. The
// passes over the whole vocabulary that only compare (the maximum, argmax, top-k's scan) run
// eight logits at a time where the build has AVX2 (vocab_simd.h), with the same results.
#include "sampler/sample.h"
#include "sampler/vocab_simd.h"

#include <math.h>
#include <stdlib.h>

// A logit that can be chosen at all: not NaN, not -inf.
static int is_candidate(float l) { return !isnan(l) && l != -INFINITY; }

// Rank order: higher logit first, lower id first among equal logits. A total order, so every
// selection below is deterministic.
static int ranks_before(const EmxCandidate *a, const EmxCandidate *b) {
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

int emx_sample_argmax(const float *logits, int n) {
    // the maximum, then its first occurrence: the first maximum, as a plain loop would give
    float mx = emx_vocab_max(logits, n, NULL, NULL);
    return mx == -INFINITY ? -1 : emx_vocab_find(logits, n, mx);
}

// ---------------------------------------------------------------------------------------------
// Selection of the best c tokens: a heap whose root is the worst kept token.

static void heap_sift_down(EmxCandidate *h, int size, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, worst = i;
        if (l < size && ranks_before(&h[worst], &h[l])) worst = l;
        if (r < size && ranks_before(&h[worst], &h[r])) worst = r;
        if (worst == i) return;
        EmxCandidate t = h[i];
        h[i] = h[worst];
        h[worst] = t;
        i = worst;
    }
}

static void heap_sift_up(EmxCandidate *h, int i) {
    while (i > 0) {
        int parent = (i - 1) / 2;
        if (!ranks_before(&h[parent], &h[i])) return;  // parent already worse: heap holds
        EmxCandidate t = h[i];
        h[i] = h[parent];
        h[parent] = t;
        i = parent;
    }
}

// Writes the best min(c, #candidates) tokens to out[0..) in rank order; returns their count.
static int select_top(const float *logits, int n, int c, EmxCandidate *out) {
    int size = 0;
    for (int i = 0; i < n; i++) {
#ifdef EMX_VOCAB_SIMD
        // Once the heap is full, a token displaces its worst only with a greater logit (a tie
        // loses: the kept ids are smaller), so eight at a time that cannot are skipped.
        if (size == c && (i & 7) == 0 && i + 8 <= n && !emx_vocab_any_above8(logits + i, out[0].logit)) {
            i += 7;
            continue;
        }
#endif
        if (!is_candidate(logits[i])) continue;
        EmxCandidate x = {.id = i, .logit = logits[i], .p = 0.0};
        if (size < c) {
            out[size] = x;
            heap_sift_up(out, size++);
        } else if (ranks_before(&x, &out[0])) {
            out[0] = x;
            heap_sift_down(out, size, 0);
        }
    }
    // Heap sort: moving the worst to the end each time leaves the array best-first.
    for (int end = size - 1; end > 0; end--) {
        EmxCandidate t = out[0];
        out[0] = out[end];
        out[end] = t;
        heap_sift_down(out, end, 0);
    }
    return size;
}

static int cmp_rank(const void *a, const void *b) {
    const EmxCandidate *x = a, *y = b;
    return ranks_before(x, y) ? -1 : ranks_before(y, x) ? 1 : 0;
}

// ---------------------------------------------------------------------------------------------

// Length of the shortest prefix of cand[0..m) (rank order) whose weight reaches top_p * total,
// with weights exp(s * (logit - max)). At least 1; m if rounding keeps the sum short of it.
static int nucleus_len(const EmxCandidate *cand, int m, double s, double max, double top_p,
                       double total) {
    double target = top_p * total, cum = 0.0;
    for (int i = 0; i < m; i++) {
        cum += exp(s * ((double)cand[i].logit - max));
        if (cum >= target) return i + 1;
    }
    return m;
}

// top-p over the whole vocabulary (no top-k before it), without sorting the vocabulary.
// Fast path: the nucleus of a confident model lies in its best few tokens, so take the best 64
// with a heap; if their mass reaches top_p, done. Otherwise: a token with weight below
// eps = (1 - top_p) * Z / n_valid cannot be in the nucleus, since all of those together weigh
// less than (1 - top_p) * Z, so the tokens at or above eps already hold top_p of the mass and
// the nucleus is a prefix of them. Sort only those.
static int nucleus_of_all(const float *logits, int n, int n_valid, double s, double max,
                          double top_p, EmxCandidate *work) {
    double total = 0.0;  // Z = sum of exp(s * (l - max)) over every candidate
    for (int i = 0; i < n; i++)
        if (is_candidate(logits[i])) total += exp(s * ((double)logits[i] - max));
    int m = select_top(logits, n, n_valid < 64 ? n_valid : 64, work);
    int k = nucleus_len(work, m, s, max, top_p, total);
    if (k < m || m == n_valid) return k;

    double eps = (1.0 - top_p) * total / n_valid;
    m = 0;
    for (int i = 0; i < n; i++) {
        if (!is_candidate(logits[i])) continue;
        if (exp(s * ((double)logits[i] - max)) >= eps)
            work[m++] = (EmxCandidate){.id = i, .logit = logits[i], .p = 0.0};
    }
    qsort(work, (size_t)m, sizeof *work, cmp_rank);
    return nucleus_len(work, m, s, max, top_p, total);
}

// Survivors of min-p alone: p_i >= min_p * p_max, i.e. exp(s * (l_i - max)) >= min_p.
static int min_p_of_all(const float *logits, int n, double s, double max, double min_p,
                        EmxCandidate *work) {
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (!is_candidate(logits[i])) continue;
        if (exp(s * ((double)logits[i] - max)) >= min_p)
            work[m++] = (EmxCandidate){.id = i, .logit = logits[i], .p = 0.0};
    }
    qsort(work, (size_t)m, sizeof *work, cmp_rank);
    return m;
}

// Tokens whose logit is +inf: softmax's limit gives them equal shares of everything.
static int infinite_logits(const float *logits, int n, int top_k, EmxCandidate *work) {
    int m = 0;
    for (int i = 0; i < n && (top_k <= 0 || m < top_k); i++)
        if (logits[i] == INFINITY) work[m++] = (EmxCandidate){.id = i, .logit = INFINITY};
    for (int i = 0; i < m; i++) work[i].p = 1.0 / m;
    return m;
}

int emx_sample_distribution(const float *logits, int n, const EmxSamplerParams *sp,
                            EmxCandidate *work) {
    if (n <= 0) return 0;
    if (!(sp->temperature > 0.0f) || sp->top_k == 1) {  // NaN temperature too
        int a = emx_sample_argmax(logits, n);
        if (a < 0) return 0;
        work[0] = (EmxCandidate){.id = a, .logit = logits[a], .p = 1.0};
        return 1;
    }
    int n_valid = 0;
    float max = emx_vocab_max(logits, n, &n_valid, NULL);
    if (n_valid == 0) return 0;
    if (max == INFINITY) return infinite_logits(logits, n, sp->top_k, work);

    double inv_t = 1.0 / (double)sp->temperature;
    double s = sp->temperature_first ? inv_t : 1.0;  // the scale the filters see
    int top_k_on = sp->top_k > 0 && sp->top_k < n_valid;
    int top_p_on = sp->top_p < 1.0f;
    int min_p_on = sp->min_p > 0.0f;
    double min_p = sp->min_p < 1.0f ? (double)sp->min_p : 1.0;  // > 1 would keep nothing

    int m;  // work[0..m) = the kept tokens, in rank order when any filter is on
    if (top_k_on) {
        m = select_top(logits, n, sp->top_k, work);
        if (top_p_on) {
            double total = 0.0;  // renormalised over the top-k survivors
            for (int i = 0; i < m; i++) total += exp(s * ((double)work[i].logit - max));
            m = nucleus_len(work, m, s, max, sp->top_p, total);
        }
    } else if (top_p_on) {
        m = nucleus_of_all(logits, n, n_valid, s, max, sp->top_p, work);
    } else if (min_p_on) {
        m = min_p_of_all(logits, n, s, max, min_p, work);
    } else {
        m = 0;
        for (int i = 0; i < n; i++)
            if (is_candidate(logits[i]))
                work[m++] = (EmxCandidate){.id = i, .logit = logits[i], .p = 0.0};
    }
    if (min_p_on && (top_k_on || top_p_on)) {
        // A ranked prefix again; the best token (exp(0) = 1 >= min_p) always stays.
        int keep = 1;
        while (keep < m && exp(s * ((double)work[keep].logit - max)) >= min_p) keep++;
        m = keep;
    }

    // Final distribution: softmax(logit / T) over the kept tokens, in double.
    double total = 0.0;
    for (int i = 0; i < m; i++) {
        work[i].p = exp(inv_t * ((double)work[i].logit - max));
        total += work[i].p;
    }
    for (int i = 0; i < m; i++) work[i].p /= total;  // total >= exp(0) of the best: no 0/0
    return m;
}

int emx_sample_draw(const EmxCandidate *cand, int m, double u) {
    if (m <= 0) return -1;
    if (!(u >= 0.0)) u = 0.0;  // NaN or negative
    double total = 0.0;
    for (int i = 0; i < m; i++) total += cand[i].p;
    double target = u * total, cum = 0.0;
    int last = -1;  // the last entry with p > 0: the answer if rounding leaves cum <= target
    for (int i = 0; i < m; i++) {
        if (cand[i].p <= 0.0) continue;
        cum += cand[i].p;
        last = i;
        if (cum > target) return cand[i].id;
    }
    return last >= 0 ? cand[last].id : cand[0].id;
}

int emx_sample(const float *logits, int n, const EmxSamplerParams *sp, double u,
               EmxCandidate *work) {
    int m = emx_sample_distribution(logits, n, sp, work);
    return emx_sample_draw(work, m, u);
}
