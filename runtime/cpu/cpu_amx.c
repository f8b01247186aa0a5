// cpu_amx.c — the prefill tile of the quantised matmul (q8, q4, q4_1) on AMX, the tile matrix
// unit of Intel Xeons since Sapphire Rapids, in the order every quantised kernel follows
// (cpu_qdot.c, top), so a (weight row, token) pair gives the same float here as in decode and in
// the AVX-512 tile (cpu_qtile512.c).
//
// What it computes, for 16 weight rows r against every token t:
//     out[t][r] = (a0 + a2) + (a1 + a3),  a_p = the FMA chain over the groups g = p mod 4 of
//                 I(t, r, g) x (d_w(r, g) x d_x(t, g)),  I = the group's 32 products, exact
// (+ q4_1's mins term).
//
// How it maps: one TDPBSSD multiplies a tile A of 16 tokens x one group (16 rows of 32 signed
// bytes, from the activation tiles: emx_amx_acts lays every 16 tokens' group out as 512
// contiguous bytes and their 16 d_x, once per matmul) by a tile B of the same group of
// the 16 weight rows (8 rows of 64 bytes, B[k][4r + b] = weight r's byte 4k + b: the layout the
// pack writes) into a tile C of 16 x 16 int32 — every pair's whole-group integer sum, 8192
// products in one instruction. The float part stays on AVX-512: C is stored to L1 and each of its
// rows (one token, the 16 weight rows) converted, multiplied by d_w x d_x and added into its
// phase's accumulator. A block is 16 weight rows x 32 tokens: one B tile serves two A tiles.
//
// Bytes per group and block: B 512 B (the pack, in L1 or L2), A 2 x 576 B (the activation tiles,
// streamed from L2 in order: read as rows 1 KiB apart, they stalled every tile load on L2),
// C 2 x 1 KiB out through L1; the accumulators [4 phases][32 tokens][16] f32 (8 KiB) stay in L1.
// Where the time goes (one core, a 3072 x 1024 q8 matrix, 256 tokens: ~45 ns per group and
// block, 2.7x the AVX-512 tile's products per second): the floats, 32 x 3 AVX-512 uops (convert,
// multiply, FMA), ~20 ns; the tile instructions ~16 ns (TDPBSSD and TILESTORED take 16 cycles
// per tile each, and on this machine neither overlaps the vector work, however the two are
// interleaved: they add up). The per-group scales are the price of the shared order: a tile over
// K = 64 would do twice the products per instruction, but mix two groups' sums.
#include "runtime/cpu/cpu_matmul.h"
#include "runtime/cpu/cpu_quad.h"
#include "base/dtype.h"

#include <stdlib.h>
#include <string.h>

#if EMX_AVX512_VNNI && defined(__linux__)
#include <cpuid.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static int amx_ready;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;

// AMX-TILE and AMX-INT8 (CPUID leaf 7, EDX bits 24 and 25), and Linux's leave to use the 8 KiB of
// tile state: a process must ask for it, or its first tile instruction faults.
static void amx_probe(void) {
    const char *env = getenv("EMX_AMX");
    if (env && strcmp(env, "0") == 0) return;
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 25))) return;
    amx_ready = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

int emx_amx_available(void) {
    pthread_once(&amx_once, amx_probe);
    return amx_ready;
}

// The pack, per group: B [8][64 B], then d_w [16] f32.
#define AMX_GROUP 576
size_t emx_amx_pack_bytes(int n) { return (size_t)(n / 32) * AMX_GROUP; }

// Row's 32 weights of group g as signed bytes: q8 as stored; q4's nibbles minus 8 (its weight is
// (nibble - 8) x d, and I the same integer the other kernels form as sum(nibble x) - 8 sum(x));
// q4_1's and q4_1f's nibbles as they are (their offset is the mins term).
static inline __m256i signed_group(uint32_t dtype, const uint8_t *row, int g) {
    if (dtype == EMX_Q8) return _mm256_loadu_si256((const __m256i *)(row + (size_t)g * 32));
    const __m256i u = unpack_nibbles(row + (size_t)g * 16);
    return dtype == EMX_Q4 ? _mm256_sub_epi8(u, _mm256_set1_epi8(8)) : u;
}

void emx_amx_pack(uint8_t *pack, uint32_t dtype, const uint8_t *w, size_t row_bytes, const void *wd, int n) {
    const int ng = n / 32, kind = quad_kind(dtype);
    // Per group, a transpose of 16 rows x 8 dwords into 8 rows x 16 dwords, in two steps.
    // 1. Rows 4q..4q+3, held as [row 4q | 4q+1] and [4q+2 | 4q+3], give half[q][h]: dword 4j + i
    //    = row 4q + i's dword 4h + j (h = 0: the group's bytes 0..15, 1: bytes 16..31).
    __m512i pick[2];
    for (int h = 0; h < 2; h++) {
        int idx[16];
        for (int j = 0; j < 4; j++)
            for (int i = 0; i < 4; i++) idx[4 * j + i] = (i >= 2 ? 16 : 0) + (i & 1) * 8 + 4 * h + j;
        pick[h] = _mm512_loadu_si512(idx);
    }
    for (int g = 0; g < ng; g++) {
        uint8_t *p = pack + (size_t)g * AMX_GROUP;
        __m512i half[4][2];
        for (int q = 0; q < 4; q++) {
            const uint8_t *r = w + (size_t)(4 * q) * row_bytes;
            const __m512i lo = _mm512_inserti64x4(_mm512_castsi256_si512(signed_group(dtype, r, g)),
                                                  signed_group(dtype, r + row_bytes, g), 1);
            const __m512i hi = _mm512_inserti64x4(_mm512_castsi256_si512(signed_group(dtype, r + 2 * row_bytes, g)),
                                                  signed_group(dtype, r + 3 * row_bytes, g), 1);
            half[q][0] = _mm512_permutex2var_epi32(lo, pick[0], hi);
            half[q][1] = _mm512_permutex2var_epi32(lo, pick[1], hi);
        }
        // 2. B row k = the 128-bit quarter k % 4 of half[0][k / 4], half[1][k / 4], half[2], half[3]:
        //    row 4q + i's dword k at 4q + i.
        for (int k = 0; k < 8; k++) {
            const int l = k % 4, h = k / 4;
            const __m512i quarter = _mm512_set_epi64(0, 0, 0, 0, 9 + 2 * l, 8 + 2 * l, 2 * l + 1, 2 * l);
            const __m512i q01 = _mm512_permutex2var_epi64(half[0][h], quarter, half[1][h]);
            const __m512i q23 = _mm512_permutex2var_epi64(half[2][h], quarter, half[3][h]);
            _mm512_store_si512((void *)(p + 64 * k), _mm512_shuffle_i32x4(q01, q23, 0x44));
        }
        float d[16];
        for (int r = 0; r < 16; r++) d[r] = group_scale(kind, wd, (size_t)r * ng + g);
        memcpy(p + 512, d, sizeof d);
    }
}

// The activation tiles, per 16 rows and group: their bytes [16][32], then d_x [16] f32.
#define AMX_ACT_GROUP 576
size_t emx_amx_acts_bytes(int n_rows, int n) { return (size_t)((n_rows + 15) / 16) * (size_t)(n / 32) * AMX_ACT_GROUP; }

// Activation tile blk: rows 16 blk .. 16 blk + 15 of a (zero past a->n).
void emx_amx_acts(uint8_t *acts, const EmxActs *a, int n, int blk) {
    const int ng = n / 32, t0 = 16 * blk, m = a->n - t0 < 16 ? a->n - t0 : 16;
    for (int g = 0; g < ng; g++) {
        uint8_t *p = acts + ((size_t)blk * ng + g) * AMX_ACT_GROUP;
        float d[16] = {0};
        for (int i = 0; i < m; i++) {
            memcpy(p + 32 * i, a->xq + (size_t)(t0 + i) * n + (size_t)g * 32, 32);
            d[i] = a->xd[(size_t)(t0 + i) * ng + g];
        }
        memset(p + 32 * m, 0, (size_t)32 * (16 - m));
        memcpy(p + 512, d, sizeof d);
    }
}

// The tile registers: C0, C1 (two halves of a block's tokens), A0, A1 (their activations), B.
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} TileConfig;

static __attribute__((target("amx-tile"))) void amx_configure(void) {
    TileConfig c = {.palette = 1};
    static const int c_tiles[4] = {0, 1, 5, 6};
    for (int t = 0; t < 4; t++) c.rows[c_tiles[t]] = 16, c.colsb[c_tiles[t]] = 64;  // C: 16 tokens x 16 int32
    for (int t = 2; t < 4; t++) c.rows[t] = 16, c.colsb[t] = 32;  // A: 16 tokens x 32 bytes
    c.rows[4] = 8, c.colsb[4] = 64;                                // B: 8 x (16 rows x 4 bytes)
    _tile_loadconfig(&c);
}

// Back to the tiles' initial state: the thread's context switches save no tile data again.
static __attribute__((target("amx-tile"))) void amx_release(void) { _tile_release(); }

// Tokens t0 .. t0 + nt - 1 of a block (nt <= 32), half h's activation tiles at x[h].
// acc[4][32][16]: the phases' accumulators.
typedef struct {
    const uint8_t *pack;
    const uint8_t *x[2];  // the halves' activation tiles at group 0
    int n, nt;
} Block;

// One half's sums for group g (as stored from its C tile), rows i < m, into the accumulators of
// g's phase (g mod 4): the first group of a phase starts its chain from zero (fma(I, d, 0), as
// the other kernels do).
static inline __attribute__((always_inline)) void block_floats(const int32_t *sums, const Block *b, int h, int m, int g,
                                                                int first, float acc[4][32][16]) {
    const __m512 dw = _mm512_load_ps((const void *)(b->pack + (size_t)g * AMX_GROUP + 512));
    const float *dx = (const float *)(b->x[h] + (size_t)g * AMX_ACT_GROUP + 512);
    float (*a)[16] = acc[g % 4] + 16 * h;
    for (int i = 0; i < m; i++) {
        const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(dx[i]));
        const __m512 prev = first ? _mm512_setzero_ps() : _mm512_load_ps(a[i]);
        _mm512_store_ps(a[i], _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(sums + 16 * i)), d, prev));
    }
}

// Group g's two C tiles: even g tiles 0 and 1, odd g 5 and 6, so that group g's tile work does
// not wait for group g - 1's sums to be read.
#define AMX_GROUP_SUMS(c0, c1)                                           \
    do {                                                                 \
        _tile_zero(c0);                                                  \
        _tile_dpbssd(c0, 2, 4);                                          \
        if (m1 > 0) {                                                    \
            _tile_zero(c1);                                              \
            _tile_dpbssd(c1, 3, 4);                                      \
        }                                                                \
        _tile_stored(c0, sums[g & 1][0], 64);                            \
        if (m1 > 0) _tile_stored(c1, sums[g & 1][1], 64);                \
    } while (0)

// m0, m1: the halves' live rows (16 and 16 in every whole block, constants there).
static inline __attribute__((always_inline, target("amx-tile,amx-int8"))) void block_run(const Block *b,
                                                                                      float acc[4][32][16], int m0,
                                                                                      int m1) {
    const int ng = b->n / 32;
    int32_t sums[2][2][256] __attribute__((aligned(64)));  // [group parity][half][16 x 16]
    if (ng < 4) memset(acc, 0, sizeof(float[4][32][16]));  // phases without a group stay zero
    // The floats of group g - 1 after the tile work of group g (a little faster, 5-10%, than each
    // group's floats right after its own tile work; the two still do not overlap on this machine).
    for (int g = 0; g <= ng; g++) {
        if (g < ng) {
            _tile_loadd(4, b->pack + (size_t)g * AMX_GROUP, 64);
            _tile_loadd(2, b->x[0] + (size_t)g * AMX_ACT_GROUP, 32);
            if (m1 > 0) _tile_loadd(3, b->x[1] + (size_t)g * AMX_ACT_GROUP, 32);
            if (g & 1) AMX_GROUP_SUMS(5, 6);
            else AMX_GROUP_SUMS(0, 1);
        }
        if (g > 0) {
            const int p = g - 1, first = p < 4;
            if (first) block_floats(sums[p & 1][0], b, 0, m0, p, 1, acc);
            else block_floats(sums[p & 1][0], b, 0, m0, p, 0, acc);
            if (m1 > 0 && first) block_floats(sums[p & 1][1], b, 1, m1, p, 1, acc);
            else if (m1 > 0) block_floats(sums[p & 1][1], b, 1, m1, p, 0, acc);
        }
    }
}

static __attribute__((target("amx-tile,amx-int8"))) void amx_block(const Block *b, float acc[4][32][16]) {
    if (b->nt == 32) block_run(b, acc, 16, 16);
    else block_run(b, acc, b->nt < 16 ? b->nt : 16, b->nt < 16 ? 0 : b->nt - 16);
}
#undef AMX_GROUP_SUMS

void emx_amx_tile(const uint8_t *pack, uint32_t dtype, const void *wm, const EmxActs *a, const uint8_t *acts, int n,
                  float *out, size_t out_stride) {
    const int ng = n / 32, kind = quad_kind(dtype);
    float acc[4][32][16] __attribute__((aligned(64)));
    amx_configure();
    for (int t0 = 0; t0 < a->n; t0 += 32) {
        const uint8_t *x = acts + (size_t)(t0 / 16) * ng * AMX_ACT_GROUP;
        const int nt = a->n - t0 < 32 ? a->n - t0 : 32;
        const Block b = {.pack = pack, .x = {x, x + (size_t)ng * AMX_ACT_GROUP}, .n = n, .nt = nt};
        amx_block(&b, acc);
        for (int i = 0; i < b.nt; i++) {
            const __m512 v = _mm512_add_ps(_mm512_add_ps(_mm512_load_ps(acc[0][i]), _mm512_load_ps(acc[2][i])),
                                           _mm512_add_ps(_mm512_load_ps(acc[1][i]), _mm512_load_ps(acc[3][i])));
            float *o = out + (size_t)(t0 + i) * out_stride;
            _mm512_storeu_ps(o, v);
            if (kind >= 2)
                for (int r = 0; r < 16; r++) o[r] += mins_term(kind, wm, r, a->xs + (size_t)(t0 + i) * ng, ng);
        }
    }
    amx_release();
}

#else  // no AMX in this build (it needs the AVX-512 one, on Linux)

int emx_amx_available(void) { return 0; }
size_t emx_amx_pack_bytes(int n) { return (void)n, 0; }
void emx_amx_pack(uint8_t *pack, uint32_t dtype, const uint8_t *w, size_t row_bytes, const void *wd, int n) {
    (void)pack, (void)dtype, (void)w, (void)row_bytes, (void)wd, (void)n;
}
size_t emx_amx_acts_bytes(int n_rows, int n) { return (void)n_rows, (void)n, 0; }
void emx_amx_acts(uint8_t *acts, const EmxActs *a, int n, int blk) { (void)acts, (void)a, (void)n, (void)blk; }
void emx_amx_tile(const uint8_t *pack, uint32_t dtype, const void *wm, const EmxActs *a, const uint8_t *acts, int n,
                  float *out, size_t out_stride) {
    (void)pack, (void)dtype, (void)wm, (void)a, (void)acts, (void)n, (void)out, (void)out_stride;
}

#endif
