// cpu_qdot.c — dot products of quantised weights (q8, q4, q4_1) with int8 activations on the
// CPU: one weight row (emx_dot_*) and four weight rows against one activation row (emx_dot4x1_*,
// decode). The tile of four weight rows against many activation rows (prefill) is cpu_qtile.c;
// the four-row steps both use, cpu_quad.h. The order below is what all of them compute.
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
#include "runtime/cpu/cpu_quad.h"
#include "base/dtype.h"

#include <string.h>

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

int emx_quad_kernels_available(void) {
#ifdef EMX_AVX2
    return 1;
#else
    return 0;
#endif
}

