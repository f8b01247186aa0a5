// machine.h — what a benchmark reports about the machine it ran on: the CPU's name and the
// memory bandwidth a plain copy reaches, the ceiling a decode step (which streams every weight
// once) is measured against.
#ifndef ENTROPIX_BENCH_MACHINE_H
#define ENTROPIX_BENCH_MACHINE_H

#include <stddef.h>

// "Intel(R) Xeon(R) ..." from /proc/cpuinfo's "model name" (or "unknown CPU"), into buf.
void emx_bench_cpu_name(char *buf, size_t cap);

// Copy bandwidth in GB/s (1e9 bytes/s; each copied byte counted once read, once written):
// memcpy of `bytes` (split over n_threads OpenMP threads) repeated, the best of `rounds`.
// Returns <= 0 if the buffers cannot be allocated.
double emx_bench_memcpy_gbs(size_t bytes, int n_threads, int rounds);

// Read bandwidth in GB/s: a read-only streaming pass over `bytes` (each of n_threads OpenMP
// threads sums its own contiguous slice, as a decode step's threads stream their weight rows),
// `rounds` passes, the median. What a decode step does — read every weight once, write almost
// nothing — so its GB/s are comparable with this, and unlike a copy's best-of the median moves
// little with a neighbour's load. Returns <= 0 if the buffer cannot be allocated.
double emx_bench_read_gbs(size_t bytes, int n_threads, int rounds);

// Why this machine's threads may decode slowly: a line when OMP_WAIT_POLICY asks OpenMP's
// threads to sleep between parallel regions ("passive", any case), else NULL. A decode step has
// a few short parallel regions per layer, and each wake-up of a sleeping thread costs more than
// a small region's work: SmolLM2-135M q8 decoded 69 tok/s at 2 threads with it and 142 without
// (2-core AMD EPYC, 2026-11-28), and llama.cpp's OpenMP threads slow down alike.
const char *emx_bench_wait_policy_note(void);

#endif
