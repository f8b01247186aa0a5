// cpu_qtile.c — the prefill tile of the quantised matmul (q8, q4, q4_1) on the CPU: four weight
// rows, repacked once per matmul (emx_quad_pack), against many activation rows laid out in blocks
// (emx_act_block), or against a few rows read where they are (emx_quad_direct: the server's
// slots decoding together). The accumulation order is the one every quantised kernel follows
// (cpu_qdot.c, top): a (weight row, activation row) pair gives the same float here as in decode.
#include "runtime/cpu/cpu_matmul.h"
#include "runtime/cpu/cpu_quad.h"
#include "base/dtype.h"

#include <string.h>

// ---------------------------------------------------------------------------------------------
// The prefill tile: four weight rows, repacked once, against many activation rows

// Bytes of the packed copy per group of 32: AVX-512, w1 and w2 (64 B each) and the spread
// scales (64 B); AVX2, the four rows' bytes as two pairs' lo/hi registers (128 B), the spread
// scales (64 B) and, for q8, the same registers' |w| (128 B) that the sign trick multiplies
// (computed here once, not per activation row).
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

// Two packed quads (weight rows r..r+3 from pack0, r+4..r+7 from pack1) against nt <= 8
// activation rows at once: each activation group is loaded into registers once for both (quad_act),
// which halves the tile's reads of the activation blocks per multiply-add. Those blocks stream from
// L2 for every quad (a matrix's are hundreds of KB), and their loads, not the arithmetic, held
// the single-quad tile up (perf: the samples on its broadcast loads). Each quad's chain is
// quad_tile's, operation for operation: the same bits. out0 / out1: the quads' out[t][r].
static inline __attribute__((always_inline)) void quad_tile_pair(int kind, int nt, int blocked, const uint8_t *blk,
                                                                 const uint8_t *pack0, const uint8_t *pack1,
                                                                 const uint16_t *wm0, const uint16_t *wm1,
                                                                 const int8_t *xq, const int32_t *xl, const float *xd,
                                                                 const float *xs, int n, float *out0, float *out1,
                                                                 size_t out_stride) {
    const int ng = n / 32;
    __m512 acc0[8], acc1[8];
    for (int t = 0; t < nt; t++) acc0[t] = acc1[t] = _mm512_setzero_ps();
    for (int g = 0; g < ng; g++) {
        const uint8_t *p0 = pack0 + (size_t)g * QUAD_PACK_GROUP(kind), *p1 = pack1 + (size_t)g * QUAD_PACK_GROUP(kind);
        const __m512i w1a = _mm512_load_si512((const void *)p0), w2a = _mm512_load_si512((const void *)(p0 + 64));
        const __m512i w1b = _mm512_load_si512((const void *)p1), w2b = _mm512_load_si512((const void *)(p1 + 64));
        const __m512 dwa = _mm512_load_ps((const void *)(p0 + 128)), dwb = _mm512_load_ps((const void *)(p1 + 128));
#pragma GCC unroll 8
        for (int t = 0; t < nt; t++) {
            const ActGroup x = act_group(kind, blocked, blk, xq, xl, xd, n, t, g);
            const QuadAct xa = quad_act(kind, x.x, x.xl, blocked);
            const __m512 dx = _mm512_set1_ps(x.xd);
            acc0[t] = quad_step_act(acc0[t], w1a, w2a, _mm512_mul_ps(dwa, dx), xa);
            acc1[t] = quad_step_act(acc1[t], w1b, w2b, _mm512_mul_ps(dwb, dx), xa);
        }
    }
    for (int t = 0; t < nt; t++) {
        float o[4];
        quad_sums(acc0[t], o);
        quad_out(kind, o, wm0, xs + (size_t)t * ng, ng, out0 + (size_t)t * out_stride);
        quad_sums(acc1[t], o);
        quad_out(kind, o, wm1, xs + (size_t)t * ng, ng, out1 + (size_t)t * out_stride);
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

// Rows i0 .. i0+ni-1 against two packed quads: the whole tiles of 8 rows (from the blocks where
// they start one) by the pair tile, the rest by each quad's own tiles.
#if EMX_AVX512_VNNI
static inline __attribute__((always_inline)) void quad_tile2_kind(int kind, const uint8_t *blocks,
                                                                  const uint8_t *pack0, const uint8_t *pack1,
                                                                  const uint16_t *wm0, const uint16_t *wm1,
                                                                  const EmxActs *a, const int32_t *xl, int n, int i0,
                                                                  int ni, float *out0, float *out1, size_t out_stride) {
    const int ng = n / 32, end = i0 + ni;
    int i = i0;
#define EMX_PAIR(blocked)                                                                                         \
    quad_tile_pair(kind, 8, blocked, blocked ? blocks + (size_t)(i / 8) * ng * ACT_BLOCK_GROUP : NULL, pack0,    \
                   pack1, wm0, wm1, a->xq + (size_t)i * n, xl + (size_t)i * ng * 4, a->xd + (size_t)i * ng,       \
                   a->xs + (size_t)i * ng, n, out0 + (size_t)i * out_stride, out1 + (size_t)i * out_stride, out_stride)
    if (blocks && i % 8 == 0)
        for (; i + 8 <= end; i += 8) EMX_PAIR(1);
    for (; i + 8 <= end; i += 8) EMX_PAIR(0);
#undef EMX_PAIR
    if (i < end) {
        quad_tile_kind(kind, 0, blocks, pack0, NULL, NULL, wm0, a, xl, n, i, end - i, out0, out_stride);
        quad_tile_kind(kind, 0, blocks, pack1, NULL, NULL, wm1, a, xl, n, i, end - i, out1, out_stride);
    }
}
#endif

void emx_quad_tile2(const uint8_t *pack0, const uint8_t *pack1, uint32_t dtype, const uint16_t *wm0,
                    const uint16_t *wm1, const EmxActs *a, const int32_t *xl, const uint8_t *blocks, int n, int i0,
                    int ni, float *out0, float *out1, size_t out_stride) {
#if EMX_AVX512_VNNI
    if (dtype == EMX_Q8) quad_tile2_kind(0, blocks, pack0, pack1, wm0, wm1, a, xl, n, i0, ni, out0, out1, out_stride);
    else if (dtype == EMX_Q4) quad_tile2_kind(1, blocks, pack0, pack1, wm0, wm1, a, xl, n, i0, ni, out0, out1, out_stride);
    else quad_tile2_kind(2, blocks, pack0, pack1, wm0, wm1, a, xl, n, i0, ni, out0, out1, out_stride);
#else  // AVX2 (16 registers hold no second quad's accumulators) or none: each quad alone
    emx_quad_tile(pack0, dtype, wm0, a, xl, blocks, n, i0, ni, out0, out_stride);
    emx_quad_tile(pack1, dtype, wm1, a, xl, blocks, n, i0, ni, out1, out_stride);
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
