// test_nccl.cpp — NCCL collectives across 2 and 3 emulated devices: one host thread per rank
// (ncclCommInitRank), and one thread driving all ranks inside ncclGroupStart/End
// (ncclCommInitAll). Each rank's buffers are cudaMalloc'd on its own device.
#include <criterion/criterion.h>
#include <nccl.h>
#include <signal.h>
#include <stdlib.h>

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

// One thread calling a collective for one rank of two without a group would wait forever for
// the other: the emulator reports who is missing and aborts instead of hanging.
Test(emu_nccl, missing_rank_is_reported, .signal = SIGABRT) {
    setenv("EMU_NCCL_TIMEOUT_S", "0.2", 1);
    ncclComm_t comms[2];
    cr_assert_eq(ncclCommInitAll(comms, 2, nullptr), ncclSuccess);
    float *buf;
    cr_assert_eq(cudaMalloc((void **)&buf, 16), cudaSuccess);
    ncclAllReduce(buf, buf, 4, ncclFloat, ncclSum, comms[0], 0); // rank 1 never comes
}
