// sampling_naive.cu — the combined sampler as its definition, one block and plain loops: the
// lab's first sampling version (tools/lab/sampling.cu).
//
//   token = emx_sample(logits, n, params, u): the kept tokens (top-k, then top-p, then min-p, in
//   rank order: higher logit first, lower id among equals), softmax(logit / T) over them in
//   double, then the first kept token whose cumulative probability exceeds u · Σp.
// Threads: one block of 256. The kept tokens are found one at a time, best first: each pick is
// a pass over the whole vocabulary (thread i looks at logits i, i + 256, ...) for the best token
// ranking after the previous pick, then a halving tree in shared memory. Thread 0 alone does
// what is sequential: the maximum and the count of candidates (a plain loop over the logits),
// the sums and the draw over the kept list, in the CPU's order, with the CPU's double formulas
// (sampler/sample.c), so the token is the CPU's. u is given (the caller draws it:
// emx_uniform_f64(seed, step, lane)); kept [n] is a device scratch list.
// Bytes per call: the logits once per pick plus once for the maximum: (k + 1) · n · 4 for top-k
// k (41 reads of the vocabulary at the default k = 40), more for top-p alone (one pass per token
// of the nucleus).
// Why it is slow: a pass per kept token, and one block on one SM of 132. sampling.cu's one-block
// version (emx_cuda_sample_naive) finds the whole kept set in a fixed number of passes (a radix
// select on the logits' bits); the runtime's version spreads those passes over a block per 2048
// logits. Kept in its own file: the runtime never launches it (kernels/naive.h).
#include "kernels/naive.h"

#include <math.h>

#define NAIVE_SAMPLE_THREADS 256

struct NaivePick {
    float logit;
    int id;  // -1: none
};

static __device__ bool naive_candidate(float l) { return !isnan(l) && l != -INFINITY; }

// a before b in rank order: the higher logit, the lower id among equal logits
static __device__ bool naive_before(NaivePick a, NaivePick b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// The best candidate that ranks after prev (prev.id < 0: the best of all), or id -1 when none is
// left; every thread gets it. s: NAIVE_SAMPLE_THREADS entries of shared memory.
static __device__ NaivePick naive_next(const float *logits, int n, NaivePick prev, NaivePick *s) {
    NaivePick best = {-INFINITY, -1};
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const NaivePick x = {logits[i], i};
        if (!naive_candidate(x.logit) || (prev.id >= 0 && !naive_before(prev, x))) continue;
        if (best.id < 0 || naive_before(x, best)) best = x;
    }
    s[threadIdx.x] = best;
    __syncthreads();
    for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) {
            const NaivePick o = s[threadIdx.x + half];
            if (o.id >= 0 && (s[threadIdx.x].id < 0 || naive_before(o, s[threadIdx.x]))) s[threadIdx.x] = o;
        }
        __syncthreads();
    }
    const NaivePick r = s[0];
    __syncthreads();  // s is written again by the next pick
    return r;
}

// The inverse-CDF walk over kept[0..m) with their p (sampler/sample.c's emx_sample_draw): the
// first kept token whose cumulative p exceeds u · Σp. Thread 0.
static __device__ int naive_walk(const EmxCandidate *kept, int m, double u) {
    if (m <= 0) return -1;
    if (!(u >= 0.0)) u = 0.0;  // NaN or negative
    double total = 0.0, cum = 0.0;
    for (int i = 0; i < m; i++) total += kept[i].p;
    int last = -1;  // the last entry with p > 0: the answer if rounding leaves cum <= u · total
    for (int i = 0; i < m; i++) {
        if (kept[i].p <= 0.0) continue;
        cum += kept[i].p;
        last = i;
        if (cum > u * total) return kept[i].id;
    }
    return last >= 0 ? kept[last].id : kept[0].id;
}

// The draw over kept[0..m): softmax(logit / T) in double (the end of emx_sample_distribution),
// then the walk. Thread 0.
static __device__ int naive_draw(EmxCandidate *kept, int m, float max, double inv_t, double u) {
    double total = 0.0;
    for (int i = 0; i < m; i++) {
        kept[i].p = exp(inv_t * ((double)kept[i].logit - max));
        total += kept[i].p;
    }
    for (int i = 0; i < m; i++) kept[i].p /= total;  // total >= exp(0) of the best: no 0/0
    return naive_walk(kept, m, u);
}

// What thread 0 finds in one plain loop before the picks: the maximum, the first token with it,
// the number of candidates, and Σ exp(s (l - max)) over them in id order (top-p's total).
struct NaiveStats {
    float max;
    int argmax, n_valid;
    double total;
};

static __device__ NaiveStats naive_stats(const float *logits, int n, double s) {
    NaiveStats st = {-INFINITY, -1, 0, 0.0};
    for (int i = 0; i < n; i++) {
        if (!naive_candidate(logits[i])) continue;
        st.n_valid++;
        if (st.argmax < 0 || logits[i] > st.max) st = {logits[i], i, st.n_valid, 0.0};
    }
    for (int i = 0; i < n && isfinite(st.max); i++)
        if (naive_candidate(logits[i])) st.total += exp(s * ((double)logits[i] - st.max));
    return st;
}

__global__ void sample_naive_kernel(const float *logits, int n, EmxSamplerParams sp, double u, EmxCandidate *kept,
                                    int *token_out) {
    __shared__ NaivePick s[NAIVE_SAMPLE_THREADS];
    __shared__ NaiveStats st;
    __shared__ int stop;
    const double inv_t = 1.0 / (double)sp.temperature, scale = sp.temperature_first ? inv_t : 1.0;
    const double min_p = sp.min_p < 1.0f ? (double)sp.min_p : 1.0;
    if (threadIdx.x == 0) st = naive_stats(logits, n, scale);
    __syncthreads();
    const bool greedy = !(sp.temperature > 0.0f) || sp.top_k == 1 || st.n_valid == 0;
    const bool top_k = sp.top_k > 0 && sp.top_k < st.n_valid, top_p = sp.top_p < 1.0f, min_p_on = sp.min_p > 0.0f;
    int m = 0;  // kept[0..m), thread 0's count
    if (greedy || st.max == INFINITY || !(top_k || top_p || min_p_on)) {
        if (threadIdx.x != 0) return;
        if (greedy) {
            *token_out = st.argmax;
            return;
        }
        // +inf logits share everything equally (at most top_k of them); no filter: every candidate, in id order
        for (int i = 0; i < n && (st.max != INFINITY || sp.top_k <= 0 || m < sp.top_k); i++)
            if (st.max == INFINITY ? logits[i] == INFINITY : naive_candidate(logits[i]))
                kept[m++] = EmxCandidate{i, logits[i], 0.0};
        if (st.max != INFINITY) {
            *token_out = naive_draw(kept, m, st.max, inv_t, u);
            return;
        }
        for (int i = 0; i < m; i++) kept[i].p = 1.0 / m;
        *token_out = naive_walk(kept, m, u);
        return;
    }
    // The kept tokens, best first, one pass over the vocabulary each: top-k stops at k, top-p (no
    // top-k) when the mass reaches top_p · Z, min-p alone at the first token below it.
    double cum = 0.0;
    for (NaivePick prev = {0.0f, -1};;) {
        const NaivePick p = naive_next(logits, n, prev, s);
        if (p.id < 0) break;  // the same for every thread
        if (threadIdx.x == 0) {
            const double w = exp(scale * ((double)p.logit - st.max));
            const bool keep = top_k || top_p || w >= min_p;
            if (keep) kept[m++] = EmxCandidate{p.id, p.logit, 0.0};
            cum += w;
            stop = !keep || (top_k ? m == sp.top_k : top_p && cum >= sp.top_p * st.total);
        }
        __syncthreads();
        if (stop) break;
        prev = p;
    }
    if (threadIdx.x != 0) return;
    if (top_k && top_p) {  // top-p renormalised over the top-k survivors
        double total = 0.0, c = 0.0;
        for (int i = 0; i < m; i++) total += exp(scale * ((double)kept[i].logit - st.max));
        for (int i = 0; i < m; i++) {
            c += exp(scale * ((double)kept[i].logit - st.max));
            if (c >= sp.top_p * total) {
                m = i + 1;
                break;
            }
        }
    }
    if (min_p_on && (top_k || top_p)) {  // a ranked prefix; the best token always stays
        int keep = 1;
        while (keep < m && exp(scale * ((double)kept[keep].logit - st.max)) >= min_p) keep++;
        m = keep;
    }
    *token_out = naive_draw(kept, m, st.max, inv_t, u);
}

extern "C" cudaError_t emx_cuda_sample_naive(const float *logits, int n, const EmxSamplerParams *params, double u,
                                             EmxCandidate *kept, int *token_out, cudaStream_t stream) {
    if (!logits || n < 1 || !params || !kept || !token_out) return cudaErrorInvalidValue;
    sample_naive_kernel<<<1, NAIVE_SAMPLE_THREADS, 0, stream>>>(logits, n, *params, u, kept, token_out);
    return cudaGetLastError();
}
