// logits_metrics.h — entropy, varentropy, log-sum-exp and argmax of the logits in one pass over
// them (launchers of logits_metrics.cu). The CPU twin is emx_logits_metrics (sampler/metrics.h)
// and emx_sample_argmax (sampler/sample.h).
#ifndef ENTROPIX_KERNELS_LOGITS_METRICS_H
#define ENTROPIX_KERNELS_LOGITS_METRICS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

// (sampler/ headers inside the C linkage block: they declare C functions)
#include "sampler/metrics.h"

// Workspace bytes for a vocabulary of n.
size_t emx_cuda_logits_metrics_workspace_bytes(int n);

// From logits[0..n) (device), writes to device memory:
//   m->logits_entropy_bits, m->logits_varentropy_bits2, m->logits_lse_nats (other fields
//   untouched; the same special cases as emx_logits_metrics: -inf/NaN take no mass, +inf share
//   it, nothing left gives H = V = 0 and lse = -inf);
//   *argmax (if not NULL): emx_sample_argmax's answer (lowest id among equal maxima, -1 if none);
//   *n_valid (if not NULL): emx_logits_metrics' return value (logits that are not -inf/NaN).
// Two kernels: partial statistics per chunk of 2048 logits, then one block merges them.
// pdl: both kernels launched with programmatic dependent launch (kernels/launch.cuh: the kernel
// before them on the stream must be a kernel, not a copy or memset: the decode step's tail, after
// the classifier); 0: plain launches.
cudaError_t emx_cuda_logits_metrics(const float *logits, int n, EmxMetrics *m, int *argmax,
                                    int *n_valid, void *workspace, cudaStream_t stream, int pdl);

// emx_logit_pair (sampler/metrics.h) on the device: logits[id_a], logits[id_b], the largest
// finite logit and the sum of exp(l - max) over the finite ones (double), written to *out
// (device). The max is exact; the sum is the CPU's up to the order of its additions (~1e-15
// relative). One block (the critic reads it once per judgment). pdl: as emx_cuda_logits_metrics'
// (the pass's tail, after the classifier). Invalid sizes or ids: cudaErrorInvalidValue.
cudaError_t emx_cuda_logit_pair(const float *logits, int n, int id_a, int id_b, EmxLogitPair *out,
                                cudaStream_t stream, int pdl);

#ifdef __cplusplus
}
#endif

#endif
