// cpu_attention.h — attention of query heads over their cached keys and values on the CPU.
//
// Two versions: a plain one (emx_attention_head_spans_scalar: one dot product, one expf and one
// pass over out per key; it says what is computed) and, when the compiler targets AVX-512F or
// AVX2 + FMA, a vectorised one used by default (cpu_attention.c, cpu_attention_avx2.c say how;
// the two are written as the same IEEE operations in the same order, to give the same bits;
// no test compares an AVX-512 with an AVX2 machine). The plain and the
// vectorised versions agree within rounding only: a scalar build differs in the last bits.
//
// Invariance (both versions): the scores, probabilities and output for one query depend only on
// (q, the keys and values in order, head_dim, scale): bitwise the same whatever the split of the
// keys into spans, whichever other queries (with whatever key counts) share the call
// (emx_attention_group_spans) and whatever else the caller runs around it. A branch that reads
// a shared prefix plus its own tail gets the bits of one contiguous cache; a row of a batched
// prefill gets the bits of the same row decoded alone.
#ifndef ENTROPIX_CPU_ATTENTION_H
#define ENTROPIX_CPU_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include "base/kv_type.h"

// Attention of one query head over n_keys cached positions. k and v point at this head's
// slice of position 0 of the caches; position t is at k + t * stride.
//   scores[t] = q·k_t * scale           (pre-softmax, kept when probs != scores)
//   probs = softmax(scores)             (probs may equal scores: computed in place)
//   out[d] = sum_t probs[t] * v_t[d]    out [head_dim]
void emx_attention_head(float *out, const float *q, const float *k, const float *v, size_t stride,
                        int n_keys, int head_dim, float scale, float *scores, float *probs);

// Keys (and values) in several pieces: the attention of a branch reads the shared prefix from
// the sequence's cache and its last few positions from its own tail. Same result, bitwise, as
// one span holding the same keys in the same order.
// A span of an f16 cache (EMX_KV_F16) sets k16, v16 instead of k, v (NULL): IEEE half
// values, widened exactly to f32 as they are read, all arithmetic in f32 as for k, v. Its
// result is bitwise that of the same span in f32 holding the widened values (whatever the
// version), so the invariance above holds for f16 spans too, and spans of both kinds may mix.
typedef struct {
    const float *k, *v;  // this head's slice of the span's first position (f32 spans)
    size_t stride;       // elements from one position to the next
    int n;               // positions in the span
    const uint16_t *k16, *v16;  // f16 spans: this head's slice of the first position; else NULL
} EmxKeySpan;
// The span of n positions at element off of caches k, v of the given type.
static inline EmxKeySpan emx_key_span(const void *k, const void *v, EmxKvType type, size_t off, size_t stride, int n) {
    if (type == EMX_KV_F16) return (EmxKeySpan){NULL, NULL, stride, n, (const uint16_t *)k + off, (const uint16_t *)v + off};
    return (EmxKeySpan){(const float *)k + off, (const float *)v + off, stride, n, NULL, NULL};
}
void emx_attention_head_spans(float *out, const float *q, const EmxKeySpan *spans, int n_spans, int head_dim,
                              float scale, float *scores, float *probs);
// Several queries against one pass over the same keys and values: the query heads of one GQA
// group, and several rows of a prefill (row i of a chunk at position pos + i sees the first
// pos + i + 1 keys: each query has its own key count).
typedef struct {
    const float *q;   // [head_dim]
    float *out;       // [head_dim]
    float *scores;    // [n_keys] pre-softmax scores; nothing past n_keys is written
    float *probs;     // [n_keys] the distribution (may equal scores: computed in place)
    int n_keys;       // this query sees keys 0 .. n_keys-1 of the spans (at most their total)
} EmxAttnQuery;
// Each query gets, bitwise, what emx_attention_head_spans gives it alone with exactly its own
// n_keys keys; the keys and values are read from memory once per 32 queries instead of once per
// query (a larger n_q runs as calls of 32; the AVX2 and AVX-512 versions alike).
void emx_attention_group_spans(const EmxAttnQuery *queries, int n_q, const EmxKeySpan *spans, int n_spans,
                               int head_dim, float scale);
// For the vectorised versions' groups: n[i] = the keys query i sees (its n_keys, never past the
// spans' total, never below 0); returns the largest.
static inline int emx_attn_key_counts(const EmxAttnQuery *qs, int n_q, const EmxKeySpan *spans, int n_spans, int *n) {
    int total = 0, n_max = 0;
    for (int sp = 0; sp < n_spans; sp++) total += spans[sp].n;
    for (int i = 0; i < n_q; i++) {
        n[i] = qs[i].n_keys < 0 ? 0 : qs[i].n_keys < total ? qs[i].n_keys : total;
        n_max = n[i] > n_max ? n[i] : n_max;
    }
    return n_max;
}
// Of the keys [g, g + m) of the concatenation, how many a query that sees its first n keys
// sees: always the first ones of the range.
static inline int emx_attn_seen(int n, int g, int m) { return n - g <= 0 ? 0 : n - g < m ? n - g : m; }

// The plain version (the default where neither AVX-512F nor AVX2 + FMA is targeted).
void emx_attention_head_spans_scalar(float *out, const float *q, const EmxKeySpan *spans, int n_spans,
                                     int head_dim, float scale, float *scores, float *probs);

// y[i] = e^x[i], i < n (y may equal x): the exponential of the fast softmax. With AVX-512F or
// AVX2 a polynomial within 2 ulp of expf on normal results (tests/test_cpu_ops.c), 0 below -103.97
// (where e^x is under half the smallest subnormal) and for -inf, +inf above 88.72, NaN for
// NaN; otherwise expf itself.
void emx_exp_f32(float *y, const float *x, int n);

#endif
