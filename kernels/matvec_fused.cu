// matvec_fused.cu — the decode step's matvecs with their input made in the prologue, for one
// activation row: the q/k/v set and the gate/up SwiGLU pair after the RMSNorm of x (attention and
// FFN norms), wo after the int8 quantisation of att, w_down after that of hb, the classifier after
// the output norm; for Gemma 3 the q/k/v set and the gate/up GeGLU pair after the sandwich norm of
// the previous block's output, the residual add and the RMSNorm. In the graph path each of these is
// two to four launches: norm, add-and-norm or quantisation kernels, then the matvecs
// (kernels/rmsnorm.cu, kernels/matvec.cu, kernels/geglu.cu).
//
//   input = x                                    (norm_w NULL)
//   input = x / sqrt(mean(x²) + eps) * norm_w    (norm_w given)
//   input = RMSNorm(h) * norm_w,  h = x + RMSNorm(delta) * post_w   (EmxFusedResidual; block 0
//           writes h to x_out, each block recomputes it from L2: the two sums of squares in turn)
//   out[i][r] (+)= W_i[r] · input,   or   out[r] = act(gate_r · input) * (up_r · input),
//   act silu (SwiGLU) or tanh GELU (GeGLU, geglu.cuh: the GeGLU kernel's code)
//
// Threads: blocks of FUSED_WARPS warps. Prologue, every block: the norm's sum of squares (a block
// reduction over x), then the input into shared memory: its int8 groups for quantised weights (a
// warp's 32 lanes hold one group of 32 columns in each pass of the loop, as rmsnorm.cu's fused
// quantisation; xq [cols], xd and xsum [cols/32]), or the normed f32 row for float weights (with
// no norm they read x itself). Then warp g of the grid takes rows g, g + (warps in the grid), ...
// of [W_0; W_1; W_2] (a grid of at most FUSED_MAX_BLOCKS blocks: the prologue runs once a block, so
// a 151,936-row classifier does not recompute the norm 38,000 times), each row matvec_rows.cuh's
// fast_row: the code the graph path's matvecs run.
// Bytes per call: the weights, as the matvec (rows * cols * bytes_per_weight); the input row
// (cols * 4, and norm_w's cols * 4) read from L2 by every block; rows * 4 written (read too when
// accumulating). Against the two launches it replaces: no normed row written and read back
// (cols * 4 twice), no int8 groups written and read (1.25 cols twice), one launch fewer.
// Why fused: at decode a launch is 2.5-5 µs, mostly its ramp-up and the latency of its first
// dependent loads (docs/cuda.md, measured on an H200), and a norm or quantisation kernel moves a
// few KB: the step's ~313 launches cost more than its ~0.6 GB of weights take to stream. The
// prologue's work (a few thousand multiply-adds from L2) hides behind the first weight loads.
// Same bits as the graph path: the sum of squares is added in the order of emx_cuda_rmsnorm's
// block of emx_round_to_warps(cols, 256) threads (common.cuh's emx_block_sum_as), the
// quantisation is emx_quantize_lane, the rows fast_row; tests/kernels/test_matvec_fused.cpp checks
// it bitwise.
// PDL (in->pdl, kernels/launch.cuh): before emx_pdl_wait each warp prefetches its first weight
// row into L2; the prologue and everything after read activations, so they follow the wait.
#include "kernels/matvec_fused.h"

#include <limits.h>
#include <string.h>

#include "kernels/common.cuh"
#include "kernels/launch.cuh"
#include "kernels/matvec_rows.cuh"

#define FUSED_WARPS 4                     // rows (warps) per block at a time (as matvec.cu's)
#define FUSED_THREADS (FUSED_WARPS * 32)
#define FUSED_MAX_BLOCKS 1024             // beyond: warps loop over rows (the classifier)
#define FUSED_SMEM_MAX 49152              // dynamic shared memory without an opt-in attribute
#define NORM_THREADS_MAX 256              // emx_cuda_rmsnorm's block (rmsnorm.cu)

namespace {

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

#define IS_QUANTISED(dt) ((dt) == EMX_Q8 || (dt) == EMX_Q4 || (dt) == EMX_Q4_1 || (dt) == EMX_Q4_1F)

// Shared memory the prologue fills: int8 groups xq [cols] (16-byte aligned: cols % 32 == 0), then
// xd and xsum [cols / 32]; or the normed f32 row [cols]; or nothing (float weights, no norm).
// IN_RESIDUAL also the residual row h [cols] f32: after the groups (at float index
// residual_at), or where the normed f32 row goes (normed in place).
size_t smem_bytes(int dtype, int cols, int input) {
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

template <int DT, int GLU, int INPUT>
__global__ void __launch_bounds__(FUSED_THREADS) matvec_fused_kernel(const MatvecSet set, const void *__restrict__ W2,
                                                                     int cols, const FusedIn in, int accumulate) {
    extern __shared__ float smem[];
    // PDL (kernels/launch.cuh): the next kernel may be scheduled now (it waits in its own
    // emx_pdl_wait until this one has ended). Before the wait only weights: each warp's first row
    // into L2 (prefetch_block_rows), so that its loads after the prologue find it there rather
    // than in HBM. A prefetch, not loads into registers: the prologue needs the registers (values
    // kept across it made ptxas spill) and the prefetch holds none.
    emx_pdl_trigger();
    prefetch_block_rows<DT, GLU>(set, W2, cols);
    emx_pdl_wait();  // x, and the rows accumulated into, are earlier kernels' outputs
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

// The sandwich norm's residual row alone (one block): what follows the last fused layer of a
// model with sandwich norms, whose residual add is otherwise the next layer's prologue.
__global__ void __launch_bounds__(FUSED_THREADS) fused_residual_kernel(int cols, const FusedIn in) {
    emx_pdl_trigger();
    emx_pdl_wait();  // x and delta are earlier kernels' outputs
    const float inv_delta = inv_rms(in.delta, cols, in);
    for (int i = threadIdx.x; i < cols; i += blockDim.x) in.x_out[i] = residual_col(in, inv_delta, i);
}

FusedIn fused_in(const EmxFusedInput *in, const EmxFusedResidual *res, int cols) {
    FusedIn fi = {in->x, in->norm_w, in->eps, emx_round_to_warps(cols, NORM_THREADS_MAX), nullptr, nullptr, nullptr};
    if (res) fi.delta = res->delta, fi.post_w = res->post_w, fi.x_out = res->x_out;
    return fi;
}

template <int DT, int GLU>
cudaError_t launch_fused(const MatvecSet &set, const void *W2, int total, int cols, const EmxFusedInput *in,
                         const EmxFusedResidual *res, int accumulate, cudaStream_t stream) {
    const FusedIn fi = fused_in(in, res, cols);
    const int input = res ? IN_RESIDUAL : in->norm_w ? IN_NORM : IN_AS_IS;
    const size_t shmem = smem_bytes(DT, cols, input);
    int blocks = (total + FUSED_WARPS - 1) / FUSED_WARPS;
    if (blocks > FUSED_MAX_BLOCKS) blocks = FUSED_MAX_BLOCKS;
    // the variants a decode layer uses, no more (each is compiled for every dtype and arch): the
    // sandwich norm before q/k/v and GeGLU's pair, GeGLU's pair always after a norm
    if constexpr (GLU != GLU_SILU)
        if (input == IN_RESIDUAL)
            return EMX_LAUNCH(in->pdl, blocks, FUSED_THREADS, shmem, stream, matvec_fused_kernel<DT, GLU, IN_RESIDUAL>,
                              set, W2, cols, fi, accumulate);
    if (input == IN_NORM)
        return EMX_LAUNCH(in->pdl, blocks, FUSED_THREADS, shmem, stream, matvec_fused_kernel<DT, GLU, IN_NORM>, set, W2,
                          cols, fi, accumulate);
    if constexpr (GLU != GLU_GELU)
        return EMX_LAUNCH(in->pdl, blocks, FUSED_THREADS, shmem, stream, matvec_fused_kernel<DT, GLU, IN_AS_IS>, set,
                          W2, cols, fi, accumulate);
    return cudaErrorInvalidValue;  // refused before (fused_pair)
}

// 0 when matrix w can be a fused call's (with the input in): the fast matvec's shapes, aligned
// rows, an input that fits; the input row aligned for the float4 loads of float weights.
int bad_matrix(const EmxCudaWeight *w, const EmxFusedInput *in, const float *out) {
    if (!w || !out || w->rows < 0 || w->cols < 1 || !emx_cuda_matvec_fused_fits(w->dtype, w->cols)) return 1;
    if (emx_cuda_weight_bytes(w->dtype, (uint64_t)w->rows, (uint64_t)w->cols) == 0 && w->rows > 0) return 1;
    return ((uintptr_t)w->data | (uintptr_t)in->x) % 16 != 0;
}

// 0 when res's rows are given and x_out is neither x nor delta (the other blocks read those while
// block 0 writes x_out).
int bad_residual_rows(const EmxFusedInput *in, const EmxFusedResidual *res) {
    return !res->delta || !res->post_w || !res->x_out || res->x_out == in->x || res->x_out == res->delta;
}

// 0 when res (NULL: none) can be the input's sandwich norm: its rows as above, the input normed.
int bad_residual(const EmxFusedInput *in, const EmxFusedResidual *res) {
    return res && (!in->norm_w || bad_residual_rows(in, res));
}

// 0 when the residual row fits beside the input in shared memory.
int bad_residual_width(const EmxFusedResidual *res, const EmxCudaWeight *w) {
    return res && !emx_cuda_matvec_fused_residual_fits(w->dtype, w->cols);
}

cudaError_t fused_set(const EmxFusedInput *in, const EmxFusedResidual *res, const EmxCudaWeight *const *w,
                      float *const *out, int n, int accumulate, cudaStream_t stream) {
    if (!in || !in->x || bad_residual(in, res) || !w || n < 1 || !w[0] || bad_residual_width(res, w[0]))
        return cudaErrorInvalidValue;
    MatvecSet set;
    long total = 0;
    const cudaError_t err = fill_matvec_set(
        &set, w, out, n, [&](const EmxCudaWeight *wi, const float *o) { return bad_matrix(wi, in, o) != 0; }, &total);
    if (err != cudaSuccess) return err;
    if (total == 0) return cudaSuccess;
    if (total > INT_MAX - FUSED_THREADS * FUSED_MAX_BLOCKS) return cudaErrorInvalidValue;
    const int cols = w[0]->cols;
    EMX_DISPATCH_DTYPE(w[0]->dtype,
                       return launch_fused<DT, GLU_NONE>(set, nullptr, (int)total, cols, in, res, accumulate, stream));
    return cudaSuccess;
}

cudaError_t fused_pair(int glu, const EmxFusedInput *in, const EmxFusedResidual *res, const EmxCudaWeight *gate,
                       const EmxCudaWeight *up, float *out, cudaStream_t stream) {
    if (!in || !in->x || bad_residual(in, res) || bad_matrix(gate, in, out) || bad_residual_width(res, gate) || !up ||
        up->dtype != gate->dtype || up->rows != gate->rows || up->cols != gate->cols || (uintptr_t)up->data % 16 ||
        (glu == GLU_GELU && !in->norm_w))
        return cudaErrorInvalidValue;
    if (gate->rows == 0) return cudaSuccess;
    if (gate->rows > INT_MAX - FUSED_THREADS * FUSED_MAX_BLOCKS) return cudaErrorInvalidValue;
    MatvecSet set;
    memset(&set, 0, sizeof set);
    set.W[0] = gate->data;
    set.out[0] = out;
    set.rows[0] = gate->rows;
    const int rows = gate->rows, cols = gate->cols;
    const void *W2 = up->data;
    if (glu == GLU_SILU) {
        EMX_DISPATCH_DTYPE(gate->dtype, return launch_fused<DT, GLU_SILU>(set, W2, rows, cols, in, res, 0, stream));
    } else {
        EMX_DISPATCH_DTYPE(gate->dtype, return launch_fused<DT, GLU_GELU>(set, W2, rows, cols, in, res, 0, stream));
    }
    return cudaSuccess;
}

}  // namespace

extern "C" int emx_cuda_matvec_fused_fits(uint32_t dtype, int cols) {
    if (cols < 32 || cols % 32 || dtype > EMX_Q4_1F) return 0;
    return smem_bytes((int)dtype, cols, IN_NORM) <= FUSED_SMEM_MAX;
}

extern "C" int emx_cuda_matvec_fused_residual_fits(uint32_t dtype, int cols) {
    return emx_cuda_matvec_fused_fits(dtype, cols) && smem_bytes((int)dtype, cols, IN_RESIDUAL) <= FUSED_SMEM_MAX;
}

extern "C" cudaError_t emx_cuda_matvec_fused(const EmxFusedInput *in, const EmxCudaWeight *const *w, float *const *out,
                                             int n, int accumulate, cudaStream_t stream) {
    return fused_set(in, nullptr, w, out, n, accumulate, stream);
}

extern "C" cudaError_t emx_cuda_matvec_fused_residual(const EmxFusedInput *in, const EmxFusedResidual *res,
                                                      const EmxCudaWeight *const *w, float *const *out, int n,
                                                      cudaStream_t stream) {
    if (!res) return cudaErrorInvalidValue;
    return fused_set(in, res, w, out, n, 0, stream);
}

extern "C" cudaError_t emx_cuda_matvec_fused_swiglu(const EmxFusedInput *in, const EmxCudaWeight *gate,
                                                    const EmxCudaWeight *up, float *out, cudaStream_t stream) {
    return fused_pair(GLU_SILU, in, nullptr, gate, up, out, stream);
}

extern "C" cudaError_t emx_cuda_matvec_fused_geglu(const EmxFusedInput *in, const EmxFusedResidual *res,
                                                   const EmxCudaWeight *gate, const EmxCudaWeight *up, float *out,
                                                   cudaStream_t stream) {
    return fused_pair(GLU_GELU, in, res, gate, up, out, stream);
}

extern "C" cudaError_t emx_cuda_fused_residual(const EmxFusedInput *in, const EmxFusedResidual *res, int cols,
                                               cudaStream_t stream) {
    if (!in || !in->x || !res || bad_residual_rows(in, res) || cols < 1) return cudaErrorInvalidValue;
    const FusedIn fi = fused_in(in, res, cols);
    return EMX_LAUNCH(in->pdl, 1, FUSED_THREADS, 0, stream, fused_residual_kernel, cols, fi);
}
