// embedding.h — token embedding lookup with dequantisation (kernels/embedding.cu).
#ifndef ENTROPIX_KERNELS_EMBEDDING_H
#define ENTROPIX_KERNELS_EMBEDDING_H

#include <cuda_runtime.h>

#include "kernels/weights.h"

#ifdef __cplusplus
extern "C" {
#endif

// out[i][c] = emb[tokens[i]][c] as f32, for i < n, c < emb->cols (any dtype of weights.h).
// tokens: device [n]; out: device [n][emb->cols]. A token id outside [0, emb->rows) gives a row
// of zeros (the runtime validates ids on the host first; this only keeps the read in bounds).
cudaError_t emx_cuda_embedding(const EmxCudaWeight *emb, const int *tokens, int n, float *out, cudaStream_t stream);
// The same rows times scale (f32, after the dequantisation, as the CPU): Gemma's embed_scale.
cudaError_t emx_cuda_embedding_scaled(const EmxCudaWeight *emb, const int *tokens, int n, float scale, float *out,
                                      cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
