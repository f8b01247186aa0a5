// engine_internal.h — the scheduler's state, shared by engine.cpp (which runs blocks) and
// device_calls.cpp (what kernel code calls: barriers, warp ops, shared memory, faults).
#ifndef EMU_ENGINE_INTERNAL_H
#define EMU_ENGINE_INTERNAL_H

#include <stdlib.h>

#include <deque>
#include <string>
#include <vector>

#include "../include/emu/api.h"
#include "../include/emu/engine.h"
#include "fiber.h"

// The scheduler's per-switch paths (picking the next thread, completing a warp op, what a
// barrier or warp op records) run for every thread at every barrier and shuffle: they are built
// without ASan/UBSan checks (src/switch.cpp, a file compiled without them; the small helpers
// here and in grid_wait.cpp with this attribute). The kernels, the emulated runtime and memory,
// and everything else the emulated binaries run stay checked.
#define EMU_UNCHECKED __attribute__((no_sanitize("address", "undefined")))

namespace emu {

// Released: a warp op completed during the current pass; Runnable from the next pass on.
// AtGrid: in emx_grid_wait, until another block's signal makes its counter reach the target.
enum class State { Runnable, AtBarrier, AtWarp, Released, Done, AtGrid };

struct Thread {
    Fiber fiber;
    uint3 idx{};
    unsigned linear = 0;
    State state = State::Done;
    const char *file = nullptr; // where it waits
    int line = 0;
    WarpOp op = WarpOp::SyncWarp;
    unsigned mask = 0;
    const unsigned *wait_counter = nullptr; // AtGrid: waits until *wait_counter >= wait_target
    unsigned wait_target = 0;
};

// A warp's lanes at warp ops: which wait (State::AtWarp), whether all of those called the same
// op with the same mask (then the rendezvous completes without comparing lane by lane), and
// which lanes' rendezvous completed in this pass (State::Released).
struct Warp {
    uint32_t arrived = 0, released = 0;
    unsigned mask = 0; // of the first lane waiting, and op:
    WarpOp op = WarpOp::SyncWarp;
    bool agree = true;
};

struct SharedVar {
    const void *key; // identifies the declaration (and template instantiation); see shared.h
    size_t size;
    void *ptr;
};

// A block of a launch that is parked: its threads wait in emx_grid_wait (or on a thread that
// does) for other blocks. It keeps its fibers, warp exchange and shared memory; the Engine's
// fields of the same names hold the running block's (swap_block exchanges them).
struct BlockState {
    uint3 idx{};
    std::vector<Thread *> threads;
    std::vector<Warp> warps;
    std::vector<uint64_t> warp_in, warp_out;
    std::vector<SharedVar> shared;
    void *dynamic = nullptr;
    size_t shared_bytes = 0;
    unsigned at_warp = 0, at_barrier = 0, done = 0, at_grid = 0;
    Thread *barrier_first = nullptr;
    bool barrier_mismatch = false;
};

struct Engine {
    FiberHost host;
    std::deque<Thread> pool;       // every fiber made so far (addresses stay put)
    std::vector<Thread *> threads; // the same, indexable: the first nthreads serve a block
    Thread *current = nullptr;
    // The pass: threads run one at a time in schedule order, each until it blocks; a thread that
    // blocks switches straight to the next runnable one (next_in_pass), the last one of the pass
    // back to the host, which then releases barriers or reports a stuck block.
    bool reverse = false; // the schedule of the running launch
    int pos = -1;         // the running thread's place in the pass (schedule order)
    std::vector<Warp> warps; // [nwarps]
    bool any_released = false; // some warp has released lanes this pass
    // How many threads of the block are in each waiting state, so the scheduler only scans the
    // threads when a block is stuck and must be explained.
    unsigned at_warp = 0, at_barrier = 0, done = 0, at_grid = 0;
    Thread *barrier_first = nullptr; // the first thread to reach the current barrier
    bool barrier_mismatch = false;   // a later one waits at a different __syncthreads
    const KernelRun *run = nullptr;
    unsigned nthreads = 0;
    std::vector<uint64_t> warp_in, warp_out; // [nwarps][32] values deposited / delivered
    std::vector<SharedVar> shared;           // this block's static __shared__ variables
    void *dynamic = nullptr;                 // this block's dynamic shared memory
    size_t shared_bytes = 0;                 // static + dynamic, against run->shmem_limit
    // Co-resident blocks (only once a block of the launch waits in emx_grid_wait): the parked
    // blocks, in the order they parked, fibers not serving any block, and how many blocks of
    // this launch may be resident at once (EMU_SM_COUNT x the blocks one SM holds).
    std::vector<BlockState> parked;
    std::vector<Thread *> spare;
    unsigned long long resident_limit = 0;
    unsigned long long next_block = 0; // blocks of the launch started so far
    // Programmatic dependent launch (src/launch_ex.cpp): 0 while the grid before this one still runs
    // (cudaGridDependencySynchronize parks the block until then: its threads wait AtGrid on this
    // word); whether any thread of the launch called cudaGridDependencySynchronize.
    unsigned dependency_done = 1;
    bool dependency_waited = false;
    bool failed = false;
    std::string fault;
    FailureMode mode = FailureMode::Abort;

    ~Engine();
    void free_shared() {
        for (SharedVar &v : shared) free(v.ptr);
        shared.clear();
        free(dynamic);
        dynamic = nullptr;
        shared_bytes = 0;
    }
};

// The calling host thread's engine (created on first use), and the same from inside a kernel,
// where it exists already: a plain thread_local pointer (no TLS init check per access), read at
// every barrier and warp op.
Engine &get_engine();
extern thread_local __constinit Engine *engine_ptr; // the engine whose launch runs now
EMU_UNCHECKED inline Engine &cur_engine() { return *engine_ptr; }
// The lanes of warp w that exist in the running block (a partial last warp has fewer).
EMU_UNCHECKED inline unsigned warp_lanes_present(const Engine &e, unsigned w) {
    return e.nthreads - w * 32 >= 32 ? 0xffffffffu : (1u << (e.nthreads - w * 32)) - 1u;
}
// An engine with no launch in progress: the home one, or while a launch waits suspended there
// (src/launch_ex.cpp), the second.
Engine &idle_engine();

// A launch in steps (run_kernel is the three at once): begin_launch readies `e` for `run`
// (dependency_done false: the grid before it is still running, its blocks park in
// cudaGridDependencySynchronize); continue_launch runs blocks until all have finished (true) or
// the rest wait for the grid before (false: suspended, e keeps them); end_launch reports a
// programmatic launch that never waited, frees what the launch held and returns its status.
// `run` must outlive end_launch.
void begin_launch(Engine &e, const KernelRun &run, bool dependency_done);
bool continue_launch(Engine &e);
cudaError_t end_launch(Engine &e);

// The per-switch paths (src/switch.cpp). The next runnable thread of the pass (e.pos its place),
// or null at its end or after a fault. Kernel side (in a fiber): the running thread has blocked
// (its state says why); runs the next runnable thread of the pass, or returns to the host at the
// end of the pass. Returns when this thread is resumed.
Thread *next_in_pass(Engine &e);
void switch_away(Engine &e, Thread &t);
// Completes the rendezvous of warp w whose lanes have all arrived (their lanes become
// Released); reports lanes that disagree on the op. Returns whether any completed.
bool complete_warp(Engine &e, unsigned w);
// Host side, after a pass: the lanes Released in it become Runnable (e.any_released false);
// every thread of the block, all waiting at one __syncthreads, becomes Runnable; the threads
// waiting on a counter of the grid (cudaGridDependencySynchronize, a grid-wide wait) that now
// holds their target become Runnable (whether any did).
void release_warps(Engine &e);
void release_barrier(Engine &e);
bool release_grid_waits(Engine &e);
// Whether the counter a thread waits on holds its target (read with acquire ordering).
EMU_UNCHECKED inline bool grid_wait_satisfied(const Thread &t) {
    return __atomic_load_n(t.wait_counter, __ATOMIC_ACQUIRE) >= t.wait_target;
}

// Co-resident blocks (src/grid_wait.cpp). Parks the running block (its threads wait) and readies
// fresh fibers for the next one; resumes parked block i, whose wait is satisfied; the parked block to
// resume next, or -1; reports the deadlock when nothing can run; on failure, abandons the
// parked blocks (their fibers start afresh next time, their shared memory is freed).
void park_block(Engine &e);
void resume_block(Engine &e, size_t i);
long ready_parked_block(const Engine &e);
void report_deadlock(Engine &e, unsigned long long unstarted);
void abandon_parked(Engine &e, void (*fiber_entry)());
// Fibers for a block of nthreads threads in e.threads (from the spare ones, or new).
void take_fibers(Engine &e);

// Marks the launch failed: prints the message; aborts unless the failure mode is Return.
void report(Engine &e, const std::string &msg);
std::string dim_str(uint3 d);             // "(x,y,z)"
std::string where_str(const Engine &e); // "kernel K, block (x,y,z)"
std::string thread_str(const Thread &t); // "thread (x,y,z)"
std::string site(const char *file, int line);
unsigned char shared_fill(); // the schedule's fill byte for fresh shared memory

} // namespace emu

#endif
