// forward_cuda_pass.h — what the CUDA backend's pass files share (not an API): where a pass's
// rows sit, the layers and classifier (forward_cuda_layers.c) and a step's end
// (forward_cuda_tail.c).
#ifndef EMX_FORWARD_CUDA_PASS_H
#define EMX_FORWARD_CUDA_PASS_H

#include "kernels/attention_decode.h"
#include "kernels/rope.h"
#include "runtime/cuda/forward_cuda_state.h"

// Where a pass's rows sit (as forward_cpu.c's RowLayout): a sequence's rows at pos.. attend
// keys 0..pos+i; branch rows all sit at prefix+step and attend the prefix, then their tail.
// gemm: a long prompt's chunk (prefill_gemm): projections through GEMMs, tokens and positions
// from gin_d.
// multi: emx_forward_multi's rows, row i states[i]'s token at multi_pos[i] (its k and v go to
// states[i]'s cache, it attends that cache, its score rows go to states[i]).
// in: the rows' input on the device (NULL: in_d); a lookahead round's branch passes have their
// own (bin_d), and with device_positions they read the key count and the tails' start there.
typedef struct {
    int is_branches, prefix, step;
    int device_positions;  // decode graph: the key count is read from in->n_keys
    int gemm;
    CudaState *const *multi;  // NULL: every row is this state's
    const int *multi_pos;     // [n] host copy of the rows' positions
    const StepInput *in;
} Rows;

// The pieces of a layer (forward_cuda_layers.c), which the fused decode layer
// (forward_cuda_fused.c) falls back on for what it does not fuse. n rows; quantised: in's int8
// groups are made already.
const StepInput *cuda_input_of(const CudaState *s, const Rows *r);
int cuda_matvec(CudaState *s, const EmxCudaWeight *w, const float *in, int n, float *out, int accumulate, int quantised);
int cuda_norm_for(CudaState *s, const float *x, const float *norm_w, int n, const EmxCudaWeight *w, int gemm);
int cuda_matvec_qkv(CudaState *s, const CudaLayer *L, int n);
void cuda_rope_args(const CudaState *s, int l, int n, const Rows *r, EmxRopeArgs *a);
// The decode attention's RoPE fields (k, v, the position, frequencies, norms, biases, style)
// from rope_kv's arguments a: the same rotation either kernel applies.
void cuda_decode_rope_of(const EmxRopeArgs *a, EmxAttnDecodeArgs *d);
void cuda_attention_args(const CudaState *s, int l, EmxAttentionArgs *a);
void cuda_record_scores(const CudaState *s, int l, EmxAttentionArgs *a);
int cuda_attention(CudaState *s, int l, int n, int pos, const Rows *r, int record_last);
int cuda_attn_block_out(CudaState *s, const CudaLayer *L, int n, const Rows *r);
int cuda_ffn_in(CudaState *s, const CudaLayer *L, int n, const Rows *r);
int cuda_ffn_block_out(CudaState *s, const CudaLayer *L, int n, const Rows *r);

// Several states' rows (emx_forward_multi): whether a layer's attention runs as one launch for
// all rows (the fused kernels on, a shape emx_cuda_attention_decode_rows takes, every row's cache
// of the leader's type), and that launch for layer l: RoPE, the KV writes and the attention of
// the n rows, each over its own state's cache (the table in rows_d that forward_cuda_multi.c
// fills each step).
int cuda_multi_attention_fused(const CudaState *s, int n, const Rows *r);
int cuda_multi_attention(CudaState *s, int l, int n, const Rows *r);

// cuda_run_layers with the separate kernels of each layer (forward_cuda_layers.c): every kind of
// rows; cuda_run_layers (forward_cuda_fused.c) takes the fused layer where it applies.
int cuda_run_layers_separate(CudaState *s, int n, int pos, const Rows *r, int record_last);

// Runs n rows (n <= CHUNK, in_d on the device; r->gemm: n <= gemm_rows, gin_d) through every
// layer; leaves the final hidden states, before the output norm, in x. record_last: the last
// row's score rows and statistics go where the samplers read them. (forward_cuda_fused.c: the
// fused layer for one row of a sequence, or several states' rows whose attention is one launch
// (cuda_multi_attention_fused), not a GEMM chunk or branches, and no more rows than the state's
// s->fused (EMX_CUDA_FUSED); else cuda_run_layers_separate.)
int cuda_run_layers(CudaState *s, int n, int pos, const Rows *r, int record_last);
// Output norm and classifier of rows [first, first + n) of x into logits [n][vocab] (device);
// with the fused layer on, where its input rows fit: one launch, the norm in the classifier's
// prologue.
int cuda_classify(CudaState *s, int first, int n);
// The end of a step (tail: TAIL_*) queued on the stream: the logits to the host, the choice or
// the proposals. valid_len: keys of the last position (graph: read from in_d). Called right after
// cuda_classify: its kernels take PDL when the state does (they follow the classifier).
int cuda_step_tail(CudaState *s, int tail, int valid_len, int graph);

#endif
