// cuda_runtime.h (CUDA emulator) — the subset of the CUDA runtime API that entropix uses, run on
// the CPU by tests/cuda_emu/src/*.cpp. C-compatible, like the real header, so C11 host code can
// call kernel launchers through it.
//
// Model: every emulated device is the host; device memory is heap memory that AddressSanitizer
// watches; every stream is synchronous (work runs when it is enqueued, in order), so events
// measure host time; stream capture records work into a graph that cudaGraphLaunch replays.
// Enum values are the real ones so error codes read the same in logs.
#ifndef EMU_CUDA_RUNTIME_H
#define EMU_CUDA_RUNTIME_H

#include <stddef.h>

#include "vector_types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorInvalidDeviceFunction = 98,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorIllegalState = 401,
    cudaErrorNotReady = 600,
    cudaErrorLaunchFailure = 719,
    cudaErrorCooperativeLaunchTooLarge = 720,
    cudaErrorNotSupported = 801,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorStreamCaptureInvalidated = 901,
    cudaErrorStreamCaptureImplicit = 906,
    cudaErrorStreamCaptureWrongThread = 908,
    cudaErrorUnknown = 999,
} cudaError_t;

typedef enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
} cudaMemcpyKind;

typedef enum cudaStreamCaptureMode {
    cudaStreamCaptureModeGlobal = 0,
    cudaStreamCaptureModeThreadLocal = 1,
    cudaStreamCaptureModeRelaxed = 2,
} cudaStreamCaptureMode;

typedef enum cudaFuncAttribute {
    cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
} cudaFuncAttribute;

typedef enum cudaDeviceAttr {
    cudaDevAttrMaxThreadsPerBlock = 1,
    cudaDevAttrMaxSharedMemoryPerBlock = 8,
    cudaDevAttrWarpSize = 10,
    cudaDevAttrClockRate = 13,
    cudaDevAttrMultiProcessorCount = 16,
    cudaDevAttrMemoryClockRate = 36,
    cudaDevAttrGlobalMemoryBusWidth = 37,
    cudaDevAttrL2CacheSize = 38,
    cudaDevAttrMaxThreadsPerMultiProcessor = 39,
    cudaDevAttrComputeCapabilityMajor = 75,
    cudaDevAttrComputeCapabilityMinor = 76,
    cudaDevAttrMaxSharedMemoryPerMultiprocessor = 81,
    cudaDevAttrMaxRegistersPerMultiprocessor = 82,
    cudaDevAttrCooperativeLaunch = 95,
    cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
    cudaDevAttrMaxBlocksPerMultiprocessor = 106,
} cudaDeviceAttr;

#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01

// The fields entropix reads; the emulated device reports H100-like figures.
typedef struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;      // 48 KiB: the default limit of one block
    size_t sharedMemPerBlockOptin; // what cudaFuncSetAttribute may raise it to
    int warpSize;
    int maxThreadsPerBlock;
    int maxThreadsDim[3];
    int maxGridSize[3];
    int multiProcessorCount;
    int memoryClockRate; // kHz (removed from the CUDA 13 struct: prefer cudaDeviceGetAttribute)
    int memoryBusWidth;  // bits (likewise)
    int l2CacheSize;
    int major, minor;
} cudaDeviceProp;

typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
typedef struct CUgraph_st *cudaGraph_t;
typedef struct CUgraphExec_st *cudaGraphExec_t;
typedef struct CUgraphNode_st *cudaGraphNode_t;

// cudaLaunchKernelEx's configuration (the real layout: attributes are 8-byte aligned ids
// followed by a 64-byte value union). Two attributes are emulated: Cooperative (the launch
// fails with cudaErrorCooperativeLaunchTooLarge unless every block can be resident at once) and
// ProgrammaticStreamSerialization (programmatic dependent launch: the kernel may call
// cudaGridDependencySynchronize / cudaTriggerProgrammaticLaunchCompletion); Ignore entries are
// skipped; any other id fails the launch with cudaErrorInvalidValue.
typedef enum cudaLaunchAttributeID {
    cudaLaunchAttributeIgnore = 0,
    cudaLaunchAttributeCooperative = 2,
    cudaLaunchAttributeProgrammaticStreamSerialization = 6,
} cudaLaunchAttributeID;

typedef union cudaLaunchAttributeValue {
    char pad[64];
    int cooperative;
    int programmaticStreamSerializationAllowed;
} cudaLaunchAttributeValue;

typedef struct cudaLaunchAttribute_st {
    cudaLaunchAttributeID id;
    char pad[8 - sizeof(cudaLaunchAttributeID)];
    cudaLaunchAttributeValue val;
} cudaLaunchAttribute;

typedef struct cudaLaunchConfig_st {
    dim3 gridDim;
    dim3 blockDim;
    size_t dynamicSmemBytes;
    cudaStream_t stream;
    cudaLaunchAttribute *attrs;
    unsigned int numAttrs;
} cudaLaunchConfig_t;

const char *cudaGetErrorString(cudaError_t error);
const char *cudaGetErrorName(cudaError_t error);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);

cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device);
cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int device);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaFuncSetAttribute(const void *func, cudaFuncAttribute attr, int value);
// Blocks of `func` (blockSize threads, dynamicSMemSize bytes of dynamic shared memory) one SM
// holds at once; with cudaDevAttrMultiProcessorCount, the largest grid whose blocks are all
// resident (what a cooperative launch allows). Registers are modelled as 64 per thread.
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, const void *func, int blockSize,
                                                          size_t dynamicSMemSize);

cudaError_t cudaMalloc(void **devPtr, size_t size);
cudaError_t cudaFree(void *devPtr);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);
cudaError_t cudaMallocHost(void **ptr, size_t size);
cudaError_t cudaFreeHost(void *ptr);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, cudaMemcpyKind kind,
                            cudaStream_t stream);
cudaError_t cudaMemset(void *devPtr, int value, size_t count);
cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream);

cudaError_t cudaStreamCreate(cudaStream_t *stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);

cudaError_t cudaEventCreate(cudaEvent_t *event);
#define cudaEventDefault 0x00
#define cudaEventDisableTiming 0x02
// flags: cudaEventDefault or cudaEventDisableTiming (such an event cannot be timed)
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaEventDestroy(cudaEvent_t event);

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream);
cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t *nodes, size_t *numNodes);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);

#ifdef __cplusplus
} // extern "C"

// C++ takes the kernel itself, as the real header's template overload does.
template <class T>
static inline cudaError_t cudaFuncSetAttribute(T *func, cudaFuncAttribute attr, int value) {
    return cudaFuncSetAttribute(reinterpret_cast<const void *>(func), attr, value);
}
template <class T>
static inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, T *func, int blockSize,
                                                                        size_t dynamicSMemSize) {
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(numBlocks, reinterpret_cast<const void *>(func), blockSize,
                                                         dynamicSMemSize);
}
#endif

#endif
