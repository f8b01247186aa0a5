// emu/engine.h — the interface between kernel code (inline functions in the emu headers) and the
// scheduler in src/engine.cpp that runs each CUDA thread of a block as a fiber.
//
// A launch runs its blocks one after the other on the calling host thread, each to completion,
// unless a thread waits in emx_grid_wait (kernels/grid_sync.cuh) for a counter that other
// blocks signal: then its block is parked and the next block starts (or a parked block whose
// wait is now satisfied resumes), so the blocks of such a launch are co-resident, up to the
// number the emulated device holds (EMU_SM_COUNT). Inside a block every
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
// initialisation, so no call to a TLS wrapper guards an access (which also trips a false UBSan
// "null pointer" report in GCC 12). The emulated objects are position-independent, and reach
// thread-local variables through TLS descriptors (-mtls-dialect=gnu2, emu.mk), not through calls
// to __tls_get_addr that AddressSanitizer intercepts.
extern thread_local __constinit uint3 threadIdx;
extern thread_local __constinit uint3 blockIdx;
extern thread_local __constinit uint3 blockDim;
extern thread_local __constinit uint3 gridDim;

namespace emu {

// The warp-synchronous operations; the scheduler checks that all lanes of a rendezvous agree.
// ReduceSum, ReduceMax, ReduceSumInt: kernels/common.cuh's emx_warp_sum, emx_warp_max and
// emx_warp_sum_int (five __shfl_xor_sync of the whole warp) as one rendezvous (warp_reduce).
enum class WarpOp { Shfl, ShflUp, ShflDown, ShflXor, Ballot, Any, All, SyncWarp, ReduceSum, ReduceMax, ReduceSumInt };
const char *warp_op_name(WarpOp op);

// What one kernel launch runs: `thread_main(arg)` once per thread of every block.
struct KernelRun {
    const char *name; // as written at the launch, e.g. "rmsnorm_kernel<256>"
    dim3 grid, block;
    size_t dynamic_shmem;
    size_t shmem_limit; // bytes of shared memory one block may use (static + dynamic)
    void (*thread_main)(void *arg);
    void *arg;
    bool cooperative;  // cudaLaunchCooperativeKernel or cudaLaunchAttributeCooperative
    bool programmatic; // cudaLaunchAttributeProgrammaticStreamSerialization (PDL)
};
// How many blocks of `threads_per_block` threads and `dynamic_shmem` bytes of dynamic shared
// memory the emulated device holds at once: EMU_SM_COUNT x the blocks one SM holds (the
// occupancy model of src/runtime.cpp, the same as cudaOccupancyMaxActiveBlocksPerMultiprocessor).
unsigned long long resident_blocks(unsigned threads_per_block, size_t dynamic_shmem);
// Runs every block; returns cudaSuccess, or cudaErrorLaunchFailure after reporting a fault
// (in the default failure mode the process aborts instead).
cudaError_t run_kernel(const KernelRun &run);

// Called from kernel code (inside a fiber).
void syncthreads(const char *file, int line);
// What a completed warp rendezvous hands each lane: the 32 values the lanes passed (indexed by
// lane; those of the caller's mask only), the caller's lane, and which lanes of its warp exist
// (a partial last warp has fewer). One call per lane per warp op: the shuffles of a matvec's
// warp sums are most of what the emulated whole-model tests run.
struct WarpExchange {
    const uint64_t *values;
    unsigned lane;
    unsigned present;
};
// Blocks until every lane of `mask` (that exists in this block) has called a warp op with the
// same mask.
WarpExchange warp_rendezvous(WarpOp op, unsigned mask, uint64_t value, const char *file, int line);
// A shuffle (op: Shfl, ShflUp, ShflDown or ShflXor; arg: the source lane, the delta or the lane
// mask; width: the segment) as the rendezvous above, then the value the caller receives: the
// source lane's, or its own where CUDA gives it back (a source outside its segment), checking
// CUDA's rules (width a power of two <= 32; a source lane that exists and is in the mask). Out
// of line, in the scheduler's unchecked file (src/switch.cpp): the inlined form in every kernel's
// warp sum cost a sanitized frame and checks per lane per shuffle.
uint64_t warp_shuffle(WarpOp op, unsigned mask, uint64_t value, int arg, int width, const char *file, int line);
// A whole-warp butterfly reduction (op: ReduceSum or ReduceMax of floats, ReduceSumInt of ints)
// in one rendezvous: what `for (o = 16; o > 0; o >>= 1) v = v OP __shfl_xor_sync(full, v, o)`
// leaves in each lane, the same operations on the same operands in the same order (bitwise the
// five shuffles' result; only the sign of a maximum of +0 and -0, which C leaves to fmaxf, may
// differ), for a fifth of the fiber switches. Every lane of the warp must exist
// and call it (a partial last warp is a fault, as the shuffles' reads of missing lanes are); an
// int sum that overflows is a fault, as UBSan reports the signed add in the shuffles' loop.
uint64_t warp_reduce(WarpOp op, uint64_t value, const char *file, int line);
// emx_grid_wait's emulation: returns once *counter >= target (read with acquire); until then the
// thread blocks and other blocks of the launch run (see above). A wait that no block can ever
// satisfy is reported as a deadlock, naming every waiting block.
void grid_wait(const unsigned *counter, unsigned target, const char *file, int line);
// cudaGridDependencySynchronize: in a programmatic launch that overlaps the kernel before it
// (src/launch_ex.cpp), the block waits until that kernel has run to its end; else it returns at once.
// cudaTriggerProgrammaticLaunchCompletion only counts calls (the emulator starts the dependent
// kernel as early as it may anyway).
void grid_dependency_sync();
void trigger_programmatic_completion();
// cp.async.bulk.prefetch.L2 (emx_prefetch_l2_bulk): a fault unless p is 16-byte aligned, n a
// multiple of 16 and [p, p + n) inside one device allocation; else only counts the bytes
// (l2_prefetch_bytes): no cache to warm.
void l2_prefetch_bulk(const void *p, unsigned n, const char *file, int line);
void *static_shared(const void *key, const char *file, int line, const char *name, size_t size, size_t align);
void *dynamic_shared();
// Reports a fault in kernel code (printf-style message) with the kernel, block and thread, then
// aborts (or, in FailureMode::Return, abandons the launch: the thread's frames are never resumed,
// so callers build the message with no heap objects of their own). Never returns.
[[noreturn]] void device_fault(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

} // namespace emu

#endif
