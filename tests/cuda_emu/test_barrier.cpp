// test_barrier.cpp — __syncthreads: a block-wide sum in shared memory, checked against the CPU,
// for block sizes that are and are not multiples of the warp, under both thread schedules.
#include <criterion/criterion.h>

#include <vector>

#include "emu_test.h"

// One block per row: each thread sums a strided slice, then a tree reduction in shared memory.
template <int BLOCK>
__global__ void row_sum(const float *x, float *out, int n) {
    __shared__ float partial[BLOCK];
    const float *row = x + (size_t)blockIdx.x * n;
    float s = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += row[i];
    partial[threadIdx.x] = s;
    __syncthreads();
    for (int stride = BLOCK / 2; stride > 0; stride /= 2) {
        if ((int)threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}

// The same with a block that is not a power of two: the first thread adds everything.
__global__ void row_sum_serial(const float *x, float *out, int n) {
    extern __shared__ float vals[];
    const float *row = x + (size_t)blockIdx.x * n;
    for (int i = threadIdx.x; i < n; i += blockDim.x) vals[i] = row[i];
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (int i = 0; i < n; i++) s += vals[i];
        out[blockIdx.x] = s;
    }
}

Test(emu_barrier, tree_reduction_matches_cpu) {
    const int rows = 5, n = 1000;
    std::vector<float> x(rows * n);
    for (int i = 0; i < rows * n; i++) x[i] = (float)((i * 37) % 101) - 50.0f; // small ints: exact sums
    DeviceBuffer<float> dx(x), dout(rows);
    auto run = [&] {
        row_sum<128><<<rows, 128>>>(dx.ptr, dout.ptr, n);
        cr_assert_eq(cudaGetLastError(), cudaSuccess);
        return dout.to_host();
    };
    auto outs = emu::run_both_schedules(run);
    for (int r = 0; r < rows; r++) {
        float want = 0.0f;
        for (int i = 0; i < n; i++) want += x[r * n + i];
        cr_assert_eq(outs.first[r], want, "row %d: %f != %f", r, outs.first[r], want);
        cr_assert_eq(outs.second[r], want, "row %d (reverse schedule)", r);
    }
}

Test(emu_barrier, dynamic_shared_odd_block) {
    const int rows = 3, n = 77;
    std::vector<float> x(rows * n);
    for (int i = 0; i < rows * n; i++) x[i] = (float)(i % 13);
    DeviceBuffer<float> dx(x), dout(rows);
    row_sum_serial<<<rows, 33, n * sizeof(float)>>>(dx.ptr, dout.ptr, n);
    cr_assert_eq(cudaGetLastError(), cudaSuccess);
    std::vector<float> out = dout.to_host();
    for (int r = 0; r < rows; r++) {
        float want = 0.0f;
        for (int i = 0; i < n; i++) want += x[r * n + i];
        cr_assert_eq(out[r], want);
    }
}
