// bandwidth_model.h — a lower bound on one decode step's time on a named GPU: per kernel of the
// CUDA decode graph (runtime/cuda/forward_cuda_step.c), the bytes it must move (weights as
// stored, the KV cache it reads, the activations it reads and writes), and what those bytes cost
// at the device's peak memory bandwidth. A bound, not a measurement: a real step also pays for
// launches, latency and imperfect bandwidth, so a measurement is read against it ("x% of the
// bound"). Printed by `bench speed` when the step runs under the CUDA emulator, and on any
// device with --bandwidth-model.
#ifndef ENTROPIX_BENCH_BANDWIDTH_MODEL_H
#define ENTROPIX_BENCH_BANDWIDTH_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "runtime/forward.h"
#include "runtime/model.h"

enum { EMX_BW_MAX_ROWS = 16 };

// One kernel kind of the step; per-layer kernels are summed over the layers (n_layers > 0).
typedef struct {
    const char *kernel;
    EmxPhase phase;         // the decode step's phase it belongs to (forward.h: a timeline's row)
    uint32_t n_layers;      // 0: once per step; else the row is the sum over that many layers
    uint64_t weight_bytes;  // tensors' stored bytes (q8/q4 quants with their f16 scales)
    uint64_t kv_bytes;      // KV cache read (attention) or written (rope + KV write)
    uint64_t act_bytes;     // activations read + written, counted as f32 vectors
} EmxBwRow;

typedef struct {
    int pos;                // the step's position: it attends pos + 1 keys
    int kv_elem_bytes;      // the KV cache's element: 4 (f32) or 2 (f16)
    EmxBwRow rows[EMX_BW_MAX_ROWS];
    int n_rows;
    uint64_t weight_bytes, kv_bytes, act_bytes, total_bytes;  // sums of the rows
} EmxBwModel;

// The model of one decode step at position pos (>= 0) of m with a KV cache of kv_elem_bytes per
// element (4: f32, 2: f16; anything else counts as 4): a pure function of m's config and tensors.
// weight_bytes equals emx_model_weight_bytes_per_token(m).
void emx_bw_model(const EmxModel *m, int pos, int kv_elem_bytes, EmxBwModel *out);

// The KV cache bytes one position adds to what a step reads: n_layers x kv_dim x 2 (K, V) x
// kv_elem_bytes.
uint64_t emx_bw_kv_bytes_per_position(const EmxConfig *c, int kv_elem_bytes);

typedef struct {
    const char *name;   // the --model-device name
    const char *label;  // printed
    double peak_gbps;   // the vendor's peak memory bandwidth, GB/s (1e9 B/s)
} EmxBwDevice;

// The named device, or NULL; emx_bw_device_names lists the names ("h100-sxm, h100-pcie, ...").
const EmxBwDevice *emx_bw_device(const char *name);
void emx_bw_device_names(char *buf, size_t cap);

// The position whose step a tgN run at depth is modelled by: positions depth..depth+N-1 make bytes
// linear in the position, so the mean step is the one at depth + (N - 1) / 2; rounded down, its
// bound stays below the run's mean.
int emx_bw_mean_pos(int depth, int n_gen);

// The bytes of the rows of phase p.
uint64_t emx_bw_phase_bytes(const EmxBwModel *bm, EmxPhase p);

// Microseconds that bytes take at gbps: bytes / (gbps x 1e9) x 1e6.
double emx_bw_us(uint64_t bytes, double gbps);

// The block `bench speed` prints: a labelled heading, a row per kernel (bytes per step, µs at
// peak), the totals, the bound in µs and the tok/s ceiling it implies. what: how pos was chosen.
void emx_bw_model_print(FILE *f, const EmxBwModel *bm, const EmxBwDevice *d, const char *what);

#endif
