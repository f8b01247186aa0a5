// sampling.h — choosing the next token on the device (launchers of sampling.cu): the
// combined sampler of sampler/sample.h, and the entropix switch (sampler/entropix.h) decided and
// carried out on the device, so the host reads one token id per step.
//
// (Named sampling, not sample: sampler/sample.h is on the same include path.)
// Same decisions as the CPU: the same kept set and order (top-k → top-p → min-p → temperature,
// ties by the lower id), the same double formulas in the same order over the kept set, and the
// same uniform number u = emx_uniform_f64(seed, step, lane) (Philox, sampler/philox.h). Two
// places can still differ from the CPU, both only when a cumulative sum lands within rounding
// of its threshold: (1) top-p with top-k off normalises by Z = Σ over the whole vocabulary,
// which the device sums as a tree (per 2048-logit chunk, then over the chunks, from n = 8192)
// and the CPU in id order (~1e-16 relative apart), and with top-k off from n = 8192 on the
// nucleus and the draw's cumulative masses are exact sums (sampling_wide.cuh) where the CPU adds
// doubles in order; (2) on a GPU (not under emulation) the device's exp() may differ from the C
// library's by an ulp.
#ifndef ENTROPIX_KERNELS_SAMPLING_H
#define ENTROPIX_KERNELS_SAMPLING_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

// (sampler/ headers inside the C linkage block: they declare C functions)
#include "sampler/entropix.h"
#include "sampler/metrics.h"
#include "sampler/sample.h"

// Workspace bytes for a vocabulary of n (the kept list: id, logit, p per entry; from n = 8192
// on, also the many-block passes' partials, histograms and first batch: ~30 KB).
size_t emx_cuda_sample_workspace_bytes(int n);

// Blocks of the passes over the vocabulary at n (emx_cuda_sample, emx_cuda_entropix_step and
// the agent pool): ceil(n / 2048) from n = 8192 on (75 at 151936), else 1 (one block does all).
int emx_cuda_sample_grid(int n);
// Process-wide count of the many-block passes enqueued by emx_cuda_sample and
// emx_cuda_entropix_step (tests: the path is really taken).
unsigned long long emx_cuda_sample_many_block_launches(void);
// Process-wide count of the wide draws enqueued by emx_cuda_sample (top-k off from n = 8192 on:
// the nucleus and the draw found by a select on mass, sampling_wide.cuh).
unsigned long long emx_cuda_sample_wide_draws(void);
// The states the passes over the vocabulary leave for the one-block tail (the radix select's after
// each level and the final one: filters, the floor, z, the threshold), for tests that compare two
// ways of making them: copies at most `bytes` of them from the workspace (device) to `out` (host,
// synchronously) and returns the bytes copied; 0 below n = 8192 (no passes) or on an error.
size_t emx_cuda_sample_passes_state(const void *workspace, int n, void *out, size_t bytes);
// The wide draw's exact sum, for its tests: out[0], out[1] (device) = the low and high words of
// Σ floor(v_i·2^100) for v_i in [0, 2^24) (device [n]), added as 128-bit integers by many blocks
// and threads: the same bits in any order.
cudaError_t emx_cuda_fixed_sum(const double *values, int n, uint64_t *out, cudaStream_t stream);

// token_out (device int) = emx_sample(logits, n, params, u) with u = emx_uniform_f64(seed, step,
// lane); step is read from step_dev (device) when that is not NULL (CUDA graph replays).
// The passes over the whole vocabulary run on emx_cuda_sample_grid(n) blocks, then one block of
// 1024 threads sorts, walks and draws; with top-k off (top-p, min-p or no filter) the nucleus
// and the draw are radix selects on mass over those blocks, so a kept set of most of the
// vocabulary is never listed. pdl: every kernel launched with programmatic dependent launch
// (kernels/launch.cuh: the kernel before them on the stream must be a kernel, not a copy or
// memset: the decode step's tail); 0: plain launches. Returns cudaErrorInvalidValue on bad
// arguments.
cudaError_t emx_cuda_sample(const float *logits, int n, const EmxSamplerParams *params,
                            uint64_t seed, uint64_t step, const uint64_t *step_dev, uint32_t lane,
                            int *token_out, void *workspace, cudaStream_t stream, int pdl);
// The same decision by one block of 1024 threads alone, whatever n (the kernel lab and the tests
// compare the two; the lab's first version, one pass per kept token, is kernels/naive.h's
// emx_cuda_sample_naive).
cudaError_t emx_cuda_sample_one_block(const float *logits, int n, const EmxSamplerParams *params,
                                      uint64_t seed, uint64_t step, const uint64_t *step_dev, uint32_t lane,
                                      int *token_out, void *workspace, cudaStream_t stream);

// One entropix step on the device: d = emx_entropix_decide(metrics, profile, state, pause_token),
// carried out as emx_entropix_execute (argmax / the pause token / one draw on lane 0 / best of
// n_samples draws on lanes 0..n-1 scored by emx_entropix_score), then
// emx_entropix_state_update(state, d). Device pointers: logits [n], metrics (this step's, all
// fields), state (read and updated), token_out; decision_out and score_out may be NULL (else
// they receive the decision and the best-of-N score, NAN otherwise). The profile is passed by
// value (copied into the launch). step and pdl: as emx_cuda_sample.
cudaError_t emx_cuda_entropix_step(const float *logits, int n, const EmxMetrics *metrics,
                                   const EmxProfile *profile, EmxEntropixState *state,
                                   int pause_token, uint64_t seed, uint64_t step,
                                   const uint64_t *step_dev, int *token_out,
                                   EmxDecision *decision_out, double *score_out, void *workspace,
                                   cudaStream_t stream, int pdl);

// The next decode step's input, made on the device from the token the step before chose: a
// decode step queued before the host has read that token (runtime/forward.h,
// emx_forward_decide_ahead). at (device) holds the chosen token's position (the step before's RNG
// step: its position + 1); then *token = *chosen, *pos = *at, *row = 0, *n_keys = *at + 1 and
// *at = *at + 1 (this step's RNG step), and *saved = *state: the entropix state as this step
// finds it, which a step the host drops puts back. A chosen id outside [0, n_vocab) (a failed
// choice, which the host reports) feeds token 0 instead, so that the step reads no row outside
// the embedding; the host drops it. One thread; a plain launch (it follows a graph's start or
// the step before's copy).
cudaError_t emx_cuda_feed_choice(const int *chosen, int n_vocab, uint64_t *at, int *token, int *pos, int *row,
                                 int *n_keys, const EmxEntropixState *state, EmxEntropixState *saved,
                                 cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
