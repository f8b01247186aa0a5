// rmsnorm.cu — RMSNorm of rows, optionally after adding the residual branch into the stream.
//
//   plain: out[r] = x[r] * rsqrt(mean(x[r]²) + eps) * w
//   fused: x[r] += residual[r]; out[r] = x[r] * rsqrt(mean(x[r]²) + eps) * w
// Threads: one block per row (up to 256 threads, whole warps); thread t owns columns t,
// t + blockDim, ...: a strided loop with coalesced accesses, the sum of squares reduced by
// emx_block_sum (shuffles, then 32 partials through shared memory).
// Bytes per call: plain reads x and w and writes out: rows * n * 8 + n * 4. Fused reads x,
// residual, w, writes x and out: rows * n * 16 + n * 4, against rows * n * 20 for a separate add
// kernel followed by the plain norm (the second read of x is in the same thread, from L1/L2).
// Quantised: plain, and out's int8 groups for the fast quantised matvecs that read it (xq [rows][n],
// xd and xsum [rows][n/32]), which a separate emx_cuda_quantize_acts would otherwise read back in
// a second launch: a warp's 32 lanes hold 32 consecutive columns in each pass of the strided loop
// (blockDim and n are multiples of 32), exactly one quantisation group, so the group's max and sum
// are warp shuffles (common.cuh's emx_quantize_lane, the same code as the separate kernel: the
// same bits). Adds rows * n * (1 + 8/32) bytes written, saves a launch and rows * n * 4 read.
// Why fast: one launch and one pass over DRAM per row; the only synchronisation is the block
// reduction. The sum is in f32 (the CPU twin uses double): relative error ~ n * 2^-24, far below
// what the model notices.
#include "kernels/rmsnorm.h"

#include "kernels/common.cuh"

// Where the quantised variant writes out's int8 groups; unused (null) otherwise.
struct QuantOut {
    int8_t *xq;
    float *xd;
    int *xsum;
};

template <bool ADD, bool QUANT>
__global__ void __launch_bounds__(256) rmsnorm_kernel(float *out, float *x, const float *__restrict__ residual,
                                                      const float *__restrict__ w, int n, float eps, QuantOut qo) {
    float *xr = x + (size_t)blockIdx.x * n;
    const float *rr = ADD ? residual + (size_t)blockIdx.x * n : nullptr;
    float *o = out + (size_t)blockIdx.x * n;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float v = xr[i];
        if constexpr (ADD) {
            v += rr[i];
            xr[i] = v;
        }
        ss += v * v;
    }
    const float inv = 1.0f / sqrtf(emx_block_sum(ss) / (float)n + eps);
    // each thread re-reads only the columns it wrote itself: no barrier needed for the update
    // (QUANT: all 32 lanes of a warp take the same trips through this loop, as the shuffles need)
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = xr[i] * inv * w[i];
        o[i] = v;
        if constexpr (QUANT) {
            const EmxQuantLane t = emx_quantize_lane(v);
            const size_t at = (size_t)blockIdx.x * n + i;
            qo.xq[at] = (int8_t)t.q;
            if ((threadIdx.x & 31) == 0) {
                qo.xd[at / 32] = t.d;
                qo.xsum[at / 32] = t.sum;
            }
        }
    }
}

extern "C" cudaError_t emx_cuda_rmsnorm(float *out, const float *x, const float *w, int n, int rows, float eps,
                                        cudaStream_t stream) {
    if (n < 1 || rows < 0) return cudaErrorInvalidValue;
    if (rows == 0) return cudaSuccess;
    const int threads = emx_round_to_warps(n, 256);
    // x is only read in the plain variant; the kernel's pointer is non-const for the fused one
    rmsnorm_kernel<false, false><<<rows, threads, 0, stream>>>(out, (float *)x, nullptr, w, n, eps, QuantOut{});
    return cudaGetLastError();
}

extern "C" cudaError_t emx_cuda_residual_rmsnorm(float *x, const float *residual, const float *w, float *out, int n,
                                                 int rows, float eps, cudaStream_t stream) {
    if (n < 1 || rows < 0 || out == x) return cudaErrorInvalidValue;
    if (rows == 0) return cudaSuccess;
    const int threads = emx_round_to_warps(n, 256);
    rmsnorm_kernel<true, false><<<rows, threads, 0, stream>>>(out, x, residual, w, n, eps, QuantOut{});
    return cudaGetLastError();
}

extern "C" cudaError_t emx_cuda_rmsnorm_quantize(float *out, const float *x, const float *w, int n, int rows, float eps,
                                                 int8_t *xq, float *xd, int *xsum, cudaStream_t stream) {
    if (n < 1 || n % 32 || rows < 0 || !xq || !xd || !xsum) return cudaErrorInvalidValue;
    if (rows == 0) return cudaSuccess;
    const int threads = emx_round_to_warps(n, 256);
    rmsnorm_kernel<false, true><<<rows, threads, 0, stream>>>(out, (float *)x, nullptr, w, n, eps, QuantOut{xq, xd, xsum});
    return cudaGetLastError();
}
