// logits_metrics.cuh — the logits metrics' two steps as block functions, for logits_metrics.cu's
// kernels and for the persistent decode kernel's last phase (kernels/persistent/decode_persistent.cu):
//   partial_block  one chunk of LM_CHUNK logits -> a Partial (softmax sums from the chunk's max,
//                  argmax candidate, count of valid logits)
//   merge_block    every chunk's Partial -> H, V, lse (EmxMetrics), argmax, count
// Both are written for a block of LM_BLOCK threads and run in a block of LM_BLOCK / LANES: with
// LANES 2 a thread does the work of the wide block's threads t and t + LM_BLOCK / 2 (its lanes:
// the same elements, added in the same order), and reduce.cuh's lanes_reduce combines them as the
// wide block's first tree level does. So the persistent kernel's 128-thread blocks give the bits
// of the 256-thread kernels.
// Every thread of the block calls them (they contain __syncthreads), with block-uniform arguments.
#ifndef ENTROPIX_KERNELS_LOGITS_METRICS_CUH
#define ENTROPIX_KERNELS_LOGITS_METRICS_CUH

#include <math.h>

#include "kernels/reduce.cuh"

#define LM_BLOCK 256  // the kernels' threads: the order of every sum
#define LM_CHUNK 2048 // logits a partial covers

namespace emx_lm {

struct Partial {
    EmxSoftmaxStats st;
    emxr::ArgMax am;
    int n_valid;
};

__host__ __device__ constexpr int parts_of(int n) { return (n + LM_CHUNK - 1) / LM_CHUNK; }

// Shared memory of partial_block: the chunk's copy (read once from global memory), then one
// reduction scratch of the block's width (the largest value reduced: an EmxSoftmaxStats).
struct Smem {
    float *chunk;  // [LM_CHUNK]
    void *red;     // threads * sizeof(EmxSoftmaxStats) bytes
};
__host__ __device__ constexpr size_t smem_bytes(int threads) {
    return LM_CHUNK * sizeof(float) + (size_t)threads * sizeof(EmxSoftmaxStats);
}

// Chunk c of logits[0..n) -> *out.
template <int LANES>
__device__ void partial_block(const float *__restrict__ logits, int n, int c, Partial *out, Smem sm) {
    const int w = LM_BLOCK / LANES, i0 = c * LM_CHUNK;  // w: the block's threads
    const int len = min(LM_CHUNK, n - i0);
    float mx[LANES];
    int valid[LANES];
    emxr::ArgMax am[LANES];
    __syncthreads();  // the block's previous call may still read sm
#pragma unroll
    for (int j = 0; j < LANES; j++) {
        mx[j] = -INFINITY, valid[j] = 0, am[j] = {-INFINITY, -1};
        for (int i = (int)threadIdx.x + j * w; i < len; i += LM_BLOCK) {
            const float l = logits[i0 + i];
            sm.chunk[i] = l;
            if (emxr::is_finite_f(l)) mx[j] = fmaxf(mx[j], l);
            if (l > -INFINITY) {  // NaN compares false: neither valid nor a candidate
                valid[j]++;
                const emxr::ArgMax cand = {l, i0 + i};
                am[j] = emxr::argmax_better(am[j], cand);
            }
        }
    }
    const float m = emxr::lanes_reduce(mx, (float *)sm.red, emxr::MaxOp());  // its barriers publish chunk[]
    const int count = emxr::lanes_reduce(valid, (int *)sm.red, emxr::SumOp());
    const emxr::ArgMax best = emxr::lanes_reduce(am, (emxr::ArgMax *)sm.red, emxr::ArgMaxOp());
    emxr::FixedMaxSums sums[LANES];
#pragma unroll
    for (int j = 0; j < LANES; j++) {
        sums[j] = emxr::fixed_max_sums_zero();
        for (int i = (int)threadIdx.x + j * w; i < len; i += LM_BLOCK) emxr::fixed_max_add(sums[j], sm.chunk[i], (double)m);
    }
    const emxr::FixedMaxSums total = emxr::lanes_reduce(sums, (emxr::FixedMaxSums *)sm.red, emxr::FixedMaxSumsOp());
    if (threadIdx.x == 0) {
        Partial p;
        p.st = emxr::fixed_max_to_stats(total, m);
        p.am = best;
        p.n_valid = count;
        *out = p;
    }
}

// part[0..n_parts) -> m's logits fields, *argmax and *n_valid (each if not NULL). red: as Smem's.
template <int LANES>
__device__ void merge_block(const Partial *__restrict__ part, int n_parts, EmxMetrics *m, int *argmax, int *n_valid,
                            void *red) {
    const int w = LM_BLOCK / LANES;
    EmxSoftmaxStats st[LANES];
    emxr::ArgMax am[LANES];
    int valid[LANES];
#pragma unroll
    for (int j = 0; j < LANES; j++) {
        st[j] = emx_softmax_stats_empty(), am[j] = {-INFINITY, -1}, valid[j] = 0;
        for (int i = (int)threadIdx.x + j * w; i < n_parts; i += LM_BLOCK) {
            st[j] = emx_softmax_stats_merge(st[j], part[i].st);
            am[j] = emxr::argmax_better(am[j], part[i].am);
            valid[j] += part[i].n_valid;
        }
    }
    const EmxSoftmaxStats all = emxr::lanes_reduce(st, (EmxSoftmaxStats *)red, emxr::StatsMergeOp());
    const emxr::ArgMax best = emxr::lanes_reduce(am, (emxr::ArgMax *)red, emxr::ArgMaxOp());
    const int count = emxr::lanes_reduce(valid, (int *)red, emxr::SumOp());
    if (threadIdx.x == 0) {
        m->logits_entropy_bits = emx_softmax_stats_entropy_nats(all) / EMX_LN2;
        m->logits_varentropy_bits2 = emx_softmax_stats_varentropy_nats2(all) / (EMX_LN2 * EMX_LN2);
        m->logits_lse_nats = emx_softmax_stats_lse(all);
        if (argmax) *argmax = best.id;
        if (n_valid) *n_valid = count;
    }
}

}  // namespace emx_lm

#endif
