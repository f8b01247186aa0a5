// attention_decode.h — the decode step's attention in one kernel, with what came before it in a
// kernel of its own (kernels/rope.cu's rope_kv) done inside: Qwen2's q/k/v biases, Qwen3's
// per-head q/k RMSNorm, RoPE and the write of the new key and value into the KV cache; and
// SPLIT's combine, which followed it, done by the last block of each KV head
// (kernels/attention_decode.cu). For one row, or for several rows each over its own cache.
#ifndef ENTROPIX_KERNELS_ATTENTION_DECODE_H
#define ENTROPIX_KERNELS_ATTENTION_DECODE_H

#include <cuda_runtime.h>

#include "kernels/attention.h"

#ifdef __cplusplus
extern "C" {
#endif

// One query row at position *pos attending keys 0..*pos (a sliding window: the last `window` of
// them). attn: as emx_cuda_attention's (scores, head_stats, workspace, scale, window, n_keys or
// n_keys_dev, which must be *pos + 1 when the kernel runs), except that attn.q is the q row as
// the matvec left it (before bias, norm and RoPE), the cache row *pos is written here, and one
// query row only (n_rows 0 or 1, no tail, no branch rows). The rope fields are EmxRopeArgs's
// (kernels/rope.h) for one row: k and v the new key and value as the matvecs left them.
// Bitwise emx_cuda_rope_kv then emx_cuda_attention(EMX_ATTN_SPLIT_GQA): outputs, score rows,
// statistics and the cache row. attn.q is not changed (rope_kv rotates q in place).
typedef struct {
    EmxAttentionArgs attn;
    const float *k, *v;        // [n_kv_heads * head_dim]
    const int *pos;            // device int
    const double *inv_freq;    // [head_dim / 2]
    const float *q_norm, *k_norm;  // [head_dim] or NULL (both or neither)
    const float *bq, *bk, *bv; // or NULL (all three or none)
    float eps;
    int style;                 // enum emx_rope_style
    unsigned *arrivals;        // [n_kv_heads] device counters, zero before the first call; each
                               // call leaves them zero (a captured graph replays with them)
    int pdl;                   // launched with programmatic dependent launch (kernels/launch.cuh)
} EmxAttnDecodeArgs;

// Whether the fused kernel takes this shape (a group of at most 8 query heads per KV head, an
// even head_dim up to 512, its shared memory within 48 KiB); else the caller keeps rope_kv and
// emx_cuda_attention. keys_per_block as EmxAttentionArgs's (0: the default).
int emx_cuda_attention_decode_fits(int n_heads, int n_kv_heads, int head_dim, int keys_per_block, int kv_dtype);

// One launch: a block per KV head and chunk of keys; the last of a KV head's blocks to finish
// combines its heads' chunks. Bad arguments: cudaErrorInvalidValue (a line on stderr naming it),
// nothing launched.
cudaError_t emx_cuda_attention_decode(const EmxAttnDecodeArgs *a, cudaStream_t stream);

// One row of emx_cuda_attention_decode_rows: its own state's buffers as a state lays them out
// (layer l's score rows and statistics lie l layers after layer 0's, its cache rows where
// `layers` says) and position.
typedef struct {
    void *k_cache, *v_cache;      // rows of n_kv_heads * head_dim of the call's kv_dtype, `layers` says where
    const EmxKvLayer *layers;     // [n_layers] (device) each layer's rows in the caches (base/kv_type.h):
                                  // ctx of them, or a local layer's ring (fewer: position p in row p % rows)
    float *scores;                // [n_layers][n_heads][ctx], or NULL: no score rows nor statistics
    EmxSoftmaxStats *head_stats;  // [n_layers][n_heads] (with scores), or NULL
    void *workspace;              // emx_cuda_attention_workspace_bytes(EMX_ATTN_SPLIT_GQA, n_heads,
                                  // head_dim, ctx, keys_per_block) bytes at least
    unsigned *arrivals;           // [n_kv_heads] counters, as EmxAttnDecodeArgs's (one set a row)
    int ctx;                      // the cache's rows
    int pos;                      // the row's position: keys 0..pos attended, row pos written (< ctx)
} EmxAttnDecodeRow;

// n_rows query rows in one launch (grid z: the row), row r over its own cache (rows[r], a device
// table) at layer `layer`: row r's outputs, score rows, statistics and cache row are bitwise
// emx_cuda_attention_decode's for that row alone. From d: the shape (n_heads, n_kv_heads,
// head_dim, kv_dtype, keys_per_block, scale, window), attn.q and attn.out ([n_rows][n_heads *
// head_dim]), k and v ([n_rows][n_kv_heads * head_dim]), the rope fields, and attn.n_keys: at
// least every row's pos + 1 (the grid's width), and pdl. attn's cache, score, statistics,
// workspace and n_keys_dev fields, pos and arrivals are the rows'. Bad arguments as above.
cudaError_t emx_cuda_attention_decode_rows(const EmxAttnDecodeArgs *d, const EmxAttnDecodeRow *rows, int n_rows,
                                           int layer, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
