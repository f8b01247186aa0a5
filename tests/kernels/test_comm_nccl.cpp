// test_comm_nccl.cpp — the NCCL implementation of runtime/pool/comm.h (suite comm_nccl) under the
// CUDA emulator: the shared checks of tests/comm_checks.h (the same ones tests/test_comm.c runs
// on the threads implementation) with 1, 2 and 3 emulated GPUs, one host thread per rank, every
// buffer cudaMalloc'd on its rank's device; then abort, errors and the constructor's checks;
// then the same checks through the host-buffer handles (emx_comm_nccl_host_rank: malloc'd
// buffers staged through each rank's device) and the multi-process bootstrap through an id file
// (emx_comm_nccl_new_rank, threads standing in for processes). Run under both schedules
// (EMU_SCHEDULE=reverse), as `make test` does.
//
// No .timeout here: a deadlock in an emulated collective is reported and aborted by the emulator
// itself, and Criterion leaks when tests' timeouts differ.
//
// The emulator's collectives cannot be woken once every rank but one is waiting in them (see
// comm_nccl.h), so abort is tested on later calls only; the threads test covers pending ones.
#include <criterion/criterion.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "tests/comm_checks.h"
#include "runtime/cuda/comm_nccl.h"

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
// cudaMemcpy from pageable memory may return before its copy has landed, and the rank's stream
// is non-blocking (not ordered after the default stream): comm_nccl.h asks for the buffers'
// writes to be finished before the call, so the copy is waited for. (The emulator's copies are
// synchronous; on an H200 a collective read the send buffer before this copy had finished.)
int to_device(const CommMem *, void *dst, const void *host, size_t bytes) {
    return cudaMemcpy(dst, host, bytes, cudaMemcpyHostToDevice) == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess
               ? 0
               : -1;
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

// Host buffers for the host-buffer handles (emx_comm_nccl_host_rank): plain malloc'd memory;
// the handle stages them through the rank's device itself.
void *host_alloc(const CommMem *, size_t bytes) { return malloc(bytes ? bytes : 1); }
void host_release(const CommMem *, void *p) { free(p); }
int host_put(const CommMem *, void *dst, const void *src, size_t bytes) {
    memcpy(dst, src, bytes);
    return 0;
}

// Runs check on every rank of a fresh group of `size` emulated GPUs and asserts that all passed:
// through the device handles (buffers cudaMalloc'd on each rank's GPU) or, with host, through
// the host-buffer handles (malloc'd buffers).
void run_check(int size, CommCheck check, void *arg, bool host = false) {
    RankDevices rd{devices_for(size)};
    const CommMem mem = host ? CommMem{nullptr, host_alloc, host_release, host_put, host_put, &rd}
                             : CommMem{enter_device, device_alloc, device_release, to_device, to_host, &rd};
    char err[320] = "";
    EmxCommNccl *g = emx_comm_nccl_new(rd.devices.data(), size, err, sizeof err);
    cr_assert_not_null(g, "%s", err);
    std::vector<EmxComm *> ranks((size_t)size);
    for (int r = 0; r < size; r++) {
        ranks[(size_t)r] = host ? emx_comm_nccl_host_rank(g, r) : emx_comm_nccl_rank(g, r);
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
// fewer, and NCCL wants a GPU per rank: groups larger than the machine are left out, and the
// test says so at info level (Criterion exits 1 after any warning, even when every test passed).
int device_count() {
    int n = 0;
    cr_assert_eq(cudaGetDeviceCount(&n), cudaSuccess, "cudaGetDeviceCount failed");
    return n;
}

// Runs check on groups of every size in kSizes that the machine has GPUs for.
void run_check_all_sizes(CommCheck check, void *arg, bool host = false) {
    const int devices = device_count();
    for (int size : kSizes) {
        if (size > devices) {
            cr_log_info("comm_nccl: %d ranks need %d GPUs, this machine has %d: left out", size, size, devices);
            continue;
        }
        run_check(size, check, arg, host);
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

// ---------------------------------------------------------------------------------------------
// The host-buffer handles (emx_comm_nccl_host_rank): the same checks on malloc'd buffers, staged
// through each rank's device. 1 MiB gathers, shrinking and growing sizes (the staging buffer
// grows) and alternating calls with 1, 2 and 3 ranks (3: on devices 2, 0, 1).

Test(comm_nccl, host_all_gather_odd_sizes_and_in_place) {
    run_check_all_sizes(comm_check_all_gather, nullptr, true);
}

Test(comm_nccl, host_broadcast_from_every_root) {
    run_check_all_sizes(comm_check_broadcast, nullptr, true);
}

Test(comm_nccl, host_byte_counts_change_between_calls) {
    run_check_all_sizes(comm_check_changing_sizes, nullptr, true);
}

Test(comm_nccl, host_three_hundred_alternating_collectives) {
    int calls = 300;
    run_check_all_sizes(comm_check_alternating, &calls, true);
}

// A host handle is its rank: same rank number and size, NULL out of range; and an abort through
// it reaches the device handles' later calls (one flag per group).
Test(comm_nccl, host_handles_share_rank_and_abort) {
    require_devices(2);
    int devs[2] = {1, 0};
    char err[320] = "";
    EmxCommNccl *g = emx_comm_nccl_new(devs, 2, err, sizeof err);
    cr_assert_not_null(g, "%s", err);
    for (int r = 0; r < 2; r++) {
        EmxComm *h = emx_comm_nccl_host_rank(g, r);
        cr_assert_not_null(h);
        cr_expect_eq(h->rank, r);
        cr_expect_eq(h->size, 2);
        cr_expect_neq(h, emx_comm_nccl_rank(g, r));
    }
    cr_expect_null(emx_comm_nccl_host_rank(g, 2));
    cr_expect_null(emx_comm_nccl_host_rank(g, -1));
    cr_expect_null(emx_comm_nccl_host_rank(nullptr, 0));
    EmxComm *h0 = emx_comm_nccl_host_rank(g, 0);
    h0->abort(h0);
    unsigned char b[4] = {0};
    cr_expect_eq(h0->broadcast(h0, b, sizeof b, 0), -1);
    EmxComm *d1 = emx_comm_nccl_rank(g, 1);
    cr_expect_eq(d1->barrier(d1), -1);
    cr_expect_str_empty(emx_comm_nccl_error(g)); // an abort is no error
    emx_comm_nccl_free(g);
}

namespace {

int check_bad_root_host(EmxComm *c, const CommMem *m, void *, char *msg, size_t msglen) {
    void *buf = m->alloc(m, 4);
    int rc = c->broadcast(c, buf, 4, -1);
    m->release(m, buf);
    if (rc != -1) {
        snprintf(msg, msglen, "rank %d: host broadcast from root -1 returned %d, want -1", c->rank, rc);
        return -1;
    }
    return 0;
}

} // namespace

Test(comm_nccl, host_bad_root_is_an_error) {
    require_devices(3);
    int devs[3] = {2, 0, 1};
    EmxCommNccl *g = emx_comm_nccl_new(devs, 3, nullptr, 0);
    cr_assert_not_null(g);
    EmxComm *ranks[3] = {emx_comm_nccl_host_rank(g, 0), emx_comm_nccl_host_rank(g, 1), emx_comm_nccl_host_rank(g, 2)};
    const CommMem mem = {nullptr, host_alloc, host_release, host_put, host_put, nullptr};
    CommRankResult res[3];
    cr_assert_eq(comm_run_ranks(ranks, 3, &mem, check_bad_root_host, nullptr, res), 0);
    std::string error = emx_comm_nccl_error(g);
    emx_comm_nccl_free(g);
    for (int r = 0; r < 3; r++) cr_expect_eq(res[r].failed, 0, "%s", res[r].msg);
    cr_expect(error.find("broadcast: root -1 out of range 0..2") != std::string::npos, "error: '%s'", error.c_str());
}

// ---------------------------------------------------------------------------------------------
// The multi-process bootstrap (emx_comm_nccl_new_rank), with threads standing in for processes:
// each makes its own one-rank part of the group through the id file, then runs the checks on
// its host-buffer handle (and the device one) and frees its part.

namespace {

struct BootstrapRank {
    const char *id_file;
    int rank, size, device;
    CommCheck check;
    void *arg;
    int failed;
    char msg[320];
};

void *bootstrap_thread(void *p) {
    BootstrapRank *b = static_cast<BootstrapRank *>(p);
    b->failed = 1;
    // rank 0 comes last: the others must wait for the file, not find it there already
    if (b->rank == 0) usleep(50000);
    // No deadline worth the name (rank 0 writes the id at once, but a loaded machine may stall
    // it): make test's --timeout ends a real hang.
    EmxCommNccl *g = emx_comm_nccl_new_rank(b->id_file, b->rank, b->size, b->device, 3600.0, b->msg, sizeof b->msg);
    if (!g) return nullptr;
    EmxComm *h = emx_comm_nccl_host_rank(g, b->rank), *d = emx_comm_nccl_rank(g, b->rank);
    const int other = (b->rank + 1) % b->size;
    if (!h || !d || h->rank != b->rank || h->size != b->size ||
        (b->size > 1 && (emx_comm_nccl_rank(g, other) || emx_comm_nccl_host_rank(g, other)))) {
        snprintf(b->msg, sizeof b->msg, "rank %d: wrong handles", b->rank);
    } else {
        const CommMem mem = {nullptr, host_alloc, host_release, host_put, host_put, nullptr};
        b->failed = b->check(h, &mem, b->arg, b->msg, sizeof b->msg) != 0;
        if (!b->failed) {
            // the device handle of the same rank works too, on cudaMalloc'd buffers
            RankDevices rd{std::vector<int>((size_t)b->size, b->device)};
            const CommMem dmem = {enter_device, device_alloc, device_release, to_device, to_host, &rd};
            b->failed = enter_device(&dmem, b->rank) || b->check(d, &dmem, b->arg, b->msg, sizeof b->msg) != 0;
        }
    }
    std::string error = emx_comm_nccl_error(g);
    emx_comm_nccl_free(g);
    if (!b->failed && !error.empty()) {
        snprintf(b->msg, sizeof b->msg, "rank %d: the group recorded an error: %s", b->rank, error.c_str());
        b->failed = 1;
    }
    return nullptr;
}

void run_bootstrap(int size, CommCheck check, void *arg) {
    char dir[] = "/tmp/emx_nccl_id_XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    std::string id_file = std::string(dir) + "/nccl.id";
    std::vector<int> devices = devices_for(size);
    std::vector<BootstrapRank> ranks((size_t)size);
    std::vector<pthread_t> threads((size_t)size);
    for (int r = 0; r < size; r++) {
        ranks[(size_t)r] = BootstrapRank{id_file.c_str(), r, size, devices[(size_t)r], check, arg, 1, ""};
        cr_assert_eq(pthread_create(&threads[(size_t)r], nullptr, bootstrap_thread, &ranks[(size_t)r]), 0);
    }
    for (int r = 0; r < size; r++) pthread_join(threads[(size_t)r], nullptr);
    unlink(id_file.c_str());
    rmdir(dir);
    for (int r = 0; r < size; r++) cr_expect_eq(ranks[(size_t)r].failed, 0, "rank %d: %s", r, ranks[(size_t)r].msg);
}

} // namespace

Test(comm_nccl, bootstrap_through_an_id_file_2_and_3_ranks) {
    for (int size : {2, 3}) {
        if (size > device_count()) continue;
        run_bootstrap(size, comm_check_all_gather, nullptr);
        run_bootstrap(size, comm_check_broadcast, nullptr);
    }
}

Test(comm_nccl, bootstrap_errors) {
    char err[320] = "";
    char dir[] = "/tmp/emx_nccl_id_XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    std::string id_file = std::string(dir) + "/nccl.id";
    // a rank other than 0 with nobody writing the id
    cr_expect_null(emx_comm_nccl_new_rank(id_file.c_str(), 1, 2, 0, 0.05, err, sizeof err));
    cr_expect(strstr(err, "no NCCL id at ") && strstr(err, "(is rank 0 running?)"), "%s", err);
    // a file too short to be an id
    FILE *f = fopen(id_file.c_str(), "wb");
    cr_assert_not_null(f);
    fputs("short", f);
    fclose(f);
    cr_expect_null(emx_comm_nccl_new_rank(id_file.c_str(), 1, 2, 0, 1.0, err, sizeof err));
    cr_expect(strstr(err, "is shorter than an NCCL id"), "%s", err);
    unlink(id_file.c_str());
    // rank 0 cannot write; bad rank, size and device
    cr_expect_null(emx_comm_nccl_new_rank("/nonexistent/dir/nccl.id", 0, 2, 0, 1.0, err, sizeof err));
    cr_expect(strstr(err, "cannot write the NCCL id to /nonexistent/dir/nccl.id"), "%s", err);
    cr_expect_null(emx_comm_nccl_new_rank(id_file.c_str(), 2, 2, 0, 1.0, err, sizeof err));
    cr_expect(strstr(err, "rank 2 of a group of 2"), "%s", err);
    cr_expect_null(emx_comm_nccl_new_rank(id_file.c_str(), 0, 1, 99, 1.0, err, sizeof err));
    cr_expect(strstr(err, "device 99 does not exist"), "%s", err);
    rmdir(dir);
}
