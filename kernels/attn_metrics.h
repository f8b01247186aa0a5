// attn_metrics.h — the attention metrics of one decoding step on the device (launchers of
// attn_metrics.cu): per-head entropy (mean over heads), its variance across heads, the true
// per-head varentropy, agreement and interaction strength, from the score rows the attention
// kernel wrote. The CPU twin is emx_attention_metrics (sampler/metrics.h).
#ifndef ENTROPIX_KERNELS_ATTN_METRICS_H
#define ENTROPIX_KERNELS_ATTN_METRICS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

// (sampler/ headers inside the C linkage block: they declare C functions)
#include "base/model_format.h"
#include "sampler/metrics.h"

#define EMX_CUDA_ATTN_METRICS_MAX_HEADS 256

// Workspace bytes for a model of n_layers layers.
size_t emx_cuda_attn_metrics_workspace_bytes(int n_layers);

// scores: device [n_layers][n_heads][stride], the rows S_h[k] of keys k < valid_len (entries
//   past valid_len are never read);
// head_stats: NULL, or device [n_layers][n_heads] EmxSoftmaxStats of those rows (what
//   emx_cuda_attention wrote for each layer), which saves recomputing them;
// layer: EMX_ATTN_LAYER_LAST, EMX_ATTN_LAYERS_ALL or an index, as emx_attention_metrics;
// valid_len_dev: NULL, or a device int holding valid_len (read when the kernel runs, for CUDA
//   graphs; valid_len is then not used).
// Writes m->attn_* (device; the other fields untouched). Returns cudaErrorInvalidValue on bad
// dimensions (n_heads > EMX_CUDA_ATTN_METRICS_MAX_HEADS, stride < valid_len, a bad layer).
cudaError_t emx_cuda_attn_metrics(const float *scores, const EmxSoftmaxStats *head_stats,
                                  int n_layers, int n_heads, int stride, int valid_len,
                                  const int *valid_len_dev, int layer, EmxMetrics *m,
                                  void *workspace, cudaStream_t stream);

// A sliding-window model's local layers (base/model_format.h's EmxConfigExt): window 0, none;
// else layer l is local when bit l % 32 of local_layers[l / 32] is set, and its rows are read
// from their first visible key, as the CPU's emx_attention_metrics_window with
// emx_attention_first_key: keys valid_len - window .. valid_len - 1 once valid_len > window.
typedef struct {
    int window;
    uint32_t local_layers[EMX_MAX_LAYERS / 32];
} EmxCudaAttnWindow;

// emx_cuda_attn_metrics over each layer's visible keys (window: NULL, every key); pdl != 0: both
// kernels launched with programmatic dependent launch (kernels/launch.cuh: the kernel before
// them on the stream must be a kernel, not a copy; the decode step's tail), 0: plain launches.
cudaError_t emx_cuda_attn_metrics_window(const float *scores, const EmxSoftmaxStats *head_stats,
                                         int n_layers, int n_heads, int stride, int valid_len,
                                         const int *valid_len_dev, const EmxCudaAttnWindow *window,
                                         int layer, EmxMetrics *m, void *workspace, cudaStream_t stream,
                                         int pdl);

#ifdef __cplusplus
}
#endif

#endif
