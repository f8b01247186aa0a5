// cpu_attention.c — attention of query heads over their cached keys and values on the CPU: the
// plain version, and the AVX-512F version used by default when the compiler targets it (an
// AVX2-only build uses cpu_attention_avx2.c's, the same arithmetic in 8-lane registers).
//
// The AVX-512F version, in three passes over the keys:
//   1. scores, 16 keys per block: each key's q·k is a 16-lane FMA accumulator over head_dim/16
//      chunks of q (held in registers) and k; the 16 accumulators of a block are then summed
//      lane-wise and transposed at once by a 4-stage add tree (15 adds, 30 shuffles per block
//      instead of a horizontal sum per key), times scale, and the running max kept as a vector.
//   2. softmax over the flat scores by global key index: a polynomial exp of 16 scores at a
//      time, their sum in 16 lanes (lane = key index mod 16), then the probabilities scaled by
//      1/sum.
//   3. out = Σ probs[t] v_t with out held in registers (head_dim 64: 4 zmm per chain, 128: 8),
//      FMA of the broadcast probability, two chains (even and odd global key index) so that two
//      keys are in flight, added at the end.
// Per key and query at head_dim 64: 4 loads + 4 FMAs (score), 1/16 of the tree and of the exp,
// 1 broadcast + 4 loads + 4 FMAs (value). Single-threaded: the caller spreads heads and rows
// over its threads. A group of queries (emx_attention_group_spans: the query heads of one kv
// head, of several rows of a prefill) runs each block of keys (16 for the scores, 32 for the
// values) through every query that sees it while the block sits in L1, so the keys and values
// are read from L2/memory once per group (copied into a packed block first: see pack_block).
// Invariance: a key's score is the same FMA chain and the same lane tree whichever block and
// block lane it lands in (a block cut short by the end of a span is padded with zero
// accumulators, and each key's own lanes follow one fixed tree: see reduce16); the exp sum, the
// normalisation and the value chains run over global key indices; a query's arithmetic never
// involves another query's. A query that sees fewer keys than the spans hold runs exactly as if
// its spans ended at its count: keys past it are not masked but never visited (no score, no
// exp, no FMA), so no -inf, -0 or +0 term can reach its sums. So neither the split of the keys
// into spans nor the grouping of queries changes a bit, as the header promises.
// f16 spans: every block of keys and values is widened (vcvtph2ps, exact) into the packed block
// before the passes read it, so they run on f32 rows holding the widened values, as the header
// promises; the head_dim > 128 score pass widens each chunk as it loads it.
#include "runtime/cpu/cpu_attention.h"

#include <limits.h>
#include <math.h>
#include <string.h>

#include "base/dtype.h"
#include "runtime/cpu/cpu_matmul.h"
#include "runtime/cpu/cpu_simd.h"

void emx_attention_head(float *out, const float *q, const float *k, const float *v, size_t stride,
                        int n_keys, int head_dim, float scale, float *scores, float *probs) {
    const EmxKeySpan all = {k, v, stride, n_keys, NULL, NULL};
    emx_attention_head_spans(out, q, &all, 1, head_dim, scale, scores, probs);
}

// dst[0..n) = the f16 values src[0..n) as f32 (exact); returns dst.
static const float *widen(float *dst, const uint16_t *src, int n) {
    emx_dequantize_row(EMX_F16, src, 1, (uint64_t)n, 0, dst);
    return dst;
}

// The plain version over the first `limit` keys of the spans (fewer if they hold fewer).
static void attention_scalar(float *out, const float *q, const EmxKeySpan *spans, int n_spans, int limit,
                             int head_dim, float scale, float *scores, float *probs) {
    // Key t of the concatenation is key t - first of the span holding it. Every loop visits the
    // keys in that order with the same expressions whatever the split, so a branch (shared
    // prefix + own tail) gets bitwise the result of one contiguous cache.
    // An f16 key is widened into out (free until the value pass) and goes through the same
    // emx_dot_f32 as an f32 key; an f16 value is widened element by element in the same
    // product: the bits of an f32 cache holding the widened values.
    int n_keys = 0;
    float max = -INFINITY;
    for (int sp = 0; sp < n_spans; sp++)
        for (int t = 0; t < spans[sp].n && n_keys < limit; t++, n_keys++) {
            const float *kt = spans[sp].k ? spans[sp].k + t * spans[sp].stride
                                          : widen(out, spans[sp].k16 + t * spans[sp].stride, head_dim);
            scores[n_keys] = emx_dot_f32(q, kt, head_dim) * scale;
            max = scores[n_keys] > max ? scores[n_keys] : max;
        }
    memset(out, 0, (size_t)head_dim * sizeof(float));
    if (n_keys == 0) return;  // nothing to attend to: out = 0
    float sum = 0;
    for (int t = 0; t < n_keys; t++) {
        probs[t] = expf(scores[t] - max);
        sum += probs[t];
    }
    float inv = 1.0f / sum;
    for (int sp = 0, t = 0; sp < n_spans && t < n_keys; sp++)
        for (int j = 0; j < spans[sp].n && t < n_keys; j++, t++) {
            const float p = probs[t] * inv;
            if (spans[sp].v) {
                const float *vt = spans[sp].v + j * spans[sp].stride;
                for (int d = 0; d < head_dim; d++) out[d] += p * vt[d];
            } else {
                const uint16_t *vt = spans[sp].v16 + j * spans[sp].stride;
                for (int d = 0; d < head_dim; d++) out[d] += p * emx_f16_to_f32(vt[d]);
            }
        }
    for (int t = 0; t < n_keys; t++) probs[t] *= inv;  // callers may read the distribution
}

void emx_attention_head_spans_scalar(float *out, const float *q, const EmxKeySpan *spans, int n_spans,
                                     int head_dim, float scale, float *scores, float *probs) {
    attention_scalar(out, q, spans, n_spans, INT_MAX, head_dim, scale, scores, probs);
}

#ifdef __AVX512F__
#include <immintrin.h>

#define INLINE static inline __attribute__((always_inline))
#define GROUP 32  // queries per pass over the keys (emx_attention_group_spans splits larger groups)

// e^x in 16 lanes. x = n ln2 + r with n = round(x / ln2), |r| <= ln2/2; e^r by its Taylor
// polynomial of degree 7 (truncation r^8/8! < 6e-9 relative, under 0.1 ulp); 2^n applied by
// scalef, which rounds once, so results under FLT_MIN come out as correctly rounded subnormals
// or 0.
INLINE __m512 exp16(__m512 x) {
    // Clamp first: ±inf would make r = x - n ln2 = inf - inf (NaN). e^-104 is under half the
    // smallest subnormal (0 after rounding) and e^89 overflows, so the clamp changes no result.
    // min/max return their second operand when either is NaN: x stays NaN.
    x = _mm512_min_ps(_mm512_set1_ps(89.0f), _mm512_max_ps(_mm512_set1_ps(-104.0f), x));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    // ln2 in two parts (hi = ln2 rounded to float, lo = the rest): r keeps ~1e-8 absolute error
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693147182464599609375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-1.904654299957768e-09f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040);  // Horner: 1 + r(1 + r(1/2 + r(1/6 + ... r/7!)))
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

void emx_exp_f32(float *y, const float *x, int n) {
    int i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, exp16(_mm512_loadu_ps(x + i)));
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, m, exp16(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

// Chunk c of a head_dim vector: 16 floats, the last chunk masked to what is left.
INLINE __mmask16 chunk_mask(int c, int nc, __mmask16 last) { return c == nc - 1 ? last : (__mmask16)0xFFFF; }

// a[j] [16 lanes] -> lane j = sum of a[j]'s 16 lanes, j < 16. Every key's lanes go through the
// same tree, ((l_i + l_i+8) + (l_i+4 + l_i+12)) ... halving to one lane: stage 1 adds the two
// 256-bit halves, stage 2 the two 128-bit quarters of each half, stage 3 the 64-bit pairs,
// stage 4 the neighbours; the shuffles only decide where each key's partial sums sit.
INLINE __m512 reduce16(const __m512 a[16]) {
    __m512 s1[8], s2[4], s3[2];
#pragma GCC unroll 8
    for (int p = 0; p < 8; p++)  // keys 2p, 2p+1: [a(0..7) + a(8..15), b(0..7) + b(8..15)]
        s1[p] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * p], a[2 * p + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                              _mm512_shuffle_f32x4(a[2 * p], a[2 * p + 1], _MM_SHUFFLE(3, 2, 3, 2)));
#pragma GCC unroll 4
    for (int p = 0; p < 4; p++)  // keys 4p..4p+3, a quarter each: lanes i + (i+4)
        s2[p] = _mm512_add_ps(_mm512_shuffle_f32x4(s1[2 * p], s1[2 * p + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                              _mm512_shuffle_f32x4(s1[2 * p], s1[2 * p + 1], _MM_SHUFFLE(3, 1, 3, 1)));
#pragma GCC unroll 2
    for (int p = 0; p < 2; p++) {  // quarter c: keys 8p+c, 8p+c+4, two lanes each: i + (i+2)
        const __m512d x = _mm512_castps_pd(s2[2 * p]), y = _mm512_castps_pd(s2[2 * p + 1]);
        s3[p] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)), _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
    }
    // quarter c: keys c, c+4, c+8, c+12: lane 0 + lane 1, so lane 4c + i holds key c + 4i
    const __m512 s4 = _mm512_add_ps(_mm512_shuffle_ps(s3[0], s3[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                    _mm512_shuffle_ps(s3[0], s3[1], _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512i key_order = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    return _mm512_permutexvar_ps(key_order, s4);
}

// Scores of the m <= 16 keys k + j * stride, j < m, into s[0..m); returns the max of the
// running max and them. qv [nc] holds q (nc = head_dim/16 rounded up, the last chunk masked).
INLINE __m512 block_scores(float *s, const __m512 *qv, int nc, __mmask16 last, const float *k, size_t stride,
                           int m, __m512 scale, __m512 max) {
    __m512 acc[16];
#pragma GCC unroll 16
    for (int j = 0; j < 16; j++) {
        __m512 a = _mm512_setzero_ps();  // keys past m: zero, their lanes are not stored
        if (j < m)
#pragma GCC unroll 8
            for (int c = 0; c < nc; c++)
                a = _mm512_fmadd_ps(qv[c], _mm512_maskz_loadu_ps(chunk_mask(c, nc, last), k + j * stride + 16 * c), a);
        acc[j] = a;
    }
    const __m512 sc = _mm512_mul_ps(reduce16(acc), scale);
    const __mmask16 valid = (__mmask16)((1u << m) - 1);
    _mm512_mask_storeu_ps(s, valid, sc);
    return _mm512_mask_max_ps(max, valid, max, sc);
}

// Chunk c (16 elements, the last chunk masked to `last`: lanes past it +0) at x + off of an f32
// row (x16 NULL) or at x16 + off of an f16 row (x NULL), widened exactly.
INLINE __m512 load_chunk(const float *x, const uint16_t *x16, size_t off, int c, int nc, __mmask16 last) {
    const __mmask16 mc = chunk_mask(c, nc, last);
    if (x) return _mm512_maskz_loadu_ps(mc, x + off + 16 * c);
#if defined(__AVX512BW__) && defined(__AVX512VL__)
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mc, x16 + off + 16 * c));
#else
    uint16_t b[16] = {0};  // never a load past the row: the masked chunk through a zeroed copy
    memcpy(b, x16 + off + 16 * c, (size_t)__builtin_popcount(mc) * sizeof(uint16_t));
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)b));
#endif
}

// The m rows x + r * stride, r < m, of nc 16-float chunks (the last masked to `last`): copied
// into buf [m][16 nc] when several queries will read them (returns buf), else x itself. Rows
// of an f16 span (x16 + r * stride, x NULL) are always widened into buf, so the passes after
// read f32 rows only. A cache
// row of several kv heads is often 4 KiB or a multiple (Qwen3-0.6B: 8 x 128 floats): then every
// key of a block falls into the same few L1 sets, more keys than the sets have ways, and the
// block is evicted before the next query reads it; packed, it stays in L1 for all of them. The
// copy moves the same floats: no result changes.
INLINE const float *pack_block(float *buf, const float *x, const uint16_t *x16, size_t stride, int m, int nc,
                               __mmask16 last, int n_q) {
    if (n_q < 2 && x) return x;
    for (int r = 0; r < m; r++)
#pragma GCC unroll 8
        for (int c = 0; c < nc; c++) _mm512_store_ps(buf + r * 16 * nc + 16 * c, load_chunk(x, x16, r * stride, c, nc, last));
    return buf;
}

// Pass 1 for nc chunks (a constant after inlining: the chunk loops unrolled, q and the 16
// accumulators in registers), for n_q <= GROUP queries against the same keys, query i over its
// first n[i] keys (n_max the largest): each block of 16 keys is read from memory once and scored
// for every query that sees any of it while it sits in L1. A query that sees only part of a
// block scores that part as the block cut short by the end of a span (the same chains and
// tree), and nothing past its n[i] keys is computed or stored. max_out[i]: query i's largest
// score.
INLINE void all_scores(const EmxAttnQuery *qs, const int *n, int n_max, float *max_out, int n_q, int nc,
                       __mmask16 last, const EmxKeySpan *spans, int n_spans, float scale) {
    const __m512 vscale = _mm512_set1_ps(scale);
    __attribute__((aligned(64))) float packed[16 * 128];  // [16 keys][16 nc] a block's keys, packed
    __m512 max[GROUP];
    for (int i = 0; i < n_q; i++) max[i] = _mm512_set1_ps(-INFINITY);
    for (int sp = 0, t = 0; sp < n_spans && t < n_max; t += spans[sp].n, sp++) {
        const float *k = spans[sp].k;
        const uint16_t *k16 = spans[sp].k16;
        const size_t stride = spans[sp].stride;
        for (int j = 0; j < spans[sp].n && t + j < n_max; j += 16) {
            const int m = spans[sp].n - j < 16 ? spans[sp].n - j : 16;
            // packed: only the keys some query sees
            const float *kb = pack_block(packed, k ? k + j * stride : NULL, k16 ? k16 + j * stride : NULL, stride,
                                         emx_attn_seen(n_max, t + j, m), nc, last, n_q);
            const size_t kstride = kb == packed ? (size_t)16 * nc : stride;
            for (int i = 0; i < n_q; i++) {
                const int mi = emx_attn_seen(n[i], t + j, m);
                if (mi == 0) continue;
                __m512 qv[8];  // q reloaded per block: nc loads per 16 keys
#pragma GCC unroll 8
                for (int c = 0; c < nc; c++) qv[c] = _mm512_maskz_loadu_ps(chunk_mask(c, nc, last), qs[i].q + 16 * c);
                float *s = qs[i].scores + t + j;
                if (mi == 16 && kb == packed)  // whole packed blocks: m and the stride constants
                    max[i] = block_scores(s, qv, nc, last, packed, (size_t)16 * nc, 16, vscale, max[i]);
                else if (mi == 16)
                    max[i] = block_scores(s, qv, nc, last, kb, kstride, 16, vscale, max[i]);
                else
                    max[i] = block_scores(s, qv, nc, last, kb, kstride, mi, vscale, max[i]);
            }
        }
    }
    for (int i = 0; i < n_q; i++) max_out[i] = _mm512_reduce_max_ps(max[i]);
}

// Pass 1 for head_dim > 128: the same per-key chain and tree, q read from memory (L1) as it goes.
static void all_scores_wide(const EmxAttnQuery *qs, const int *n, int n_max, float *max_out, int n_q, int nc,
                            __mmask16 last, const EmxKeySpan *spans, int n_spans, float scale) {
    const __m512 vscale = _mm512_set1_ps(scale);
    __m512 max[GROUP];
    for (int i = 0; i < n_q; i++) max[i] = _mm512_set1_ps(-INFINITY);
    for (int sp = 0, t = 0; sp < n_spans && t < n_max; t += spans[sp].n, sp++)
        for (int j = 0; j < spans[sp].n && t + j < n_max; j += 16) {
            const int m = spans[sp].n - j < 16 ? spans[sp].n - j : 16;
            const float *k = spans[sp].k ? spans[sp].k + j * spans[sp].stride : NULL;
            const uint16_t *k16 = spans[sp].k16 ? spans[sp].k16 + j * spans[sp].stride : NULL;
            for (int i = 0; i < n_q; i++) {
                const int mi = emx_attn_seen(n[i], t + j, m);
                if (mi == 0) continue;
                __m512 acc[16];
                for (int r = 0; r < 16; r++) {
                    __m512 a = _mm512_setzero_ps();
                    if (r < mi)
                        for (int c = 0; c < nc; c++) {
                            const __mmask16 mc = chunk_mask(c, nc, last);
                            a = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mc, qs[i].q + 16 * c),
                                                load_chunk(k, k16, r * spans[sp].stride, c, nc, last), a);
                        }
                    acc[r] = a;
                }
                const __m512 sc = _mm512_mul_ps(reduce16(acc), vscale);
                const __mmask16 valid = (__mmask16)((1u << mi) - 1);
                _mm512_mask_storeu_ps(qs[i].scores + t + j, valid, sc);
                max[i] = _mm512_mask_max_ps(max[i], valid, max[i], sc);
            }
        }
    for (int i = 0; i < n_q; i++) max_out[i] = _mm512_reduce_max_ps(max[i]);
}

// Pass 2: probs = softmax(scores) over the flat array, the sum lane = key index mod 16.
static void softmax_probs(float *probs, const float *scores, int n_keys, float max) {
    const __m512 vmax = _mm512_set1_ps(max);
    __m512 sum = _mm512_setzero_ps();
    int t = 0;
    for (; t + 16 <= n_keys; t += 16) {
        const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(scores + t), vmax));
        _mm512_storeu_ps(probs + t, e);
        sum = _mm512_add_ps(sum, e);
    }
    if (t < n_keys) {
        const __mmask16 m = (__mmask16)((1u << (n_keys - t)) - 1);
        const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, scores + t), vmax));
        _mm512_mask_storeu_ps(probs + t, m, e);
        sum = _mm512_mask_add_ps(sum, m, sum, e);
    }
    const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
    for (t = 0; t + 16 <= n_keys; t += 16) _mm512_storeu_ps(probs + t, _mm512_mul_ps(_mm512_loadu_ps(probs + t), inv));
    if (t < n_keys) {
        const __mmask16 m = (__mmask16)((1u << (n_keys - t)) - 1);
        _mm512_mask_storeu_ps(probs + t, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, probs + t), inv));
    }
}

// acc[c] += p * v[16c ..], c < nv
INLINE void axpy_row(__m512 *acc, int nv, __mmask16 last, float p, const float *v) {
    const __m512 pv = _mm512_set1_ps(p);
#pragma GCC unroll 8
    for (int c = 0; c < nv; c++) acc[c] = _mm512_fmadd_ps(pv, _mm512_maskz_loadu_ps(chunk_mask(c, nv, last), v + 16 * c), acc[c]);
}

// Keys t0 .. t0+n-1 (global indices; row j at v + j * stride, probability p[j]) into the two
// chains: even global index into even[], odd into odd[], each in key order.
INLINE void values_range(__m512 *even, __m512 *odd, int nv, __mmask16 last, const float *p, const float *v,
                         size_t stride, int t0, int n) {
    int j = 0;
    if ((t0 & 1) && n > 0) {  // the range starts at an odd key
        axpy_row(odd, nv, last, p[0], v);
        j = 1;
    }
    for (; j + 2 <= n; j += 2) {  // keys t0+j (even), t0+j+1 (odd)
        axpy_row(even, nv, last, p[j], v + j * stride);
        axpy_row(odd, nv, last, p[j + 1], v + (j + 1) * stride);
    }
    if (j < n) axpy_row(even, nv, last, p[j], v + j * stride);
}

// Pass 3 for columns [col, col + 16 nv) of every query's out (nv <= 8, a constant after
// inlining). One chain per parity of the global key index, so neither the split into spans nor
// the blocks move a key from one chain to another. The keys go by blocks of VBLOCK: a block is
// read from memory once and used by every query that sees any of it while it sits in L1 (the
// queries' chains wait in acc between blocks); query i stops at its own n[i] keys, as if its
// spans ended there.
#define VBLOCK 32
INLINE void values_block(const EmxAttnQuery *qs, const int *n, int n_max, int n_q, const EmxKeySpan *spans,
                         int n_spans, int col, int nv, __mmask16 last) {
    __m512 acc[GROUP][2][8];  // [query][even, odd][chunk]
    __attribute__((aligned(64))) float packed[VBLOCK * 128];  // [VBLOCK keys][16 nv] a block's values
    for (int i = 0; i < n_q; i++)
#pragma GCC unroll 8
        for (int c = 0; c < nv; c++) acc[i][0][c] = acc[i][1][c] = _mm512_setzero_ps();
    for (int sp = 0, t = 0; sp < n_spans && t < n_max; t += spans[sp].n, sp++) {  // t: the span's first key
        const size_t stride = spans[sp].stride;
        for (int j = 0; j < spans[sp].n && t + j < n_max; j += VBLOCK) {
            const int m = spans[sp].n - j < VBLOCK ? spans[sp].n - j : VBLOCK;
            const float *v = pack_block(packed, spans[sp].v ? spans[sp].v + col + j * stride : NULL,
                                        spans[sp].v16 ? spans[sp].v16 + col + j * stride : NULL, stride,
                                        emx_attn_seen(n_max, t + j, m), nv, last, n_q);
            const size_t vstride = v == packed ? (size_t)16 * nv : stride;
            for (int i = 0; i < n_q; i++) {
                const int mi = emx_attn_seen(n[i], t + j, m);
                if (mi == 0) continue;
                __m512 even[8], odd[8];
#pragma GCC unroll 8
                for (int c = 0; c < nv; c++) even[c] = acc[i][0][c], odd[c] = acc[i][1][c];
                values_range(even, odd, nv, last, qs[i].probs + t + j, v, vstride, t + j, mi);
#pragma GCC unroll 8
                for (int c = 0; c < nv; c++) acc[i][0][c] = even[c], acc[i][1][c] = odd[c];
            }
        }
    }
    for (int i = 0; i < n_q; i++)
#pragma GCC unroll 8
        for (int c = 0; c < nv; c++)
            _mm512_mask_storeu_ps(qs[i].out + col + 16 * c, chunk_mask(c, nv, last),
                                  _mm512_add_ps(acc[i][0][c], acc[i][1][c]));
}

// n_q <= GROUP queries against the same keys.
static void attention_group(const EmxAttnQuery *qs, int n_q, const EmxKeySpan *spans, int n_spans, int head_dim,
                            float scale) {
    const int nc = (head_dim + 15) / 16;  // 16-float chunks of q, k, v and out
    const __mmask16 last = head_dim % 16 ? (__mmask16)((1u << (head_dim % 16)) - 1) : (__mmask16)0xFFFF;
    int n[GROUP];  // each query's key count, never past the spans' keys
    const int n_max = emx_attn_key_counts(qs, n_q, spans, n_spans, n);
    float max[GROUP];
    switch (nc) {  // a constant nc per case
#define SCORES(N) \
    case N: all_scores(qs, n, n_max, max, n_q, N, last, spans, n_spans, scale); break;
        SCORES(1) SCORES(2) SCORES(3) SCORES(4) SCORES(5) SCORES(6) SCORES(7) SCORES(8)
#undef SCORES
    default: all_scores_wide(qs, n, n_max, max, n_q, nc, last, spans, n_spans, scale);
    }
    // in place if probs == scores. A query with no keys (callers always have the current key)
    // gets out = 0 from the value pass: its chains stay at +0.
    for (int i = 0; i < n_q; i++)
        if (n[i] > 0) softmax_probs(qs[i].probs, qs[i].scores, n[i], max[i]);
    for (int col = 0; col < head_dim; col += 128) {
        const int nv = nc - col / 16 < 8 ? nc - col / 16 : 8;
        const __mmask16 lm = col / 16 + nv == nc ? last : (__mmask16)0xFFFF;
        switch (nv) {
#define VALUES(N) \
    case N: values_block(qs, n, n_max, n_q, spans, n_spans, col, N, lm); break;
            VALUES(1) VALUES(2) VALUES(3) VALUES(4) VALUES(5) VALUES(6) VALUES(7) VALUES(8)
#undef VALUES
        }
    }
}

void emx_attention_group_spans(const EmxAttnQuery *queries, int n_q, const EmxKeySpan *spans, int n_spans,
                               int head_dim, float scale) {
    for (int i = 0; i < n_q; i += GROUP)  // each query's arithmetic is its own: any grouping gives its bits
        attention_group(queries + i, n_q - i < GROUP ? n_q - i : GROUP, spans, n_spans, head_dim, scale);
}

void emx_attention_head_spans(float *out, const float *q, const EmxKeySpan *spans, int n_spans, int head_dim,
                              float scale, float *scores, float *probs) {
    const EmxAttnQuery one = {q, out, scores, probs, INT_MAX};
    attention_group(&one, 1, spans, n_spans, head_dim, scale);
}

#elif !defined(EMX_AVX2)  // neither AVX-512F nor AVX2 (that one is cpu_attention_avx2.c): the plain version

void emx_exp_f32(float *y, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] = expf(x[i]);
}

void emx_attention_head_spans(float *out, const float *q, const EmxKeySpan *spans, int n_spans, int head_dim,
                              float scale, float *scores, float *probs) {
    emx_attention_head_spans_scalar(out, q, spans, n_spans, head_dim, scale, scores, probs);
}

void emx_attention_group_spans(const EmxAttnQuery *queries, int n_q, const EmxKeySpan *spans, int n_spans,
                               int head_dim, float scale) {
    for (int i = 0; i < n_q; i++)
        attention_scalar(queries[i].out, queries[i].q, spans, n_spans, queries[i].n_keys, head_dim, scale,
                         queries[i].scores, queries[i].probs);
}

#endif
