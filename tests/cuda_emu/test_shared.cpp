// test_shared.cpp — __shared__ memory: one instance per block (static and dynamic), shared by
// all threads of the block, distinct per template instantiation, holding the fill pattern (not
// zeros) until written.
#include <criterion/criterion.h>

#include <string.h>

#include <vector>

#include "emu_test.h"

// Each block writes its own id into its shared array, syncs, and every thread reads a slot that
// another thread wrote: a block seeing another block's array would read a foreign id.
__global__ void static_isolation(int *out) {
    __shared__ int ids[64];
    __shared__ int total;
    int t = threadIdx.x;
    if (t == 0) total = 0;
    ids[t] = (int)blockIdx.x * 1000 + t;
    __syncthreads();
    atomicAdd(&total, ids[63 - t]);
    __syncthreads();
    out[blockIdx.x * 64 + t] = ids[63 - t];
    if (t == 0) out[gridDim.x * 64 + blockIdx.x] = total;
}

Test(emu_shared, static_shared_is_per_block) {
    const int blocks = 5;
    DeviceBuffer<int> dout(blocks * 64 + blocks);
    static_isolation<<<blocks, 64>>>(dout.ptr);
    cr_assert_eq(cudaGetLastError(), cudaSuccess);
    std::vector<int> out = dout.to_host();
    for (int b = 0; b < blocks; b++) {
        int sum = 0;
        for (int t = 0; t < 64; t++) {
            cr_assert_eq(out[b * 64 + t], b * 1000 + 63 - t, "block %d thread %d", b, t);
            sum += b * 1000 + t;
        }
        cr_assert_eq(out[blocks * 64 + b], sum);
    }
}

// Two extern __shared__ declarations alias the same dynamic area (as in CUDA).
__global__ void dynamic_isolation(int *out, int n) {
    extern __shared__ int dyn[];
    extern __shared__ unsigned char bytes[];
    for (int i = threadIdx.x; i < n; i += blockDim.x) dyn[i] = (int)blockIdx.x * 100000 + i;
    __syncthreads();
    const int *same = (const int *)bytes;
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[blockIdx.x * n + i] = same[n - 1 - i];
}

Test(emu_shared, dynamic_shared_is_per_block_and_sized_by_the_launch) {
    const int blocks = 4, n = 300;
    DeviceBuffer<int> dout(blocks * n);
    dynamic_isolation<<<blocks, 96, n * sizeof(int)>>>(dout.ptr, n);
    cr_assert_eq(cudaGetLastError(), cudaSuccess);
    std::vector<int> out = dout.to_host();
    for (int b = 0; b < blocks; b++)
        for (int i = 0; i < n; i++) cr_assert_eq(out[b * n + i], b * 100000 + n - 1 - i);
}

// Shared memory starts as the schedule's fill pattern: 0xff bytes (forward), zeros (reverse).
__global__ void read_unwritten(unsigned *out) {
    __shared__ unsigned never_written[4];
    out[threadIdx.x] = never_written[threadIdx.x];
}

Test(emu_shared, starts_with_the_schedule_pattern) {
    DeviceBuffer<unsigned> dout(4);
    auto outs = emu::run_both_schedules([&] {
        read_unwritten<<<1, 4>>>(dout.ptr);
        cr_assert_eq(cudaGetLastError(), cudaSuccess);
        return dout.to_host();
    });
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(outs.first[i], 0xffffffffu);
        cr_assert_eq(outs.second[i], 0u);
    }
    cr_assert_not(emu::same_output(outs.first, outs.second));
}

// Two instantiations of one template helper get two arrays, even within one block.
template <int N> __device__ int fill_and_sum(int base) {
    __shared__ int buf[N];
    if ((int)threadIdx.x < N) buf[threadIdx.x] = base + (int)threadIdx.x;
    __syncthreads();
    int s = 0;
    for (int i = 0; i < N; i++) s += buf[i];
    __syncthreads();
    return s;
}

__global__ void two_instantiations(int *out) {
    int a = fill_and_sum<8>(100);
    int b = fill_and_sum<16>(1000);
    int c = fill_and_sum<8>(0); // the <8> array again: reused, rewritten
    if (threadIdx.x == 0) {
        out[0] = a;
        out[1] = b;
        out[2] = c;
    }
}

Test(emu_shared, template_instantiations_are_distinct) {
    DeviceBuffer<int> dout(3);
    two_instantiations<<<1, 16>>>(dout.ptr);
    cr_assert_eq(cudaGetLastError(), cudaSuccess);
    std::vector<int> out = dout.to_host();
    cr_assert_eq(out[0], 8 * 100 + 28);
    cr_assert_eq(out[1], 16 * 1000 + 120);
    cr_assert_eq(out[2], 28);
}

// More dynamic shared memory than the default 48 KiB needs cudaFuncSetAttribute.
__global__ void big_dynamic(float *out) {
    extern __shared__ float big[];
    big[threadIdx.x * 1000] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = big[threadIdx.x * 1000];
}

Test(emu_shared, over_48k_needs_the_attribute) {
    DeviceBuffer<float> dout(16);
    size_t bytes = 64 * 1024;
    big_dynamic<<<1, 16, bytes>>>(dout.ptr);
    cr_assert_eq(cudaGetLastError(), cudaErrorInvalidValue);
    cr_assert_eq(cudaFuncSetAttribute(big_dynamic, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes), cudaSuccess);
    big_dynamic<<<1, 16, bytes>>>(dout.ptr);
    cr_assert_eq(cudaGetLastError(), cudaSuccess);
    for (float v : dout.to_host()) cr_assert_eq(v, 1.0f);
}
