// cpu_qtile.c — the prefill tile of the quantised matmul (q8, q4, q4_1, q4_1f) with AVX2 (the
// AVX-512 VNNI build's is cpu_qtile512.c, the same design in 512 bits), in the order every quantised
// kernel follows (cpu_qdot.c, top), so a (weight row, activation row) pair gives the same float
// here as in decode.
//
// A 256-bit register holds 2 weight rows x 4 activation rows, lane 4r + j = (row r of the pair,
// activation row j). Per group and k < 8,
//     W_k = [row a's bytes 4k..4k+3 four times | row b's four times]   (the weight pack)
//     X_k = [act 0's bytes 4k..4k+3 | act 1's | act 2's | act 3's] in both halves
// give each lane the dot of 4 bytes (q8 by the sign trick on |W_k| and X_k with W_k's signs;
// nibbles as they are), added over k into the whole group's integer sum; then one convert,
// multiply (d_w x d_x) and FMA serve the 8 pairs. A pair of rows runs over all groups at a time
// (8 accumulators: 2 activation quads x 4 phases, with 16 registers).
#include "runtime/cpu/cpu_matmul.h"
#include "runtime/cpu/cpu_quad.h"
#include "base/dtype.h"

#include <string.h>

#if !EMX_AVX512_VNNI

#ifdef EMX_AVX2
// The weight pack, per group: for each pair of rows p (0, 1 and 2, 3), W_k [8][32 B] (q8: the
// int8 as stored; q4/q4_1/q4_1f: the nibbles as bytes 0..15); after both pairs, their scales as
// f32 [d_a x 4 | d_b x 4] [2][32 B]. (q8's |W_k| is made where it is used, one vpabsb per k for both activation
// quads: with |W_k| stored in the pack too, Qwen3-0.6B-shaped q8 pp512 ran at 84.2-85.7 tok/s
// against 90.0-90.7, -t 1, AVX2-only build on a Zen 4, alternated: the loads, not the ALU.)
#define PAIR_BYTES 256
#define PACK_GROUP (2 * PAIR_BYTES + 64)
#endif

size_t emx_quad_pack_bytes(int n) {
#ifdef EMX_AVX2
    return (size_t)(n / 32) * PACK_GROUP;
#else
    (void)n;
    return 0;
#endif
}

void emx_quad_pack(uint8_t *pack, uint32_t dtype, const uint8_t *w, const void *wd, int n) {
#ifdef EMX_AVX2
    const int ng = n / 32, q8 = dtype == EMX_Q8, kind = quad_kind(dtype);
    const size_t row_bytes = q8 ? (size_t)n : (size_t)n / 2;
    for (int g = 0; g < ng; g++) {
        uint8_t *p = pack + (size_t)g * PACK_GROUP;
        for (int pr = 0; pr < 2; pr++) {
            __m256i rows[2];  // the pair's 32 bytes each, in the activation's order
            for (int i = 0; i < 2; i++) {
                const uint8_t *r = w + (size_t)(2 * pr + i) * row_bytes;
                rows[i] = q8 ? _mm256_loadu_si256((const __m256i *)(r + (size_t)g * 32)) : unpack_nibbles(r + (size_t)g * 16);
            }
            for (int k = 0; k < 8; k++) {
                const __m256i idx = _mm256_set1_epi32(k);
                const __m256i wk = _mm256_blend_epi32(_mm256_permutevar8x32_epi32(rows[0], idx),
                                                      _mm256_permutevar8x32_epi32(rows[1], idx), 0xF0);
                _mm256_store_si256((__m256i *)(p + pr * PAIR_BYTES + 32 * k), wk);
            }
            float d[8];
            for (int j = 0; j < 4; j++)
                d[j] = group_scale(kind, wd, (size_t)(2 * pr) * ng + g), d[4 + j] = group_scale(kind, wd, (size_t)(2 * pr + 1) * ng + g);
            memcpy(p + 2 * PAIR_BYTES + 32 * pr, d, sizeof d);
        }
    }
#else
    (void)pack, (void)dtype, (void)w, (void)wd, (void)n;
#endif
}

#ifdef EMX_AVX2
// Group g of pair pr against na activation quads (acts[q] + g * act_stride) into acc[q] (the
// group's phase).
static inline __attribute__((always_inline)) void pair_group(int kind, int na, const uint8_t *pack, int pr,
                                                             const uint8_t *const acts[2], size_t act_stride, int g,
                                                             __m256 acc[2]) {
    const uint8_t *p = pack + (size_t)g * PACK_GROUP + pr * PAIR_BYTES;
    __m256i c[2];
#pragma GCC unroll 2
    for (int q = 0; q < na; q++)  // q4: -8 x the whole-group sum; q8 (sign trick) and q4_1 none
        c[q] = kind == 1 ? _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(acts[q] + (size_t)g * act_stride + QA_S8)))
                         : _mm256_setzero_si256();
#define X_K(q, k) _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(acts[q] + (size_t)g * act_stride + 16 * (k))))
#define W_K(k) _mm256_load_si256((const __m256i *)(p + 32 * (k)))
    if (kind == 0 || EMX_VNNI256) {
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            const __m256i wk = W_K(k), ak = _mm256_abs_epi8(wk);  // q8: |W_k| (nibbles: unused)
#pragma GCC unroll 2
            for (int q = 0; q < na; q++) {
                const __m256i xk = X_K(q, k);
                if (kind == 0)
                    c[q] = _mm256_add_epi32(c[q], dot_u8i8(ak, _mm256_sign_epi8(xk, wk)));
                else
                    c[q] = _mm256_add_epi32(c[q], dot_u8i8(wk, xk));
            }
        }
    } else {  // nibbles without VNNI: two maddubs add in 16 bits (each at most 2 x 15 x 127) before one madd
#pragma GCC unroll 4
        for (int k = 0; k < 8; k += 2) {
            const __m256i w0 = W_K(k), w1 = W_K(k + 1);
#pragma GCC unroll 2
            for (int q = 0; q < na; q++) {
                const __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(w0, X_K(q, k)), _mm256_maddubs_epi16(w1, X_K(q, k + 1)));
                c[q] = _mm256_add_epi32(c[q], _mm256_madd_epi16(s16, _mm256_set1_epi16(1)));
            }
        }
    }
#undef X_K
#undef W_K
    const __m256 dw = _mm256_loadu_ps((const float *)(pack + (size_t)g * PACK_GROUP + 2 * PAIR_BYTES + 32 * pr));
#pragma GCC unroll 2
    for (int q = 0; q < na; q++) {
        const __m128 d4 = _mm_loadu_ps((const float *)(acts[q] + (size_t)g * act_stride + QA_D));
        acc[q] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(c[q]), _mm256_mul_ps(dw, _mm256_set_m128(d4, d4)), acc[q]);
    }
}

// acc[phase][q] -> out[(4q + j) * out_stride + 2 pr + i] (+ q4_1's and q4_1f's mins term).
static inline void pair_out(int kind, int na, __m256 acc[4][2], int pr, const void *wm, const int nt[2],
                            const float *xs, int n, float *out, size_t out_stride) {
    const int ng = n / 32;
    for (int q = 0; q < na; q++) {
        float v[8];
        _mm256_storeu_ps(v, _mm256_add_ps(_mm256_add_ps(acc[0][q], acc[2][q]), _mm256_add_ps(acc[1][q], acc[3][q])));
        for (int j = 0; j < nt[q]; j++) {
            const int row = 4 * q + j;
            for (int i = 0; i < 2; i++) {
                const int r = 2 * pr + i;
                out[(size_t)row * out_stride + r] = v[4 * i + j] + mins_term(kind, wm, r, xs + (size_t)row * ng, ng);
            }
        }
    }
}

// The quad (both pairs, one after the other) against na activation quads over all groups.
static inline __attribute__((always_inline)) void quad_run(int kind, int na, const uint8_t *pack, const void *wm,
                                                           const uint8_t *const acts[2], size_t act_stride,
                                                           const int nt[2], const float *xs, int n, float *out,
                                                           size_t out_stride) {
    const int ng = n / 32;
    for (int pr = 0; pr < 2; pr++) {
        __m256 acc[4][2];
        for (int ph = 0; ph < 4; ph++) acc[ph][0] = acc[ph][1] = _mm256_setzero_ps();
        int g = 0;
        for (; g + 4 <= ng; g += 4)
#pragma GCC unroll 4
            for (int h = 0; h < 4; h++) pair_group(kind, na, pack, pr, acts, act_stride, g + h, acc[h]);
        for (; g < ng; g++) pair_group(kind, na, pack, pr, acts, act_stride, g, acc[g % 4]);
        pair_out(kind, na, acc, pr, wm, nt, xs, n, out, out_stride);
    }
}

// Activation rows i0 .. i0+ni-1: whole blocks (i % 8 == 0, blocks given) two quads at a time
// from the blocks; the rest by quads, each group's activation quad built as it is needed.
static inline __attribute__((always_inline)) void tile_kind(int kind, const uint8_t *pack, const void *wm,
                                                            const EmxActs *a, const int32_t *xl, const uint8_t *blocks,
                                                            int n, int i0, int ni, float *out, size_t out_stride) {
    const int ng = n / 32, end = i0 + ni;
    int i = i0;
    if (blocks && i % 8 == 0)
        for (; i + 8 <= end; i += 8) {
            const uint8_t *blk = blocks + (size_t)(i / 8) * ng * 2 * QUAD_ACT;
            const uint8_t *acts[2] = {blk, blk + QUAD_ACT};
            const int nt[2] = {4, 4};
            quad_run(kind, 2, pack, wm, acts, 2 * QUAD_ACT, nt, a->xs + (size_t)i * ng, n, out + (size_t)i * out_stride,
                     out_stride);
        }
    for (; i < end; i += 4) {
        const int m = end - i < 4 ? end - i : 4;
        const int8_t *rq[4];
        const int32_t *xls[4];
        const float *xds[4];
        act_rows(a, xl, n, i, m, rq, xls, xds);
        uint8_t quad[QUAD_ACT] __attribute__((aligned(32)));
        const uint8_t *acts[2] = {quad, quad};
        const int nt[2] = {m, 0};
        for (int pr = 0; pr < 2; pr++) {
            __m256 acc[4][2];
            for (int ph = 0; ph < 4; ph++) acc[ph][0] = acc[ph][1] = _mm256_setzero_ps();
            for (int g = 0; g < ng; g++) {
                act_quad(quad, rq, xls, xds, m, g);
                pair_group(kind, 1, pack + (size_t)g * PACK_GROUP, pr, acts, 0, 0, acc[g % 4]);
            }
            pair_out(kind, 1, acc, pr, wm, nt, a->xs + (size_t)i * ng, n, out + (size_t)i * out_stride, out_stride);
        }
    }
}
#endif

void emx_quad_tile(const uint8_t *pack, uint32_t dtype, const void *wm, const EmxActs *a, const int32_t *xl,
                   const uint8_t *blocks, int n, int i0, int ni, float *out, size_t out_stride) {
#ifdef EMX_AVX2
    if (dtype == EMX_Q8) tile_kind(0, pack, wm, a, xl, blocks, n, i0, ni, out, out_stride);
    else if (dtype == EMX_Q4) tile_kind(1, pack, wm, a, xl, blocks, n, i0, ni, out, out_stride);
    else if (dtype == EMX_Q4_1) tile_kind(2, pack, wm, a, xl, blocks, n, i0, ni, out, out_stride);
    else tile_kind(3, pack, wm, a, xl, blocks, n, i0, ni, out, out_stride);
#else
    (void)pack, (void)dtype, (void)wm, (void)a, (void)xl, (void)blocks, (void)n, (void)i0, (void)ni, (void)out,
        (void)out_stride;
#endif
}

#ifndef EMX_AVX2  // no tile, no activation blocks (cpu_qtile512.c has them for both SIMD builds)
size_t emx_act_blocks_bytes(int n_rows, int n) { return (void)n_rows, (void)n, 0; }
void emx_act_block(uint8_t *blocks, const EmxActs *a, const int32_t *xl, int n, int b) {
    (void)blocks, (void)a, (void)xl, (void)n, (void)b;
}
#endif

// Two packed quads: each alone.
void emx_quad_tile2(const uint8_t *pack0, const uint8_t *pack1, uint32_t dtype, const void *wm0, const void *wm1,
                    const EmxActs *a, const int32_t *xl, const uint8_t *blocks, int n, int i0, int ni, float *out0,
                    float *out1, size_t out_stride) {
    emx_quad_tile(pack0, dtype, wm0, a, xl, blocks, n, i0, ni, out0, out_stride);
    emx_quad_tile(pack1, dtype, wm1, a, xl, blocks, n, i0, ni, out1, out_stride);
}


#endif
