// runtime_internal.h — state shared by the host-API files of the emulator (streams, capture,
// devices, allocations). Not for kernel or test code.
#ifndef EMU_RUNTIME_INTERNAL_H
#define EMU_RUNTIME_INTERNAL_H

#include <stddef.h>

#include <functional>
#include <memory>
#include <string>
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

struct CUstream_st {
    int device;
    unsigned flags;
    CUgraph_st *capture; // the graph being recorded, or null
    bool capture_invalid;  // a forbidden call happened during capture
};

struct CUevent_st {
    bool recorded;
    double ms; // host time of the record, in milliseconds
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

} // namespace emu

#endif
