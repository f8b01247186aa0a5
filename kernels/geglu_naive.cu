// geglu_naive.cu — GeGLU with one thread per element: the first version of kernels/geglu.cu.
//
//   out[i] = 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z³))) * up[i],  z = gate[i]
// Threads: element i is thread i of the grid (256 per block), scalar loads. Bytes per call:
// 12 * n (gate and up read, out written). What the shipped kernel adds: 128-bit accesses
// (float4) and a grid-stride loop over at most 1024 blocks; the arithmetic is the same.
// Kept in its own file: the runtime never launches it (kernels/naive.h).
#include "kernels/naive.h"

#include <math.h>

__global__ void geglu_naive_kernel(float *out, const float *gate, const float *up, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float z = gate[i];
    out[i] = 0.5f * z * (1.0f + tanhf(0.7978845608028654f * (z + 0.044715f * z * z * z))) * up[i];
}

extern "C" cudaError_t emx_cuda_geglu_naive(float *out, const float *gate, const float *up, int n,
                                            cudaStream_t stream) {
    if (n < 0) return cudaErrorInvalidValue;
    if (n == 0) return cudaSuccess;
    geglu_naive_kernel<<<(n + 255) / 256, 256, 0, stream>>>(out, gate, up, n);
    return cudaGetLastError();
}
