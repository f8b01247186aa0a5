// engine.cpp — runs a kernel launch: blocks one after the other, the threads of a block as
// fibers, with barriers and warp ops as rendezvous points (see include/emu/engine.h). A block
// whose threads wait for other blocks (emx_grid_wait) is parked and the others run meanwhile:
// run_blocks here, the parking and the deadlock report in grid_wait.cpp.
//
// The loop for one block: a pass runs every runnable thread, in schedule order, until it blocks
// or returns; a thread that blocks switches straight to the next runnable thread of the pass
// (one switch per thread, not two through the host), the last one back to the host. A warp
// rendezvous completes when its last lane arrives, but its lanes run again only in the next
// pass, so the order in which threads run is that of a pass that completes the rendezvous at
// its end. With nothing runnable, if every live thread waits at __syncthreads, the host releases
// the barrier; else the block is stuck, and the reason (a thread that exited or waits at
// another barrier, a shuffle lane that never came) is reported as a fault with kernel, block
// and thread. Everything here is per host thread (thread_local Engine), so several host
// threads — one per emulated device in the NCCL tests — run kernels at the same time.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "emu/kernel_runs.h"
#include "engine_internal.h"

thread_local __constinit uint3 threadIdx{};
thread_local __constinit uint3 blockIdx{};
thread_local __constinit uint3 blockDim{};
thread_local __constinit uint3 gridDim{};

namespace emu {

// The host thread's engine, created on first use and destroyed with the thread. Kernel-side
// calls read the plain pointer: a thread_local object with a constructor would cost a TLS
// init check on every access.
// Two engines: the home one (failure mode, last fault, every ordinary launch) and a second
// that runs a programmatic launch while the launch before it waits, suspended, in the first
// (src/launch_ex.cpp); the fibers of each stay with it. engine_ptr: the one whose launch runs now.
namespace {
thread_local std::unique_ptr<Engine> engine_owner[2];
} // namespace
thread_local __constinit Engine *engine_ptr = nullptr;

Engine &get_engine() {
    if (!engine_owner[0]) engine_owner[0] = std::make_unique<Engine>();
    if (!engine_ptr) engine_ptr = engine_owner[0].get();
    return *engine_owner[0];
}
Engine &idle_engine() {
    Engine &home = get_engine();
    if (!home.run) return home;
    if (!engine_owner[1]) engine_owner[1] = std::make_unique<Engine>();
    if (engine_owner[1]->run) {
        fprintf(stderr, "EMU: a third kernel launch while two are in progress on this host thread\n");
        abort();
    }
    return *engine_owner[1];
}

Engine::~Engine() {
    for (Thread &t : pool) fiber_destroy(t.fiber);
    free_shared();
    if (engine_ptr == this) engine_ptr = nullptr;
}

std::string dim_str(uint3 d) {
    return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
}
std::string site(const char *file, int line) { return std::string(file) + ":" + std::to_string(line); }
std::string thread_str(const Thread &t) { return "thread " + dim_str(t.idx); }
std::string where_str(const Engine &e) {
    return "kernel " + std::string(e.run->name) + ", block " + dim_str(blockIdx);
}

void report(Engine &e, const std::string &msg) {
    fprintf(stderr, "EMU FAULT: %s\n", msg.c_str());
    fflush(stderr);
    Engine &home = get_engine(); // the failure mode and the last fault live there
    if (home.mode == FailureMode::Abort) abort();
    if (!e.failed) home.fault = msg;
    e.failed = true;
}

namespace {

size_t stack_size() {
    const char *kb = getenv("EMU_STACK_KB");
    return (kb && atoi(kb) > 0 ? (size_t)atoi(kb) : 256) * 1024;
}

std::string hex(unsigned v) {
    char buf[16];
    snprintf(buf, sizeof buf, "0x%08x", v);
    return buf;
}

// The fiber body: run the kernel for whichever thread this fiber serves, forever.
[[noreturn]] void fiber_main() {
    Engine &e = cur_engine();
    fiber_started(e.host, e.current->fiber);
    for (;;) {
        e.run->thread_main(e.run->arg);
        Thread &t = *e.current;
        t.state = State::Done;
        e.done++;
        switch_away(e, t);
    }
}

// Host side: runs one pass, from its first runnable thread; returns at its end.
void run_pass(Engine &e) {
    e.pos = -1;
    Thread *t = next_in_pass(e);
    if (!t) return;
    e.current = t;
    threadIdx = t->idx;
    fiber_resume(e.host, t->fiber);
    e.current = nullptr;
}

} // namespace

void take_fibers(Engine &e) {
    while (e.threads.size() < e.nthreads && !e.spare.empty()) {
        e.threads.push_back(e.spare.back());
        e.spare.pop_back();
    }
    while (e.threads.size() < e.nthreads) {
        e.pool.emplace_back();
        fiber_create(e.pool.back().fiber, stack_size(), fiber_main);
        e.threads.push_back(&e.pool.back());
    }
}

namespace {

// Why `t` (waiting at a warp op) cannot go on: the first lane of its mask that did not arrive.
std::string explain_warp(Engine &e, Thread &t) {
    unsigned w = t.linear / 32;
    std::string msg = where_str(e) + ": " + warp_op_name(t.op) + " at " + site(t.file, t.line) + " by " +
                      thread_str(t) + " with mask " + hex(t.mask) + ": ";
    for (unsigned m = 0; m < 32; m++) {
        unsigned lin = w * 32 + m;
        if (!(t.mask >> m & 1u) || lin >= e.nthreads) continue;
        Thread &o = *e.threads[lin];
        std::string who = "lane " + std::to_string(m) + " (" + thread_str(o) + ")";
        if (o.state == State::Done) return msg + who + " exited without arriving";
        if (o.state == State::AtBarrier)
            return msg + who + " waits at __syncthreads at " + site(o.file, o.line) + " instead";
        if (o.state == State::AtWarp && o.mask != t.mask)
            return msg + who + " waits at " + warp_op_name(o.op) + " at " + site(o.file, o.line) +
                   " with a different mask " + hex(o.mask);
    }
    return msg + "the lanes never all arrived";
}

enum class Outcome { Continue, Finished, Failed, Parked };

// Nothing runnable and no warp can complete: release the barrier, or park the block (a thread
// waits in emx_grid_wait for other blocks), or report why the block is stuck.
Outcome resolve_block(Engine &e) {
    if (e.done == e.nthreads) return Outcome::Finished; // every thread returned
    if (e.at_grid) return release_grid_waits(e) ? Outcome::Continue : Outcome::Parked;
    if (e.at_warp == 0 && e.done == 0 && !e.barrier_mismatch) { // the common case: release
        release_barrier(e);
        return Outcome::Continue;
    }
    // Stuck: find the threads that explain why.
    Thread *barrier = e.barrier_first, *exited = nullptr, *warp = nullptr;
    for (unsigned i = 0; i < e.nthreads; i++) {
        Thread &t = *e.threads[i];
        if (t.state == State::Done && !exited) exited = &t;
        if (t.state == State::AtWarp && !warp) warp = &t;
    }
    if (warp) {
        report(e, explain_warp(e, *warp));
        return Outcome::Failed;
    }
    if (exited) {
        report(e, where_str(e) + ": divergent __syncthreads: " + thread_str(*exited) +
                      " exited while " + thread_str(*barrier) + " waits at __syncthreads at " +
                      site(barrier->file, barrier->line));
        return Outcome::Failed;
    }
    for (unsigned i = 0; i < e.nthreads; i++) {
        Thread &t = *e.threads[i];
        if (t.line != barrier->line || (t.file != barrier->file && strcmp(t.file, barrier->file) != 0)) {
            report(e, where_str(e) + ": divergent __syncthreads: " + thread_str(*barrier) + " waits at " +
                          site(barrier->file, barrier->line) + ", " + thread_str(t) + " at " +
                          site(t.file, t.line));
            return Outcome::Failed;
        }
    }
    report(e, where_str(e) + ": the block is stuck"); // not reached: the cases above cover it
    return Outcome::Failed;
}

// Prepares the running block (blockIdx set) to start: its threads, warps and shared memory.
void start_block(Engine &e) {
    const KernelRun &r = *e.run;
    e.at_warp = e.at_barrier = e.done = e.at_grid = 0;
    e.barrier_first = nullptr;
    e.barrier_mismatch = false;
    for (unsigned i = 0; i < e.nthreads; i++) {
        Thread &t = *e.threads[i];
        t.idx = uint3{i % r.block.x, i / r.block.x % r.block.y, i / (r.block.x * r.block.y)};
        t.linear = i;
        t.state = State::Runnable;
    }
    std::fill(e.warps.begin(), e.warps.end(), Warp{});
    e.any_released = false;
    e.shared_bytes = r.dynamic_shmem;
    if (posix_memalign(&e.dynamic, 128, r.dynamic_shmem) != 0) abort();
    if (r.dynamic_shmem) memset(e.dynamic, shared_fill(), r.dynamic_shmem);
}

// Runs the running block until it finishes, fails, or parks (waits for other blocks).
Outcome run_block(Engine &e) {
    for (;;) {
        run_pass(e);
        if (e.failed) {  // a fault in the pass: the block's fibers are abandoned, not its memory
            e.free_shared();
            return Outcome::Failed;
        }
        if (e.any_released) { // the warp ops completed in the pass: their lanes go on
            release_warps(e);
            continue;
        }
        Outcome o = resolve_block(e);
        if (o == Outcome::Continue) continue;
        if (o != Outcome::Parked) e.free_shared();
        return o;
    }
}

uint3 block_index(const KernelRun &run, unsigned long long b) {
    return uint3{(unsigned)(b % run.grid.x), (unsigned)(b / run.grid.x % run.grid.y),
                 (unsigned)(b / ((unsigned long long)run.grid.x * run.grid.y))};
}

// The blocks in schedule order: each runs until it finishes or parks; a parked block whose wait
// is satisfied resumes before the next block starts; with neither, the launch is deadlocked,
// unless blocks wait for the grid before it (cudaGridDependencySynchronize while
// e.dependency_done is 0): then it is suspended (returns false) until that grid completes.
// An ordinary launch (no block ever parks) runs its blocks one after the other, as before.
// Returns true when every block has finished (or the launch failed).
bool run_blocks(Engine &e) {
    const KernelRun &run = *e.run;
    const bool reverse = e.reverse;
    const unsigned long long nblocks = (unsigned long long)run.grid.x * run.grid.y * run.grid.z;
    while (!e.failed) {
        long ready = e.parked.empty() ? -1 : ready_parked_block(e);
        if (ready >= 0) {
            resume_block(e, (size_t)ready);
        } else if (e.next_block < nblocks && e.parked.size() < e.resident_limit) {
            unsigned long long k = e.next_block++;
            blockIdx = block_index(run, reverse ? nblocks - 1 - k : k);
            start_block(e);
        } else if (!e.dependency_done) {
            return false; // the blocks that could start wait for the grid before this one
        } else if (e.next_block < nblocks || !e.parked.empty()) {
            report_deadlock(e, nblocks - e.next_block);
            break;
        } else {
            break; // every block finished
        }
        if (run_block(e) == Outcome::Parked) park_block(e);
    }
    return true;
}

} // namespace

const char *warp_op_name(WarpOp op) {
    switch (op) {
    case WarpOp::Shfl: return "__shfl_sync";
    case WarpOp::ShflUp: return "__shfl_up_sync";
    case WarpOp::ShflDown: return "__shfl_down_sync";
    case WarpOp::ShflXor: return "__shfl_xor_sync";
    case WarpOp::Ballot: return "__ballot_sync";
    case WarpOp::Any: return "__any_sync";
    case WarpOp::All: return "__all_sync";
    case WarpOp::SyncWarp: return "__syncwarp";
    case WarpOp::ReduceSum: return "emx_warp_sum (five __shfl_xor_sync)";
    case WarpOp::ReduceMax: return "emx_warp_max (five __shfl_xor_sync)";
    case WarpOp::ReduceSumInt: return "emx_warp_sum_int (five __shfl_xor_sync)";
    }
    return "?";
}

cudaError_t check_launch_config(const char *name, dim3 grid, dim3 block, size_t shmem, size_t limit) {
    std::string problem;
    unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
    if (block.x == 0 || block.y == 0 || block.z == 0 || grid.x == 0 || grid.y == 0 || grid.z == 0)
        problem = "a grid or block dimension is 0";
    else if (threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64)
        problem = "block " + dim_str(block) + " exceeds 1024 threads or (1024,1024,64)";
    else if (grid.y > 65535 || grid.z > 65535)
        problem = "grid " + dim_str(grid) + " exceeds 65535 in y or z";
    if (!problem.empty()) {
        fprintf(stderr, "EMU: launch of %s: %s\n", name, problem.c_str());
        return cudaErrorInvalidConfiguration;
    }
    if (shmem > limit) {
        fprintf(stderr, "EMU: launch of %s: %zu bytes of dynamic shared memory exceed the limit of %zu "
                        "(raise it with cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, n))\n",
                name, shmem, limit);
        return cudaErrorInvalidValue;
    }
    return cudaSuccess;
}

// Kernels run, by name (kernel_runs): host threads of several emulated devices run kernels at
// the same time, hence the lock.
namespace {
std::mutex runs_mu;
std::map<std::string, long> runs_by_name, programmatic_by_name, cooperative_by_name;

long count_runs(const std::map<std::string, long> &runs, const char *prefix) {
    std::lock_guard<std::mutex> lock(runs_mu);
    long n = 0;
    for (const auto &kv : runs)
        if (kv.first.compare(0, strlen(prefix), prefix) == 0) n += kv.second;
    return n;
}
} // namespace

long kernel_runs(const char *prefix) { return count_runs(runs_by_name, prefix); }
long programmatic_kernel_runs(const char *prefix) { return count_runs(programmatic_by_name, prefix); }
long cooperative_kernel_runs(const char *prefix) { return count_runs(cooperative_by_name, prefix); }

void begin_launch(Engine &e, const KernelRun &run, bool dependency_done) {
    {
        std::lock_guard<std::mutex> lock(runs_mu);
        runs_by_name[run.name]++;
        if (run.programmatic) programmatic_by_name[run.name]++;
        if (run.cooperative) cooperative_by_name[run.name]++;
    }
    if (engine_ptr && engine_ptr->current) {
        fprintf(stderr, "EMU: kernel %s launched from inside kernel %s (dynamic parallelism is not supported)\n",
                run.name, engine_ptr->run->name);
        abort();
    }
    engine_ptr = &e;
    e.run = &run;
    e.nthreads = run.block.x * run.block.y * run.block.z;
    take_fibers(e);
    e.warp_in.assign((e.nthreads + 31) / 32 * 32, 0);
    e.warp_out.assign(e.warp_in.size(), 0);
    e.warps.assign(e.warp_in.size() / 32, Warp{});
    e.failed = false;
    e.next_block = 0;
    e.dependency_done = dependency_done ? 1u : 0u;
    e.dependency_waited = false;
    // Blocks in order, or (reverse schedule) in the opposite order: a kernel whose result depends
    // on which block runs first (one block reading what another writes) differs between the two.
    e.reverse = schedule() == Schedule::Reverse;
    e.resident_limit = resident_blocks(run.block.x * run.block.y * run.block.z, run.dynamic_shmem);
}

bool continue_launch(Engine &e) {
    engine_ptr = &e;
    const KernelRun &run = *e.run;
    gridDim = uint3{run.grid.x, run.grid.y, run.grid.z};
    blockDim = uint3{run.block.x, run.block.y, run.block.z};
    return run_blocks(e);
}

cudaError_t end_launch(Engine &e) {
    engine_ptr = &e;
    // A programmatic launch none of whose threads waited for the grid before it: the kernel
    // after it could then overtake that grid (the chain of waits is what orders them).
    if (!e.failed && e.run->programmatic && !e.dependency_waited)
        report(e, "kernel " + std::string(e.run->name) +
                      " was launched with the programmatic attribute but never calls cudaGridDependencySynchronize "
                      "(emx_pdl_wait): the kernel after it could overtake the one before it");
    if (e.failed) {
        // The fibers of the failed block stopped mid-kernel: start them afresh next time.
        for (unsigned i = 0; i < e.nthreads; i++) fiber_reset(e.threads[i]->fiber, fiber_main);
        abandon_parked(e, fiber_main);
    }
    // Fibers that served parked blocks are free again for the next launch.
    e.threads.insert(e.threads.end(), e.spare.begin(), e.spare.end());
    e.spare.clear();
    e.run = nullptr;
    engine_ptr = &get_engine();
    return e.failed ? cudaErrorLaunchFailure : cudaSuccess;
}

cudaError_t run_kernel(const KernelRun &run) {
    cudaError_t err = check_launch_config(run.name, run.grid, run.block, run.dynamic_shmem, run.shmem_limit);
    if (err != cudaSuccess) return err;
    Engine &e = idle_engine();
    begin_launch(e, run, true);
    continue_launch(e);
    return end_launch(e);
}

} // namespace emu
