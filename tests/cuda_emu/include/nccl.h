// nccl.h (CUDA emulator) — the NCCL subset entropix uses, across emulated devices, by
// tests/cuda_emu/src/nccl.cpp.
//
// A communicator is one rank of a clique created by ncclCommInitRank (one host thread per rank,
// each having called cudaSetDevice; the call blocks until all ranks joined) or ncclCommInitAll
// (one thread, all ranks). Collectives match across ranks by their order on each communicator:
// the k-th call on every rank is one collective, run by whichever rank arrives last; a call
// returns when the collective is done. Between ncclGroupStart and ncclGroupEnd the calls only
// register, and ncclGroupEnd waits for all of them, so one thread may drive every rank. A wait
// never times out (a slow rank is no error); a deadlock aborts with a report naming the rank that
// can never arrive, as soon as it is certain: that rank's communicator was destroyed, or the
// thread that drove it (called its collectives outside a group) has exited or is itself blocked
// for good (src/nccl_wait.cpp). A rank that no thread has driven yet is assumed to be coming.
// Reductions run in rank order (0, 1, ...) in the element type (f16/bf16 sums rounded after each
// add); real NCCL's order differs, so compare floating-point results with a tolerance.
#ifndef EMU_NCCL_H
#define EMU_NCCL_H

#include <stddef.h>

#include "cuda_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct { char internal[NCCL_UNIQUE_ID_BYTES]; } ncclUniqueId;
typedef struct ncclComm *ncclComm_t;

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
} ncclResult_t;

typedef enum {
    ncclInt8 = 0, ncclChar = 0,
    ncclUint8 = 1,
    ncclInt32 = 2, ncclInt = 2,
    ncclUint32 = 3,
    ncclInt64 = 4,
    ncclUint64 = 5,
    ncclFloat16 = 6, ncclHalf = 6,
    ncclFloat32 = 7, ncclFloat = 7,
    ncclFloat64 = 8, ncclDouble = 8,
    ncclBfloat16 = 9,
} ncclDataType_t;

typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;

const char *ncclGetErrorString(ncclResult_t result);
ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);

#ifdef __cplusplus
}
#endif

#endif
