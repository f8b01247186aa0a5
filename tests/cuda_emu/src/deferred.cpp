// deferred.cpp — deferred streams (emu/api.h): every operation submitted to a stream other than
// the legacy one is queued on the stream and runs only when the host waits for it, in the
// stream's order. A synchronous stream runs work the soonest a GPU could; a deferred one the
// latest: between the two, a host that reads a pinned result before its copy has run, or
// rewrites a pinned input before the copy that reads it has run, sees wrong values in one of
// them. What waits for what, as CUDA says:
//   - cudaStreamSynchronize(s): s's queue; cudaEventSynchronize(e): e's stream up to e's record;
//   - cudaDeviceSynchronize, cudaFree, cudaFreeHost, cudaStreamDestroy(s): every stream (of the
//     calling host thread: runtime_internal.h) / s;
//   - the legacy stream (a launch or copy on stream 0, cudaMemcpy, cudaMemset): the blocking
//     streams first (cudaStreamNonBlocking ones not: on a GPU they do not synchronise with it);
//   - a capture begun on s: s's queue first.
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <mutex>
#include <set>
#include <utility>

#include "../include/emu/api.h"
#include "../include/emu/launch.h"
#include "runtime_internal.h"

namespace {

std::atomic<int> mode{-1}; // -1: not read from the environment yet
std::mutex streams_mutex;
std::set<cudaStream_t> live_streams; // every stream made and not destroyed

// Runs s's queued operations of seq <= upto, in order; the first error (the rest still run, as
// a GPU's queue goes on after a failed copy).
cudaError_t run_queue(cudaStream_t s, unsigned long long upto) {
    cudaError_t first = cudaSuccess;
    for (;;) {
        EmuQueuedOp op;
        {
            std::lock_guard<std::mutex> lock(s->queue_mutex);
            if (s->queued.empty() || s->queued.front().seq > upto) break;
            op = std::move(s->queued.front());
            s->queued.pop_front();
        }
        // a copy or memset waits for a held-back programmatic kernel (launch_ex.cpp), as when
        // submitted to a synchronous stream
        cudaError_t err = op.kernel ? cudaSuccess : emu::flush_pending();
        if (err == cudaSuccess) err = op.work();
        if (err != cudaSuccess && first == cudaSuccess) first = err;
    }
    // the host waits for all of it: a programmatic kernel held back at the end too
    cudaError_t err = emu::flush_pending();
    if (first == cudaSuccess) first = err;
    if (first != cudaSuccess) emu::set_last_error(first);
    return first;
}

// The calling host thread's streams (runtime_internal.h: the device-wide waits).
std::set<cudaStream_t> own_streams() {
    std::lock_guard<std::mutex> lock(streams_mutex);
    std::set<cudaStream_t> own;
    for (cudaStream_t s : live_streams)
        if (s->owner == std::this_thread::get_id()) own.insert(s);
    return own;
}

} // namespace

namespace emu {

void set_deferred_streams(bool on) { mode = on ? 1 : 0; }

bool deferred_streams() {
    int m = mode.load();
    if (m < 0) {
        const char *env = getenv("EMU_STREAMS");
        m = env && strcmp(env, "deferred") == 0;
        mode = m;
    }
    return m == 1;
}

bool defer(cudaStream_t s, bool kernel, std::function<cudaError_t()> &work) {
    if (!deferred_streams()) return false;
    if (!s) {  // the legacy stream waits for the blocking streams, then runs the work now
        drain_blocking();
        return false;
    }
    std::lock_guard<std::mutex> lock(s->queue_mutex);
    s->queued.push_back(EmuQueuedOp{++s->submitted, std::move(work), kernel});
    return true;
}

cudaError_t drain(cudaStream_t s, unsigned long long upto) {
    if (!s) return drain_blocking();
    return run_queue(s, upto);
}

cudaError_t drain_blocking() {
    cudaError_t first = cudaSuccess;
    for (cudaStream_t s : own_streams())
        if (!(s->flags & cudaStreamNonBlocking)) {
            cudaError_t err = run_queue(s, ~0ull);
            if (first == cudaSuccess) first = err;
        }
    return first;
}

cudaError_t drain_all() {
    cudaError_t first = cudaSuccess;
    for (cudaStream_t s : own_streams()) {
        cudaError_t err = run_queue(s, ~0ull);
        if (first == cudaSuccess) first = err;
    }
    return first;
}

void stream_created(cudaStream_t s) {
    std::lock_guard<std::mutex> lock(streams_mutex);
    live_streams.insert(s);
}

void stream_destroyed(cudaStream_t s) {
    run_queue(s, ~0ull);
    std::lock_guard<std::mutex> lock(streams_mutex);
    live_streams.erase(s);
}

} // namespace emu
