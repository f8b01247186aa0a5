// matvec_fused.h — the decode step's matvecs with their input made in the kernel's prologue
// (kernels/matvec_fused.cu): one activation row, read from global memory by every block, made
// into the matrices' input in shared memory (the RMSNorm of x and/or the int8 groups; for Gemma 3
// also the sandwich norm of the previous block's output and the residual add), then the fast
// matvec's rows. The separate norm, add or quantisation launches before each matvec go away.
#ifndef ENTROPIX_KERNELS_MATVEC_FUSED_H
#define ENTROPIX_KERNELS_MATVEC_FUSED_H

#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/matvec.h"
#include "kernels/weights.h"

#ifdef __cplusplus
extern "C" {
#endif

// The most input rows one fused call takes (EmxFusedInput.rows): a server's eight slots. Each row
// is one more accumulator a lane (two for a GLU pair); at 16 rows ptxas (CUDA 13) spilled 8-12
// bytes in a fifth of the kernels.
#define EMX_FUSED_MAX_ROWS 8

// The input row of a fused matvec, device pointers (or its rows: see rows).
//   x      [cols] f32: the row as it is in memory (the residual stream x, att or hb)
//   norm_w [cols]: RMSNorm weight, or NULL: x is the input as it is. With it the input is
//          x / sqrt(mean(x²) + eps) * norm_w, bitwise emx_cuda_rmsnorm's (its sum of squares in
//          the order of that kernel's block)
// Quantised weights (q8/q4/q4_1/q4_1f) read the input's int8 groups, made as emx_cuda_quantize_acts
// makes them (bitwise); float weights (f32/f16/bf16) read it as f32.
//   pdl    launch with programmatic dependent launch (kernels/launch.cuh): the kernel may start
//          before the kernel before it on the stream ends (it waits for it before reading x);
//          0 after a copy or memset, or before sm_90
//   rows   0 or 1: one row; up to EMX_FUSED_MAX_ROWS: x holds that many rows [rows][cols] (the
//          rows of several sequences in one step), each normed and quantised on its own, and each
//          output (and the sandwich norm's delta and x_out) holds as many [rows][its width]: row b's
//          results bitwise a call with row b alone; every weight row is read once for all of them
typedef struct {
    const float *x;
    const float *norm_w;
    float eps;
    int pdl;
    int rows;
} EmxFusedInput;

// The sandwich norm before a fused matvec's input (Gemma 3: a block's output is normed before the
// residual add), device pointers [cols]. With it the input is RMSNorm(h) * norm_w (EmxFusedInput's
// norm_w, required) of the residual row
//   h = x + delta / sqrt(mean(delta²) + eps) * post_w
// which the first block writes to x_out: bitwise emx_cuda_rmsnorm(delta, delta, post_w) then
// emx_cuda_residual_rmsnorm(x, delta, norm_w) (x there is updated in place, h here goes to x_out;
// the other blocks read x and delta while it is written, so x_out is neither).
//   delta  the block's output not yet normed (Wo att, W_down hb)
//   post_w its norm's weight (post_attention_norm, post_feedforward_norm)
typedef struct {
    const float *delta;
    const float *post_w;
    float *x_out;
} EmxFusedResidual;

// Whether the fused matvecs take matrices of this dtype and width for `rows` input rows (1 to
// EMX_FUSED_MAX_ROWS): cols % 32 == 0 (the fast matvec's rows) and the input rows in 48 KiB of
// shared memory (int8 groups: 1.25 bytes a column a row; f32: 4). Otherwise the caller keeps the
// separate launches.
int emx_cuda_matvec_fused_fits(uint32_t dtype, int cols, int rows);

// Whether a fused matvec with the sandwich norm (EmxFusedResidual) takes matrices of this dtype and
// width: emx_cuda_matvec_fused_fits, and the residual rows [rows][cols] f32 in shared memory too
// (beside quantised weights' int8 groups: 5.25 bytes a column a row in 48 KiB).
int emx_cuda_matvec_fused_residual_fits(uint32_t dtype, int cols, int rows);

// out[i][r] (+)= W_i[r] · input for i < n (1..EMX_MATVEC_SET_MAX matrices of one dtype and width:
// q, k, v; or wo, w_down, the classifier alone), each out[i] [w[i]->rows]. accumulate != 0 adds
// to out (the residual add). Bitwise emx_cuda_rmsnorm(_quantize) / emx_cuda_quantize_acts followed
// by emx_cuda_matvec(_set) (EMX_MATVEC_FAST, one row). Bad arguments (a matrix the fast matvec or
// emx_cuda_matvec_fused_fits refuses, mixed dtypes or widths, out == x with accumulate... ):
// cudaErrorInvalidValue before launching.
cudaError_t emx_cuda_matvec_fused(const EmxFusedInput *in, const EmxCudaWeight *const *w, float *const *out, int n,
                                  int accumulate, cudaStream_t stream);

// The gate/up pair with SwiGLU: out[r] = silu(gate_r · input) * (up_r · input), bitwise the norm
// (or quantisation) then emx_cuda_matvec_swiglu (EMX_MATVEC_FAST, one row). out [gate->rows].
cudaError_t emx_cuda_matvec_fused_swiglu(const EmxFusedInput *in, const EmxCudaWeight *gate, const EmxCudaWeight *up,
                                         float *out, cudaStream_t stream);

// emx_cuda_matvec_fused (accumulate 0) with the input made from the sandwich norm's residual row
// (res), which goes to res->x_out.
cudaError_t emx_cuda_matvec_fused_residual(const EmxFusedInput *in, const EmxFusedResidual *res,
                                           const EmxCudaWeight *const *w, float *const *out, int n,
                                           cudaStream_t stream);

// The gate/up pair with GeGLU: out[r] = gelu_tanh(gate_r · input) * (up_r · input), bitwise the
// norm (and res's residual add when res is not NULL; quantisation) then the gate and up matvecs
// (EMX_MATVEC_FAST, one row) and emx_cuda_geglu. out [gate->rows]. in->norm_w is required (the
// FFN norm: the pair never reads x as it is).
cudaError_t emx_cuda_matvec_fused_geglu(const EmxFusedInput *in, const EmxFusedResidual *res, const EmxCudaWeight *gate,
                                        const EmxCudaWeight *up, float *out, cudaStream_t stream);

// The residual row alone, res->x_out[cols] = h (in->x, in->eps, in->pdl and in->rows: then
// [rows][cols]; no matvec): one block, after the last layer whose residual add would otherwise be
// the next layer's prologue.
cudaError_t emx_cuda_fused_residual(const EmxFusedInput *in, const EmxFusedResidual *res, int cols,
                                    cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
