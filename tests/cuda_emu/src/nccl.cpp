// nccl.cpp — NCCL collectives across emulated devices (see include/nccl.h for the model).
//
// A clique holds the communicators of all ranks and the collectives in flight, keyed by their
// sequence number (the k-th call on each rank's communicator). Each rank deposits its buffers;
// the last to arrive does the data movement for everybody and wakes the others. Everything is
// under the clique's mutex; waits time out loudly instead of hanging the test suite.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
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

struct Clique {
    int nranks;
    std::mutex mu;
    std::condition_variable cv;
    std::vector<ncclComm_t> comms; // by rank
    int joined = 0;
    int refs = 0;
    std::string id;
    std::map<uint64_t, Op> ops;
};

} // namespace

struct ncclComm {
    Clique *clique;
    int rank;
    int device;
    uint64_t next_seq;
};

namespace {

std::mutex registry_mutex;
std::map<std::string, Clique *> registry; // cliques being formed by ncclCommInitRank
std::atomic<unsigned long> id_counter{0};

// Work this host thread registered inside ncclGroupStart/End: wait for it at the end.
struct Pending {
    Clique *clique;
    uint64_t seq; // an op, or UINT64_MAX: wait for the clique to be fully joined
    int rank;
};
thread_local int group_depth = 0;
thread_local std::vector<Pending> pending;

double timeout_s() {
    const char *env = getenv("EMU_NCCL_TIMEOUT_S");
    return env && atof(env) > 0 ? atof(env) : 20.0;
}

ncclResult_t fail(ncclResult_t r, const std::string &msg) {
    fprintf(stderr, "EMU: NCCL: %s\n", msg.c_str());
    return r;
}

// Waits (the lock held) until `ready()`; past the timeout reports `what` and aborts.
template <class F> void wait_or_die(Clique &c, std::unique_lock<std::mutex> &lock, F ready, const std::string &what) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s());
    while (!ready()) {
        if (c.cv.wait_until(lock, deadline) == std::cv_status::timeout && !ready()) {
            fprintf(stderr, "EMU FAULT: NCCL: %s (one host thread that drives several ranks must wrap the calls in "
                            "ncclGroupStart/ncclGroupEnd)\n", what.c_str());
            abort();
        }
    }
}

std::string missing_ranks(const Op &op) {
    std::string s;
    for (size_t r = 0; r < op.arrived.size(); r++)
        if (!op.arrived[r]) s += (s.empty() ? "" : ", ") + std::to_string(r);
    return s;
}

// Registers rank `comm`'s part of its next collective; runs it if this rank is the last.
// Returns the sequence number.
ncclResult_t deposit(ncclComm_t comm, Kind kind, const Args &args, uint64_t *seq_out) {
    Clique &c = *comm->clique;
    std::unique_lock<std::mutex> lock(c.mu);
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
        c.cv.notify_all();
    }
    *seq_out = seq;
    return ncclSuccess;
}

// Waits until collective `seq` is done; the last rank to see it erases it.
void await_op(Clique &c, uint64_t seq, int rank) {
    std::unique_lock<std::mutex> lock(c.mu);
    Op &op = c.ops.at(seq);
    wait_or_die(c, lock, [&op] { return op.done; },
                "rank " + std::to_string(rank) + ": " + kind_name(op.kind) + " (collective #" + std::to_string(seq) +
                    ") waits for rank(s) " + missing_ranks(op) + ", which never called it");
    if (--op.remaining == 0) c.ops.erase(seq);
}

void await_joined(Clique &c) {
    std::unique_lock<std::mutex> lock(c.mu);
    wait_or_die(c, lock, [&c] { return c.joined == c.nranks; },
                "ncclCommInitRank: " + std::to_string(c.joined) + " of " + std::to_string(c.nranks) + " ranks joined");
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
    cudaError_t err = emu::submit(stream, kind_name(kind), [comm, kind, args, grouped]() {
        uint64_t seq;
        deposit(comm, kind, args, &seq);
        if (grouped)
            pending.push_back(Pending{comm->clique, seq, comm->rank});
        else
            await_op(*comm->clique, seq, comm->rank);
        return cudaSuccess;
    });
    return err == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
}

Clique *new_clique(int nranks) {
    Clique *c = new Clique;
    c->nranks = nranks;
    c->comms.assign((size_t)nranks, nullptr);
    return c;
}

} // namespace

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
    Clique *c;
    {
        std::lock_guard<std::mutex> lock(registry_mutex);
        auto it = registry.find(id);
        if (it == registry.end()) {
            c = new_clique(nranks);
            c->id = id;
            registry[id] = c;
        } else {
            c = it->second;
        }
        std::lock_guard<std::mutex> clock(c->mu);
        if (c->nranks != nranks || c->comms[(size_t)rank])
            return fail(ncclInvalidUsage, "ncclCommInitRank: rank " + std::to_string(rank) + " joined twice or nranks differs");
        *comm = new ncclComm{c, rank, emu::current_device(), 0};
        c->comms[(size_t)rank] = *comm;
        c->refs++;
        if (++c->joined == nranks) {
            registry.erase(id); // formed: the id may not be used again
            c->cv.notify_all();
        }
    }
    if (group_depth > 0)
        pending.push_back(Pending{c, UINT64_MAX, rank});
    else
        await_joined(*c);
    return ncclSuccess;
}

ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist) {
    if (!comms || ndev < 1) return fail(ncclInvalidArgument, "ncclCommInitAll: bad arguments");
    Clique *c = new_clique(ndev);
    for (int r = 0; r < ndev; r++) {
        comms[r] = new ncclComm{c, r, devlist ? devlist[r] : r, 0};
        c->comms[(size_t)r] = comms[r];
    }
    c->joined = c->refs = ndev;
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (!comm) return fail(ncclInvalidArgument, "ncclCommDestroy: null communicator");
    Clique *c = comm->clique;
    bool last;
    {
        std::lock_guard<std::mutex> lock(c->mu);
        c->comms[(size_t)comm->rank] = nullptr;
        last = --c->refs == 0;
    }
    delete comm;
    if (last) {
        std::lock_guard<std::mutex> lock(registry_mutex);
        auto it = registry.find(c->id);
        if (it != registry.end() && it->second == c) registry.erase(it);
        delete c;
    }
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
    for (const Pending &p : work) {
        if (p.seq == UINT64_MAX)
            await_joined(*p.clique);
        else
            await_op(*p.clique, p.seq, p.rank);
    }
    return ncclSuccess;
}

} // extern "C"
