// test_nccl.cpp — NCCL collectives across 2 and 3 emulated devices: one host thread per rank
// (ncclCommInitRank), and one thread driving all ranks inside ncclGroupStart/End
// (ncclCommInitAll). Each rank's buffers are cudaMalloc'd on its own device.
#include <criterion/criterion.h>
#include <nccl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "emu_test.h"

// Rank r holds count floats r * 1000 + i; checks all-gather, broadcast from the last rank and
// all-reduce (sum, max) on its own device.
static void rank_main(int rank, int nranks, ncclUniqueId id, int *ok) {
    const int count = 37;
    cudaSetDevice(rank);
    ncclComm_t comm;
    if (ncclCommInitRank(&comm, nranks, id, rank) != ncclSuccess) return;
    cudaStream_t s;
    cudaStreamCreate(&s);
    std::vector<float> mine(count);
    for (int i = 0; i < count; i++) mine[i] = (float)(rank * 1000 + i);
    float *send, *recv;
    cudaMalloc((void **)&send, count * sizeof(float));
    cudaMalloc((void **)&recv, (size_t)nranks * count * sizeof(float));
    cudaMemcpy(send, mine.data(), count * sizeof(float), cudaMemcpyHostToDevice);
    std::vector<float> got((size_t)nranks * count);
    int good = 1;

    good &= ncclAllGather(send, recv, count, ncclFloat, comm, s) == ncclSuccess;
    cudaMemcpy(got.data(), recv, got.size() * sizeof(float), cudaMemcpyDeviceToHost);
    for (int r = 0; r < nranks; r++)
        for (int i = 0; i < count; i++) good &= got[(size_t)r * count + i] == (float)(r * 1000 + i);

    good &= ncclBroadcast(send, recv, count, ncclFloat, nranks - 1, comm, s) == ncclSuccess;
    cudaMemcpy(got.data(), recv, count * sizeof(float), cudaMemcpyDeviceToHost);
    for (int i = 0; i < count; i++) good &= got[i] == (float)((nranks - 1) * 1000 + i);

    good &= ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comm, s) == ncclSuccess;
    cudaMemcpy(got.data(), recv, count * sizeof(float), cudaMemcpyDeviceToHost);
    for (int i = 0; i < count; i++) good &= got[i] == (float)(1000 * nranks * (nranks - 1) / 2 + nranks * i);

    good &= ncclAllReduce(send, send, count, ncclFloat, ncclMax, comm, s) == ncclSuccess; // in place
    cudaMemcpy(got.data(), send, count * sizeof(float), cudaMemcpyDeviceToHost);
    for (int i = 0; i < count; i++) good &= got[i] == (float)((nranks - 1) * 1000 + i);

    cudaFree(send);
    cudaFree(recv);
    cudaStreamDestroy(s);
    good &= ncclCommDestroy(comm) == ncclSuccess;
    *ok = good;
}

static void thread_per_rank(int nranks) {
    ncclUniqueId id;
    cr_assert_eq(ncclGetUniqueId(&id), ncclSuccess);
    std::vector<int> ok((size_t)nranks, 0);
    std::vector<std::thread> threads;
    for (int r = 0; r < nranks; r++) threads.emplace_back(rank_main, r, nranks, id, &ok[(size_t)r]);
    for (auto &t : threads) t.join();
    for (int r = 0; r < nranks; r++) cr_assert_eq(ok[(size_t)r], 1, "rank %d of %d", r, nranks);
}

Test(emu_nccl, thread_per_rank_2) { thread_per_rank(2); }
Test(emu_nccl, thread_per_rank_3) { thread_per_rank(3); }

// One thread, all ranks, calls grouped: bf16 and int all-reduce, all-gather of ints.
static void one_thread_group(int nranks) {
    const int count = 20;
    std::vector<ncclComm_t> comms((size_t)nranks);
    cr_assert_eq(ncclCommInitAll(comms.data(), nranks, nullptr), ncclSuccess);
    std::vector<__nv_bfloat16 *> bsend((size_t)nranks), brecv((size_t)nranks);
    std::vector<int *> isend((size_t)nranks), irecv((size_t)nranks);
    for (int r = 0; r < nranks; r++) {
        cudaSetDevice(r);
        std::vector<__nv_bfloat16> b(count);
        std::vector<int> v(count);
        for (int i = 0; i < count; i++) {
            b[(size_t)i] = __float2bfloat16(0.25f * (float)(r + 1) * (float)i);
            v[(size_t)i] = r * 100 + i;
        }
        cudaMalloc((void **)&bsend[(size_t)r], count * 2);
        cudaMalloc((void **)&brecv[(size_t)r], count * 2);
        cudaMalloc((void **)&isend[(size_t)r], count * 4);
        cudaMalloc((void **)&irecv[(size_t)r], (size_t)nranks * count * 4);
        cudaMemcpy(bsend[(size_t)r], b.data(), count * 2, cudaMemcpyHostToDevice);
        cudaMemcpy(isend[(size_t)r], v.data(), count * 4, cudaMemcpyHostToDevice);
    }
    cr_assert_eq(ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < nranks; r++)
        cr_assert_eq(ncclAllReduce(bsend[(size_t)r], brecv[(size_t)r], count, ncclBfloat16, ncclSum, comms[(size_t)r], 0),
                     ncclSuccess);
    for (int r = 0; r < nranks; r++)
        cr_assert_eq(ncclAllGather(isend[(size_t)r], irecv[(size_t)r], count, ncclInt32, comms[(size_t)r], 0), ncclSuccess);
    cr_assert_eq(ncclGroupEnd(), ncclSuccess);
    for (int r = 0; r < nranks; r++) {
        std::vector<__nv_bfloat16> b(count);
        std::vector<int> v((size_t)nranks * count);
        cudaMemcpy(b.data(), brecv[(size_t)r], count * 2, cudaMemcpyDeviceToHost);
        cudaMemcpy(v.data(), irecv[(size_t)r], v.size() * 4, cudaMemcpyDeviceToHost);
        for (int i = 0; i < count; i++) {
            // sum over ranks of 0.25 (q + 1) i: small multiples of 0.25, exact in bf16 up to 8 bits
            float want = 0.25f * (float)(nranks * (nranks + 1) / 2) * (float)i;
            cr_assert_eq(__bfloat162float(b[(size_t)i]), __bfloat162float(__float2bfloat16(want)), "rank %d [%d]", r, i);
        }
        for (int q = 0; q < nranks; q++)
            for (int i = 0; i < count; i++) cr_assert_eq(v[(size_t)q * count + i], q * 100 + i);
        cudaFree(bsend[(size_t)r]);
        cudaFree(brecv[(size_t)r]);
        cudaFree(isend[(size_t)r]);
        cudaFree(irecv[(size_t)r]);
        cr_assert_eq(ncclCommDestroy(comms[(size_t)r]), ncclSuccess);
    }
    cudaSetDevice(0);
}

Test(emu_nccl, one_thread_group_2) { one_thread_group(2); }
Test(emu_nccl, one_thread_group_3) { one_thread_group(3); }

// ---------------------------------------------------------------------------------------------
// Deadlocks are reported the moment they form, and only then: a rank that is merely slow may
// take as long as it likes (no clock is involved).

// Runs `body` in a forked child with stderr captured; returns what it printed and its status.
template <class F> static std::string run_in_child(F body, int *status) {
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        body();
        _exit(0);
    }
    close(fds[1]);
    std::string out;
    char buf[4096];
    ssize_t got;
    while ((got = read(fds[0], buf, sizeof buf)) > 0) out.append(buf, (size_t)got);
    close(fds[0]);
    waitpid(pid, status, 0);
    return out;
}

// The child must have aborted, printing every piece of `want`.
static void expect_fault(const std::string &err, int status, std::initializer_list<const char *> want) {
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "the child did not abort (status %#x): %s", status,
              err.c_str());
    for (const char *w : want) cr_expect(err.find(w) != std::string::npos, "no '%s' in: %s", w, err.c_str());
}

// Each rank's device buffer of 4 floats (device r).
struct Bufs {
    float *b[2];
    Bufs() {
        for (int r = 0; r < 2; r++) {
            cudaSetDevice(r);
            cudaMalloc((void **)&b[r], 16);
        }
        cudaSetDevice(0);
    }
    ~Bufs() {
        for (float *p : b) cudaFree(p);
    }
    Bufs(const Bufs &) = delete;
    Bufs &operator=(const Bufs &) = delete;
};

static void all_reduce(ncclComm_t comm, float *buf) {
    if (ncclAllReduce(buf, buf, 4, ncclFloat, ncclSum, comm, 0) != ncclSuccess) abort();
}

// Rank 1's thread does one collective with rank 0, then ends without calling the second.
Test(emu_nccl, rank_whose_thread_ended_is_reported) {
    int status = 0;
    std::string err = run_in_child(
        [] {
            ncclComm_t comms[2];
            ncclCommInitAll(comms, 2, nullptr);
            Bufs m;
            std::thread rank1([&] { all_reduce(comms[1], m.b[1]); });
            all_reduce(comms[0], m.b[0]);
            rank1.join();
            all_reduce(comms[0], m.b[0]);
        },
        &status);
    expect_fault(err, status, {"EMU FAULT: NCCL: deadlock: rank 0: ncclAllReduce (collective #1) waits for rank 1, "
                               "whose host thread has exited without calling it"});
}

// Rank 1 destroys its communicator while (or before) rank 0 waits in a collective.
Test(emu_nccl, destroyed_rank_is_reported) {
    int status = 0;
    std::string err = run_in_child(
        [] {
            ncclComm_t comms[2];
            ncclCommInitAll(comms, 2, nullptr);
            Bufs m;
            std::thread rank1([&] {
                all_reduce(comms[1], m.b[1]);
                ncclCommDestroy(comms[1]);
            });
            all_reduce(comms[0], m.b[0]);
            all_reduce(comms[0], m.b[0]);
            rank1.join();
        },
        &status);
    expect_fault(err, status, {"rank 0: ncclAllReduce (collective #1) waits for rank 1, whose communicator was destroyed"});
}

// This thread drove rank 1 (its first collective), then calls rank 0's second one without a
// group: it can never come back for rank 1.
Test(emu_nccl, one_thread_for_two_ranks_without_a_group_is_reported) {
    int status = 0;
    std::string err = run_in_child(
        [] {
            ncclComm_t comms[2];
            ncclCommInitAll(comms, 2, nullptr);
            Bufs m;
            std::thread rank0([&] { all_reduce(comms[0], m.b[0]); });
            all_reduce(comms[1], m.b[1]);
            rank0.join();
            all_reduce(comms[0], m.b[0]);
        },
        &status);
    expect_fault(err, status, {"rank 0: ncclAllReduce (collective #1) waits for rank 1, whose host thread is this same "
                               "blocked one", "ncclGroupStart/ncclGroupEnd"});
}

// Two communicators used in opposite orders by two threads: each waits for the other.
Test(emu_nccl, opposite_orders_on_two_communicators_are_reported) {
    int status = 0;
    std::string err = run_in_child(
        [] {
            ncclComm_t x[2], y[2];
            ncclCommInitAll(x, 2, nullptr);
            ncclCommInitAll(y, 2, nullptr);
            Bufs m;
            std::thread rank1([&] {
                all_reduce(x[1], m.b[1]);
                all_reduce(y[1], m.b[1]);
                all_reduce(y[1], m.b[1]); // y first this time
            });
            all_reduce(x[0], m.b[0]);
            all_reduce(y[0], m.b[0]);
            all_reduce(x[0], m.b[0]);
            rank1.join();
        },
        &status);
    expect_fault(err, status, {"EMU FAULT: NCCL: deadlock: rank ", "(collective #1)", "whose host thread is itself blocked",
                               "of another communicator", "call their collectives in different orders"});
}

// The ranks disagree on what their first collective is.
Test(emu_nccl, mismatched_collectives_are_reported) {
    int status = 0;
    std::string err = run_in_child(
        [] {
            ncclComm_t comms[2];
            ncclCommInitAll(comms, 2, nullptr);
            Bufs m;
            std::thread rank1([&] { ncclAllGather(m.b[1], m.b[1], 2, ncclFloat, comms[1], 0); });
            all_reduce(comms[0], m.b[0]);
            rank1.join();
        },
        &status);
    expect_fault(err, status, {"EMU FAULT: NCCL: collective #0: rank ", "the ranks' calls do not match"});
}

static void wait_until_blocked(int n) {
    while (emu::nccl_blocked_threads() != n) std::this_thread::yield();
}

// A busy rank: everything that makes the emulator look for deadlocks happens while the other
// rank waits (a communicator destroyed, a thread that drove one ending), then it sleeps and
// computes for a while (any length would do: longer than the 0.2 s the old wall-clock limit was
// set to in this file), then it arrives.
static void dawdle() {
    static ncclComm_t one_left;
    ncclComm_t other[2];
    ncclCommInitAll(other, 2, nullptr);
    ncclCommDestroy(other[0]);
    ncclCommDestroy(other[1]);
    std::thread([] {
        ncclComm_t one;
        ncclCommInitAll(&one, 1, nullptr);
        float *b;
        cudaMalloc((void **)&b, 16);
        all_reduce(one, b); // a one-rank clique: done at once; this thread drives it, then ends
        cudaFree(b);
        one_left = one;
    }).join();
    ncclCommDestroy(one_left);
    usleep(300 * 1000);
    volatile double x = 0;
    for (long i = 0; i < 30 * 1000 * 1000; i++) x = x + 1e-9 * (double)i;
    if (emu::nccl_blocked_threads() != 1) abort();
}

// Rank 0 on the thread that created the communicators (as the agent pool does), rank 1 on its
// own: first rank 1 is slow while rank 0 waits, then rank 0 while rank 1 waits.
Test(emu_nccl, slow_rank_is_not_a_deadlock) {
    // The emulator once gave up on a rank after EMU_NCCL_TIMEOUT_S seconds (20 by default: a
    // busy machine was enough to exceed it). A limit like that must not come back.
    setenv("EMU_NCCL_TIMEOUT_S", "0.2", 1);
    ncclComm_t comms[2];
    cr_assert_eq(ncclCommInitAll(comms, 2, nullptr), ncclSuccess);
    Bufs m;
    std::atomic<bool> first_done{false};
    std::thread rank1([&] {
        cudaSetDevice(1);
        wait_until_blocked(1); // rank 0 waits in its first all-reduce
        dawdle();
        all_reduce(comms[1], m.b[1]);
        first_done = true;
        all_reduce(comms[1], m.b[1]); // waits while rank 0 dawdles
    });
    all_reduce(comms[0], m.b[0]);
    while (!first_done) std::this_thread::yield();
    wait_until_blocked(1); // rank 1 waits in its second all-reduce
    dawdle();
    all_reduce(comms[0], m.b[0]);
    rank1.join();
    cr_assert_eq(emu::nccl_blocked_threads(), 0);
    cr_assert_eq(ncclCommDestroy(comms[0]), ncclSuccess);
    cr_assert_eq(ncclCommDestroy(comms[1]), ncclSuccess);
}
