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

namespace emu {

enum class State { Runnable, AtBarrier, AtWarp, Done };

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

struct SharedVar {
    const void *key; // identifies the declaration (and template instantiation); see shared.h
    size_t size;
    void *ptr;
};

struct Engine {
    FiberHost host;
    std::deque<Thread> threads; // the pool (addresses stay put); the first nthreads serve a block
    Thread *current = nullptr;
    // How many threads of the block are in each waiting state, so the scheduler only scans the
    // threads when something must be completed or explained.
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

// Marks the launch failed: prints the message; aborts unless the failure mode is Return.
void report(Engine &e, const std::string &msg);
std::string dim_str(uint3 d);             // "(x,y,z)"
std::string where_str(const Engine &e); // "kernel K, block (x,y,z)"
std::string thread_str(const Thread &t); // "thread (x,y,z)"
std::string site(const char *file, int line);
unsigned char shared_fill(); // the schedule's fill byte for fresh shared memory

} // namespace emu

#endif
