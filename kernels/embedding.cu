// embedding.cu — token embedding lookup: out[i] = dequant(emb[tokens[i]]), f32.
//
// Threads: one block of 256 per token; thread t writes columns t, t+256, ... so consecutive
// threads read consecutive weights and write consecutive floats (coalesced both ways).
// Bytes per call: n * cols * (bytes per weight + 4), plus n token ids. Trivial next to one
// layer's matmuls; its point is to keep the decode step on the device (no host round trip per
// token) rather than to be fast. The dequantisation is the shared per-element one of common.cuh.
#include "kernels/embedding.h"

#include "kernels/common.cuh"
#include "kernels/grid_sync.cuh"
#include "kernels/launch.cuh"

template <int DT>
__global__ void __launch_bounds__(256) embedding_kernel(const void *__restrict__ emb, int rows, int cols,
                                                        const int *__restrict__ tokens, float scale,
                                                        float *__restrict__ out) {
    // PDL: the next kernel (the first layer's, launched with the attribute) may be scheduled now.
    // The row to read depends on the token, so nothing is loaded before the wait. This launch
    // itself never carries the attribute (it follows the step's input copy): the wait returns at
    // once, and is here for rule (b) of kernels/launch.cuh should that change.
    emx_pdl_trigger();
    emx_pdl_wait();
    const int tok = tokens[blockIdx.x];
    float *o = out + (size_t)blockIdx.x * cols;
    const bool valid = tok >= 0 && tok < rows;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) o[c] = valid ? emx_weight_at<DT>(emb, rows, cols, tok, c) * scale : 0.0f;
}

template <int DT>
static cudaError_t launch_embedding(const EmxCudaWeight *emb, const int *tokens, int n, float scale, float *out,
                                    cudaStream_t stream) {
    // pdl 0: the first kernel of a step follows a copy (rule (c) of kernels/launch.cuh)
    return EMX_LAUNCH(0, n, 256, 0, stream, embedding_kernel<DT>, emb->data, emb->rows, emb->cols, tokens, scale, out);
}

extern "C" cudaError_t emx_cuda_embedding(const EmxCudaWeight *emb, const int *tokens, int n, float *out, cudaStream_t stream) {
    return emx_cuda_embedding_scaled(emb, tokens, n, 1.0f, out, stream);
}

extern "C" cudaError_t emx_cuda_embedding_scaled(const EmxCudaWeight *emb, const int *tokens, int n, float scale,
                                                 float *out, cudaStream_t stream) {
    if (n < 0) return cudaErrorInvalidValue;
    if (n == 0) return cudaSuccess;
    EMX_DISPATCH_DTYPE(emb->dtype, return launch_embedding<DT>(emb, tokens, n, scale, out, stream));
    return cudaSuccess;
}
