// test_grid.cpp — launch shapes: 1D/2D/3D grids and blocks, odd sizes, the 1024-thread limit,
// and the built-in variables every thread sees.
#include <criterion/criterion.h>

#include <vector>

#include "emu_test.h"

// Every thread of every block records its coordinates at its global linear index.
__global__ void coords(uint4 *out) {
    unsigned bx = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    unsigned per_block = blockDim.x * blockDim.y * blockDim.z;
    unsigned tx = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    __syncthreads(); // a barrier with a 3-D block: all threads must meet
    out[bx * per_block + tx] = make_uint4(threadIdx.x | threadIdx.y << 10 | threadIdx.z << 20,
                                          blockIdx.x | blockIdx.y << 10 | blockIdx.z << 20,
                                          blockDim.x | blockDim.y << 10 | blockDim.z << 20,
                                          gridDim.x | gridDim.y << 10 | gridDim.z << 20);
}

static void check_shape(dim3 grid, dim3 block) {
    unsigned total = grid.x * grid.y * grid.z * block.x * block.y * block.z;
    DeviceBuffer<uint4> dout(total);
    coords<<<grid, block>>>(dout.ptr);
    cr_assert_eq(cudaGetLastError(), cudaSuccess);
    std::vector<uint4> out = dout.to_host();
    unsigned i = 0;
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++)
                for (unsigned tz = 0; tz < block.z; tz++)
                    for (unsigned ty = 0; ty < block.y; ty++)
                        for (unsigned tx = 0; tx < block.x; tx++, i++) {
                            cr_assert_eq(out[i].x, tx | ty << 10 | tz << 20, "thread at %u", i);
                            cr_assert_eq(out[i].y, bx | by << 10 | bz << 20);
                            cr_assert_eq(out[i].z, block.x | block.y << 10 | block.z << 20);
                            cr_assert_eq(out[i].w, grid.x | grid.y << 10 | grid.z << 20);
                        }
}

Test(emu_grid, one_two_and_three_dimensions) {
    check_shape(dim3(3), dim3(37));
    check_shape(dim3(2, 3), dim3(5, 7));
    check_shape(dim3(2, 2, 3), dim3(3, 5, 7)); // 105 threads: a partial last warp
    check_shape(dim3(1), dim3(1024));
    check_shape(dim3(1), dim3(1, 1, 64));
}

Test(emu_grid, bad_shapes_are_launch_errors) {
    DeviceBuffer<uint4> dout(1);
    coords<<<1, 1025>>>(dout.ptr);
    cr_assert_eq(cudaGetLastError(), cudaErrorInvalidConfiguration);
    coords<<<dim3(1), dim3(32, 32, 2)>>>(dout.ptr);
    cr_assert_eq(cudaGetLastError(), cudaErrorInvalidConfiguration);
    coords<<<0, 32>>>(dout.ptr);
    cr_assert_eq(cudaGetLastError(), cudaErrorInvalidConfiguration);
    coords<<<dim3(1, 70000), 1>>>(dout.ptr);
    cr_assert_eq(cudaGetLastError(), cudaErrorInvalidConfiguration);
    cr_assert_eq(cudaGetLastError(), cudaSuccess); // reading the error cleared it
}

// The reverse schedule also reverses the order of the blocks: a kernel in which each block reads
// what the previous block wrote (a race between blocks) gives different results.
__global__ void chain(int *x) {
    if (threadIdx.x == 0) x[blockIdx.x + 1] = x[blockIdx.x] + 1;
}

Test(emu_grid, reverse_schedule_reverses_block_order) {
    DeviceBuffer<int> d(9);
    auto run = [&] {
        cudaMemset(d.ptr, 0, 9 * sizeof(int));
        chain<<<8, 32>>>(d.ptr);
        cr_assert_eq(cudaGetLastError(), cudaSuccess);
        return d.to_host();
    };
    auto outs = emu::run_both_schedules(run);
    cr_assert_eq(outs.first[8], 8, "forward: blocks in order, the chain completes");
    cr_assert_eq(outs.second[8], 1, "reverse: the last block runs first");
}
