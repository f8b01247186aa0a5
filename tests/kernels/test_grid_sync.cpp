// test_grid_sync.cpp — kernels/grid_sync.cu: running totals over chunks by a chain of blocks that
// wait on each other (kernels/grid_sync.cuh), against a host loop. Exact (64-bit integer sums),
// so any difference is an error. Under the emulator the reverse schedule starts the last chunk's
// block first, so every block waits for the one before it: the chain must run co-resident, and
// more chunks than the device holds at once (occupancy x EMU_SM_COUNT SMs: 16 blocks of 256
// threads on the default 4) must go in several launches.
#include "kb_util.h"

#include "kernels/grid_sync.h"

static std::vector<long long> host_chunk_prefix(const std::vector<int> &x, int chunk) {
    std::vector<long long> out;
    long long total = 0;
    for (size_t i = 0; i < x.size(); i++) {
        total += x[i];
        if ((i + 1) % (size_t)chunk == 0 || i + 1 == x.size()) out.push_back(total);
    }
    return out;
}

Test(grid_sync, chunk_prefix_sums_match_host) {
    struct Case {
        int n, chunk;
    };
    std::vector<Case> cases = {{1, 5}, {1000, 37}, {5000, 256}, {600, 1}};
#ifndef ENTROPIX_CUDA_EMU
    cases.push_back({400000, 100}); // 4000 chunks: more than a GPU holds at once, so several launches
#endif
    for (const Case &c : cases) {
        Rng rng(c.n);
        std::vector<int> x(c.n);
        for (int &v : x) v = (int)(rng.next() % 2000001) - 1000000;
        const std::vector<long long> want = host_chunk_prefix(x, c.chunk);
        DevBuf<int> dx(x);
        auto outs = run_two_schedules([&] {
            DevBuf<long long> out(want.size());
            DevBuf<unsigned> counter(1);
            CUDA_OK(emx_cuda_chunk_prefix_sums(out.p, dx.p, c.n, c.chunk, counter.p, nullptr));
            cr_assert_eq(counter.get(), (unsigned)want.size(), "n %d chunk %d: the counter ends at the chunk count", c.n,
                         c.chunk);
            return out.download();
        });
        for (size_t k = 0; k < want.size(); k++) {
            cr_assert_eq(outs.first[k], want[k], "n %d chunk %d: out[%zu] = %lld, want %lld", c.n, c.chunk, k,
                         outs.first[k], want[k]);
            cr_assert_eq(outs.second[k], want[k], "n %d chunk %d: out[%zu] (second run)", c.n, c.chunk, k);
        }
    }
}

Test(grid_sync, bad_arguments_are_refused) {
    DevBuf<int> x(4);
    DevBuf<long long> out(4);
    DevBuf<unsigned> counter(1);
    cr_assert_eq(emx_cuda_chunk_prefix_sums(out.p, x.p, 0, 4, counter.p, nullptr), cudaErrorInvalidValue);
    cr_assert_eq(emx_cuda_chunk_prefix_sums(out.p, x.p, 4, 0, counter.p, nullptr), cudaErrorInvalidValue);
    cr_assert_eq(emx_cuda_chunk_prefix_sums(out.p, x.p, 4, 4, nullptr, nullptr), cudaErrorInvalidValue);
}
