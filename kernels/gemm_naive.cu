// gemm_naive.cu — a weight matrix times a matrix of activations, as its definition: the lab's
// first gemm version (tools/lab/gemm.cu).
//
//   out[t][r] = Σ_c W[r][c] · x[t][c],  r < rows, t < n_tokens,  W f32 [rows][cols],
//   x f32 [n_tokens][cols], out f32 [n_tokens][rows]
// Threads: one thread per output element (128 per block): thread i computes out[t][r] with
// r = i % rows, t = i / rows, a loop over the cols columns. Bytes per call (compulsory): W once,
// rows · cols · 4, x once, n_tokens · cols · 4, out once, n_tokens · rows · 4.
// Why it is slow: every weight is read again for every token (n_tokens times) and every
// activation row for every output row; neighbouring threads read W rows cols · 4 bytes apart
// (uncoalesced). gemm.cu's tiled version stages 16 x 16 tiles of W and x in shared memory, so
// each value is read from memory once per tile; the runtime's versions go to cuBLAS on the
// tensor cores.
// Kept in its own file: the runtime never launches it (kernels/naive.h).
#include "kernels/naive.h"

__global__ void gemm_naive_kernel(const float *w, const float *x, float *out, int rows, int cols, int n_tokens) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)rows * n_tokens) return;
    const int r = (int)(i % rows), t = (int)(i / rows);
    float sum = 0.0f;
    for (int c = 0; c < cols; c++) sum += w[(size_t)r * cols + c] * x[(size_t)t * cols + c];
    out[(size_t)t * rows + r] = sum;
}

extern "C" cudaError_t emx_cuda_gemm_naive(const float *w, const float *x, float *out, int rows, int cols,
                                           int n_tokens, cudaStream_t stream) {
    if (rows < 1 || cols < 1 || n_tokens < 1) return cudaErrorInvalidValue;
    const long long n = (long long)rows * n_tokens;
    gemm_naive_kernel<<<(unsigned)((n + 127) / 128), 128, 0, stream>>>(w, x, out, rows, cols, n_tokens);
    return cudaGetLastError();
}
