// matvec_rows.cuh — the fast matvec's row code (a warp per row: 128-bit loads of the weights,
// __dp4a against int8 activations for q8/q4/q4_1, dense weights against f32 activations), shared
// by kernels/matvec.cu (the matvec, the set, SwiGLU) and kernels/matvec_fused.cu (the same rows
// with their input made in the kernel's prologue; also GeGLU's pair). One copy of the arithmetic:
// a row's result has the same bits whichever kernel runs it. The activations (EmxCudaActs) may be
// in global or shared memory: the loads are generic.
#ifndef ENTROPIX_KERNELS_MATVEC_ROWS_CUH
#define ENTROPIX_KERNELS_MATVEC_ROWS_CUH

#include "kernels/common.cuh"
#include "kernels/geglu.cuh"
#include "kernels/grid_sync.cuh"
#include "kernels/matvec.h"

// ---------------------------------------------------------------------------------------------
// Fast variant: this lane's share of row r's dot products with the nb activation rows.

// Every multiply-add of a row's dot product is an explicit fmaf: left to the compiler, the
// contraction of `a * b + c` may differ between the one-row (MAXB = 1) and batched (MAXB = 16)
// instantiations (g++ does, under the emulator), and then a row's result would depend on the
// batch it is in; emx_forward_multi promises rows bitwise equal to emx_forward's.
// acc + w[0..3] . x: the four products by an fmaf chain, then added to acc (summing the products
// first keeps the 16-row instantiation free of register spills, which the chain through acc
// caused on sm_80).
__device__ __forceinline__ float fma4(const float *w, const float4 x, float acc) {
    return acc + fmaf(w[3], x.w, fmaf(w[2], x.z, fmaf(w[1], x.y, w[0] * x.x)));
}

// 8 (f16/bf16) or 4 (f32) weights of one 16-byte chunk as f32
template <int DT>
__device__ __forceinline__ void unpack16(const uint4 u, float *w) {
    const uint32_t words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        if constexpr (DT == EMX_F32) {
            w[k] = __uint_as_float(words[k]);
        } else if constexpr (DT == EMX_BF16) {  // little-endian: element 2k in the low half
            w[2 * k] = __uint_as_float(words[k] << 16);
            w[2 * k + 1] = __uint_as_float(words[k] & 0xffff0000u);
        } else {
            w[2 * k] = emx_f16_to_float((uint16_t)(words[k] & 0xffffu));
            w[2 * k + 1] = emx_f16_to_float((uint16_t)(words[k] >> 16));
        }
    }
}

// f32 / f16 / bf16 rows: 16-byte chunks of 4 or 8 weights against the f32 activations.
template <int DT, int MAXB>
__device__ __forceinline__ void row_dot_dense(const void *__restrict__ W, int rows, int cols, int r,
                                              const EmxCudaActs &a, int nb, float *acc) {
    const int lane = threadIdx.x & 31;
    (void)rows;
    constexpr int PER = DT == EMX_F32 ? 4 : 8;  // weights per 16-byte chunk
    const uint4 *wr = (const uint4 *)((const uint8_t *)W + (size_t)r * cols * (16 / PER));
    for (int c = lane; c < cols / PER; c += 32) {
        float w[PER];
        unpack16<DT>(wr[c], w);
#pragma unroll
        for (int b = 0; b < MAXB; b++) {
            if (b >= nb) break;
            const float4 *xv = (const float4 *)(a.x + (size_t)b * cols + (size_t)c * PER);
#pragma unroll
            for (int k = 0; k < PER / 4; k++) {
                const float4 x4 = xv[k];
                acc[b] = fma4(w + 4 * k, x4, acc[b]);
            }
        }
    }
}

// q8 weights dequantised in registers against the f32 activations (the "fast_f32" variant).
template <int DT, int MAXB>
__device__ __forceinline__ void row_dot_q8_f32(const void *__restrict__ W, int rows, int cols, int r,
                                               const EmxCudaActs &a, int nb, float *acc) {
    const int lane = threadIdx.x & 31;
    const int G = cols / 32;  // groups per row
    // chunk c = 16 int8 weights converted to f32; the group scale multiplies the chunk's sum
    const uint4 *wr = (const uint4 *)((const int8_t *)W + (size_t)r * cols);
    const uint16_t *wd = (const uint16_t *)((const uint8_t *)W + (size_t)rows * cols) + (size_t)r * G;
    for (int c = lane; c < cols / 16; c += 32) {
        const uint4 u = wr[c];
        const uint32_t words[4] = {u.x, u.y, u.z, u.w};
        float w[16];
#pragma unroll
        for (int k = 0; k < 16; k++) w[k] = (float)(int8_t)(words[k >> 2] >> (8 * (k & 3)));
        const float dw = emx_f16_to_float(wd[c >> 1]);
#pragma unroll
        for (int b = 0; b < MAXB; b++) {
            if (b >= nb) break;
            const float4 *xv = (const float4 *)(a.x + (size_t)b * cols + (size_t)c * 16);
            float s = 0.0f;
#pragma unroll
            for (int k = 0; k < 4; k++) s = fma4(w + 4 * k, xv[k], s);
            acc[b] = fmaf(dw, s, acc[b]);
        }
    }
}

// Group pg's parameters: q4 d (f16); q4_1 {d, m} (f16 pair, one 4-byte load: d low, m high);
// q4_1f {d, m} (f32 pair, one 8-byte load; weights.h).
template <int DT>
__device__ __forceinline__ void group_params(const uint16_t *__restrict__ p, size_t pg, float *d, float *m) {
    if constexpr (DT == EMX_Q4) {
        *d = emx_f16_to_float(p[pg]);
    } else if constexpr (DT == EMX_Q4_1F) {
        const float2 dm = ((const float2 *)p)[pg];
        *d = dm.x;
        *m = dm.y;
    } else {
        const uint32_t dm = ((const uint32_t *)p)[pg];
        *d = emx_f16_to_float((uint16_t)(dm & 0xffffu));
        *m = emx_f16_to_float((uint16_t)(dm >> 16));
    }
}

// q4 / q4_1 / q4_1f weights dequantised in registers against the f32 activations ("fast_f32").
template <int DT, int MAXB>
__device__ __forceinline__ void row_dot_q4_f32(const void *__restrict__ W, int rows, int cols, int r,
                                               const EmxCudaActs &a, int nb, float *acc) {
    const int lane = threadIdx.x & 31;
    const int G = cols / 32;  // groups per row
    // group g's 32 nibbles converted to f32 (q4: minus the offset 8); q4_1 adds m * sum(x)
    const uint4 *wr = (const uint4 *)((const uint8_t *)W + (size_t)r * cols / 2);
    const uint16_t *p = (const uint16_t *)((const uint8_t *)W + (size_t)rows * cols / 2);
    for (int g = lane; g < G; g += 32) {
        const uint4 u = wr[g];
        const uint32_t words[4] = {u.x, u.y, u.z, u.w};
        constexpr int OFFSET = DT == EMX_Q4 ? 8 : 0;
        float w[32];
#pragma unroll
        for (int k = 0; k < 16; k++) {
            const int byte = (int)(words[k >> 2] >> (8 * (k & 3))) & 0xff;
            w[k] = (float)((byte & 0xf) - OFFSET);
            w[k + 16] = (float)((byte >> 4) - OFFSET);
        }
        const size_t pg = (size_t)r * G + g;
        float d, m = 0.0f;
        group_params<DT>(p, pg, &d, &m);
        constexpr bool MIN = DT == EMX_Q4_1 || DT == EMX_Q4_1F;
#pragma unroll
        for (int b = 0; b < MAXB; b++) {
            if (b >= nb) break;
            const float4 *xv = (const float4 *)(a.x + (size_t)b * cols + (size_t)g * 32);
            float s = 0.0f, sx = 0.0f;
#pragma unroll
            for (int k = 0; k < 8; k++) {
                const float4 x4 = xv[k];
                s = fma4(w + 4 * k, x4, s);
                if constexpr (MIN) sx += x4.x + x4.y + x4.z + x4.w;
            }
            acc[b] = MIN ? fmaf(m, sx, fmaf(d, s, acc[b])) : fmaf(d, s, acc[b]);
        }
    }
}

// q8 weights against the int8 activations: four __dp4a per 16-byte chunk. NO_EXIT: fast_row's.
template <int DT, int MAXB, bool NO_EXIT>
__device__ __forceinline__ void row_dot_q8_int8(const void *__restrict__ W, int rows, int cols, int r,
                                                const EmxCudaActs &a, int nb, float *acc) {
    const int lane = threadIdx.x & 31;
    const int G = cols / 32;  // groups per row
    // chunk c = 16 int8 weights = half of group c/2
    const uint4 *wr = (const uint4 *)((const int8_t *)W + (size_t)r * cols);
    const uint16_t *wd = (const uint16_t *)((const uint8_t *)W + (size_t)rows * cols) + (size_t)r * G;
    for (int c = lane; c < cols / 16; c += 32) {
        const uint4 u = wr[c];
        const float dw = emx_f16_to_float(wd[c >> 1]);
#pragma unroll
        for (int b = 0; b < MAXB; b++) {
            if (!NO_EXIT && b >= nb) break;
            if (b < nb) {
                const int4 x4 = *(const int4 *)(a.xq + (size_t)b * cols + (size_t)c * 16);
                int s = __dp4a((int)u.x, x4.x, 0);
                s = __dp4a((int)u.y, x4.y, s);
                s = __dp4a((int)u.z, x4.z, s);
                s = __dp4a((int)u.w, x4.w, s);
                acc[b] = fmaf((float)s, dw * a.xd[(size_t)b * G + (c >> 1)], acc[b]);
            }
        }
    }
}

// q4 / q4_1 / q4_1f weights against the int8 activations: a group's 32 nibbles, eight __dp4a.
// NO_EXIT: fast_row's.
template <int DT, int MAXB, bool NO_EXIT>
__device__ __forceinline__ void row_dot_q4_int8(const void *__restrict__ W, int rows, int cols, int r,
                                                const EmxCudaActs &a, int nb, float *acc) {
    const int lane = threadIdx.x & 31;
    const int G = cols / 32;  // groups per row
    // q4 / q4_1: chunk g = the 16 bytes of group g; params: d (q4) or {d, m} (q4_1) per group
    const uint4 *wr = (const uint4 *)((const uint8_t *)W + (size_t)r * cols / 2);
    const uint16_t *p = (const uint16_t *)((const uint8_t *)W + (size_t)rows * cols / 2);
    for (int g = lane; g < G; g += 32) {
        const uint4 u = wr[g];
        const size_t pg = (size_t)r * G + g;
        float d, m = 0.0f;
        group_params<DT>(p, pg, &d, &m);
        const int lo[4] = {(int)(u.x & 0x0f0f0f0fu), (int)(u.y & 0x0f0f0f0fu), (int)(u.z & 0x0f0f0f0fu),
                           (int)(u.w & 0x0f0f0f0fu)};
        const int hi[4] = {(int)((u.x >> 4) & 0x0f0f0f0fu), (int)((u.y >> 4) & 0x0f0f0f0fu),
                           (int)((u.z >> 4) & 0x0f0f0f0fu), (int)((u.w >> 4) & 0x0f0f0f0fu)};
#pragma unroll
        for (int b = 0; b < MAXB; b++) {
            if (!NO_EXIT && b >= nb) break;
            if (b < nb) {
                const int4 *xv = (const int4 *)(a.xq + (size_t)b * cols + (size_t)g * 32);
                const int4 x0 = xv[0], x1 = xv[1];  // activations j = 0..15 and 16..31 of the group
                int s = __dp4a(lo[0], x0.x, 0);
                s = __dp4a(lo[1], x0.y, s);
                s = __dp4a(lo[2], x0.z, s);
                s = __dp4a(lo[3], x0.w, s);
                s = __dp4a(hi[0], x1.x, s);
                s = __dp4a(hi[1], x1.y, s);
                s = __dp4a(hi[2], x1.z, s);
                s = __dp4a(hi[3], x1.w, s);
                const float xd = a.xd[(size_t)b * G + g];
                const int xs = a.xsum[(size_t)b * G + g];
                if constexpr (DT == EMX_Q4)
                    acc[b] = fmaf((float)(s - 8 * xs), d * xd, acc[b]);  // sum (nib - 8) x = sum nib x - 8 sum x
                else
                    acc[b] = fmaf(m, xd * (float)xs, fmaf((float)s, d * xd, acc[b]));
            }
        }
    }
}

// INT8: quantised weights meet the int8 activations (__dp4a); else they are dequantised in
// registers and meet the f32 activations (the "fast_f32" variant). Float weights ignore it.
// A warp's lanes share row r; acc[b] gets each lane's part of row r · x_b for the nb rows of x.
// NO_EXIT: fast_row's.
template <int DT, int MAXB, bool INT8, bool NO_EXIT = false>
__device__ __forceinline__ void fast_row_dot(const void *__restrict__ W, int rows, int cols, int r,
                                             const EmxCudaActs &a, int nb, float *acc) {
    if constexpr (DT == EMX_F32 || DT == EMX_F16 || DT == EMX_BF16)
        row_dot_dense<DT, MAXB>(W, rows, cols, r, a, nb, acc);
    else if constexpr (DT == EMX_Q8 && !INT8)
        row_dot_q8_f32<DT, MAXB>(W, rows, cols, r, a, nb, acc);
    else if constexpr (!INT8)
        row_dot_q4_f32<DT, MAXB>(W, rows, cols, r, a, nb, acc);
    else if constexpr (DT == EMX_Q8)
        row_dot_q8_int8<DT, MAXB, NO_EXIT>(W, rows, cols, r, a, nb, acc);
    else
        row_dot_q4_int8<DT, MAXB, NO_EXIT>(W, rows, cols, r, a, nb, acc);
}

// fast_row's GLU: one matrix (GLU_NONE), or the gate W and up W2 with SwiGLU's silu (GLU_SILU, or
// a bool true) or GeGLU's tanh GELU (GLU_GELU, geglu.cuh: the GeGLU kernel's code).
enum : int { GLU_NONE = 0, GLU_SILU = 1, GLU_GELU = 2 };

// Warp's row r of W (and W2) against the nb activation rows: the lanes' sums, the warp reduction,
// lane 0 writes out[b][r] (out: [nb][rows]). A warp past the last row (valid false) still joins
// the shuffles. Both fast kernels below run it, so a row's result has the same bits in either.
// NO_EXIT: the batch loops run all MAXB rows with no exit at the data-dependent nb (the int8 dot
// products test b < nb; the warp sums of rows past nb are sums of zeros, not written): the fused
// kernels' form (matvec_fused.cuh), for which ptxas (CUDA 13) spilled with the exits. The
// separate kernels keep the exits: there a batch of nb rows pays nb warp sums, not MAXB.
template <int DT, int MAXB, int GLU, bool INT8, bool NO_EXIT = false>
__device__ __forceinline__ void fast_row(const void *__restrict__ W, const void *__restrict__ W2, int rows, int cols,
                                         int r, bool valid, const EmxCudaActs &a, int nb, float *__restrict__ out,
                                         int accumulate) {
    const int lane = threadIdx.x & 31;
    float acc[MAXB], acc2[MAXB];
#pragma unroll
    for (int b = 0; b < MAXB; b++) acc[b] = acc2[b] = 0.0f;
    if (valid) {
        fast_row_dot<DT, MAXB, INT8, NO_EXIT>(W, rows, cols, r, a, nb, acc);
        if constexpr (GLU != GLU_NONE) fast_row_dot<DT, MAXB, INT8, NO_EXIT>(W2, rows, cols, r, a, nb, acc2);
    }
#pragma unroll
    for (int b = 0; b < MAXB; b++) {
        if (!NO_EXIT && b >= nb) break;
        float s = emx_warp_sum(acc[b]);
        if constexpr (GLU == GLU_SILU) s = s / (1.0f + expf(-s)) * emx_warp_sum(acc2[b]);
        if constexpr (GLU == GLU_GELU) s = emx_gelu_mul(s, emx_warp_sum(acc2[b]));
        if (valid && lane == 0 && b < nb) {
            float *o = out + (size_t)b * rows + r;
            *o = accumulate ? *o + s : s;
        }
    }
}

// The matrices of a set (emx_cuda_matvec_set, and the fused matvecs' q/k/v or single matrix), one
// after the other in the grid: warp g takes row g of [W_0; W_1; W_2], i.e. row g - (rows before
// W_i) of W_i. A block may straddle two matrices; nothing in it synchronises across warps, so that
// costs nothing.
struct MatvecSet {
    const void *W[EMX_MATVEC_SET_MAX];
    float *out[EMX_MATVEC_SET_MAX];
    int rows[EMX_MATVEC_SET_MAX];  // 0 past the set's last matrix
};

// Row g of the set: matrix W (rows rows, output out), its row r.
struct SetRow {
    const void *W;
    float *out;
    int rows, r;
};
__device__ __forceinline__ SetRow set_row(const MatvecSet set, int g) {
    static_assert(EMX_MATVEC_SET_MAX == 3, "the selection below names each matrix");
    // constant indices only: a parameter array indexed by a variable would go to local memory
    const int r0 = set.rows[0], r01 = r0 + set.rows[1];
    const int m = g < r0 ? 0 : g < r01 ? 1 : 2;
    return SetRow{m == 0 ? set.W[0] : m == 1 ? set.W[1] : set.W[2], m == 0 ? set.out[0] : m == 1 ? set.out[1] : set.out[2],
                  m == 0 ? set.rows[0] : m == 1 ? set.rows[1] : set.rows[2], g - (m == 0 ? 0 : m == 1 ? r0 : r01)};
}

// The first 4 KB of row r's weights into L2 (emx_prefetch_l2: a 128-byte line per lane; a q8
// row of 4096 columns whole; the group scales, stored after all rows, are left to the loads):
// what a kernel launched with PDL does before its emx_pdl_wait (kernels/launch.cuh), reading no
// activation. One line per lane, no loop: across the prologue that follows, a loop's 64-bit
// counters made ptxas spill.
template <int DT>
__device__ __forceinline__ void prefetch_row(const void *W, int cols, int r) {
    constexpr int BITS = DT == EMX_F32 ? 32 : DT == EMX_F16 || DT == EMX_BF16 ? 16 : DT == EMX_Q8 ? 8 : 4;
    const int bytes = cols / 8 * BITS, at = (int)(threadIdx.x & 31) * 128;  // cols % 32 == 0
    if (at < bytes) emx_prefetch_l2((const char *)W + (size_t)r * bytes + at);
}

// Host side: the set of the n matrices w[0..n) (1 to EMX_MATVEC_SET_MAX, of one dtype and width)
// and their outputs, *total their rows; cudaErrorInvalidValue when n is out of range or
// bad(w[i], out[i]) is true for one (the caller's checks: emx_cuda_matvec_set's, the fused
// matvec's).
template <class Bad>
static inline cudaError_t fill_matvec_set(MatvecSet *set, const EmxCudaWeight *const *w, float *const *out, int n,
                                          Bad bad, long *total) {
    if (!w || !out || n < 1 || n > EMX_MATVEC_SET_MAX) return cudaErrorInvalidValue;
    *set = MatvecSet{};
    *total = 0;
    for (int i = 0; i < n; i++) {
        if (!w[i] || bad(w[i], out[i]) || w[i]->dtype != w[0]->dtype || w[i]->cols != w[0]->cols)
            return cudaErrorInvalidValue;
        set->W[i] = w[i]->data;
        set->out[i] = out[i];
        set->rows[i] = w[i]->rows;
        *total += w[i]->rows;
    }
    return cudaSuccess;
}

#endif
