// forward_cuda_pass.h — what the CUDA backend's pass files share (not an API): where a pass's
// rows sit, the layers and classifier (forward_cuda_layers.c) and a step's end
// (forward_cuda_tail.c).
#ifndef EMX_FORWARD_CUDA_PASS_H
#define EMX_FORWARD_CUDA_PASS_H

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

// Runs n rows (n <= CHUNK, in_d on the device; r->gemm: n <= gemm_rows, gin_d) through every
// layer; leaves the final hidden states, before the output norm, in x. record_last: the last
// row's score rows and statistics go where the samplers read them.
int cuda_run_layers(CudaState *s, int n, int pos, const Rows *r, int record_last);
// Output norm and classifier of rows [first, first + n) of x into logits [n][vocab] (device).
int cuda_classify(CudaState *s, int first, int n);
// The end of a step (tail: TAIL_*) queued on the stream: the logits to the host, the choice or
// the proposals. valid_len: keys of the last position (graph: read from in_d).
int cuda_step_tail(CudaState *s, int tail, int valid_len, int graph);

#endif
