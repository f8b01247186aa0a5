// test_atomics.cpp — atomics from many blocks and threads: counts exact, old values returned.
#include <criterion/criterion.h>

#include <vector>

#include "emu_test.h"

struct Counters {
    int add_i;
    unsigned add_u;
    unsigned long long add_ull;
    float add_f; // sums of small integers: exact in float
    double add_d;
    int max_i, min_i;
    unsigned max_u, min_u;
    int cas_winners;
    int cas_word;
    int exch;
};

__global__ void hammer(Counters *c, int *histogram, int bins) {
    int id = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    atomicAdd(&c->add_i, 1);
    atomicAdd(&c->add_u, 2u);
    atomicAdd(&c->add_ull, 1ull << 33);
    atomicAdd(&c->add_f, 1.0f);
    atomicAdd(&c->add_d, 0.5);
    atomicMax(&c->max_i, id * 7 % 1001 - 500);
    atomicMin(&c->min_i, id * 7 % 1001 - 500);
    atomicMax(&c->max_u, (unsigned)id * 13u % 997u);
    atomicMin(&c->min_u, (unsigned)id * 13u % 997u + 5u);
    if (atomicCAS(&c->cas_word, 0, id + 1) == 0) atomicAdd(&c->cas_winners, 1);
    atomicExch(&c->exch, id);
    atomicAdd(&histogram[id % bins], 1);
}

Test(emu_atomics, many_blocks_count_exactly) {
    const int blocks = 37, threads = 96, bins = 10, total = blocks * threads;
    Counters init{};
    init.min_i = 1 << 30;
    init.min_u = 0xffffffffu;
    init.max_i = -(1 << 30);
    std::vector<Counters> host{init};
    DeviceBuffer<Counters> dc(host);
    DeviceBuffer<int> dh(bins);
    hammer<<<blocks, threads>>>(dc.ptr, dh.ptr, bins);
    cr_assert_eq(cudaGetLastError(), cudaSuccess);
    Counters c = dc.to_host()[0];
    cr_assert_eq(c.add_i, total);
    cr_assert_eq(c.add_u, 2u * total);
    cr_assert_eq(c.add_ull, (unsigned long long)total << 33);
    cr_assert_eq(c.add_f, (float)total);
    cr_assert_eq(c.add_d, 0.5 * total);
    int max_i = -1000, min_i = 1000;
    unsigned max_u = 0, min_u = 0xffffffffu;
    for (int id = 0; id < total; id++) {
        int v = id * 7 % 1001 - 500;
        max_i = v > max_i ? v : max_i;
        min_i = v < min_i ? v : min_i;
        unsigned u = (unsigned)id * 13u % 997u;
        max_u = u > max_u ? u : max_u;
        min_u = u + 5u < min_u ? u + 5u : min_u;
    }
    cr_assert_eq(c.max_i, max_i);
    cr_assert_eq(c.min_i, min_i);
    cr_assert_eq(c.max_u, max_u);
    cr_assert_eq(c.min_u, min_u);
    cr_assert_eq(c.cas_winners, 1);
    cr_assert(c.cas_word >= 1 && c.cas_word <= total);
    cr_assert(c.exch >= 0 && c.exch < total);
    std::vector<int> h = dh.to_host();
    for (int b = 0; b < bins; b++) cr_assert_eq(h[b], total / bins + (b < total % bins), "bin %d", b);
}

// atomicAdd returns the old value: a block-wide ticket counter hands out 0..n-1 once each.
__global__ void tickets(int *counter, int *seen) {
    int ticket = atomicAdd(counter, 1);
    atomicAdd(&seen[ticket], 1);
}

Test(emu_atomics, returns_old_values) {
    const int n = 3 * 128;
    DeviceBuffer<int> counter(1), seen(n);
    tickets<<<3, 128>>>(counter.ptr, seen.ptr);
    cr_assert_eq(cudaGetLastError(), cudaSuccess);
    for (int s : seen.to_host()) cr_assert_eq(s, 1);
    cr_assert_eq(counter.to_host()[0], n);
}
