// runtime.cpp — devices, errors, streams and events of the emulated CUDA runtime.
//
// Devices: EMU_DEVICE_COUNT (default 4) identical H100-like devices of EMU_SM_COUNT SMs (default
// 4, so that kernels sized from the SM count stay small here); cudaSetDevice only changes
// the calling host thread's current device (which the NCCL emulation uses). Errors: each API
// call returns its error and also leaves it as the host thread's last error, like CUDA.
// Streams: synchronous — work runs when it is enqueued, so a stream is always idle and events
// hold the host time at which they were recorded. Stream capture (graph.cpp) diverts the work
// of a capturing stream into its graph instead.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <map>
#include <mutex>
#include <string>

#include "../include/emu/launch.h"
#include "runtime_internal.h"

namespace {

thread_local int tl_device = 0;
thread_local cudaError_t tl_last_error = cudaSuccess;

const size_t kDefaultShmem = 48 * 1024;
const size_t kOptinShmem = 232448; // H100: 227 KiB

// Per-SM limits of the occupancy model (H100's, CUDA C++ Programming Guide, "Technical
// Specifications per Compute Capability" 9.0), except registers: the emulator cannot know a
// kernel's, so every thread is taken to use kAssumedRegsPerThread (the decode kernels use 32 to
// 128), which limits an SM to 1024 resident threads.
const int kMaxThreadsPerSM = 2048, kMaxBlocksPerSM = 32, kRegsPerSM = 65536, kAssumedRegsPerThread = 64;
const size_t kSharedPerSM = 233472, kSharedReservedPerBlock = 1024, kSharedAllocUnit = 128;

std::mutex func_mutex;
std::map<const void *, size_t> func_shmem_limit; // set by cudaFuncSetAttribute

} // namespace

namespace emu {

int device_count() {
    const char *env = getenv("EMU_DEVICE_COUNT");
    int n = env ? atoi(env) : 4;
    return n < 1 ? 1 : n > kMaxDevices ? kMaxDevices : n;
}
int current_device() { return tl_device; }

size_t device_memory() {
    const char *env = getenv("EMU_DEVICE_MEMORY_MB");
    long long mb = env ? atoll(env) : 0;
    return mb > 0 ? (size_t)mb << 20 : 80ull << 30;
}

int sm_count() {
    const char *env = getenv("EMU_SM_COUNT");
    int n = env ? atoi(env) : 4;
    return n < 1 ? 1 : n > 1024 ? 1024 : n;
}

// Blocks of `threads` threads with `dynamic_shmem` bytes of dynamic shared memory that one SM
// holds at once: the smallest of the thread, block, register and shared-memory limits (static
// __shared__ memory is not known before a block runs, so it is not counted).
int blocks_per_sm(unsigned threads, size_t dynamic_shmem) {
    if (threads == 0 || threads > 1024) return 0;
    int warp_threads = (int)(threads + 31) / 32 * 32;
    int by_threads = kMaxThreadsPerSM / warp_threads;
    int by_regs = kRegsPerSM / (warp_threads * kAssumedRegsPerThread);
    size_t smem = (dynamic_shmem + kSharedAllocUnit - 1) / kSharedAllocUnit * kSharedAllocUnit + kSharedReservedPerBlock;
    int by_smem = (int)(kSharedPerSM / smem);
    int n = kMaxBlocksPerSM;
    if (by_threads < n) n = by_threads;
    if (by_regs < n) n = by_regs;
    if (by_smem < n) n = by_smem;
    return n;
}

unsigned long long resident_blocks(unsigned threads_per_block, size_t dynamic_shmem) {
    unsigned long long n = (unsigned long long)sm_count() * (unsigned long long)blocks_per_sm(threads_per_block, dynamic_shmem);
    return n ? n : 1; // a launch of blocks too big for an SM is refused before it runs
}

double now_ms() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

void set_last_error(cudaError_t err) {
    if (err != cudaSuccess) tl_last_error = err;
}

cudaError_t fail(cudaError_t err, const std::string &msg) {
    fprintf(stderr, "EMU: %s\n", msg.c_str());
    set_last_error(err);
    return err;
}

size_t shmem_limit(const void *kernel) {
    std::lock_guard<std::mutex> lock(func_mutex);
    auto it = func_shmem_limit.find(kernel);
    return it == func_shmem_limit.end() ? kDefaultShmem : it->second;
}

} // namespace emu

extern "C" {

const char *cudaGetErrorName(cudaError_t error) {
    switch (error) {
#define NAME(e) case e: return #e;
        NAME(cudaSuccess) NAME(cudaErrorInvalidValue) NAME(cudaErrorMemoryAllocation)
        NAME(cudaErrorInvalidConfiguration) NAME(cudaErrorInvalidDevicePointer)
        NAME(cudaErrorInvalidMemcpyDirection) NAME(cudaErrorInvalidDeviceFunction)
        NAME(cudaErrorNoDevice) NAME(cudaErrorInvalidDevice) NAME(cudaErrorInvalidResourceHandle)
        NAME(cudaErrorIllegalState) NAME(cudaErrorNotReady) NAME(cudaErrorLaunchFailure) NAME(cudaErrorCooperativeLaunchTooLarge)
        NAME(cudaErrorNotSupported) NAME(cudaErrorStreamCaptureUnsupported)
        NAME(cudaErrorStreamCaptureInvalidated) NAME(cudaErrorStreamCaptureImplicit)
        NAME(cudaErrorStreamCaptureWrongThread) NAME(cudaErrorUnknown)
#undef NAME
    }
    return "cudaErrorUnknown";
}

const char *cudaGetErrorString(cudaError_t error) {
    switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorCooperativeLaunchTooLarge: return "too many blocks in cooperative launch";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureImplicit: return "operation would make the legacy stream depend on a capturing blocking stream";
    default: return cudaGetErrorName(error);
    }
}

cudaError_t cudaGetLastError(void) {
    emu::flush_pending(); // a held-back kernel's error is reported here (src/launch_ex.cpp)
    cudaError_t err = tl_last_error;
    tl_last_error = cudaSuccess;
    return err;
}
cudaError_t cudaPeekAtLastError(void) {
    emu::flush_pending();
    return tl_last_error;
}

cudaError_t cudaGetDeviceCount(int *count) {
    if (!count) return emu::fail(cudaErrorInvalidValue, "cudaGetDeviceCount: null pointer");
    *count = emu::device_count();
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
    if (device < 0 || device >= emu::device_count())
        return emu::fail(cudaErrorInvalidDevice, "cudaSetDevice(" + std::to_string(device) + "): only " +
                                                     std::to_string(emu::device_count()) + " emulated devices");
    tl_device = device;
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int *device) {
    if (!device) return emu::fail(cudaErrorInvalidValue, "cudaGetDevice: null pointer");
    *device = tl_device;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device) {
    if (!prop) return emu::fail(cudaErrorInvalidValue, "cudaGetDeviceProperties: null pointer");
    if (device < 0 || device >= emu::device_count()) return emu::fail(cudaErrorInvalidDevice, "cudaGetDeviceProperties: bad device");
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "CUDA emulator (CPU) device %d", device);
    prop->totalGlobalMem = emu::device_memory();
    prop->sharedMemPerBlock = kDefaultShmem;
    prop->sharedMemPerBlockOptin = kOptinShmem;
    prop->warpSize = 32;
    prop->maxThreadsPerBlock = 1024;
    prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
    prop->maxThreadsDim[2] = 64;
    prop->maxGridSize[0] = 2147483647;
    prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
    prop->multiProcessorCount = emu::sm_count();
    prop->memoryClockRate = 2619000;
    prop->memoryBusWidth = 5120;
    prop->l2CacheSize = 50 << 20;
    prop->major = 9;
    prop->minor = 0;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int device) {
    cudaDeviceProp p;
    cudaError_t err = cudaGetDeviceProperties(&p, device);
    if (err != cudaSuccess) return err;
    if (!value) return emu::fail(cudaErrorInvalidValue, "cudaDeviceGetAttribute: null pointer");
    switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = p.maxThreadsPerBlock; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = (int)p.sharedMemPerBlock; break;
    case cudaDevAttrWarpSize: *value = p.warpSize; break;
    case cudaDevAttrClockRate: *value = 1980000; break;
    case cudaDevAttrMultiProcessorCount: *value = p.multiProcessorCount; break;
    case cudaDevAttrMemoryClockRate: *value = p.memoryClockRate; break;
    case cudaDevAttrGlobalMemoryBusWidth: *value = p.memoryBusWidth; break;
    case cudaDevAttrL2CacheSize: *value = p.l2CacheSize; break;
    case cudaDevAttrComputeCapabilityMajor: *value = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = p.minor; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = (int)p.sharedMemPerBlockOptin; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *value = kMaxThreadsPerSM; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = (int)kSharedPerSM; break;
    case cudaDevAttrMaxRegistersPerMultiprocessor: *value = kRegsPerSM; break;
    case cudaDevAttrCooperativeLaunch: *value = 1; break;
    case cudaDevAttrMaxBlocksPerMultiprocessor: *value = kMaxBlocksPerSM; break;
    default: return emu::fail(cudaErrorInvalidValue, "cudaDeviceGetAttribute: attribute " + std::to_string((int)attr) + " is not emulated");
    }
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
    cudaError_t err = emu::drain_all();
    cudaError_t sync = emu::check_not_capturing("cudaDeviceSynchronize");
    return err != cudaSuccess ? err : sync;
}

cudaError_t cudaFuncSetAttribute(const void *func, cudaFuncAttribute attr, int value) {
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize)
        return emu::fail(cudaErrorInvalidValue, "cudaFuncSetAttribute: attribute " + std::to_string((int)attr) + " is not emulated");
    if (!func || value < 0 || (size_t)value > kOptinShmem)
        return emu::fail(cudaErrorInvalidValue, "cudaFuncSetAttribute: " + std::to_string(value) +
                                                    " bytes of dynamic shared memory (the device allows " +
                                                    std::to_string(kOptinShmem) + ")");
    std::lock_guard<std::mutex> lock(func_mutex);
    func_shmem_limit[func] = (size_t)value;
    return cudaSuccess;
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, const void *func, int blockSize,
                                                          size_t dynamicSMemSize) {
    if (!numBlocks || !func) return emu::fail(cudaErrorInvalidValue, "cudaOccupancyMaxActiveBlocksPerMultiprocessor: null argument");
    if (blockSize <= 0 || blockSize > 1024)
        return emu::fail(cudaErrorInvalidValue, "cudaOccupancyMaxActiveBlocksPerMultiprocessor: block size " +
                                                    std::to_string(blockSize) + " (1 to 1024)");
    // More dynamic shared memory than the kernel may use: no block fits (as CUDA reports).
    *numBlocks = dynamicSMemSize > emu::shmem_limit(func) ? 0 : emu::blocks_per_sm((unsigned)blockSize, dynamicSMemSize);
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags) {
    if (!stream) return emu::fail(cudaErrorInvalidValue, "cudaStreamCreate: null pointer");
    *stream = new CUstream_st{tl_device, flags, nullptr, false};
    emu::stream_created(*stream);
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    if (!stream) return emu::fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy: the null stream");
    if (stream->capture) return emu::fail(cudaErrorIllegalState, "cudaStreamDestroy: the stream is being captured");
    emu::stream_destroyed(stream);  // runs what a deferred stream still holds
    emu::flush_pending();
    delete stream;
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    if (stream && stream->capture) {
        stream->capture_invalid = true;
        return emu::fail(cudaErrorStreamCaptureUnsupported, "cudaStreamSynchronize on a capturing stream");
    }
    cudaError_t err = emu::drain(stream);
    cudaError_t sync = emu::check_not_capturing("cudaStreamSynchronize");
    return err != cudaSuccess ? err : sync;
}

cudaError_t cudaEventCreate(cudaEvent_t *event) {
    if (!event) return emu::fail(cudaErrorInvalidValue, "cudaEventCreate: null pointer");
    *event = new CUevent_st{false, 0.0};
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
    if (flags & ~(unsigned)cudaEventDisableTiming)
        return emu::fail(cudaErrorInvalidValue, "cudaEventCreateWithFlags: flags " + std::to_string(flags) +
                                                    " (cudaEventDefault or cudaEventDisableTiming)");
    cudaError_t err = cudaEventCreate(event);
    if (err == cudaSuccess) (*event)->timing = !(flags & cudaEventDisableTiming);
    return err;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
    if (!event) return emu::fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: null event");
    cudaError_t err = emu::submit(stream, "cudaEventRecord", [event]() {
        event->recorded = true;
        event->ms = emu::now_ms();
        return cudaSuccess;
    });
    if (err == cudaSuccess && stream && !stream->capture && emu::deferred_streams()) {
        std::lock_guard<std::mutex> lock(stream->queue_mutex);
        event->recorded = false;  // until the record runs (its seq: the one just queued)
        event->stream = stream, event->seq = stream->submitted;
    }
    return err;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
    if (!event) return emu::fail(cudaErrorInvalidResourceHandle, "cudaEventSynchronize: null event");
    // (a record that ran set recorded: its stream may be gone since, having run all it held)
    cudaError_t err = event->stream && !event->recorded ? emu::drain(event->stream, event->seq) : cudaSuccess;
    cudaError_t flush = emu::flush_pending();
    return err != cudaSuccess ? err : flush;
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
    if (!ms || !start || !end) return emu::fail(cudaErrorInvalidValue, "cudaEventElapsedTime: null argument");
    if (!start->timing || !end->timing)
        return emu::fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: an event made with cudaEventDisableTiming");
    if (!start->recorded || !end->recorded)
        return emu::fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: an event was never recorded");
    *ms = (float)(end->ms - start->ms);
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
    if (!event) return emu::fail(cudaErrorInvalidResourceHandle, "cudaEventDestroy: null event");
    if (event->stream && !event->recorded) emu::drain(event->stream, event->seq);  // its record writes it
    delete event;
    return cudaSuccess;
}

} // extern "C"
