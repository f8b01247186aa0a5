// cpu_qdot.c — dot products of quantised weights (q8, q4, q4_1, q4_1f) with int8 activations on the
// CPU: one weight row (emx_dot_*) and four weight rows against one activation row (emx_dot4x1_*,
// decode). The tiles of four weight rows against many activation rows (prefill) are cpu_qtile.c
// (AVX2) and cpu_qtile512.c (AVX-512 VNNI); the four-row steps they share, cpu_quad.h. The order
// below is what all of them compute.
//
// One accumulation order (batch invariance, cpu_matmul.h). A group g of 32 weights w_j and
// activations x_j (integers: q8 w_j = the int8, q4 w_j = nibble - 8, q4_1 and q4_1f w_j = nibble)
// gives one exact integer I_g = sum of w_j x_j, and, with s_g = d_w(g) * d_x(g) (an f32 product),
// four accumulators by the group's phase g mod 4:
//     A[g % 4] = fma((float)I_g, s_g, A[g % 4])   for g = 0 .. ng-1 in order, from A = 0,
//     dot      = (A[0] + A[2]) + (A[1] + A[3])                                       (lanes_sum)
// plus, for q4_1 and q4_1f, the mins' term sum_g m_g * s_x(g) (offsets_sum). Every kernel follows it
// exactly, the scalar twins (below) included, so a (weight row, activation row) pair
// gives the same float whichever kernel, and whichever build, ran it.
// Why whole groups: the integer sum of a group may be formed in any order (integers are exact),
// so a kernel lays its lanes out as it likes, and the float work (convert, scale, FMA) is paid
// once per group and pair, not once per lane. The prefill tile puts 4 weight rows x 4 activation
// rows in a 512-bit register and pays it once for 16 pairs (cpu_qtile512.c); decode, one
// activation row, takes four groups of four rows (int8: two vpdpbusd per group, [row r's 4 lane
// sums] in quarter r; nibbles: one register per row, its quarters the four groups), makes the
// whole-group sums with one transposing add, and so pays one convert and one FMA per 4 rows x 4
// groups; AVX2 does the same in 256-bit registers (int8 two rows to a register, nibbles two
// groups of one row).
//
// vpdpbusd multiplies unsigned by signed bytes. Nibbles are unsigned already; int8 weights
// are made unsigned (w + 128, an xor). The sum then holds sum w x + c * sum x (c = 128 for q8,
// c = 8 taken off for q4's offset), removed exactly by starting the sum at -c * sum x, from
// the activation's lane sums computed once per matmul input (emx_act_lane_sums).
#include "runtime/cpu/cpu_matmul.h"
#include "runtime/cpu/cpu_quad.h"
#include "base/dtype.h"

#include <math.h>
#include <string.h>

// ---------------------------------------------------------------------------------------------
// The scalar twins: what the kernels below compute, in plain C (the tests compare against them;
// without AVX2 they are the kernels)

// The order (top): whole-group integer sums I_g, four float accumulators by group phase,
// acc[g % 4] = fma(I_g, d_w * d_x, acc[g % 4]) in order of g.
static float phases_sum(const float acc[4]) { return (acc[0] + acc[2]) + (acc[1] + acc[3]); }

float emx_dot_q8_scalar(const int8_t *w, const uint16_t *wd, const int8_t *xq, const float *xd, int n) {
    float acc[4] = {0, 0, 0, 0};
    for (int g = 0; g < n / 32; g++) {
        int32_t isum = 0;  // exact: |sum| <= 32 * 128 * 127
        for (int j = 0; j < 32; j++) isum += (int32_t)w[g * 32 + j] * xq[g * 32 + j];
        acc[g % 4] = fmaf((float)isum, emx_f16_to_f32(wd[g]) * xd[g], acc[g % 4]);
    }
    return phases_sum(acc);
}

float emx_dot_q4_scalar(const uint8_t *w, const uint16_t *wd, const int8_t *xq, const float *xd, const float *xs, int n) {
    (void)xs;
    float acc[4] = {0, 0, 0, 0};
    for (int g = 0; g < n / 32; g++) {
        const uint8_t *b = w + g * 16;
        const int8_t *xg = xq + g * 32;
        int32_t isum = 0;
        for (int j = 0; j < 16; j++) {
            isum += ((b[j] & 0xf) - 8) * xg[j];
            isum += ((b[j] >> 4) - 8) * xg[j + 16];
        }
        acc[g % 4] = fmaf((float)isum, emx_f16_to_f32(wd[g]) * xd[g], acc[g % 4]);
    }
    return phases_sum(acc);
}

// q4_1's mins term, sum over groups of m_g * xs_g, in the SIMD kernels' order (offsets_sum in
// cpu_quad.h): eight lanes over the whole blocks of 8 groups (lane k: groups k mod 8, by fma),
// folded k + (k + 4), then (0 + 2) + (1 + 3); the tail groups summed one by one apart, added last.
static float mins_sum(const uint16_t *wm, const float *xs, int ng) {
    float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0}, tail = 0;
    int g = 0;
    for (; g + 8 <= ng; g += 8)
        for (int k = 0; k < 8; k++) lane[k] = fmaf(emx_f16_to_f32(wm[g + k]), xs[g + k], lane[k]);
    for (; g < ng; g++) tail += emx_f16_to_f32(wm[g]) * xs[g];
    const float t0 = lane[0] + lane[4], t1 = lane[1] + lane[5], t2 = lane[2] + lane[6], t3 = lane[3] + lane[7];
    return ((t0 + t2) + (t1 + t3)) + tail;
}

float emx_dot_q4_1_scalar(const uint8_t *w, const uint16_t *wd, const uint16_t *wm, const int8_t *xq, const float *xd,
                          const float *xs, int n) {
    float acc[4] = {0, 0, 0, 0};
    for (int g = 0; g < n / 32; g++) {
        const uint8_t *b = w + g * 16;
        const int8_t *xg = xq + g * 32;
        int32_t isum = 0;
        for (int j = 0; j < 16; j++) isum += (b[j] & 0xf) * xg[j] + (b[j] >> 4) * xg[j + 16];
        acc[g % 4] = fmaf((float)isum, emx_f16_to_f32(wd[g]) * xd[g], acc[g % 4]);
    }
    return phases_sum(acc) + mins_sum(wm, xs, n / 32);
}

// q4_1f: q4_1 with f32 scales and mins (Q4_K's sub-blocks, base/model_format.h), the same order.
static float mins_sum_f32(const float *wm, const float *xs, int ng) {
    float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0}, tail = 0;
    int g = 0;
    for (; g + 8 <= ng; g += 8)
        for (int k = 0; k < 8; k++) lane[k] = fmaf(wm[g + k], xs[g + k], lane[k]);
    for (; g < ng; g++) tail += wm[g] * xs[g];
    const float t0 = lane[0] + lane[4], t1 = lane[1] + lane[5], t2 = lane[2] + lane[6], t3 = lane[3] + lane[7];
    return ((t0 + t2) + (t1 + t3)) + tail;
}

float emx_dot_q4_1f_scalar(const uint8_t *w, const float *wd, const float *wm, const int8_t *xq, const float *xd,
                           const float *xs, int n) {
    float acc[4] = {0, 0, 0, 0};
    for (int g = 0; g < n / 32; g++) {
        const uint8_t *b = w + g * 16;
        const int8_t *xg = xq + g * 32;
        int32_t isum = 0;
        for (int j = 0; j < 16; j++) isum += (b[j] & 0xf) * xg[j] + (b[j] >> 4) * xg[j + 16];
        acc[g % 4] = fmaf((float)isum, wd[g] * xd[g], acc[g % 4]);
    }
    return phases_sum(acc) + mins_sum_f32(wm, xs, n / 32);
}

// ---------------------------------------------------------------------------------------------
// The activation's lane sums (the 4-row kernels' offsets)

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

// ---------------------------------------------------------------------------------------------
// One weight row (the rows a matmul does not take four at a time)

#ifdef EMX_AVX2
// The whole-group sums of four groups' 8-lane dots a, b, c, d: [I_a, I_b, I_c, I_d], exact.
static inline __m128i group_sums4(__m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(a, b), _mm256_hadd_epi32(c, d));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

// The scales s_g = d_w(g) * d_x(g) of groups g0 .. g0+m-1 (m <= 4; lanes past m: 0), the same f32
// products as the scalar kernels'.
static inline __m128 group_scales4(const uint16_t *wd, const float *xd, int g0, int m) {
    if (m == 4) return _mm_mul_ps(_mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)(wd + g0))), _mm_loadu_ps(xd + g0));
    float s[4] = {0, 0, 0, 0};
    for (int k = 0; k < m; k++) s[k] = _cvtsh_ss(wd[g0 + k]) * xd[g0 + k];
    return _mm_loadu_ps(s);
}

// One step of the order for groups g0 .. g0+m-1 (g0 a multiple of 4: lane k is phase k): acc =
// fma(I, s, acc) in the live lanes, the others untouched.
static inline __m128 phases_step(__m128 acc, __m128i sums, __m128 s, int m) {
    const __m128 f = _mm_fmadd_ps(_mm_cvtepi32_ps(sums), s, acc);
    if (m == 4) return f;
    const __m128i live = _mm_cmpgt_epi32(_mm_set1_epi32(m), _mm_setr_epi32(0, 1, 2, 3));
    return _mm_blendv_ps(acc, f, _mm_castsi128_ps(live));
}

// q4_1f's scales: f32 already, the same products as group_scales4's.
static inline __m128 group_scales4_f32(const float *wd, const float *xd, int g0, int m) {
    if (m == 4) return _mm_mul_ps(_mm_loadu_ps(wd + g0), _mm_loadu_ps(xd + g0));
    float s[4] = {0, 0, 0, 0};
    for (int k = 0; k < m; k++) s[k] = wd[g0 + k] * xd[g0 + k];
    return _mm_loadu_ps(s);
}

// One weight row, kind 0 q8, 1 q4, 2 q4_1, 3 q4_1f (always inlined: resolved at compile time);
// wd, wm: f16 per group, f32 for q4_1f.
static inline __attribute__((always_inline)) float row_dot(int kind, const uint8_t *w, const void *wd,
                                                           const void *wm, const int8_t *xq, const float *xd,
                                                           const float *xs, int ng) {
    __m128 acc = _mm_setzero_ps();
    for (int g0 = 0; g0 < ng; g0 += 4) {
        const int m = ng - g0 < 4 ? ng - g0 : 4;
        __m256i p[4];
        for (int k = 0; k < 4; k++) {
            p[k] = _mm256_setzero_si256();
            if (k >= m) continue;
            const __m256i xv = _mm256_loadu_si256((const __m256i *)(xq + (size_t)(g0 + k) * 32));
            if (kind == 0) {  // u8 x i8 only: |w| * (x * sign(w)), the same integers as w * x
                const __m256i wv = _mm256_loadu_si256((const __m256i *)(w + (size_t)(g0 + k) * 32));
                p[k] = dot_u8i8(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv));
            } else {
                p[k] = dot_u8i8(unpack_nibbles(w + (size_t)(g0 + k) * 16), xv);
                if (kind == 1) p[k] = _mm256_sub_epi32(p[k], dot_u8i8(_mm256_set1_epi8(8), xv));  // (nib - 8) x
            }
        }
        const __m128 sc = kind == 3 ? group_scales4_f32(wd, xd, g0, m) : group_scales4(wd, xd, g0, m);
        acc = phases_step(acc, group_sums4(p[0], p[1], p[2], p[3]), sc, m);
    }
    return lanes_sum(acc) + mins_term(kind, wm, 0, xs, ng);
}

float emx_dot_q8(const int8_t *w, const uint16_t *wd, const int8_t *xq, const float *xd, int n) {
    return row_dot(0, (const uint8_t *)w, wd, NULL, xq, xd, NULL, n / 32);
}

float emx_dot_q4(const uint8_t *w, const uint16_t *wd, const int8_t *xq, const float *xd, const float *xs, int n) {
    return row_dot(1, w, wd, NULL, xq, xd, xs, n / 32);
}

float emx_dot_q4_1(const uint8_t *w, const uint16_t *wd, const uint16_t *wm, const int8_t *xq, const float *xd,
                   const float *xs, int n) {
    return row_dot(2, w, wd, wm, xq, xd, xs, n / 32);
}

float emx_dot_q4_1f(const uint8_t *w, const float *wd, const float *wm, const int8_t *xq, const float *xd,
                    const float *xs, int n) {
    return row_dot(3, w, wd, wm, xq, xd, xs, n / 32);
}
#else  // no AVX2: the fast names are the scalar kernels
float emx_dot_q4_1f(const uint8_t *w, const float *wd, const float *wm, const int8_t *xq, const float *xd,
                    const float *xs, int n) {
    return emx_dot_q4_1f_scalar(w, wd, wm, xq, xd, xs, n);
}
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
// Four groups' lane dots of the four rows, p[k] = [r0 lanes 0..3 | r1 | r2 | r3] for group k, as
// whole-group sums [r0: I_0 .. I_3 | r1 | r2 | r3] (exact): a transposing add in each quarter.
static inline __m512i quad_group_sums4(const __m512i p[4]) {
    const __m512i s01 = _mm512_add_epi32(_mm512_unpacklo_epi32(p[0], p[1]), _mm512_unpackhi_epi32(p[0], p[1]));
    const __m512i s23 = _mm512_add_epi32(_mm512_unpacklo_epi32(p[2], p[3]), _mm512_unpackhi_epi32(p[2], p[3]));
    return _mm512_add_epi32(_mm512_unpacklo_epi64(s01, s23), _mm512_unpackhi_epi64(s01, s23));
}

// s = [d_w(r, g0 + 4h + j) * d_x(g0 + 4h + j)] in lane 4r + j (j < m), the scalar kernels' products,
// from the block's tables t01 = [r0 | r1], t23 = [r2 | r3] of 8 groups each (quad_scales).
static inline __m512 quad_scales4(__m512 t01, __m512 t23, const float *xd, int g, int m) {
    const __m512i idx = _mm512_add_epi32(_mm512_set_epi32(27, 26, 25, 24, 19, 18, 17, 16, 11, 10, 9, 8, 3, 2, 1, 0),
                                         _mm512_set1_epi32(g % 8));
    const __m128 dx = m == 4 ? _mm_loadu_ps(xd + g) : _mm_maskz_loadu_ps((__mmask8)((1u << m) - 1), xd + g);
    return _mm512_mul_ps(_mm512_permutex2var_ps(t01, idx, t23), _mm512_broadcast_f32x4(dx));
}

// Groups g0 .. g0 + m - 1 (m <= 4) of the four rows into acc; inlined with m = 4 for the whole
// blocks (no per-group test, a plain load of the activation scales) and once for the tail.
static inline __attribute__((always_inline)) __m512 quad_step(int kind, const uint8_t *w, size_t row_bytes, int g0,
                                                              int m, const int8_t *xq, const int32_t *xl,
                                                              const float *xd, __m512 t01, __m512 t23, __m512 acc) {
    __m512i p[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        p[k] = _mm512_setzero_si512();
        if (k >= m) continue;
        const int g = g0 + k;
        __m512i w1, w2;
        quad_group(kind == 0, w, row_bytes, g, &w1, &w2);
        const QuadAct xa = quad_act(kind, xq + (size_t)g * 32, xl + (size_t)g * 4, 0);
        p[k] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(xa.start, w1, xa.x1), w2, xa.x2);
    }
    const __m512 f = _mm512_cvtepi32_ps(quad_group_sums4(p));
    const __m512 sc = quad_scales4(t01, t23, xd, g0, m);
    if (m == 4) return _mm512_fmadd_ps(f, sc, acc);
    return _mm512_mask3_fmadd_ps(f, sc, acc, (__mmask16)(((1u << m) - 1) * 0x1111u));
}

// Nibbles (q4, kind 1; q4_1, kind 2; q4_1f, kind 3), four whole groups g0 .. g0+3 of the four rows:
// each row's 64 bytes are one register whose quarter k is group g0+k (no shuffle of the weights),
// against the activation's halves of the same four groups ([x_{g0+k} bytes 0..15] in quarter k, and
// bytes 16..31), regathered once for all four rows. Row r's register of lane dots is then [group g0
// lanes 0..3 | g0+1 | g0+2 | g0+3]: the transposing add makes lane 4k + r = I(r, g0+k), and the
// accumulator here is laid out the same way (lane 4k + r: row r's phase k). Per 4 groups x 4 rows:
// 4 weight loads and 12 bitwise ops where quad_step takes 16 loads and 12 inserts.
static inline __attribute__((always_inline)) __m512 nibble_step4(int kind, const uint8_t *w, size_t row_bytes, int g0,
                                                                 const int8_t *xq, const int32_t *xl, const float *xd,
                                                                 __m512 t01, __m512 t23, __m512 acc) {
    const __m512i xa = _mm512_loadu_si512(xq + (size_t)g0 * 32), xb = _mm512_loadu_si512(xq + (size_t)g0 * 32 + 64);
    __m512i xlo, xhi;
    split_halves(xa, xb, &xlo, &xhi);
    // q4's -8 x per lane (the lane sums are stored negated, four per group: 16 for 4 groups)
    const __m512i start =
        kind == 1 ? _mm512_slli_epi32(_mm512_loadu_si512(xl + (size_t)g0 * 4), 3) : _mm512_setzero_si512();
    const __m512i mask = _mm512_set1_epi8(0xf);
    __m512i p[4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        const __m512i v = _mm512_loadu_si512(w + (size_t)r * row_bytes + (size_t)g0 * 16);
        p[r] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(start, _mm512_and_si512(v, mask), xlo),
                                   _mm512_and_si512(_mm512_srli_epi16(v, 4), mask), xhi);
    }
    const __m512 f = _mm512_cvtepi32_ps(quad_group_sums4(p));
    // lane 4k + r: d_w(r, g0+k) (tables: [r0 | r1], [r2 | r3], 8 groups each) * d_x(g0+k)
    const __m512i idx = _mm512_add_epi32(_mm512_set_epi32(27, 19, 11, 3, 26, 18, 10, 2, 25, 17, 9, 1, 24, 16, 8, 0),
                                         _mm512_set1_epi32(g0 % 8));
    const __m512 dx = _mm512_permutexvar_ps(_mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0),
                                            _mm512_castps128_ps512(_mm_loadu_ps(xd + g0)));
    return _mm512_fmadd_ps(f, _mm512_mul_ps(_mm512_permutex2var_ps(t01, idx, t23), dx), acc);
}

// Decode: four weight rows against one activation row, the rows read as they are (each weight
// is used once: no repacking pays), a quad of rows ahead asked for (prefetch_quad_ahead). Four groups at a
// time: their lane dots (two vpdpbusd each), the whole-group sums, one FMA into the accumulator
// whose lane 4r + k is row r's phase k (the nibbles' whole blocks: lane 4k + r, transposed after).
static inline __attribute__((always_inline)) void dot4x1(int kind, const uint8_t *w, const void *wd, const void *wm,
                                                         const int8_t *xq, const int32_t *xl, const float *xd,
                                                         const float *xs, int n, float out[4]) {
    const int ng = n / 32;
    const size_t row_bytes = kind == 0 ? (size_t)n : (size_t)n / 2;
    __m512 acc = _mm512_setzero_ps(), t01 = _mm512_setzero_ps(), t23 = _mm512_setzero_ps();
    int g0 = 0;
    for (; g0 + 4 <= ng; g0 += 4) {
        if (g0 % 8 == 0) {  // a block of 8 groups: the four rows' scales, a quad ahead asked for
            if (kind == 3) quad_scales_f32(wd, ng, g0, &t01, &t23);
            else quad_scales(wd, ng, g0, &t01, &t23);
            prefetch_quad_ahead(kind, w, row_bytes, g0);
        }
        if (kind == 0) acc = quad_step(kind, w, row_bytes, g0, 4, xq, xl, xd, t01, t23, acc);
        else acc = nibble_step4(kind, w, row_bytes, g0, xq, xl, xd, t01, t23, acc);
    }
    if (kind != 0) acc = transpose4x4_ps(acc);  // lane 4k + r -> 4r + k
    if (g0 < ng) {  // the last 1-3 groups (the block's start written out again: as one shared
                    // always-inline helper, gcc 12 allocated the loop's registers otherwise and
                    // q4 decode ran 6% slower, Zen 4, -t 1, 5 rounds alternated)
        if (g0 % 8 == 0) {
            if (kind == 3) quad_scales_f32(wd, ng, g0, &t01, &t23);
            else quad_scales(wd, ng, g0, &t01, &t23);
            prefetch_quad_ahead(kind, w, row_bytes, g0);
        }
        acc = quad_step(kind, w, row_bytes, g0, ng - g0, xq, xl, xd, t01, t23, acc);
    }
    quad_sums(acc, out);
    if (kind >= 2)
        for (int r = 0; r < 4; r++) out[r] += mins_term(kind, wm, r, xs, ng);
}
#elif defined(EMX_AVX2)
// Group g of the four rows: each pair's lane dots [a lanes 0..3 | b lanes 0..3].
static inline __attribute__((always_inline)) void group_dots(int kind, const uint8_t *w, size_t row_bytes, int g,
                                                             const int8_t *xq, const int32_t *xl, __m256i *p01,
                                                             __m256i *p23) {
    __m256i wv[4], wa[4];
    quad_pairs(kind == 0, w, row_bytes, g, wv, wa);
    quad_dots2(kind, p01, p23, wv, wa, xq + (size_t)g * 32, xl + (size_t)g * 4, 0);
}

// Nibbles (q4, kind 1; q4_1, kind 2; q4_1f, kind 3), four whole groups g0 .. g0+3 of the four rows
// as their whole-group sums i01 = [row 0: I_g0 .. I_g0+3 | row 1: ...], i23 (rows 2, 3), exact:
// each row's 32 bytes of two groups are one register (halves = groups, no shuffle of the weights)
// against the activation's halves of the same two groups, regathered once for the four rows. Row
// r's lane dots [g lanes 0..3 | g+1 lanes 0..3] and [g+2 | g+3] go through the pairs' transposing
// add ([a(g), b(g), a(g+2), b(g+2) | a(g+1), b(g+1), a(g+3), b(g+3)]) and one permute.
static inline __attribute__((always_inline)) void nibble_sums4(int kind, const uint8_t *w, size_t row_bytes, int g0,
                                                               const int8_t *xq, const int32_t *xl, __m256i *i01,
                                                               __m256i *i23) {
    const __m256i mask = _mm256_set1_epi8(0xf);
    __m256i p[2][4];  // [groups g0, g0+1 | g0+2, g0+3][row]
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const int g = g0 + 2 * h;
        const __m256i xa = _mm256_loadu_si256((const __m256i *)(xq + (size_t)g * 32));
        const __m256i xb = _mm256_loadu_si256((const __m256i *)(xq + (size_t)g * 32 + 32));
        const __m256i xlo = _mm256_permute2x128_si256(xa, xb, 0x20), xhi = _mm256_permute2x128_si256(xa, xb, 0x31);
        // q4: (nib - 8) x = nib x + 8 * (-x), the two groups' lane sums of -x
        const __m256i off = _mm256_slli_epi32(_mm256_loadu_si256((const __m256i *)(xl + (size_t)g * 4)), 3);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(w + (size_t)r * row_bytes + (size_t)g * 16));
            const __m256i lo = _mm256_and_si256(v, mask), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
            p[h][r] = pair_dot(0, lo, hi, lo, hi, xlo, xhi);
            if (kind == 1) p[h][r] = _mm256_add_epi32(p[h][r], off);
        }
    }
    const __m256i idx = _mm256_setr_epi32(0, 4, 2, 6, 1, 5, 3, 7);
    const __m256i q01[4] = {p[0][0], p[0][1], p[1][0], p[1][1]}, q23[4] = {p[0][2], p[0][3], p[1][2], p[1][3]};
    *i01 = _mm256_permutevar8x32_epi32(pair_group_sums4(q01), idx);
    *i23 = _mm256_permutevar8x32_epi32(pair_group_sums4(q23), idx);
}

// Decode: four weight rows against one activation row, read as they are. The scales s_g =
// d_w * d_x of 8 groups of the four rows at a time (the same f32 products as the scalar
// kernels'); four groups at a time, each pair of rows' whole-group sums into the accumulator
// whose lanes are [row a phases 0..3 | row b phases 0..3].
static inline __attribute__((always_inline)) void dot4x1(int kind, const uint8_t *w, const void *wd, const void *wm,
                                                         const int8_t *xq, const int32_t *xl, const float *xd,
                                                         const float *xs, int n, float out[4]) {
    const int ng = n / 32;
    const size_t row_bytes = kind == 0 ? (size_t)n : (size_t)n / 2;
    __m256 acc01 = _mm256_setzero_ps(), acc23 = _mm256_setzero_ps();
    __attribute__((aligned(32))) float s[4][8];  // [row][group of the block] (an initialiser costs a rep stos per call)
    for (int g0 = 0; g0 < ng; g0 += 4) {
        const int m = ng - g0 < 4 ? ng - g0 : 4, h = g0 % 8;
        if (h == 0) {
            const int mb = ng - g0 < 8 ? ng - g0 : 8;
            if (mb == 8) {
                const __m256 dx = _mm256_loadu_ps(xd + g0);
                for (int r = 0; r < 4; r++) {
                    const size_t at = (size_t)r * ng + g0;
                    const __m256 d = kind == 3 ? _mm256_loadu_ps((const float *)wd + at)
                                               : _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)wd + at)));
                    _mm256_store_ps(s[r], _mm256_mul_ps(d, dx));
                }
            } else {  // the last block's groups; zero past them (lanes the blend below drops)
                for (int r = 0; r < 4; r++)
                    for (int k = 0; k < 8; k++)
                        s[r][k] = k < mb ? group_scale(kind, wd, (size_t)r * ng + g0 + k) * xd[g0 + k] : 0.0f;
            }
            prefetch_quad_ahead(kind, w, row_bytes, g0);
        }
        // (the whole blocks of four unrolled, so that p01 / p23 stay in registers: written as one
        // loop with a `k < m` test, gcc 12 kept them on the stack and zeroed them with rep stos,
        // and q4 decode ran at 0.6x)
        __m256i p01[4], p23[4], i01, i23;
        if (m == 4 && kind != 0) {
            nibble_sums4(kind, w, row_bytes, g0, xq, xl, &i01, &i23);
        } else if (m == 4) {
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) group_dots(kind, w, row_bytes, g0 + k, xq, xl, &p01[k], &p23[k]);
            i01 = pair_group_sums4(p01), i23 = pair_group_sums4(p23);
        } else {
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                p01[k] = p23[k] = _mm256_setzero_si256();
                if (k < m) group_dots(kind, w, row_bytes, g0 + k, xq, xl, &p01[k], &p23[k]);
            }
            i01 = pair_group_sums4(p01), i23 = pair_group_sums4(p23);
        }
        const __m256 f01 = _mm256_cvtepi32_ps(i01), f23 = _mm256_cvtepi32_ps(i23);
        const __m256 s01 = _mm256_set_m128(_mm_load_ps(s[1] + h), _mm_load_ps(s[0] + h));
        const __m256 s23 = _mm256_set_m128(_mm_load_ps(s[3] + h), _mm_load_ps(s[2] + h));
        const __m256 n01 = _mm256_fmadd_ps(f01, s01, acc01), n23 = _mm256_fmadd_ps(f23, s23, acc23);
        if (m == 4) {
            acc01 = n01, acc23 = n23;
        } else {  // the live groups' lanes only
            const __m128i l4 = _mm_cmpgt_epi32(_mm_set1_epi32(m), _mm_setr_epi32(0, 1, 2, 3));
            const __m256 live = _mm256_castsi256_ps(_mm256_set_m128i(l4, l4));
            acc01 = _mm256_blendv_ps(acc01, n01, live), acc23 = _mm256_blendv_ps(acc23, n23, live);
        }
    }
    quad_sums2(acc01, acc23, out);
    if (kind >= 2)
        for (int r = 0; r < 4; r++) out[r] += mins_term(kind, wm, r, xs, ng);
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

void emx_dot4x1_q4_1f(const uint8_t *w, const float *wd, const float *wm, const int8_t *xq, const int32_t *xl,
                      const float *xd, const float *xs, int n, float out[4]) {
#ifdef EMX_AVX2
    dot4x1(3, w, wd, wm, xq, xl, xd, xs, n, out);
#else
    (void)xl;
    const int ng = n / 32;
    for (int r = 0; r < 4; r++)
        out[r] = emx_dot_q4_1f(w + (size_t)r * n / 2, wd + (size_t)r * ng, wm + (size_t)r * ng, xq, xd, xs, n);
#endif
}

// A few activation rows (the server's slots decoding together) against four rows as they are:
// the decode kernel per row (the weights come from cache after the first row).
void emx_quad_direct(uint32_t dtype, const uint8_t *w, const void *wd, const void *wm, const EmxActs *a,
                     const int32_t *xl, int n, int i0, int ni, float *out, size_t out_stride) {
    const int ng = n / 32;
    for (int i = i0; i < i0 + ni; i++) {
        float o[4];
        const int8_t *xq = a->xq + (size_t)i * n;
        const int32_t *l = xl + (size_t)i * ng * 4;
        const float *xd = a->xd + (size_t)i * ng, *xs = a->xs + (size_t)i * ng;
        if (dtype == EMX_Q8) emx_dot4x1_q8((const int8_t *)w, wd, xq, l, xd, n, o);
        else if (dtype == EMX_Q4) emx_dot4x1_q4(w, wd, xq, l, xd, xs, n, o);
        else if (dtype == EMX_Q4_1) emx_dot4x1_q4_1(w, wd, wm, xq, l, xd, xs, n, o);
        else emx_dot4x1_q4_1f(w, wd, wm, xq, l, xd, xs, n, o);
        for (int r = 0; r < 4; r++) out[(size_t)i * out_stride + r] = o[r];
    }
}

int emx_quad_kernels_available(void) {
#ifdef EMX_AVX2
    return 1;
#else
    return 0;
#endif
}

