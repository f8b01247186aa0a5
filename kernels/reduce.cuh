// reduce.cuh — block reductions of the attention, metrics and sampling kernels. (Warp sums and
// maxima by shuffle butterflies are common.cuh's emx_warp_sum / emx_warp_max.)
//
//   block_reduce(v, scratch, op): any type and any associative op, through shared memory
//     (scratch holds blockDim.x values). Doubles and structs (EmxSoftmaxStats, argmax pairs)
//     go this way: no 64-bit or struct shuffles, so the emulation layer needs nothing special,
//     and the tree order is fixed, so a result does not depend on scheduling.
//   lanes_reduce(v, scratch, op): block_reduce of a block twice as wide, by a block whose
//     threads each hold two of its threads' values: the same bits.
// Every thread of the block must call block_reduce (it contains __syncthreads); all get the result.
#ifndef ENTROPIX_KERNELS_REDUCE_CUH
#define ENTROPIX_KERNELS_REDUCE_CUH

#include <math.h>

#include <cuda_runtime.h>

#include "kernels/common.cuh"

extern "C" {
#include "sampler/metrics.h"  // declares C functions: C linkage
}

namespace emxr {

struct SumOp {
    template <typename T>
    __device__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
    template <typename T>
    __device__ T operator()(T a, T b) const { return a > b ? a : b; }
};

// Tree reduction over the block in shared memory: pairs (i, i + half) for a halving `half`
// that starts at the power of two >= blockDim.x / 2 (so any block size works).
template <typename T, typename Op>
__device__ T block_reduce(T v, T *scratch, Op op) {
    const int tid = threadIdx.x, n = blockDim.x;
    __syncthreads();  // scratch may still be read by a previous call
    scratch[tid] = v;
    __syncthreads();
    int half = 1;
    while (half * 2 < n) half *= 2;
    for (; half > 0; half >>= 1) {
        if (tid < half && tid + half < n) scratch[tid] = op(scratch[tid], scratch[tid + half]);
        __syncthreads();
    }
    T r = scratch[0];
    __syncthreads();
    return r;
}

// block_reduce of a block of 2W threads, made by a block of W: thread t holds the values of the
// wide block's threads t and t + W (v[0], v[1]), which that block's first level pairs; combined
// first, the rest is the same tree over W, so the result is the same bits. lanes 1: block_reduce
// of v[0]. (The metrics' block functions run with either block: kernels/logits_metrics.cuh.)
template <int LANES, typename T, typename Op>
__device__ __forceinline__ T lanes_reduce(const T (&v)[LANES], T *scratch, Op op) {
    static_assert(LANES == 1 || LANES == 2, "a thread is one or two of the wide block's threads");
    if constexpr (LANES == 2) return block_reduce(op(v[0], v[1]), scratch, op);
    else return block_reduce(v[0], scratch, op);
}

// A candidate for argmax: the larger value wins, equal values go to the lower id; id < 0 is
// "nothing" (-inf and NaN logits never become candidates, as emx_sample_argmax).
struct ArgMax {
    float value;
    int id;
};

__device__ __forceinline__ ArgMax argmax_better(ArgMax a, ArgMax b) {
    if (b.id < 0) return a;
    if (a.id < 0) return b;
    if (b.value > a.value || (b.value == a.value && b.id < a.id)) return b;
    return a;
}

struct ArgMaxOp {
    __device__ ArgMax operator()(ArgMax a, ArgMax b) const { return argmax_better(a, b); }
};

// Softmax sums of a row part relative to a max m fixed in advance (the part's largest finite
// score): no rescaling inside the loop. Non-finite scores as metrics.h: -inf and NaN take no
// probability, +inf is counted. Sums of parts with the same m add up; to_stats() then gives
// the EmxSoftmaxStats (metrics.h) of the part.
struct FixedMaxSums {
    double e, et, et2;  // Σ e^{s-m}, Σ e^{s-m}·(s-m), Σ e^{s-m}·(s-m)²
    int n_posinf;
};

__device__ __forceinline__ FixedMaxSums fixed_max_sums_zero() {
    FixedMaxSums z = {0.0, 0.0, 0.0, 0};
    return z;
}

__device__ __forceinline__ bool is_finite_f(float s) { return s > -INFINITY && s < INFINITY; }

__device__ __forceinline__ void fixed_max_add(FixedMaxSums &a, float s, double m) {
    if (s == INFINITY) {
        a.n_posinf++;
        return;
    }
    if (!is_finite_f(s)) return;
    double t = (double)s - m, e = exp(t);  // double, as metrics.c: t is exact, e has 53 bits
    a.e += e;
    a.et += e * t;
    a.et2 += e * t * t;
}

struct FixedMaxSumsOp {
    __device__ FixedMaxSums operator()(FixedMaxSums a, FixedMaxSums b) const {
        FixedMaxSums r = {a.e + b.e, a.et + b.et, a.et2 + b.et2, a.n_posinf + b.n_posinf};
        return r;
    }
};

// *dst = s, field by field: a struct copy also copies the 4 bytes of padding after n_posinf,
// whatever the writing thread's stack held there (on the emulator's fibers, at times a clock's
// bits), and the tests compare statistics rows byte for byte.
__device__ __forceinline__ void store_stats(EmxSoftmaxStats *dst, const EmxSoftmaxStats &s) {
    dst->max = s.max, dst->sum_e = s.sum_e, dst->sum_et = s.sum_et, dst->sum_et2 = s.sum_et2;
    dst->n_posinf = s.n_posinf;
}

// m: the part's largest finite score (-INFINITY when it has none).
__device__ __forceinline__ EmxSoftmaxStats fixed_max_to_stats(FixedMaxSums a, float m) {
    EmxSoftmaxStats st = emx_softmax_stats_empty();
    st.n_posinf = a.n_posinf;
    if (a.e > 0.0) {
        st.max = (double)m;
        st.sum_e = a.e;
        st.sum_et = a.et;
        st.sum_et2 = a.et2;
    }
    return st;
}

struct StatsMergeOp {
    __device__ EmxSoftmaxStats operator()(EmxSoftmaxStats a, EmxSoftmaxStats b) const {
        return emx_softmax_stats_merge(a, b);
    }
};

}  // namespace emxr

#endif
