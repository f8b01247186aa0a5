// comm_nccl.cu — the collective interface of comm.h over NCCL (see comm_nccl.h for the model:
// one process, one GPU per rank, one host thread per rank; synchronous calls; abort by flag).
// Host code only: compiled by nvcc in `make cuda` and by the CUDA emulator for the tests.
//
//   all_gather  ncclAllGather(send, recv, bytes, ncclUint8)   (in place when send == recv + rank * bytes,
//                                                             which is NCCL's own in-place rule)
//   broadcast   ncclBroadcast(buf, buf, bytes, ncclUint8, root)
//   barrier     ncclAllGather of one byte per rank, in place in a scratch buffer
// each followed by a wait for the rank's stream that also watches the group's abort flag.
// The host-buffer ranks (emx_comm_nccl_host_rank) stage through a per-rank device buffer:
// cudaMemcpyAsync H2D, the same collective in place there, cudaMemcpyAsync D2H, all on the
// rank's stream (so they are ordered without host waits), then the same wait.
#include <nccl.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

#include "runtime/cuda/comm_nccl.h"
#include "base/errmsg.h"

namespace {
const int kMaxRanks = 64;
} // namespace

// (Not in the anonymous namespace: EmxCommNccl, which has external linkage, holds them.)
struct EmxNcclRank {
    EmxComm comm;           // first: an EmxComm * from this file is an EmxNcclRank *
    EmxCommNccl *group;
    int device;
    ncclComm_t nccl;        // nullptr once this rank's thread aborted it
    cudaStream_t stream;    // the rank's collectives run here
    unsigned char *scratch; // [size] on the rank's device: the barrier's one byte per rank
    EmxComm host;           // the host-buffer handle (emx_comm_nccl_host_rank)
    unsigned char *staging; // [staging_cap] on the rank's device: host buffers in transit
    size_t staging_cap;
};

struct EmxCommNccl {
    int size = 0;
    std::atomic<int> aborted{0};
    std::mutex error_mutex; // guards error: ranks fail from their own threads
    char error[320] = "";   // the first failure; later ones are usually its consequences
    EmxNcclRank ranks[kMaxRanks] = {};
};

namespace {

EmxNcclRank *rank_of(EmxComm *c) { return reinterpret_cast<EmxNcclRank *>(c); }

// The rank a host-buffer handle belongs to (its `host` member).
EmxNcclRank *rank_of_host(EmxComm *c) {
    return reinterpret_cast<EmxNcclRank *>(reinterpret_cast<char *>(c) - offsetof(EmxNcclRank, host));
}

// The emulator has no ncclCommAbort; its ncclCommDestroy never waits for the other ranks, which
// is all an abort needs there.
ncclResult_t abort_communicator(ncclComm_t comm) {
#ifdef ENTROPIX_CUDA_EMU
    return ncclCommDestroy(comm);
#else
    return ncclCommAbort(comm);
#endif
}

// Called on the rank's own thread once the group is aborted: stops whatever this rank has in
// flight (a collective kernel waiting for peers) and releases the communicator.
void abort_own_communicator(EmxNcclRank *r) {
    if (!r->nccl) return;
    abort_communicator(r->nccl); // nothing useful to do if even this fails
    r->nccl = nullptr;
}

// Records "rank R (device D): CALL: WHAT" as the group's error if it is the first, aborts the
// group and this rank's communicator. Returns -1.
int fail(EmxNcclRank *r, const char *call, const char *what) {
    EmxCommNccl *g = r->group;
    {
        std::lock_guard<std::mutex> lock(g->error_mutex);
        if (!g->error[0])
            snprintf(g->error, sizeof g->error, "rank %d (device %d): %s: %s", r->comm.rank, r->device, call, what);
    }
    g->aborted.store(1);
    abort_own_communicator(r);
    return -1;
}

int check_cuda(EmxNcclRank *r, cudaError_t e, const char *call) {
    return e == cudaSuccess ? 0 : fail(r, call, cudaGetErrorString(e));
}

int check_nccl(EmxNcclRank *r, ncclResult_t e, const char *call) {
    return e == ncclSuccess ? 0 : fail(r, call, ncclGetErrorString(e));
}

// Before each call: -1 if the group is aborted (this rank's communicator then goes too).
int begin_call(EmxNcclRank *r) {
    if (r->group->aborted.load()) {
        abort_own_communicator(r);
        return -1;
    }
    return check_cuda(r, cudaSetDevice(r->device), "cudaSetDevice");
}

// Waits until the rank's stream has run the collective just enqueued by `call`. Returns 0, or -1
// if it failed or the group was aborted meanwhile.
int wait_for_stream(EmxNcclRank *r, const char *call) {
#ifdef ENTROPIX_CUDA_EMU
    // The emulator runs a collective when every rank has enqueued it, before the enqueueing call
    // returns (and it has no cudaStreamQuery): there is nothing left to poll.
    (void)call;
    return check_cuda(r, cudaStreamSynchronize(r->stream), "cudaStreamSynchronize");
#else
    // Poll rather than cudaStreamSynchronize, which could not be interrupted by an abort: spin
    // at first (a round's collectives are small and take microseconds), then back off so a
    // rank waiting for a slow peer does not burn a core.
    for (long polls = 0;; polls++) {
        cudaError_t e = cudaStreamQuery(r->stream);
        if (e == cudaSuccess) return 0;
        if (e != cudaErrorNotReady) return fail(r, "cudaStreamQuery", cudaGetErrorString(e));
        if (r->group->aborted.load()) {
            abort_own_communicator(r);
            return -1;
        }
        ncclResult_t async = ncclSuccess;
        if (check_nccl(r, ncclCommGetAsyncError(r->nccl, &async), "ncclCommGetAsyncError")) return -1;
        if (async != ncclSuccess && async != ncclInProgress) return fail(r, call, ncclGetErrorString(async));
        if (polls > 20000) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
#endif
}

// A broadcast root outside the group fails the call (and the group), naming it.
int bad_root(EmxNcclRank *r, const EmxComm *c, int root) {
    if (root >= 0 && root < c->size) return 0;
    char what[64];
    snprintf(what, sizeof what, "root %d out of range 0..%d", root, c->size - 1);
    return fail(r, "broadcast", what);
}

int nccl_all_gather(EmxComm *c, const void *send, void *recv, size_t bytes) {
    EmxNcclRank *r = rank_of(c);
    if (begin_call(r)) return -1;
    if (bytes == 0) return 0; // nothing to move, and NCCL need not be asked about zero counts
    if (check_nccl(r, ncclAllGather(send, recv, bytes, ncclUint8, r->nccl, r->stream), "ncclAllGather")) return -1;
    return wait_for_stream(r, "ncclAllGather");
}

int nccl_broadcast(EmxComm *c, void *buf, size_t bytes, int root) {
    EmxNcclRank *r = rank_of(c);
    if (begin_call(r)) return -1;
    if (bad_root(r, c, root)) return -1;
    if (bytes == 0) return 0;
    if (check_nccl(r, ncclBroadcast(buf, buf, bytes, ncclUint8, root, r->nccl, r->stream), "ncclBroadcast")) return -1;
    return wait_for_stream(r, "ncclBroadcast");
}

int nccl_barrier(EmxComm *c) {
    EmxNcclRank *r = rank_of(c);
    if (begin_call(r)) return -1;
    // Nobody's data matters: every rank only has to have arrived for the gather to finish.
    if (check_nccl(r, ncclAllGather(r->scratch + c->rank, r->scratch, 1, ncclUint8, r->nccl, r->stream),
                   "ncclAllGather (barrier)"))
        return -1;
    return wait_for_stream(r, "ncclAllGather (barrier)");
}

void nccl_abort(EmxComm *c) { rank_of(c)->group->aborted.store(1); }

// ---------------------------------------------------------------------------------------------
// Host buffers: staged through the rank's device buffer

// Makes the staging buffer hold at least `bytes` (grow only: a round's sizes repeat). The
// rank's device is current (begin_call).
int ensure_staging(EmxNcclRank *r, size_t bytes) {
    if (bytes <= r->staging_cap) return 0;
    // Nothing of ours is in flight here (every call waits for its stream before returning).
    if (r->staging && check_cuda(r, cudaFree(r->staging), "cudaFree (staging)")) return -1;
    r->staging = nullptr;
    r->staging_cap = 0;
    if (check_cuda(r, cudaMalloc((void **)&r->staging, bytes), "cudaMalloc (staging)")) return -1;
    r->staging_cap = bytes;
    return 0;
}

int copy_async(EmxNcclRank *r, void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, const char *call) {
    return check_cuda(r, cudaMemcpyAsync(dst, src, bytes, kind, r->stream), call);
}

// The device-to-host copy after a collective, once the (abortable) wait has seen it finish: a
// copy into pageable host memory blocks the host until the stream gets to it, so it must not
// be enqueued behind a collective that might never end.
int copy_back(EmxNcclRank *r, void *dst, const void *src, size_t bytes) {
    return copy_async(r, dst, src, bytes, cudaMemcpyDeviceToHost, "cudaMemcpyAsync (D2H)") ||
                   check_cuda(r, cudaStreamSynchronize(r->stream), "cudaStreamSynchronize (D2H)")
               ? -1
               : 0;
}

int host_all_gather(EmxComm *c, const void *send, void *recv, size_t bytes) {
    EmxNcclRank *r = rank_of_host(c);
    if (begin_call(r)) return -1;
    if (bytes == 0) return 0;
    const size_t total = bytes * (size_t)c->size;
    if (ensure_staging(r, total)) return -1;
    unsigned char *mine = r->staging + (size_t)c->rank * bytes;
    // In place on the device (NCCL's own rule), whether or not send aliases recv on the host.
    if (copy_async(r, mine, send, bytes, cudaMemcpyHostToDevice, "cudaMemcpyAsync (H2D)") ||
        check_nccl(r, ncclAllGather(mine, r->staging, bytes, ncclUint8, r->nccl, r->stream), "ncclAllGather") ||
        wait_for_stream(r, "ncclAllGather"))
        return -1;
    return copy_back(r, recv, r->staging, total);
}

int host_broadcast(EmxComm *c, void *buf, size_t bytes, int root) {
    EmxNcclRank *r = rank_of_host(c);
    if (begin_call(r)) return -1;
    if (bad_root(r, c, root)) return -1;
    if (bytes == 0) return 0;
    if (ensure_staging(r, bytes)) return -1;
    if (c->rank == root && copy_async(r, r->staging, buf, bytes, cudaMemcpyHostToDevice, "cudaMemcpyAsync (H2D)"))
        return -1;
    if (check_nccl(r, ncclBroadcast(r->staging, r->staging, bytes, ncclUint8, root, r->nccl, r->stream),
                   "ncclBroadcast") ||
        wait_for_stream(r, "ncclBroadcast"))
        return -1;
    // The root's buffer already holds the data.
    return c->rank == root ? 0 : copy_back(r, buf, r->staging, bytes);
}

int host_barrier(EmxComm *c) { return nccl_barrier(&rank_of_host(c)->comm); }

void host_abort(EmxComm *c) { rank_of_host(c)->group->aborted.store(1); }

// The constructor's one-line error "comm_nccl: CALL: WHAT", after undoing what was made.
EmxCommNccl *new_failed(EmxCommNccl *g, int caller_device, char *err, size_t errlen, const char *call,
                        const char *what) {
    if (err && errlen) emx_seterr(err, errlen, "comm_nccl: %s: %s", call, what);
    emx_comm_nccl_free(g);
    if (caller_device >= 0) cudaSetDevice(caller_device);
    return nullptr;
}

// Every rank's first all_gather and broadcast, from this one thread (grouped, so no rank waits
// for a peer that this same thread has not enqueued yet): NCCL makes its connections here.
// Ranks r0..r1-1 are this process's (all of them, or one: emx_comm_nccl_new_rank).
int warm_up(EmxCommNccl *g, int r0, int r1, char *err, size_t errlen) {
    ncclResult_t e = ncclGroupStart();
    const char *call = "ncclGroupStart";
    for (int r = r0; r < r1 && e == ncclSuccess; r++) {
        EmxNcclRank *k = &g->ranks[r];
        if (cudaSetDevice(k->device) != cudaSuccess) {
            ncclGroupEnd();
            if (err && errlen) emx_seterr(err, errlen, "comm_nccl: warm-up: cudaSetDevice(%d) failed", k->device);
            return -1;
        }
        call = "ncclAllGather";
        e = ncclAllGather(k->scratch + r, k->scratch, 1, ncclUint8, k->nccl, k->stream);
        if (e == ncclSuccess) {
            call = "ncclBroadcast";
            e = ncclBroadcast(k->scratch, k->scratch, g->size, ncclUint8, 0, k->nccl, k->stream);
        }
    }
    ncclResult_t end = ncclGroupEnd();
    if (e == ncclSuccess && end != ncclSuccess) {
        e = end;
        call = "ncclGroupEnd";
    }
    if (e != ncclSuccess) {
        if (err && errlen) emx_seterr(err, errlen, "comm_nccl: warm-up: %s: %s", call, ncclGetErrorString(e));
        return -1;
    }
    for (int r = r0; r < r1; r++) {
        cudaError_t ce = cudaSetDevice(g->ranks[r].device);
        if (ce == cudaSuccess) ce = cudaStreamSynchronize(g->ranks[r].stream);
        if (ce != cudaSuccess) {
            if (err && errlen)
                emx_seterr(err, errlen, "comm_nccl: warm-up: cudaStreamSynchronize on device %d: %s", g->ranks[r].device,
                         cudaGetErrorString(ce));
            return -1;
        }
    }
    return 0;
}

// Rank r of g, on `device`, driven through `nccl` (may be nullptr when the init failed).
void init_rank(EmxCommNccl *g, int r, int device, ncclComm_t nccl) {
    EmxNcclRank *k = &g->ranks[r];
    k->group = g;
    k->device = device;
    k->nccl = nccl;
    k->comm.rank = r;
    k->comm.size = g->size;
    k->comm.all_gather = nccl_all_gather;
    k->comm.broadcast = nccl_broadcast;
    k->comm.barrier = nccl_barrier;
    k->comm.abort = nccl_abort;
    k->host = k->comm;
    k->host.all_gather = host_all_gather;
    k->host.broadcast = host_broadcast;
    k->host.barrier = host_barrier;
    k->host.abort = host_abort;
}

// A rank's stream and barrier scratch on its device. Returns nullptr, or the failed call's name
// with its error in *ce.
const char *rank_resources(EmxNcclRank *k, cudaError_t *ce) {
    if ((*ce = cudaSetDevice(k->device)) != cudaSuccess) return "cudaSetDevice";
    if ((*ce = cudaStreamCreateWithFlags(&k->stream, cudaStreamNonBlocking)) != cudaSuccess)
        return "cudaStreamCreateWithFlags";
    if ((*ce = cudaMalloc((void **)&k->scratch, (size_t)k->group->size)) != cudaSuccess) return "cudaMalloc";
    return nullptr;
}

// Rank 0 of a multi-process group: publishes the id, whole or not at all (a temporary name,
// then rename, which is atomic within a file system).
int write_id_file(const char *path, const ncclUniqueId *id, char *err, size_t errlen) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    bool ok = f && fwrite(id, sizeof *id, 1, f) == 1;
    if (f && fclose(f) != 0) ok = false;
    if (ok && rename(tmp, path) != 0) ok = false;
    if (!ok) {
        if (err && errlen) emx_seterr(err, errlen, "comm_nccl: cannot write the NCCL id to %s: %s", path, strerror(errno));
        remove(tmp);
        return -1;
    }
    return 0;
}

// The other ranks: wait for the file to appear (it is complete when it does), then read it.
int read_id_file(const char *path, double timeout_s, ncclUniqueId *id, char *err, size_t errlen) {
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
        FILE *f = fopen(path, "rb");
        if (f) {
            const size_t got = fread(id, sizeof *id, 1, f);
            fclose(f);
            if (got == 1) return 0;
            if (err && errlen) emx_seterr(err, errlen, "comm_nccl: %s is shorter than an NCCL id (%zu bytes)", path, sizeof *id);
            return -1;
        }
        const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (waited > timeout_s) {
            if (err && errlen)
                emx_seterr(err, errlen, "comm_nccl: no NCCL id at %s after %.0f s (is rank 0 running?)", path, timeout_s);
            return -1;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
}

// The two constructors' common ends. group_new: an empty group of `size` ranks; remembers the
// caller's current device (every call below may change it). group_ready: ranks [r0, r1) connect
// (warm_up), then the caller's device is restored; the group, or NULL after freeing it.
EmxCommNccl *group_new(int size, int *caller_device, char *err, size_t errlen) {
    if (cudaGetDevice(caller_device) != cudaSuccess) *caller_device = -1;
    EmxCommNccl *g = new (std::nothrow) EmxCommNccl;
    if (!g) {
        if (err && errlen) emx_seterr(err, errlen, "comm_nccl: out of memory");
        return nullptr;
    }
    g->size = size;
    return g;
}

EmxCommNccl *group_ready(EmxCommNccl *g, int r0, int r1, int caller_device, char *err, size_t errlen) {
    if (warm_up(g, r0, r1, err, errlen)) {
        emx_comm_nccl_free(g);
        g = nullptr;
    }
    if (caller_device >= 0) cudaSetDevice(caller_device);
    return g;
}

} // namespace

extern "C" {

EmxCommNccl *emx_comm_nccl_new(const int *devices, int n, char *err, size_t errlen) {
    if (!devices || n < 1 || n > kMaxRanks) {
        if (err && errlen) emx_seterr(err, errlen, "comm_nccl: group size %d is out of range 1..%d", n, kMaxRanks);
        return nullptr;
    }
    int count = 0;
    cudaError_t ce = cudaGetDeviceCount(&count);
    if (ce != cudaSuccess) {
        if (err && errlen) emx_seterr(err, errlen, "comm_nccl: cudaGetDeviceCount: %s", cudaGetErrorString(ce));
        return nullptr;
    }
    for (int r = 0; r < n; r++) {
        if (devices[r] < 0 || devices[r] >= count) {
            if (err && errlen)
                emx_seterr(err, errlen, "comm_nccl: rank %d: device %d does not exist (%d devices)", r, devices[r], count);
            return nullptr;
        }
        for (int q = 0; q < r; q++)
            if (devices[q] == devices[r]) {
                // NCCL refuses two ranks of one communicator on one GPU.
                if (err && errlen)
                    emx_seterr(err, errlen, "comm_nccl: ranks %d and %d are both on device %d", q, r, devices[r]);
                return nullptr;
            }
    }
    int caller_device = -1;
    EmxCommNccl *g = group_new(n, &caller_device, err, errlen);
    if (!g) return nullptr;
    std::vector<ncclComm_t> comms((size_t)n, nullptr);
    ncclResult_t ne = ncclCommInitAll(comms.data(), n, devices);
    for (int r = 0; r < n; r++) init_rank(g, r, devices[r], ne == ncclSuccess ? comms[(size_t)r] : nullptr);
    if (ne != ncclSuccess)
        return new_failed(g, caller_device, err, errlen, "ncclCommInitAll", ncclGetErrorString(ne));
    for (int r = 0; r < n; r++) {
        const char *call = rank_resources(&g->ranks[r], &ce);
        if (call) return new_failed(g, caller_device, err, errlen, call, cudaGetErrorString(ce));
    }
    return group_ready(g, 0, n, caller_device, err, errlen);
}

EmxCommNccl *emx_comm_nccl_new_rank(const char *id_file, int rank, int size, int device, double timeout_s, char *err,
                                    size_t errlen) {
    if (size < 1 || size > kMaxRanks || rank < 0 || rank >= size || !id_file) {
        if (err && errlen)
            emx_seterr(err, errlen, "comm_nccl: rank %d of a group of %d (size 1..%d, rank 0..size-1, an id file)", rank, size,
                     kMaxRanks);
        return nullptr;
    }
    int count = 0;
    cudaError_t ce = cudaGetDeviceCount(&count);
    if (ce != cudaSuccess || device < 0 || device >= count) {
        if (err && errlen)
            emx_seterr(err, errlen, "comm_nccl: rank %d: device %d does not exist (%d devices)", rank, device,
                     ce == cudaSuccess ? count : 0);
        return nullptr;
    }
    ncclUniqueId id;
    if (rank == 0) {
        ncclResult_t ne = ncclGetUniqueId(&id);
        if (ne != ncclSuccess) {
            if (err && errlen) emx_seterr(err, errlen, "comm_nccl: ncclGetUniqueId: %s", ncclGetErrorString(ne));
            return nullptr;
        }
        if (write_id_file(id_file, &id, err, errlen)) return nullptr;
    } else if (read_id_file(id_file, timeout_s, &id, err, errlen)) {
        return nullptr;
    }
    int caller_device = -1;
    EmxCommNccl *g = group_new(size, &caller_device, err, errlen);
    if (!g) return nullptr;
    ncclComm_t comm = nullptr;
    ncclResult_t ne = ncclSuccess;
    ce = cudaSetDevice(device);
    if (ce == cudaSuccess) ne = ncclCommInitRank(&comm, size, id, rank);  // returns once every rank has joined
    init_rank(g, rank, device, ne == ncclSuccess && ce == cudaSuccess ? comm : nullptr);
    if (ce != cudaSuccess) return new_failed(g, caller_device, err, errlen, "cudaSetDevice", cudaGetErrorString(ce));
    if (ne != ncclSuccess) return new_failed(g, caller_device, err, errlen, "ncclCommInitRank", ncclGetErrorString(ne));
    if (const char *call = rank_resources(&g->ranks[rank], &ce))
        return new_failed(g, caller_device, err, errlen, call, cudaGetErrorString(ce));
    return group_ready(g, rank, rank + 1, caller_device, err, errlen);
}

EmxComm *emx_comm_nccl_rank(EmxCommNccl *g, int rank) {
    if (!g || rank < 0 || rank >= g->size || !g->ranks[rank].group) return nullptr;
    return &g->ranks[rank].comm;
}

EmxComm *emx_comm_nccl_host_rank(EmxCommNccl *g, int rank) {
    if (!g || rank < 0 || rank >= g->size || !g->ranks[rank].group) return nullptr;
    return &g->ranks[rank].host;
}

cudaStream_t emx_comm_nccl_stream(EmxComm *c) {
    return (c->all_gather == host_all_gather ? rank_of_host(c) : rank_of(c))->stream;
}

const char *emx_comm_nccl_error(EmxCommNccl *g) {
    if (!g) return "";
    std::lock_guard<std::mutex> lock(g->error_mutex);
    return g->error;
}

void emx_comm_nccl_free(EmxCommNccl *g) {
    if (!g) return;
    int caller_device = -1;
    if (cudaGetDevice(&caller_device) != cudaSuccess) caller_device = -1;
    const bool aborted = g->aborted.load() != 0;
    for (int r = 0; r < g->size; r++) {
        EmxNcclRank *k = &g->ranks[r];
        if (!k->group) continue;  // another process's rank (emx_comm_nccl_new_rank)
        cudaSetDevice(k->device);
        // An aborted group may have collectives that will never complete: only abort frees those.
        if (k->nccl && aborted)
            abort_communicator(k->nccl);
        else if (k->nccl)
            ncclCommDestroy(k->nccl);
        if (k->scratch) cudaFree(k->scratch);
        if (k->staging) cudaFree(k->staging);
        if (k->stream) cudaStreamDestroy(k->stream);
    }
    if (caller_device >= 0) cudaSetDevice(caller_device);
    delete g;
}

} // extern "C"
