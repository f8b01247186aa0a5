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
// Several processes (one per GPU or per node) bootstrap the way NCCL always does
// (emx_comm_nccl_new_rank): rank 0 calls ncclGetUniqueId and writes the 128-byte id to a file
// (to a temporary name, then rename(), so nobody reads half of it); the other processes poll
// for the file and read it; every process calls cudaSetDevice and then
// ncclCommInitRank(&comm, size, id, rank), which returns once every rank has joined, and warms
// its own connections up as above. The collectives stay as they are; the abort does not travel
// between processes (the flag is per process: one process aborting its communicator does not
// wake its peers, whose collectives then fail by NCCL's own timeouts or the peer's exit; a
// shared file or the pool's own socket would carry it). The id file must be new for every run
// (a new temporary directory per job): a stale one from an earlier run names a dead group, and
// the waiting ranks would join nothing. The agent pool does not use this yet (one process, all
// ranks: emx_comm_nccl_new); the tests run it with threads standing in for processes.
#ifndef ENTROPIX_COMM_NCCL_H
#define ENTROPIX_COMM_NCCL_H

#include <cuda_runtime.h>
#include <stddef.h>

#include "runtime/pool/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct EmxCommNccl EmxCommNccl;

// A group of n ranks; rank r runs on GPU devices[r] (n in 1..64, distinct devices). Returns
// NULL with a one-line reason (naming the failed call) in err. The caller's current device is
// left as it was.
EmxCommNccl *emx_comm_nccl_new(const int *devices, int n, char *err, size_t errlen);
// This process's part of a group of `size` ranks spread over processes: rank `rank` on GPU
// `device`, bootstrapped through id_file as described above (rank 0 writes it; the others wait
// up to timeout_s seconds for it). Only emx_comm_nccl_rank/host_rank(g, rank) exist in the
// returned group; every process frees its own. Returns NULL with a one-line reason.
EmxCommNccl *emx_comm_nccl_new_rank(const char *id_file, int rank, int size, int device, double timeout_s, char *err,
                                    size_t errlen);
// Rank r's handle (owned by the group; valid until the group is freed); NULL if r is out of
// range or (emx_comm_nccl_new_rank) another process's rank.
EmxComm *emx_comm_nccl_rank(EmxCommNccl *g, int rank);
// Rank r's host-buffer handle: the same collectives (same rank, group, stream and abort flag)
// on HOST buffers, for callers whose data live on the host (the agent pool's proposal records
// and committed KV rows). Each call copies the host data into a staging buffer on the rank's
// GPU (cudaMemcpyAsync on the rank's stream), runs the collective in place there, waits for
// the stream as above (abortable), then copies the result back (all_gather: recv[size * bytes];
// broadcast: every rank but the root) and returns. The staging buffer is per rank, grows to
// the largest call (size * bytes for all_gather) and is freed with the group. The device and
// host handles of one rank are one rank: use either for a given call, never both at once.
EmxComm *emx_comm_nccl_host_rank(EmxCommNccl *g, int rank);
// The stream a rank's collectives run on (on the rank's GPU): the worker may put its own
// kernels on it, so they are ordered with the collectives. c must come from emx_comm_nccl_rank
// or emx_comm_nccl_host_rank.
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
