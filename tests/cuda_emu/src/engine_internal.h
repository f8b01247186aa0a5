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
// without ASan/UBSan checks. The kernels, the emulated runtime and memory, and everything else
// the emulated binaries run stay checked.
#define EMU_UNCHECKED __attribute__((no_sanitize("address", "undefined")))

namespace emu {

// Released: a warp op completed during the current pass; Runnable from the next pass on.
enum class State { Runnable, AtBarrier, AtWarp, Released, Done };

struct Thread {
    Fiber fiber;
    uint3 idx{};
    unsigned linear = 0;
    State state = State::Done;
    const char *file = nullptr; // where it waits
    int line = 0;
    WarpOp op = WarpOp::SyncWarp;
    unsigned mask = 0;
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
    unsigned at_warp = 0, at_barrier = 0, done = 0;
    Thread *barrier_first = nullptr; // the first thread to reach the current barrier
    bool barrier_mismatch = false;   // a later one waits at a different __syncthreads
    const KernelRun *run = nullptr;
    unsigned nthreads = 0;
    std::vector<uint64_t> warp_in, warp_out; // [nwarps][32] values deposited / delivered
    std::vector<SharedVar> shared;           // this block's static __shared__ variables
    void *dynamic = nullptr;                 // this block's dynamic shared memory
    size_t shared_bytes = 0;                 // static + dynamic, against run->shmem_limit
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
// where it exists already (a plain thread_local pointer: no TLS init check per access).
Engine &get_engine();
Engine &cur_engine();

// Kernel side (in a fiber): the running thread has blocked (its state says why); runs the next
// runnable thread of the pass, or returns to the host at the end of the pass. Returns when
// this thread is resumed.
void switch_away(Engine &e, Thread &t);
// Completes the rendezvous of warp w whose lanes have all arrived (their lanes become
// Released); reports lanes that disagree on the op. Returns whether any completed.
bool complete_warp(Engine &e, unsigned w);

// Marks the launch failed: prints the message; aborts unless the failure mode is Return.
void report(Engine &e, const std::string &msg);
std::string dim_str(uint3 d);             // "(x,y,z)"
std::string where_str(const Engine &e); // "kernel K, block (x,y,z)"
std::string thread_str(const Thread &t); // "thread (x,y,z)"
std::string site(const char *file, int line);
unsigned char shared_fill(); // the schedule's fill byte for fresh shared memory

} // namespace emu

#endif
