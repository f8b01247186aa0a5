// cpu_state_size.h — what one CPU state (forward_cpu.c) allocates, computed in one place: the
// state takes its buffers' sizes from here, and the memory checks made before a run (./run, the
// agent pool, the server's branching decoder) sum the same sizes before anything is allocated.
#ifndef ENTROPIX_CPU_STATE_SIZE_H
#define ENTROPIX_CPU_STATE_SIZE_H

#include <stddef.h>
#include <stdint.h>

#include "base/kv_type.h"
#include "runtime/model.h"

#define EMX_CPU_MAX_BATCH 256  // rows per batched pass; longer prompts run in chunks of this
#define EMX_CPU_ATTN_PASS 32   // queries per call of emx_attention_group_spans (forward_cpu.c)

// One CPU state's shape, and the bytes of each of its buffers (named as in forward_cpu.c's
// CpuState; a pair of buffers of one size is one field).
typedef struct {
    int batch_cap;      // rows of the batch buffers: ctx, at most EMX_CPU_MAX_BATCH
    int q_dim, kv_dim;  // n_heads * head_dim, n_kv_heads * head_dim
    int kv_row;         // elements from one cache position to the next: kv_dim, or padded (.c)
    size_t esz;         // bytes of a cache element: 4 (f32) or 2 (f16)
    size_t x;           // x, xb: [batch_cap][dim] floats
    size_t q;           // q, att: [batch_cap][q_dim] floats
    size_t hb;          // hb, hb2: [batch_cap][hidden_dim] floats
    size_t xq;          // [batch_cap][max(dim, q_dim, hidden_dim)] int8
    size_t xd;          // xd, xs: [batch_cap][max(...)/32 + 1] floats
    size_t rope;        // rope_cos, rope_sin: [batch_cap][head_dim/2] floats
    size_t inv_freq;    // [head_dim/2] doubles
    size_t att_tmp;     // [n_threads][EMX_CPU_ATTN_PASS][ctx] floats: softmax scratch
    size_t kv_cache;    // key_cache, value_cache: [n_layers][ctx][kv_row] elements of esz bytes
    size_t kv_tmp;      // [2][batch_cap][kv_dim] floats: an f16 cache's rows before rounding
    size_t att_scores;  // [n_layers][n_heads][ctx] floats
    size_t logits;      // [vocab_size] floats
} EmxCpuStateSizes;

// The sizes of a state of model c at ctx positions (>= 1) run by n_threads threads (>= 1), with an
// f16 KV cache (cache EMX_KV_F16) or an f32 one (anything else: AUTO is f32 on the CPU).
void emx_cpu_state_sizes(const EmxConfig *c, int ctx, int n_threads, EmxKvType cache, EmxCpuStateSizes *z);

// Bytes one CPU state of model c at ctx positions allocates when created: every buffer above
// (the f16 cache's kv_tmp counted whatever the cache, so the figure is an upper bound by that
// much for an f32 cache and an f32 state exceeds an f16 one by exactly the caches' difference).
// cache: EMX_KV_F16, else an f32 cache (what EMX_KV_AUTO is on the CPU). kv_bytes
// (optional): the KV cache part, keys and values.
uint64_t emx_cpu_state_bytes(const EmxConfig *c, int ctx, int n_threads, EmxKvType cache, uint64_t *kv_bytes);

// Sliding-window models (EmxConfigExt): the cache rows of layer l in a state of ctx positions.
// A global layer keeps ctx rows; a local one a ring of window + batch_cap - 1 rows (at most ctx),
// position p in row p % rows: a query sees its last `window` keys, and a prefill chunk of up to
// batch_cap rows writes its keys before its first row reads the oldest of its window, so the
// ring must hold both.
int emx_cpu_layer_rows(const EmxConfigExt *e, uint32_t layer, int ctx);
// The bytes of a CPU state's KV cache (keys and values) for model m at ctx positions: the local
// layers' rings counted as allocated (emx_cpu_state_bytes counts ctx rows for every layer, an
// upper bound by the rings' savings).
uint64_t emx_cpu_kv_cache_bytes(const EmxModel *m, int ctx, EmxKvType cache);

#endif
