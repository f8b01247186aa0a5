// test_comm_nccl.cpp — the NCCL implementation of runtime/comm.h (suite comm_nccl) under the
// CUDA emulator: the shared checks of tests/comm_checks.h (the same ones tests/test_comm.c runs
// on the threads implementation) with 1, 2 and 3 emulated GPUs, one host thread per rank, every
// buffer cudaMalloc'd on its rank's device; then abort, errors and the constructor's checks.
//
// No .timeout here: a hang in an emulated collective is reported and aborted by the emulator
// itself (EMU_NCCL_TIMEOUT_S), and Criterion leaks when tests' timeouts differ.
//
// The emulator's collectives cannot be woken once every rank but one is waiting in them (see
// comm_nccl.h), so abort is tested on later calls only; the threads test covers pending ones.
#include <criterion/criterion.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <string.h>

#include <string>
#include <vector>

#include "comm_checks.h"
#include "comm_nccl.h"

namespace {

// Rank r's buffers live on devices[r]; its thread makes that device current first.
struct RankDevices {
    std::vector<int> devices;
};

int enter_device(const CommMem *m, int rank) {
    const RankDevices *d = static_cast<const RankDevices *>(m->ctx);
    return cudaSetDevice(d->devices[(size_t)rank]) == cudaSuccess ? 0 : -1;
}
void *device_alloc(const CommMem *, size_t bytes) {
    void *p = nullptr;
    return cudaMalloc(&p, bytes) == cudaSuccess ? p : nullptr;
}
void device_release(const CommMem *, void *p) { cudaFree(p); }
int to_device(const CommMem *, void *dst, const void *host, size_t bytes) {
    return cudaMemcpy(dst, host, bytes, cudaMemcpyHostToDevice) == cudaSuccess ? 0 : -1;
}
int to_host(const CommMem *, void *host, const void *src, size_t bytes) {
    return cudaMemcpy(host, src, bytes, cudaMemcpyDeviceToHost) == cudaSuccess ? 0 : -1;
}

// 3 ranks run on devices 2, 0, 1 (the others on 0..size-1): nothing may assume rank == device.
std::vector<int> devices_for(int size) {
    std::vector<int> d((size_t)size);
    for (int r = 0; r < size; r++) d[(size_t)r] = size == 3 ? (r + 2) % 3 : r;
    return d;
}

// Runs check on every rank of a fresh group of `size` emulated GPUs and asserts that all passed.
void run_check(int size, CommCheck check, void *arg) {
    RankDevices rd{devices_for(size)};
    const CommMem mem = {enter_device, device_alloc, device_release, to_device, to_host, &rd};
    char err[320] = "";
    EmxCommNccl *g = emx_comm_nccl_new(rd.devices.data(), size, err, sizeof err);
    cr_assert_not_null(g, "%s", err);
    std::vector<EmxComm *> ranks((size_t)size);
    for (int r = 0; r < size; r++) {
        ranks[(size_t)r] = emx_comm_nccl_rank(g, r);
        cr_assert_not_null(ranks[(size_t)r]);
        cr_assert_eq(ranks[(size_t)r]->rank, r);
        cr_assert_eq(ranks[(size_t)r]->size, size);
        cr_assert_not_null(emx_comm_nccl_stream(ranks[(size_t)r]));
    }
    std::vector<CommRankResult> results((size_t)size);
    int started = comm_run_ranks(ranks.data(), size, &mem, check, arg, results.data());
    std::string error = emx_comm_nccl_error(g);
    emx_comm_nccl_free(g);
    cr_assert_eq(started, 0, "could not start %d threads", size);
    for (int r = 0; r < size; r++) cr_expect_eq(results[(size_t)r].failed, 0, "%s", results[(size_t)r].msg);
    cr_expect(error.empty(), "the group recorded an error: %s", error.c_str());
}

const int kSizes[] = {1, 2, 3};

// The emulator has 4 devices (EMU_DEVICE_COUNT); a real machine (make test-kernels-gpu) may have
// fewer, and NCCL wants a GPU per rank: groups larger than the machine are left out.
int device_count() {
    int n = 0;
    cr_assert_eq(cudaGetDeviceCount(&n), cudaSuccess, "cudaGetDeviceCount failed");
    return n;
}

// Runs check on groups of every size in kSizes that the machine has GPUs for.
void run_check_all_sizes(CommCheck check, void *arg) {
    const int devices = device_count();
    for (int size : kSizes) {
        if (size > devices) {
            cr_log_warn("comm_nccl: %d ranks need %d GPUs, this machine has %d: left out", size, size, devices);
            continue;
        }
        run_check(size, check, arg);
    }
}

void require_devices(int n) {
    if (device_count() < n) cr_skip_test("needs %d GPUs", n);
}

} // namespace

Test(comm_nccl, all_gather_odd_sizes_and_in_place) {
    run_check_all_sizes(comm_check_all_gather, nullptr);
}

Test(comm_nccl, broadcast_from_every_root) {
    run_check_all_sizes(comm_check_broadcast, nullptr);
}

Test(comm_nccl, byte_counts_change_between_calls) {
    run_check_all_sizes(comm_check_changing_sizes, nullptr);
}

Test(comm_nccl, thousand_alternating_collectives) {
    int calls = 1000;
    run_check_all_sizes(comm_check_alternating, &calls);
}

namespace {

// Rank 0 aborts once every rank has done one barrier; only then (a host barrier between the
// test's threads) do the ranks call again: every call returns -1 without reaching NCCL.
struct AbortArgs {
    pthread_barrier_t aborted;
};

int check_abort_then_calls(EmxComm *c, const CommMem *m, void *arg, char *msg, size_t msglen) {
    AbortArgs *a = static_cast<AbortArgs *>(arg);
    unsigned char *buf = static_cast<unsigned char *>(m->alloc(m, 64));
    int rc = buf ? c->barrier(c) : -1;
    if (rc == 0 && c->rank == 0) c->abort(c);
    pthread_barrier_wait(&a->aborted); // even when something failed: nobody may be left waiting
    if (rc) {
        snprintf(msg, msglen, "rank %d: %s", c->rank, buf ? "the barrier before the abort returned -1" : "no memory");
        if (buf) m->release(m, buf);
        return -1;
    }
    int got[4] = {c->all_gather(c, buf + c->rank, buf, 1), c->broadcast(c, buf, 8, 0), c->barrier(c),
                  c->all_gather(c, buf, buf + 32, 0)};
    m->release(m, buf);
    for (int k = 0; k < 4; k++)
        if (got[k] != -1) {
            snprintf(msg, msglen, "rank %d: call %d after the abort returned %d, want -1", c->rank, k, got[k]);
            return -1;
        }
    return 0;
}

} // namespace

Test(comm_nccl, calls_after_abort_return_minus_one) {
    for (int size : kSizes) {
        if (size > device_count()) continue;
        AbortArgs a;
        cr_assert_eq(pthread_barrier_init(&a.aborted, nullptr, (unsigned)size), 0);
        run_check(size, check_abort_then_calls, &a); // abort is no error: the group records none
        pthread_barrier_destroy(&a.aborted);
    }
}

namespace {

// Every rank passes a root that does not exist: each fails before reaching NCCL.
int check_bad_root(EmxComm *c, const CommMem *m, void *, char *msg, size_t msglen) {
    void *buf = m->alloc(m, 4);
    int rc = c->broadcast(c, buf, 4, c->size);
    m->release(m, buf);
    if (rc != -1) {
        snprintf(msg, msglen, "rank %d: broadcast from root %d returned %d, want -1", c->rank, c->size, rc);
        return -1;
    }
    return 0;
}

} // namespace

Test(comm_nccl, bad_root_is_an_error_naming_the_call) {
    const int size = 2;
    require_devices(size);
    RankDevices rd{devices_for(size)};
    const CommMem mem = {enter_device, device_alloc, device_release, to_device, to_host, &rd};
    EmxCommNccl *g = emx_comm_nccl_new(rd.devices.data(), size, nullptr, 0);
    cr_assert_not_null(g);
    EmxComm *ranks[2] = {emx_comm_nccl_rank(g, 0), emx_comm_nccl_rank(g, 1)};
    CommRankResult res[2];
    cr_assert_eq(comm_run_ranks(ranks, size, &mem, check_bad_root, nullptr, res), 0);
    std::string error = emx_comm_nccl_error(g);
    emx_comm_nccl_free(g);
    for (int r = 0; r < size; r++) cr_expect_eq(res[r].failed, 0, "%s", res[r].msg);
    cr_expect(error.find("broadcast: root 2 out of range 0..1") != std::string::npos, "error: '%s'", error.c_str());
    cr_expect(error.find("rank ") == 0, "error: '%s'", error.c_str());
}

Test(comm_nccl, constructor_rejects_bad_device_lists) {
    char err[320] = "";
    int devs[2] = {0, 0};
    cr_expect_null(emx_comm_nccl_new(devs, 2, err, sizeof err));
    cr_expect(strstr(err, "ranks 0 and 1 are both on device 0"), "%s", err);
    int missing[2] = {0, 99};
    cr_expect_null(emx_comm_nccl_new(missing, 2, err, sizeof err));
    cr_expect(strstr(err, "device 99 does not exist"), "%s", err);
    cr_expect_null(emx_comm_nccl_new(devs, 0, err, sizeof err));
    cr_expect(strstr(err, "group size 0"), "%s", err);
    cr_expect_null(emx_comm_nccl_new(nullptr, 2, err, sizeof err));
    emx_comm_nccl_free(nullptr);
}

// The constructor switches devices to set the ranks up, and must switch back.
Test(comm_nccl, constructor_keeps_the_callers_device) {
    require_devices(3);
    cr_assert_eq(cudaSetDevice(2), cudaSuccess);
    int devs[2] = {0, 1}, now = -1;
    EmxCommNccl *g = emx_comm_nccl_new(devs, 2, nullptr, 0);
    cr_assert_not_null(g);
    cr_expect_eq(cudaGetDevice(&now), cudaSuccess);
    cr_expect_eq(now, 2);
    cr_expect_null(emx_comm_nccl_rank(g, 2));
    cr_expect_null(emx_comm_nccl_rank(g, -1));
    emx_comm_nccl_free(g);
    cr_expect_eq(cudaGetDevice(&now), cudaSuccess);
    cr_expect_eq(now, 2);
    cudaSetDevice(0);
}
