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

// The input row; norm_threads: the block size whose reduction order the norms reproduce.
struct FusedIn {
    const float *x, *norm_w;
    float eps;
    int norm_threads;
    const float *delta, *post_w;  // IN_RESIDUAL: the block output and its norm's weight
    float *x_out;                 // IN_RESIDUAL: the residual row, written by block 0
};

// The input x (normed by norm_w when not NULL) of cols columns, no sandwich norm; its sum of squares
// in the order of emx_cuda_rmsnorm's block of emx_round_to_warps(cols, 256) threads.
__host__ __device__ inline FusedIn plain_input(const float *x, const float *norm_w, float eps, int cols) {
    return FusedIn{x, norm_w, eps, emx_round_to_warps(cols, NORM_THREADS_MAX), nullptr, nullptr, nullptr};
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

// Shared memory the prologue fills: int8 groups xq [cols] (16-byte aligned: cols % 32 == 0), then
// xd and xsum [cols / 32]; or the normed f32 row [cols]; or nothing (float weights, no norm).
// IN_RESIDUAL also the residual row h [cols] f32: after the groups (at float index
// residual_at), or where the normed f32 row goes (normed in place).
inline size_t smem_bytes(int dtype, int cols, int input) {
    const size_t h = input == IN_RESIDUAL ? (size_t)cols * 4 : 0;
    if (IS_QUANTISED(dtype)) return (size_t)cols + (size_t)cols / 32 * 8 + h;
    return input != IN_AS_IS ? (size_t)cols * 4 : 0;
}
__device__ __forceinline__ int residual_at(int dtype, int cols) { return IS_QUANTISED(dtype) ? cols / 32 * 10 : 0; }

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

// Column i of the sandwich norm's residual row: x[i] + delta[i] * inv_delta * post_w[i], the
// normed delta rounded as emx_cuda_rmsnorm stores it, then added as emx_cuda_residual_rmsnorm adds
// it (emx_add_rounded: the product is not merged into the add).
__device__ __forceinline__ float residual_col(const FusedIn &in, float inv_delta, int i) {
    return emx_add_rounded(in.x[i], in.delta[i] * inv_delta * in.post_w[i]);
}

// The residual row alone into in.x_out [cols], by one block (the sandwich norm's add where no
// matvec follows it). Every thread of the block calls it.
__device__ __forceinline__ void residual_row(int cols, const FusedIn &in) {
    const float inv_delta = inv_rms(in.delta, cols, in);
    for (int i = threadIdx.x; i < cols; i += blockDim.x) in.x_out[i] = residual_col(in, inv_delta, i);
}

// The input of the rows from row x [cols] (in.x; or the residual row in shared memory, which the
// f32 input overwrites in place: each thread its own columns, after the norm's sum) in shared
// memory (see the top), visible to the whole block on return. Every thread calls it.
template <int DT, bool NORM>
__device__ __forceinline__ EmxCudaActs input_from(const float *x, const FusedIn &in, int cols, float *smem) {
    float inv = 0.0f;
    if constexpr (NORM) inv = inv_rms(x, cols, in);
    EmxCudaActs a = {x, nullptr, nullptr, nullptr};
    if constexpr (IS_QUANTISED(DT)) {
        // indices into smem, not pointers, while the loop runs (64-bit pointers live across the
        // quantiser's divisions made ptxas spill; cols % 32 == 0: xd starts at float cols / 4)
        const int xd_at = cols >> 2, xsum_at = xd_at + (cols >> 5);
        // cols % 32 == 0 and whole warps: a warp's lanes take the same trips (the shuffles need it)
        for (int i = threadIdx.x; i < cols; i += blockDim.x) {
            const float v = NORM ? x[i] * inv * in.norm_w[i] : x[i];
            const EmxQuantLane t = emx_quantize_lane(v);
            ((int8_t *)smem)[i] = (int8_t)t.q;
            if ((threadIdx.x & 31) == 0) {
                smem[xd_at + (i >> 5)] = t.d;
                ((int *)smem)[xsum_at + (i >> 5)] = t.sum;
            }
        }
        int8_t *xq = (int8_t *)smem;
        float *xd = smem + xd_at;
        int *xsum = (int *)smem + xsum_at;
        a.xq = xq;
        a.xd = xd;
        a.xsum = xsum;
    } else if constexpr (NORM) {
        for (int i = threadIdx.x; i < cols; i += blockDim.x) smem[i] = x[i] * inv * in.norm_w[i];
        a.x = smem;
    }
    __syncthreads();
    return a;
}

// The prologue (see the top). IN_RESIDUAL: the residual row into shared memory, and into x_out by
// block 0 (the other blocks read x and delta, not x_out); its RMSNorm the input. (Kept in shared
// memory rather than recomputed from x and delta: the three pointers live across the
// quantisation made ptxas spill.)
template <int DT, int INPUT>
__device__ __forceinline__ EmxCudaActs fused_input(const FusedIn &in, int cols, float *smem) {
    if constexpr (INPUT == IN_RESIDUAL) {
        float *h = smem + residual_at(DT, cols);
        const float inv_delta = inv_rms(in.delta, cols, in);
        const bool first = emx_block_x_here() == 0;
        for (int i = threadIdx.x; i < cols; i += blockDim.x) {
            const float v = residual_col(in, inv_delta, i);
            h[i] = v;
            if (first) in.x_out[i] = v;
        }
        __syncthreads();
        return input_from<DT, true>(h, in, cols, smem);
    } else {
        return input_from<DT, INPUT == IN_NORM>(in.x, in, cols, smem);
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
// warp g of the grid takes rows g, g + (warps in the grid), ... of [W_0; W_1; W_2]. Every thread
// of the block calls it (the prologue has barriers); smem: smem_bytes(DT, cols, INPUT).
template <int DT, int GLU, int INPUT>
__device__ __forceinline__ void fused_rows(const MatvecSet &set, const void *__restrict__ W2, int cols,
                                           const FusedIn &in, int accumulate, float *smem) {
    const EmxCudaActs a = fused_input<DT, INPUT>(in, cols, smem);
    const int r0 = set.rows[0], r01 = r0 + set.rows[1], total = r01 + set.rows[2];
    // warp-uniform bounds: a warp's lanes run the same rows, as fast_row's shuffles need. Four
    // warps a block, not unrolled: with eight, or unrolled, ptxas (CUDA 13.0) spilled 4 bytes in
    // an instantiation or two.
#pragma unroll 1
    for (int g = blockIdx.x * FUSED_WARPS + (threadIdx.x >> 5); g < total; g += gridDim.x * FUSED_WARPS) {
        // constant indices only: a parameter array indexed by a variable would go to local memory
        // (set_row's selection, written out: through set_row ptxas spilled 4-12 bytes here)
        const int m = g < r0 ? 0 : g < r01 ? 1 : 2, r = g - (m == 0 ? 0 : m == 1 ? r0 : r01);
        const void *W = m == 0 ? set.W[0] : m == 1 ? set.W[1] : set.W[2];
        float *out = m == 0 ? set.out[0] : m == 1 ? set.out[1] : set.out[2];
        const int rows = m == 0 ? set.rows[0] : m == 1 ? set.rows[1] : set.rows[2];
        fast_row<DT, 1, GLU, true>(W, W2, rows, cols, r, true, a, 1, out, accumulate);
    }
}

}  // namespace emx_fused

#endif
