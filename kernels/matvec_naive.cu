// matvec_naive.cu — a weight matrix times one vector, as its definition: the lab's first matvec
// version (tools/lab/matvec.cu).
//
//   out[r] = Σ_c W[r][c] · x[c],  r < rows,  W f32 [rows][cols], x f32 [cols]
// Threads: one thread per output row r (128 per block); the thread walks its row from column 0
// to cols - 1 and keeps one f32 sum. Bytes per call: the weights once, rows · cols · 4, plus x
// (cols · 4, from cache after the first warp) and out (rows · 4).
// Why it is slow: the 32 threads of a warp read 32 rows at the same column, addresses cols · 4
// bytes apart, so every load instruction touches 32 cache lines for 128 useful bytes; the
// weights are f32 (4 bytes each where the model stores ~1 for q8). matvec.cu's versions add one
// idea each: the quantised weights read as stored (plain), a warp per row with 16-byte loads
// (fast_f32), int8 activations and __dp4a (fast, what the runtime launches).
// Kept in its own file: the runtime never launches it (kernels/naive.h).
#include "kernels/naive.h"

__global__ void matvec_naive_kernel(const float *w, const float *x, float *out, int rows, int cols) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float sum = 0.0f;
    for (int c = 0; c < cols; c++) sum += w[(size_t)r * cols + c] * x[c];
    out[r] = sum;
}

extern "C" cudaError_t emx_cuda_matvec_naive(const float *w, const float *x, float *out, int rows, int cols,
                                             cudaStream_t stream) {
    if (rows < 1 || cols < 1) return cudaErrorInvalidValue;
    matvec_naive_kernel<<<(rows + 127) / 128, 128, 0, stream>>>(w, x, out, rows, cols);
    return cudaGetLastError();
}
