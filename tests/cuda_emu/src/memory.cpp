// memory.cpp — device memory of the emulated devices: host heap blocks that AddressSanitizer
// watches, registered in an address map so copies, memsets and kernel arguments can be checked.
//
// cudaMalloc returns 256-byte aligned memory as the GPU does. Every copy checks that each side
// is what its cudaMemcpyKind says (device memory lies inside one cudaMalloc block, host memory
// does not) and that the range does not run past its allocation; a mismatch is an error with a
// message, not a silent host memcpy. Copies use memcpy, so ASan also reports overlapping ranges.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "../include/emu/launch.h"
#include "runtime_internal.h"

namespace {

struct Allocation {
    size_t size;
    int device; // -1: pinned host memory (cudaMallocHost)
};

std::mutex allocations_mutex;
std::map<uintptr_t, Allocation> allocations; // by start address
size_t device_used[emu::kMaxDevices];         // bytes cudaMalloc'd per device (under the mutex)

// The allocation containing p (one past the end counts), or null.
const Allocation *find(const void *p, uintptr_t *start) {
    uintptr_t a = (uintptr_t)p;
    auto it = allocations.upper_bound(a);
    if (it == allocations.begin()) return nullptr;
    --it;
    if (a > it->first + it->second.size) return nullptr;
    *start = it->first;
    return &it->second;
}

// Is [p, p + bytes) inside one allocation of the wanted kind (device or pinned host)?
bool in_range(const void *p, size_t bytes, bool pinned) {
    std::lock_guard<std::mutex> lock(allocations_mutex);
    uintptr_t start;
    const Allocation *a = find(p, &start);
    if (!a || (a->device < 0) != pinned) return false;
    return (uintptr_t)p + bytes <= start + a->size;
}

std::string ptr_str(const void *p) {
    char buf[32];
    snprintf(buf, sizeof buf, "%p", p);
    return buf;
}

const char *kind_name(cudaMemcpyKind kind) {
    switch (kind) {
    case cudaMemcpyHostToHost: return "cudaMemcpyHostToHost";
    case cudaMemcpyHostToDevice: return "cudaMemcpyHostToDevice";
    case cudaMemcpyDeviceToHost: return "cudaMemcpyDeviceToHost";
    case cudaMemcpyDeviceToDevice: return "cudaMemcpyDeviceToDevice";
    case cudaMemcpyDefault: return "cudaMemcpyDefault";
    }
    return "an unknown cudaMemcpyKind";
}

// Checks one side of a copy: "device" sides must be device memory for the whole range,
// "host" sides must not be device memory.
std::string check_side(const char *side, const void *p, size_t bytes, bool device) {
    bool is_dev = emu::device_range(p, 0);
    if (device && !emu::device_range(p, bytes))
        return std::string(side) + " " + ptr_str(p) + (is_dev ? " + " + std::to_string(bytes) + " bytes runs past its cudaMalloc block"
                                                          : " is not device memory");
    if (!device && is_dev) return std::string(side) + " " + ptr_str(p) + " is device memory";
    return "";
}

// from: where the bytes are now (a deferred stream's staged copy of pageable src), else src.
cudaError_t copy(void *dst, const void *src, size_t count, cudaMemcpyKind kind, const char *call,
                 const void *from = nullptr) {
    if (count == 0) return cudaSuccess;
    std::string problem;
    bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if ((int)kind < 0 || (int)kind > 4) return emu::fail(cudaErrorInvalidMemcpyDirection, std::string(call) + ": bad kind");
    if (kind == cudaMemcpyDefault) {
        // Either side may be either kind, but a device side must fit its allocation.
        if (emu::device_range(dst, 0) && !emu::device_range(dst, count)) problem = check_side("dst", dst, count, true);
        if (emu::device_range(src, 0) && !emu::device_range(src, count)) problem = check_side("src", src, count, true);
    } else {
        problem = check_side("dst", dst, count, dst_dev);
        if (problem.empty()) problem = check_side("src", src, count, src_dev);
    }
    if (!problem.empty())
        return emu::fail(cudaErrorInvalidValue, std::string(call) + "(" + kind_name(kind) + ", " +
                                                    std::to_string(count) + " bytes): " + problem);
    memcpy(dst, from ? from : src, count);
    return cudaSuccess;
}

cudaError_t set(void *p, int value, size_t count, const char *call) {
    if (count == 0) return cudaSuccess;
    if (!emu::device_range(p, count))
        return emu::fail(cudaErrorInvalidValue, std::string(call) + ": " + ptr_str(p) + " + " + std::to_string(count) +
                                                    " bytes is not inside one cudaMalloc block");
    memset(p, value, count);
    return cudaSuccess;
}

cudaError_t allocate(void **p, size_t size, int device, const char *call) {
    if (!p) return emu::fail(cudaErrorInvalidValue, std::string(call) + ": null result pointer");
    *p = nullptr;
    if (size == 0) return cudaSuccess;
    std::lock_guard<std::mutex> lock(allocations_mutex);
    // A device holds emu::device_memory() bytes (EMU_DEVICE_MEMORY_MB): beyond that cudaMalloc
    // fails as on a full GPU, so out-of-memory paths can be tested.
    if (device >= 0 && size > emu::device_memory() - device_used[device])
        return emu::fail(cudaErrorMemoryAllocation, std::string(call) + ": out of memory (" + std::to_string(size) +
                                                        " bytes asked, " +
                                                        std::to_string(emu::device_memory() - device_used[device]) +
                                                        " free)");
    if (posix_memalign(p, 256, size) != 0) return emu::fail(cudaErrorMemoryAllocation, std::string(call) + ": out of memory");
    allocations[(uintptr_t)*p] = Allocation{size, device};
    if (device >= 0) device_used[device] += size;
    return cudaSuccess;
}

cudaError_t release(void *p, bool pinned, const char *call) {
    if (!p) return cudaSuccess;
    {
        std::lock_guard<std::mutex> lock(allocations_mutex);
        auto it = allocations.find((uintptr_t)p);
        if (it == allocations.end() || (it->second.device < 0) != pinned) {
            fprintf(stderr, "EMU: %s(%p): not a pointer returned by %s\n", call, p, pinned ? "cudaMallocHost" : "cudaMalloc");
            return emu::fail(cudaErrorInvalidValue, std::string(call) + ": bad pointer");
        }
        if (it->second.device >= 0) device_used[it->second.device] -= it->second.size;
        allocations.erase(it);
    }
    free(p);
    return cudaSuccess;
}

} // namespace

namespace emu {

bool device_range(const void *p, size_t bytes) { return in_range(p, bytes, false); }
bool host_pinned_range(const void *p, size_t bytes) { return in_range(p, bytes, true); }
// Kernel arguments: device memory, or pinned host memory (mapped into the GPU's address space).
bool is_device_pointer(const void *p) { return in_range(p, 0, false) || in_range(p, 0, true); }

} // namespace emu

extern "C" {

cudaError_t cudaMalloc(void **devPtr, size_t size) {
    cudaError_t err = emu::check_not_capturing("cudaMalloc");
    if (err != cudaSuccess) return err;
    return allocate(devPtr, size, emu::current_device(), "cudaMalloc");
}
cudaError_t cudaFree(void *devPtr) {
    cudaError_t err = emu::check_not_capturing("cudaFree");
    if (err != cudaSuccess) return err;
    emu::drain_all();  // cudaFree waits for the device
    return release(devPtr, false, "cudaFree");
}
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    if (!free_bytes || !total_bytes) return emu::fail(cudaErrorInvalidValue, "cudaMemGetInfo: null pointer");
    std::lock_guard<std::mutex> lock(allocations_mutex);
    *total_bytes = emu::device_memory();
    *free_bytes = *total_bytes - device_used[emu::current_device()];
    return cudaSuccess;
}
cudaError_t cudaMallocHost(void **ptr, size_t size) { return allocate(ptr, size, -1, "cudaMallocHost"); }
cudaError_t cudaFreeHost(void *ptr) {
    emu::drain_all();      // a queued copy may write it (deferred.cpp)
    emu::flush_pending(); // a held-back kernel may write it (src/launch_ex.cpp)
    return release(ptr, true, "cudaFreeHost");
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, cudaMemcpyKind kind) {
    cudaError_t err = emu::check_not_capturing("cudaMemcpy");
    if (err != cudaSuccess) return err;
    if (emu::deferred_streams()) emu::drain_blocking();  // the legacy stream's order
    return copy(dst, src, count, kind, "cudaMemcpy");
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
    if (stream && !stream->capture && emu::deferred_streams()) {
        // As on a GPU: from pageable host memory the bytes are taken now (staged), and a copy to
        // pageable memory returns when it is done; only pinned memory is read or written later.
        const bool src_host = !emu::device_range(src, 0) && !emu::host_pinned_range(src, 0);
        const bool dst_host = !emu::device_range(dst, 0) && !emu::host_pinned_range(dst, 0);
        if (dst_host && count) {
            cudaError_t err = emu::drain(stream);
            if (err != cudaSuccess) return err;
            return copy(dst, src, count, kind, "cudaMemcpyAsync");
        }
        if (src_host && count) {
            auto staged = std::make_shared<std::vector<unsigned char>>((const unsigned char *)src,
                                                                       (const unsigned char *)src + count);
            return emu::submit(stream, "cudaMemcpyAsync", [=]() {
                return copy(dst, src, count, kind, "cudaMemcpyAsync", staged->data());
            });
        }
    }
    return emu::submit(stream, "cudaMemcpyAsync",
                       [=]() { return copy(dst, src, count, kind, "cudaMemcpyAsync"); });
}
cudaError_t cudaMemset(void *devPtr, int value, size_t count) {
    cudaError_t err = emu::check_not_capturing("cudaMemset");
    if (err != cudaSuccess) return err;
    if (emu::deferred_streams()) emu::drain_blocking();  // the legacy stream's order
    return set(devPtr, value, count, "cudaMemset");
}
cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream) {
    return emu::submit(stream, "cudaMemsetAsync", [=]() { return set(devPtr, value, count, "cudaMemsetAsync"); });
}

} // extern "C"
