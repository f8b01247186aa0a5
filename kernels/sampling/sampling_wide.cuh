// sampling_wide.cuh — a draw whose kept set is too wide to list: the combined sampler with top-k
// off (top-p, min-p, both, or no filter at all) over n >= 8192 logits, on many blocks. sampling.cu
// takes this path for emx_cuda_sample when top_k <= 0; entropix and the agent pool, whose
// parameters come with a top-k, keep sampling_mb.cuh's.
//
// Why: the one-block walk lists the kept tokens in rank order, a batch of 1024 at a time (each
// batch a fresh radix select over the logits by one block), then one thread sums them. With a flat
// distribution top-p 0.9 keeps most of Qwen3's 151,936 tokens: 8.2 ms a token on an H200. A draw
// needs no list, only the token where the cumulative mass crosses a target, so this path finds
// that token directly, by a radix select on MASS rather than on count:
//   stage A (top-p on): the nucleus cut, the first key in rank order where Σ exp(s·(l - max))
//           reaches top_p·z (z over every candidate, sampling_mb.cuh's mb_z); kept: keys >= it.
//   stage B (always): the drawn key, the first key over the kept set (>= the cut; and with min-p
//           exp(s·(l - max)) >= min_p) where Σ exp((l - max)/T) exceeds u·total. Rank order, or
//           the id order when no filter is on (sample.c's orders).
// A stage is up to WIDE_LEVELS launches of wide_level (G x 256 threads: each block a 2048-logit
// chunk), one per byte of the 64-bit key from the top: every block first derives the same
// decision from the previous level's histogram (the bin holding the crossing, and the mass of
// the bins above it), then adds its chunk's 256-bin histogram of (count, mass) of the keys in
// range under that prefix. Once the crossing's bin holds <= 1024 keys, wide_gather (G x 256)
// appends them to a list and wide_pick (one block of 1024) sorts them and walks them from the
// mass above. Keys that share one logit more than 1024 times are narrowed further in the pick's
// block, the same way (the id bytes).
//
// Exact sums: a weight (<= 1) becomes a 128-bit fixed-point integer (LSB 2^-100), so a bin's mass
// is the same whatever order blocks and threads add it in (integer atomics, carries included),
// the levels agree exactly (a bin's mass is the sum of its sub-bins'), and the walk sees what
// the histograms saw. The CPU adds the same doubles in rank order: the tokens differ only where
// that sum lands within rounding of the target (a straddle, sampling.h).
// Bytes: 4n per level launch while the select is open (typically 3 a stage), 4n for the gather,
// ~2.5 KB of histogram per level; the pick sorts <= 8 KB. Launches: the scan, z with top-p, then
// 6 per stage (14 with top-p) instead of the one-block walk's batches over the whole vocabulary.
// With wide_launch's pdl every launch is a programmatic one, each kernel triggering its successor
// and waiting for its predecessor before anything else (as sampling_mb.cuh's passes).
#ifndef ENTROPIX_KERNELS_SAMPLING_WIDE_CUH
#define ENTROPIX_KERNELS_SAMPLING_WIDE_CUH

#include "kernels/sampling/sampling_mb.cuh"

extern "C" {
#include "sampler/philox.h"
}

#define WIDE_LEVELS 4  // many-block levels a stage: key bytes 7..4 (the logit's float; ids: the id)
#define WIDE_SEG 32    // keys a thread sums in the pick's walk
#define FX_BITS 100    // the fixed point's fraction bits

namespace {

// ---------------------------------------------------------------------------------------------
// 128-bit fixed point: value = (hi·2^64 + lo)·2^-FX_BITS. Weights are <= 1 and n < 2^24, so a
// sum stays below 2^(FX_BITS + 24) < 2^128. Weights below 2^-100 count as 0 (they cannot move a
// draw by more than n·2^-100).
struct Fx {
    u64 lo, hi;
};
__device__ __forceinline__ Fx fx_add(Fx a, Fx b) {
    Fx r;
    r.lo = a.lo + b.lo;
    r.hi = a.hi + b.hi + (r.lo < a.lo ? 1u : 0u);
    return r;
}
__device__ __forceinline__ bool fx_lt(Fx a, Fx b) { return a.hi < b.hi || (a.hi == b.hi && a.lo < b.lo); }
__device__ __forceinline__ bool fx_zero(Fx a) { return (a.lo | a.hi) == 0; }

// The exact fixed-point value of w >= 0 (w < 2^24), truncated below 2^-FX_BITS.
__device__ Fx fx_of(double w) {
    Fx r = {0, 0};
    if (!(w > 0.0)) return r;
    int e;
    const double f = frexp(w, &e);       // w = f·2^e, f in [0.5, 1)
    const u64 m = (u64)ldexp(f, 53);     // its 53 significant bits, exactly
    const int sh = e - 53 + FX_BITS;     // w·2^FX_BITS = m·2^sh
    if (sh >= 64) {
        r.hi = m << (sh - 64);
    } else if (sh > 0) {
        r.lo = m << sh;
        r.hi = m >> (64 - sh);
    } else if (sh > -64) {
        r.lo = m >> -sh;
    }
    return r;
}
__device__ double fx_to_double(Fx a) { return ldexp((double)a.hi, 64 - FX_BITS) + ldexp((double)a.lo, -FX_BITS); }

// *lo, *hi += v, exactly, whatever other threads add meanwhile (the carry goes to hi).
__device__ __forceinline__ void fx_atomic_add(u64 *lo, u64 *hi, Fx v) {
    const u64 old = atomicAdd(lo, v.lo);
    const u64 h = v.hi + (old + v.lo < old ? 1u : 0u);
    if (h) atomicAdd(hi, h);
}

// ---------------------------------------------------------------------------------------------
// What a stage selects over: written once (level 0, block 0), read by the stage's later launches.
struct WideSpec {
    int ok;        // the row is drawn here; else (nothing valid, +inf logits) the pick decides alone
    int run;       // the stage has work
    int ids;       // keys in id order (no filter), else rank order
    int strict;    // cum > target (the draw), else cum >= target (the nucleus)
    int min_p_on;  // range: exp(s_f·(l - max)) >= min_p
    float floor;   // range: l >= floor (min-p's and top-p's bounds, sampling_device.cuh's filter_floor)
    u64 lo_key;    // range: key >= lo_key (stage B: the nucleus cut)
    double dmax, scale, s_f, min_p;  // weights exp(scale·(l - max))
    double u;      // stage B: the uniform number of the draw
    Fx target;     // stage A: top_p·z; stage B: set by the first decision (u·total)
};

// The select after a level: the crossing lies in the keys with (k & mask) == prefix.
struct WideState {
    int run, stop, shift, target_set;
    u64 prefix, mask;
    Fx above, target;  // above: the range's mass in the keys above those
};

struct WideHist {  // one level's histogram (zeroed by mb_scan_kernel before every decision)
    unsigned count[256];
    u64 lo[256], hi[256];
};

// The workspace (device memory, wide_ws_at): hist and nkeys first, contiguous, the zeroed part.
struct WideWs {
    WideHist *hist;   // [2][WIDE_LEVELS]
    int *nkeys;       // [2]
    WideSpec *spec;   // [2]
    WideState *st;    // [2][WIDE_LEVELS + 1]: slot L = the state histogrammed at level L; last: the gather's
    u64 *result;      // [2] the key each stage found
    u64 *keys;        // [2][BATCH_CAP]
};
__host__ __device__ inline size_t wide_zero_bytes() {
    return mb_align(2 * WIDE_LEVELS * sizeof(WideHist) + 2 * sizeof(int));
}
__host__ __device__ inline size_t wide_ws_bytes(int n) {
    if (mb_chunks(n) == 0) return 0;
    return wide_zero_bytes() + mb_align(2 * sizeof(WideSpec)) + mb_align(2 * (WIDE_LEVELS + 1) * sizeof(WideState)) +
           mb_align(2 * sizeof(u64)) + mb_align(2 * BATCH_CAP * sizeof(u64));
}
__host__ __device__ inline WideWs wide_ws_at(void *base) {
    WideWs w;
    char *p = (char *)base;
    w.hist = (WideHist *)p;
    w.nkeys = (int *)(p + 2 * WIDE_LEVELS * sizeof(WideHist));
    p += wide_zero_bytes();
    w.spec = (WideSpec *)p;
    p += mb_align(2 * sizeof(WideSpec));
    w.st = (WideState *)p;
    p += mb_align(2 * (WIDE_LEVELS + 1) * sizeof(WideState));
    w.result = (u64 *)p;
    p += mb_align(2 * sizeof(u64));
    w.keys = (u64 *)p;
    return w;
}

struct WideArgs {  // the call's parameters, by value into every launch
    EmxSamplerParams sp;
    u64 seed, step;
    const u64 *step_dev;
    unsigned lane;
};

// Shared scratch of the wide kernels: a histogram and the scan of the decision.
struct WideSm {
    unsigned *count;            // [256]
    u64 *lo, *hi;               // [256]
    unsigned *sc;               // [256] counts from the top (inclusive)
    u64 *slo, *shi;             // [256] masses from the top (inclusive)
    int *res;                   // [2]
};
__device__ WideSm wide_smem() {
    __shared__ unsigned count[256], sc[256];
    __shared__ u64 lo[256], hi[256], slo[256], shi[256];
    __shared__ int res[2];
    WideSm s = {count, lo, hi, sc, slo, shi, res};
    return s;
}

// ---------------------------------------------------------------------------------------------
// Keys. Rank order: sampling_device.cuh's rank_key. Id order: the complement of the id, in the
// top half, so both start at byte 7 and a larger key comes first.
__device__ __forceinline__ u64 id_key(int id) { return (u64)(0xFFFFFFFFu - (uint32_t)id) << 32; }
__device__ __forceinline__ int wide_key_id(const WideSpec &sp, u64 k) {
    return sp.ids ? (int)(0xFFFFFFFFu - (uint32_t)(k >> 32)) : key_id(k);
}

// Is logit i in the stage's range? Then *key is its key.
__device__ __forceinline__ bool in_range(const WideSpec &sp, float l, int i, u64 *key) {
    if (!is_candidate(l) || l < sp.floor) return false;
    *key = sp.ids ? id_key(i) : rank_key(l, i);
    if (*key < sp.lo_key) return false;
    return !sp.min_p_on || exp(sp.s_f * ((double)l - sp.dmax)) >= sp.min_p;  // sample.c's test
}
// In range and in the bins under s's prefix (what a level histograms and a gather collects)?
__device__ __forceinline__ bool in_prefix(const WideSpec &sp, const WideState &s, float l, int i, u64 *key) {
    return in_range(sp, l, i, key) && (*key & s.mask) == s.prefix;
}
__device__ __forceinline__ Fx weight_fx(const WideSpec &sp, float l) {
    return fx_of(exp(sp.scale * ((double)l - sp.dmax)));
}
// The weight of a key found in range (its logit from the key, or from the row in id order).
__device__ __forceinline__ Fx key_weight(const WideSpec &sp, const float *logits, u64 k) {
    return weight_fx(sp, sp.ids ? logits[wide_key_id(sp, k)] : key_logit(k));
}
__device__ __forceinline__ bool crosses(const WideSpec &sp, Fx cum, Fx target) {
    return sp.strict ? fx_lt(target, cum) : !fx_lt(cum, target);
}

// ---------------------------------------------------------------------------------------------
// The stage's spec (every thread of a block calls it; the same bits in every block: the row's
// setup and z as sampling_mb.cuh's level 0 derives them). Stage B reads stage A's cut from
// w.result[0].
__device__ WideSpec wide_spec(int stage, const WideArgs &a, const MbWs &mw, const WideWs &w, const MbSmem &msm) {
    ParamSrc ps = {};
    ps.kind = PS_FIXED;
    ps.sp = a.sp;
    const RowSetup r = row_setup(ps, mw, msm);
    const Filters &f = r.f;
    const int valid = r.valid;
    const double z = r.need_z ? mb_z_merge(mw, msm) : 0.0;  // need_z: top-p on, the row drawn here
    WideSpec sp = {};
    sp.ok = valid > 0 && f.dmax != INFINITY;
    sp.run = sp.ok && (stage == 1 || f.top_p_on);
    sp.ids = !f.top_p_on && !f.min_p_on;
    sp.strict = stage == 1;
    sp.min_p_on = stage == 1 && f.min_p_on;
    sp.floor = sp.ids ? -INFINITY : filter_floor(a.sp, f, valid, z);
    sp.lo_key = stage == 1 && f.top_p_on ? w.result[0] : 0;
    sp.dmax = f.dmax;
    sp.s_f = f.s;
    sp.min_p = f.min_p;
    sp.scale = stage == 1 ? 1.0 / (double)a.sp.temperature : f.s;
    sp.u = emx_uniform_f64(a.seed, a.step_dev ? *a.step_dev : a.step, a.lane);
    if (stage == 0) sp.target = fx_of((double)a.sp.top_p * z);  // nucleus_len's target
    return sp;
}

__device__ WideState wide_state0(const WideSpec &sp) {
    WideState s = {};
    s.run = sp.run;
    s.shift = 56;
    s.target_set = !sp.strict;
    s.target = sp.target;
    return s;
}

// One level's decision from its histogram (every thread; threads >= 256 only pass the barriers):
// the first bin from the top where the range's cumulative mass crosses the target (the lowest
// non-empty bin if none does: the nucleus keeps everything in range), its prefix, and the mass
// above it. The draw's target is set at the first decision, from the level's total.
__device__ WideState wide_decide(WideState s, const WideSpec &sp, const unsigned *count, const u64 *lo, const u64 *hi,
                                 const WideSm &sm) {
    if (!s.run || s.stop) return s;  // the same for every thread
    const int t = threadIdx.x;       // holds bin 255 - t
    if (t < 256) {
        sm.sc[t] = count[255 - t];
        sm.slo[t] = lo[255 - t];
        sm.shi[t] = hi[255 - t];
    }
    if (t == 0) sm.res[0] = sm.res[1] = -1;
    __syncthreads();
    for (int d = 1; d < 256; d <<= 1) {  // inclusive prefix sums from the top
        unsigned c = 0;
        Fx v = {0, 0};
        if (t < 256 && t >= d) {
            c = sm.sc[t - d];
            v.lo = sm.slo[t - d];
            v.hi = sm.shi[t - d];
        }
        __syncthreads();
        if (t < 256) {
            Fx m = {sm.slo[t], sm.shi[t]};
            m = fx_add(m, v);
            sm.sc[t] += c;
            sm.slo[t] = m.lo;
            sm.shi[t] = m.hi;
        }
        __syncthreads();
    }
    if (!s.target_set) {  // u·total, kept below total so that some key crosses it
        const Fx total = fx_add(s.above, Fx{sm.slo[255], sm.shi[255]});
        Fx tg = fx_of(sp.u * fx_to_double(total));
        if (!fx_zero(total) && !fx_lt(tg, total)) tg = fx_add(total, Fx{~0ull, ~0ull});  // total - 1
        s.target = tg;
        s.target_set = 1;
    }
    if (t < 256) {
        const Fx incl = fx_add(s.above, Fx{sm.slo[t], sm.shi[t]});
        const Fx prev = t > 0 ? fx_add(s.above, Fx{sm.slo[t - 1], sm.shi[t - 1]}) : s.above;
        if (crosses(sp, incl, s.target) && (t == 0 || !crosses(sp, prev, s.target))) sm.res[0] = t;
        if (count[255 - t] > 0) atomicMax(&sm.res[1], t);
    }
    __syncthreads();
    const int tt = sm.res[0] >= 0 ? sm.res[0] : sm.res[1];
    WideState r = s;
    if (tt < 0) {  // nothing in range (cannot happen: the best key always is)
        r.run = 0;
    } else {
        const int b = 255 - tt;
        if (tt > 0) r.above = fx_add(s.above, Fx{sm.slo[tt - 1], sm.shi[tt - 1]});
        r.prefix = s.prefix | ((u64)b << s.shift);
        r.mask = s.mask | ((u64)255 << s.shift);
        if (count[b] <= BATCH_CAP) r.stop = 1;
        else r.shift = s.shift - 8;
    }
    __syncthreads();  // sm.sc/slo/shi/res are rewritten by the next call
    return r;
}

// The histogram of logits[i0, i1) (stride blockDim.x) under s's prefix, into sm (zeroed here).
// A thread keeps a run of keys in one bin in registers and adds it once.
__device__ void wide_hist(const float *logits, int i0, int i1, const WideSpec &sp, const WideState &s,
                          const WideSm &sm) {
    for (int b = threadIdx.x; b < 256; b += blockDim.x) {
        sm.count[b] = 0;
        sm.lo[b] = sm.hi[b] = 0;
    }
    __syncthreads();
    int bin = -1;
    unsigned c = 0;
    Fx m = {0, 0};
    for (int i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
        const float l = logits[i];
        u64 k;
        if (!in_prefix(sp, s, l, i, &k)) continue;
        const int kb = (int)((k >> s.shift) & 255u);
        if (kb != bin) {
            if (c) {
                atomicAdd(&sm.count[bin], c);
                fx_atomic_add(&sm.lo[bin], &sm.hi[bin], m);
            }
            bin = kb;
            c = 0;
            m = Fx{0, 0};
        }
        c++;
        m = fx_add(m, weight_fx(sp, l));
    }
    if (c) {
        atomicAdd(&sm.count[bin], c);
        fx_atomic_add(&sm.lo[bin], &sm.hi[bin], m);
    }
    __syncthreads();
}

// ---------------------------------------------------------------------------------------------
// The kernels, in launch order for each stage (stage 0 = A, 1 = B).

__global__ void __launch_bounds__(MB_THREADS)
wide_level_kernel(const float *__restrict__ logits, int n, WideArgs a, MbWs mw, WideWs w, int stage, int level) {
    emx_pdl_trigger();
    emx_pdl_wait();
    const WideSm sm = wide_smem();
    const bool lead = blockIdx.x == 0 && threadIdx.x == 0;
    WideSpec sp;
    WideState s;
    if (level == 0) {
        sp = wide_spec(stage, a, mw, w, mb_smem());
        s = wide_state0(sp);
        if (lead) w.spec[stage] = sp;
    } else {
        sp = w.spec[stage];
        const WideHist &h = w.hist[stage * WIDE_LEVELS + level - 1];
        s = wide_decide(w.st[stage * (WIDE_LEVELS + 1) + level - 1], sp, h.count, h.lo, h.hi, sm);
    }
    if (lead) w.st[stage * (WIDE_LEVELS + 1) + level] = s;
    if (!s.run || s.stop) return;  // the same for every thread
    int i0;
    const int len = chunk_len(n, &i0);
    wide_hist(logits, i0, i0 + len, sp, s, sm);
    WideHist &g = w.hist[stage * WIDE_LEVELS + level];
    const int b = threadIdx.x;  // MB_THREADS == 256: one bin each
    if (sm.count[b]) {
        atomicAdd(&g.count[b], sm.count[b]);
        fx_atomic_add(&g.lo[b], &g.hi[b], Fx{sm.lo[b], sm.hi[b]});
    }
}

__global__ void __launch_bounds__(MB_THREADS)
wide_gather_kernel(const float *__restrict__ logits, int n, WideWs w, int stage) {
    emx_pdl_trigger();
    emx_pdl_wait();
    const WideSm sm = wide_smem();
    const WideSpec sp = w.spec[stage];
    const WideHist &h = w.hist[stage * WIDE_LEVELS + WIDE_LEVELS - 1];
    WideState *slots = w.st + stage * (WIDE_LEVELS + 1);
    const WideState s = wide_decide(slots[WIDE_LEVELS - 1], sp, h.count, h.lo, h.hi, sm);
    if (blockIdx.x == 0 && threadIdx.x == 0) slots[WIDE_LEVELS] = s;
    if (!s.run || !s.stop) return;  // nothing to draw, or the pick narrows the ties itself
    int i0;
    const int len = chunk_len(n, &i0);
    for (int i = i0 + threadIdx.x; i < i0 + len; i += blockDim.x) {
        u64 k;
        if (!in_prefix(sp, s, logits[i], i, &k)) continue;
        const int pos = atomicAdd(&w.nkeys[stage], 1);
        if (pos < BATCH_CAP) w.keys[stage * BATCH_CAP + pos] = k;  // always: the decision bounded it
    }
}

// The crossing's keys (<= BATCH_CAP) sorted into sm.batch; returns their count. Resumes the
// select in this block when the levels left more than a batch (ties).
__device__ int pick_batch(const float *logits, int n, const WideWs &w, int stage, const WideSpec &sp, WideState *s,
                          Smem sm, const WideSm &ws) {
    if (s->stop) {
        const int c = min(w.nkeys[stage], BATCH_CAP);
        for (int i = threadIdx.x; i < c; i += blockDim.x) sm.batch[i] = w.keys[stage * BATCH_CAP + i];
        return sort_batch(sm, c);  // its first barrier publishes the loads
    }
    while (s->run && !s->stop) {  // every thread holds the same state
        wide_hist(logits, 0, n, sp, *s, ws);
        *s = wide_decide(*s, sp, ws.count, ws.lo, ws.hi, ws);
    }
    if (threadIdx.x == 0) sm.si[2] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n && s->run; i += blockDim.x) {
        u64 k;
        if (!in_prefix(sp, *s, logits[i], i, &k)) continue;
        const int pos = atomicAdd(&sm.si[2], 1);
        if (pos < BATCH_CAP) sm.batch[pos] = k;
    }
    __syncthreads();
    return sort_batch(sm, min(sm.si[2], BATCH_CAP));
}

// The walk over the sorted batch from the mass above it: the first key whose cumulative mass
// crosses the target, or the last key (the nucleus keeps all). WIDE_SEG keys a thread, then
// thread 0 finds the segment and walks it. Returns the key in every thread (0: an empty batch).
__device__ u64 pick_walk(const float *logits, const WideSpec &sp, const WideState &s, Smem sm, int c) {
    __shared__ u64 seg_lo[BATCH_CAP / WIDE_SEG], seg_hi[BATCH_CAP / WIDE_SEG];
    const int nseg = (c + WIDE_SEG - 1) / WIDE_SEG;
    const int t = threadIdx.x;
    if (t < nseg) {
        Fx m = {0, 0};
        for (int j = t * WIDE_SEG; j < min(c, (t + 1) * WIDE_SEG); j++) m = fx_add(m, key_weight(sp, logits, sm.batch[j]));
        seg_lo[t] = m.lo;
        seg_hi[t] = m.hi;
    }
    __syncthreads();
    if (t == 0) {
        u64 found = c > 0 ? sm.batch[c - 1] : 0;
        Fx cum = s.above;
        for (int g = 0; g < nseg; g++) {
            const Fx next = fx_add(cum, Fx{seg_lo[g], seg_hi[g]});
            if (!crosses(sp, next, s.target)) {
                cum = next;
                continue;
            }
            for (int j = g * WIDE_SEG; j < min(c, (g + 1) * WIDE_SEG); j++) {
                const u64 k = sm.batch[j];
                cum = fx_add(cum, key_weight(sp, logits, k));
                if (crosses(sp, cum, s.target)) {
                    found = k;
                    break;
                }
            }
            break;
        }
        sm.su[3] = found;
    }
    __syncthreads();
    const u64 r = sm.su[3];
    __syncthreads();
    return r;
}

// One block of SB threads. Stage A leaves the nucleus cut in w.result[0]; stage B writes the
// token (rows the wide path does not draw: the one-block distribution and draw, as sample_kernel).
__global__ void __launch_bounds__(SB, 1)
wide_pick_kernel(const float *__restrict__ logits, int n, WideArgs a, WideWs w, int stage, int *token_out, KeptList kl,
                 MbRow mb) {
    emx_pdl_trigger();
    emx_pdl_wait();
    const Smem sm = block_smem();
    const WideSm ws = wide_smem();
    const WideSpec sp = w.spec[stage];
    if (!sp.ok) {
        if (stage == 1) {
            const int m = distribution_block(logits, n, a.sp, sm, kl, mb);
            if (threadIdx.x == 0) *token_out = draw(kl, m, sp.u);
        }
        return;
    }
    WideState s = w.st[stage * (WIDE_LEVELS + 1) + WIDE_LEVELS];
    if (!s.run) {
        if (stage == 1 && threadIdx.x == 0) *token_out = -1;
        return;
    }
    const int c = pick_batch(logits, n, w, stage, sp, &s, sm, ws);
    const u64 k = pick_walk(logits, sp, s, sm, c);
    if (threadIdx.x == 0) {
        w.result[stage] = k;
        if (stage == 1) *token_out = c > 0 ? wide_key_id(sp, k) : -1;
    }
}

// emx_cuda_fixed_sum (the tests' view of the sums above): every value added into one block-shared
// accumulator with fx_atomic_add, each block's total then into out (zeroed by fx_zero_kernel).
__global__ void fx_zero_kernel(u64 *out) { out[0] = out[1] = 0; }
__global__ void __launch_bounds__(MB_THREADS) fx_sum_kernel(const double *__restrict__ v, int n, u64 *out) {
    __shared__ u64 acc[2];
    if (threadIdx.x == 0) acc[0] = acc[1] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        fx_atomic_add(&acc[0], &acc[1], fx_of(v[i]));
    __syncthreads();
    if (threadIdx.x == 0) fx_atomic_add(&out[0], &out[1], Fx{acc[0], acc[1]});
}

// Wide draws enqueued: a process-wide count (a test hook: the path is really taken).
unsigned long long wide_draws_launched = 0;

// Enqueues the scan, z (top-p), and the stages. mw: the many-block workspace (its scan and z
// partials are read here); w: this path's (its histograms are zeroed by the scan); pdl: every
// launch with programmatic dependent launch (as mb_launch).
cudaError_t wide_launch(const float *logits, int n, const WideArgs &a, MbWs mw, const WideWs &w, int *token_out,
                        const KeptList &kl, cudaStream_t s, bool pdl = false) {
    mw.zero = (unsigned *)w.hist;
    mw.n_zero = (int)(wide_zero_bytes() / sizeof(unsigned));
    const bool top_p = a.sp.top_p < 1.0f;
    ParamSrc ps = {};
    ps.kind = PS_FIXED;
    ps.sp = a.sp;
    cudaError_t e = mb_launch(logits, n, ps, false, false, mw, s, pdl);  // the scan (and the zeroing)
    if (e == cudaSuccess && top_p) e = EMX_LAUNCH(pdl, mw.G, MB_THREADS, 0, s, mb_z_kernel, logits, n, ps, mw);
    for (int stage = top_p ? 0 : 1; stage < 2 && e == cudaSuccess; stage++) {
        for (int level = 0; level < WIDE_LEVELS && e == cudaSuccess; level++)
            e = EMX_LAUNCH(pdl, mw.G, MB_THREADS, 0, s, wide_level_kernel, logits, n, a, mw, w, stage, level);
        if (e == cudaSuccess) e = EMX_LAUNCH(pdl, mw.G, MB_THREADS, 0, s, wide_gather_kernel, logits, n, w, stage);
        if (e == cudaSuccess)
            e = EMX_LAUNCH(pdl, 1, SB, 0, s, wide_pick_kernel, logits, n, a, w, stage, token_out, kl, mb_row(mw, 0));
    }
    if (e == cudaSuccess) wide_draws_launched++;
    return e;
}

}  // namespace

#endif
