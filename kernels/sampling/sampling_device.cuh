// sampling_device.cuh — the device side of the combined sampler, shared by sampling.cu (one
// sampler, entropix), agent_pool.cu (one sampler per agent) and the persistent decode kernel (its
// last block's entropix decision): the block-wide radix select of the kept tokens,
// emx_sample_distribution, emx_sample_draw and the entropix decision on the device. The
// algorithm, the thread mapping and the bytes moved are described at the top of sampling.cu.
// Every function here is called by all threads of one block: the sampling kernels' SB threads
// (block_smem is that block's shared memory), or another width with its scratch carved from
// dynamic shared memory (block_smem_at); nothing here launches anything.
#ifndef ENTROPIX_KERNELS_SAMPLING_DEVICE_CUH
#define ENTROPIX_KERNELS_SAMPLING_DEVICE_CUH

#include <math.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "kernels/reduce.cuh"
#include "kernels/sampling/sampling.h"

extern "C" {
#include "sampler/philox.h"
}

// Threads of the sampling block: a single block must keep enough loads in flight by itself.
// (Nothing else depends on the count: every loop strides by blockDim.x.)
#define SB 1024
#define BATCH_CAP 1024   // rank keys sorted at a time in shared memory (8 KB)
#define FIRST_BATCH 64   // the first batch: a nucleus is usually this small (as sample.c's heap)

typedef unsigned long long u64;

namespace {

// The kept tokens in rank order (or id order with every filter off): [n] each, device memory.
struct KeptList {
    int *id;
    float *logit;
    double *p;
};

// The block's shared memory (block_smem_at lays it out), passed down as pointers.
struct Smem {
    u64 *batch;         // [BATCH_CAP]
    unsigned *hist;     // [256]
    float *red_f;       // [threads]
    int *red_i;         // [threads]
    double *red_d;      // [threads]
    emxr::ArgMax *red_a;  // [threads]
    int *si;            // [8] values thread 0 hands to the block
    u64 *su;            // [4]
};

// The block's memory carved from `base` (block_smem_bytes(threads) bytes, 8-byte aligned): a
// batch of keys, the reductions' scratch (one entry a thread), a histogram, the values thread 0
// hands to the block.
__host__ __device__ constexpr size_t block_smem_bytes(int threads) {
    return (BATCH_CAP + 4) * sizeof(u64) + (size_t)threads * (sizeof(double) + sizeof(emxr::ArgMax) + sizeof(float) +
                                                              sizeof(int)) +
           256 * sizeof(unsigned) + 8 * sizeof(int);
}
__device__ inline Smem block_smem_at(void *base, int threads) {
    char *p = (char *)base;
    Smem sm;
    sm.batch = (u64 *)p, p += BATCH_CAP * sizeof(u64);
    sm.su = (u64 *)p, p += 4 * sizeof(u64);
    sm.red_d = (double *)p, p += threads * sizeof(double);
    sm.red_a = (emxr::ArgMax *)p, p += threads * sizeof(emxr::ArgMax);
    sm.red_f = (float *)p, p += threads * sizeof(float);
    sm.red_i = (int *)p, p += threads * sizeof(int);
    sm.hist = (unsigned *)p, p += 256 * sizeof(unsigned);
    sm.si = (int *)p;
    return sm;
}

// The sampling kernels' block of SB threads: its memory as function-scope __shared__ (one copy
// per block, whichever kernel calls this). Another block (the persistent decode kernel's deciding
// one) carves the same layout from its dynamic shared memory with block_smem_at.
__device__ inline Smem block_smem() {
    __shared__ __align__(8) unsigned char mem[block_smem_bytes(SB)];
    return block_smem_at(mem, SB);
}

// The many-block passes' results for one row (sampling_mb.cuh writes them; G == 0: none, the
// block scans the logits itself).
struct ScanPart {  // one chunk's pass 1: candidates, their max, the argmax
    int valid;
    float mx;
    emxr::ArgMax am;
};
struct MbState {  // the radix select of the first batch, after a level (sampling_mb.cuh)
    int filtered, stop;  // filtered: a top-k/top-p/min-p walk follows; stop: thr is final
    int want, shift, above;
    float floor;
    double z;  // Σ over the candidates of exp(s·(l - max)), when top-p alone needs it
    u64 prefix, mask, thr;
};
struct MbRow {
    int G;                  // chunks of the passes (0: the one-block path)
    const ScanPart *scan;   // [G]
    const MbState *st;      // the state after the last level
    const u64 *keys;        // [BATCH_CAP] the first batch, unsorted, when st->stop
    const int *nkeys;
};

// A logit that can be chosen at all (sample.c's is_candidate).
__device__ __forceinline__ bool is_candidate(float l) { return !isnan(l) && l != -INFINITY; }

// Rank key: larger key = ranked earlier. The float's bits made monotone (negative floats
// inverted, positive ones with the sign bit set) above the complement of the id.
__device__ __forceinline__ u64 rank_key(float l, int id) {
    if (l == 0.0f) l = 0.0f;  // -0 == +0 for the CPU: equal logits, ranked by id
    const uint32_t b = __float_as_uint(l), o = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
    return ((u64)o << 32) | (u64)(0xFFFFFFFFu - (uint32_t)id);
}
__device__ __forceinline__ float key_logit(u64 k) {
    const uint32_t o = (uint32_t)(k >> 32);
    return __uint_as_float((o & 0x80000000u) ? (o & 0x7FFFFFFFu) : ~o);
}
__device__ __forceinline__ int key_id(u64 k) { return (int)(0xFFFFFFFFu - (uint32_t)k); }

// Pass 1: number of candidates, their max (+inf included) and the argmax (lowest id on ties).
__device__ void scan_logits(const float *logits, int n, Smem sm, int *n_valid, float *max, int *argmax) {
    int valid = 0;
    float mx = -INFINITY;
    emxr::ArgMax am = {-INFINITY, -1};
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float l = logits[i];
        if (!is_candidate(l)) continue;
        valid++;
        mx = fmaxf(mx, l);
        emxr::ArgMax c = {l, i};
        am = emxr::argmax_better(am, c);
    }
    *n_valid = emxr::block_reduce(valid, sm.red_i, emxr::SumOp());
    *max = emxr::block_reduce(mx, sm.red_f, emxr::MaxOp());
    *argmax = emxr::block_reduce(am, sm.red_a, emxr::ArgMaxOp()).id;
}

// Pass 1 from the chunks' partials (exact: counts, max and argmax do not depend on the order).
// Every thread of a block calls it (any block size).
__device__ void merge_scan(const ScanPart *p, int G, int *red_i, float *red_f, emxr::ArgMax *red_a, int *n_valid,
                           float *max, int *argmax) {
    int valid = 0;
    float mx = -INFINITY;
    emxr::ArgMax am = {-INFINITY, -1};
    for (int i = threadIdx.x; i < G; i += blockDim.x) {
        valid += p[i].valid;
        mx = fmaxf(mx, p[i].mx);
        am = emxr::argmax_better(am, p[i].am);
    }
    *n_valid = emxr::block_reduce(valid, red_i, emxr::SumOp());
    *max = emxr::block_reduce(mx, red_f, emxr::MaxOp());
    *argmax = emxr::block_reduce(am, red_a, emxr::ArgMaxOp()).id;
}
__device__ void scan_any(const float *logits, int n, Smem sm, const MbRow &mb, int *n_valid, float *max, int *argmax) {
    if (mb.G > 0)
        merge_scan(mb.scan, mb.G, sm.red_i, sm.red_f, sm.red_a, n_valid, max, argmax);
    else
        scan_logits(logits, n, sm, n_valid, max, argmax);
}

// Radix select over the keys in range (candidates, l >= floor, k < bound): per byte of the key,
// from byte shift0 / 8 down, a histogram of the keys whose bytes above match `prefix` under
// `mask`; the range narrows to the bin holding the want-th best key until the keys at or above
// it fit a batch (<= BATCH_CAP). above0: keys in range above the current bins (0 at the top
// level; the many-block passes of sampling_mb.cuh resume a select here with their state).
// Returns the threshold: the batch is every key in range >= it. Leaves sm.si[2] = 0.
__device__ u64 select_range(const float *logits, int n, float floor, int want, u64 bound, Smem sm, int shift0,
                            u64 prefix, u64 mask, int above0) {
    const int tid = threadIdx.x;
    if (tid == 0) sm.si[1] = above0;  // read by thread 0 only
    for (int shift = shift0; shift >= 0; shift -= 8) {
        for (int b = tid; b < 256; b += blockDim.x) sm.hist[b] = 0;
        __syncthreads();
        for (int i = tid; i < n; i += blockDim.x) {
            const float l = logits[i];
            if (!is_candidate(l) || l < floor) continue;
            const u64 k = rank_key(l, i);
            if (k < bound && (k & mask) == prefix) atomicAdd(&sm.hist[(k >> shift) & 255u], 1u);
        }
        __syncthreads();
        if (tid == 0) {
            int above = sm.si[1];  // keys in range above the current bins (earlier levels)
            int b = 255, stop = 0;
            for (; b >= 0; b--) {
                if (above + (int)sm.hist[b] >= want) break;
                above += (int)sm.hist[b];
            }
            if (b < 0) {
                stop = 1;  // fewer than want left (first level only): take them all
                sm.su[2] = prefix;
            } else if (above + (int)sm.hist[b] <= BATCH_CAP) {
                stop = 1;  // every key >= this bin's start fits in the batch
                sm.su[2] = prefix | ((u64)b << shift);
            } else {
                sm.su[0] = prefix | ((u64)b << shift);
                sm.su[1] = mask | ((u64)255 << shift);
                sm.si[1] = above;
            }
            sm.si[0] = stop;
            sm.si[2] = 0;  // the gather's counter
        }
        __syncthreads();
        if (sm.si[0]) break;
        prefix = sm.su[0];
        mask = sm.su[1];
    }
    return sm.su[2];
}

// Sorts sm.batch[0..count) descending (bitonic, padded with 0 keys to a power of two); returns
// count. The batch's loads must precede the call; its first barrier publishes them.
__device__ int sort_batch(Smem sm, int count) {
    const int tid = threadIdx.x;
    int p2 = 1;
    while (p2 < count) p2 *= 2;
    for (int i = count + tid; i < p2; i += blockDim.x) sm.batch[i] = 0;  // 0 is below every key
    __syncthreads();
    for (int k = 2; k <= p2; k <<= 1) {
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int i = tid; i < p2; i += blockDim.x) {
                const int ixj = i ^ j;
                if (ixj > i) {
                    const u64 a = sm.batch[i], b = sm.batch[ixj];
                    if ((i & k) == 0 ? a < b : a > b) {
                        sm.batch[i] = b;
                        sm.batch[ixj] = a;
                    }
                }
            }
            __syncthreads();
        }
    }
    return count;
}

// Every key in range at or above thr (select_range's) into sm.batch, sorted best first.
__device__ int gather_sort(const float *logits, int n, float floor, u64 bound, u64 thr, Smem sm) {
    const int tid = threadIdx.x;
    for (int i = tid; i < n; i += blockDim.x) {
        const float l = logits[i];
        if (!is_candidate(l) || l < floor) continue;
        const u64 k = rank_key(l, i);
        if (k >= thr && k < bound) {
            const int pos = atomicAdd(&sm.si[2], 1);
            if (pos < BATCH_CAP) sm.batch[pos] = k;  // always true: the select bounded the count
        }
    }
    __syncthreads();
    return sort_batch(sm, min(sm.si[2], BATCH_CAP));
}

// The best `want` (>= 1) candidate keys below `bound` (of logits >= floor) and possibly a few
// more (at most BATCH_CAP in all), sorted best first into sm.batch; returns their count (0: none
// left).
__device__ int select_batch(const float *logits, int n, float floor, int want, u64 bound, Smem sm) {
    const u64 thr = select_range(logits, n, floor, want, bound, sm, 56, 0, 0, 0);
    return gather_sort(logits, n, floor, bound, thr, sm);
}

// The filters of a sampling call, from its parameters, the count of valid logits and their max.
struct Filters {
    double dmax, s, min_p;  // s: the scale the filters see (1/T when the temperature comes first)
    bool top_k_on, top_p_on, min_p_on;
};
__device__ __forceinline__ Filters filters_of(EmxSamplerParams sp, int valid, float mx) {
    Filters f;
    f.dmax = (double)mx;
    f.s = sp.temperature_first ? 1.0 / (double)sp.temperature : 1.0;
    f.min_p = sp.min_p < 1.0f ? (double)sp.min_p : 1.0;
    f.top_k_on = sp.top_k > 0 && sp.top_k < valid;
    f.top_p_on = sp.top_p < 1.0f;
    f.min_p_on = sp.min_p > 0.0f;
    return f;
}

// Logits below the returned floor can never be kept, so the selection skips them (fewer
// histogram atomics; a bounded walk for top-p). In logit space: p_i >= min_p·p_max ⟺
// s·(l_i - max) >= ln(min_p); top-p alone: a token of weight below eps = (1-top_p)·Z/n_valid
// is never needed (all of them weigh less than (1-top_p)·Z: sample.c's argument). The walk
// still decides with the exact test; the margin keeps rounding from excluding a token the
// exact test would keep. Not with top-k and top-p together: their nucleus is measured against
// the whole top-k, which must be collected first. z: see keep_filtered.
__device__ __forceinline__ float filter_floor(EmxSamplerParams sp, const Filters &f, int valid, double z) {
    double floor_d = -INFINITY;
    if (f.min_p_on && !(f.top_k_on && f.top_p_on)) floor_d = f.dmax + log(f.min_p) / f.s;
    if (!f.top_k_on && f.top_p_on && sp.top_p > 0.0f) {
        const double eps = (1.0 - (double)sp.top_p) * z / valid;
        if (eps > 0.0) floor_d = fmax(floor_d, f.dmax + log(eps) / f.s);
    }
    return floor_d > -INFINITY ? (float)(floor_d - 1e-6 * (1.0 + fabs(floor_d))) : -INFINITY;
}

// The first batch of the walk from the many-block passes: the keys they gathered, or, when their
// levels did not narrow the range enough, the select resumed where they stopped (one block).
__device__ int mb_first_batch(const float *logits, int n, float floor, Smem sm, const MbRow &mb) {
    const MbState st = *mb.st;
    if (st.stop) {
        const int c = min(*mb.nkeys, BATCH_CAP);
        for (int i = threadIdx.x; i < c; i += blockDim.x) sm.batch[i] = mb.keys[i];
        return sort_batch(sm, c);  // its first barrier publishes the loads
    }
    const u64 thr = select_range(logits, n, floor, st.want, ~0ull, sm, st.shift, st.prefix, st.mask, st.above);
    return gather_sort(logits, n, floor, ~0ull, thr, sm);
}

// Top-k, top-p and min-p: walks the logits in descending order, a batch at a time
// (select_batch), keeping tokens in kl until the filters are satisfied; leaves the count in
// sm.si[4]. With top-k on it collects the top_k first, which cut_top_k then trims.
__device__ __forceinline__ void keep_filtered(const float *logits, int n, EmxSamplerParams sp, Smem sm, KeptList kl,
                                              int valid, const Filters &f, const MbRow &mb) {
    const int tid = threadIdx.x;
    const double dmax = f.dmax, s = f.s, min_p = f.min_p;
    const bool top_k_on = f.top_k_on, top_p_on = f.top_p_on, min_p_on = f.min_p_on;
    double z = 0.0;  // top-p without top-k: the nucleus is measured against the whole mass
    float floor;
    if (mb.G > 0) {  // the many-block passes summed z and selected the first batch
        z = mb.st->z;
        floor = mb.st->floor;
    } else {
        if (!top_k_on && top_p_on) {
            for (int i = tid; i < n; i += blockDim.x)
                if (is_candidate(logits[i])) z += exp(s * ((double)logits[i] - dmax));
            z = emxr::block_reduce(z, sm.red_d, emxr::SumOp());
        }
        floor = filter_floor(sp, f, valid, z);
    }
    const double target = (double)sp.top_p * z;
    const int limit = top_k_on ? sp.top_k : valid;
    u64 bound = ~0ull;
    double cum = 0.0;  // thread 0's running nucleus mass, across batches
    int kept = 0, want = FIRST_BATCH;
    bool first = true;
    if (tid == 0) sm.si[4] = 0;
    for (;;) {
        if (want > limit - kept) want = limit - kept;
        const int c = first && mb.G > 0 ? mb_first_batch(logits, n, floor, sm, mb)
                                        : select_batch(logits, n, floor, want, bound, sm);
        first = false;
        if (tid == 0) {
            int done = c == 0;
            for (int j = 0; j < c && !done; j++) {
                const float l = key_logit(sm.batch[j]);
                if (top_k_on) {  // collect the top_k first; top-p and min-p cut it below
                    kl.id[kept] = key_id(sm.batch[j]);
                    kl.logit[kept++] = l;
                    done = kept == sp.top_k;
                    continue;
                }
                const double w = exp(s * ((double)l - dmax));
                if (min_p_on && kept > 0 && w < min_p) {  // the rest weigh even less
                    done = 1;
                    break;
                }
                kl.id[kept] = key_id(sm.batch[j]);
                kl.logit[kept++] = l;
                if (top_p_on) {
                    cum += w;
                    if (cum >= target) done = 1;  // the shortest prefix reaching top_p
                }
                if (kept == valid) done = 1;  // (c == 0 ends a walk the floor cut short)
            }
            if (c > 0) sm.su[3] = sm.batch[c - 1];
            sm.si[4] = kept;
            sm.si[5] = done;
        }
        __syncthreads();
        if (sm.si[5]) break;
        kept = sm.si[4];
        bound = sm.su[3];
        want = BATCH_CAP;
        __syncthreads();  // sm.si / sm.su are rewritten by the next select
    }
}

// With top-k on, sample.c's order: the nucleus inside the top-k, then min-p (thread 0; the
// kept count in sm.si[4]).
__device__ __forceinline__ void cut_top_k(EmxSamplerParams sp, Smem sm, KeptList kl, const Filters &f) {
    const int tid = threadIdx.x;
    const double dmax = f.dmax, s = f.s, min_p = f.min_p;
    const bool top_k_on = f.top_k_on, top_p_on = f.top_p_on, min_p_on = f.min_p_on;
    if (top_k_on && tid == 0) {  // sample.c's order: the nucleus inside the top-k, then min-p
        int m = sm.si[4];
        if (top_p_on) {
            double total = 0.0;
            for (int i = 0; i < m; i++) total += exp(s * ((double)kl.logit[i] - dmax));
            const double tgt = (double)sp.top_p * total;
            double c = 0.0;
            for (int i = 0; i < m; i++) {
                c += exp(s * ((double)kl.logit[i] - dmax));
                if (c >= tgt) {
                    m = i + 1;
                    break;
                }
            }
        }
        if (min_p_on) {
            int keep = 1;
            while (keep < m && exp(s * ((double)kl.logit[keep] - dmax)) >= min_p) keep++;
            m = keep;
        }
        sm.si[4] = m;
    }
}

// emx_sample_distribution on the device: the kept tokens with their final probabilities in
// kl[0..m); returns m (0: no token can be chosen). Every thread calls it; all get m.
__device__ inline int distribution_block(const float *logits, int n, EmxSamplerParams sp, Smem sm, KeptList kl,
                                  const MbRow &mb) {
    const int tid = threadIdx.x;
    if (n <= 0) return 0;
    int valid, argmax;
    float mx;
    scan_any(logits, n, sm, mb, &valid, &mx, &argmax);
    if (!(sp.temperature > 0.0f) || sp.top_k == 1) {  // greedy (NaN temperature too)
        if (argmax < 0) return 0;
        if (tid == 0) {
            kl.id[0] = argmax;
            kl.logit[0] = logits[argmax];
            kl.p[0] = 1.0;
        }
        __syncthreads();
        return 1;
    }
    if (valid == 0) return 0;
    if (mx == INFINITY) {  // the +inf tokens share everything: the first top_k of them, id order
        if (tid == 0) {
            int m = 0;
            for (int i = 0; i < n && (sp.top_k <= 0 || m < sp.top_k); i++)
                if (logits[i] == INFINITY) {
                    kl.id[m] = i;
                    kl.logit[m] = INFINITY;
                    m++;
                }
            for (int i = 0; i < m; i++) kl.p[i] = 1.0 / m;
            sm.si[4] = m;
        }
        __syncthreads();
        return sm.si[4];
    }

    const double inv_t = 1.0 / (double)sp.temperature, dmax = (double)mx;
    const Filters f = filters_of(sp, valid, mx);
    if (!f.top_k_on && !f.top_p_on && !f.min_p_on) {  // no filter: every candidate, in id order
        if (tid == 0) {
            int m = 0;
            for (int i = 0; i < n; i++)
                if (is_candidate(logits[i])) {
                    kl.id[m] = i;
                    kl.logit[m] = logits[i];
                    m++;
                }
            sm.si[4] = m;
        }
    } else {
        keep_filtered(logits, n, sp, sm, kl, valid, f, mb);
        cut_top_k(sp, sm, kl, f);
    }
    // Final distribution: softmax(logit / T) over the kept tokens, in double, in their order.
    if (tid == 0) {
        const int m = sm.si[4];
        double total = 0.0;
        for (int i = 0; i < m; i++) {
            kl.p[i] = exp(inv_t * ((double)kl.logit[i] - dmax));
            total += kl.p[i];
        }
        for (int i = 0; i < m; i++) kl.p[i] /= total;
    }
    __syncthreads();
    return sm.si[4];
}

// emx_sample_draw: the first kept token whose cumulative probability exceeds u · total.
__device__ inline int draw(KeptList kl, int m, double u) {
    if (m <= 0) return -1;
    if (!(u >= 0.0)) u = 0.0;
    double total = 0.0;
    for (int i = 0; i < m; i++) total += kl.p[i];
    const double target = u * total;
    double cum = 0.0;
    int last = -1;
    for (int i = 0; i < m; i++) {
        if (kl.p[i] <= 0.0) continue;
        cum += kl.p[i];
        last = i;
        if (cum > target) return kl.id[i];
    }
    return last >= 0 ? kl.id[last] : kl.id[0];
}

// Where an entropix decision's results go (device pointers; decision and score may be NULL).
struct EntropixOut {
    int *token;
    EmxDecision *decision;
    double *score;
};

// One entropix step's decision by one block: d = emx_entropix_decide(metrics, profile, state),
// carried out (the argmax, the pause token, one draw on lane 0, or the best score of n_samples
// draws on lanes 0..n-1), then the state updated and the results written, by thread 0. `step`:
// the draws' Philox counter. Any block size gives the same bits once the many-block passes have
// made z (mb.G > 0): counts, maxima and the select are exact, the batch is sorted before it is
// walked, and thread 0 alone sums the kept mass and draws.
__device__ inline void entropix_block(const float *logits, int n, const EmxMetrics *metrics, const EmxProfile *prof,
                                      EmxEntropixState *state, int pause_token, u64 seed, u64 step, Smem sm,
                                      KeptList kl, const MbRow &mb, EntropixOut out) {
    // Every thread takes the same (pure) decision: nothing to broadcast.
    const EmxMetrics mt = *metrics;
    EmxEntropixState st = *state;
    const EmxDecision d = emx_entropix_decide(&mt, prof, &st, pause_token);
    int token = -1;
    double score = NAN;
    if (d.action == EMX_ACTION_ARGMAX) {
        int valid, argmax;
        float mx;
        scan_any(logits, n, sm, mb, &valid, &mx, &argmax);
        token = argmax;
    } else if (d.action == EMX_ACTION_INSERT) {
        token = d.token >= 0 && d.token < n ? d.token : -1;
    } else {
        const int m = distribution_block(logits, n, d.params, sm, kl, mb);
        if (threadIdx.x == 0) {
            if (d.action == EMX_ACTION_SAMPLE) {
                token = draw(kl, m, emx_uniform_f64(seed, step, 0));
            } else if (m > 0) {  // best of N: N draws on lanes 0..N-1, the best score (strictly)
                double best_score = -INFINITY;
                for (int i = 0; i < d.n_samples; i++) {
                    const int id = draw(kl, m, emx_uniform_f64(seed, step, (uint32_t)i));
                    const double sc = emx_entropix_score(logits, id, &mt, prof->ada_score_typicality);
                    if (token < 0 || sc > best_score) {
                        token = id;
                        best_score = sc;
                    }
                }
                score = best_score;
            }
        }
    }
    __syncthreads();  // every thread has read *state before thread 0 rewrites it
    if (threadIdx.x == 0) {
        emx_entropix_state_update(&st, &d);
        *state = st;
        *out.token = token;
        if (out.decision) *out.decision = d;
        if (out.score) *out.score = score;
    }
}

}  // namespace

#endif
