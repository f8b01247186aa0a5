// runtime_internal.h — state shared by the host-API files of the emulator (streams, capture,
// devices, allocations). Not for kernel or test code.
#ifndef EMU_RUNTIME_INTERNAL_H
#define EMU_RUNTIME_INTERNAL_H

#include <stddef.h>

#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../include/cuda_runtime.h"

// One recorded operation of a captured stream; replayed by cudaGraphLaunch.
struct EmuGraphNode {
    std::string what; // "kernel rmsnorm<256>", "cudaMemcpyAsync", ... (for messages)
    std::function<cudaError_t()> work;
    bool kernel = false;       // a kernel launch
    bool programmatic = false; // ... with the programmatic attribute
};

struct CUgraph_st {
    std::vector<EmuGraphNode> nodes;
};
struct CUgraphExec_st {
    std::vector<EmuGraphNode> nodes; // a copy: the graph may be destroyed after instantiation
};

// One operation a deferred stream holds until the host waits for it (deferred.cpp).
struct EmuQueuedOp {
    unsigned long long seq; // its place in the stream: 1, 2, ...
    std::function<cudaError_t()> work;
    bool kernel;
};

struct CUstream_st {
    int device;
    unsigned flags;
    CUgraph_st *capture; // the graph being recorded, or null
    bool capture_invalid;  // a forbidden call happened during capture
    std::deque<EmuQueuedOp> queued{}; // deferred streams: submitted, not yet run
    unsigned long long submitted = 0;  // operations ever queued (the last one's seq)
    std::mutex queue_mutex{};          // guards queued and submitted
    std::thread::id owner = std::this_thread::get_id(); // the host thread that made it
};

struct CUevent_st {
    bool recorded;
    double ms; // host time of the record, in milliseconds
    bool timing = true;            // not made with cudaEventDisableTiming
    cudaStream_t stream = nullptr; // deferred streams: where the record is queued, and its seq
    unsigned long long seq = 0;
};

namespace emu {

const int kMaxDevices = 8;
int device_count();         // EMU_DEVICE_COUNT (default 4)
int current_device();       // of the calling host thread
size_t device_memory();
int blocks_per_sm(unsigned threads, size_t dynamic_shmem); // the occupancy model (runtime.cpp)     // bytes each emulated device holds (EMU_DEVICE_MEMORY_MB, default 80 GiB)
double now_ms();
cudaError_t fail(cudaError_t err, const std::string &msg); // prints "EMU: msg", sets last error
// Errors if a stream is being captured in global mode: synchronous calls are illegal then.
cudaError_t check_not_capturing(const char *call);
// Device memory that [p, p + bytes) lies in; false if it is not inside one allocation.
bool device_range(const void *p, size_t bytes);
bool host_pinned_range(const void *p, size_t bytes);

// Deferred streams (deferred.cpp): EMU_STREAMS=deferred, or emu::set_deferred_streams. Whether
// they are on; the stream's operation queued instead of run (true) or to be run now (false:
// the mode is off, or the legacy stream, whose operation first waits for the blocking streams);
// runs a stream's queue up to seq (all of it: ~0ull), the blocking streams' (a synchronous call
// on the legacy stream) or every stream's (a device-wide wait; of the streams the calling host
// thread made: another thread's stream is that thread's to wait for, which keeps two threads
// from running one stream's work at once), returning the first error.
bool deferred_streams();
bool defer(cudaStream_t s, bool kernel, std::function<cudaError_t()> &work);
cudaError_t drain(cudaStream_t s, unsigned long long upto = ~0ull);
cudaError_t drain_blocking();
cudaError_t drain_all();
void stream_created(cudaStream_t s);
void stream_destroyed(cudaStream_t s);

} // namespace emu

#endif
