// cpu_matmul.h — weight × activation products on the CPU, one kernel per weight dtype.
//
// Every kernel exists twice: a plain scalar version (it says what is computed, and the tests
// compare against it) and a SIMD version (AVX2 + FMA + F16C when the compiler targets them,
// plus AVX-VNNI for the int8 products where available, and 4-row kernels in AVX-512 VNNI or
// AVX2 forms, selected at compile time; otherwise the un-suffixed name is the scalar one).
// emx_cpu_simd_name() says which: "avx2+vnni+avx512vnni" ("+amx" where the prefill tile runs
// on AMX, chosen at run time), "avx2+vnni", "avx2", "scalar". The quantised kernels are in
// cpu_qdot.c (one row and decode, with the scalar twins), cpu_qtile512.c / cpu_qtile.c (the
// prefill tile with AVX-512 / AVX2) and cpu_amx.c (the tile on AMX), their shared four-row pieces
// in cpu_quad.h; the float ones and the activations' quantisation in cpu_dot.c; the matmul in
// cpu_matmul.c.
//
// Batch invariance: out[i][r] of emx_matmul is bitwise the same float whatever the number of
// activation rows n, the position of row i in the batch and the thread count. Why: the agent
// pool runs N branches of a sequence as one batched pass and must get, bit for bit, the logits
// each branch gets alone, whichever worker (thread count, batch) ran it; a rollback compares a
// single-token forward with the row a batched prefill computed. How: f32/bf16/f16 run one dot
// per (weight row, activation row) whatever n; q8/q4/q4_1/q4_1f run four weight rows at a time
// (the prefill tile over many activation rows, emx_quad_*, or the decode kernel emx_dot4x1_*)
// and any other row alone (emx_dot_*), and all of them follow ONE accumulation order
// (cpu_qdot.c, top); threads split weight rows only, so no sum crosses a thread. The scalar
// twins keep their own (plain) order: SIMD vs scalar agree within rounding only, so the bits
// are those of one build: workers that must agree run the same binary (an AVX-512 build, an
// AVX2 build and a scalar build differ in the last bits; the integer sums are exact in all).
//
// Quantised weights (q8, q4, q4_1, q4_1f) are never dequantised to floats: the activation vector is
// quantised on the fly to int8 per group of 32 (one f32 scale per group, once per matmul input,
// shared by every matrix that reads that input), and each group's dot product is computed in
// integers, then scaled by d_weight * d_activation and accumulated in f32. This is the scheme
// of llama.cpp's Q8_0×Q8_0 and Q4_0×Q8_0; it reads 34 or 18 bytes per 32 weights instead of 128.
#ifndef ENTROPIX_CPU_MATMUL_H
#define ENTROPIX_CPU_MATMUL_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/model.h"

// Name of the compiled kernel path: "avx2+vnni", "avx2" or "scalar".
const char *emx_cpu_simd_name(void);

// True if matrices of this dtype read int8-quantised activations (q8, q4, q4_1, q4_1f).
static inline int emx_dtype_wants_q8_acts(uint32_t dtype) {
    return dtype == EMX_Q8 || dtype == EMX_Q4 || dtype == EMX_Q4_1 || dtype == EMX_Q4_1F;
}

// True if this dtype has the four-row kernels (decode, the prefill tiles, AMX): every quantised
// one (q4_1f, Q4_K's exact holder, as q4_1 with its f32 scales and mins read as they are).
static inline int emx_dtype_has_quad_kernels(uint32_t dtype) {
    return dtype == EMX_Q8 || dtype == EMX_Q4 || dtype == EMX_Q4_1 || dtype == EMX_Q4_1F;
}

// x [n] (n % 32 == 0) -> q [n] int8 in [-127, 127], d [n/32] and s [n/32]: x ≈ q * d per
// group, d = max|x| / 127 (0 for an all-zero group), s = d * sum(q) of the group (the q4 kernel
// uses it to remove the nibbles' +8 offset once per group instead of once per weight). Rounds
// to nearest even, as lrintf does.
void emx_quantize_acts_scalar(const float *x, int n, int8_t *q, float *d, float *s);
void emx_quantize_acts(const float *x, int n, int8_t *q, float *d, float *s);

// Dot products of one weight row with one activation row of length n.
// f32/bf16/f16: any n. q8/q4: n % 32 == 0; wd = the row's f16 group scales [n/32],
// xq/xd = the quantised activation (emx_quantize_acts).
float emx_dot_f32_scalar(const float *w, const float *x, int n);
float emx_dot_f32(const float *w, const float *x, int n);
float emx_dot_bf16_scalar(const uint16_t *w, const float *x, int n);
float emx_dot_bf16(const uint16_t *w, const float *x, int n);
float emx_dot_f16_scalar(const uint16_t *w, const float *x, int n);
float emx_dot_f16(const uint16_t *w, const float *x, int n);
// w [n] int8, weight j = w[j] * wd[j/32]
float emx_dot_q8_scalar(const int8_t *w, const uint16_t *wd, const int8_t *xq, const float *xd, int n);
float emx_dot_q8(const int8_t *w, const uint16_t *wd, const int8_t *xq, const float *xd, int n);
// w [n/2] nibbles: in group g, byte j holds weight 32g+j (low nibble) and 32g+j+16 (high),
// weight = (nibble - 8) * wd[g]
// (xs: the activation's group sums from emx_quantize_acts; the scalar version ignores it)
float emx_dot_q4_scalar(const uint8_t *w, const uint16_t *wd, const int8_t *xq, const float *xd, const float *xs, int n);
float emx_dot_q4(const uint8_t *w, const uint16_t *wd, const int8_t *xq, const float *xd, const float *xs, int n);
// q4_1: nibbles as q4, weight = nibble * wd[g] + wm[g]. Per group,
// sum (k d + m) xq xd = d xd sum(k xq) + m xs: the integer dot of the nibbles as they are, plus
// the min times the activation's group sum (xs, as for q4; the scalar version sums xq itself).
float emx_dot_q4_1_scalar(const uint8_t *w, const uint16_t *wd, const uint16_t *wm, const int8_t *xq, const float *xd,
                          const float *xs, int n);
float emx_dot_q4_1(const uint8_t *w, const uint16_t *wd, const uint16_t *wm, const int8_t *xq, const float *xd,
                   const float *xs, int n);
// q4_1f: as q4_1 with f32 scales wd[g] and mins wm[g], in the same order.
float emx_dot_q4_1f_scalar(const uint8_t *w, const float *wd, const float *wm, const int8_t *xq, const float *xd,
                           const float *xs, int n);
float emx_dot_q4_1f(const uint8_t *w, const float *wd, const float *wm, const int8_t *xq, const float *xd,
                    const float *xs, int n);

// The activation's lane sums (the 4-row kernels' offsets, cpu_qdot.c): for each group g of
// 32, xl[4g + l] = -(sum of xq[32g + j] over j in 4l..4l+3 and 16+4l..16+4l+3); int32 [n/8].
void emx_act_lane_sums(const int8_t *xq, int n, int32_t *xl);

// Four consecutive weight rows (row k at w + k*n (q8) or w + k*n/2 (q4, q4_1, q4_1f), its scales
// at wd + k*n/32, mins at wm + k*n/32) against one activation row (decode): out[k] bitwise
// emx_dot_*(row k). With AVX-512 VNNI the four rows share each instruction, with AVX2 two rows
// share each convert and FMA and the activation's load serves all four; without AVX2 these are
// four emx_dot_* calls.
void emx_dot4x1_q8(const int8_t *w, const uint16_t *wd, const int8_t *xq, const int32_t *xl, const float *xd, int n,
                   float out[4]);
void emx_dot4x1_q4(const uint8_t *w, const uint16_t *wd, const int8_t *xq, const int32_t *xl, const float *xd,
                   const float *xs, int n, float out[4]);
void emx_dot4x1_q4_1(const uint8_t *w, const uint16_t *wd, const uint16_t *wm, const int8_t *xq, const int32_t *xl,
                     const float *xd, const float *xs, int n, float out[4]);
void emx_dot4x1_q4_1f(const uint8_t *w, const float *wd, const float *wm, const int8_t *xq, const int32_t *xl,
                      const float *xd, const float *xs, int n, float out[4]);

// Activations of a matmul: n rows of `cols` floats, plus their int8 form when the weight is
// q8/q4/q4_1 (NULL otherwise; fill with emx_quantize_acts row by row).
typedef struct {
    const float *x;    // [n][cols]
    const int8_t *xq;  // [n][cols]
    const float *xd;   // [n][cols/32]
    const float *xs;   // [n][cols/32]
    int n;
} EmxActs;

// out[i][r] = sum_c W[r][c] * x[i][c] for every activation row i < a->n and weight row
// r < W.rows; out is [n][W.rows]. Parallel over weight rows (OpenMP, n_threads), each weight
// row read once from memory for all n activation rows (prefill is matrix × matrix).
void emx_matmul(float *out, const EmxTensor *w, const EmxActs *a, int n_threads);

// Several matrices over the same activations (q/k/v, gate/up) in one parallel region, their
// rows split among the threads together: one fork/join instead of several, better balance.
typedef struct {
    float *out;           // [n][out_stride]: row i's results at out + i * out_stride
    const EmxTensor *w;
    size_t out_stride;    // elements from one output row to the next; 0: w->rows (packed rows)
} EmxMatmulJob;
void emx_matmul_multi(const EmxMatmulJob *jobs, int n_jobs, const EmxActs *a, int n_threads);


// The prefill tile (cpu_qtile.c; only where emx_quad_kernels_available(): AVX-512 VNNI or AVX2):
// four weight rows repacked once (emx_quad_pack: 64-byte aligned, emx_quad_pack_bytes(n) in
// all) then run against activation rows i0..i0+ni-1 of a (emx_quad_tile; xl: the rows' lane sums
// [a->n][n/8]): out[i * out_stride + k] for weight row k, bitwise emx_dot_*(row k, activation row i).
// Scales wd and mins wm (q4_1, q4_1f; else unread) as the dtype stores them: f16 [4][n/32], f32
// for q4_1f.
int emx_quad_kernels_available(void);
size_t emx_quad_pack_bytes(int n);
void emx_quad_pack(uint8_t *pack, uint32_t dtype, const uint8_t *w, const void *wd, int n);
void emx_quad_tile(const uint8_t *pack, uint32_t dtype, const void *wm, const EmxActs *a, const int32_t *xl,
                   const uint8_t *blocks, int n, int i0, int ni, float *out, size_t out_stride);
// Two packed quads at once (weight rows r..r+3 in pack0, r+4..r+7 in pack1, each with its own
// mins), out0 / out1 as emx_quad_tile's out for each: the same bits as two emx_quad_tile calls,
// the activations read once for both where the build has the registers for it (AVX-512).
void emx_quad_tile2(const uint8_t *pack0, const uint8_t *pack1, uint32_t dtype, const void *wm0, const void *wm1,
                    const EmxActs *a, const int32_t *xl, const uint8_t *blocks, int n, int i0, int ni, float *out0,
                    float *out1, size_t out_stride);
// The tile's activation rows in blocks of EMX_ACT_BLOCK_ROWS, interleaved per group of 32 (the
// quants, lane sums and scales of the block's rows side by side, one stream for the tile):
// emx_act_block writes block b (rows 8b .. 8b+7 of a) into blocks (emx_act_blocks_bytes(a->n,
// n) in all, whole blocks only). emx_quad_tile reads the blocks where it is given them (else
// NULL): the same operands, the same bits.
#define EMX_ACT_BLOCK_ROWS 8
size_t emx_act_blocks_bytes(int n_rows, int n);
void emx_act_block(uint8_t *blocks, const EmxActs *a, const int32_t *xl, int n, int b);
// The four rows as they are (w: quants [4][...], wd: scales [4][n/32], wm: mins [4][n/32])
// against a few activation rows (a server's slots decoding together), where a repacked copy
// costs more than it saves: the decode kernel per row. Bitwise equal to emx_quad_tile.
void emx_quad_direct(uint32_t dtype, const uint8_t *w, const void *wd, const void *wm, const EmxActs *a,
                     const int32_t *xl, int n, int i0, int ni, float *out, size_t out_stride);

// The prefill tile on AMX (cpu_amx.c): where emx_amx_available() — an AVX-512 build on a CPU with
// AMX-INT8 whose kernel grants the tile state (asked once per process; EMX_AMX=0 in the
// environment says no) — the activations are laid out in tiles once per matmul (emx_amx_acts:
// tile blk = rows 16 blk .. 16 blk + 15 of a, zero-padded; emx_amx_acts_bytes(a->n, n) in all),
// sixteen weight rows (row k at w + k * row_bytes, scales at wd + k * n/32, q4_1's or q4_1f's mins at
// wm + k * n/32) are packed once (emx_amx_pack: 64-byte aligned, emx_amx_pack_bytes(n)) and run
// against every activation row (emx_amx_tile): out[i * out_stride + k], bitwise emx_dot_*(row k,
// activation row i).
#define EMX_AMX_ROWS 16  // weight rows (and activation rows) per tile
int emx_amx_available(void);
size_t emx_amx_acts_bytes(int n_rows, int n);
void emx_amx_acts(uint8_t *acts, const EmxActs *a, int n, int blk);
size_t emx_amx_pack_bytes(int n);
void emx_amx_pack(uint8_t *pack, uint32_t dtype, const uint8_t *w, size_t row_bytes, const void *wd, int n);
void emx_amx_tile(const uint8_t *pack, uint32_t dtype, const void *wm, const EmxActs *a, const uint8_t *acts, int n,
                  float *out, size_t out_stride);

#endif
