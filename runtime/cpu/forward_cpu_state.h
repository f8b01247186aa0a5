// forward_cpu_state.h — what the CPU backend's files share (not an API): the state (CpuState:
// activations, KV cache, branch tails, scratch), where a pass's rows sit (RowLayout), and the
// pass's entry points in forward_cpu.c that the branch passes (forward_cpu_branches.c) reuse.
#ifndef ENTROPIX_FORWARD_CPU_STATE_H
#define ENTROPIX_FORWARD_CPU_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "base/kv_type.h"
#include "runtime/cpu/cpu_state_size.h"
#include "runtime/forward_backend.h"
#include "runtime/kv_ring.h"

#define PASS EMX_CPU_ATTN_PASS  // queries per call of emx_attention_group_spans in attention()

typedef struct CpuState CpuState;
struct CpuState {
    EmxState base;    // first: the backend table (forward_backend.h)
    const EmxModel *m;
    int ctx;          // KV cache positions
    int n_threads;
    int max_threads;  // n_threads at creation: rows of att_tmp
    int batch_cap;    // rows of the batch buffers
    int q_dim, kv_dim;
    int kv_row;       // elements from one cache position to the next: kv_dim, or more (see cpu_state_size.c)
    // batch activations, one row per token of the chunk being run
    float *x;         // [batch_cap][dim] residual stream
    float *xb;        // [batch_cap][dim] normed input of a matmul, then a matmul's output
    float *q;         // [batch_cap][q_dim]
    float *att;       // [batch_cap][q_dim] attention output, heads concatenated
    float *hb, *hb2;  // [batch_cap][hidden_dim] gate, up
    int8_t *xq;       // [batch_cap][max(dim, q_dim, hidden_dim)] int8 activations (q8/q4)
    float *xd;        // [batch_cap][max(...)/32] their group scales
    float *xs;        // [batch_cap][max(...)/32] their group sums times scale (q4 offset)
    float *rope_cos, *rope_sin; // [batch_cap][head_dim/2] angles of each row's position
    double *inv_freq; // [head_dim/2] (the global layers': rope_linear_global applied)
    // A model with local layers (ext.sliding_window): their own RoPE base, and its angles per row
    double *inv_freq_local;               // [head_dim/2], else NULL
    float *rope_cos_local, *rope_sin_local; // [batch_cap][head_dim/2], else NULL
    float *att_tmp;   // [n_threads][PASS][ctx] softmax scratch: a softmax row per query of a call
    // KV cache: f32 (exact; EMX_KV_AUTO), or f16 (EMX_KV_F16: half the memory and half the
    // bytes attention reads per step, which dominate at long contexts for small models). An f16
    // cache gets k and v rounded to nearest even as they are written, widened exactly as they are
    // read; q, scores, softmax and the output stay f32.
    EmxKvType kv_type;  // of the cache and the branch tails: EMX_KV_F32 (floats) or EMX_KV_F16 (uint16_t halves)
    size_t esz;         // bytes per element of the cache and the tails: 4 or 2
    void *key_cache;    // per layer [layers[l].rows][kv_row], the first kv_dim of a row in use (cache_at)
    void *value_cache;  // the same
    // Where each layer's rows are: ctx of them, or a local layer's ring (runtime/kv_ring.h:
    // position p in row p % rows); what the rings still hold.
    EmxKvLayer *layers;  // [n_layers]
    EmxKvRing ring;
    float *kv_tmp;      // f16 only: [2][batch_cap][kv_dim] a pass's k, then v, in f32 before rounding
    float *kv_f32;      // f16 or padded rows: [2][n_layers][ctx][kv_dim] emx_state_kv_cache's copies
    float *att_scores;  // [n_layers][n_heads][ctx] pre-softmax scores of the last position
    int last_pos;       // position of the latest call's last token (-1 before any)
    float *logits;      // [vocab]
    // Where the latest call's values first became NaN or Inf: NONFINITE_NONE, NONFINITE_EMBEDDING,
    // a layer, or n_layers for the classifier (emx_state_nonfinite).
    int nonfinite_at;
    char nonfinite_desc[48];
    // Branch tails (emx_state_branches_reserve): the KV rows of up to br_max continuations of
    // the sequence, br_tail positions each. Step j of every branch is one contiguous block of
    // rows, so a batched pass writes its k and v straight from the matmul, as for the cache. The
    // cache's element type: a commit is a plain copy.
    int br_max, br_tail;
    void *br_key;       // [n_layers][br_tail][br_max][kv_dim]
    void *br_value;     // [n_layers][br_tail][br_max][kv_dim]
    // Scratch of a multi-state batch this state leads (emx_forward_multi), grown on demand: the
    // rows' k and v before they go to their own states' caches, and the rows' logits.
    int mx_rows;
    float *mx_kv;       // [2][mx_rows][kv_dim] keys, then values
    float *mx_logits;   // [mx_rows][vocab]
    const char *why;    // the latest failed call's reason (cpu_error)
};

// Where a batched pass's rows sit. A sequence: row i is the token at position pos + i and
// attends to cache positions 0..pos+i. Branches: row b is branch b's token at position
// prefix + step; it attends to the shared cache 0..prefix-1, then its own tail 0..step.
// Several states (states != NULL): row i is states[i]'s token at position at[i]; its k and v
// go to states[i]'s cache, it attends to that cache 0..at[i], its scores go to states[i].
// The pass runs in the scratch of the state it is called on (the first one).
typedef struct {
    int prefix, step;   // branches only
    int is_branches;
    EmxState *const *states;  // several states only: [n]
    const int *at;            // several states only: [n] positions
} RowLayout;

enum { NONFINITE_NONE = -2, NONFINITE_EMBEDDING = -1 };

// Element i of s's KV cache or branch tails (base: one of them), whatever their element type.
static inline void *kv_at(const CpuState *s, void *base, size_t i) { return (char *)base + i * s->esz; }
// The element index of (layer, pos)'s row in s's key or value cache.
static inline size_t cache_at(const CpuState *s, int layer, int pos) {
    return (size_t)emx_kv_row(s->layers[layer], pos) * s->kv_row;
}
// 1 when layer's cache is a ring shorter than the context.
static inline int layer_is_ring(const CpuState *s, int layer) { return s->layers[layer].rows < s->ctx; }

// forward_cpu.c: tokens[0..n) (n <= batch_cap) through every layer, rows placed by `rows`,
// leaving the final hidden states in s->x; the final norm and classifier of rows
// [first, first + n) of s->x into out [n][vocab]; rows pos..pos+n-1 of the cache to or from buf
// (keys then values, each [n_layers][n][kv_dim] f32; 0, or -1 on a bad range).
void cpu_run_layers(CpuState *s, const int *tokens, int n, int pos, const RowLayout *rows, int record_last);
void cpu_classify(CpuState *s, int first, int n, float *out);
// forward_cpu_attention.c: the attention of layer's rows (laid out by `rows`) over their keys,
// into s->att; record_last: the last row's scores into s->att_scores (several states: every row's
// into its own state's).
void cpu_attention(CpuState *s, int layer, int n, int pos, const RowLayout *rows, int record_last);
// Row i's state of a pass over several states.
static inline CpuState *row_state(const RowLayout *rows, int i) { return (CpuState *)rows->states[i]; }
// to_cache: KV_ROWS_READ (refused, -1 with s->why, for rows a ring no longer holds),
// KV_ROWS_WRITE, or KV_ROWS_READ_HELD (those rows read as zeros: emx_state_kv_cache).
enum { KV_ROWS_READ = 0, KV_ROWS_WRITE = 1, KV_ROWS_READ_HELD = 2 };
int cpu_kv_rows_copy(CpuState *s, int pos, int n, float *buf, int to_cache);

// forward_cpu_branches.c: the CPU's table for the agent pool and the branching decoder.
extern const struct EmxPoolBackend emx_cpu_pool_backend;

#endif
