// nccl_internal.h — the NCCL emulation's state: cliques of communicators, the collectives in
// flight (what each rank passed; nccl_data.cpp moves the data once all ranks have arrived), and
// the host threads blocked in them (nccl_wait.cpp, which also finds deadlocks).
#ifndef EMU_NCCL_INTERNAL_H
#define EMU_NCCL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "../include/nccl.h"

namespace emu_nccl {
enum class Kind { AllGather, Broadcast, AllReduce };
inline const char *kind_name(Kind k) {
    return k == Kind::AllGather ? "ncclAllGather" : k == Kind::Broadcast ? "ncclBroadcast" : "ncclAllReduce";
}

struct Args {
    const void *send;
    void *recv;
    size_t count; // elements per rank (all-gather: sent by each rank)
    ncclDataType_t type;
    ncclRedOp_t op;
    int root;
};

struct Op {
    Kind kind;
    std::vector<Args> args; // by rank
    std::vector<bool> arrived;
    int count = 0;     // ranks arrived
    int remaining = 0; // ranks that have not yet seen it done (erased at 0)
    bool done = false;
    ncclResult_t result = ncclSuccess;
};

struct Clique {
    int nranks;
    std::vector<ncclComm_t> comms; // by rank; nullptr before the rank joined and after it was destroyed
    std::vector<bool> gone;        // by rank: its communicator was destroyed
    int joined = 0;
    int refs = 0;    // communicators alive
    int waiting = 0; // waits registered by blocked host threads (the clique outlives them)
    std::string id;
    std::map<uint64_t, Op> ops; // by sequence number: the k-th call on each rank's communicator
};

// One host thread's view (thread_local in nccl_wait.cpp).
struct HostThread;

// A wait: collective `seq` of `clique`, or kJoin: the clique fully joined (ncclCommInitRank).
const uint64_t kJoin = UINT64_MAX;
struct Pending {
    Clique *clique;
    uint64_t seq;
    int rank; // the waiting rank
};

// Everything below and every Clique / ncclComm field is guarded by this one mutex: a deadlock
// may run through several cliques, so they are looked at together.
extern std::mutex mu;
extern std::condition_variable cv;

// The calling thread drives `comm` (it called a collective on it outside a group): while this
// thread is blocked, `comm`'s rank cannot arrive anywhere. Lock held.
void note_driver(ncclComm_t comm);
// A live communicator (for the thread-exit bookkeeping), and its end. Lock held.
void comm_created(ncclComm_t comm);
void comm_destroyed(ncclComm_t comm);
// Blocks the calling thread until every wait in `waits` is done (erasing collectives the last
// rank has seen); reports a deadlock and aborts if one forms. Lock held (by `lock`).
void wait_all(std::unique_lock<std::mutex> &lock, std::vector<Pending> waits);
// Aborts with a report if some blocked host threads can never be released. Lock held.
void check_deadlock();
// Frees the clique once no communicator and no wait refers to it (nccl.cpp). Lock held.
void release_if_unused(Clique *c);

// Bytes of one element; 0 for an unknown type.
size_t nccl_type_size(ncclDataType_t t);
// Moves the data of a collective whose ranks have all arrived (op.args holds every rank's).
void nccl_perform(Op &op);

} // namespace emu_nccl

struct ncclComm {
    emu_nccl::Clique *clique;
    int rank;
    int device;
    uint64_t next_seq;
    emu_nccl::HostThread *driver; // the last thread that called a collective on it outside a group
    bool driver_exited;           // ... and that thread has ended since
};

#endif
