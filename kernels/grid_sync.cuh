// grid_sync.cuh — blocks of one launch that wait on each other through counters in global
// memory, and programmatic dependent launch (PDL) on the device side.
//
//   emx_grid_signal(counter, add): publishes what the block has written so far: a barrier, then
//     thread (0,0,0) fences and adds `add` to *counter.
//   emx_grid_wait(counter, target): returns, in every thread of the block, once *counter >=
//     target: thread (0,0,0) polls the counter (an acquire load, with a growing __nanosleep
//     between polls), then a barrier releases the block. What the signalling blocks wrote
//     before their emx_grid_signal is visible to every thread of the block after it.
//   emx_grid_arrive_last(counter, n, flag): the "last block" pattern: publishes what the block
//     has written (as emx_grid_signal), adds 1 to *counter, and returns true, in every thread of
//     the block, in the block whose add was the n-th (n blocks arrive at the counter in the
//     launch). That block sees what the other n - 1 wrote before arriving, and sets *counter
//     back to 0 for the next launch (a graph replay). No block waits for another: no residency
//     requirement. flag: an int in the block's shared memory (the leader's answer to the block).
//   emx_pdl_wait(), emx_pdl_trigger(): cudaGridDependencySynchronize and
//     cudaTriggerProgrammaticLaunchCompletion where the device has them (sm_90), nothing before
//     (there a launch with the programmatic attribute is serialised as an ordinary one).
//   emx_prefetch_l2(p): asks L2 for the 128-byte line holding p (PTX prefetch.global.L2): no
//     register receives anything and nothing waits for it. What a kernel launched with PDL does
//     before emx_pdl_wait with the weights it is about to read (kernels/launch.cuh); nothing
//     under the emulator, in the host pass, or before sm_90, where no launch overlaps the one
//     before it (and the prefetch's index, kept across a quantising prologue, made sm_80's
//     ptxas spill).
//   emx_prefetch_l2_bulk(p, n): asks L2 for the n bytes at p, one instruction whatever n (PTX
//     cp.async.bulk.prefetch.L2, sm_90; p 16-byte aligned, n a multiple of 16): a block with
//     nothing to do warms the weights of the phases to come. Nothing before sm_90; under the
//     emulator its rules are checked (alignment, the range inside one allocation) and its bytes
//     counted (emu/kernel_runs.h).
//   emx_clock(): the SM's cycle counter, to time a block's own stretches of work.
//   emx_max_resident_blocks(kernel, threads, shmem, &blocks): the largest grid of `kernel`
//     whose blocks are all resident at once (occupancy x SM count): a grid that waits must not
//     exceed it, or the blocks it waits for may never start.
//
// Every thread of the block must call emx_grid_signal, emx_grid_wait and emx_grid_arrive_last
// (all contain a __syncthreads). Counters only grow and waits compare with >=, so one counter
// serves a whole sequence of steps (wait for target k * blocks at step k) without a reset
// (emx_grid_arrive_last's are the exception: it resets them); they must not wrap around 2^32
// within a launch, and a launch that reuses one sets it first (cudaMemsetAsync).
//
// Memory ordering (the argument CUDA's cooperative groups rely on for grid.sync(),
// cooperative_groups/details/sync.h in the toolkit, which this follows). Signal: __syncthreads
// orders every thread's earlier writes before thread 0's next instructions (a CTA barrier
// synchronises its threads' memory at block scope); __threadfence is a fence.sc at gpu scope,
// which is cumulative: the writes thread 0 has observed through the barrier are ordered before
// its atomicAdd for every thread of the GPU. Wait: ld.acquire.gpu orders thread 0's later
// accesses after the load that saw the signal (so after the writes the fence published); the
// final __syncthreads extends that to the block's other threads. Before sm_70 (no acquire
// loads) a volatile poll followed by __threadfence does the same. A plain load in the loop
// would let the compiler hoist it out (an endless loop), hence the asm volatile / volatile.
// Arrive: the signal's release, then the atomicAdd that returns n - 1 has read the last of the
// n releases, and the __threadfence after it (an acquire at gpu scope, as the pre-sm_70 wait's)
// orders the leader's later accesses after all of them; the barrier extends that to the block.
//
// Under the CUDA emulator (tests/cuda_emu) emx_grid_wait blocks the emulated thread in the
// scheduler, which runs other blocks of the launch until a signal satisfies it, and reports a
// deadlock (every waiting block, counter and target) when none can; fences are no-ops there.
#ifndef ENTROPIX_KERNELS_GRID_SYNC_CUH
#define ENTROPIX_KERNELS_GRID_SYNC_CUH

#include <cuda_runtime.h>
#include <stddef.h>

#ifdef ENTROPIX_CUDA_EMU
#include <chrono>
#endif

// Under the emulator the waits report the caller's file and line (GCC's __builtin_FILE in a
// default argument names the call site).
#ifdef ENTROPIX_CUDA_EMU
#define EMX_GRID_SITE , const char *emx_file = __builtin_FILE(), int emx_line = __builtin_LINE()
#define EMX_GRID_BARRIER() ::emu::syncthreads(emx_file, emx_line)
#else
#define EMX_GRID_SITE
#define EMX_GRID_BARRIER() __syncthreads()
#endif

__device__ __forceinline__ bool emx_grid_leader() { return threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0; }

__device__ __forceinline__ void emx_grid_signal(unsigned *counter, unsigned add EMX_GRID_SITE) {
    EMX_GRID_BARRIER(); // every thread's writes precede the leader's fence
    if (emx_grid_leader()) {
        __threadfence();
        atomicAdd(counter, add);
    }
}

__device__ __forceinline__ void emx_grid_wait(const unsigned *counter, unsigned target EMX_GRID_SITE) {
    if (emx_grid_leader()) {
#if defined(ENTROPIX_CUDA_EMU)
        ::emu::grid_wait(counter, target, emx_file, emx_line);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
        unsigned seen, pause_ns = 32;
        for (;;) {
            asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
            if (seen >= target) break;
            __nanosleep(pause_ns);            // let the signalling blocks have the memory system
            if (pause_ns < 1024) pause_ns *= 2;
        }
#else
        // Before sm_70 (and in nvcc's host pass, which compiles no device code): poll, then fence.
        while (*(const volatile unsigned *)counter < target) {
        }
        __threadfence();
#endif
    }
    EMX_GRID_BARRIER();
}

__device__ __forceinline__ bool emx_grid_arrive_last(unsigned *counter, unsigned n, int *flag EMX_GRID_SITE) {
    EMX_GRID_BARRIER(); // every thread's writes precede the leader's fence
    if (emx_grid_leader()) {
        __threadfence();
        const bool last = atomicAdd(counter, 1u) == n - 1;
        if (last) {
            __threadfence();  // acquire: the other blocks' writes before this block's reads
            *counter = 0;     // every block of the launch has arrived: nobody else touches it
        }
        *flag = last;
    }
    EMX_GRID_BARRIER();
    return *flag != 0;
}

__device__ __forceinline__ void emx_pdl_wait() {
#if defined(ENTROPIX_CUDA_EMU) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900)
    cudaGridDependencySynchronize();
#endif
}

__device__ __forceinline__ void emx_pdl_trigger() {
#if defined(ENTROPIX_CUDA_EMU) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900)
    cudaTriggerProgrammaticLaunchCompletion();
#endif
}

__device__ __forceinline__ void emx_prefetch_l2(const void *p) {
#if !defined(ENTROPIX_CUDA_EMU) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("prefetch.global.L2 [%0];" : : "l"(p));
#else
    (void)p;
#endif
}

__device__ __forceinline__ void emx_prefetch_l2_bulk(const void *p, unsigned n) {
#if defined(ENTROPIX_CUDA_EMU)
    ::emu::l2_prefetch_bulk(p, n, __FILE__, __LINE__);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" : : "l"(p), "r"(n) : "memory");
#else
    (void)p, (void)n;
#endif
}

// The SM's cycle counter (clock64), for timing stretches of one block's work (counters of different
// SMs are not comparable). Under the emulator: the host's steady clock in nanoseconds (emulation
// times: a timeline's plumbing, not a GPU's figures).
__device__ __forceinline__ long long emx_clock() {
#if defined(ENTROPIX_CUDA_EMU)
    return (long long)std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
#else
    return clock64();
#endif
}

// blockIdx.x, read where it is called: an asm the compiler does not merge with the kernel's other
// reads of it. For the code before emx_pdl_wait, so that its row index is not kept live across
// the prologue that follows (across the quantiser's division calls ptxas spilled it).
__device__ __forceinline__ unsigned emx_block_x_here() {
#if !defined(ENTROPIX_CUDA_EMU) && defined(__CUDA_ARCH__)
    unsigned b;
    asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(b));
    return b;
#else
    return blockIdx.x;
#endif
}

// The most blocks of `kernel` (`threads` per block, `shmem` bytes of dynamic shared memory) that
// the current device holds at once: cudaOccupancyMaxActiveBlocksPerMultiprocessor x SM count.
template <class Kernel>
static inline cudaError_t emx_max_resident_blocks(Kernel *kernel, int threads, size_t shmem, int *blocks) {
    int device = 0, sms = 0, per_sm = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (err == cudaSuccess) err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, shmem);
    *blocks = err == cudaSuccess ? sms * per_sm : 0;
    return err;
}

#endif
