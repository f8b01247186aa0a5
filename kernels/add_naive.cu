// add_naive.cu — the residual add with one thread per element: the third launch of the naive
// decode layer in the lab (tools/lab/matvec_fused.cu: RMSNorm, matvec, then this add).
//
//   x[i] += y[i],  i < n
// Threads: element i is thread i of the grid (256 per block). Bytes per call: n * 12 (x and y
// read, x written).
// Why the runtime has no such kernel: the add costs a launch (a few µs at decode) to move a few
// KB, so the runtime folds it into the launch before it: the matvec's epilogue adds its rows to
// the output (emx_cuda_matvec's and emx_cuda_matvec_fused's accumulate), or the next norm adds
// the residual as it reads x (emx_cuda_residual_rmsnorm).
// Kept in its own file: the runtime never launches it (kernels/naive.h).
#include "kernels/naive.h"

__global__ void add_naive_kernel(float *x, const float *y, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += y[i];
}

extern "C" cudaError_t emx_cuda_add_naive(float *x, const float *y, int n, cudaStream_t stream) {
    if (n < 0) return cudaErrorInvalidValue;
    if (n == 0) return cudaSuccess;
    add_naive_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x, y, n);
    return cudaGetLastError();
}
