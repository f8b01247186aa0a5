// cpu_qtile512.c — the prefill tile of the quantised matmul with AVX-512 VNNI, in the order every
// quantised kernel follows (cpu_qdot.c, top: whole-group integer sums, four accumulators by group
// phase), so a (weight row, activation row) pair gives the same float here as in decode.
//
// A register holds 4 weight rows x 4 activation rows, lane 4r + j = (row r, activation row j):
// per group, eight vpdpbusd of
//     W_k = [row 0's bytes 4k..4k+3 four times | row 1's | row 2's | row 3's]   (the weight pack)
//     X_k = [act 0's bytes 4k..4k+3 | act 1's | act 2's | act 3's], broadcast to the quarters
// give every lane its whole group's integer sum, and ONE convert, multiply (d_w x d_x) and FMA
// serve the 16 pairs (today's lane split needed them for 4). The tile is 2 x 2 such registers
// (two weight quads x two activation quads): per k, two weight and two activation loads feed
// four vpdpbusd, and two groups are in flight so that eight integer chains hide vpdpbusd's latency.
#include "runtime/cpu/cpu_matmul.h"
#include "runtime/cpu/cpu_quad.h"
#include "base/dtype.h"

#include <stdlib.h>
#include <string.h>

#ifdef EMX_AVX2
// The activation blocks (both SIMD builds): rows in blocks of 8 = two quads (cpu_quad.h, act_quad).
size_t emx_act_blocks_bytes(int n_rows, int n) {
    return (size_t)(n_rows / EMX_ACT_BLOCK_ROWS) * (size_t)(n / 32) * 2 * QUAD_ACT;
}

void emx_act_block(uint8_t *blocks, const EmxActs *a, const int32_t *xl, int n, int b) {
    const int ng = n / 32;
    for (int g = 0; g < ng; g++)
        for (int q = 0; q < 2; q++) {
            const int8_t *rows[4];
            const int32_t *xls[4];
            const float *xds[4];
            for (int j = 0; j < 4; j++) {
                const size_t row = (size_t)b * 8 + 4 * q + j;
                rows[j] = a->xq + row * n, xls[j] = xl + row * ng * 4, xds[j] = a->xd + row * ng;
            }
            act_quad(blocks + (((size_t)b * ng + g) * 2 + q) * QUAD_ACT, rows, xls, xds, 4, g);
        }
}

#endif

#if EMX_AVX512_VNNI

// The weight pack, per group: W_k, k < 8 [8][64 B] (unsigned: q8 w + 128, q4/q4_1/q4_1f the
// nibble), then the scales as f32, spread [d_r0 x 4 | d_r1 x 4 | d_r2 x 4 | d_r3 x 4] [64 B].
#define PACK_GROUP 576
size_t emx_quad_pack_bytes(int n) { return (size_t)(n / 32) * PACK_GROUP; }

void emx_quad_pack(uint8_t *pack, uint32_t dtype, const uint8_t *w, const void *wd, int n) {
    const int ng = n / 32, q8 = dtype == EMX_Q8, kind = quad_kind(dtype);
    const size_t row_bytes = q8 ? (size_t)n : (size_t)n / 2;
    for (int g = 0; g < ng; g++) {
        uint8_t *p = pack + (size_t)g * PACK_GROUP;
        __m256i rows[4];  // each row's 32 unsigned bytes in the activation's order
        for (int r = 0; r < 4; r++) {
            if (q8) {
                rows[r] = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(w + r * row_bytes + (size_t)g * 32)),
                                           _mm256_set1_epi8((char)0x80));
            } else {
                rows[r] = unpack_nibbles(w + r * row_bytes + (size_t)g * 16);
            }
        }
        const __m512i u01 = _mm512_inserti64x4(_mm512_castsi256_si512(rows[0]), rows[1], 1);  // dwords: r0 k 0..7, r1 k 0..7
        const __m512i u23 = _mm512_inserti64x4(_mm512_castsi256_si512(rows[2]), rows[3], 1);
        for (int k = 0; k < 8; k++) {
            const __m512i idx = _mm512_add_epi32(_mm512_set_epi32(24, 24, 24, 24, 16, 16, 16, 16, 8, 8, 8, 8, 0, 0, 0, 0),
                                                 _mm512_set1_epi32(k));
            _mm512_store_si512((void *)(p + 64 * k), _mm512_permutex2var_epi32(u01, idx, u23));
        }
        float d[16];
        for (int r = 0; r < 4; r++)
            for (int j = 0; j < 4; j++) d[4 * r + j] = group_scale(kind, wd, (size_t)r * ng + g);
        memcpy(p + 512, d, sizeof d);
    }
}

// An activation quad's integer start at group A (its quad's bytes): q8's -128 x sum(x) (the pack
// holds w + 128), q4's -8 x sum(x) (nibbles as they are), q4_1's and q4_1f's none (their offset
// is the mins term).
static inline __attribute__((always_inline)) __m512i offset_start(int kind, const uint8_t *A) {
    if (kind >= 2) return _mm512_setzero_si512();
    return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(A + (kind == 0 ? QA_S128 : QA_S8))));
}

// Groups g and g + 1 (both < ng) of nw weight quads (packs) x na activation quads (acts[q] at
// group 0, quad_stride bytes from one group to the next) into the accumulators of their phases:
// acc[h][wq][aq] for group g + h.
static inline __attribute__((always_inline)) void tile_two_groups(int kind, int nw, int na, const uint8_t *const pack[2],
                                                                  const uint8_t *const acts[2], size_t act_stride,
                                                                  int g, __m512 acc[2][2][2]) {
    __m512i c[2][2][2];
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++)
#pragma GCC unroll 2
        for (int q = 0; q < na; q++) {
            c[h][0][q] = c[h][1][q] = offset_start(kind, acts[q] + (size_t)(g + h) * act_stride);
        }
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++)
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m512i wv[2], xv[2];
#pragma GCC unroll 2
            for (int wq = 0; wq < nw; wq++) wv[wq] = _mm512_load_si512((const void *)(pack[wq] + (size_t)(g + h) * PACK_GROUP + 64 * k));
#pragma GCC unroll 2
            for (int q = 0; q < na; q++)
                xv[q] = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(acts[q] + (size_t)(g + h) * act_stride + 16 * k)));
#pragma GCC unroll 2
            for (int wq = 0; wq < nw; wq++)
#pragma GCC unroll 2
                for (int q = 0; q < na; q++) c[h][wq][q] = _mm512_dpbusd_epi32(c[h][wq][q], wv[wq], xv[q]);
        }
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++)
#pragma GCC unroll 2
        for (int wq = 0; wq < nw; wq++) {
            const __m512 dw = _mm512_load_ps((const void *)(pack[wq] + (size_t)(g + h) * PACK_GROUP + 512));
#pragma GCC unroll 2
            for (int q = 0; q < na; q++) {
                const __m512 dx = _mm512_broadcast_f32x4(_mm_loadu_ps((const float *)(acts[q] + (size_t)(g + h) * act_stride + QA_D)));
                acc[h][wq][q] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(c[h][wq][q]), _mm512_mul_ps(dw, dx), acc[h][wq][q]);
            }
        }
}

// One group (the last, when ng is odd) alone: the same chains, for group g's own phase.
static inline __attribute__((always_inline)) void tile_one_group(int kind, int nw, int na, const uint8_t *const pack[2],
                                                                 const uint8_t *const acts[2], size_t act_stride, int g,
                                                                 __m512 acc[2][2]) {
    for (int wq = 0; wq < nw; wq++) {
        const __m512 dw = _mm512_load_ps((const void *)(pack[wq] + (size_t)g * PACK_GROUP + 512));
        for (int q = 0; q < na; q++) {
            const uint8_t *A = acts[q] + (size_t)g * act_stride;
            __m512i c = offset_start(kind, A);
            for (int k = 0; k < 8; k++)
                c = _mm512_dpbusd_epi32(c, _mm512_load_si512((const void *)(pack[wq] + (size_t)g * PACK_GROUP + 64 * k)),
                                        _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(A + 16 * k))));
            const __m512 dx = _mm512_broadcast_f32x4(_mm_loadu_ps((const float *)(A + QA_D)));
            acc[wq][q] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(c), _mm512_mul_ps(dw, dx), acc[wq][q]);
        }
    }
}

// The outputs of the accumulators acc[phase][weight quad][activation quad]: lane 4r + j of a
// register is (row r of the quad, activation row 4q + j), summed (phase 0 + 2) + (1 + 3),
// written at out[(4q + j) * out_stride + 4 wq + r] (+ q4_1's and q4_1f's mins term).
static inline __attribute__((always_inline)) void tile_out(int kind, int nw, int na, __m512 acc[4][2][2],
                                                           const void *const wm[2], const int nt[2], const float *xs,
                                                           int n, float *out, size_t out_stride) {
    const int ng = n / 32;
    for (int wq = 0; wq < nw; wq++)
        for (int q = 0; q < na; q++) {
            float v[16];
            const __m512 sum = _mm512_add_ps(_mm512_add_ps(acc[0][wq][q], acc[2][wq][q]),
                                             _mm512_add_ps(acc[1][wq][q], acc[3][wq][q]));
            if (kind < 2) {  // lane 4r + j -> 4j + r: activation row j's four outputs side by side, one store
                _mm512_storeu_ps(v, transpose4x4_ps(sum));
                for (int j = 0; j < nt[q]; j++)
                    _mm_storeu_ps(out + (size_t)(4 * q + j) * out_stride + 4 * wq, _mm_loadu_ps(v + 4 * j));
                continue;
            }
            _mm512_storeu_ps(v, sum);
            for (int j = 0; j < nt[q]; j++) {
                const int row = 4 * q + j;
                for (int r = 0; r < 4; r++)
                    out[(size_t)row * out_stride + 4 * wq + r] =
                        v[4 * r + j] + mins_term(kind, wm[wq], r, xs + (size_t)row * ng, ng);
            }
        }
}

// nw weight quads x na activation quads (quad q: activation rows 4q .. 4q + nt[q] - 1) over all
// groups; out[row * out_stride + 4 wq + r] (+ the mins term).
static inline __attribute__((always_inline)) void tile_run(int kind, int nw, int na, const uint8_t *const pack[2],
                                                           const void *const wm[2], const uint8_t *const acts[2],
                                                           size_t act_stride, const int nt[2], const float *xs, int n,
                                                           float *out, size_t out_stride) {
    const int ng = n / 32;
    __m512 acc[4][2][2];  // [phase][weight quad][activation quad]
    for (int ph = 0; ph < 4; ph++)
        for (int wq = 0; wq < 2; wq++) acc[ph][wq][0] = acc[ph][wq][1] = _mm512_setzero_ps();
    int g = 0;
    for (; g + 4 <= ng; g += 4) {
        tile_two_groups(kind, nw, na, pack, acts, act_stride, g, acc);
        tile_two_groups(kind, nw, na, pack, acts, act_stride, g + 2, acc + 2);
    }
    for (; g < ng; g++) tile_one_group(kind, nw, na, pack, acts, act_stride, g, acc[g % 4]);
    tile_out(kind, nw, na, acc, wm, nt, xs, n, out, out_stride);
}

// Activation rows i0 .. i0+ni-1 against nw packed quads (out0, out1: their outputs, out1 = out0 + 4):
// whole blocks (i % 8 == 0, blocks given) two quads at a time from the blocks, the rest in quads
// built here.
static inline __attribute__((always_inline)) void tile_kind(int kind, int nw, const uint8_t *const pack[2],
                                                            const void *const wm[2], const EmxActs *a,
                                                            const int32_t *xl, const uint8_t *blocks, int n, int i0,
                                                            int ni, float *out, size_t out_stride) {
    const int ng = n / 32, end = i0 + ni;
    int i = i0;
    if (blocks && i % 8 == 0)
        for (; i + 8 <= end; i += 8) {
            const uint8_t *blk = blocks + (size_t)(i / 8) * ng * 2 * QUAD_ACT;
            const uint8_t *acts[2] = {blk, blk + QUAD_ACT};
            const int nt[2] = {4, 4};
            tile_run(kind, nw, 2, pack, wm, acts, 2 * QUAD_ACT, nt, a->xs + (size_t)i * ng, n,
                     out + (size_t)i * out_stride, out_stride);
        }
    // the rest (fewer than 8 rows, or no blocks): quads of rows, each group's activation quad built
    // as it is needed (no memory to allocate); one group at a time, the same chains and phases
    for (; i < end; i += 4) {
        const int m = end - i < 4 ? end - i : 4;
        const int8_t *rq[4];
        const int32_t *xls[4];
        const float *xds[4];
        act_rows(a, xl, n, i, m, rq, xls, xds);
        __m512 acc[4][2][2];
        for (int ph = 0; ph < 4; ph++)
            for (int wq = 0; wq < 2; wq++) acc[ph][wq][0] = acc[ph][wq][1] = _mm512_setzero_ps();
        uint8_t quad[QUAD_ACT] __attribute__((aligned(64)));
        const uint8_t *acts[2] = {quad, quad};
        for (int g = 0; g < ng; g++) {
            act_quad(quad, rq, xls, xds, m, g);
            tile_one_group(kind, nw, 1, pack, acts, 0, g, acc[g % 4]);
        }
        const int nt[2] = {m, 0};
        tile_out(kind, nw, 1, acc, wm, nt, a->xs + (size_t)i * ng, n, out + (size_t)i * out_stride, out_stride);
    }
}

static void tile_dispatch(uint32_t dtype, int nw, const uint8_t *const pack[2], const void *const wm[2],
                          const EmxActs *a, const int32_t *xl, const uint8_t *blocks, int n, int i0, int ni, float *out,
                          size_t out_stride) {
    if (nw == 2) {
        if (dtype == EMX_Q8) tile_kind(0, 2, pack, wm, a, xl, blocks, n, i0, ni, out, out_stride);
        else if (dtype == EMX_Q4) tile_kind(1, 2, pack, wm, a, xl, blocks, n, i0, ni, out, out_stride);
        else if (dtype == EMX_Q4_1) tile_kind(2, 2, pack, wm, a, xl, blocks, n, i0, ni, out, out_stride);
        else tile_kind(3, 2, pack, wm, a, xl, blocks, n, i0, ni, out, out_stride);
    } else {
        if (dtype == EMX_Q8) tile_kind(0, 1, pack, wm, a, xl, blocks, n, i0, ni, out, out_stride);
        else if (dtype == EMX_Q4) tile_kind(1, 1, pack, wm, a, xl, blocks, n, i0, ni, out, out_stride);
        else if (dtype == EMX_Q4_1) tile_kind(2, 1, pack, wm, a, xl, blocks, n, i0, ni, out, out_stride);
        else tile_kind(3, 1, pack, wm, a, xl, blocks, n, i0, ni, out, out_stride);
    }
}

void emx_quad_tile(const uint8_t *pack, uint32_t dtype, const void *wm, const EmxActs *a, const int32_t *xl,
                   const uint8_t *blocks, int n, int i0, int ni, float *out, size_t out_stride) {
    const uint8_t *packs[2] = {pack, pack};
    const void *wms[2] = {wm, wm};
    tile_dispatch(dtype, 1, packs, wms, a, xl, blocks, n, i0, ni, out, out_stride);
}

void emx_quad_tile2(const uint8_t *pack0, const uint8_t *pack1, uint32_t dtype, const void *wm0, const void *wm1,
                    const EmxActs *a, const int32_t *xl, const uint8_t *blocks, int n, int i0, int ni, float *out0,
                    float *out1, size_t out_stride) {
    (void)out1;  // = out0 + 4: the tile writes both quads' columns from out0
    const uint8_t *packs[2] = {pack0, pack1};
    const void *wms[2] = {wm0, wm1};
    tile_dispatch(dtype, 2, packs, wms, a, xl, blocks, n, i0, ni, out0, out_stride);
}


#endif
