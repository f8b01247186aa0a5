// grid_wait.cpp — blocks of one launch that wait on each other (emx_grid_wait,
// kernels/grid_sync.cuh): parking, resuming, and the deadlock report.
//
// A launch starts as an ordinary one: blocks one after the other, each to completion. When
// every thread of the running block that can run has blocked and one of them waits in
// emx_grid_wait for a counter below its target, the block is parked: its fibers, warp exchange
// and shared memory move into a BlockState, and the next block starts on fresh fibers. Before
// each start the parked blocks are checked, oldest first under the forward schedule, newest
// first under reverse; one whose counter now reaches the target resumes. The blocks of such a
// launch are therefore co-resident, as many at once as the emulated device holds
// (resident_blocks: EMU_SM_COUNT SMs). When no parked block can resume and no block can start
// (every block started, or the device full), nothing can ever signal again: the launch is
// deadlocked and every waiting thread is reported, with its counter and target, the moment
// that is certain. A GPU would hang there instead.
#include <stdio.h>
#include <stdlib.h>

#include <atomic>
#include <string>
#include <utility>

#include "../include/emu/launch.h"
#include "engine_internal.h"

namespace emu {

namespace {

std::atomic<long> dependency_syncs{0}, completion_triggers{0};

// Exchanges the running block's state (the Engine's fields) with `b`.
void swap_block(Engine &e, BlockState &b) {
    std::swap(b.idx, blockIdx);
    std::swap(b.threads, e.threads);
    std::swap(b.warps, e.warps);
    std::swap(b.warp_in, e.warp_in);
    std::swap(b.warp_out, e.warp_out);
    std::swap(b.shared, e.shared);
    std::swap(b.dynamic, e.dynamic);
    std::swap(b.shared_bytes, e.shared_bytes);
    std::swap(b.at_warp, e.at_warp);
    std::swap(b.at_barrier, e.at_barrier);
    std::swap(b.done, e.done);
    std::swap(b.at_grid, e.at_grid);
    std::swap(b.barrier_first, e.barrier_first);
    std::swap(b.barrier_mismatch, e.barrier_mismatch);
}

unsigned load_acquire(const unsigned *counter) { return __atomic_load_n(counter, __ATOMIC_ACQUIRE); }

bool block_ready(const BlockState &b, unsigned nthreads) {
    for (unsigned i = 0; i < nthreads; i++) {
        const Thread &t = *b.threads[i];
        if (t.state == State::AtGrid && grid_wait_satisfied(t)) return true;
    }
    return false;
}

std::string hex_ptr(const void *p) {
    char buf[32];
    snprintf(buf, sizeof buf, "%p", p);
    return buf;
}

// "block (x,y,z) thread (a,b,c) waits for counter 0x... >= N (it holds M) at file:line" for each
// waiting thread of `b`, at most `room` of them; returns how many were written.
unsigned describe_waits(const BlockState &b, unsigned nthreads, unsigned room, std::string &out) {
    unsigned n = 0;
    for (unsigned i = 0; i < nthreads && n < room; i++) {
        const Thread &t = *b.threads[i];
        if (t.state != State::AtGrid) continue;
        if (!out.empty()) out += "; ";
        out += "block " + dim_str(b.idx) + " " + thread_str(t) + " waits for counter " + hex_ptr(t.wait_counter) +
               " >= " + std::to_string(t.wait_target) + " (it holds " + std::to_string(load_acquire(t.wait_counter)) +
               ") at " + site(t.file, t.line);
        n++;
    }
    return n;
}

} // namespace

void park_block(Engine &e) {
    e.parked.emplace_back();
    BlockState &b = e.parked.back();
    swap_block(e, b);
    // The parked block keeps the fibers that serve it; the others (e.threads holds every idle
    // fiber at the start of a launch) stay free, and the next block runs on some of them.
    e.spare.insert(e.spare.end(), b.threads.begin() + e.nthreads, b.threads.end());
    b.threads.resize(e.nthreads);
    take_fibers(e);
    e.warp_in.assign((e.nthreads + 31) / 32 * 32, 0);
    e.warp_out.assign(e.warp_in.size(), 0);
    e.warps.assign(e.warp_in.size() / 32, Warp{});
}

void resume_block(Engine &e, size_t i) {
    // The running block's fibers (it finished) become spare; the parked block's come back.
    BlockState b = std::move(e.parked[i]);
    e.parked.erase(e.parked.begin() + (long)i);
    e.spare.insert(e.spare.end(), e.threads.begin(), e.threads.end());
    e.threads.clear();
    swap_block(e, b);
    e.any_released = false;
    release_grid_waits(e);
}

long ready_parked_block(const Engine &e) {
    const long n = (long)e.parked.size();
    for (long k = 0; k < n; k++) {
        long i = e.reverse ? n - 1 - k : k;
        if (block_ready(e.parked[(size_t)i], e.nthreads)) return i;
    }
    return -1;
}

void report_deadlock(Engine &e, unsigned long long unstarted) {
    const unsigned kMaxListed = 8;
    std::string waits;
    unsigned listed = 0, waiting = 0;
    for (const BlockState &b : e.parked) {
        listed += describe_waits(b, e.nthreads, kMaxListed - listed, waits);
        waiting += b.at_grid;
    }
    if (listed < waiting) waits += "; and " + std::to_string(waiting - listed) + " more waiting threads";
    std::string msg = "kernel " + std::string(e.run->name) + ": deadlock: " + waits;
    if (unstarted) {
        const KernelRun &r = *e.run;
        unsigned long long nblocks = (unsigned long long)r.grid.x * r.grid.y * r.grid.z;
        msg += "; " + std::to_string(unstarted) + " of the grid's " + std::to_string(nblocks) +
               " blocks cannot start: at most " + std::to_string(e.resident_limit) +
               " blocks of this launch are resident at once (" + std::to_string(sm_count()) +
               " SMs, EMU_SM_COUNT; size the grid with cudaOccupancyMaxActiveBlocksPerMultiprocessor)";
    } else {
        msg += "; every block has started, so no signal can come";
    }
    report(e, msg);
}

void abandon_parked(Engine &e, void (*fiber_entry)()) {
    for (BlockState &b : e.parked) {
        for (unsigned i = 0; i < e.nthreads; i++) fiber_reset(b.threads[i]->fiber, fiber_entry);
        for (SharedVar &v : b.shared) free(v.ptr);
        free(b.dynamic);
        e.spare.insert(e.spare.end(), b.threads.begin(), b.threads.end());
    }
    e.parked.clear();
}

// ---- kernel side ----

void grid_wait(const unsigned *counter, unsigned target, const char *file, int line) {
    if (!is_device_pointer(counter))
        device_fault(file, line, "emx_grid_wait: counter %p is not in device memory", (const void *)counter);
    if (load_acquire(counter) >= target) return;
    Engine &e = cur_engine();
    Thread &t = *e.current;
    t.state = State::AtGrid;
    t.file = file;
    t.line = line;
    t.wait_counter = counter;
    t.wait_target = target;
    e.at_grid++;
    switch_away(e, t);
}

// The block waits here (AtGrid on e.dependency_done) while the grid before this one runs: the
// rest of the launch then starts only after it (src/launch_ex.cpp).
void grid_dependency_sync() {
    dependency_syncs++;
    Engine &e = cur_engine();
    e.dependency_waited = true;
    if (e.dependency_done) return;
    Thread &t = *e.current;
    t.state = State::AtGrid;
    t.file = "cudaGridDependencySynchronize";
    t.line = 0;
    t.wait_counter = &e.dependency_done;
    t.wait_target = 1;
    e.at_grid++;
    switch_away(e, t);
}
void trigger_programmatic_completion() { completion_triggers++; }
long grid_dependency_syncs() { return dependency_syncs.load(); }
long programmatic_triggers() { return completion_triggers.load(); }

} // namespace emu
