// emu/engine.h — the interface between kernel code (inline functions in the emu headers) and the
// scheduler in src/engine.cpp that runs each CUDA thread of a block as a fiber.
//
// A launch runs its blocks one after the other on the calling host thread. Inside a block every
// thread runs until it blocks (at __syncthreads or a warp-synchronous op) or returns; when no
// thread can run, the scheduler completes whatever rendezvous is complete (a warp op whose mask
// lanes have all arrived, a barrier that all threads of the block reached) or reports the
// deadlock (a divergent barrier, a shuffle whose lanes never arrive) with kernel, block, thread.
#ifndef EMU_ENGINE_H
#define EMU_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "../cuda_runtime.h"

// The CUDA built-in variables of the running thread; the scheduler sets them before each switch.
// __constinit (C++20's constinit, a GCC extension in C++17) says they need no dynamic
// initialisation, so an access is a plain %fs-relative load instead of a call to a TLS wrapper
// (which also trips a false UBSan "null pointer" report in GCC 12).
extern thread_local __constinit uint3 threadIdx;
extern thread_local __constinit uint3 blockIdx;
extern thread_local __constinit uint3 blockDim;
extern thread_local __constinit uint3 gridDim;

namespace emu {

// The warp-synchronous operations; the scheduler checks that all lanes of a rendezvous agree.
enum class WarpOp { Shfl, ShflUp, ShflDown, ShflXor, Ballot, Any, All, SyncWarp };
const char *warp_op_name(WarpOp op);

// What one kernel launch runs: `thread_main(arg)` once per thread of every block.
struct KernelRun {
    const char *name; // as written at the launch, e.g. "rmsnorm_kernel<256>"
    dim3 grid, block;
    size_t dynamic_shmem;
    size_t shmem_limit; // bytes of shared memory one block may use (static + dynamic)
    void (*thread_main)(void *arg);
    void *arg;
};
// Runs every block; returns cudaSuccess, or cudaErrorLaunchFailure after reporting a fault
// (in the default failure mode the process aborts instead).
cudaError_t run_kernel(const KernelRun &run);

// Called from kernel code (inside a fiber).
void syncthreads(const char *file, int line);
// Blocks until every lane of `mask` (that exists in this block) has called a warp op with the
// same mask; returns the 32 values the lanes passed (indexed by lane; the caller's lanes only).
const uint64_t *warp_rendezvous(WarpOp op, unsigned mask, uint64_t value, const char *file, int line);
unsigned lane_id();
unsigned warp_present_mask(); // lanes of this warp that exist (a partial last warp has fewer)
void *static_shared(const void *key, const char *file, int line, const char *name, size_t size, size_t align);
void *dynamic_shared();
// Reports a fault in kernel code (printf-style message) with the kernel, block and thread, then
// aborts (or, in FailureMode::Return, abandons the launch: the thread's frames are never resumed,
// so callers build the message with no heap objects of their own). Never returns.
[[noreturn]] void device_fault(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

} // namespace emu

#endif
