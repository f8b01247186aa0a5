// nccl.cpp — NCCL collectives across emulated devices (see include/nccl.h for the model).
//
// A clique holds the communicators of all ranks and the collectives in flight, keyed by their
// sequence number (the k-th call on each rank's communicator). Each rank deposits its buffers;
// the last to arrive does the data movement for everybody and wakes the others. Everything is
// under one mutex (emu_nccl::mu); waits never time out, but a deadlock is reported and aborts as
// soon as it forms (nccl_wait.cpp).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "../include/emu/launch.h"
#include "../include/nccl.h"
#include "nccl_internal.h"
#include "runtime_internal.h"

using namespace emu_nccl;

namespace {

std::map<std::string, Clique *> registry; // cliques being formed by ncclCommInitRank
std::atomic<unsigned long> id_counter{0};

// Work this host thread registered inside ncclGroupStart/End: wait for it at the end.
thread_local int group_depth = 0;
thread_local std::vector<Pending> pending;

ncclResult_t fail(ncclResult_t r, const std::string &msg) {
    fprintf(stderr, "EMU: NCCL: %s\n", msg.c_str());
    return r;
}

// Registers rank `comm`'s part of its next collective; runs it if this rank is the last.
// Returns the sequence number. Lock held.
uint64_t deposit(ncclComm_t comm, Kind kind, const Args &args, bool grouped) {
    Clique &c = *comm->clique;
    if (!grouped) note_driver(comm);
    uint64_t seq = comm->next_seq++;
    auto it = c.ops.find(seq);
    if (it == c.ops.end()) {
        it = c.ops.emplace(seq, Op{}).first;
        it->second.kind = kind;
        it->second.args.resize((size_t)c.nranks);
        it->second.arrived.assign((size_t)c.nranks, false);
        it->second.remaining = c.nranks;
    }
    Op &op = it->second;
    if (op.count > 0) { // compare with the first rank that arrived
        int fr = 0;
        while (!op.arrived[(size_t)fr]) fr++;
        const Args &f = op.args[(size_t)fr];
        if (op.kind != kind || f.count != args.count || f.type != args.type || f.op != args.op || f.root != args.root) {
            fprintf(stderr, "EMU FAULT: NCCL: collective #%llu: rank %d calls %s(count %zu, type %d) but rank %d "
                            "called %s(count %zu, type %d): the ranks' calls do not match\n",
                    (unsigned long long)seq, comm->rank, kind_name(kind), args.count, (int)args.type, fr,
                    kind_name(op.kind), f.count, (int)f.type);
            abort();
        }
    }
    op.args[(size_t)comm->rank] = args;
    op.arrived[(size_t)comm->rank] = true;
    if (++op.count == c.nranks) {
        nccl_perform(op);
        op.done = true;
        cv.notify_all();
    }
    return seq;
}

bool buffer_ok(const void *p, size_t bytes) { return bytes == 0 || emu::device_range(p, bytes); }

ncclResult_t collective(ncclComm_t comm, Kind kind, Args args, cudaStream_t stream) {
    if (!comm) return fail(ncclInvalidArgument, std::string(kind_name(kind)) + ": null communicator");
    size_t es = nccl_type_size(args.type);
    if (es == 0) return fail(ncclInvalidArgument, std::string(kind_name(kind)) + ": unsupported data type");
    int nranks = comm->clique->nranks;
    size_t send_bytes = args.count * es, recv_bytes = kind == Kind::AllGather ? send_bytes * (size_t)nranks : send_bytes;
    bool needs_send = kind != Kind::Broadcast || args.root == comm->rank;
    if (kind == Kind::Broadcast && (args.root < 0 || args.root >= nranks))
        return fail(ncclInvalidArgument, "ncclBroadcast: root " + std::to_string(args.root) + " out of range");
    if ((needs_send && !buffer_ok(args.send, send_bytes)) || !buffer_ok(args.recv, recv_bytes))
        return fail(ncclInvalidArgument, std::string(kind_name(kind)) + " on rank " + std::to_string(comm->rank) +
                                             ": a buffer is not device memory of the needed size (send " +
                                             std::to_string(send_bytes) + ", recv " + std::to_string(recv_bytes) + " bytes)");
    bool grouped = group_depth > 0 && !(stream && stream->capture);
    // not held by a deferred stream: a group's calls meet at ncclGroupEnd (emu/launch.h)
    cudaError_t err = emu::submit_now(stream, kind_name(kind), [comm, kind, args, grouped]() {
        std::unique_lock<std::mutex> lock(mu);
        Pending p{comm->clique, deposit(comm, kind, args, grouped), comm->rank};
        if (grouped)
            pending.push_back(p);
        else
            wait_all(lock, {p});
        return cudaSuccess;
    });
    return err == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
}

Clique *new_clique(int nranks) {
    Clique *c = new Clique;
    c->nranks = nranks;
    c->comms.assign((size_t)nranks, nullptr);
    c->gone.assign((size_t)nranks, false);
    return c;
}

ncclComm_t new_comm(Clique *c, int rank, int device) {
    ncclComm_t comm = new ncclComm{c, rank, device, 0, nullptr, false};
    c->comms[(size_t)rank] = comm;
    c->refs++;
    comm_created(comm);
    return comm;
}

} // namespace

void emu_nccl::release_if_unused(Clique *c) {
    if (c->refs > 0 || c->waiting > 0) return;
    auto it = registry.find(c->id);
    if (it != registry.end() && it->second == c) registry.erase(it);
    delete c;
}

extern "C" {

const char *ncclGetErrorString(ncclResult_t result) {
    switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    }
    return "unknown result code";
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId) {
    if (!uniqueId) return fail(ncclInvalidArgument, "ncclGetUniqueId: null pointer");
    memset(uniqueId, 0, sizeof *uniqueId);
    snprintf(uniqueId->internal, sizeof uniqueId->internal, "emu-nccl-%d-%lu", (int)getpid(), ++id_counter);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank) {
    if (!comm || nranks < 1 || rank < 0 || rank >= nranks)
        return fail(ncclInvalidArgument, "ncclCommInitRank: rank " + std::to_string(rank) + " of " + std::to_string(nranks));
    std::string id(commId.internal, strnlen(commId.internal, sizeof commId.internal));
    std::unique_lock<std::mutex> lock(mu);
    auto it = registry.find(id);
    Clique *c;
    if (it == registry.end()) {
        c = new_clique(nranks);
        c->id = id;
        registry[id] = c;
    } else {
        c = it->second;
    }
    if (c->nranks != nranks || c->comms[(size_t)rank] || c->gone[(size_t)rank])
        return fail(ncclInvalidUsage, "ncclCommInitRank: rank " + std::to_string(rank) + " joined twice or nranks differs");
    *comm = new_comm(c, rank, emu::current_device());
    if (group_depth == 0) note_driver(*comm);
    if (++c->joined == nranks) {
        registry.erase(id); // formed: the id may not be used again
        cv.notify_all();
    }
    Pending p{c, kJoin, rank};
    if (group_depth > 0)
        pending.push_back(p);
    else
        wait_all(lock, {p});
    return ncclSuccess;
}

ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist) {
    if (!comms || ndev < 1) return fail(ncclInvalidArgument, "ncclCommInitAll: bad arguments");
    std::lock_guard<std::mutex> lock(mu);
    Clique *c = new_clique(ndev);
    // No driving thread yet: the ranks are usually handed to threads of their own.
    for (int r = 0; r < ndev; r++) comms[r] = new_comm(c, r, devlist ? devlist[r] : r);
    c->joined = ndev;
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (!comm) return fail(ncclInvalidArgument, "ncclCommDestroy: null communicator");
    std::lock_guard<std::mutex> lock(mu);
    Clique *c = comm->clique;
    comm_destroyed(comm); // a rank that others wait for is gone: that deadlock is reported here
    delete comm;
    release_if_unused(c);
    return ncclSuccess;
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
    return collective(comm, Kind::AllGather, Args{sendbuff, recvbuff, sendcount, datatype, ncclSum, 0}, stream);
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
    return collective(comm, Kind::Broadcast, Args{sendbuff, recvbuff, count, datatype, ncclSum, root}, stream);
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    return collective(comm, Kind::AllReduce, Args{sendbuff, recvbuff, count, datatype, op, 0}, stream);
}

ncclResult_t ncclGroupStart(void) {
    group_depth++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
    if (group_depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
    if (--group_depth > 0) return ncclSuccess;
    std::vector<Pending> work;
    work.swap(pending);
    std::unique_lock<std::mutex> lock(mu);
    wait_all(lock, std::move(work));
    return ncclSuccess;
}

} // extern "C"
