// pdl_test_util.h — what the tests of a step's tail with programmatic dependent launch (PDL) share:
// a state made with or without EMX_CUDA_PDL=0, and the emulator's counts of a step's launches by
// kernel name (tests/cuda_emu/include/emu/kernel_runs.h): how many of a tail's kernels ran, how
// many of them as programmatic launches, all programmatic launches, and the programmatic edges of
// the graphs instantiated. Outside the emulator every count is 0.
#ifndef ENTROPIX_TESTS_PDL_TEST_UTIL_H
#define ENTROPIX_TESTS_PDL_TEST_UTIL_H

#include <stdlib.h>

#include <initializer_list>

#include "forward_test_util.h"
#ifdef ENTROPIX_CUDA_EMU
#include "tests/cuda_emu/include/emu/kernel_runs.h"
#endif

struct PdlCounts {
    long tail = 0, tail_pdl = 0, pdl = 0, edges = 0;
};

// The counts so far; tail and tail_pdl over the kernels whose names begin with one of `names`.
static inline PdlCounts pdl_counts_now(std::initializer_list<const char *> names) {
    PdlCounts c;
#ifdef ENTROPIX_CUDA_EMU
    for (const char *k : names) {
        c.tail += emu::kernel_runs(k);
        c.tail_pdl += emu::programmatic_kernel_runs(k);
    }
    c.pdl = emu::programmatic_kernel_runs("");
    c.edges = emu::programmatic_edges_instantiated();
#else
    (void)names;
#endif
    return c;
}

static inline PdlCounts operator-(const PdlCounts &a, const PdlCounts &b) {
    PdlCounts d;
    d.tail = a.tail - b.tail, d.tail_pdl = a.tail_pdl - b.tail_pdl, d.pdl = a.pdl - b.pdl, d.edges = a.edges - b.edges;
    return d;
}

// A state of m on cuda:0 (new_state's arguments) made with EMX_CUDA_PDL=pdl in the environment, or
// without the variable when pdl is NULL (PDL where the device has it: always under the emulator).
static inline EmxState *state_pdl(const EmxModel *m, const char *pdl, int ctx, int no_graphs, const EmxState *share) {
    if (pdl)
        setenv("EMX_CUDA_PDL", pdl, 1);
    else
        unsetenv("EMX_CUDA_PDL");
    EmxState *s = new_state(m, "cuda:0", ctx, no_graphs, share);
    unsetenv("EMX_CUDA_PDL");
    return s;
}

#endif
