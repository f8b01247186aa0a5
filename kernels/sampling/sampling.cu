// sampling.cu — the next token chosen on the device: the combined sampler of sampler/sample.h
// and the entropix switch of sampler/entropix.h (API in sampling.h). Its device functions (the
// select, distribution and draw described below) live in sampling_device.cuh, shared with
// agent_pool.cu.
//
// One block of 1024 threads takes a decision (the tail); nothing is sorted but the few tokens kept.
// From n = 8192 on, the passes that read the whole vocabulary run first on many blocks
// (sampling_mb.cuh: one block of 256 threads per 2048 logits, 75 at n = 151936): pass 1, z
// for top-p, three levels of the radix select and the gather of the first batch; the tail then
// reads their few KB instead of the logits. (The persistent decode kernel makes the same passes
// in its launch, and its last block takes the entropix decision as this kernel does:
// entropix_block, sampling_device.cuh.) Below 8192, and as the one-block
// version the lab and the tests compare with (emx_cuda_sample_one_block), the one block does
// every pass itself:
//   1. one pass: valid count, max, argmax (block reductions). Greedy and +inf rows end here.
//   2. the kept tokens are a prefix of the rank order (logit descending, id ascending). They are
//      found in batches without sorting the vocabulary: each token gets a 64-bit rank key
//      (order-preserving bits of the logit << 32 | ~id, so ties are broken by id and every key
//      is distinct); a radix select, one 256-bin shared-memory histogram per byte of the key,
//      from the top byte down, narrows the range until the best `want` keys lie in at most
//      1024 (usually after 2-3 passes over the logits); those are gathered and bitonic-sorted in
//      shared memory (8 KB). Thread 0 walks the sorted batch applying top-k / top-p / min-p
//      exactly as sample.c (the same double expressions in the same order), and the next batch
//      continues below the last key walked until the kept set is complete (top_k = 40: one
//      batch of 40; a flat distribution under min-p: as many batches as needed).
//      min-p in logit space: p_i >= min_p·p_max ⟺ l_i >= max + ln(min_p)/s; that bound (and
//      top-p's, see `floor`) keeps the tokens that cannot be kept out of the selection, and the
//      walk decides with sample.c's exact expression.
//   3. thread 0 computes the final probabilities softmax(l/T) over the kept list and draws
//      with the inverse CDF, u = emx_uniform_f64(seed, step, lane) (the CPU's Philox numbers).
// Slow paths kept simple on purpose: with every filter off the kept list is the whole
// vocabulary in id order and thread 0 sums it serially (as the CPU, so the draw matches
// exactly; ~1 ms at 152k tokens); rows with +inf logits are also handled by thread 0.
// Bytes: 4n per pass over the logits (1 scan, 1 more with top-p alone, 2-4 per batch), 16 bytes
// per kept token written and read back. A single block streams perhaps 100-200 GB/s (an
// estimate: not measured), so at n = 151936 the one-block decision costs tens of µs in these
// passes; the many-block passes spread each read over the SMs (one launch each, ~6 in all), so
// what is left serial is the tail: a sort of <= 1024 keys and the walk. The results are the
// same bits: the selection is exact integer work whichever blocks count it, and the walk sees
// the same keys in the same order; only z (top-p alone) is summed in another order (sampling.h).
// Later batches (top-k > 1024, wide min-p nuclei) and the no-filter walk stay one-block here;
// emx_cuda_sample with top-k off (from n = 8192) takes sampling_wide.cuh's path instead, which
// lists nothing: the nucleus cut and the drawn token are found by radix selects on mass.
// With their pdl, emx_cuda_sample and emx_cuda_entropix_step launch every kernel of the decision with
// programmatic dependent launch (the decode step's tail, kernels/launch.cuh): each kernel triggers
// its successor and waits for its predecessor first, everything it reads being written in the
// step (the logits, the metrics, the passes' partials).
#include <math.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "kernels/sampling/sampling.h"
#include "kernels/sampling/sampling_mb.cuh"
#include "kernels/sampling/sampling_wide.cuh"

extern "C" {
#include "sampler/philox.h"
}

namespace {

__global__ void __launch_bounds__(SB, 1)
sample_kernel(const float *__restrict__ logits, int n, EmxSamplerParams sp, u64 seed, u64 step,
              const u64 *step_dev, unsigned lane, int *token_out, KeptList kl, MbRow mb) {
    emx_pdl_trigger();
    emx_pdl_wait();
    const Smem sm = block_smem();
    const int m = distribution_block(logits, n, sp, sm, kl, mb);
    if (threadIdx.x == 0) {
        const u64 st = step_dev ? *step_dev : step;
        *token_out = draw(kl, m, emx_uniform_f64(seed, st, lane));
    }
}

__global__ void __launch_bounds__(SB, 1)
entropix_kernel(const float *__restrict__ logits, int n, const EmxMetrics *metrics, EmxProfile prof,
                EmxEntropixState *state, int pause_token, u64 seed, u64 step, const u64 *step_dev, EntropixOut out,
                KeptList kl, MbRow mb) {
    emx_pdl_trigger();
    emx_pdl_wait();  // the metrics and the passes' partials; the state was written by the previous step
    entropix_block(logits, n, metrics, &prof, state, pause_token, seed, step_dev ? *step_dev : step, block_smem(), kl,
                   mb, out);
}

// The wide draw's workspace, after the kept list and the many-block passes' (sample_ws_passes).
WideWs wide_ws(void *ws, int n) { return wide_ws_at((char *)ws + kept_bytes(n) + mb_ws_bytes(n, 1)); }

cudaError_t sample_launch(const float *logits, int n, const EmxSamplerParams *params, uint64_t seed, uint64_t step,
                          const uint64_t *step_dev, uint32_t lane, int *token_out, void *workspace,
                          cudaStream_t stream, bool many, bool pdl) {
    if (!logits || n < 1 || !params || !token_out || !workspace) return cudaErrorInvalidValue;
    MbWs w = sample_ws_passes(workspace, n);
    if (!many) w.G = 0;
    if (w.G > 0) {
        const EmxSamplerParams sp = *params;  // the tail's branches: greedy, or no filter at all
        const bool greedy = !(sp.temperature > 0.0f) || sp.top_k == 1;
        if (!greedy && sp.top_k <= 0) {  // top-k off: the kept set may be most of the vocabulary
            const WideArgs a = {sp, (u64)seed, (u64)step, (const u64 *)step_dev, lane};
            return wide_launch(logits, n, a, w, wide_ws(workspace, n), token_out, kept_list(workspace, n), stream, pdl);
        }
        const bool select = !greedy && (sp.top_k > 0 || sp.top_p < 1.0f || sp.min_p > 0.0f);
        ParamSrc ps = {};
        ps.kind = PS_FIXED;
        ps.sp = sp;
        const cudaError_t e = mb_launch(logits, n, ps, select, sp.top_p < 1.0f, w, stream, pdl);
        if (e != cudaSuccess) return e;
    }
    return EMX_LAUNCH(pdl, 1, SB, 0, stream, sample_kernel, logits, n, *params, (u64)seed, (u64)step,
                      (const u64 *)step_dev, lane, token_out, kept_list(workspace, n), mb_row(w, 0));
}

}  // namespace

extern "C" size_t emx_cuda_sample_workspace_bytes(int n) {
    if (n < 1) return 0;
    return kept_bytes(n) + mb_ws_bytes(n, 1) + wide_ws_bytes(n);
}

extern "C" int emx_cuda_sample_grid(int n) { return n >= 1 && mb_chunks(n) > 0 ? mb_chunks(n) : 1; }

extern "C" unsigned long long emx_cuda_sample_many_block_launches(void) { return mb_passes_launched; }

extern "C" unsigned long long emx_cuda_sample_wide_draws(void) { return wide_draws_launched; }

extern "C" size_t emx_cuda_sample_passes_state(const void *workspace, int n, void *out, size_t bytes) {
    if (!workspace || n < 1 || mb_chunks(n) == 0 || !out) return 0;
    const MbWs w = sample_ws_passes((void *)workspace, n);
    const size_t have = (size_t)(MB_LEVELS + 1) * sizeof(MbState), copy = bytes < have ? bytes : have;
    return cudaMemcpy(out, w.st, copy, cudaMemcpyDeviceToHost) == cudaSuccess ? copy : 0;
}

extern "C" cudaError_t emx_cuda_fixed_sum(const double *values, int n, uint64_t *out, cudaStream_t stream) {
    if (!values || n < 0 || !out) return cudaErrorInvalidValue;
    fx_zero_kernel<<<1, 1, 0, stream>>>((u64 *)out);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess || n == 0) return e;
    fx_sum_kernel<<<(n + 4 * MB_THREADS - 1) / (4 * MB_THREADS), MB_THREADS, 0, stream>>>(values, n, (u64 *)out);
    return cudaGetLastError();
}

extern "C" cudaError_t emx_cuda_sample(const float *logits, int n, const EmxSamplerParams *params,
                                       uint64_t seed, uint64_t step, const uint64_t *step_dev,
                                       uint32_t lane, int *token_out, void *workspace,
                                       cudaStream_t stream, int pdl) {
    return sample_launch(logits, n, params, seed, step, step_dev, lane, token_out, workspace, stream, true, pdl != 0);
}

extern "C" cudaError_t emx_cuda_sample_one_block(const float *logits, int n, const EmxSamplerParams *params,
                                                 uint64_t seed, uint64_t step, const uint64_t *step_dev,
                                                 uint32_t lane, int *token_out, void *workspace,
                                                 cudaStream_t stream) {
    return sample_launch(logits, n, params, seed, step, step_dev, lane, token_out, workspace, stream, false, false);
}

extern "C" cudaError_t emx_cuda_entropix_step(const float *logits, int n, const EmxMetrics *metrics,
                                              const EmxProfile *profile, EmxEntropixState *state,
                                              int pause_token, uint64_t seed, uint64_t step,
                                              const uint64_t *step_dev, int *token_out,
                                              EmxDecision *decision_out, double *score_out,
                                              void *workspace, cudaStream_t stream, int pdl) {
    if (!logits || n < 1 || !metrics || !profile || !state || !token_out || !workspace) return cudaErrorInvalidValue;
    const MbWs w = sample_ws_passes(workspace, n);
    if (w.G > 0) {  // the decision is made on the device: every pass may be needed
        ParamSrc ps = {};
        ps.kind = PS_ENTROPIX;
        ps.metrics = metrics;
        ps.prof = *profile;
        ps.state = state;
        ps.pause_token = pause_token;
        const cudaError_t e = mb_launch(logits, n, ps, true, true, w, stream, pdl != 0);
        if (e != cudaSuccess) return e;
    }
    const EntropixOut out = {token_out, decision_out, score_out};
    return EMX_LAUNCH(pdl != 0, 1, SB, 0, stream, entropix_kernel, logits, n, metrics, *profile, state, pause_token,
                      (u64)seed, (u64)step, (const u64 *)step_dev, out, kept_list(workspace, n), mb_row(w, 0));
}

// One thread: the next step's input from the chosen token (sampling.h). Bytes: a few dozen.
__global__ void feed_choice_kernel(const int *chosen, int n_vocab, u64 *at, int *token, int *pos, int *row,
                                   int *n_keys, const EmxEntropixState *state, EmxEntropixState *saved) {
    const int id = *chosen;
    const u64 p = *at;
    *token = id >= 0 && id < n_vocab ? id : 0;
    *pos = (int)p;
    *row = 0;
    *n_keys = (int)p + 1;
    *at = p + 1;
    *saved = *state;
}

extern "C" cudaError_t emx_cuda_feed_choice(const int *chosen, int n_vocab, uint64_t *at, int *token, int *pos,
                                            int *row, int *n_keys, const EmxEntropixState *state,
                                            EmxEntropixState *saved, cudaStream_t stream) {
    if (!chosen || n_vocab < 1 || !at || !token || !pos || !row || !n_keys || !state || !saved)
        return cudaErrorInvalidValue;
    feed_choice_kernel<<<1, 1, 0, stream>>>(chosen, n_vocab, (u64 *)at, token, pos, row, n_keys, state, saved);
    return cudaGetLastError();
}
