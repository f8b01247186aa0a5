// test_broken.cpp — deliberately broken kernels that the emulator must catch. Each test fails
// if its detection is removed: the race one if the two schedules stop differing, the barrier
// and shuffle ones if the fault is not reported (with kernel, block and thread), the memory
// ones if AddressSanitizer or the argument check stays silent.
#include <criterion/criterion.h>

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "emu_test.h"
#include "kernels/common.cuh"

// ---- a missing __syncthreads: caught by comparing the two thread schedules ----

// Each thread stores its value, then reads its neighbour's. Without the barrier the neighbour
// may not have stored yet: under the forward schedule thread t runs before t + 1 and reads the
// fill pattern; under reverse it reads the right value.
template <bool WITH_BARRIER>
__global__ void rotate(const float *in, float *out) {
    __shared__ float tile[64];
    int t = threadIdx.x;
    tile[t] = in[blockIdx.x * 64 + t];
    if (WITH_BARRIER) __syncthreads();
    out[blockIdx.x * 64 + t] = tile[(t + 1) % 64];
}

static std::vector<float> run_rotate(bool with_barrier) {
    std::vector<float> in(128);
    for (int i = 0; i < 128; i++) in[i] = (float)i;
    DeviceBuffer<float> din(in), dout(128);
    auto run = [&] {
        if (with_barrier)
            rotate<true><<<2, 64>>>(din.ptr, dout.ptr);
        else
            rotate<false><<<2, 64>>>(din.ptr, dout.ptr);
        cr_assert_eq(cudaGetLastError(), cudaSuccess);
        return dout.to_host();
    };
    auto outs = emu::run_both_schedules(run);
    cr_assert_eq(emu::same_under_both_schedules(run), emu::same_output(outs.first, outs.second));
    return emu::same_output(outs.first, outs.second) ? std::vector<float>{1.0f} : std::vector<float>{};
}

Test(emu_broken, missing_syncthreads_differs_between_schedules) {
    cr_assert(run_rotate(false).empty(), "the race was not detected: both schedules gave the same output");
    cr_assert_eq(run_rotate(true).size(), 1u, "the correct kernel must give the same output under both");
}

// ---- divergent barriers and incomplete warp ops: reported faults ----

__global__ void exit_before_barrier(float *x) {
    if (threadIdx.x >= 16 && blockIdx.x == 1) return; // block 1: half the threads leave
    x[threadIdx.x] = 1.0f;
    __syncthreads();
}

__global__ void two_barriers(float *x) {
    if (threadIdx.x % 2) {
        x[threadIdx.x] = 1.0f;
        __syncthreads();
    } else {
        __syncthreads();
    }
}

__global__ void shuffle_half_warp(float *x) {
    if (threadIdx.x >= 16) return;
    x[threadIdx.x] = __shfl_down_sync(0xffffffffu, x[threadIdx.x], 1);
}

__global__ void shuffle_vs_barrier(float *x) {
    if (threadIdx.x < 16)
        x[threadIdx.x] = __shfl_xor_sync(0xffffffffu, x[threadIdx.x], 1);
    else
        __syncthreads();
}

// Runs `launch` in FailureMode::Return; returns the fault message (asserting the launch failed).
template <class F> static std::string fault_of(F launch) {
    emu::set_failure_mode(emu::FailureMode::Return);
    emu::clear_last_fault();
    launch();
    cudaError_t err = cudaGetLastError();
    emu::set_failure_mode(emu::FailureMode::Abort);
    cr_assert_neq(err, cudaSuccess, "the broken launch was not reported");
    return emu::last_fault();
}

static void assert_contains(const std::string &msg, const char *part) {
    cr_assert(msg.find(part) != std::string::npos, "fault message \"%s\" lacks \"%s\"", msg.c_str(), part);
}

Test(emu_broken, thread_exits_before_syncthreads) {
    DeviceBuffer<float> x(64);
    std::string msg = fault_of([&] { exit_before_barrier<<<2, 64>>>(x.ptr); });
    assert_contains(msg, "divergent __syncthreads");
    assert_contains(msg, "kernel exit_before_barrier");
    assert_contains(msg, "block (1,0,0)");
    assert_contains(msg, "exited");
    assert_contains(msg, "test_broken.cpp:");
    // The engine recovered: a correct launch afterwards works.
    exit_before_barrier<<<1, 16>>>(x.ptr);
    cr_assert_eq(cudaGetLastError(), cudaSuccess);
}

Test(emu_broken, threads_at_different_syncthreads) {
    DeviceBuffer<float> x(64);
    std::string msg = fault_of([&] { two_barriers<<<1, 64>>>(x.ptr); });
    assert_contains(msg, "divergent __syncthreads");
    assert_contains(msg, "kernel two_barriers, block (0,0,0)");
    assert_contains(msg, "thread (");
}

Test(emu_broken, shuffle_with_lanes_missing) {
    DeviceBuffer<float> x(32);
    std::string msg = fault_of([&] { shuffle_half_warp<<<1, 32>>>(x.ptr); });
    assert_contains(msg, "__shfl_down_sync");
    assert_contains(msg, "mask 0xffffffff");
    assert_contains(msg, "lane 16 (thread (16,0,0)) exited without arriving");
    msg = fault_of([&] { shuffle_vs_barrier<<<1, 32>>>(x.ptr); });
    assert_contains(msg, "__shfl_xor_sync");
    assert_contains(msg, "lane 16 (thread (16,0,0)) waits at __syncthreads");
}

__global__ void lane_outside_mask(float *x) { x[threadIdx.x] = __shfl_sync(0x1u, x[threadIdx.x], 0); }

Test(emu_broken, lane_not_in_its_mask) {
    DeviceBuffer<float> x(32);
    std::string msg = fault_of([&] { lane_outside_mask<<<1, 2>>>(x.ptr); });
    assert_contains(msg, "not in the mask");
    assert_contains(msg, "thread (1,0,0)");
}

// Lane 0 of a 16-lane last warp reads lane 16, which does not exist (garbage on a GPU); which
// lane reports it first depends on the schedule.
__global__ void read_missing_lane(float *x) {
    x[threadIdx.x] = __shfl_down_sync(0xffffffffu, x[threadIdx.x], 16);
}

Test(emu_broken, shuffle_from_a_lane_past_the_block) {
    DeviceBuffer<float> x(48);
    std::string msg = fault_of([&] { read_missing_lane<<<1, 48>>>(x.ptr); });
    assert_contains(msg, "__shfl_down_sync reads lane");
    assert_contains(msg, "which does not exist (the block's last warp is partial)");
}

// kernels/common.cuh's warp reductions (one rendezvous here, emu::warp_reduce) keep the
// shuffles' faults: lanes that do not arrive, lanes past a partial last warp, and the signed
// overflow UBSan reports in the shuffles' int sum.
__global__ void warp_sum_half_warp(float *x) {
    if (threadIdx.x >= 16) return;
    x[threadIdx.x] = emx_warp_sum(x[threadIdx.x]);
}
__global__ void warp_max_partial_warp(float *x) { x[threadIdx.x] = emx_warp_max(x[threadIdx.x]); }
__global__ void warp_sum_int_overflow(int *x) { x[threadIdx.x] = emx_warp_sum_int(x[threadIdx.x]); }

Test(emu_broken, warp_reductions_keep_the_shuffles_faults) {
    DeviceBuffer<float> x(48);
    std::string msg = fault_of([&] { warp_sum_half_warp<<<1, 32>>>(x.ptr); });
    assert_contains(msg, "emx_warp_sum (five __shfl_xor_sync)");
    assert_contains(msg, "lane 16 (thread (16,0,0)) exited without arriving");
    msg = fault_of([&] { warp_max_partial_warp<<<1, 48>>>(x.ptr); });
    assert_contains(msg, "emx_warp_max (five __shfl_xor_sync) reads lane 16");
    assert_contains(msg, "which does not exist (the block's last warp is partial)");
    std::vector<int> big(32, 1 << 27);  // 32 x 2^27 = 2^32: past INT_MAX at the last step
    DeviceBuffer<int> q(big);
    msg = fault_of([&] { warp_sum_int_overflow<<<1, 32>>>(q.ptr); });
    assert_contains(msg, "emx_warp_sum_int (five __shfl_xor_sync): signed integer overflow");
    std::vector<int> fits(32, 1 << 25);  // 2^30: no fault, every lane the sum
    DeviceBuffer<int> q2(fits);
    warp_sum_int_overflow<<<1, 32>>>(q2.ptr);
    cr_assert_eq(cudaGetLastError(), cudaSuccess);
    for (int v : q2.to_host()) cr_assert_eq(v, 1 << 30);
}

// In the default failure mode the fault aborts the test process.
Test(emu_broken, default_mode_aborts, .signal = SIGABRT) {
    DeviceBuffer<float> x(64);
    two_barriers<<<1, 64>>>(x.ptr);
}

// ---- memory: a host pointer as kernel argument; out-of-bounds accesses (AddressSanitizer) ----

__global__ void scale(float *x, int n) {
    int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) x[i] *= 2.0f;
}

Test(emu_broken, host_pointer_argument) {
    std::vector<float> host(8, 1.0f);
    std::string msg = fault_of([&] { scale<<<1, 8>>>(host.data(), 8); });
    assert_contains(msg, "kernel scale");
    assert_contains(msg, "argument 1");
    cr_assert_eq(host[0], 1.0f, "the kernel must not have run");
}

// Runs `body` in a forked child with stderr captured; returns what it printed and its status.
template <class F> static std::string run_in_child(F body, int *status) {
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        body();
        _exit(0); // not reached if the sanitizer caught the access
    }
    close(fds[1]);
    std::string out;
    char buf[4096];
    ssize_t got;
    while ((got = read(fds[0], buf, sizeof buf)) > 0) out.append(buf, (size_t)got);
    close(fds[0]);
    waitpid(pid, status, 0);
    return out;
}

// Writes one element past the end: n + 1 threads with the bounds check off by one.
__global__ void write_past_end(float *x, int n) {
    int i = (int)threadIdx.x;
    if (i <= n) x[i] = 1.0f;
}

Test(emu_broken, out_of_bounds_global_write_is_an_asan_report) {
    int status = 0;
    std::string err = run_in_child(
        [] {
            float *x;
            cudaMalloc((void **)&x, 40 * sizeof(float));
            write_past_end<<<1, 64>>>(x, 40);
        },
        &status);
    cr_assert(!(WIFEXITED(status) && WEXITSTATUS(status) == 0), "the out-of-bounds write went unnoticed");
    assert_contains(err, "AddressSanitizer: heap-buffer-overflow");
    assert_contains(err, "WRITE of size 4");
    assert_contains(err, "write_past_end");
}

// Dynamic shared memory one float too small for the block.
__global__ void shared_too_small(float *out) {
    extern __shared__ float buf[];
    buf[threadIdx.x] = (float)threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = buf[threadIdx.x];
}

Test(emu_broken, out_of_bounds_shared_write_is_an_asan_report) {
    int status = 0;
    std::string err = run_in_child(
        [] {
            float *out;
            cudaMalloc((void **)&out, 32 * sizeof(float));
            shared_too_small<<<1, 32, 31 * sizeof(float)>>>(out);
        },
        &status);
    cr_assert(!(WIFEXITED(status) && WEXITSTATUS(status) == 0), "the shared-memory overflow went unnoticed");
    assert_contains(err, "AddressSanitizer: heap-buffer-overflow");
    assert_contains(err, "shared_too_small");
}

// A static __shared__ array indexed one past its end by a block one thread too large.
__global__ void static_shared_overflow(float *out) {
    __shared__ float tile[32];
    tile[threadIdx.x] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = tile[threadIdx.x];
}

Test(emu_broken, out_of_bounds_static_shared_is_an_asan_report) {
    int status = 0;
    std::string err = run_in_child(
        [] {
            float *out;
            cudaMalloc((void **)&out, 33 * sizeof(float));
            static_shared_overflow<<<1, 33>>>(out);
        },
        &status);
    cr_assert(!(WIFEXITED(status) && WEXITSTATUS(status) == 0), "the shared-memory overflow went unnoticed");
    // The array keeps its type (float[32]), so UBSan's bounds check sees the index before
    // ASan sees the address; either report will do.
    cr_assert(err.find("runtime error: index 32 out of bounds for type 'float [32]'") != std::string::npos ||
                  err.find("AddressSanitizer: heap-buffer-overflow") != std::string::npos,
              "no sanitizer report: %s", err.c_str());
}

// A thread's local array read one past its end by the last thread of a block whose fibers fill
// more than one region of stacks (src/fiber.h: AddressSanitizer is told a region, not a fiber's
// own stack, and switches within a region are not annotated): the report still names the frame.
// (Read in a function of its own: UBSan's bounds and object-size checks do not see the array
// there, so the report is AddressSanitizer's.)
__device__ __attribute__((noinline)) float read_at(const float *p, int i) { return p[i]; }
__global__ void local_array_overflow(float *out, int k) {
    float a[8];
    for (int i = 0; i < 8; i++) a[i] = (float)(i + (int)threadIdx.x);
    __syncthreads();
    out[threadIdx.x] = read_at(a, threadIdx.x == blockDim.x - 1 ? k : 0);
}

Test(emu_broken, out_of_bounds_local_array_is_an_asan_report_naming_the_frame) {
    int status = 0;
    std::string err = run_in_child(
        [] {
            float *out;
            cudaMalloc((void **)&out, 1024 * sizeof(float));
            local_array_overflow<<<1, 1024>>>(out, 8);
        },
        &status);
    cr_assert(!(WIFEXITED(status) && WEXITSTATUS(status) == 0), "the stack overflow went unnoticed");
    assert_contains(err, "AddressSanitizer: stack-buffer-overflow");
    assert_contains(err, "READ of size 4");
    assert_contains(err, "in frame");
    assert_contains(err, "local_array_overflow");
}

// A kernel launched on memory that was already freed: refused before it runs.
Test(emu_broken, freed_pointer_argument) {
    float *x;
    cr_assert_eq(cudaMalloc((void **)&x, 64), cudaSuccess);
    cr_assert_eq(cudaFree(x), cudaSuccess);
    std::string msg = fault_of([&] { scale<<<1, 16>>>(x, 16); });
    assert_contains(msg, "points to no device allocation");
}
