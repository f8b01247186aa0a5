// emu/kernel_runs.h — how many kernels the emulator has run, by name: a test counts the launches
// a step makes (e.g. that a batched step launches each matvec once for all its rows). Not
// force-included (emu/api.h is, into every file): only the tests that count include it.
#ifndef EMU_KERNEL_RUNS_H
#define EMU_KERNEL_RUNS_H

namespace emu {

// Kernels run so far in this process, on every host thread, whose name as written at the launch
// ("matvec_fast_kernel<DT, MAXB, SWIGLU, true>") begins with `prefix`. A graph's replayed
// launches count, each time it is replayed; a launch refused before running does not.
long kernel_runs(const char *prefix);
// The same, counting only launches with cudaLaunchAttributeProgrammaticStreamSerialization
// (programmatic dependent launch), or only cooperative ones (a graph's replay keeps both).
long programmatic_kernel_runs(const char *prefix);
long cooperative_kernel_runs(const char *prefix);
// Programmatic edges of the graphs instantiated so far in this process (cudaGraphInstantiate):
// a kernel node launched with the programmatic attribute right after another kernel node. After
// a copy or a memset the attribute makes no programmatic edge (the copy completes first), as in
// CUDA, where programmatic edges join kernel nodes only.
long programmatic_edges_instantiated();
// Bytes kernels have asked L2 for with bulk prefetches (emx_prefetch_l2_bulk) so far in this
// process, on every host thread.
long long l2_prefetch_bytes();

} // namespace emu

#endif
