// attention_naive.cu — decode attention as its definition: the lab's first version
// (tools/lab/attention.cu).
//
//   S_h[t] = q_h · k_t / sqrt(head_dim),  out_h = Σ_t softmax(S_h)[t] v_t,  t < n_keys
// Threads: one block of 128 per query head h (KV head h / (n_heads / n_kv_heads)). Thread i
// computes the whole dot products of keys i, i + 128, ... and stores them in `scores`; the
// block's max and Σ e^(S - max) go through a shared-memory tree; thread d then sums
// e^(S_t - max) v_t[d] over every key for its output dimensions d, d + 128, ...
// Bytes per call: the keys and values once per query head, 2 · n_heads · n_keys · head_dim · 4,
// plus the score row written and read back twice.
// Why it is slow: a thread reads a key row alone (neighbouring threads n_kv_heads · head_dim
// floats apart: uncoalesced); only n_heads blocks run (9 or 16 SMs of 132 busy at long
// contexts); the heads of a GQA group read the same keys again. attention.cu's PLAIN gives a key
// to a warp (coalesced), SPLIT splits the keys over many blocks (flash-decoding), SPLIT_GQA
// reads each key once per group. Nor does this version keep the statistics, an f16 cache,
// split key storage or several query rows.
// Kept in its own file: the runtime never launches it (kernels/naive.h).
#include "kernels/naive.h"

#define NAIVE_ATTN_THREADS 128

// Max (take_max) or sum of v over the block; every thread gets it.
static __device__ float naive_attn_reduce(float v, float *s, bool take_max) {
    s[threadIdx.x] = v;
    __syncthreads();
    for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) s[threadIdx.x] = take_max ? fmaxf(s[threadIdx.x], s[threadIdx.x + half])
                                                         : s[threadIdx.x] + s[threadIdx.x + half];
        __syncthreads();
    }
    const float r = s[0];
    __syncthreads();  // s is reused by the next reduction
    return r;
}

__global__ void attention_naive_kernel(const float *q, const float *k, const float *v, float *out, float *scores,
                                       int n_heads, int n_kv_heads, int head_dim, int n_keys) {
    __shared__ float red[NAIVE_ATTN_THREADS];
    const int h = blockIdx.x, kvh = h / (n_heads / n_kv_heads), kv_dim = n_kv_heads * head_dim;
    const float *qh = q + (size_t)h * head_dim;
    float *s = scores + (size_t)h * n_keys;
    const float scale = 1.0f / sqrtf((float)head_dim);
    float mx = -INFINITY;
    for (int t = threadIdx.x; t < n_keys; t += blockDim.x) {
        const float *kt = k + (size_t)t * kv_dim + (size_t)kvh * head_dim;
        float dot = 0.0f;
        for (int d = 0; d < head_dim; d++) dot += qh[d] * kt[d];
        s[t] = dot * scale;
        mx = fmaxf(mx, s[t]);
    }
    mx = naive_attn_reduce(mx, red, true);
    float sum = 0.0f;
    for (int t = threadIdx.x; t < n_keys; t += blockDim.x) sum += expf(s[t] - mx);
    sum = naive_attn_reduce(sum, red, false);  // its barriers also publish every s[t] to the block
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float acc = 0.0f;
        for (int t = 0; t < n_keys; t++) acc += expf(s[t] - mx) * v[(size_t)t * kv_dim + (size_t)kvh * head_dim + d];
        out[(size_t)h * head_dim + d] = acc / sum;
    }
}

extern "C" cudaError_t emx_cuda_attention_naive(const float *q, const float *k, const float *v, float *out,
                                                float *scores, int n_heads, int n_kv_heads, int head_dim, int n_keys,
                                                cudaStream_t stream) {
    if (n_heads < 1 || n_kv_heads < 1 || n_heads % n_kv_heads || head_dim < 1 || n_keys < 1) return cudaErrorInvalidValue;
    attention_naive_kernel<<<n_heads, NAIVE_ATTN_THREADS, 0, stream>>>(q, k, v, out, scores, n_heads, n_kv_heads, head_dim, n_keys);
    return cudaGetLastError();
}
