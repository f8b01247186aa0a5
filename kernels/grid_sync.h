// grid_sync.h — a chain of blocks through counters in global memory (kernels/grid_sync.cu): the
// reference use of kernels/grid_sync.cuh, sized for residency as a persistent kernel must be.
#ifndef ENTROPIX_KERNELS_GRID_SYNC_H
#define ENTROPIX_KERNELS_GRID_SYNC_H

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

// Running totals over chunks of x: out[c] = x[0] + ... + x[min(n, (c + 1) * chunk) - 1] for
// c < ceil(n / chunk) (device arrays; exact, in 64-bit integers). One block per chunk; block c
// waits until chunks 0..c-1 have published their totals (*counter >= c), so out[c] =
// out[c - 1] + its own sum. *counter (device memory, 4 bytes) is set to 0 first and ends at the
// number of chunks. The grid is at most what the device holds at once (occupancy x SMs); more
// chunks go in several launches of that size, one after the other on the stream.
cudaError_t emx_cuda_chunk_prefix_sums(long long *out, const int *x, int n, int chunk, unsigned *counter,
                                       cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
