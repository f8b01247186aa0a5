// cpu_attention_avx2.c — the attention of cpu_attention.h with AVX2 + FMA, the default of a build
// that targets AVX2 but not AVX-512F (most laptops and desktops). The same three passes as the
// AVX-512 version (cpu_attention.c, top), in 8-lane registers, and the same arithmetic:
//   1. scores: each key's q·k is the AVX-512 version's 16-lane FMA chain, held as two 8-lane
//      halves (lo: floats 16c..16c+7 of each 16-float chunk c, hi: 16c+8..16c+15), added
//      lane-wise (lane i + i+8, the AVX-512 tree's first stage), then 8 keys at a time summed
//      and transposed by the tree's other three stages (i + i+4, i + i+2, i + i+1);
//   2. softmax: the same polynomial exp, 2^n applied as two exact-or-once-rounded multiplies
//      (scalef's result), the sum in 16 lanes (lane = key index mod 16) kept as two halves and
//      added by _mm512_reduce_add_ps's tree;
//   3. out = Σ probs[t] v_t in two chains (even and odd global key index), 32 columns at a time.
// Every step above is the same IEEE operation on the same operands as the AVX-512 version's, so
// a query's scores, probabilities and output are meant to be bitwise those of the AVX-512 build
// (not tested: that needs both machines). A group of queries shares each block of keys and
// values as the AVX-512 version's does (bottom), each query's operations unchanged.
// f16 spans: each 8-element chunk of a key or value is widened by F16C (vcvtph2ps, exact) as it
// is loaded, into the same FMAs: the bits of an f32 span holding the widened values.
#include "runtime/cpu/cpu_attention.h"
#include "runtime/cpu/cpu_simd.h"

#if defined(EMX_AVX2) && !defined(__AVX512F__)
#include <limits.h>
#include <math.h>
#include <string.h>

#define INLINE static inline __attribute__((always_inline))

// 2^k for k in [-126, 127] (a normal float built from its exponent bits)
INLINE __m256 pow2i(__m256i k) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k, _mm256_set1_epi32(127)), 23));
}

// e^x in 8 lanes: cpu_attention.c's exp16 step by step (clamp, n, r in two parts, Horner), and
// p * 2^n as (p * 2^n1) * 2^n2 with n1 = floor(n/2), n2 = n - n1 in [-75, 64]: the first product
// is exact (p in [0.7, 1.42]: a normal result), the second rounds once, so the result is p * 2^n
// correctly rounded, as scalef gives it (subnormals and 0 below, inf above).
INLINE __m256 exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_set1_ps(89.0f), _mm256_max_ps(_mm256_set1_ps(-104.0f), x));  // NaN stays NaN
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693147182464599609375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-1.904654299957768e-09f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i ni = _mm256_cvtps_epi32(n), n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    return _mm256_mul_ps(_mm256_mul_ps(p, pow2i(n1)), pow2i(n2));
}

// Lanes [0, m) set, m in 0..8
INLINE __m256i first_lanes(int m) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(m), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

void emx_exp_f32(float *y, const float *x, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, exp8(_mm256_loadu_ps(x + i)));
    if (i < n) {
        const __m256i m = first_lanes(n - i);
        _mm256_maskstore_ps(y + i, m, exp8(_mm256_maskload_ps(x + i, m)));
    }
}

// 8 floats of chunk h of a head_dim vector; the last chunk masked to what is left (tail: its
// lanes, all set when head_dim % 8 == 0).
INLINE __m256 load8(const float *p, int h, int nh, __m256i tail) {
    return h == nh - 1 ? _mm256_maskload_ps(p + 8 * h, tail) : _mm256_loadu_ps(p + 8 * h);
}

// load8 of an f16 row, widened exactly (F16C): lanes past the tail +0, as maskload gives them.
INLINE __m256 load8h(const uint16_t *p, int h, int nh, __m256i tail) {
    if (h == nh - 1) {
        const int rem = __builtin_popcount((unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(tail)));
        if (rem < 8) {  // never a load past the row: the tail through a zeroed copy
            uint16_t b[8] = {0};
            memcpy(b, p + 8 * h, (size_t)rem * sizeof(uint16_t));
            return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)b));
        }
    }
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 8 * h)));
}

// Chunk h of row x: f32 (load8) or, with f16 set, f16 (load8h). Callers pass f16 as a literal,
// choosing per span outside their loops over keys, so after inlining each loop has one kind.
INLINE __m256 load8x(const void *x, int f16, int h, int nh, __m256i tail) {
    return f16 ? load8h((const uint16_t *)x, h, nh, tail) : load8((const float *)x, h, nh, tail);
}

// One key's 16-lane FMA chain as two halves, added: lane i = chain lane i + chain lane i + 8.
// An f16 key: the same chain on its widened values.
INLINE __m256 key_lanes(const float *q, const void *k, int f16, int nh, __m256i tail) {
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
#pragma GCC unroll 16
    for (int h = 0; h < nh; h += 2) {
        lo = _mm256_fmadd_ps(load8(q, h, nh, tail), load8x(k, f16, h, nh, tail), lo);
        if (h + 1 < nh) hi = _mm256_fmadd_ps(load8(q, h + 1, nh, tail), load8x(k, f16, h + 1, nh, tail), hi);
    }
    return _mm256_add_ps(lo, hi);
}

// a[j] [8 lanes] -> lane j = a[j]'s lanes summed as (((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))),
// j < 8: the AVX-512 tree's stages 2-4 (reduce16); the shuffles only place each key's sums.
INLINE __m256 reduce8(const __m256 a[8]) {
    __m256 s2[4], s3[2];
#pragma GCC unroll 4
    for (int p = 0; p < 4; p++)  // keys 2p (low half), 2p+1 (high): lanes i + (i+4)
        s2[p] = _mm256_add_ps(_mm256_permute2f128_ps(a[2 * p], a[2 * p + 1], 0x20),
                              _mm256_permute2f128_ps(a[2 * p], a[2 * p + 1], 0x31));
#pragma GCC unroll 2
    for (int p = 0; p < 2; p++) {  // half h: keys 4p+h, 4p+h+2, two lanes each: i + (i+2)
        const __m256d x = _mm256_castps_pd(s2[2 * p]), y = _mm256_castps_pd(s2[2 * p + 1]);
        s3[p] = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(x, y)), _mm256_castpd_ps(_mm256_unpackhi_pd(x, y)));
    }
    // half h: keys h, h+2, h+4, h+6: lane 0 + lane 1, so lane 4h + i holds key h + 2i
    const __m256 s4 = _mm256_add_ps(_mm256_shuffle_ps(s3[0], s3[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                    _mm256_shuffle_ps(s3[0], s3[1], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm256_permutevar8x32_ps(s4, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// Scores of the m <= 8 keys k + r * stride, r < m (f32, or f16 with f16 set: a literal), into
// s[0..m); returns the running max with them.
INLINE __m256 block_scores(float *s, const float *q, const void *k, int f16, size_t stride, int m, int nh,
                           __m256i tail, __m256 vscale, __m256 max) {
    __m256 a[8];
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) {  // keys past m: zero, their lanes are not stored
        const void *kr = f16 ? (const void *)((const uint16_t *)k + (size_t)r * stride)
                             : (const void *)((const float *)k + (size_t)r * stride);
        a[r] = r < m ? key_lanes(q, kr, f16, nh, tail) : _mm256_setzero_ps();
    }
    const __m256 sc = _mm256_mul_ps(reduce8(a), vscale);
    if (m == 8) {
        _mm256_storeu_ps(s, sc);
        return _mm256_max_ps(max, sc);
    }
    const __m256i valid = first_lanes(m);
    _mm256_maskstore_ps(s, valid, sc);
    return _mm256_blendv_ps(max, _mm256_max_ps(max, sc), _mm256_castsi256_ps(valid));
}

// The largest of the 8 lanes.
INLINE float max8(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}

// Pass 1 for nh 8-float chunks (a constant after inlining): scores of the query's first n keys
// of the spans, 8 at a time; returns their max.
INLINE float all_scores(const float *q, float *scores, int n, const EmxKeySpan *spans, int n_spans, int nh,
                        __m256i tail, float scale) {
    const __m256 vscale = _mm256_set1_ps(scale);
    __m256 max = _mm256_set1_ps(-INFINITY);
    for (int sp = 0, t = 0; sp < n_spans && t < n; t += spans[sp].n, sp++)
        for (int j = 0; j < spans[sp].n && t + j < n; j += 8) {
            int m = spans[sp].n - j < 8 ? spans[sp].n - j : 8;
            m = n - (t + j) < m ? n - (t + j) : m;  // keys past n are never visited
            const size_t st = spans[sp].stride;
            if (spans[sp].k)
                max = block_scores(scores + t + j, q, spans[sp].k + (size_t)j * st, 0, st, m, nh, tail, vscale, max);
            else
                max = block_scores(scores + t + j, q, spans[sp].k16 + (size_t)j * st, 1, st, m, nh, tail, vscale, max);
        }
    return max8(max);
}

// Pass 2: probs = softmax(scores[0..n)); the sum lane = key index mod 16, in two halves.
static void softmax_probs(float *probs, const float *scores, int n, float max) {
    const __m256 vmax = _mm256_set1_ps(max);
    __m256 sum[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};  // keys 16b + i, 16b + 8 + i
    for (int t = 0; t < n; t += 8) {
        const int m = n - t < 8 ? n - t : 8;
        const __m256i valid = first_lanes(m);
        const __m256 e = exp8(_mm256_sub_ps(_mm256_maskload_ps(scores + t, valid), vmax));
        _mm256_maskstore_ps(probs + t, valid, e);
        // lanes past n add +0 (the sums are >= +0: no bit changes), as the AVX-512 masked add
        sum[(t / 8) & 1] = _mm256_add_ps(sum[(t / 8) & 1], _mm256_and_ps(e, _mm256_castsi256_ps(valid)));
    }
    const __m256 inv = _mm256_set1_ps(1.0f / emx_hsum_ps(_mm256_add_ps(sum[0], sum[1])));
    for (int t = 0; t < n; t += 8) {
        const __m256i valid = first_lanes(n - t < 8 ? n - t : 8);
        _mm256_maskstore_ps(probs + t, valid, _mm256_mul_ps(_mm256_maskload_ps(probs + t, valid), inv));
    }
}

// acc[c] += p * v[8c ..], c < nv (the last chunk masked to tail); an f16 row (f16 a literal, as
// for key_lanes): the same FMAs on its widened values.
INLINE void axpy_row(__m256 *acc, int nv, __m256i tail, float p, const void *v, int f16) {
    const __m256 pv = _mm256_set1_ps(p);
#pragma GCC unroll 4
    for (int c = 0; c < nv; c++) acc[c] = _mm256_fmadd_ps(pv, load8x(v, f16, c, nv, tail), acc[c]);
}

// Pass 3 for columns [col, col + 8 nv) (nv <= 4, a constant after inlining): one chain per
// parity of the global key index, so the split into spans moves no key between chains.
INLINE void values_cols(float *out, const float *probs, int n, const EmxKeySpan *spans, int n_spans, int col, int nv,
                        __m256i tail) {
    __m256 acc[2][4];  // [even, odd][chunk]
#pragma GCC unroll 4
    for (int c = 0; c < nv; c++) acc[0][c] = acc[1][c] = _mm256_setzero_ps();
    for (int sp = 0, t = 0; sp < n_spans && t < n; t += spans[sp].n, sp++) {
        const size_t st = spans[sp].stride;
        if (spans[sp].v)
            for (int j = 0; j < spans[sp].n && t + j < n; j++)
                axpy_row(acc[(t + j) & 1], nv, tail, probs[t + j], spans[sp].v + col + (size_t)j * st, 0);
        else
            for (int j = 0; j < spans[sp].n && t + j < n; j++)
                axpy_row(acc[(t + j) & 1], nv, tail, probs[t + j], spans[sp].v16 + col + (size_t)j * st, 1);
    }
#pragma GCC unroll 4
    for (int c = 0; c < nv; c++) {
        const __m256 s = _mm256_add_ps(acc[0][c], acc[1][c]);
        if (c == nv - 1) _mm256_maskstore_ps(out + col + 8 * c, tail, s);
        else _mm256_storeu_ps(out + col + 8 * c, s);
    }
}

// One query over its first n_keys keys of the spans (at most their total).
static void attention_one(const EmxAttnQuery *qq, const EmxKeySpan *spans, int n_spans, int head_dim, float scale) {
    int total = 0;
    for (int sp = 0; sp < n_spans; sp++) total += spans[sp].n;
    const int n = qq->n_keys < 0 ? 0 : qq->n_keys < total ? qq->n_keys : total;
    const int nh = (head_dim + 7) / 8;  // 8-float chunks of q, k, v and out
    const __m256i tail = first_lanes(head_dim % 8 ? head_dim % 8 : 8);
    if (n == 0) {  // nothing to attend to: out = 0
        memset(qq->out, 0, (size_t)head_dim * sizeof(float));
        return;
    }
    float max;
    switch (nh) {  // the usual head sizes with a constant chunk count
    case 2: max = all_scores(qq->q, qq->scores, n, spans, n_spans, 2, tail, scale); break;
    case 4: max = all_scores(qq->q, qq->scores, n, spans, n_spans, 4, tail, scale); break;
    case 8: max = all_scores(qq->q, qq->scores, n, spans, n_spans, 8, tail, scale); break;
    case 16: max = all_scores(qq->q, qq->scores, n, spans, n_spans, 16, tail, scale); break;
    default: max = all_scores(qq->q, qq->scores, n, spans, n_spans, nh, tail, scale);
    }
    softmax_probs(qq->probs, qq->scores, n, max);  // in place if probs == scores
    const __m256i all = first_lanes(8);
    for (int col = 0; col < head_dim; col += 32) {
        const int nv = nh - col / 8 < 4 ? nh - col / 8 : 4;
        const __m256i lm = col / 8 + nv == nh ? tail : all;
        switch (nv) {
        case 4: values_cols(qq->out, qq->probs, n, spans, n_spans, col, 4, lm); break;
        case 3: values_cols(qq->out, qq->probs, n, spans, n_spans, col, 3, lm); break;
        case 2: values_cols(qq->out, qq->probs, n, spans, n_spans, col, 2, lm); break;
        default: values_cols(qq->out, qq->probs, n, spans, n_spans, col, 1, lm);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Several queries against the same keys (a GQA group's heads, a prefill's rows): each block of
// keys (8 for the scores, VBLOCK for the values) is copied once into a packed f32 block, then run
// through every query that sees any of it while it sits in L1. A query's arithmetic is
// attention_one's, operation for operation (key_lanes and reduce8 per block of 8 keys, the two
// parity chains over global key indices): only where the operands are read from changes. The
// copy matters beyond the shared reads: a cache row of several kv heads is often 4 KiB or a
// multiple (Qwen3-0.6B: 8 x 128 floats), so the keys of a block all fall into the same few L1
// sets and are evicted before the next query reads them.

#define GROUP 32     // queries per pass over the keys
#define VBLOCK 32    // keys per block of the value pass
#define MAX_NH 32    // head_dim <= 256 in the packed blocks; larger heads run query by query

// Rows x + r * stride, r < m (f32, or f16 with f16 set, widened exactly), chunks [c0, c0 + nc)
// of 8 elements (the chunk nh - 1 masked to tail: lanes past it +0) -> buf [m][8 nc].
static void pack_rows(float *buf, const void *x, int f16, size_t stride, int m, int c0, int nc, int nh, __m256i tail) {
    for (int r = 0; r < m; r++)
        for (int c = 0; c < nc; c++) {
            const __m256 v = f16 ? load8h((const uint16_t *)x + (size_t)r * stride, c0 + c, nh, tail)
                                 : load8((const float *)x + (size_t)r * stride, c0 + c, nh, tail);
            _mm256_store_ps(buf + (size_t)r * 8 * nc + 8 * c, v);
        }
}

// Pass 1 for n_q <= GROUP queries (query i over its first n[i] keys, n_max the largest) with
// nh chunks (a constant after inlining); max_out[i]: query i's largest score.
INLINE void group_scores(const EmxAttnQuery *qs, const int *n, int n_max, float *max_out, int n_q, int nh,
                         __m256i tail, const EmxKeySpan *spans, int n_spans, float scale) {
    const __m256 vscale = _mm256_set1_ps(scale);
    __attribute__((aligned(32))) float packed[8 * 8 * MAX_NH];  // [8 keys][8 nh]
    __m256 max[GROUP];
    for (int i = 0; i < n_q; i++) max[i] = _mm256_set1_ps(-INFINITY);
    for (int sp = 0, t = 0; sp < n_spans && t < n_max; t += spans[sp].n, sp++)
        for (int j = 0; j < spans[sp].n && t + j < n_max; j += 8) {
            const int m = spans[sp].n - j < 8 ? spans[sp].n - j : 8;
            const size_t at = (size_t)j * spans[sp].stride;
            const int ms = emx_attn_seen(n_max, t + j, m);  // only the keys some query sees
            if (spans[sp].k) pack_rows(packed, spans[sp].k + at, 0, spans[sp].stride, ms, 0, nh, nh, tail);
            else pack_rows(packed, spans[sp].k16 + at, 1, spans[sp].stride, ms, 0, nh, nh, tail);
            for (int i = 0; i < n_q; i++) {
                const int mi = emx_attn_seen(n[i], t + j, m);
                if (mi > 0)
                    max[i] = block_scores(qs[i].scores + t + j, qs[i].q, packed, 0, (size_t)8 * nh, mi, nh, tail,
                                          vscale, max[i]);
            }
        }
    for (int i = 0; i < n_q; i++) max_out[i] = max8(max[i]);
}

// Pass 3 for columns [col, col + 8 nv) (nv <= 4, a constant after inlining) of every query's
// out: values_cols's two parity chains, the queries' chains waiting in acc between blocks.
INLINE void group_values(const EmxAttnQuery *qs, const int *n, int n_max, int n_q, const EmxKeySpan *spans,
                         int n_spans, int col, int nv, int nh, __m256i tail) {
    __m256 acc[GROUP][2][4];  // [query][even, odd][chunk]
    __attribute__((aligned(32))) float packed[VBLOCK * 32];  // [VBLOCK keys][8 nv]
    const __m256i lm = col / 8 + nv == nh ? tail : first_lanes(8);
    for (int i = 0; i < n_q; i++)
        for (int c = 0; c < nv; c++) acc[i][0][c] = acc[i][1][c] = _mm256_setzero_ps();
    for (int sp = 0, t = 0; sp < n_spans && t < n_max; t += spans[sp].n, sp++)
        for (int j = 0; j < spans[sp].n && t + j < n_max; j += VBLOCK) {
            const int m = spans[sp].n - j < VBLOCK ? spans[sp].n - j : VBLOCK;
            const size_t at = (size_t)j * spans[sp].stride;
            const int ms = emx_attn_seen(n_max, t + j, m);
            if (spans[sp].v) pack_rows(packed, spans[sp].v + at, 0, spans[sp].stride, ms, col / 8, nv, nh, tail);
            else pack_rows(packed, spans[sp].v16 + at, 1, spans[sp].stride, ms, col / 8, nv, nh, tail);
            for (int i = 0; i < n_q; i++) {
                const int mi = emx_attn_seen(n[i], t + j, m);
                for (int r = 0; r < mi; r++)
                    axpy_row(acc[i][(t + j + r) & 1], nv, lm, qs[i].probs[t + j + r], packed + (size_t)r * 8 * nv, 0);
            }
        }
    for (int i = 0; i < n_q; i++)
#pragma GCC unroll 4
        for (int c = 0; c < nv; c++) {
            const __m256 s = _mm256_add_ps(acc[i][0][c], acc[i][1][c]);
            if (c == nv - 1) _mm256_maskstore_ps(qs[i].out + col + 8 * c, lm, s);
            else _mm256_storeu_ps(qs[i].out + col + 8 * c, s);
        }
}

// n_q (2 .. GROUP) queries, head_dim <= 8 MAX_NH.
static void attention_group(const EmxAttnQuery *qs, int n_q, const EmxKeySpan *spans, int n_spans, int head_dim,
                            float scale) {
    const int nh = (head_dim + 7) / 8;
    const __m256i tail = first_lanes(head_dim % 8 ? head_dim % 8 : 8);
    int n[GROUP];  // each query's key count, never past the spans' keys
    const int n_max = emx_attn_key_counts(qs, n_q, spans, n_spans, n);
    float max[GROUP];
    switch (nh) {  // the usual head sizes with a constant chunk count
    case 2: group_scores(qs, n, n_max, max, n_q, 2, tail, spans, n_spans, scale); break;
    case 4: group_scores(qs, n, n_max, max, n_q, 4, tail, spans, n_spans, scale); break;
    case 8: group_scores(qs, n, n_max, max, n_q, 8, tail, spans, n_spans, scale); break;
    case 16: group_scores(qs, n, n_max, max, n_q, 16, tail, spans, n_spans, scale); break;
    default: group_scores(qs, n, n_max, max, n_q, nh, tail, spans, n_spans, scale);
    }
    // in place if probs == scores; a query with no keys gets out = 0 from the value pass
    for (int i = 0; i < n_q; i++)
        if (n[i] > 0) softmax_probs(qs[i].probs, qs[i].scores, n[i], max[i]);
    for (int col = 0; col < head_dim; col += 32) {
        const int nv = nh - col / 8 < 4 ? nh - col / 8 : 4;
        switch (nv) {
        case 4: group_values(qs, n, n_max, n_q, spans, n_spans, col, 4, nh, tail); break;
        case 3: group_values(qs, n, n_max, n_q, spans, n_spans, col, 3, nh, tail); break;
        case 2: group_values(qs, n, n_max, n_q, spans, n_spans, col, 2, nh, tail); break;
        default: group_values(qs, n, n_max, n_q, spans, n_spans, col, 1, nh, tail);
        }
    }
}

void emx_attention_group_spans(const EmxAttnQuery *queries, int n_q, const EmxKeySpan *spans, int n_spans,
                               int head_dim, float scale) {
    if (head_dim > 8 * MAX_NH) {
        for (int i = 0; i < n_q; i++) attention_one(&queries[i], spans, n_spans, head_dim, scale);
        return;
    }
    for (int i = 0; i < n_q; i += GROUP) {  // each query's arithmetic is its own: any grouping gives its bits
        const int g = n_q - i < GROUP ? n_q - i : GROUP;
        if (g == 1) attention_one(&queries[i], spans, n_spans, head_dim, scale);
        else attention_group(queries + i, g, spans, n_spans, head_dim, scale);
    }
}

void emx_attention_head_spans(float *out, const float *q, const EmxKeySpan *spans, int n_spans, int head_dim,
                              float scale, float *scores, float *probs) {
    const EmxAttnQuery one = {q, out, scores, probs, INT_MAX};
    attention_one(&one, spans, n_spans, head_dim, scale);
}
#endif
