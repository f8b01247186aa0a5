// matvec_fused.cuh — the device side of the fused matvecs (kernels/matvec_fused.cu, whose header
// comment says what they compute, how threads map to rows and the bytes they move): the prologue
// that makes a block's input in shared memory and the rows loop, for the fused matvec kernels and
// for the persistent decode kernel (kernels/persistent/decode_persistent.cu), which runs the same code as
// phases of one launch. Both stride the rows by the grid (gridDim.x blocks of FUSED_WARPS warps),
// so a row's result has the same bits in either.
#ifndef ENTROPIX_KERNELS_MATVEC_FUSED_CUH
#define ENTROPIX_KERNELS_MATVEC_FUSED_CUH

#include "kernels/common.cuh"
#include "kernels/grid_sync.cuh"
#include "kernels/matvec_rows.cuh"

#define FUSED_WARPS 4                     // rows (warps) per block at a time (as matvec.cu's)
#define FUSED_THREADS (FUSED_WARPS * 32)
#define FUSED_SMEM_MAX 49152              // dynamic shared memory without an opt-in attribute
#define NORM_THREADS_MAX 256              // emx_cuda_rmsnorm's block (rmsnorm.cu)

namespace emx_fused {

// How the prologue makes the input: x as it is, RMSNorm(x), or RMSNorm(x + RMSNorm(delta)) (the
// sandwich norm, with the residual row written by the first block).
enum : int { IN_AS_IS = 0, IN_NORM = 1, IN_RESIDUAL = 2 };

// The input rows; norm_threads: the block size whose reduction order the norms reproduce.
// x, delta and x_out hold `rows` rows of cols each, one after the other; each row is normed and
// quantised on its own (the rows of several sequences in one step: forward_cuda_fused.c), and
// the matvec's rows read all of them (fast_row's batch).
struct FusedIn {
    const float *x, *norm_w;
    float eps;
    int norm_threads;
    const float *delta, *post_w;  // IN_RESIDUAL: the block output and its norm's weight
    float *x_out;                 // IN_RESIDUAL: the residual row, written by block 0
    int rows;                     // 1..EMX_FUSED_MAX_ROWS
};

// The input x (normed by norm_w when not NULL) of cols columns, no sandwich norm; its sum of squares
// in the order of emx_cuda_rmsnorm's block of emx_round_to_warps(cols, 256) threads.
__host__ __device__ inline FusedIn plain_input(const float *x, const float *norm_w, float eps, int cols) {
    return FusedIn{x, norm_w, eps, emx_round_to_warps(cols, NORM_THREADS_MAX), nullptr, nullptr, nullptr, 1};
}

// The sandwich norm's input (IN_RESIDUAL): the residual row h = x + rmsnorm(delta) * post_w, written
// to x_out by block 0, normed by norm_w.
__host__ __device__ inline FusedIn residual_input(const float *x, const float *norm_w, float eps, int cols,
                                                  const float *delta, const float *post_w, float *x_out) {
    FusedIn in = plain_input(x, norm_w, eps, cols);
    in.delta = delta, in.post_w = post_w, in.x_out = x_out;
    return in;
}

#define IS_QUANTISED(dt) ((dt) == EMX_Q8 || (dt) == EMX_Q4 || (dt) == EMX_Q4_1 || (dt) == EMX_Q4_1F)

// Shared memory the prologue fills for `rows` input rows: int8 groups xq [rows][cols] (16-byte
// aligned: cols % 32 == 0), then xd and xsum [rows][cols / 32]; or the normed f32 rows
// [rows][cols]; or nothing (float weights, no norm). IN_RESIDUAL also the residual rows h
// [rows][cols] f32: after the groups (at float index residual_at), or where the normed f32 rows
// go (normed in place).
inline size_t smem_bytes(int dtype, int cols, int input, int rows = 1) {
    const size_t n = (size_t)rows, h = input == IN_RESIDUAL ? n * cols * 4 : 0;
    if (IS_QUANTISED(dtype)) return n * cols + n * cols / 32 * 8 + h;
    return input != IN_AS_IS ? n * cols * 4 : 0;
}
__device__ __forceinline__ int residual_at(int dtype, int cols, int rows) {
    return IS_QUANTISED(dtype) ? rows * cols / 32 * 10 : 0;
}

// Virtual thread v's share of rmsnorm_kernel's sum: x[v]², x[v + T]², ... added in turn, as its
// thread v does (a functor for emx_block_sum_as).
struct SquaresFrom {
    const float *x;
    int n, T;
    __device__ __forceinline__ float operator()(int v) const {
        float s = 0.0f;
        for (int i = v; i < n; i += T) {
            const float e = x[i];
            s += e * e;
        }
        return s;
    }
};

// 1 / sqrt(mean(x²) + eps) of row x [cols], as emx_cuda_rmsnorm's block computes it. Every thread
// calls it.
__device__ __forceinline__ float inv_rms(const float *x, int cols, const FusedIn &in) {
    const int T = in.norm_threads;
    const float ss = emx_block_sum_as(T, SquaresFrom{x, cols, T});
    return 1.0f / sqrtf(ss / (float)cols + in.eps);
}

// Column i of the sandwich norm's residual row b (at = b * cols + i): x + delta * inv_delta *
// post_w[i], the normed delta rounded as emx_cuda_rmsnorm stores it, then added as
// emx_cuda_residual_rmsnorm adds it (emx_add_rounded: the product is not merged into the add).
__device__ __forceinline__ float residual_col(const FusedIn &in, float inv_delta, size_t at, int i) {
    return emx_add_rounded(in.x[at], in.delta[at] * inv_delta * in.post_w[i]);
}

// The sandwich norm's residual rows [nb][cols] into h (shared memory, when TO_H) and into
// in.x_out when to_out (the block that writes them). Every thread of the block calls it.
template <bool TO_H>
__device__ __forceinline__ void residual_rows(int cols, const FusedIn &in, int nb, float *h, bool to_out) {
#pragma unroll 1  // (unrolled, the rows' state lived across the quantiser's division calls: spills)
    for (int b = 0; b < nb; b++) {
        const size_t row = (size_t)b * cols;
        const float inv_delta = inv_rms(in.delta + row, cols, in);
        for (int i = threadIdx.x; i < cols; i += blockDim.x) {
            const float v = residual_col(in, inv_delta, row + i, i);
            if constexpr (TO_H) h[row + i] = v;
            if (to_out) in.x_out[row + i] = v;
        }
    }
}

// The residual rows alone into in.x_out [rows][cols], by one block (the sandwich norm's add where
// no matvec follows it). Every thread of the block calls it.
__device__ __forceinline__ void residual_row(int cols, const FusedIn &in) {
    residual_rows<false>(cols, in, in.rows, nullptr, true);
}

// The input of the rows from the nb rows x [nb][cols] (in.x; or the residual rows in shared
// memory, which the f32 input overwrites in place: each thread its own columns, after the row's
// norm sum) in shared memory (see the top), visible to the whole block on return. Every thread
// calls it. Row b's groups and norm are made as for that row alone (its own sum, its own groups).
template <int DT, bool NORM>
__device__ __forceinline__ EmxCudaActs input_from(const float *x, const FusedIn &in, int cols, float *smem, int nb) {
    EmxCudaActs a = {x, nullptr, nullptr, nullptr};
    if constexpr (IS_QUANTISED(DT)) {
        // indices, not pointers, while the loops run (64-bit pointers live across the quantiser's
        // divisions made ptxas spill; cols % 32 == 0: xd starts at float nb * cols / 4, and row
        // b's groups are groups b * cols / 32 on)
        const int xd_at = (nb * cols) >> 2, xsum_at = xd_at + ((nb * cols) >> 5);
#pragma unroll 1  // (unrolled, the rows' state lived across the quantiser's division calls: spills)
        for (int b = 0; b < nb; b++) {
            const int at = b * cols;  // row b's first column
            float inv = 0.0f;
            if constexpr (NORM) inv = inv_rms(x + at, cols, in);
            // cols % 32 == 0 and whole warps: a warp's lanes take the same trips (the shuffles need it)
            for (int i = threadIdx.x; i < cols; i += blockDim.x) {
                const float v = NORM ? x[at + i] * inv * in.norm_w[i] : x[at + i];
                const EmxQuantLane t = emx_quantize_lane(v);
                ((int8_t *)smem)[at + i] = (int8_t)t.q;
                if ((threadIdx.x & 31) == 0) {
                    smem[xd_at + ((at + i) >> 5)] = t.d;
                    ((int *)smem)[xsum_at + ((at + i) >> 5)] = t.sum;
                }
            }
        }
        a.xq = (int8_t *)smem;
        a.xd = smem + xd_at;
        a.xsum = (int *)smem + xsum_at;
    } else if constexpr (NORM) {
#pragma unroll 1  // (as the loop above)
        for (int b = 0; b < nb; b++) {
            const int at = b * cols;
            const float inv = inv_rms(x + at, cols, in);  // (its barriers: row b's sum read before it is overwritten)
            for (int i = threadIdx.x; i < cols; i += blockDim.x) smem[at + i] = x[at + i] * inv * in.norm_w[i];
        }
        a.x = smem;
    }
    __syncthreads();
    return a;
}

// The prologue (see the top) for nb rows. IN_RESIDUAL: the residual rows into shared memory, and
// into x_out by block 0 (the other blocks read x and delta, not x_out); their RMSNorm the input.
// (Kept in shared memory rather than recomputed from x and delta: the three pointers live across
// the quantisation made ptxas spill.)
template <int DT, int INPUT>
__device__ __forceinline__ EmxCudaActs fused_input(const FusedIn &in, int cols, float *smem, int nb) {
    if constexpr (INPUT == IN_RESIDUAL) {
        float *h = smem + residual_at(DT, cols, nb);
        residual_rows<true>(cols, in, nb, h, emx_block_x_here() == 0);
        __syncthreads();
        return input_from<DT, true>(h, in, cols, smem, nb);
    } else {
        return input_from<DT, INPUT == IN_NORM>(in.x, in, cols, smem, nb);
    }
}

// Before emx_pdl_wait: each warp's first row (its first 4 KB) into L2 where it is a row of the
// set's first matrix (q of q/k/v, whose blocks are most of the grid; k's and v's blocks skip it:
// selecting their matrix here made ptxas spill), and the same row of W2 (SwiGLU's up). The block
// index is read anew (emx_block_x_here): shared with the loop below, it was kept across the
// prologue and spilled. Nothing before sm_90 (emx_prefetch_l2).
template <int DT, int GLU>
__device__ __forceinline__ void prefetch_block_rows(const MatvecSet &set, const void *W2, int cols) {
    const int r = (int)emx_block_x_here() * FUSED_WARPS + (threadIdx.x >> 5);
    if (r >= set.rows[0]) return;
    prefetch_row<DT>(set.W[0], cols, r);
    if constexpr (GLU != GLU_NONE) prefetch_row<DT>(W2, cols, r);
}

// The rows of the set (and W2 for a GLU pair) against the input the prologue makes (see the top):
// warp g of the grid takes rows g, g + (warps in the grid), ... of [W_0; W_1; W_2], each against
// the nb input rows (out[i] [nb][rows_i]; MAXB 1: one row, nb a constant). Every thread of the
// block calls it (the prologue has barriers); smem: smem_bytes(DT, cols, INPUT, nb).
template <int DT, int GLU, int INPUT, int MAXB = 1>
__device__ __forceinline__ void fused_rows(const MatvecSet &set, const void *__restrict__ W2, int cols,
                                           const FusedIn &in, int accumulate, float *smem) {
    const int nb = MAXB == 1 ? 1 : in.rows;
    const EmxCudaActs a = fused_input<DT, INPUT>(in, cols, smem, nb);
    const int r0 = set.rows[0], r01 = r0 + set.rows[1], total = r01 + set.rows[2];
    // warp-uniform bounds: a warp's lanes run the same rows, as fast_row's shuffles need. Four
    // warps a block, not unrolled: with eight, or unrolled, ptxas (CUDA 13.0) spilled 4 bytes in
    // an instantiation or two.
#pragma unroll 1
    for (int g = blockIdx.x * FUSED_WARPS + (threadIdx.x >> 5); g < total; g += gridDim.x * FUSED_WARPS) {
        // constant indices only: a parameter array indexed by a variable would go to local memory
        // (set_row's selection, written out: through set_row ptxas spilled 4-12 bytes here)
        if constexpr (MAXB > 1) {
            const SetRow row = set_row(set, g);
            fast_row<DT, MAXB, GLU, true, true>(row.W, W2, row.rows, cols, row.r, true, a, nb, row.out, accumulate);
        } else {
            const int m = g < r0 ? 0 : g < r01 ? 1 : 2, r = g - (m == 0 ? 0 : m == 1 ? r0 : r01);
            const void *W = m == 0 ? set.W[0] : m == 1 ? set.W[1] : set.W[2];
            float *out = m == 0 ? set.out[0] : m == 1 ? set.out[1] : set.out[2];
            const int rows = m == 0 ? set.rows[0] : m == 1 ? set.rows[1] : set.rows[2];
            fast_row<DT, MAXB, GLU, true>(W, W2, rows, cols, r, true, a, nb, out, accumulate);
        }
    }
}

}  // namespace emx_fused

#endif
