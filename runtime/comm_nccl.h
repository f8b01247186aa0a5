// comm_nccl.h — the collective interface of comm.h over NCCL: one rank per GPU, all in one
// process, each rank driven by its own host thread (the agent pool's SPMD workers).
//
// Buffers are device pointers on the rank's GPU. Each rank has its own stream
// (emx_comm_nccl_stream); a collective is enqueued on it and the call returns once the stream
// has finished it, so the host loop can read the result right away. Work on other streams that
// writes the buffers must be finished (or ordered before, with an event) before the call.
// Every call sets the calling thread's current device to the rank's GPU and leaves it there.
//
// How the ranks are made: ncclCommInitAll, by emx_comm_nccl_new on the thread that creates the
// group, before any worker thread starts. (Thread-per-rank ncclCommInitRank would need every
// worker inside the constructor at once; InitAll gives one call that either makes the whole
// group or fails with a message, and NCCL communicators may be used from any thread afterwards,
// as long as one thread at a time uses each.) The constructor also runs one all_gather and
// one broadcast on every rank, grouped from its own thread: NCCL connects the GPUs lazily, on
// a communicator's first collectives, and those connections are made on the host, where a
// later abort could not interrupt them.
//
// abort(c) only marks the group failed (an atomic flag), so any thread may call it. Each rank's
// thread then ncclCommAbort's its own communicator: a rank waiting for its stream polls the
// flag (cudaStreamQuery in a loop, not cudaStreamSynchronize), aborts its communicator — which
// stops its collective kernel, stuck waiting for peers that never come — and returns -1; a
// rank that calls later returns -1 at once after doing the same. Communicators nobody aborted
// by then (the rank that called abort() is idle: its calls are synchronous) are aborted by
// emx_comm_nccl_free. A failed CUDA or NCCL call on a rank stores a message naming the call in
// the group (emx_comm_nccl_error) and aborts the group the same way.
//
// Limits: a rank blocked inside an NCCL host call (not waiting for its stream) is not woken
// by an abort; with the connections made up front no collective should block there. Under the
// CUDA emulator (tests/cuda_emu) a collective blocks until every rank has called it and the
// emulator has no ncclCommAbort (its ncclCommDestroy stands in): an abort reaches later calls
// only, not ranks already waiting in a collective.
//
// Several processes (one per GPU or per node) would bootstrap the same way NCCL always does,
// not implemented here: rank 0 calls ncclGetUniqueId and writes the 128-byte id to a file
// (to a temporary name, then rename(), so nobody reads half of it); the other processes poll
// for the file and read it; every process calls cudaSetDevice and then
// ncclCommInitRank(&comm, size, id, rank). The collectives and the abort logic above stay as
// they are, except that the abort flag would have to travel between processes (a shared file
// or the pool's own socket): one process aborting its communicator does not wake its peers.
#ifndef ENTROPIX_COMM_NCCL_H
#define ENTROPIX_COMM_NCCL_H

#include <cuda_runtime.h>
#include <stddef.h>

#include "comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct EmxCommNccl EmxCommNccl;

// A group of n ranks; rank r runs on GPU devices[r] (n in 1..64, distinct devices). Returns
// NULL with a one-line reason (naming the failed call) in err. The caller's current device is
// left as it was.
EmxCommNccl *emx_comm_nccl_new(const int *devices, int n, char *err, size_t errlen);
// Rank r's handle (owned by the group; valid until the group is freed); NULL if r is out of range.
EmxComm *emx_comm_nccl_rank(EmxCommNccl *g, int rank);
// The stream a rank's collectives run on (on the rank's GPU): the worker may put its own
// kernels on it, so they are ordered with the collectives. c must come from emx_comm_nccl_rank.
cudaStream_t emx_comm_nccl_stream(EmxComm *c);
// The first failure any rank met ("rank 1 (device 1): ncclAllGather: unhandled cuda error"),
// or "" if none. Read it once the calls that returned -1 have returned.
const char *emx_comm_nccl_error(EmxCommNccl *g);
// Destroys the communicators (aborts them if the group was aborted), streams and scratch
// buffers. Every rank must have returned from its last call. NULL is a no-op.
void emx_comm_nccl_free(EmxCommNccl *g);

#ifdef __cplusplus
}
#endif

#endif
