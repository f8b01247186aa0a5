// matvec_fused.cu — the decode step's matvecs with their input made in the prologue, for one
// activation row (or a few: the rows of several sequences decoded in one step, each normed on its
// own, every weight row read once for all of them, as the batched matvec): the q/k/v set and the
// gate/up SwiGLU pair after the RMSNorm of x (attention and FFN norms), wo after the int8
// quantisation of att, w_down after that of hb, the classifier after the output norm; for Gemma 3
// the q/k/v set and the gate/up GeGLU pair after the sandwich norm of the previous block's
// output, the residual add and the RMSNorm. In the graph path each of these is two to four
// launches: norm, add-and-norm or quantisation kernels, then the matvecs
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
// accumulating); with nb input rows, nb times the input's and the outputs' bytes, the weights'
// once (the prologue's shared memory nb times a row's: smem_bytes). Against the two launches it
// replaces: no normed row written and read back (cols * 4 twice), no int8 groups written and
// read (1.25 cols twice), one launch fewer.
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

#include "kernels/launch.cuh"
#include "kernels/matvec_fused.cuh"

#define FUSED_MAX_BLOCKS 1024             // beyond: warps loop over rows (the classifier)

namespace {

using namespace emx_fused;

template <int DT, int GLU, int INPUT, int MAXB>
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
    emx_fused::fused_rows<DT, GLU, INPUT, MAXB>(set, W2, cols, in, accumulate, smem);
}

// The sandwich norm's residual row alone (one block): what follows the last fused layer of a
// model with sandwich norms, whose residual add is otherwise the next layer's prologue.
__global__ void __launch_bounds__(FUSED_THREADS) fused_residual_kernel(int cols, const FusedIn in) {
    emx_pdl_trigger();
    emx_pdl_wait();  // x and delta are earlier kernels' outputs
    residual_row(cols, in);
}

// The call's input rows: EmxFusedInput.rows, 0 meaning one.
int rows_of(const EmxFusedInput *in) { return in->rows > 1 ? in->rows : 1; }

FusedIn fused_in(const EmxFusedInput *in, const EmxFusedResidual *res, int cols) {
    FusedIn fi = res ? residual_input(in->x, in->norm_w, in->eps, cols, res->delta, res->post_w, res->x_out)
                     : plain_input(in->x, in->norm_w, in->eps, cols);
    fi.rows = rows_of(in);
    return fi;
}

// The kernel for the call's input (MAXB: 1 for one row, its loops over the batch gone; else
// launch_fused's choice).
template <int DT, int GLU, int MAXB>
cudaError_t launch_fused_as(const MatvecSet &set, const void *W2, int total, int cols, const EmxFusedInput *in,
                            const EmxFusedResidual *res, int accumulate, cudaStream_t stream) {
    const FusedIn fi = fused_in(in, res, cols);
    const int input = res ? IN_RESIDUAL : in->norm_w ? IN_NORM : IN_AS_IS;
    const size_t shmem = smem_bytes(DT, cols, input, fi.rows);
    int blocks = (total + FUSED_WARPS - 1) / FUSED_WARPS;
    if (blocks > FUSED_MAX_BLOCKS) blocks = FUSED_MAX_BLOCKS;
    // the variants a decode layer uses, no more (each is compiled for every dtype and arch): the
    // sandwich norm before q/k/v and GeGLU's pair, GeGLU's pair always after a norm
    if constexpr (GLU != GLU_SILU)
        if (input == IN_RESIDUAL)
            return EMX_LAUNCH(in->pdl, blocks, FUSED_THREADS, shmem, stream,
                              matvec_fused_kernel<DT, GLU, IN_RESIDUAL, MAXB>, set, W2, cols, fi, accumulate);
    if (input == IN_NORM)
        return EMX_LAUNCH(in->pdl, blocks, FUSED_THREADS, shmem, stream, matvec_fused_kernel<DT, GLU, IN_NORM, MAXB>,
                          set, W2, cols, fi, accumulate);
    if constexpr (GLU != GLU_GELU)
        return EMX_LAUNCH(in->pdl, blocks, FUSED_THREADS, shmem, stream, matvec_fused_kernel<DT, GLU, IN_AS_IS, MAXB>,
                          set, W2, cols, fi, accumulate);
    return cudaErrorInvalidValue;  // refused before (fused_pair)
}

// MAXB: the smallest of 1, 4 and EMX_FUSED_MAX_ROWS that holds the call's rows: the several
// rows' kernels make MAXB warp sums a weight row whatever the rows (fast_row's NO_EXIT), so 2 to
// 4 rows do not pay for 8. (Not 2 as well: ptxas, CUDA 13, spilled in one such instantiation on
// sm_80, f32 weights with GeGLU after the sandwich norm.)
template <int DT, int GLU>
cudaError_t launch_fused(const MatvecSet &set, const void *W2, int total, int cols, const EmxFusedInput *in,
                         const EmxFusedResidual *res, int accumulate, cudaStream_t stream) {
    const int rows = rows_of(in);
    if (rows == 1) return launch_fused_as<DT, GLU, 1>(set, W2, total, cols, in, res, accumulate, stream);
    if (rows <= 4) return launch_fused_as<DT, GLU, 4>(set, W2, total, cols, in, res, accumulate, stream);
    return launch_fused_as<DT, GLU, EMX_FUSED_MAX_ROWS>(set, W2, total, cols, in, res, accumulate, stream);
}

// 0 when matrix w can be a fused call's (with the input in): the fast matvec's shapes, aligned
// rows, an input that fits; the input row aligned for the float4 loads of float weights.
int bad_matrix(const EmxCudaWeight *w, const EmxFusedInput *in, const float *out) {
    if (!w || !out || w->rows < 0 || w->cols < 1 || !emx_cuda_matvec_fused_fits(w->dtype, w->cols, rows_of(in)))
        return 1;
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

// 0 when the residual rows fit beside the input in shared memory.
int bad_residual_width(const EmxFusedInput *in, const EmxFusedResidual *res, const EmxCudaWeight *w) {
    return res && !emx_cuda_matvec_fused_residual_fits(w->dtype, w->cols, rows_of(in));
}

// 0 when the call's rows are a count the kernels take.
int bad_rows(const EmxFusedInput *in) { return in->rows < 0 || in->rows > EMX_FUSED_MAX_ROWS; }

cudaError_t fused_set(const EmxFusedInput *in, const EmxFusedResidual *res, const EmxCudaWeight *const *w,
                      float *const *out, int n, int accumulate, cudaStream_t stream) {
    if (!in || !in->x || bad_rows(in) || bad_residual(in, res) || !w || n < 1 || !w[0] ||
        bad_residual_width(in, res, w[0]))
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
    if (!in || !in->x || bad_rows(in) || bad_residual(in, res) || bad_matrix(gate, in, out) ||
        bad_residual_width(in, res, gate) || !up ||
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

extern "C" int emx_cuda_matvec_fused_fits(uint32_t dtype, int cols, int rows) {
    if (cols < 32 || cols % 32 || dtype > EMX_Q4_1F || rows < 1 || rows > EMX_FUSED_MAX_ROWS) return 0;
    return smem_bytes((int)dtype, cols, IN_NORM, rows) <= FUSED_SMEM_MAX;
}

extern "C" int emx_cuda_matvec_fused_residual_fits(uint32_t dtype, int cols, int rows) {
    return emx_cuda_matvec_fused_fits(dtype, cols, rows) &&
           smem_bytes((int)dtype, cols, IN_RESIDUAL, rows) <= FUSED_SMEM_MAX;
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
    if (!in || !in->x || bad_rows(in) || !res || bad_residual_rows(in, res) || cols < 1) return cudaErrorInvalidValue;
    const FusedIn fi = fused_in(in, res, cols);
    return EMX_LAUNCH(in->pdl, 1, FUSED_THREADS, 0, stream, fused_residual_kernel, cols, fi);
}
