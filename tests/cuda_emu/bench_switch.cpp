// bench_switch.cpp — cost of the emulator's scheduling: nanoseconds per thread per
// __syncthreads and per warp shuffle, for a 1024-thread block. `make emu-bench` builds it twice,
// with the x86-64 switch and with ucontext (-DEMU_FIBER_UCONTEXT), and runs both.
#include <stdio.h>
#include <time.h>

__global__ void barriers(int *out, int rounds) {
    int acc = 0;
    for (int r = 0; r < rounds; r++) {
        acc += (int)threadIdx.x ^ r;
        __syncthreads();
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

__global__ void shuffles(int *out, int rounds) {
    int v = (int)threadIdx.x;
    for (int r = 0; r < rounds; r++) v = (v ^ __shfl_xor_sync(0xffffffffu, v, r & 31)) + 1;
    out[blockIdx.x * blockDim.x + threadIdx.x] = v;
}

static double now_s() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main() {
    const int blocks = 4, threads = 1024, rounds = 200;
    int *out;
    cudaMalloc((void **)&out, blocks * threads * sizeof(int));
    barriers<<<blocks, threads>>>(out, 1); // warm-up: creates the fibers
    double t0 = now_s();
    barriers<<<blocks, threads>>>(out, rounds);
    double t1 = now_s();
    shuffles<<<blocks, threads>>>(out, rounds);
    double t2 = now_s();
    double n = (double)blocks * threads * rounds;
    printf("%-9s __syncthreads: %6.1f ns per thread and barrier; __shfl_xor_sync: %6.1f ns per lane and shuffle\n",
           EMU_FIBER_NAME, (t1 - t0) / n * 1e9, (t2 - t1) / n * 1e9);
    cudaFree(out);
    return cudaGetLastError() != cudaSuccess;
}
