// naive.h — the naive versions of the kernel lab (tools/lab, docs/kernel-lab.md): the idea of a
// family with nothing else (the fewest parameters that compute the op, no templates), the first
// row of its lab table. The runtime never launches them; they live in kernels/<family>_naive.cu
// (the sampler's in kernels/sampling/; add_naive.cu: the residual add of the fused layer's naive
// version, tools/lab/matvec_fused.cu) beside the versions it does launch, so the fast file's
// header stays about what ships, and the naive one reads alone. Each is checked against the same CPU
// twin as the fast versions, by the lab and so by `make lab-test`.
#ifndef ENTROPIX_KERNELS_NAIVE_H
#define ENTROPIX_KERNELS_NAIVE_H

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

// (sampler/ headers inside the C linkage block: they declare C functions)
#include "sampler/metrics.h"
#include "sampler/sample.h"

// out [rows] = W x with one thread per row: W f32 [rows][cols] (the dequantised weights), x f32
// [cols] (device). matvec_naive.cu.
cudaError_t emx_cuda_matvec_naive(const float *w, const float *x, float *out, int rows, int cols, cudaStream_t stream);

// out [n_tokens][rows] = x Wᵀ with one thread per output element: W f32 [rows][cols], x f32
// [n_tokens][cols] (device). gemm_naive.cu.
cudaError_t emx_cuda_gemm_naive(const float *w, const float *x, float *out, int rows, int cols, int n_tokens,
                                cudaStream_t stream);

// emx_cuda_rmsnorm's result with one thread per row: x, out [rows][n], w [n] (device).
cudaError_t emx_cuda_rmsnorm_naive(float *out, const float *x, const float *w, int n, int rows, float eps,
                                   cudaStream_t stream);

// x [n] += y [n] (device) with one thread per element: the residual add the naive decode layer
// launches after its matvec (the runtime adds in the matvec's epilogue instead). add_naive.cu.
cudaError_t emx_cuda_add_naive(float *x, const float *y, int n, cudaStream_t stream);

// emx_cuda_geglu's result (out[i] = gelu_tanh(gate[i]) * up[i], i < n, device arrays) with one
// thread per element. geglu_naive.cu.
cudaError_t emx_cuda_geglu_naive(float *out, const float *gate, const float *up, int n, cudaStream_t stream);

// m->logits_entropy_bits and m->logits_varentropy_bits2 of logits[0..n) (device) with one block
// and two passes: max and Σe^(l-max) first, then the sums of p·log p and p·log² p. Finite logits
// only (the fast kernel also handles -inf/NaN/+inf; this one shows the math).
cudaError_t emx_cuda_logits_metrics_naive(const float *logits, int n, EmxMetrics *m, cudaStream_t stream);

// out [n_heads][head_dim] = softmax(q_h · k_t / sqrt(head_dim)) v_t over t < n_keys for every
// query head h (GQA: KV head h / (n_heads / n_kv_heads)); q [n_heads][head_dim], k, v f32
// [n_keys][n_kv_heads][head_dim]; one block per head, scores [n_heads][n_keys] a device
// scratch. No split over keys, no f16 cache, no statistics, no score output.
cudaError_t emx_cuda_attention_naive(const float *q, const float *k, const float *v, float *out, float *scores,
                                     int n_heads, int n_kv_heads, int head_dim, int n_keys, cudaStream_t stream);

// token_out (device int) = emx_sample(logits, n, params, u) with one block and one pass over the
// logits per kept token; kept [n] a device scratch list. sampling/sampling_naive.cu.
cudaError_t emx_cuda_sample_naive(const float *logits, int n, const EmxSamplerParams *params, double u,
                                  EmxCandidate *kept, int *token_out, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
