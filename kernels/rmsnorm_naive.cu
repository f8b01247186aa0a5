// rmsnorm_naive.cu — RMSNorm with one thread per row: the lab's first version (tools/lab/rmsnorm.cu).
//
//   out[r] = x[r] * rsqrt(mean(x[r]²) + eps) * w
// Threads: row r is thread r of the grid (128 per block); the thread loops over its n columns
// twice (sum of squares, then scale). Bytes per call: rows * n * 8 + the w reads (cached).
// Why it is slow: neighbouring threads read addresses n floats apart, so each warp load touches
// 32 cache lines, and a decode step has rows = 1: one thread works, the GPU idles. The shipped
// kernel (rmsnorm.cu) gives a row to a block whose threads read consecutive columns.
// Kept in its own file: the runtime never launches it (kernels/naive.h).
#include "kernels/naive.h"

__global__ void rmsnorm_naive_kernel(float *out, const float *x, const float *w, int n, int rows, float eps) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float *xr = x + (size_t)r * n;
    float ss = 0.0f;
    for (int i = 0; i < n; i++) ss += xr[i] * xr[i];
    const float inv = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = 0; i < n; i++) out[(size_t)r * n + i] = xr[i] * inv * w[i];
}

extern "C" cudaError_t emx_cuda_rmsnorm_naive(float *out, const float *x, const float *w, int n, int rows, float eps,
                                              cudaStream_t stream) {
    if (n < 1 || rows < 0) return cudaErrorInvalidValue;
    if (rows == 0) return cudaSuccess;
    rmsnorm_naive_kernel<<<(rows + 127) / 128, 128, 0, stream>>>(out, x, w, n, rows, eps);
    return cudaGetLastError();
}
