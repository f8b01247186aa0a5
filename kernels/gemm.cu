// gemm.cu — prefill matmuls: out[n][rows] (+)= x[n][cols] · W[rows][cols]^T.
//
// tiled: the textbook shared-memory GEMM in f32. A 16 x 16 block computes a 16-token x 16-row
// tile of out; per step of 16 columns it stages 16 x 16 activations and 16 x 16 weights
// (dequantised once on the way in) in shared memory, so each global value is read by one thread
// and used 16 times. Thread (tx, ty) computes out[t0 + ty][r0 + tx]: writes are coalesced along
// rows. Bytes: W is read ceil(n/16) times, x ceil(rows/16) times. Readable, exact in f32, and
// slow next to tensor cores: it is the twin the cuBLAS path is checked against.
//
// cublas_bf16 / cublas_f16: W is dequantised into a 16-bit scratch copy (rows * cols * 2 bytes
// written, once per layer and call) and x converted likewise (n * cols * 2), then one
// cublasGemmEx with f32 accumulation runs on tensor cores. Column-major view: W row-major
// [rows][cols] is the col-major cols x rows matrix A (lda = cols), so out^T = A^T · X with
// op(A) = T, X col-major cols x n (ldb = cols), out col-major rows x n (ldc = rows) = row-major
// [n][rows]. For prompts of tens of tokens and up the dequantisation pass (reading the weight
// once, writing 2 bytes per weight) is small next to the GEMM's 2 * n * rows * cols flops; for a
// handful of tokens the batched matvec (matvec.h, B <= 16) is the better choice.
//
// cublas_f32: the same call with every matrix in f32 and CUBLAS_COMPUTE_32F (the default math
// mode: no TF32), on the weights themselves when they are f32, else on an f32 scratch copy.
#include "kernels/gemm.h"

#include <string.h>

#include "kernels/common.cuh"

#define TILE 16

template <int DT>
__global__ void __launch_bounds__(TILE * TILE) gemm_tiled_kernel(const void *__restrict__ W, int rows, int cols,
                                                                const float *__restrict__ x, int n,
                                                                float *__restrict__ out, int accumulate) {
    __shared__ float xs[TILE][TILE + 1];  // [token][column]; +1: the ws[tx][k] reads below hit
    __shared__ float ws[TILE][TILE + 1];  // [weight row][column]   16 different banks
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int r0 = blockIdx.x * TILE, t0 = blockIdx.y * TILE;
    float acc = 0.0f;
    for (int k0 = 0; k0 < cols; k0 += TILE) {
        const int k = k0 + tx;
        xs[ty][tx] = t0 + ty < n && k < cols ? x[(size_t)(t0 + ty) * cols + k] : 0.0f;
        ws[ty][tx] = r0 + ty < rows && k < cols ? emx_weight_at<DT>(W, rows, cols, r0 + ty, k) : 0.0f;
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < TILE; kk++) acc += xs[ty][kk] * ws[tx][kk];
        __syncthreads();
    }
    const int r = r0 + tx, t = t0 + ty;
    if (r < rows && t < n) {
        float *o = out + (size_t)t * rows + r;
        *o = accumulate ? *o + acc : acc;
    }
}

// Stores as OUT: 0 bf16, 1 f16, 2 f32.
template <int OUT>
__device__ __forceinline__ void store16(void *out, size_t i, float v) {
    if constexpr (OUT == 1)
        ((__half *)out)[i] = __float2half(v);
    else if constexpr (OUT == 2)
        ((float *)out)[i] = v;
    else
        ((__nv_bfloat16 *)out)[i] = __float2bfloat16(v);
}

// Grid-stride over the rows * cols weights: coalesced reads of the device layout, 2-byte (f32:
// 4-byte) writes.
template <int DT, int OUT>
__global__ void __launch_bounds__(256) dequant16_kernel(const void *__restrict__ W, int rows, int cols, void *out) {
    const size_t total = (size_t)rows * cols;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x)
        store16<OUT>(out, i, emx_weight_at<DT>(W, rows, cols, (int)(i / cols), (int)(i % cols)));
}

template <int OUT>
__global__ void __launch_bounds__(256) to16_kernel(const float *__restrict__ x, size_t total, void *out) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x)
        store16<OUT>(out, i, x[i]);
}

static int grid_for(size_t total) {
    const size_t b = (total + 255) / 256;
    return b < 1 ? 1 : b > 4096 ? 4096 : (int)b;
}

template <int DT, int OUT>
static cudaError_t launch_dequant16(const EmxCudaWeight *w, void *out, cudaStream_t stream) {
    dequant16_kernel<DT, OUT><<<grid_for((size_t)w->rows * w->cols), 256, 0, stream>>>(w->data, w->rows, w->cols, out);
    return cudaGetLastError();
}

template <int DT>
static cudaError_t launch_tiled(const EmxCudaWeight *w, const float *x, int n, float *out, int accumulate,
                                cudaStream_t stream) {
    const dim3 grid((w->rows + TILE - 1) / TILE, (n + TILE - 1) / TILE), block(TILE, TILE);
    gemm_tiled_kernel<DT><<<grid, block, 0, stream>>>(w->data, w->rows, w->cols, x, n, out, accumulate);
    return cudaGetLastError();
}

static size_t align256(size_t b) { return (b + 255) / 256 * 256; }

extern "C" const char *emx_gemm_variant_name(int variant) {
    switch (variant) {
    case EMX_GEMM_TILED: return "tiled";
    case EMX_GEMM_CUBLAS_BF16: return "cublas_bf16";
    case EMX_GEMM_CUBLAS_F16: return "cublas_f16";
    case EMX_GEMM_CUBLAS_F32: return "cublas_f32";
    default: return nullptr;
    }
}

extern "C" int emx_gemm_variant_from_name(const char *name) {
    for (int v = 0; v < EMX_GEMM_VARIANTS; v++)
        if (name && strcmp(name, emx_gemm_variant_name(v)) == 0) return v;
    return -1;
}

extern "C" size_t emx_cuda_gemm_scratch_bytes(int variant, int rows, int cols, int n) {
    if (variant == EMX_GEMM_CUBLAS_F32) return align256((size_t)rows * cols * 4);
    if (variant != EMX_GEMM_CUBLAS_BF16 && variant != EMX_GEMM_CUBLAS_F16) return 0;
    return align256((size_t)rows * cols * 2) + align256((size_t)n * cols * 2);
}

extern "C" cudaError_t emx_cuda_dequant16(const EmxCudaWeight *w, int f16, void *out, cudaStream_t stream) {
    if (!w || w->rows < 0 || w->cols < 1 || !out) return cudaErrorInvalidValue;
    if (w->rows == 0) return cudaSuccess;
    if (f16) {
        EMX_DISPATCH_DTYPE(w->dtype, return launch_dequant16<DT, 1>(w, out, stream));
    }
    EMX_DISPATCH_DTYPE(w->dtype, return launch_dequant16<DT, 0>(w, out, stream));
    return cudaSuccess;
}

// cublas_f32: out [n][rows] (+)= x [n][cols] W^T in f32, W in place when it is f32.
static cudaError_t gemm_f32(cublasHandle_t handle, const EmxCudaWeight *w, const float *x, int n, float *out,
                            int accumulate, void *scratch, cudaStream_t stream) {
    const void *w32 = w->data;
    if (w->dtype != EMX_F32) {
        if (!scratch) return cudaErrorInvalidValue;
        EMX_DISPATCH_DTYPE(w->dtype, {
            cudaError_t e = launch_dequant16<DT, 2>(w, scratch, stream);
            if (e != cudaSuccess) return e;
        });
        w32 = scratch;
    }
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    if (cublasSetStream(handle, stream) != CUBLAS_STATUS_SUCCESS) return cudaErrorUnknown;
    const cublasStatus_t st = cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, w->rows, n, w->cols, &alpha, w32, CUDA_R_32F, w->cols, x, CUDA_R_32F, w->cols, &beta, out, CUDA_R_32F, w->rows, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return st == CUBLAS_STATUS_SUCCESS ? cudaSuccess : cudaErrorUnknown;
}

extern "C" cudaError_t emx_cuda_gemm(int variant, cublasHandle_t handle, const EmxCudaWeight *w, const float *x, int n,
                                     float *out, int accumulate, void *scratch, cudaStream_t stream) {
    if (!w || !x || !out || n < 0 || w->rows < 0 || w->cols < 1 || variant < 0 || variant >= EMX_GEMM_VARIANTS)
        return cudaErrorInvalidValue;
    if (n == 0 || w->rows == 0) return cudaSuccess;
    if (variant == EMX_GEMM_TILED) {
        EMX_DISPATCH_DTYPE(w->dtype, return launch_tiled<DT>(w, x, n, out, accumulate, stream));
        return cudaSuccess;
    }
    if (!handle) return cudaErrorInvalidValue;
    if (variant == EMX_GEMM_CUBLAS_F32) return gemm_f32(handle, w, x, n, out, accumulate, scratch, stream);
    if (!scratch) return cudaErrorInvalidValue;
    const bool f16 = variant == EMX_GEMM_CUBLAS_F16;
    void *w16 = scratch, *x16 = (char *)scratch + align256((size_t)w->rows * w->cols * 2);
    cudaError_t e = emx_cuda_dequant16(w, f16, w16, stream);
    if (e != cudaSuccess) return e;
    const size_t nx = (size_t)n * w->cols;
    if (f16)
        to16_kernel<1><<<grid_for(nx), 256, 0, stream>>>(x, nx, x16);
    else
        to16_kernel<0><<<grid_for(nx), 256, 0, stream>>>(x, nx, x16);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    const cudaDataType type = f16 ? CUDA_R_16F : CUDA_R_16BF;
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    if (cublasSetStream(handle, stream) != CUBLAS_STATUS_SUCCESS) return cudaErrorUnknown;
    const cublasStatus_t st = cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, w->rows, n, w->cols, &alpha, w16, type, w->cols, x16, type, w->cols, &beta, out, CUDA_R_32F, w->rows, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return st == CUBLAS_STATUS_SUCCESS ? cudaSuccess : cudaErrorUnknown;
}
