// attn_metrics.cuh — the attention metrics' two steps as block functions, for attn_metrics.cu's
// kernels and for the persistent decode kernel's last phase (kernels/persistent/decode_persistent.cu):
//   layer_block  one layer's score rows -> its EmxAttnLayerMetrics (attn_metrics.cu says how)
//   average      the layers' metrics -> EmxMetrics' attn_* fields (one thread)
// layer_block is written for a block of AM_BLOCK threads and runs in a block of AM_BLOCK / LANES,
// a thread doing the work of the wide block's threads t and t + AM_BLOCK / 2 with the same
// elements in the same order (logits_metrics.cuh says why that gives the same bits).
// Every thread of the block calls layer_block (it contains __syncthreads), with block-uniform
// arguments.
#ifndef ENTROPIX_KERNELS_ATTN_METRICS_CUH
#define ENTROPIX_KERNELS_ATTN_METRICS_CUH

#include <math.h>

#include "kernels/attn_metrics.h"
#include "kernels/reduce.cuh"

#define AM_BLOCK 256  // the kernels' threads: the order of every sum

namespace emx_am {

// Shared memory of layer_block, for n_heads heads (<= EMX_CUDA_ATTN_METRICS_MAX_HEADS) and a
// block of `threads`.
struct Smem {
    EmxSoftmaxStats *st;  // [n_heads] each head's softmax statistic
    double *hb, *vb;      // [n_heads] its entropy and varentropy in bits
    void *red;            // threads * sizeof(emxr::FixedMaxSums) bytes: one reduction scratch
};
__host__ __device__ constexpr size_t smem_bytes(int n_heads, int threads) {
    return (size_t)n_heads * (sizeof(EmxSoftmaxStats) + 2 * sizeof(double)) +
           (size_t)threads * sizeof(emxr::FixedMaxSums);
}
// Smem carved from `base` (8-byte aligned), smem_bytes(n_heads, blockDim.x) bytes.
__device__ __forceinline__ Smem smem_at(void *base, int n_heads) {
    Smem s;
    s.st = (EmxSoftmaxStats *)base;
    s.hb = (double *)(s.st + n_heads);
    s.vb = s.hb + n_heads;
    s.red = s.vb + n_heads;
    return s;
}

// One layer: ls = its score rows [n_heads][stride] from the first visible key, valid_len keys;
// stats = its heads' softmax statistics as the attention recorded them, or NULL (recomputed from
// the rows). -> *r.
template <int LANES>
__device__ void layer_block(const float *ls, const EmxSoftmaxStats *stats, int n_heads, int stride, int valid_len,
                            EmxAttnLayerMetrics *r, Smem sm) {
    const int tid = threadIdx.x, w = AM_BLOCK / LANES;
    __syncthreads();  // the block's previous call may still read sm
    // (a) per-head statistics
    for (int h = 0; h < n_heads; h++) {
        if (stats) {
            if (tid == 0) sm.st[h] = stats[h];
            continue;
        }
        const float *row = ls + (size_t)h * stride;
        float mx[LANES];
#pragma unroll
        for (int j = 0; j < LANES; j++) {
            mx[j] = -INFINITY;
            for (int k = tid + j * w; k < valid_len; k += AM_BLOCK)
                if (emxr::is_finite_f(row[k])) mx[j] = fmaxf(mx[j], row[k]);
        }
        const float m = emxr::lanes_reduce(mx, (float *)sm.red, emxr::MaxOp());
        emxr::FixedMaxSums sums[LANES];
#pragma unroll
        for (int j = 0; j < LANES; j++) {
            sums[j] = emxr::fixed_max_sums_zero();
            for (int k = tid + j * w; k < valid_len; k += AM_BLOCK) emxr::fixed_max_add(sums[j], row[k], (double)m);
        }
        const emxr::FixedMaxSums total = emxr::lanes_reduce(sums, (emxr::FixedMaxSums *)sm.red, emxr::FixedMaxSumsOp());
        if (tid == 0) sm.st[h] = emxr::fixed_max_to_stats(total, m);
    }
    __syncthreads();
    for (int h = tid; h < n_heads; h += blockDim.x) {
        sm.hb[h] = emx_softmax_stats_entropy_nats(sm.st[h]) / EMX_LN2;
        sm.vb[h] = emx_softmax_stats_varentropy_nats2(sm.st[h]) / (EMX_LN2 * EMX_LN2);
    }
    __syncthreads();

    // (b) agreement and interaction strength, a (wide block's) thread per key
    double dev[LANES], sum_abs[LANES];
#pragma unroll
    for (int j = 0; j < LANES; j++) {
        dev[j] = 0.0, sum_abs[j] = 0.0;
        for (int k = tid + j * w; k < valid_len; k += AM_BLOCK) {
            double mean = 0.0;
            for (int h = 0; h < n_heads; h++) mean += emx_softmax_stats_prob(sm.st[h], ls[(size_t)h * stride + k]) / n_heads;
            for (int h = 0; h < n_heads; h++) {
                const float s = ls[(size_t)h * stride + k];
                dev[j] += fabs(emx_softmax_stats_prob(sm.st[h], s) - mean);
                if (emxr::is_finite_f(s)) sum_abs[j] += fabs((double)s);  // non-finite counts as 0
            }
        }
    }
    const double dev_all = emxr::lanes_reduce(dev, (double *)sm.red, emxr::SumOp());
    const double abs_all = emxr::lanes_reduce(sum_abs, (double *)sm.red, emxr::SumOp());

    if (tid == 0) {
        // The block sums are stored first: held in registers across the Welford loop's double
        // divisions (calls to a division routine) they were spilled to local memory on sm_80.
        r->agreement = dev_all / ((double)n_heads * valid_len);
        r->interaction_strength = abs_all / ((double)n_heads * valid_len);
        double mean_h = 0.0, m2_h = 0.0, sum_v = 0.0;
        for (int h = 0; h < n_heads; h++) {  // Welford, in head order (as the CPU)
            const double delta = sm.hb[h] - mean_h;
            mean_h += delta / (h + 1);
            m2_h += delta * (sm.hb[h] - mean_h);
            sum_v += sm.vb[h];
        }
        r->entropy_bits = mean_h;
        r->varentropy_heads_bits2 = m2_h / n_heads;
        r->varentropy_true_bits2 = sum_v / n_heads;
    }
}

// The mean of n_layers layers' metrics -> m's attn_* fields, in layer order (emx_attention_metrics').
__device__ __forceinline__ void average(const EmxAttnLayerMetrics *per_layer, int n_layers, EmxMetrics *m) {
    EmxAttnLayerMetrics s = {0.0, 0.0, 0.0, 0.0, 0.0};
    for (int l = 0; l < n_layers; l++) {
        s.entropy_bits += per_layer[l].entropy_bits;
        s.varentropy_heads_bits2 += per_layer[l].varentropy_heads_bits2;
        s.varentropy_true_bits2 += per_layer[l].varentropy_true_bits2;
        s.agreement += per_layer[l].agreement;
        s.interaction_strength += per_layer[l].interaction_strength;
    }
    const double n = n_layers;
    m->attn_entropy_bits = s.entropy_bits / n;
    m->attn_varentropy_heads_bits2 = s.varentropy_heads_bits2 / n;
    m->attn_varentropy_true_bits2 = s.varentropy_true_bits2 / n;
    m->attn_agreement = s.agreement / n;
    m->attn_interaction_strength = s.interaction_strength / n;
}

}  // namespace emx_am

#endif
