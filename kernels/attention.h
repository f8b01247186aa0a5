// attention.h — attention of one decoding position, or of several consecutive positions (causal
// prefill), over the KV cache (launchers of attention.cu).
//
// For every query head h (GQA: KV head h / (n_heads / n_kv_heads)):
//   S_h[t] = q_h · k_t / sqrt(head_dim),  t < n_keys (= pos + 1: the token's own key included)
// (scale and window below: Gemma 3's factor, and a local layer's last `window` keys only)
//   out_h  = Σ_t softmax(S_h)[t] · v_t
// and, when asked, the raw scores S_h (the rows the attention metrics read) and the per-head
// softmax statistics (metrics.h's EmxSoftmaxStats: entropy and varentropy of each head for free).
// The CPU twin is emx_attention_head (runtime/cpu/cpu_ops.h); the cache layout is the CPU's:
// [ctx][n_kv_heads][head_dim] per layer, f32, or f16 (same layout, half the bytes), the current
// position's key and value already written (kernels/rope.h's emx_cuda_rope_kv does that).
// Which kernel: SPLIT_GQA for speed (SPLIT when a group exceeds 8 heads). To read the idea
// first: attention_naive.cu (naive.h's emx_cuda_attention_naive: the formula above with one
// block per head and shape arguments only, f32 cache, none of the extensions below).
//
// Two extensions, both off when their fields are zero (a zero-initialised EmxAttentionArgs is
// the single-query, contiguous-cache call):
//   split key storage (tail_k/tail_v): keys from tail_start on are read from a second buffer
//     with its own row stride — the agent pool's lookahead branches, whose rows after the shared
//     prefix are interleaved (row j of branch b at tail + (j·n_branches + b)·kv_dim). The result
//     is bitwise the one of a contiguous cache holding the same keys.
//   several query rows (n_rows > 1): rows at consecutive positions, row r attending keys
//     0 .. n_keys - n_rows + r (causal), in one launch (plus the combine). Each row's result is
//     bitwise the one of that row run alone with n_keys = n_keys - n_rows + r + 1.
//   branch rows (n_rows > 1 with a tail and tail_branch_stride > 0): the rows are branches at the
//     same position, every row attends all n_keys keys, the shared prefix from the cache and row
//     r's own tail at tail + r · tail_branch_stride: the lookahead round's branches in one launch
//     instead of one each. Row r is bitwise the single call with its branch's tail.
// (A third, cache_rows below: the keys of a local layer kept in a ring of rows.)
// Supported combinations: every kernel × dtype with any of them, n_keys_dev included (causal rows
// then attend keys 0 .. *n_keys_dev - n_rows + r: a captured short prompt replayed at another
// position), and tail + n_keys_dev (+ tail_start_dev), branch rows included.
#ifndef ENTROPIX_KERNELS_ATTENTION_H
#define ENTROPIX_KERNELS_ATTENTION_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

// (sampler/ headers inside the C linkage block: they declare C functions)
#include "base/kv_type.h"
#include "sampler/metrics.h"

typedef enum {
    EMX_ATTN_PLAIN = 0,  // one block per head, three passes over its keys, a warp per key
    EMX_ATTN_SPLIT = 1,  // flash-decoding: blocks per (head, key chunk), then a combine kernel
    EMX_ATTN_SPLIT_GQA = 2,  // SPLIT with blocks per (KV head, key chunk): K/V read once per group
} EmxAttnKernel;

// Everything one call needs; pointers are device pointers. Fields after `workspace` are the
// extensions above: zero means today's single contiguous query.
typedef struct {
    const float *q;       // [n_rows][q_row_stride] rows of [n_heads][head_dim], the queries (after RoPE)
    const void *k_cache;  // this layer's keys   [>= n_keys][n_kv_heads][head_dim], kv_dtype
    const void *v_cache;  // this layer's values [>= n_keys][n_kv_heads][head_dim], kv_dtype
                          // (with a tail: only rows < tail_start are read)
    int kv_dtype;         // EmxKvType (base/kv_type.h): EMX_KV_F32, or EMX_KV_F16 (__half)
    int n_heads, n_kv_heads, head_dim;  // n_heads % n_kv_heads == 0, 1 <= head_dim <= 512
    int n_keys;           // keys 0..n_keys-1 are attended (pos + 1; with n_rows: by the last row);
                          // with n_keys_dev: the most
    const int *n_keys_dev;  // NULL, or a device int holding n_keys (<= n_keys, >= n_rows), read
                            // when the kernel runs: a captured CUDA graph replays with a new
                            // position
    float *out;           // [n_rows][out_row_stride] rows of [n_heads][head_dim]
    float *scores;        // NULL, or [n_heads][score_stride]: S_h[t] for t < n_keys (last row only)
    int score_stride;     // >= n_keys when scores != NULL
    EmxSoftmaxStats *head_stats;  // NULL, or [n_heads]: statistics of each row S_h (last row only)
    int keys_per_block;   // SPLIT, SPLIT_GQA: keys per chunk (0: 64; at most 2048)
    void *workspace;      // emx_cuda_attention_workspace_bytes_rows() bytes (device); PLAIN needs
                          // it only when scores == NULL or n_rows > 1 (score rows not kept go there)

    // Split key storage: NULL: every key in k_cache/v_cache. Else key t >= tail_start is read
    // from tail_k/tail_v + (t - tail_start) * tail_row_stride elements (kv_dtype), its
    // [n_kv_heads][head_dim] row as in the cache; keys t < tail_start from k_cache/v_cache.
    const void *tail_k, *tail_v;  // both or neither
    int tail_start;       // >= 0: the first key read from the tail
    int tail_row_stride;  // elements between consecutive tail rows, >= n_kv_heads * head_dim
                          // (n_branches * kv_dim for interleaved branches)
    const int *tail_start_dev;  // NULL, or a device int holding tail_start, read when the kernel
                                // runs (a captured lookahead round replays with a new prefix)

    // Several query rows at consecutive positions (causal prefill). 0 or 1: one query. n > 1
    // (<= n_keys, <= 65535): row r's query is q + r * q_row_stride, it attends keys
    // 0 .. n_keys - n_rows + r, its output goes to out + r * out_row_stride.
    int n_rows;
    int q_row_stride, out_row_stride;  // elements, >= n_heads * head_dim (0: n_heads * head_dim)

    // Branch rows: 0: the rows above are causal. > 0 (with a tail and n_rows >= 1): every row
    // attends keys 0 .. n_keys - 1, row r's tail starts r * tail_branch_stride elements after
    // tail_k / tail_v (n_kv_heads * head_dim for interleaved branches: row j of branch r at
    // tail + (j * n_branches + r) * kv_dim). n_rows may then exceed n_keys.
    int tail_branch_stride;
    // Gemma 3: the scores' factor (0: 1 / sqrt(head_dim); else S_h[t] = q_h · k_t * scale), and
    // a sliding window (0: none; else a row whose query sits at key p — p = its last key — sees
    // keys max(0, p - window + 1) .. p only: the earlier keys' scores are -inf in the kept score
    // rows, take no probability and count in no statistic). Any kernel, any of the extensions.
    float scale;
    int window;
    // A local layer's ring (runtime/kv_ring.h): 0, key t in cache row t; else the cache holds
    // cache_rows rows and key t (< tail_start) is in row t % cache_rows. Needs a window, and every
    // key a row sees still there: window + n_rows - 1 <= cache_rows (causal rows), window <=
    // cache_rows (one row, branch rows).
    int cache_rows;
} EmxAttentionArgs;

// Workspace bytes for a call of `kernel` with these sizes (n_keys: the largest to be used) and
// one query row; _rows: for n_rows query rows (it grows linearly with n_rows: a long prefill
// can be cut into calls of fewer rows, each with n_keys = its last position + 1).
size_t emx_cuda_attention_workspace_bytes(int kernel, int n_heads, int head_dim, int n_keys,
                                          int keys_per_block);
size_t emx_cuda_attention_workspace_bytes_rows(int kernel, int n_heads, int head_dim, int n_keys,
                                               int keys_per_block, int n_rows);

// Launches the attention (one or two kernels on `stream`, whatever n_rows). Returns
// cudaErrorInvalidValue on bad sizes or an unsupported combination (with a line on stderr that
// names it), else the launch status.
cudaError_t emx_cuda_attention(int kernel, const EmxAttentionArgs *a, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
