// cpu_quad.h — the building blocks of the quantised dot products that read four weight rows at
// once, shared by the decode kernels (cpu_qdot.c) and the prefill tile (cpu_qtile.c): how a group
// of 32 weights of four rows enters the registers, one step of the accumulation order (cpu_qdot.c,
// top) and the final lane sums, in AVX-512 VNNI and AVX2 forms. Private to runtime/cpu/.
#ifndef ENTROPIX_CPU_QUAD_H
#define ENTROPIX_CPU_QUAD_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/dtype.h"
#include "runtime/cpu/cpu_matmul.h"
#include "runtime/cpu/cpu_simd.h"

#ifdef EMX_AVX2
// For the 4-row kernels that read the weight rows as they are: at the start of each block of 8
// groups of a quad (four rows, row_bytes each, at w), ask for that block's share of a quad
// ahead (a matmul's threads take consecutive quads): q8 the quad after the next (the 4 rows
// from w + 8 row_bytes), the nibbles the next one (from w + 4 row_bytes). Reading four rows a
// few hundred bytes apart, the hardware prefetcher does not run far enough ahead: q8 decode of
// a matrix from memory ran at half the one-row kernel's speed (which reads one stream). Asking
// instead for the next block of these same rows, a few hundred bytes ahead, is too close to
// hide the latency: SmolLM2 q8 decoded at 119-123 tok/s against 146-169 (-t 2, 2-core Xeon with
// AVX-512, alternated).
// q8 asks for L2 (T1), the nibbles for L1 (T0): decode tg64, alternated, Qwen3-0.6B-shaped q8
// T0 -> T1 AVX2-only build 22.4-23.2 -> 31.1 tok/s at -t 2 and 13.8-13.9 -> 17.0-17.3 at -t 1,
// AVX-512 34.7-35.1 -> 36.3-37.4 and 18.7-19.1 -> 20.0-20.1; SmolLM2 q8 (its weights largely in
// this VM's cache) even; q4 with T1 lost 3-7% in both builds. q8 two quads ahead instead of
// one, on a 2-core AMD EPYC (Zen 4, AVX-512), Qwen3-0.6B-shaped tg128, 5 rounds alternated:
// 28.1 -> 36.9 tok/s at -t 1, 49.4 -> 59.4 at -t 2 (T0 at one quad: 18.9); the nibbles, whose
// quad is half the bytes, showed no difference at two or three quads ahead (0.97-1.09, noise).
// always_inline is load-bearing: as a plain static inline function gcc 12 judged this helper
// free of side effects (it holds only prefetches) and deleted every call, results unchanged and
// decode a third slower (tests/test_cpu_code.c reads the object file for the prefetches).
static inline __attribute__((always_inline)) void prefetch_quad_ahead(int kind, const uint8_t *w, size_t row_bytes,
                                                                      int g0) {
    const size_t block_bytes = kind == 0 ? 256 : 128;  // 8 groups of one row
    const uint8_t *ahead = w + (kind == 0 ? 8 : 4) * row_bytes + (size_t)(g0 / 8) * 4 * block_bytes;
    for (size_t b = 0; b < 4 * block_bytes; b += 64) {
        if (kind == 0) _mm_prefetch((const char *)(ahead + b), _MM_HINT_T1);  // q8: into L2
        else _mm_prefetch((const char *)(ahead + b), _MM_HINT_T0);
    }
}

// The activation rows in blocks of 8 = two quads; per group and quad [176 B]: X_k, k < 8 [8][16 B],
// the whole-group sums of the four rows times -128 and times -8 [2][4] int32 (q8's and q4's
// offsets, from the lane sums xl, which are negated), their d_x [4] f32.
#define QUAD_ACT 176
#define QA_S128 128
#define QA_S8 144
#define QA_D 160
// One quad of activation rows (rows[j], j < nt; the others zero) at group g into p.
static inline void act_quad(uint8_t *p, const int8_t *const rows[4], const int32_t *const xls[4], const float *const xds[4],
                     int nt, int g) {
    memset(p, 0, QUAD_ACT);
    for (int j = 0; j < nt; j++) {
        for (int k = 0; k < 8; k++) memcpy(p + 16 * k + 4 * j, rows[j] + (size_t)g * 32 + 4 * k, 4);
        const int32_t *l = xls[j] + (size_t)g * 4;
        const int32_t s = l[0] + l[1] + l[2] + l[3];  // -sum x (|sum| <= 32 x 127)
        memcpy(p + QA_S128 + 4 * j, &(int32_t){s * 128}, 4);
        memcpy(p + QA_S8 + 4 * j, &(int32_t){s * 8}, 4);
        memcpy(p + QA_D + 4 * j, xds[j] + g, 4);
    }
}

// Activation rows i .. i+m-1 of a (m <= 4) as act_quad's arguments (xl: the rows' lane sums).
static inline void act_rows(const EmxActs *a, const int32_t *xl, int n, int i, int m, const int8_t *rq[4],
                            const int32_t *xls[4], const float *xds[4]) {
    const int ng = n / 32;
    for (int j = 0; j < m; j++)
        rq[j] = a->xq + (size_t)(i + j) * n, xls[j] = xl + (size_t)(i + j) * ng * 4, xds[j] = a->xd + (size_t)(i + j) * ng;
}

// (A[0] + A[2]) + (A[1] + A[3])
static inline float lanes_sum(__m128 a) {
    const __m128 h = _mm_add_ps(a, _mm_movehl_ps(a, a));  // [a0 + a2, a1 + a3, ..]
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

// sum over groups of c_g * xs_g (c: f16 per group, xs: the activation's d_x * sum(q_x)): 8
// lanes over the whole blocks of 8 groups, the tail groups one by one, then lanes + tail.
static inline float offsets_sum(const uint16_t *c, const float *xs, int ng) {
    __m256 acc = _mm256_setzero_ps();
    int g = 0;
    for (; g + 8 <= ng; g += 8)
        acc = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(c + g))), _mm256_loadu_ps(xs + g), acc);
    float tail = 0;
    for (; g < ng; g++) tail += _cvtsh_ss(c[g]) * xs[g];
    return emx_hsum_ps(acc) + tail;
}

// A quantised dtype as the kernels' kind: 0 q8, 1 q4, 2 q4_1, 3 q4_1f (q4_1 with f32 scales and
// mins: the same integers, its scales read as they are instead of converted from f16).
static inline int quad_kind(uint32_t dtype) {
    return dtype == EMX_Q8 ? 0 : dtype == EMX_Q4 ? 1 : dtype == EMX_Q4_1 ? 2 : 3;
}

// Scale (or min) i of a row's table wd as f32: f16 for kinds 0-2, f32 for q4_1f.
static inline float group_scale(int kind, const void *wd, size_t i) {
    return kind == 3 ? ((const float *)wd)[i] : _cvtsh_ss(((const uint16_t *)wd)[i]);
}

// The same sum with f32 c (q4_1f's mins), in the same order.
static inline float offsets_sum_f32(const float *c, const float *xs, int ng) {
    __m256 acc = _mm256_setzero_ps();
    int g = 0;
    for (; g + 8 <= ng; g += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(c + g), _mm256_loadu_ps(xs + g), acc);
    float tail = 0;
    for (; g < ng; g++) tail += c[g] * xs[g];
    return emx_hsum_ps(acc) + tail;
}

// The mins term of weight row r (kind 2 q4_1: f16 mins, 3 q4_1f: f32; wm: the rows' mins [..][ng])
// against an activation row's group sums xs; 0 for q8 and q4, which have no mins.
static inline __attribute__((always_inline)) float mins_term(int kind, const void *wm, int r, const float *xs, int ng) {
    if (kind == 2) return offsets_sum((const uint16_t *)wm + (size_t)r * ng, xs, ng);
    if (kind == 3) return offsets_sum_f32((const float *)wm + (size_t)r * ng, xs, ng);
    return 0;
}

// 16 bytes of nibbles -> 32 unsigned bytes 0..15 in the activation's order: low nibbles are
// weights 0..15 (low 128-bit lane), high nibbles weights 16..31.
static inline __m256i unpack_nibbles(const uint8_t *b) {
    const __m128i v = _mm_loadu_si128((const __m128i *)b);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0xf));
}

#endif

#if EMX_AVX512_VNNI
// 16 bytes of each of four rows (row k at p + k * stride) side by side: [r0 | r1 | r2 | r3]
static inline __m512i quad16(const uint8_t *p, size_t stride) {
    __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)p));
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + stride)), 1);
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + 2 * stride)), 2);
    return _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + 3 * stride)), 3);
}

// Four 32-byte pieces, two in each of a and b, as their first halves [p0 0..15 | p1 | p2 | p3]
// (lo) and their second halves (hi): a group's bytes split as the activation's halves are.
static inline __attribute__((always_inline)) void split_halves(__m512i a, __m512i b, __m512i *lo, __m512i *hi) {
    *lo = _mm512_permutex2var_epi64(a, _mm512_set_epi64(13, 12, 9, 8, 5, 4, 1, 0), b);
    *hi = _mm512_permutex2var_epi64(a, _mm512_set_epi64(15, 14, 11, 10, 7, 6, 3, 2), b);
}

// The 4 x 4 transpose of a register's lanes: lane 4i + j <-> lane 4j + i (its own inverse).
static inline __m512 transpose4x4_ps(__m512 v) {
    return _mm512_permutexvar_ps(_mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0), v);
}

// Group g of four weight rows as two unsigned registers: w1 = bytes 0..15 of each row, w2 =
// bytes 16..31 (q8: w + 128; q4/q4_1: the nibbles, low ones are weights 0..15).
static inline __attribute__((always_inline)) void quad_group(int q8, const uint8_t *w, size_t row_bytes, int g,
                                                             __m512i *w1, __m512i *w2) {
    if (q8) {  // two rows per register, then their halves regathered: fewer shuffles than four quad16
        const uint8_t *p = w + (size_t)g * 32;
        const __m512i flip = _mm512_set1_epi8((char)0x80);
        const __m512i r01 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p)),
                                               _mm256_loadu_si256((const __m256i *)(p + row_bytes)), 1);
        const __m512i r23 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(p + 2 * row_bytes))),
                                               _mm256_loadu_si256((const __m256i *)(p + 3 * row_bytes)), 1);
        split_halves(r01, r23, w1, w2);
        *w1 = _mm512_xor_si512(*w1, flip);
        *w2 = _mm512_xor_si512(*w2, flip);
    } else {
        const __m512i nib = quad16(w + (size_t)g * 16, row_bytes), mask = _mm512_set1_epi8(0xf);
        *w1 = _mm512_and_si512(nib, mask);
        *w2 = _mm512_and_si512(_mm512_srli_epi16(nib, 4), mask);
    }
}

// The four rows' scales d_w of the groups g0 .. g0+7 (fewer at the row's end: masked loads stay
// inside the rows), as two tables [r0 | r1] and [r2 | r3] of 8 floats each. (Written out row by
// row: as a loop over a local array, gcc 12 kept the array on the stack, a store and a reload
// per row, about a tenth of q8 decode's samples at one thread.)
static inline __attribute__((always_inline)) __m256 row_scales8(const uint16_t *wd, __mmask8 live) {
    return _mm256_cvtph_ps(_mm_maskz_loadu_epi16(live, wd));
}
static inline __attribute__((always_inline)) void quad_scales(const uint16_t *wd, int ng, int g0, __m512 *t01,
                                                              __m512 *t23) {
    const __mmask8 live = ng - g0 < 8 ? (__mmask8)((1u << (ng - g0)) - 1) : (__mmask8)0xff;
    const uint16_t *d = wd + g0;
    *t01 = _mm512_insertf32x8(_mm512_castps256_ps512(row_scales8(d, live)), row_scales8(d + ng, live), 1);
    *t23 = _mm512_insertf32x8(_mm512_castps256_ps512(row_scales8(d + 2 * (size_t)ng, live)),
                              row_scales8(d + 3 * (size_t)ng, live), 1);
}
// The same tables from f32 scales (q4_1f).
static inline __attribute__((always_inline)) void quad_scales_f32(const float *wd, int ng, int g0, __m512 *t01,
                                                                  __m512 *t23) {
    const __mmask8 live = ng - g0 < 8 ? (__mmask8)((1u << (ng - g0)) - 1) : (__mmask8)0xff;
    const float *d = wd + g0;
    *t01 = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_maskz_loadu_ps(live, d)), _mm256_maskz_loadu_ps(live, d + ng), 1);
    *t23 = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_maskz_loadu_ps(live, d + 2 * (size_t)ng)),
                              _mm256_maskz_loadu_ps(live, d + 3 * (size_t)ng), 1);
}

// Activation row x's group (its 32 quants at x, its lane sums at xl) as registers: both halves
// broadcast to the four quarters, and each lane's start, -c * (the lane's sum of x): q8 c = 128,
// q4 c = 8, q4_1 and q4_1f none. shifted: xl holds the lane sums times c already (the act blocks).
typedef struct {
    __m512i x1, x2, start;
} QuadAct;
static inline __attribute__((always_inline)) QuadAct quad_act(int kind, const int8_t *x, const int32_t *xl, int shifted) {
    QuadAct a = {_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)x)),
                 _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(x + 16))), _mm512_setzero_si512()};
    if (kind < 2) {
        a.start = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)xl));
        if (!shifted) a.start = _mm512_slli_epi32(a.start, kind == 0 ? 7 : 3);
    }
    return a;
}

// Each quarter's (A[0] + A[2]) + (A[1] + A[3]) -> out[0..3]
static inline void quad_sums(__m512 acc, float out[4]) {
    const __m512 h = _mm512_add_ps(acc, _mm512_shuffle_ps(acc, acc, _MM_SHUFFLE(1, 0, 3, 2)));
    const __m512 s = _mm512_add_ps(h, _mm512_shuffle_ps(h, h, _MM_SHUFFLE(2, 3, 0, 1)));
    out[0] = _mm512_cvtss_f32(s);
    out[1] = _mm_cvtss_f32(_mm512_extractf32x4_ps(s, 1));
    out[2] = _mm_cvtss_f32(_mm512_extractf32x4_ps(s, 2));
    out[3] = _mm_cvtss_f32(_mm512_extractf32x4_ps(s, 3));
}

#elif defined(EMX_AVX2)
// Four weight rows at once with AVX2: the rows go two to a register, [row a lanes 0..3 | row b
// lanes 0..3], so that one convert and one FMA serve two rows, and the activation's load (and
// for q4 its offset, from the lane sums) serves all four. The integer lane sums are the same
// integers as the one-row kernel's, and each row's scale product, FMA chain and lanes_sum are
// the same float operations in the same order: the results equal emx_dot_* bitwise.
//
// A pair of rows (a, b) enters as two registers split by the order's halves: lo = [a's bytes
// 0..15 | b's bytes 0..15], hi = [a's bytes 16..31 | b's bytes 16..31]. Against the activation's
// halves broadcast ([x 0..15 | x 0..15], [x 16..31 | x 16..31]) each 4-byte run of lo and of hi
// lands in its lane l of its row already, so lo's sums plus hi's sums are the order's lanes with
// no shuffle (split as a row's 32 bytes, each row's 8 runs needed a blend, a permute and an add
// per pair of rows to fold run l + 4 onto run l).

// The four 4-byte-run sums of a pair's lo and hi against the activation's halves xlo, xhi, added:
// [a lanes 0..3 | b lanes 0..3]. q8 by the sign trick (u8 x i8: alo = |lo| times xlo carrying
// the sign of lo; the same integers as w * x), q4 / q4_1 by the nibbles as they are (q4's -8 x is
// added once for all rows by the caller). Without VNNI the nibbles' two maddubs add in int16
// before one madd: each int16 holds at most 2 * 15 * 127, two of them 7620, far from overflow;
// q8's reach 2 * 128 * 127 = 32512 each and are widened apart.
static inline __attribute__((always_inline)) __m256i pair_dot(int q8, __m256i lo, __m256i hi, __m256i alo,
                                                              __m256i ahi, __m256i xlo, __m256i xhi) {
#if EMX_VNNI256
    if (q8) return dot_u8i8_acc(dot_u8i8(alo, _mm256_sign_epi8(xlo, lo)), ahi, _mm256_sign_epi8(xhi, hi));
    return dot_u8i8_acc(dot_u8i8(lo, xlo), hi, xhi);
#else
    const __m256i ones = _mm256_set1_epi16(1);
    if (q8)
        return _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(alo, _mm256_sign_epi8(xlo, lo)), ones),
                                _mm256_madd_epi16(_mm256_maddubs_epi16(ahi, _mm256_sign_epi8(xhi, hi)), ones));
    (void)alo, (void)ahi;
    return _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(lo, xlo), _mm256_maddubs_epi16(hi, xhi)), ones);
#endif
}

// The integer half of a step for rows (0, 1) and (2, 3): p01, p23 = [a lanes 0..3 | b lanes 0..3]
// of the group, w = its pairs [lo01, hi01, lo23, hi23] (q8: as stored, wa = the same with |w|;
// q4/q4_1: the nibbles unpacked, wa read by nobody). kind: 0 q8, 1 q4, 2 q4_1; xl: the group's 4
// lane sums (negated; shifted: times 8 already). w and wa may point into the packed copy: read
// where they lie, not copied per step.
static inline __attribute__((always_inline)) void quad_dots2(int kind, __m256i *p01, __m256i *p23, const __m256i *w,
                                                             const __m256i *wa, const int8_t *x, const int32_t *xl,
                                                             int shifted) {
    const __m256i xlo = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)x));
    const __m256i xhi = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(x + 16)));
    const int q8 = kind == 0;
    *p01 = pair_dot(q8, w[0], w[1], wa[0], wa[1], xlo, xhi);
    *p23 = pair_dot(q8, w[2], w[3], wa[2], wa[3], xlo, xhi);
    if (kind == 1) {  // q4: (nib - 8) x = nib x + 8 * (-x), the lane sums of -x once for the four rows
        __m256i off = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)xl));
        if (!shifted) off = _mm256_slli_epi32(off, 3);
        *p01 = _mm256_add_epi32(*p01, off);
        *p23 = _mm256_add_epi32(*p23, off);
    }
}

// Group g of the four rows as the pairs [lo01, hi01, lo23, hi23] (q8: as stored; q4/q4_1: the
// nibbles unpacked, low nibbles are weights 0..15), and for q8 the same with |w| in wa.
static inline __attribute__((always_inline)) void quad_pairs(int q8, const uint8_t *w, size_t row_bytes, int g,
                                                             __m256i v[4], __m256i wa[4]) {
#pragma GCC unroll 2
    for (int k = 0; k < 2; k++) {  // rows 2k and 2k + 1
        const uint8_t *a = w + (size_t)(2 * k) * row_bytes, *b = a + row_bytes;
        if (q8) {
            const __m256i ra = _mm256_loadu_si256((const __m256i *)(a + (size_t)g * 32));
            const __m256i rb = _mm256_loadu_si256((const __m256i *)(b + (size_t)g * 32));
            v[2 * k] = _mm256_permute2x128_si256(ra, rb, 0x20);
            v[2 * k + 1] = _mm256_permute2x128_si256(ra, rb, 0x31);
            wa[2 * k] = _mm256_sign_epi8(v[2 * k], v[2 * k]);
            wa[2 * k + 1] = _mm256_sign_epi8(v[2 * k + 1], v[2 * k + 1]);
        } else {
            const __m256i nib = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)(b + (size_t)g * 16)),
                                                 _mm_loadu_si128((const __m128i *)(a + (size_t)g * 16)));
            v[2 * k] = _mm256_and_si256(nib, _mm256_set1_epi8(0xf));
            v[2 * k + 1] = _mm256_and_si256(_mm256_srli_epi16(nib, 4), _mm256_set1_epi8(0xf));
            wa[2 * k] = v[2 * k], wa[2 * k + 1] = v[2 * k + 1];
        }
    }
}

// A pair of rows' lane dots of four groups, p[k] = [a lanes 0..3 | b lanes 0..3] for group k, as
// whole-group sums [a: I_0 .. I_3 | b: I_0 .. I_3] (exact): a transposing add in each half.
static inline __m256i pair_group_sums4(const __m256i p[4]) {
    const __m256i s01 = _mm256_add_epi32(_mm256_unpacklo_epi32(p[0], p[1]), _mm256_unpackhi_epi32(p[0], p[1]));
    const __m256i s23 = _mm256_add_epi32(_mm256_unpacklo_epi32(p[2], p[3]), _mm256_unpackhi_epi32(p[2], p[3]));
    return _mm256_add_epi32(_mm256_unpacklo_epi64(s01, s23), _mm256_unpackhi_epi64(s01, s23));
}

// out[0..3] from the two accumulators: each half's (A[0] + A[2]) + (A[1] + A[3])
static inline void quad_sums2(__m256 acc01, __m256 acc23, float out[4]) {
    out[0] = lanes_sum(_mm256_castps256_ps128(acc01));
    out[1] = lanes_sum(_mm256_extractf128_ps(acc01, 1));
    out[2] = lanes_sum(_mm256_castps256_ps128(acc23));
    out[3] = lanes_sum(_mm256_extractf128_ps(acc23, 1));
}

#endif

#endif
