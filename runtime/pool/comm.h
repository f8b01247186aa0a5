// comm.h — how the agent pool's workers talk to each other: one small collective interface,
// two implementations.
//
// The pool's workers are SPMD: every worker runs the same loop on its own model replica (its
// own KV cache; on the CPU the weights are shared, mmapped once) and owns a slice of the agents.
// Once per round they exchange fixed-size records (each worker's proposals: all_gather) and
// the decisions one of them takes (the critic's verdict, the winning branch's KV rows:
// broadcast). That is all the coordination there is, so it fits in three calls:
//
//   implementation       ranks are          buffers live in      file
//   threads (CPU)        host threads       host memory          runtime/pool/comm_threads.c
//   NCCL (GPUs)          one GPU each       that GPU's memory    runtime/cuda/comm_nccl.cu
//
// Every call is collective: all `size` ranks make the same calls in the same order with the
// same byte counts (as with MPI or NCCL); a rank that does not come blocks the others. A rank
// that fails calls abort(): every rank's pending and later calls then return -1, so the
// workers unwind instead of waiting for ever.
#ifndef ENTROPIX_COMM_H
#define ENTROPIX_COMM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct EmxComm EmxComm;
struct EmxComm {
    int rank;  // 0 .. size-1; rank 0 prints, logs and runs the critic
    int size;
    // recv[size * bytes] receives every rank's send[bytes], in rank order (recv + r * bytes holds
    // rank r's). send may alias recv + rank * bytes (in place). Returns 0, or -1 after an abort.
    int (*all_gather)(EmxComm *c, const void *send, void *recv, size_t bytes);
    // root's buf[0..bytes) is copied into every other rank's buf. Returns 0, or -1 after an abort.
    int (*broadcast)(EmxComm *c, void *buf, size_t bytes, int root);
    // Waits until every rank has arrived. Returns 0, or -1 after an abort.
    int (*barrier)(EmxComm *c);
    // Marks the group failed: wakes every rank blocked in a call; all later calls return -1.
    void (*abort)(EmxComm *c);
};

// ---------------------------------------------------------------------------------------------
// Threads: `size` ranks in one process, each driven by its own host thread.

typedef struct EmxCommThreads EmxCommThreads;

// A group of `size` ranks (1 <= size <= 64). Returns NULL with a one-line reason.
EmxCommThreads *emx_comm_threads_new(int size, char *err, size_t errlen);
// Rank r's handle (owned by the group; valid until the group is freed).
EmxComm *emx_comm_threads_rank(EmxCommThreads *g, int rank);
// Frees the group; every rank must have returned from its last call.
void emx_comm_threads_free(EmxCommThreads *g);

#ifdef __cplusplus
}
#endif

#endif
