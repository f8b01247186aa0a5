// cpu_qdot.c — dot products of quantised weights (q8, q4, q4_1) with int8 activations on the
// CPU: one weight row (emx_dot_*), four weight rows against one activation row (emx_dot4x1_*,
// decode) and the tile of four weight rows against up to 16 activation rows, from a repacked
// copy of the four rows (emx_quad_pack / emx_quad_tile: prefill) or from the rows as they are
// (emx_quad_direct: a few rows, the server's slots decoding together).
//
// One accumulation order (batch invariance, cpu_matmul.h). A group g of 32 weights w_j and
// activations x_j (integers: q8 w_j = the int8, q4 w_j = nibble - 8, q4_1 w_j = nibble) gives
// four exact integer lane sums
//     P_g[l] = sum of w_j x_j over j in {4l .. 4l+3} and {16+4l .. 16+4l+3},   l = 0..3,
// and, with s_g = d_w(g) * d_x(g) (an f32 product),
//     A[l] = fma((float)P_g[l], s_g, A[l])   for g = 0 .. ng-1 in order, from A = 0,
//     dot  = (A[0] + A[2]) + (A[1] + A[3])                                         (lanes_sum)
// plus, for q4_1, the mins' term sum_g m_g * s_x(g) (offsets_sum). Every SIMD kernel follows it
// exactly, so a (weight row, activation row) pair gives the same float whichever kernel ran it.
// Why this lane split: 16 bytes of each of four weight rows fill one 512-bit register (row k
// in quarter k), the activation's 16 bytes are broadcast to the four quarters, and two
// vpdpbusd give every lane of the four rows at once; so one convert, one multiply (the scales,
// which differ per quarter) and one FMA serve 4 rows x 32 weights: 5 instructions per 128
// multiply-adds where a lane-per-group layout needs 8.
// Without AVX-512 the AVX2 4-row kernels put two rows in a 256-bit register, [row a lanes 0..3 |
// row b lanes 0..3]: the same lane sums, scale products and FMA chains, so the same bits.
// The scalar twins (cpu_matmul.c) keep the plain order; SIMD and scalar agree within rounding.
//
// vpdpbusd multiplies unsigned by signed bytes. Nibbles are unsigned already; int8 weights
// are made unsigned (w + 128, an xor). The sum then holds sum w x + c * sum x (c = 128 for q8,
// c = 8 taken off for q4's offset), removed exactly by starting the sum at -c * sum x, from
// the activation's lane sums computed once per matmul input (emx_act_lane_sums).
#include "runtime/cpu/cpu_matmul.h"
#include "runtime/cpu/cpu_simd.h"
#include "base/dtype.h"

#include <string.h>

// ---------------------------------------------------------------------------------------------
// Shared pieces

void emx_act_lane_sums(const int8_t *xq, int n, int32_t *xl) {
    for (int g = 0; g < n / 32; g++) {
        const int8_t *x = xq + (size_t)g * 32;
#ifdef EMX_AVX2
        const __m256i s8 = dot_u8i8(_mm256_set1_epi8(1), _mm256_loadu_si256((const __m256i *)x));  // 4-byte runs
        const __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
        _mm_storeu_si128((__m128i *)(xl + (size_t)g * 4), _mm_sub_epi32(_mm_setzero_si128(), s4));
#else
        for (int l = 0; l < 4; l++) {
            int32_t s = 0;
            for (int j = 0; j < 4; j++) s += x[4 * l + j] + x[16 + 4 * l + j];
            xl[g * 4 + l] = -s;
        }
#endif
    }
}

#ifdef EMX_AVX2
// For the 4-row kernels that read the weight rows as they are: at the start of each block of 8
// groups of a quad (four rows, row_bytes each, at w), ask for that block's share of the next
// quad's rows (the 4 row_bytes after these: a matmul's threads take consecutive quads). Reading
// four rows a few hundred bytes apart, the hardware prefetcher does not run far enough ahead: q8
// decode of a matrix from memory ran at half the one-row kernel's speed (which reads one
// stream). Asking instead for the next block of these same rows, a few hundred bytes ahead, is
// too close to hide the latency: SmolLM2 q8 decoded at 119-123 tok/s against 146-169 (-t 2,
// 2-core Xeon with AVX-512, alternated).
// always_inline is load-bearing: as a plain static inline function gcc 12 judged this helper
// free of side effects (it holds only prefetches) and deleted every call, results unchanged and
// decode a third slower (tests/test_cpu_code.c reads the object file for the prefetches).
static inline __attribute__((always_inline)) void prefetch_next_quad(int kind, const uint8_t *w, size_t row_bytes, int g0) {
    const size_t block_bytes = kind == 0 ? 256 : 128;  // 8 groups of one row
    const uint8_t *next = w + 4 * row_bytes + (size_t)(g0 / 8) * 4 * block_bytes;
    for (size_t b = 0; b < 4 * block_bytes; b += 64) _mm_prefetch((const char *)(next + b), _MM_HINT_T0);
}

// The 8 lanes of a 32-byte dot (lane l: bytes 4l..4l+3) folded to the order's 4 (l and l + 4).
static inline __m128i fold8(__m256i v) {
    return _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
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

// 16 bytes of nibbles -> 32 unsigned bytes 0..15 in the activation's order: low nibbles are
// weights 0..15 (low 128-bit lane), high nibbles weights 16..31.
static inline __m256i unpack_nibbles(const uint8_t *b) {
    const __m128i v = _mm_loadu_si128((const __m128i *)b);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0xf));
}

// ---------------------------------------------------------------------------------------------
// One weight row (the rows a matmul does not take four at a time)

float emx_dot_q8(const int8_t *w, const uint16_t *wd, const int8_t *xq, const float *xd, int n) {
    __m128 acc = _mm_setzero_ps();
    for (int g = 0; g < n / 32; g++) {
        const __m256i wv = _mm256_loadu_si256((const __m256i *)(w + (size_t)g * 32));
        const __m256i xv = _mm256_loadu_si256((const __m256i *)(xq + (size_t)g * 32));
        // u8 x i8 only: |w| * (x * sign(w)), the same integers as w * x
        const __m128i p = fold8(dot_u8i8(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv)));
        acc = _mm_fmadd_ps(_mm_cvtepi32_ps(p), _mm_set1_ps(_cvtsh_ss(wd[g]) * xd[g]), acc);
    }
    return lanes_sum(acc);
}

// Always inlined: the q4 / q4_1 choice (wm == NULL: q4) is resolved at compile time.
static inline __attribute__((always_inline)) float nibble_dot(const uint8_t *w, const uint16_t *wd, const uint16_t *wm,
                                                              const int8_t *xq, const float *xd, const float *xs, int ng) {
    __m128 acc = _mm_setzero_ps();
    for (int g = 0; g < ng; g++) {
        const __m256i xv = _mm256_loadu_si256((const __m256i *)(xq + (size_t)g * 32));
        __m128i p = fold8(dot_u8i8(unpack_nibbles(w + (size_t)g * 16), xv));
        if (!wm) p = _mm_sub_epi32(p, fold8(dot_u8i8(_mm256_set1_epi8(8), xv)));  // q4: (nib - 8) x
        acc = _mm_fmadd_ps(_mm_cvtepi32_ps(p), _mm_set1_ps(_cvtsh_ss(wd[g]) * xd[g]), acc);
    }
    const float dot = lanes_sum(acc);
    return wm ? dot + offsets_sum(wm, xs, ng) : dot;
}

float emx_dot_q4(const uint8_t *w, const uint16_t *wd, const int8_t *xq, const float *xd, const float *xs, int n) {
    return nibble_dot(w, wd, NULL, xq, xd, xs, n / 32);
}

float emx_dot_q4_1(const uint8_t *w, const uint16_t *wd, const uint16_t *wm, const int8_t *xq, const float *xd,
                   const float *xs, int n) {
    return nibble_dot(w, wd, wm, xq, xd, xs, n / 32);
}
#else  // no AVX2: the fast names are the scalar kernels
float emx_dot_q8(const int8_t *w, const uint16_t *wd, const int8_t *xq, const float *xd, int n) {
    return emx_dot_q8_scalar(w, wd, xq, xd, n);
}
float emx_dot_q4(const uint8_t *w, const uint16_t *wd, const int8_t *xq, const float *xd, const float *xs, int n) {
    return emx_dot_q4_scalar(w, wd, xq, xd, xs, n);
}
float emx_dot_q4_1(const uint8_t *w, const uint16_t *wd, const uint16_t *wm, const int8_t *xq, const float *xd,
                   const float *xs, int n) {
    return emx_dot_q4_1_scalar(w, wd, wm, xq, xd, xs, n);
}
#endif

// ---------------------------------------------------------------------------------------------
// Four weight rows at once (AVX-512 VNNI, else AVX2)

#if EMX_AVX512_VNNI
// 16 bytes of each of four rows (row k at p + k * stride) side by side: [r0 | r1 | r2 | r3]
static inline __m512i quad16(const uint8_t *p, size_t stride) {
    __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)p));
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + stride)), 1);
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + 2 * stride)), 2);
    return _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + 3 * stride)), 3);
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
        *w1 = _mm512_xor_si512(_mm512_permutex2var_epi64(r01, _mm512_set_epi64(13, 12, 9, 8, 5, 4, 1, 0), r23), flip);
        *w2 = _mm512_xor_si512(_mm512_permutex2var_epi64(r01, _mm512_set_epi64(15, 14, 11, 10, 7, 6, 3, 2), r23), flip);
    } else {
        const __m512i nib = quad16(w + (size_t)g * 16, row_bytes), mask = _mm512_set1_epi8(0xf);
        *w1 = _mm512_and_si512(nib, mask);
        *w2 = _mm512_and_si512(_mm512_srli_epi16(nib, 4), mask);
    }
}

// The four rows' scales d_w of the groups g0 .. g0+7 (fewer at the row's end: masked loads stay
// inside the rows), as two tables [r0 | r1] and [r2 | r3] of 8 floats each.
static inline void quad_scales(const uint16_t *wd, int ng, int g0, __m512 *t01, __m512 *t23) {
    const int m = ng - g0 < 8 ? ng - g0 : 8;
    const __mmask8 live = (__mmask8)((1u << m) - 1);
    __m256 d[4];
    for (int r = 0; r < 4; r++) d[r] = _mm256_cvtph_ps(_mm_maskz_loadu_epi16(live, wd + (size_t)r * ng + g0));
    *t01 = _mm512_insertf32x8(_mm512_castps256_ps512(d[0]), d[1], 1);
    *t23 = _mm512_insertf32x8(_mm512_castps256_ps512(d[2]), d[3], 1);
}
// A group of the tables spread over the quarters, [d_r0 x 4 | d_r1 x 4 | d_r2 x 4 | d_r3 x 4]:
// the index of group 0 is SPREAD0; each next group adds 1 to every lane.
#define SPREAD0 _mm512_set_epi32(24, 24, 24, 24, 16, 16, 16, 16, 8, 8, 8, 8, 0, 0, 0, 0)
static inline __m512 quad_spread(__m512 t01, __m512 t23, __m512i idx) { return _mm512_permutex2var_ps(t01, idx, t23); }

// One step of the order for four rows against activation row x (its group g at x + 32g, its
// lane sums at xl + 4g): acc = fma(P_g, s_g, acc) in each quarter, sc = the quarters' s_g.
// kind: 0 q8, 1 q4, 2 q4_1; shifted: xl holds the lane sums times c already (the act blocks).
static inline __attribute__((always_inline)) __m512 quad_step(int kind, __m512 acc, __m512i w1, __m512i w2, __m512 sc,
                                                              const int8_t *x, const int32_t *xl, int shifted) {
    const __m512i x1 = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)x));
    const __m512i x2 = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(x + 16)));
    __m512i start = _mm512_setzero_si512();  // -c * (the lane's sum of x): q8 c = 128, q4 c = 8
    if (kind != 2) {
        start = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)xl));
        if (!shifted) start = _mm512_slli_epi32(start, kind == 0 ? 7 : 3);
    }
    const __m512i p = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(start, w1, x1), w2, x2);
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), sc, acc);
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

// Decode: four weight rows against one activation row, the rows read as they are (each weight
// is used once: no repacking pays), the next block of the rows asked for ahead.
static inline __attribute__((always_inline)) void dot4x1(int kind, const uint8_t *w, const uint16_t *wd,
                                                         const uint16_t *wm, const int8_t *xq, const int32_t *xl,
                                                         const float *xd, const float *xs, int n, float out[4]) {
    const int ng = n / 32;
    const size_t row_bytes = kind == 0 ? (size_t)n : (size_t)n / 2;
    __m512 acc = _mm512_setzero_ps();
    for (int g0 = 0; g0 < ng; g0 += 8) {
        // the block's s_g = d_w * d_x of the four rows at once, then spread group by group
        __m512 s01, s23;
        quad_scales(wd, ng, g0, &s01, &s23);
        const int m = ng - g0 < 8 ? ng - g0 : 8;
        const __m256 dx = _mm256_maskz_loadu_ps((__mmask8)((1u << m) - 1), xd + g0);
        const __m512 dxx = _mm512_insertf32x8(_mm512_castps256_ps512(dx), dx, 1);
        s01 = _mm512_mul_ps(s01, dxx);
        s23 = _mm512_mul_ps(s23, dxx);
        prefetch_next_quad(kind, w, row_bytes, g0);
        if (m == 8) {  // whole block: constant spreads (the usual case; no index arithmetic)
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                const int g = g0 + k;
                __m512i w1, w2;
                quad_group(kind == 0, w, row_bytes, g, &w1, &w2);
                const __m512i idx = _mm512_add_epi32(SPREAD0, _mm512_set1_epi32(k));
                acc = quad_step(kind, acc, w1, w2, quad_spread(s01, s23, idx), xq + (size_t)g * 32, xl + (size_t)g * 4, 0);
            }
        } else {
            __m512i idx = SPREAD0;
            for (int k = 0; k < m; k++, idx = _mm512_add_epi32(idx, _mm512_set1_epi32(1))) {
                const int g = g0 + k;
                __m512i w1, w2;
                quad_group(kind == 0, w, row_bytes, g, &w1, &w2);
                acc = quad_step(kind, acc, w1, w2, quad_spread(s01, s23, idx), xq + (size_t)g * 32, xl + (size_t)g * 4, 0);
            }
        }
    }
    quad_sums(acc, out);
    if (kind == 2)
        for (int r = 0; r < 4; r++) out[r] += offsets_sum(wm + (size_t)r * ng, xs, ng);
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

// One step of the order for rows (0, 1) and (2, 3): w = the group's pairs [lo01, hi01, lo23,
// hi23] (q8: as stored, wa = the same with |w|; q4/q4_1: the nibbles unpacked, wa read by
// nobody), s01 / s23 = [s_g(a) x 4 | s_g(b) x 4]. kind: 0 q8, 1 q4, 2 q4_1; xl: the group's 4
// lane sums (negated; shifted: times 8 already). w and wa may point into the packed copy: read
// where they lie, not copied per step.
static inline __attribute__((always_inline)) void quad_step2(int kind, __m256 *acc01, __m256 *acc23,
                                                             const __m256i *w, const __m256i *wa, __m256 s01,
                                                             __m256 s23, const int8_t *x, const int32_t *xl,
                                                             int shifted) {
    const __m256i xlo = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)x));
    const __m256i xhi = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(x + 16)));
    const int q8 = kind == 0;
    __m256i p01 = pair_dot(q8, w[0], w[1], wa[0], wa[1], xlo, xhi);
    __m256i p23 = pair_dot(q8, w[2], w[3], wa[2], wa[3], xlo, xhi);
    if (kind == 1) {  // q4: (nib - 8) x = nib x + 8 * (-x), the lane sums of -x once for the four rows
        __m256i off = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)xl));
        if (!shifted) off = _mm256_slli_epi32(off, 3);
        p01 = _mm256_add_epi32(p01, off);
        p23 = _mm256_add_epi32(p23, off);
    }
    *acc01 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p01), s01, *acc01);
    *acc23 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p23), s23, *acc23);
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

// [a x 4 | b x 4]
static inline __m256 spread2(const float *a, const float *b) {
    return _mm256_blend_ps(_mm256_broadcast_ss(a), _mm256_broadcast_ss(b), 0xF0);
}

// out[0..3] from the two accumulators: each half's (A[0] + A[2]) + (A[1] + A[3])
static inline void quad_sums2(__m256 acc01, __m256 acc23, float out[4]) {
    out[0] = lanes_sum(_mm256_castps256_ps128(acc01));
    out[1] = lanes_sum(_mm256_extractf128_ps(acc01, 1));
    out[2] = lanes_sum(_mm256_castps256_ps128(acc23));
    out[3] = lanes_sum(_mm256_extractf128_ps(acc23, 1));
}

// Decode: four weight rows against one activation row, read as they are. The scales s_g =
// d_w * d_x of 8 groups of the four rows at a time (the same f32 products as the one-row
// kernel's), the tail groups one by one.
static inline __attribute__((always_inline)) void dot4x1(int kind, const uint8_t *w, const uint16_t *wd,
                                                         const uint16_t *wm, const int8_t *xq, const int32_t *xl,
                                                         const float *xd, const float *xs, int n, float out[4]) {
    const int ng = n / 32;
    const size_t row_bytes = kind == 0 ? (size_t)n : (size_t)n / 2;
    __m256 acc01 = _mm256_setzero_ps(), acc23 = _mm256_setzero_ps();
    __attribute__((aligned(32))) float s[4][8];  // [row][group of the block]
    for (int g0 = 0; g0 < ng; g0 += 8) {
        const int m = ng - g0 < 8 ? ng - g0 : 8;
        if (m == 8) {
            const __m256 dx = _mm256_loadu_ps(xd + g0);
            for (int r = 0; r < 4; r++)
                _mm256_store_ps(s[r], _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wd + (size_t)r * ng + g0))), dx));
        } else {
            for (int r = 0; r < 4; r++)
                for (int k = 0; k < m; k++) s[r][k] = _cvtsh_ss(wd[(size_t)r * ng + g0 + k]) * xd[g0 + k];
        }
        prefetch_next_quad(kind, w, row_bytes, g0);
        for (int k = 0; k < m; k++) {
            const int g = g0 + k;
            __m256i wv[4], wa[4];
            quad_pairs(kind == 0, w, row_bytes, g, wv, wa);
            quad_step2(kind, &acc01, &acc23, wv, wa, spread2(&s[0][k], &s[1][k]), spread2(&s[2][k], &s[3][k]),
                       xq + (size_t)g * 32, xl + (size_t)g * 4, 0);
        }
    }
    quad_sums2(acc01, acc23, out);
    if (kind == 2)
        for (int r = 0; r < 4; r++) out[r] += offsets_sum(wm + (size_t)r * ng, xs, ng);
}
#endif

void emx_dot4x1_q8(const int8_t *w, const uint16_t *wd, const int8_t *xq, const int32_t *xl, const float *xd, int n,
                   float out[4]) {
#ifdef EMX_AVX2
    dot4x1(0, (const uint8_t *)w, wd, NULL, xq, xl, xd, NULL, n, out);
#else
    (void)xl;
    for (int r = 0; r < 4; r++) out[r] = emx_dot_q8(w + (size_t)r * n, wd + (size_t)r * (n / 32), xq, xd, n);
#endif
}

void emx_dot4x1_q4(const uint8_t *w, const uint16_t *wd, const int8_t *xq, const int32_t *xl, const float *xd,
                   const float *xs, int n, float out[4]) {
#ifdef EMX_AVX2
    dot4x1(1, w, wd, NULL, xq, xl, xd, xs, n, out);
#else
    (void)xl;
    for (int r = 0; r < 4; r++) out[r] = emx_dot_q4(w + (size_t)r * n / 2, wd + (size_t)r * (n / 32), xq, xd, xs, n);
#endif
}

void emx_dot4x1_q4_1(const uint8_t *w, const uint16_t *wd, const uint16_t *wm, const int8_t *xq, const int32_t *xl,
                     const float *xd, const float *xs, int n, float out[4]) {
#ifdef EMX_AVX2
    dot4x1(2, w, wd, wm, xq, xl, xd, xs, n, out);
#else
    (void)xl;
    const int ng = n / 32;
    for (int r = 0; r < 4; r++)
        out[r] = emx_dot_q4_1(w + (size_t)r * n / 2, wd + (size_t)r * ng, wm + (size_t)r * ng, xq, xd, xs, n);
#endif
}

// ---------------------------------------------------------------------------------------------
// The prefill tile: four weight rows, repacked once, against many activation rows

// Bytes of the packed copy per group of 32: AVX-512, w1 and w2 (64 B each) and the spread
// scales (64 B); AVX2, the four rows' bytes (128 B), the spread scales (64 B) and, for q8, the
// rows' |w| (128 B) that the sign trick multiplies (computed here once, not per activation row).
#if EMX_AVX512_VNNI
#define QUAD_PACK_GROUP(kind) ((void)(kind), (size_t)192)
#else
#define QUAD_PACK_GROUP(kind) ((kind) == 0 ? (size_t)320 : (size_t)192)
#endif

size_t emx_quad_pack_bytes(int n) { return (size_t)(n / 32) * QUAD_PACK_GROUP(0); }

void emx_quad_pack(uint8_t *pack, uint32_t dtype, const uint8_t *w, const uint16_t *wd, int n) {
#if EMX_AVX512_VNNI
    // per group: w1 [64 B], w2 [64 B] (quad_group's registers), the spread scales [16 floats]
    const int ng = n / 32, q8 = dtype == EMX_Q8;
    const size_t row_bytes = q8 ? (size_t)n : (size_t)n / 2;
    for (int g0 = 0; g0 < ng; g0 += 8) {
        __m512 t01, t23;
        quad_scales(wd, ng, g0, &t01, &t23);
        const int m = ng - g0 < 8 ? ng - g0 : 8;
        __m512i idx = SPREAD0;
        for (int k = 0; k < m; k++, idx = _mm512_add_epi32(idx, _mm512_set1_epi32(1))) {
            uint8_t *p = pack + (size_t)(g0 + k) * QUAD_PACK_GROUP(0);
            __m512i w1, w2;
            quad_group(q8, w, row_bytes, g0 + k, &w1, &w2);
            _mm512_store_si512((void *)p, w1);
            _mm512_store_si512((void *)(p + 64), w2);
            _mm512_store_ps((void *)(p + 128), quad_spread(t01, t23, idx));
        }
    }
#elif defined(EMX_AVX2)
    // per group: the four rows' pairs as quad_pairs gives them, [lo01, hi01, lo23, hi23] [128 B],
    // then the scales d_w spread for the two pair registers, [d0 x 4 | d1 x 4] and [d2 x 4 |
    // d3 x 4] [64 B], then for q8 the pairs' |w| [128 B]
    const int ng = n / 32, q8 = dtype == EMX_Q8;
    const size_t row_bytes = q8 ? (size_t)n : (size_t)n / 2;
    for (int g = 0; g < ng; g++) {
        uint8_t *p = pack + (size_t)g * QUAD_PACK_GROUP(!q8);
        __m256i v[4], wa[4];
        quad_pairs(q8, w, row_bytes, g, v, wa);
        float d[4];
        for (int r = 0; r < 4; r++) {
            _mm256_store_si256((__m256i *)(p + 32 * r), v[r]);
            if (q8) _mm256_store_si256((__m256i *)(p + 192 + 32 * r), wa[r]);
            d[r] = _cvtsh_ss(wd[(size_t)r * ng + g]);
        }
        _mm256_store_ps((float *)(p + 128), spread2(&d[0], &d[1]));
        _mm256_store_ps((float *)(p + 160), spread2(&d[2], &d[3]));
    }
#else
    (void)pack, (void)dtype, (void)w, (void)wd, (void)n;
#endif
}

// The activation rows in blocks of 8 (the tile's rows), per group g of 32 the block's
// ACT_BLOCK_GROUP bytes: quants [8][32], the lane sums times 128 [8][4] and times 8 [8][4]
// (int32: q8's and q4's offsets, ready to start the sums), scales d_x [8] (f32). A tile then
// reads one stream at offsets known at compile time where it read three arrays through a
// pointer per row (8 rows: 24 pointers, more than the registers: reloaded from the stack), and
// starts each sum from a load instead of a load and a shift.
#define ACT_BLOCK_GROUP 544
#define ACT_BLOCK_XL7 256
#define ACT_BLOCK_XL3 384
#define ACT_BLOCK_XD 512

size_t emx_act_blocks_bytes(int n_rows, int n) {
    return (size_t)(n_rows / EMX_ACT_BLOCK_ROWS) * (size_t)(n / 32) * ACT_BLOCK_GROUP;
}

void emx_act_block(uint8_t *blocks, const EmxActs *a, const int32_t *xl, int n, int b) {
    const int ng = n / 32;
    for (int g = 0; g < ng; g++) {
        uint8_t *p = blocks + ((size_t)b * ng + g) * ACT_BLOCK_GROUP;
        for (int t = 0; t < EMX_ACT_BLOCK_ROWS; t++) {
            const size_t row = (size_t)b * EMX_ACT_BLOCK_ROWS + t;
            memcpy(p + 32 * t, a->xq + row * n + (size_t)g * 32, 32);
            for (int l = 0; l < 4; l++) {  // |sum| <= 8 x 128: no overflow
                const int32_t v = xl[row * ng * 4 + (size_t)g * 4 + l];
                memcpy(p + ACT_BLOCK_XL7 + 16 * t + 4 * l, &(int32_t){v * 128}, 4);
                memcpy(p + ACT_BLOCK_XL3 + 16 * t + 4 * l, &(int32_t){v * 8}, 4);
            }
            memcpy(p + ACT_BLOCK_XD + 4 * t, a->xd + row * ng + g, 4);
        }
    }
}

#ifdef EMX_AVX2
// Activation row t (< 16) of a tile at group g: its 32 quants, 4 lane sums and d_x, from the
// blocks (blocked, a compile-time choice; blk: the tile's first block, at group 0; the lane sums
// times kind's c) or the separate arrays (rows at xq, xl, xd; the lane sums as they are).
typedef struct {
    const int8_t *x;
    const int32_t *xl;
    float xd;
} ActGroup;
static inline __attribute__((always_inline)) ActGroup act_group(int kind, int blocked, const uint8_t *blk,
                                                                const int8_t *xq, const int32_t *xl, const float *xd,
                                                                int n, int t, int g) {
    const int ng = n / 32;
    if (blocked) {
        const uint8_t *p = blk + ((size_t)(t / 8) * ng + g) * ACT_BLOCK_GROUP;
        float d;
        memcpy(&d, p + ACT_BLOCK_XD + 4 * (t % 8), 4);
        const size_t xl_at = (kind == 0 ? ACT_BLOCK_XL7 : ACT_BLOCK_XL3) + 16 * (t % 8);
        return (ActGroup){(const int8_t *)p + 32 * (t % 8), (const int32_t *)(p + xl_at), d};
    }
    return (ActGroup){xq + (size_t)t * n + (size_t)g * 32, xl + (size_t)t * ng * 4 + (size_t)g * 4, xd[(size_t)t * ng + g]};
}

// A tile row's four results: the lanes' sums o, plus q4_1's mins term (xs: that row's group sums).
static inline void quad_out(int kind, const float o[4], const uint16_t *wm, const float *xs, int ng, float *out) {
    for (int r = 0; r < 4; r++) out[r] = kind == 2 ? o[r] + offsets_sum(wm + (size_t)r * ng, xs, ng) : o[r];
}
#endif

#if EMX_AVX512_VNNI
// nt (<= 8) activation rows (row t at xq + t*n, xl + t*n/8, xd + t*n/32, xs + t*n/32; or, with
// blk, the block of 8 rows from emx_act_block) against four weight rows; out[t][r] (row stride
// out_stride). The quad comes from its packed copy, or (direct, a compile-time choice) from the
// rows as they are (w, wd): each group loaded and reshuffled once for the nt rows, which pays
// where too few rows share a copy to repay it.
static inline __attribute__((always_inline)) void quad_tile(int kind, int direct, int nt, int blocked, const uint8_t *blk,
                                                            const uint8_t *pack,
                                                            const uint8_t *w, const uint16_t *wd, const uint16_t *wm,
                                                            const int8_t *xq, const int32_t *xl, const float *xd,
                                                            const float *xs, int n, float *out, size_t out_stride) {
    const int ng = n / 32;
    const size_t row_bytes = kind == 0 ? (size_t)n : (size_t)n / 2;
    __m512 acc[8], t01 = _mm512_setzero_ps(), t23 = _mm512_setzero_ps();
    for (int t = 0; t < nt; t++) acc[t] = _mm512_setzero_ps();
    for (int g = 0; g < ng; g++) {
        __m512i w1, w2;
        __m512 dw;
        if (direct) {
            if (g % 8 == 0) {  // a block's scales, and the next quad's rows asked for ahead
                quad_scales(wd, ng, g, &t01, &t23);
                prefetch_next_quad(kind, w, row_bytes, g);
            }
            quad_group(kind == 0, w, row_bytes, g, &w1, &w2);
            dw = quad_spread(t01, t23, _mm512_add_epi32(SPREAD0, _mm512_set1_epi32(g % 8)));
        } else {
            const uint8_t *p = pack + (size_t)g * QUAD_PACK_GROUP(kind);
            w1 = _mm512_load_si512((const void *)p), w2 = _mm512_load_si512((const void *)(p + 64));
            dw = _mm512_load_ps((const void *)(p + 128));
        }
#pragma GCC unroll 8
        for (int t = 0; t < nt; t++) {
            const ActGroup x = act_group(kind, blocked, blk, xq, xl, xd, n, t, g);
            acc[t] = quad_step(kind, acc[t], w1, w2, _mm512_mul_ps(dw, _mm512_set1_ps(x.xd)), x.x, x.xl, blocked);
        }
    }
    for (int t = 0; t < nt; t++) {
        float o[4];
        quad_sums(acc[t], o);
        quad_out(kind, o, wm, xs + (size_t)t * ng, ng, out + (size_t)t * out_stride);
    }
}
#elif defined(EMX_AVX2)
// nt (<= 16) activation rows against four weight rows, as the AVX-512 tile (packed or direct): per
// group the four rows' bytes are loaded once for all nt activation rows, s_g = d_w * d_x the same
// f32 product as emx_dot_*'s. 16 registers cannot hold 16 x 2 accumulators, yet wider tiles won
// (pp512 -t 2, 2-core Xeon, AVX2-only build: 4 rows 340 tok/s, 8 rows 420, 16 rows 485-513, 32
// rows 511-520; 2 rows 229): each group's setup and the pass over the packed copy serve more rows.
static inline __attribute__((always_inline)) void quad_tile(int kind, int direct, int nt, int blocked, const uint8_t *blk,
                                                            const uint8_t *pack, const uint8_t *w, const uint16_t *wd,
                                                            const uint16_t *wm, const int8_t *xq, const int32_t *xl,
                                                            const float *xd, const float *xs, int n, float *out,
                                                            size_t out_stride) {
    const int ng = n / 32;
    const size_t row_bytes = kind == 0 ? (size_t)n : (size_t)n / 2;
    __m256 acc[16][2];
    for (int t = 0; t < nt; t++) acc[t][0] = acc[t][1] = _mm256_setzero_ps();
    for (int g = 0; g < ng; g++) {
        __m256i wv[4], wabs[4];
        const __m256i *ws = wv, *wa = wabs;  // the group's pairs as stored, and q8's |w|
        __m256 d01, d23;
        if (direct) {
            if (g % 8 == 0) prefetch_next_quad(kind, w, row_bytes, g);
            quad_pairs(kind == 0, w, row_bytes, g, wv, wabs);
            float d[4];
            for (int r = 0; r < 4; r++) d[r] = _cvtsh_ss(wd[(size_t)r * ng + g]);
            d01 = spread2(&d[0], &d[1]), d23 = spread2(&d[2], &d[3]);
        } else {
            const uint8_t *p = pack + (size_t)g * QUAD_PACK_GROUP(kind);
            ws = (const __m256i *)p;
            wa = kind == 0 ? (const __m256i *)(p + 192) : ws;
            d01 = _mm256_load_ps((const float *)(p + 128)), d23 = _mm256_load_ps((const float *)(p + 160));
        }
#pragma GCC unroll 16
        for (int t = 0; t < nt; t++) {
            const ActGroup x = act_group(kind, blocked, blk, xq, xl, xd, n, t, g);
            const __m256 dx = _mm256_set1_ps(x.xd);
            quad_step2(kind, &acc[t][0], &acc[t][1], ws, wa, _mm256_mul_ps(d01, dx), _mm256_mul_ps(d23, dx), x.x, x.xl,
                       blocked);
        }
    }
    for (int t = 0; t < nt; t++) {
        float o[4];
        quad_sums2(acc[t][0], acc[t][1], o);
        quad_out(kind, o, wm, xs + (size_t)t * ng, ng, out + (size_t)t * out_stride);
    }
}
#endif

#ifdef EMX_AVX2
// Activation rows i0 .. i0+ni-1 in tiles of 8 (AVX-512) or, from the packed copy, 16 and 8
// (AVX2), then 4, the rest (direct) and 1. Tiles of 8 and 16 that start on a block read the
// blocks where there are (blocks: rows from 0 of a in blocks of 8, emx_act_block).
static inline __attribute__((always_inline)) void quad_tile_kind(int kind, int direct, const uint8_t *blocks,
                                                                 const uint8_t *pack, const uint8_t *w,
                                                                 const uint16_t *wd, const uint16_t *wm,
                                                                 const EmxActs *a, const int32_t *xl, int n, int i0,
                                                                 int ni, float *out, size_t out_stride) {
    const int ng = n / 32;
    int i = i0;
    const int end = i0 + ni;
#define EMX_TILE(nt, blocked)                                                                                     \
    quad_tile(kind, direct, nt, blocked, blocked ? blocks + (size_t)(i / 8) * ng * ACT_BLOCK_GROUP : NULL, pack,  \
              w, wd, wm,                                                                                          \
              a->xq + (size_t)i * n, xl + (size_t)i * ng * 4, a->xd + (size_t)i * ng, a->xs + (size_t)i * ng, n,  \
              out + (size_t)i * out_stride, out_stride)
    const int on_blocks = blocks && i % 8 == 0;  // each tile of 8 or 16 then starts a block
#if EMX_AVX512_VNNI
    if (on_blocks)
        for (; i + 8 <= end; i += 8) EMX_TILE(8, 1);
    for (; i + 8 <= end; i += 8) EMX_TILE(8, 0);
#else
    if (on_blocks) {
        for (; !direct && i + 16 <= end; i += 16) EMX_TILE(16, 1);
        for (; !direct && i + 8 <= end; i += 8) EMX_TILE(8, 1);
    }
    for (; !direct && i + 16 <= end; i += 16) EMX_TILE(16, 0);
    for (; !direct && i + 8 <= end; i += 8) EMX_TILE(8, 0);
#endif
    for (; i + 4 <= end; i += 4) EMX_TILE(4, 0);
    if (direct && end - i >= 2) {  // the rest together: each group of the rows loaded once
        if (end - i == 3) EMX_TILE(3, 0);
        else EMX_TILE(2, 0);
        i = end;
    }
    for (; i < end; i++) EMX_TILE(1, 0);
#undef EMX_TILE
}
#endif

void emx_quad_tile(const uint8_t *pack, uint32_t dtype, const uint16_t *wm, const EmxActs *a, const int32_t *xl,
                   const uint8_t *blocks, int n, int i0, int ni, float *out, size_t out_stride) {
#ifdef EMX_AVX2
    if (dtype == EMX_Q8) quad_tile_kind(0, 0, blocks, pack, NULL, NULL, wm, a, xl, n, i0, ni, out, out_stride);
    else if (dtype == EMX_Q4) quad_tile_kind(1, 0, blocks, pack, NULL, NULL, wm, a, xl, n, i0, ni, out, out_stride);
    else quad_tile_kind(2, 0, blocks, pack, NULL, NULL, wm, a, xl, n, i0, ni, out, out_stride);
#else
    (void)pack, (void)dtype, (void)wm, (void)a, (void)xl, (void)blocks, (void)n, (void)i0, (void)ni, (void)out,
        (void)out_stride;
#endif
}

void emx_quad_direct(uint32_t dtype, const uint8_t *w, const uint16_t *wd, const uint16_t *wm, const EmxActs *a,
                     const int32_t *xl, int n, int i0, int ni, float *out, size_t out_stride) {
#ifdef EMX_AVX2
    if (dtype == EMX_Q8) quad_tile_kind(0, 1, NULL, NULL, w, wd, wm, a, xl, n, i0, ni, out, out_stride);
    else if (dtype == EMX_Q4) quad_tile_kind(1, 1, NULL, NULL, w, wd, wm, a, xl, n, i0, ni, out, out_stride);
    else quad_tile_kind(2, 1, NULL, NULL, w, wd, wm, a, xl, n, i0, ni, out, out_stride);
#else
    (void)dtype, (void)w, (void)wd, (void)wm, (void)a, (void)xl, (void)n, (void)i0, (void)ni, (void)out, (void)out_stride;
#endif
}

int emx_quad_kernels_available(void) {
#ifdef EMX_AVX2
    return 1;
#else
    return 0;
#endif
}

