// emu/device.h — CUDA's function qualifiers, built-in variables and block/warp synchronisation
// for kernels compiled by the host C++ compiler.
//
// __global__/__device__/__host__ vanish (every function is an ordinary host function). The
// built-ins threadIdx/blockIdx/blockDim/gridDim are thread_local variables that the scheduler
// updates at each switch between fibers. __syncthreads() is a block barrier; the warp ops
// (__shfl*_sync, votes, __syncwarp) are warp-level barriers: each lane deposits its value in the
// warp's exchange buffer, and when all lanes of the mask have arrived each reads what it needs.
// Masks: any mask that contains the calling lane; all lanes of the mask that exist in the block
// must call a warp op with the same mask (lanes past the end of a partial last warp are ignored,
// but reading a value from one is a fault). width must be a power of two <= 32, as in CUDA.
#ifndef EMU_DEVICE_H
#define EMU_DEVICE_H

#include <stdint.h>
#include <string.h>

#include <type_traits>

#include "../cuda_bf16.h"
#include "../cuda_fp16.h"
#include "engine.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
// A kernel parameter whose address the kernel takes (to pass it on by reference) without a copy
// in each thread's local memory: here the parameter is an ordinary const argument, each thread's
// own, whose address may be taken as well.
#define __grid_constant__
// Static __shared__ declarations are rewritten by tests/cuda_emu/rewrite.py into per-block
// allocations; a form it does not recognise falls back to one instance per host thread, which
// is one per block as long as blocks run one at a time (not for the co-resident blocks of a
// launch that waits in emx_grid_wait: README, "What is not modelled").
#define __shared__ static thread_local

static const int warpSize = 32;

#define __syncthreads() ::emu::syncthreads(__FILE__, __LINE__)

// A fence orders one thread's memory accesses as other threads see them. Here threads switch
// only at barriers, warp ops and grid waits, and every access is immediately visible to all of
// them, so the order a fence guarantees always holds: a no-op (a kernel still needs it on a GPU).
inline void __threadfence() {}

// Programmatic dependent launch (sm_90): the previous kernel on the stream has always completed
// before a kernel starts here (streams are synchronous), so both return at once; they count
// calls (emu::grid_dependency_syncs ..., emu/api.h) for the tests.
inline void cudaGridDependencySynchronize() { ::emu::grid_dependency_sync(); }
inline void cudaTriggerProgrammaticLaunchCompletion() { ::emu::trigger_programmatic_completion(); }
#define __syncwarp(...) ::emu::syncwarp_at(__FILE__, __LINE__ __VA_OPT__(, ) __VA_ARGS__)

namespace emu {

inline void syncwarp_at(const char *file, int line, unsigned mask = 0xffffffffu) {
    warp_rendezvous(WarpOp::SyncWarp, mask, 0, file, line);
}

// The value types a shuffle may carry: 4 or 8 bytes as in CUDA, plus the 16-bit float types.
template <class T> constexpr bool shufflable() {
    return std::is_arithmetic<T>::value || std::is_same<T, __half>::value ||
           std::is_same<T, __half2>::value || std::is_same<T, __nv_bfloat16>::value ||
           std::is_same<T, __nv_bfloat162>::value;
}

// Bit casts without taking an address: a local whose address is taken gets its shadow poisoned
// and unpoisoned by AddressSanitizer around every shuffle (a store to a cold shadow line per
// lane per shuffle, as much as the rest of the shuffle's own work). Bits<N>: the unsigned type
// of N bytes.
template <size_t N> struct BitsOf;
template <> struct BitsOf<1> { using type = uint8_t; };
template <> struct BitsOf<2> { using type = uint16_t; };
template <> struct BitsOf<4> { using type = uint32_t; };
template <> struct BitsOf<8> { using type = uint64_t; };
template <class T> using Bits = typename BitsOf<sizeof(T)>::type;

template <class T> inline uint64_t to_bits(T v) {
    static_assert(shufflable<T>(), "__shfl*_sync: this type cannot be shuffled (CUDA allows arithmetic types, __half(2), __nv_bfloat16(2))");
    return __builtin_bit_cast(Bits<T>, v);
}
template <class T> inline T from_bits(uint64_t u) { return __builtin_bit_cast(T, (Bits<T>)u); }

template <class T> inline T shfl_sync(unsigned mask, T v, int src_lane, const char *file, int line, int width = 32) {
    return from_bits<T>(warp_shuffle(WarpOp::Shfl, mask, to_bits(v), src_lane, width, file, line));
}
template <class T> inline T shfl_up_sync(unsigned mask, T v, unsigned delta, const char *file, int line, int width = 32) {
    return from_bits<T>(warp_shuffle(WarpOp::ShflUp, mask, to_bits(v), (int)delta, width, file, line));
}
template <class T> inline T shfl_down_sync(unsigned mask, T v, unsigned delta, const char *file, int line, int width = 32) {
    return from_bits<T>(warp_shuffle(WarpOp::ShflDown, mask, to_bits(v), (int)delta, width, file, line));
}
template <class T> inline T shfl_xor_sync(unsigned mask, T v, int lane_mask, const char *file, int line, int width = 32) {
    return from_bits<T>(warp_shuffle(WarpOp::ShflXor, mask, to_bits(v), lane_mask, width, file, line));
}

// kernels/common.cuh's warp reductions, each one rendezvous (warp_reduce, engine.h).
inline float warp_reduce_sum(float v, const char *file, int line) {
    return from_bits<float>(warp_reduce(WarpOp::ReduceSum, to_bits(v), file, line));
}
inline float warp_reduce_max(float v, const char *file, int line) {
    return from_bits<float>(warp_reduce(WarpOp::ReduceMax, to_bits(v), file, line));
}
inline int warp_reduce_sum_int(int v, const char *file, int line) {
    return from_bits<int>(warp_reduce(WarpOp::ReduceSumInt, to_bits(v), file, line));
}

// Votes: bit i of the result is lane i's predicate, for the lanes of the mask that exist;
// __all_sync: whether that is every lane of the mask that exists.
inline unsigned vote(WarpOp op, unsigned mask, int pred, const char *file, int line) {
    const WarpExchange x = warp_rendezvous(op, mask, pred != 0, file, line);
    unsigned bits = 0, lanes = mask & x.present;
    for (unsigned l = 0; l < 32; l++)
        if ((lanes >> l & 1u) && x.values[l]) bits |= 1u << l;
    return op == WarpOp::All ? (unsigned)(bits == lanes) : bits;
}

} // namespace emu

// The optional width argument of the shuffles goes last, after the call site.
#define __shfl_sync(mask, v, src, ...) ::emu::shfl_sync(mask, v, src, __FILE__, __LINE__, ##__VA_ARGS__)
#define __shfl_up_sync(mask, v, d, ...) ::emu::shfl_up_sync(mask, v, d, __FILE__, __LINE__, ##__VA_ARGS__)
#define __shfl_down_sync(mask, v, d, ...) ::emu::shfl_down_sync(mask, v, d, __FILE__, __LINE__, ##__VA_ARGS__)
#define __shfl_xor_sync(mask, v, m, ...) ::emu::shfl_xor_sync(mask, v, m, __FILE__, __LINE__, ##__VA_ARGS__)
#define __ballot_sync(mask, pred) ::emu::vote(::emu::WarpOp::Ballot, mask, pred, __FILE__, __LINE__)
#define __any_sync(mask, pred) (::emu::vote(::emu::WarpOp::Any, mask, pred, __FILE__, __LINE__) != 0u)
#define __all_sync(mask, pred) (::emu::vote(::emu::WarpOp::All, mask, pred, __FILE__, __LINE__) != 0u)

#endif
