// logits_metrics_naive.cu — entropy and varentropy of the logits with one block and two passes:
// the lab's first version (tools/lab/logits_metrics.cu).
//
//   p_i = e^(l_i - M) / Z,  M = max l,  Z = Σ e^(l - M)
//   H = -Σ p ln p,  V = Σ p (ln p)² - H²   (nats; written in bits and bits²)
// Threads: one block of 256; thread t takes logits t, t + 256, ... Pass 1: max, then Z (two
// reductions through shared memory, a halving tree). Pass 2: Σ p ln p and Σ p ln² p, in double.
// Bytes per call: 3 reads of the n logits (max, Z, pass 2), 12·n; the last two from L2 at most.
// Why it is slow: one block runs on one SM of 132, which reads at a small fraction of the GPU's
// bandwidth, and the logits are read three times. The shipped kernel (logits_metrics.cu) spreads
// the one read over n / 2048 blocks and keeps the statistic combinable (metrics.h), so one pass
// suffices; it also handles -inf/NaN/+inf logits, which this version leaves out (finite only).
// Kept in its own file: the runtime never launches it (kernels/naive.h).
#include "kernels/naive.h"

#define NAIVE_LM_THREADS 256

// Sum (or max) of v over the block through shared memory; every thread gets it.
static __device__ double naive_block_reduce(double v, double *s, bool take_max) {
    s[threadIdx.x] = v;
    __syncthreads();
    for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) {
            const double o = s[threadIdx.x + half];
            s[threadIdx.x] = take_max ? fmax(s[threadIdx.x], o) : s[threadIdx.x] + o;
        }
        __syncthreads();
    }
    const double r = s[0];
    __syncthreads();  // s is reused by the next reduction
    return r;
}

__global__ void logits_metrics_naive_kernel(const float *logits, int n, EmxMetrics *m) {
    __shared__ double s[NAIVE_LM_THREADS];
    double mx = -INFINITY;
    for (int i = threadIdx.x; i < n; i += blockDim.x) mx = fmax(mx, (double)logits[i]);
    mx = naive_block_reduce(mx, s, true);
    double z = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) z += exp((double)logits[i] - mx);
    z = naive_block_reduce(z, s, false);
    const double log_z = log(z);
    double plp = 0.0, pl2p = 0.0;  // Σ p ln p, Σ p ln² p
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const double lp = (double)logits[i] - mx - log_z, p = exp(lp);
        plp += p * lp;
        pl2p += p * lp * lp;
    }
    plp = naive_block_reduce(plp, s, false);
    pl2p = naive_block_reduce(pl2p, s, false);
    if (threadIdx.x == 0) {
        m->logits_entropy_bits = -plp / EMX_LN2;
        m->logits_varentropy_bits2 = (pl2p - plp * plp) / (EMX_LN2 * EMX_LN2);
        m->logits_lse_nats = mx + log_z;
    }
}

extern "C" cudaError_t emx_cuda_logits_metrics_naive(const float *logits, int n, EmxMetrics *m, cudaStream_t stream) {
    if (!logits || n < 1 || !m) return cudaErrorInvalidValue;
    logits_metrics_naive_kernel<<<1, NAIVE_LM_THREADS, 0, stream>>>(logits, n, m);
    return cudaGetLastError();
}
