// geglu.h — the GeGLU gate of Gemma's feed-forward block (kernels/geglu.cu): GELU (tanh form) in
// place of SwiGLU's silu. The naive version is naive.h's emx_cuda_geglu_naive.
#ifndef ENTROPIX_KERNELS_GEGLU_H
#define ENTROPIX_KERNELS_GEGLU_H

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

// out[i] = gelu_tanh(gate[i]) * up[i], i < n (device arrays; out may equal gate), where
// gelu_tanh(z) = 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z³))). The CPU twin is emx_geglu
// (runtime/cpu/cpu_ops.h). After the gate and up matvecs or GEMMs of a model with
// ffn_act = EMX_ACT_GELU_TANH.
cudaError_t emx_cuda_geglu(float *out, const float *gate, const float *up, int n, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
