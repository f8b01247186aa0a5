// speed_report.h — the report of `bench speed`, one format for every device: "key: value"
// lines, the same keys in the same order on the CPU and on a GPU, "-" where a figure does not
// exist on that device (a CPU has no known peak bandwidth unless --peak-gbps gives one, and no
// kernel launches). Keys:
//   device:          cpu (avx512-vnni) | cuda:0 (NVIDIA H100 ...), and how decode steps run
//   model:           path (dtype weights, n layers)
//   prefill ppN:     tok/s, ms/token           (one batched pass over N tokens)
//   decode tgN:      tok/s, ms/token           (N single-token passes at positions 0..N-1)
//                    (both "ppN @ dD", "tgN @ dD" after D tokens of context: --depth)
//   bytes/token:     weights + KV cache bytes one decode step reads, averaged over the tg run
//   KV cache:        the formula of the KV part, with the model's numbers
//   achieved GB/s:   bytes/token x decode tok/s / 1e9
//   peak GB/s:       the device's peak memory bandwidth (GPU: from its properties)
//   of peak:         achieved / peak
//   launches/step:   GPU: nodes of the captured decode-step graph (kernels + copies)
//   memcpy GB/s:     CPU: the measured host copy bandwidth (read + write); GPU: "-"
//   read GB/s:       CPU: a read-only streaming pass's bandwidth, measured after each round,
//                    the median: what a decode step (every weight read once) can reach; GPU: "-"
//   of read:         achieved / read GB/s: how close decode comes to the memory's limit
//   other ...:       with a comparison runtime: its name, then per test its tok/s and ours/other
//                    (the ratio of the medians), and with several rounds the lowest and highest
//                    ratio of a round: "(rounds 0.87-1.30)", how far one round's ratio moved
#ifndef ENTROPIX_BENCH_SPEED_REPORT_H
#define ENTROPIX_BENCH_SPEED_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include "base/model_format.h"

// Bytes of KV cache one decode step reads, averaged over a run of n_gen steps at positions
// depth..depth+n_gen-1: the step at position p reads p + 1 keys and as many values, each
// n_layers x n_kv_heads x head_dim elements of elem_bytes (4: f32 cache, 2: f16), so the mean is
//   2 x n_layers x n_kv_heads x head_dim x elem_bytes x (depth + (n_gen + 1) / 2).
uint64_t emx_bench_kv_bytes_per_token(const EmxConfig *c, int n_gen, int depth, int elem_bytes);

typedef struct {
    const char *device;        // "cpu", "cuda:0"
    const char *device_desc;   // the GPU's name; the CPU's SIMD kernels
    int uses_graphs;           // GPU: decode steps replay a CUDA graph
    const char *model, *dtype;
    const EmxConfig *cfg;
    int n_prompt, n_gen;       // 0: that test was skipped
    int depth;                 // tokens of context before each test (0: an empty cache)
    int kv_elem_bytes;         // the KV cache's element: 4 (f32) or 2 (f16)
    double prefill_tps, decode_tps;
    uint64_t weight_bytes;     // per decode token (emx_model_weight_bytes_per_token)
    double peak_gbps;          // <= 0: unknown
    int launches_per_step;     // <= 0: none / unknown
    double memcpy_gbs;         // <= 0: not measured
    double read_gbs;           // <= 0: not measured
    const char *other;         // the comparison runtime's name, NULL: none
    double other_prefill_tps, other_decode_tps;  // 0: not measured
    int runs;                                   // rounds behind the medians
    const double *ours_rounds[2], *other_rounds[2];  // [prefill, decode] tok/s of each round; NULL: none
} EmxSpeedReport;

void emx_speed_report_print(FILE *f, const EmxSpeedReport *r);

#endif
