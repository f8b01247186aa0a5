// common.cuh — device helpers shared by the kernels: warp and block reductions, half-precision
// decoding, and the per-element dequantisation of the device weight layout (kernels/weights.h).
// Header-only; every function is __forceinline__ so each kernel gets its own inlined copy.
#ifndef ENTROPIX_KERNELS_COMMON_CUH
#define ENTROPIX_KERNELS_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "base/model_format.h"

#define EMX_FULL_MASK 0xffffffffu

// A device function compiled once per architecture and called, not inlined into each caller: for
// the long tails of a kernel instantiated many times over (the persistent decode kernel's metrics
// and decision, kernels/persistent/), whose copies would be most of the file's compile time.
// nvcc's __noinline__; the emulator's host compiler spells it as GCC does.
#ifdef ENTROPIX_CUDA_EMU
#define EMX_NOINLINE __attribute__((noinline))
#else
#define EMX_NOINLINE __noinline__
#endif

// Threads to launch for `n` work items when a block reduction follows: whole warps (a partial
// warp's missing lanes would make the full-mask shuffles undefined), at most `cap`.
__host__ __device__ static inline int emx_round_to_warps(int n, int cap) {
    int t = (n + 31) / 32 * 32;
    return t < 32 ? 32 : t > cap ? cap : t;
}

// Sum / max over the 32 lanes of a warp; every lane gets the result (butterfly, 5 shuffles).
// Under the emulator (tests/cuda_emu) the five shuffles are one rendezvous that gives each lane
// the same operations on the same operands in the same order (emu::warp_reduce, bitwise the
// loop's result: tests/cuda_emu/test_warp.cpp): a warp sum per row of every matvec is most of
// what an emulated whole-model test runs, and each shuffle is a fiber switch per lane.
__device__ __forceinline__ float emx_warp_sum(float v) {
#ifdef ENTROPIX_CUDA_EMU
    return ::emu::warp_reduce_sum(v, __FILE__, __LINE__);
#else
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(EMX_FULL_MASK, v, o);
    return v;
#endif
}
__device__ __forceinline__ float emx_warp_max(float v) {
#ifdef ENTROPIX_CUDA_EMU
    return ::emu::warp_reduce_max(v, __FILE__, __LINE__);
#else
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(EMX_FULL_MASK, v, o));
    return v;
#endif
}
__device__ __forceinline__ int emx_warp_sum_int(int v) {
#ifdef ENTROPIX_CUDA_EMU
    return ::emu::warp_reduce_sum_int(v, __FILE__, __LINE__);
#else
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(EMX_FULL_MASK, v, o);
    return v;
#endif
}

// One group of 32 activations to int8, a value per lane (every lane of the warp must call it):
// d = max|v| / 127, q = round-half-even(v / d) clamped to ±127, sum = Σ q over the group. The
// CPU's emx_quantize_acts_scalar bit for bit; matvec.cu's quantisation kernel and rmsnorm.cu's
// fused norm both call it, so the two paths give the same bits.
struct EmxQuantLane {
    int q;    // this lane's int8 value
    float d;  // the group's scale (every lane)
    int sum;  // the group's integer sum (every lane)
};
__device__ __forceinline__ EmxQuantLane emx_quantize_lane(float v) {
    EmxQuantLane r;
    r.d = emx_warp_max(fabsf(v)) / 127.0f;
    const float id = r.d != 0.0f ? 1.0f / r.d : 0.0f;
    // rintf rounds half to even like the CPU's lrintf; v * id feeds no add, so no FMA can change it
    r.q = (int)fminf(fmaxf(rintf(v * id), -127.0f), 127.0f);
    r.sum = emx_warp_sum_int(r.q);
    return r;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets the
// result. Warp sums go through shared memory and every warp then reduces the partials itself,
// which saves a second broadcast; the trailing barrier lets the caller reduce again at once.
__device__ __forceinline__ float emx_block_sum(float v) {
    __shared__ float partial[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    v = emx_warp_sum(v);
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    float t = lane < n_warps ? partial[lane] : 0.0f;
    t = emx_warp_sum(t);
    __syncthreads();
    return t;
}

// What emx_block_sum returns in a block of T threads (T a multiple of 32, at most 1024) whose
// thread v contributes value(v), computed by a block of any whole number of warps: warp w of
// this block takes the virtual warps w, w + its warps, ..., each the same butterfly over the
// same 32 operands, then the same butterfly over the partials, so the same bits. The fused
// kernels (matvec_fused.cu, attention_decode.cu) reproduce a norm that a block of another size
// computed in the graph path. value: a callable int -> float; every thread must call this.
template <typename F>
__device__ __forceinline__ float emx_block_sum_as(int T, F value) {
    __shared__ float partial_as[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5, vwarps = T >> 5;
    for (int vw = warp; vw < vwarps; vw += n_warps) {  // the same trips for a warp's 32 lanes
        const float s = emx_warp_sum(value(vw * 32 + lane));
        if (lane == 0) partial_as[vw] = s;
    }
    __syncthreads();
    float t = lane < vwarps ? partial_as[lane] : 0.0f;
    t = emx_warp_sum(t);
    __syncthreads();
    return t;
}

// a + b with b rounded to f32 first: never merged with the multiplications that made b into a
// fused multiply-add (nvcc and g++ contract `a + p * q` otherwise). For a kernel that computes in
// one place what another stored and the next added (the fused sandwich norm: matvec_fused.cu).
__device__ __forceinline__ float emx_add_rounded(float a, float b) {
#if !defined(ENTROPIX_CUDA_EMU) && defined(__CUDA_ARCH__)
    return __fadd_rn(a, b);  // documented never to be merged into a multiply-add
#else
    const volatile float rounded = b;  // the emulator (g++): a volatile read ends the contraction
    return a + rounded;
#endif
}

__device__ __forceinline__ float emx_f16_to_float(uint16_t h) { return __half2float(__ushort_as_half(h)); }
// bf16 is the top half of an f32: a shift, exact
__device__ __forceinline__ float emx_bf16_to_float(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

// Weight (r, c) of a [rows, cols] matrix of dtype DT in the device layout, as f32. One element at
// a time: for the plain kernels and the embedding, whose reads are not the bottleneck.
template <int DT>
__device__ __forceinline__ float emx_weight_at(const void *__restrict__ data, int rows, int cols, int r, int c) {
    const size_t i = (size_t)r * cols + c;
    if constexpr (DT == EMX_F32) return ((const float *)data)[i];
    if constexpr (DT == EMX_F16) return emx_f16_to_float(((const uint16_t *)data)[i]);
    if constexpr (DT == EMX_BF16) return emx_bf16_to_float(((const uint16_t *)data)[i]);
    const size_t g = i / EMX_GROUP_SIZE;  // group index over the whole tensor (cols % 32 == 0)
    if constexpr (DT == EMX_Q8) {
        const uint16_t *d = (const uint16_t *)((const uint8_t *)data + (size_t)rows * cols);
        return (float)((const int8_t *)data)[i] * emx_f16_to_float(d[g]);
    }
    // q4 / q4_1 / q4_1f: group g is 16 bytes; weight j < 16 is the low nibble of byte j, j >= 16 the high
    // nibble of byte j - 16
    const int j = (int)(i % EMX_GROUP_SIZE);
    const uint8_t byte = ((const uint8_t *)data)[g * 16 + (j & 15)];
    const int nib = j < 16 ? byte & 0xf : byte >> 4;
    const uint16_t *p = (const uint16_t *)((const uint8_t *)data + (size_t)rows * cols / 2);
    if constexpr (DT == EMX_Q4) return (float)(nib - 8) * emx_f16_to_float(p[g]);
    if constexpr (DT == EMX_Q4_1F) {  // f32 {d, m} per group (weights.h)
        const float2 dm = ((const float2 *)p)[g];
        return (float)nib * dm.x + dm.y;
    }
    return (float)nib * emx_f16_to_float(p[2 * g]) + emx_f16_to_float(p[2 * g + 1]);  // q4_1: {d, m}
}

// Runs the statement(s) `...` with `constexpr int DT` bound to the runtime dtype, so launchers
// switch once and kernels are compiled per dtype; an unknown dtype returns cudaErrorInvalidValue.
// Kernel launches stay in the callee (a template host function), on one line as the contract asks.
#define EMX_DISPATCH_DTYPE(dtype, ...)                                           \
    switch (dtype) {                                                             \
    case EMX_F32: { constexpr int DT = EMX_F32; __VA_ARGS__; } break;           \
    case EMX_F16: { constexpr int DT = EMX_F16; __VA_ARGS__; } break;           \
    case EMX_BF16: { constexpr int DT = EMX_BF16; __VA_ARGS__; } break;         \
    case EMX_Q8: { constexpr int DT = EMX_Q8; __VA_ARGS__; } break;             \
    case EMX_Q4: { constexpr int DT = EMX_Q4; __VA_ARGS__; } break;             \
    case EMX_Q4_1: { constexpr int DT = EMX_Q4_1; __VA_ARGS__; } break;         \
    case EMX_Q4_1F: { constexpr int DT = EMX_Q4_1F; __VA_ARGS__; } break;       \
    default: return cudaErrorInvalidValue;                                       \
    }

#endif
