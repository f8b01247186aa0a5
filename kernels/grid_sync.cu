// grid_sync.cu — running totals over chunks by a chain of blocks that wait on each other
// (kernels/grid_sync.h): the reference use of the inter-block primitive of kernels/grid_sync.cuh
// and of the residency guard a persistent kernel needs.
//
// Threads: 256 per block (GS_THREADS), one block per chunk of the input: the block sums its
// chunk (a strided loop and a shared-memory tree), waits until *counter >= c (the chunks before
// it have written their totals), writes out[c] = out[c - 1] + sum, and signals (*counter += 1).
// The sums run in parallel; only the carry is serial, one global round trip per block. Bytes
// per call: 4 n read, 8 per chunk written. The result does not depend on the order in which
// blocks run (the carries are added in chunk order), which the emulator's two schedules check.
//
// Residency: a block that waits for a block that never started hangs the GPU, so the grid is
// never larger than emx_max_resident_blocks (occupancy x SMs, never a fixed count), and it is a
// cooperative launch, which CUDA refuses (cudaErrorCooperativeLaunchTooLarge) rather than
// letting a grid that does not fit start. More chunks than that go in waves: launch k handles
// chunks [k * fit, (k + 1) * fit), whose waits on earlier waves are already satisfied because
// the launches run one after the other on the stream.
//
// PDL: the kernel calls emx_pdl_wait before reading x, so a launch with the programmatic
// attribute may start while the kernel that writes x finishes (sm_90).
#include "kernels/grid_sync.h"

#include "kernels/grid_sync.cuh"
#include "kernels/reduce.cuh"

#define GS_THREADS 256

__global__ void __launch_bounds__(GS_THREADS)
    chunk_prefix_kernel(long long *out, const int *x, int n, int chunk, int first_chunk, unsigned *counter) {
    __shared__ long long scratch[GS_THREADS];
    const int c = first_chunk + (int)blockIdx.x;
    const long long begin = (long long)c * chunk;
    const long long end = begin + chunk < n ? begin + chunk : n;
    emx_pdl_wait(); // x may be the previous kernel's output
    long long sum = 0;
    for (long long i = begin + threadIdx.x; i < end; i += blockDim.x) sum += x[i];
    sum = emxr::block_reduce(sum, scratch, emxr::SumOp());
    emx_grid_wait(counter, (unsigned)c); // chunks 0..c-1 have published out[0..c-1]
    if (threadIdx.x == 0) out[c] = (c > 0 ? out[c - 1] : 0) + sum;
    emx_grid_signal(counter, 1);
    emx_pdl_trigger(); // the next kernel's blocks may start (they wait in emx_pdl_wait)
}

extern "C" cudaError_t emx_cuda_chunk_prefix_sums(long long *out, const int *x, int n, int chunk, unsigned *counter,
                                                  cudaStream_t stream) {
    if (!out || !x || !counter || n <= 0 || chunk <= 0) return cudaErrorInvalidValue;
    const int chunks = (int)(((long long)n + chunk - 1) / chunk);
    int fit = 0;
    cudaError_t err = emx_max_resident_blocks(chunk_prefix_kernel, GS_THREADS, 0, &fit);
    if (err != cudaSuccess) return err;
    if (fit < 1) return cudaErrorInvalidConfiguration;
    err = cudaMemsetAsync(counter, 0, sizeof *counter, stream);
    for (int first = 0; first < chunks && err == cudaSuccess; first += fit) {
        const int blocks = chunks - first < fit ? chunks - first : fit;
        void *args[] = {&out, &x, &n, &chunk, &first, &counter};
        err = cudaLaunchCooperativeKernel(chunk_prefix_kernel, dim3(blocks), dim3(GS_THREADS), args, 0, stream);
    }
    return err;
}
