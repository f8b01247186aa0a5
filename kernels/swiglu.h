// swiglu.h — the SwiGLU gate of the feed-forward block (kernels/swiglu.cu). The variant fused
// into the gate/up matvec is emx_cuda_matvec_swiglu in matvec.h.
#ifndef ENTROPIX_KERNELS_SWIGLU_H
#define ENTROPIX_KERNELS_SWIGLU_H

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

// out[i] = silu(gate[i]) * up[i] = gate[i] / (1 + exp(-gate[i])) * up[i], i < n (device arrays;
// out may equal gate). The CPU twin is emx_swiglu. For prefill, after the gate and up GEMMs.
cudaError_t emx_cuda_swiglu(float *out, const float *gate, const float *up, int n, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
