// attn_metrics.cu — attention metrics of one step from the score rows (API in attn_metrics.h,
// definitions in sampler/metrics.h: A_h = softmax(S_h) over the valid keys).
//
// Kernel 1, a block of 256 threads per layer used: (a) each head's softmax statistic (taken from
// the attention kernel's head_stats, or recomputed: a block max and a block sum per head), its
// entropy H_h and varentropy in shared memory; thread 0 then takes the mean and the variance of
// H_h across heads by Welford's update in head order, as the CPU does; (b) a thread per key k
// computes the head-mean attention a(k) = Σ_h A_h(k) / n_heads, the L1 deviation Σ_h |A_h(k) -
// a(k)| and Σ_h |S_h(k)|; two block sums give agreement and interaction strength. Kernel 2
// (one thread) averages the layers' metrics, as emx_attention_metrics.
// Bytes: the score rows of the layers used (n_heads · valid_len · 4 each, read twice without
// head_stats, once with them), which the attention kernel has just written (L2-resident at
// decode sizes: 16 heads · 4096 keys · 4 B = 256 KB); ~48 bytes written per layer.
// Probabilities are in double from the float scores, as the CPU's. The kernels' bodies are
// attn_metrics.cuh's block functions, which the persistent decode kernel runs too.
// Both kernels may be launched with programmatic dependent launch (the decode step's tail:
// kernels/launch.cuh): each triggers its successor, then waits for its predecessor before its
// first read (the score rows, the key count of a graph's input, the per-layer metrics).
#include <math.h>
#include <string.h>

#include <cuda_runtime.h>

#include "kernels/attn_metrics.cuh"
#include "kernels/attn_metrics.h"
#include "kernels/grid_sync.cuh"
#include "kernels/launch.cuh"
#include "kernels/reduce.cuh"

namespace {

__global__ void __launch_bounds__(AM_BLOCK)
attn_layer_kernel(const float *__restrict__ scores, const EmxSoftmaxStats *head_stats,
                  int first_layer, int n_heads, int stride, int valid_len_arg,
                  const int *valid_len_dev, EmxCudaAttnWindow win, EmxAttnLayerMetrics *out) {
    __shared__ __align__(8) unsigned char sm[emx_am::smem_bytes(EMX_CUDA_ATTN_METRICS_MAX_HEADS, AM_BLOCK)];
    emx_pdl_trigger();
    emx_pdl_wait();
    const int l = first_layer + blockIdx.x;
    const int all_keys = valid_len_dev ? *valid_len_dev : valid_len_arg;
    // a local layer's rows from their first visible key k0: keys [k0, all_keys), as
    // emx_attention_metrics_window
    const bool local = win.window > 0 && l < (int)EMX_MAX_LAYERS && (win.local_layers[l / 32] >> (l % 32) & 1u);
    const int k0 = local && all_keys > win.window ? all_keys - win.window : 0;
    const float *ls = scores + (size_t)l * n_heads * stride + k0;  // [n_heads][stride]
    emx_am::layer_block<1>(ls, head_stats ? head_stats + (size_t)l * n_heads : nullptr, n_heads, stride,
                           all_keys - k0, out + blockIdx.x, emx_am::smem_at(sm, n_heads));
}

__global__ void attn_average_kernel(const EmxAttnLayerMetrics *per_layer, int n_layers, EmxMetrics *m) {
    emx_pdl_trigger();
    emx_pdl_wait();  // in every thread (launch.cuh's rule (b)), before the early return
    if (threadIdx.x == 0) emx_am::average(per_layer, n_layers, m);
}

}  // namespace

extern "C" size_t emx_cuda_attn_metrics_workspace_bytes(int n_layers) {
    return n_layers > 0 ? (size_t)n_layers * sizeof(EmxAttnLayerMetrics) : 0;
}

extern "C" cudaError_t emx_cuda_attn_metrics(const float *scores, const EmxSoftmaxStats *head_stats,
                                             int n_layers, int n_heads, int stride, int valid_len,
                                             const int *valid_len_dev, int layer, EmxMetrics *m,
                                             void *workspace, cudaStream_t stream) {
    return emx_cuda_attn_metrics_window(scores, head_stats, n_layers, n_heads, stride, valid_len, valid_len_dev,
                                        NULL, layer, m, workspace, stream, 0);
}

extern "C" cudaError_t emx_cuda_attn_metrics_window(const float *scores, const EmxSoftmaxStats *head_stats,
                                                    int n_layers, int n_heads, int stride, int valid_len,
                                                    const int *valid_len_dev, const EmxCudaAttnWindow *window,
                                                    int layer, EmxMetrics *m, void *workspace, cudaStream_t stream,
                                                    int pdl) {
    EmxCudaAttnWindow win;
    memset(&win, 0, sizeof win);
    if (window) win = *window;
    if (win.window < 0) return cudaErrorInvalidValue;
    if (!scores || !m || !workspace || n_layers < 1 || n_heads < 1 ||
        n_heads > EMX_CUDA_ATTN_METRICS_MAX_HEADS || (!valid_len_dev && valid_len < 1) ||
        stride < valid_len)
        return cudaErrorInvalidValue;
    int first, last;  // the layers [first, last] averaged
    if (emx_attn_layer_range(layer, n_layers, &first, &last) != 0) return cudaErrorInvalidValue;
    const int count = last - first + 1;
    EmxAttnLayerMetrics *per_layer = (EmxAttnLayerMetrics *)workspace;
    const cudaError_t e = EMX_LAUNCH(pdl, count, AM_BLOCK, 0, stream, attn_layer_kernel, scores, head_stats, first,
                                     n_heads, stride, valid_len, valid_len_dev, win, per_layer);
    if (e != cudaSuccess) return e;
    return EMX_LAUNCH(pdl, 1, 32, 0, stream, attn_average_kernel, per_layer, count, m);
}
