// logits_metrics.cu — entropy H, varentropy V, log-sum-exp and argmax of the logits, one read of
// them (API in logits_metrics.h; the math is metrics.h's combinable softmax statistic).
//
// Kernel 1, grid ceil(n / 2048), 256 threads: a block copies its chunk of 2048 logits into
// shared memory (the only read of the logits: 4 bytes each), takes the chunk's largest finite
// logit m_c, the argmax candidate and the count of valid logits, then the sums Σe, Σe·t, Σe·t²
// of t = l - m_c in double with m_c fixed (no rescaling in the loop), and writes one partial
// (an EmxSoftmaxStats, 40 bytes) per chunk. Kernel 2, one block: merges the partials with
// emx_softmax_stats_merge (thread i takes chunks i, i+256, ... in order, then a fixed tree), and
// writes H, V, lse, argmax. Bytes: 4n read, ~52·n/2048 written and read back. The kernels'
// bodies are logits_metrics.cuh's block functions, which the persistent decode kernel runs too.
// Why it is fast: the logits are read once by ~n/2048 blocks (75 for Qwen3's 151936: the read
// of 600 KB is spread over the SMs), the double exps are ~1 per logit (FP64 is half the FP32
// rate on H100/A100); the second kernel touches a few KB.
// logit_pair_kernel (emx_cuda_logit_pair, the critic's verdict): one block of 1024 threads,
// thread t takes logits t, t + 1024, ...: their largest finite value (a block max), then their
// sum of exp(l - max) in double, in index order, merged by the block's fixed tree. Bytes: 8n
// (two reads of the row, the second mostly from L2); ~10 us for 151,936 logits, once per
// judgment, against the 600 KB copy of the row to the host it replaces.
// All three may be launched with programmatic dependent launch (the launchers' pdl: a step's
// tail, kernels/launch.cuh): each triggers its successor and waits for its predecessor (the
// classifier, then the partials) before anything else, all it reads being their output.
#include <math.h>

#include <cuda_runtime.h>

#include "kernels/grid_sync.cuh"
#include "kernels/launch.cuh"
#include "kernels/logits_metrics.cuh"
#include "kernels/logits_metrics.h"
#include "kernels/reduce.cuh"

namespace {

using emx_lm::Partial;

__global__ void __launch_bounds__(LM_BLOCK)
logits_partial_kernel(const float *__restrict__ logits, int n, Partial *__restrict__ part) {
    __shared__ float chunk[LM_CHUNK];
    __shared__ EmxSoftmaxStats red[LM_BLOCK];
    emx_pdl_trigger();
    emx_pdl_wait();  // the logits are the classifier's output
    emx_lm::partial_block<1>(logits, n, (int)blockIdx.x, part + blockIdx.x, emx_lm::Smem{chunk, red});
}

__global__ void __launch_bounds__(LM_BLOCK)
logits_merge_kernel(const Partial *__restrict__ part, int n_parts, EmxMetrics *m, int *argmax,
                    int *n_valid) {
    __shared__ EmxSoftmaxStats red[LM_BLOCK];
    emx_pdl_trigger();
    emx_pdl_wait();  // the partials
    emx_lm::merge_block<1>(part, n_parts, m, argmax, n_valid, red);
}

#define PAIR_BLOCK 1024

__global__ void __launch_bounds__(PAIR_BLOCK)
logit_pair_kernel(const float *__restrict__ logits, int n, int id_a, int id_b, EmxLogitPair *out) {
    __shared__ float red_f[PAIR_BLOCK];
    __shared__ double red_d[PAIR_BLOCK];
    emx_pdl_trigger();
    emx_pdl_wait();  // the logits are the classifier's output
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        if (emxr::is_finite_f(logits[i])) mx = fmaxf(mx, logits[i]);
    mx = emxr::block_reduce(mx, red_f, emxr::MaxOp());
    double sum = 0.0;  // every term <= 1: no rescaling
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        if (emxr::is_finite_f(logits[i])) sum += exp((double)logits[i] - (double)mx);
    sum = emxr::block_reduce(sum, red_d, emxr::SumOp());
    if (threadIdx.x == 0) {
        EmxLogitPair p;
        p.logit_a = logits[id_a];
        p.logit_b = logits[id_b];
        p.max = mx;
        p.sum = sum;
        *out = p;
    }
}

}  // namespace

extern "C" cudaError_t emx_cuda_logit_pair(const float *logits, int n, int id_a, int id_b, EmxLogitPair *out,
                                           cudaStream_t stream, int pdl) {
    if (!logits || !out || n < 1 || id_a < 0 || id_a >= n || id_b < 0 || id_b >= n) return cudaErrorInvalidValue;
    return EMX_LAUNCH(pdl, 1, PAIR_BLOCK, 0, stream, logit_pair_kernel, logits, n, id_a, id_b, out);
}

extern "C" size_t emx_cuda_logits_metrics_workspace_bytes(int n) {
    return n > 0 ? (size_t)emx_lm::parts_of(n) * sizeof(Partial) : 0;
}

extern "C" cudaError_t emx_cuda_logits_metrics(const float *logits, int n, EmxMetrics *m, int *argmax, int *n_valid,
                                               void *workspace, cudaStream_t stream, int pdl) {
    if (!logits || n < 1 || !m || !workspace) return cudaErrorInvalidValue;
    const int n_parts = emx_lm::parts_of(n);
    Partial *part = (Partial *)workspace;
    const cudaError_t e = EMX_LAUNCH(pdl, n_parts, LM_BLOCK, 0, stream, logits_partial_kernel, logits, n, part);
    if (e != cudaSuccess) return e;
    return EMX_LAUNCH(pdl, 1, LM_BLOCK, 0, stream, logits_merge_kernel, part, n_parts, m, argmax, n_valid);
}
