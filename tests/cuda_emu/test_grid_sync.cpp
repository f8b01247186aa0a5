// test_grid_sync.cpp — blocks of one launch that wait on each other (kernels/grid_sync.cuh):
// co-resident blocks under both schedules, the deadlock report, residency (occupancy, SM count,
// cooperative launches) and programmatic dependent launch, directly and in a captured graph: a
// kernel that reads the previous kernel's output before its wait sees stale data.
#include <criterion/criterion.h>
#include <stdlib.h>

#include <string>
#include <vector>

#include "emu/kernel_runs.h"
#include "emu_test.h"
#include "kernels/grid_sync.cuh"

// Block i sums its slice of x in shared memory, then waits for block i + 1's signal before it
// writes out[i] = out[i + 1] + its sum, records its place in the finishing order, and signals.
// Block N-1 must finish first: a schedule that runs block 0 to completion first never ends.
// The sum lives in shared memory across the wait, so a parked block's shared memory must
// survive the blocks that run meanwhile.
__global__ void wait_for_next(const int *x, long long *out, unsigned *flags, int *order, unsigned *finished) {
    __shared__ long long partial[64];
    const unsigned i = blockIdx.x, last = gridDim.x - 1;
    partial[threadIdx.x] = x[i * blockDim.x + threadIdx.x];
    __syncthreads();
    for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
        __syncthreads();
    }
    if (i < last) emx_grid_wait(&flags[i + 1], 1);
    if (threadIdx.x == 0) {
        out[i] = (i < last ? out[i + 1] : 0) + partial[0];
        order[atomicAdd(finished, 1u)] = (int)i;
    }
    emx_grid_signal(&flags[i], 1);
}

// Every block of the grid waits for `counter` >= target: a grid-wide barrier in steps.
__device__ void grid_barrier(unsigned *counter, unsigned step) {
    emx_grid_signal(counter, 1);
    emx_grid_wait(counter, step * gridDim.x);
}

// A persistent kernel of `steps` steps: at each step block b reads every block's value of the
// previous step (a grid barrier between steps) and writes v'[b] = sum_j v[j] * (j + 1) + b,
// modulo 2^32 (unsigned: exact and order-independent, so the host twin must match bit for bit).
__global__ void stepped_mix(unsigned *values, int steps, unsigned *counter) {
    const unsigned n = gridDim.x, b = blockIdx.x;
    for (int s = 1; s <= steps; s++) {
        const unsigned *prev = values + (size_t)((s - 1) % 2) * n;
        unsigned *next = values + (size_t)(s % 2) * n;
        if (threadIdx.x == 0) {
            unsigned acc = b;
            for (unsigned j = 0; j < n; j++) acc += prev[j] * (j + 1);
            next[b] = acc;
        }
        grid_barrier(counter, (unsigned)s);
    }
}

// Two blocks, each waiting for the other's signal before giving its own: a true deadlock.
__global__ void deadlock_pair(unsigned *flags) {
    const unsigned other = 1 - blockIdx.x;
    emx_grid_wait(&flags[other], 1);
    emx_grid_signal(&flags[blockIdx.x], 1);
}

__global__ void add_one(int *x) { x[threadIdx.x] += 1; }

struct WaitRun {
    std::vector<long long> out;
    std::vector<int> order;
};

static WaitRun run_wait_for_next(int blocks, cudaError_t *err) {
    std::vector<int> x(blocks * 64);
    for (size_t k = 0; k < x.size(); k++) x[k] = (int)(k * 7 % 23) - 11;
    DeviceBuffer<int> dx(x), dorder(blocks);
    DeviceBuffer<long long> dout(blocks);
    DeviceBuffer<unsigned> dflags(blocks), dfinished(1);
    wait_for_next<<<blocks, 64>>>(dx.ptr, dout.ptr, dflags.ptr, dorder.ptr, dfinished.ptr);
    *err = cudaGetLastError();
    return WaitRun{dout.to_host(), dorder.to_host()};
}

Test(emu_grid_sync, block_waits_for_the_next_one_under_both_schedules) {
    const int blocks = 9;
    cudaError_t errs[2];
    int k = 0;
    auto outs = emu::run_both_schedules([&] { return run_wait_for_next(blocks, &errs[k++]); });
    cr_assert_eq(errs[0], cudaSuccess);
    cr_assert_eq(errs[1], cudaSuccess);
    long long want = 0;
    for (int i = blocks - 1; i >= 0; i--) {
        long long sum = 0;
        for (int t = 0; t < 64; t++) sum += (long long)((i * 64 + t) * 7 % 23) - 11;
        want += sum;
        cr_assert_eq(outs.first.out[i], want, "block %d: %lld, want %lld", i, outs.first.out[i], want);
        cr_assert_eq(outs.second.out[i], want, "block %d (reverse schedule)", i);
        // Only block i + 1's signal lets block i finish: the finishing order is N-1 ... 0.
        cr_assert_eq(outs.first.order[blocks - 1 - i], i);
        cr_assert_eq(outs.second.order[blocks - 1 - i], i);
    }
}

Test(emu_grid_sync, repeated_coresident_launches_reuse_their_fibers) {
    cudaError_t err;
    for (emu::Schedule s : {emu::Schedule::Forward, emu::Schedule::Reverse}) {
        emu::set_schedule(s);
        run_wait_for_next(9, &err);
        cr_assert_eq(err, cudaSuccess);
        size_t made = emu::fibers_made();
        cr_assert_geq(made, 9u * 64u, "9 co-resident blocks of 64 threads (forward): a fiber each");
        for (int i = 0; i < 5; i++) {
            run_wait_for_next(9, &err);
            cr_assert_eq(err, cudaSuccess);
        }
        cr_assert_eq(emu::fibers_made(), made, "made %zu fibers, then %zu", made, emu::fibers_made());
    }
}

// The host twin of stepped_mix.
static std::vector<unsigned> stepped_mix_host(std::vector<unsigned> v, int steps) {
    const size_t n = v.size();
    for (int s = 1; s <= steps; s++) {
        std::vector<unsigned> next(n);
        for (size_t b = 0; b < n; b++) {
            unsigned acc = (unsigned)b;
            for (size_t j = 0; j < n; j++) acc += v[j] * (unsigned)(j + 1);
            next[b] = acc;
        }
        v = next;
    }
    return v;
}

Test(emu_grid_sync, persistent_kernel_with_grid_barriers_matches_host) {
    const int blocks = 12, steps = 5;
    std::vector<unsigned> init(2 * blocks, 0);
    for (int b = 0; b < blocks; b++) init[b] = 1000u + 17u * (unsigned)b;
    std::vector<unsigned> want = stepped_mix_host(std::vector<unsigned>(init.begin(), init.begin() + blocks), steps);
    auto outs = emu::run_both_schedules([&] {
        DeviceBuffer<unsigned> values(init), counter(1);
        stepped_mix<<<blocks, 32>>>(values.ptr, steps, counter.ptr);
        cr_assert_eq(cudaGetLastError(), cudaSuccess);
        std::vector<unsigned> all = values.to_host();
        cr_assert_eq(counter.to_host()[0], (unsigned)(blocks * steps));
        return std::vector<unsigned>(all.begin() + (steps % 2) * blocks, all.begin() + (steps % 2 + 1) * blocks);
    });
    for (int b = 0; b < blocks; b++) {
        cr_assert_eq(outs.first[b], want[b], "block %d: %u, want %u", b, outs.first[b], want[b]);
        cr_assert_eq(outs.second[b], want[b], "block %d (reverse schedule)", b);
    }
}

static void expect_fault_contains(const std::string &fault, const std::string &part) {
    cr_assert(fault.find(part) != std::string::npos, "fault \"%s\" lacks \"%s\"", fault.c_str(), part.c_str());
}

Test(emu_grid_sync, deadlock_is_reported_with_blocks_and_counters) {
    emu::set_failure_mode(emu::FailureMode::Return);
    for (emu::Schedule s : {emu::Schedule::Forward, emu::Schedule::Reverse}) {
        emu::set_schedule(s);
        emu::clear_last_fault();
        DeviceBuffer<unsigned> flags(2);
        deadlock_pair<<<2, 32>>>(flags.ptr);
        cr_assert_eq(cudaGetLastError(), cudaErrorLaunchFailure);
        std::string fault = emu::last_fault();
        char c0[64], c1[64];
        snprintf(c0, sizeof c0, "counter %p >= 1 (it holds 0)", (void *)&flags.ptr[0]);
        snprintf(c1, sizeof c1, "counter %p >= 1 (it holds 0)", (void *)&flags.ptr[1]);
        expect_fault_contains(fault, "kernel deadlock_pair: deadlock: ");
        expect_fault_contains(fault, std::string("block (0,0,0) thread (0,0,0) waits for ") + c1);
        expect_fault_contains(fault, std::string("block (1,0,0) thread (0,0,0) waits for ") + c0);
        expect_fault_contains(fault, "every block has started");
        // The emulator recovers: the next launch runs on fresh fibers.
        DeviceBuffer<int> x(32);
        add_one<<<1, 32>>>(x.ptr);
        cr_assert_eq(cudaGetLastError(), cudaSuccess);
        cr_assert_eq(x.to_host()[31], 1);
    }
}

// Every block waits for a counter that nothing raises: the report lists the first 8 waits, in
// the order the blocks parked (0..7 forward, 11..4 reverse).
__global__ void wait_forever(unsigned *counter) { emx_grid_wait(counter, 1); }

Test(emu_grid_sync, long_deadlock_report_lists_the_first_waits) {
    emu::set_failure_mode(emu::FailureMode::Return);
    for (emu::Schedule s : {emu::Schedule::Forward, emu::Schedule::Reverse}) {
        emu::set_schedule(s);
        const bool fwd = s == emu::Schedule::Forward;
        DeviceBuffer<unsigned> counter(1);
        wait_forever<<<12, 32>>>(counter.ptr);
        cr_assert_eq(cudaGetLastError(), cudaErrorLaunchFailure);
        std::string fault = emu::last_fault();
        expect_fault_contains(fault, std::string(fwd ? "block (7,0,0)" : "block (4,0,0)") + " thread (0,0,0) waits for counter");
        cr_assert(fault.find(fwd ? "block (8,0,0)" : "block (3,0,0)") == std::string::npos, "%s", fault.c_str());
        expect_fault_contains(fault, "; and 4 more waiting threads; every block has started");
    }
}

// wait_for_next with blocks of 1024 threads: one per SM (EMU_SM_COUNT, default 4). Under the
// forward schedule blocks 0..3 start first and wait for block 4, which cannot become resident:
// a GPU that starts blocks in order hangs there, and the emulator reports it.
__global__ void wait_for_next_wide(unsigned *flags) {
    const unsigned i = blockIdx.x;
    if (i + 1 < gridDim.x) emx_grid_wait(&flags[i + 1], 1);
    emx_grid_signal(&flags[i], 1);
}

Test(emu_grid_sync, waiting_grid_larger_than_the_device_is_reported) {
    int sms = 0;
    cr_assert_eq(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
    emu::set_failure_mode(emu::FailureMode::Return);
    emu::set_schedule(emu::Schedule::Forward);
    DeviceBuffer<unsigned> flags(sms + 2);
    wait_for_next_wide<<<sms + 2, 1024>>>(flags.ptr);
    cr_assert_eq(cudaGetLastError(), cudaErrorLaunchFailure);
    std::string fault = emu::last_fault();
    expect_fault_contains(fault, "kernel wait_for_next_wide: deadlock: block (0,0,0) thread (0,0,0) waits for counter");
    expect_fault_contains(fault, "2 of the grid's " + std::to_string(sms + 2) + " blocks cannot start: at most " +
                                     std::to_string(sms) + " blocks of this launch are resident at once");
    // A grid that fits runs.
    DeviceBuffer<unsigned> flags2(sms);
    wait_for_next_wide<<<sms, 1024>>>(flags2.ptr);
    cr_assert_eq(cudaGetLastError(), cudaSuccess);
}

Test(emu_grid_sync, occupancy_follows_the_sm_count_and_limits) {
    const char *env = getenv("EMU_SM_COUNT");
    int sms = 0, per_sm = -1;
    cr_assert_eq(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
    cr_assert_eq(sms, env ? atoi(env) : 4);
    cudaDeviceProp prop;
    cr_assert_eq(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
    cr_assert_eq(prop.multiProcessorCount, sms);
    // 64 registers per thread are assumed: 1024 threads per SM; 32 blocks at most.
    const int cases[][3] = {{1024, 0, 1}, {256, 0, 4}, {128, 0, 8}, {32, 0, 32}, {33, 0, 16}, {1, 0, 32}};
    for (const auto &c : cases) {
        cr_assert_eq(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, add_one, c[0], (size_t)c[1]), cudaSuccess);
        cr_assert_eq(per_sm, c[2], "%d threads: %d blocks per SM, want %d", c[0], per_sm, c[2]);
    }
    // Shared memory: 228 KiB per SM, 1 KiB reserved per block; above the kernel's limit, none.
    cr_assert_eq(cudaFuncSetAttribute(add_one, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024), cudaSuccess);
    cr_assert_eq(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, add_one, 32, 100 * 1024), cudaSuccess);
    cr_assert_eq(per_sm, 233472 / (100 * 1024 + 1024));
    cr_assert_eq(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, add_one, 32, 101 * 1024), cudaSuccess);
    cr_assert_eq(per_sm, 0);
    cr_assert_eq(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, add_one, 1025, 0), cudaErrorInvalidValue);
    cudaGetLastError();
    int fit = 0;
    cr_assert_eq(emx_max_resident_blocks(add_one, 256, 0, &fit), cudaSuccess);
    cr_assert_eq(fit, 4 * sms);
}

Test(emu_grid_sync, cooperative_launch_larger_than_the_device_is_refused) {
    int sms = 0, per_sm = 0;
    cr_assert_eq(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
    cr_assert_eq(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, wait_for_next_wide, 1024, 0), cudaSuccess);
    DeviceBuffer<unsigned> flags(sms * per_sm + 1);
    void *args[] = {&flags.ptr};
    long before = emu::kernel_runs("wait_for_next_wide");
    cr_assert_eq(cudaLaunchCooperativeKernel(wait_for_next_wide, dim3(sms * per_sm + 1), dim3(1024), args, 0, nullptr),
                 cudaErrorCooperativeLaunchTooLarge);
    cr_assert_eq(cudaGetLastError(), cudaErrorCooperativeLaunchTooLarge);
    cr_assert_eq(emu::kernel_runs("wait_for_next_wide"), before, "a refused launch must not run");
    // The same through cudaLaunchKernelEx's cooperative attribute.
    cudaLaunchAttribute attr = {};
    attr.id = cudaLaunchAttributeCooperative;
    attr.val.cooperative = 1;
    cudaLaunchConfig_t cfg = {dim3(sms * per_sm + 1), dim3(1024), 0, nullptr, &attr, 1};
    cr_assert_eq(cudaLaunchKernelEx(&cfg, wait_for_next_wide, flags.ptr), cudaErrorCooperativeLaunchTooLarge);
    cudaGetLastError();
    // A grid that fits runs, and its blocks wait on each other.
    long coop = emu::cooperative_kernel_runs("wait_for_next_wide");
    cr_assert_eq(cudaLaunchCooperativeKernel(wait_for_next_wide, dim3(sms * per_sm), dim3(1024), args, 0, nullptr),
                 cudaSuccess);
    cfg.gridDim = dim3(sms * per_sm);
    cr_assert_eq(cudaMemset(flags.ptr, 0, flags.n * sizeof(unsigned)), cudaSuccess);
    cr_assert_eq(cudaLaunchKernelEx(&cfg, wait_for_next_wide, flags.ptr), cudaSuccess);
    cr_assert_eq(emu::cooperative_kernel_runs("wait_for_next_wide"), coop + 2);
    std::vector<unsigned> f = flags.to_host();
    for (int i = 0; i < sms * per_sm; i++) cr_assert_eq(f[i], 1u);
}

// Programmatic dependent launch: the producer writes y = 3 x + 1 and lets the dependent start;
// the consumer waits for it (cudaGridDependencySynchronize) before reading y.
__global__ void pdl_producer(const int *x, int *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 3 * x[i] + 1;
    __threadfence();
    cudaTriggerProgrammaticLaunchCompletion();
}
__global__ void pdl_consumer(const int *y, int *z, int n) {
    cudaGridDependencySynchronize();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) z[i] = y[i] * y[i];
}

static cudaError_t launch_pdl_pair(const int *x, int *y, int *z, int n, cudaStream_t stream) {
    pdl_producer<<<(n + 63) / 64, 64, 0, stream>>>(x, y, n);
    cudaLaunchAttribute attr = {};
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {dim3((n + 63) / 64), dim3(64), 0, stream, &attr, 1};
    return cudaLaunchKernelEx(&cfg, pdl_consumer, y, z, n);
}

Test(emu_grid_sync, programmatic_dependent_launch_direct_and_in_a_graph) {
    const int n = 100;
    std::vector<int> x(n);
    for (int i = 0; i < n; i++) x[i] = i - 40;
    DeviceBuffer<int> dx(x), dy(n), dz(n);
    cudaStream_t stream;
    cr_assert_eq(cudaStreamCreate(&stream), cudaSuccess);
    long pdl = emu::programmatic_kernel_runs("pdl_consumer"), syncs = emu::grid_dependency_syncs();
    long triggers = emu::programmatic_triggers();
    cr_assert_eq(launch_pdl_pair(dx.ptr, dy.ptr, dz.ptr, n, stream), cudaSuccess);
    std::vector<int> z = dz.to_host();
    for (int i = 0; i < n; i++) cr_assert_eq(z[i], (3 * x[i] + 1) * (3 * x[i] + 1));
    cr_assert_eq(emu::programmatic_kernel_runs("pdl_consumer"), pdl + 1);
    cr_assert_eq(emu::programmatic_kernel_runs("pdl_producer"), 0, "the producer had no attribute");
    cr_assert_eq(emu::grid_dependency_syncs(), syncs + 2 * 64);  // every thread of both blocks
    cr_assert_eq(emu::programmatic_triggers(), triggers + 2 * 64);

    // Captured: the graph records both launches, the attribute with the second, and replays them.
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cr_assert_eq(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
    cr_assert_eq(launch_pdl_pair(dx.ptr, dy.ptr, dz.ptr, n, stream), cudaSuccess);
    cr_assert_eq(cudaStreamEndCapture(stream, &graph), cudaSuccess);
    size_t nodes = 0;
    cr_assert_eq(cudaGraphGetNodes(graph, nullptr, &nodes), cudaSuccess);
    cr_assert_eq(nodes, 2u);
    cr_assert_eq(emu::programmatic_kernel_runs("pdl_consumer"), pdl + 1, "captured, not run");
    cr_assert_eq(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    for (int i = 0; i < n; i++) x[i] = 2 * i;
    dx.from_host(x);
    cr_assert_eq(cudaGraphLaunch(exec, stream), cudaSuccess);
    cr_assert_eq(cudaStreamSynchronize(stream), cudaSuccess);
    z = dz.to_host();
    for (int i = 0; i < n; i++) cr_assert_eq(z[i], (6 * i + 1) * (6 * i + 1));
    cr_assert_eq(emu::programmatic_kernel_runs("pdl_consumer"), pdl + 2);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
}

// The emulator runs a programmatic launch's blocks up to their cudaGridDependencySynchronize
// before the kernel launched before it finishes (src/launch_ex.cpp). A chain of three launches, each
// with the attribute: fill writes y = 3 x + 1; square_* read y and write z = y². square_waits
// waits before reading y and gets the answer; square_reads_early reads y first and sees what y
// held before fill ran (the -1s the test left there): a GPU may run it that way.
__global__ void pdl_fill(const int *x, int *y, int n) {
    emx_pdl_trigger();
    emx_pdl_wait();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 3 * x[i] + 1;
}
__global__ void pdl_square_waits(const int *y, int *z, int n) {
    emx_pdl_trigger();
    emx_pdl_wait();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) z[i] = y[i] * y[i];
}
__global__ void pdl_square_reads_early(const int *y, int *z, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = i < n ? y[i] : 0; // before the wait: a race with pdl_fill
    emx_pdl_wait();
    if (i < n) z[i] = v * v;
}
// A kernel that never waits: reported, since the kernel after it could overtake the one before.
__global__ void pdl_never_waits(int *z) { z[threadIdx.x] += 1; }

static cudaLaunchConfig_t pdl_config(int n, cudaStream_t stream, cudaLaunchAttribute *attr) {
    *attr = {};
    attr->id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr->val.programmaticStreamSerializationAllowed = 1;
    return cudaLaunchConfig_t{dim3((n + 63) / 64), dim3(64), 0, stream, attr, 1};
}

// fill then square (early or not), both programmatic; z to the host.
static std::vector<int> fill_then_square(bool early, const std::vector<int> &x, cudaStream_t stream) {
    const int n = (int)x.size();
    DeviceBuffer<int> dx(x), dy(n), dz(n);
    cr_assert_eq(cudaMemset(dy.ptr, 0xff, n * sizeof(int)), cudaSuccess); // y = -1
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = pdl_config(n, stream, &attr);
    cr_assert_eq(cudaLaunchKernelEx(&cfg, pdl_fill, dx.ptr, dy.ptr, n), cudaSuccess);
    if (early)
        cr_assert_eq(cudaLaunchKernelEx(&cfg, pdl_square_reads_early, dy.ptr, dz.ptr, n), cudaSuccess);
    else
        cr_assert_eq(cudaLaunchKernelEx(&cfg, pdl_square_waits, dy.ptr, dz.ptr, n), cudaSuccess);
    cr_assert_eq(cudaStreamSynchronize(stream), cudaSuccess);
    return dz.to_host();
}

Test(emu_grid_sync, programmatic_launch_runs_before_the_kernel_before_it_ends) {
    const int n = 200;
    std::vector<int> x(n);
    for (int i = 0; i < n; i++) x[i] = i - 70;
    cudaStream_t stream;
    cr_assert_eq(cudaStreamCreate(&stream), cudaSuccess);
    for (emu::Schedule s : {emu::Schedule::Forward, emu::Schedule::Reverse}) {
        emu::set_schedule(s);
        std::vector<int> z = fill_then_square(false, x, stream);
        for (int i = 0; i < n; i++) cr_assert_eq(z[i], (3 * x[i] + 1) * (3 * x[i] + 1), "waits: z[%d] = %d", i, z[i]);
        z = fill_then_square(true, x, stream);
        for (int i = 0; i < n; i++) cr_assert_eq(z[i], 1, "reads early: z[%d] = %d, want (-1)² (stale y)", i, z[i]);
    }
    // In a graph the same: the replay overlaps the two launches (a programmatic edge between them).
    DeviceBuffer<int> dx(x), dy(n), dz(n);
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = pdl_config(n, stream, &attr);
    const long edges = emu::programmatic_edges_instantiated();
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cr_assert_eq(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
    cr_assert_eq(cudaMemsetAsync(dy.ptr, 0xff, n * sizeof(int), stream), cudaSuccess);
    cr_assert_eq(cudaLaunchKernelEx(&cfg, pdl_fill, dx.ptr, dy.ptr, n), cudaSuccess); // after a memset: no edge
    cr_assert_eq(cudaLaunchKernelEx(&cfg, pdl_square_reads_early, dy.ptr, dz.ptr, n), cudaSuccess);
    cr_assert_eq(cudaStreamEndCapture(stream, &graph), cudaSuccess);
    cr_assert_eq(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    cr_assert_eq(emu::programmatic_edges_instantiated(), edges + 1);
    cr_assert_eq(cudaGraphLaunch(exec, stream), cudaSuccess);
    cr_assert_eq(cudaStreamSynchronize(stream), cudaSuccess);
    std::vector<int> z = dz.to_host();
    for (int i = 0; i < n; i++) cr_assert_eq(z[i], 1, "graph, reads early: z[%d] = %d", i, z[i]);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    // A programmatic kernel that never waits is a fault.
    emu::set_failure_mode(emu::FailureMode::Return);
    emu::clear_last_fault();
    cr_assert_eq(cudaLaunchKernelEx(&cfg, pdl_fill, dx.ptr, dy.ptr, n), cudaSuccess);
    cudaLaunchConfig_t one = cfg;
    one.gridDim = dim3(1);
    cudaLaunchKernelEx(&one, pdl_never_waits, dz.ptr);
    cr_assert_eq(cudaStreamSynchronize(stream), cudaErrorLaunchFailure);
    expect_fault_contains(emu::last_fault(), "kernel pdl_never_waits was launched with the programmatic attribute "
                                             "but never calls cudaGridDependencySynchronize");
    cudaGetLastError();
    cudaStreamDestroy(stream);
}

Test(emu_grid_sync, unknown_launch_attribute_is_refused) {
    DeviceBuffer<int> x(32);
    cudaLaunchAttribute attr = {};
    attr.id = (cudaLaunchAttributeID)4; // cudaLaunchAttributeSynchronizationPolicy: not emulated
    cudaLaunchConfig_t cfg = {dim3(1), dim3(32), 0, nullptr, &attr, 1};
    cr_assert_eq(cudaLaunchKernelEx(&cfg, add_one, x.ptr), cudaErrorInvalidValue);
    cudaGetLastError();
    cr_assert_eq(x.to_host()[0], 0);
}
