// sampling_mb.cuh — the passes of a sampling decision that read the whole vocabulary, spread over
// many blocks (for sampling.cu and agent_pool.cu; the one-block tail that gathers, sorts, walks
// and draws is sampling_device.cuh's distribution_block, which reads what these leave).
//
// Grid (G, rows), G = ceil(n / MB_CHUNK) chunks of 2048 logits (75 at n = 151936), 256 threads;
// rows: the decisions taken on the same logits (1, or one per agent of the pool), or each on its
// own row of logits (stride: the agents of the pool's lookahead branches). In launch order:
//   mb_scan     (G x 1, G x rows with own rows) each chunk's candidates, max, argmax ->
//                         ScanPart[G] per logits row (param-independent); block (0, 0) also
//                         zeroes the histograms and the gather counters.
//   mb_z        (G x rows, only when top-p may be on) Σ exp(s·(l - max)) of the chunk -> zpart.
//   mb_hist x3  (G x rows) level L: the state of the select at byte 7-L (prefix, mask, keys above),
//                         then the chunk's 256-bin histogram of the keys in range, added to the
//                         row's global histogram of that level (one atomic per non-empty bin).
//   mb_gather   (G x rows) when the range fits a batch: the chunk's keys >= thr appended to the
//                         row's key list (<= BATCH_CAP keys in all; the tail sorts them).
// Blocks cannot wait for each other within a launch (and __threadfence, which a last-block merge
// needs, is not emulated), so each launch starts by deriving the row's state from the previous
// launch's output, the same way in every block: level 0 merges the scan and z partials (a fixed
// order, so every block gets the same bits), level L > 0 takes the decision of level L-1 from
// its histogram with a 256-entry prefix sum (select_range's rule, the same bin, the same keys);
// block 0 stores that state (MbState, one slot per level) for the next launch and the tail.
// When 3 levels do not narrow the range to a batch (heavy ties), the tail resumes the select at
// the 4th byte in one block: the same keys either way.
// Bytes: 4n per launch (scan, z, each level while the range is open, gather), 16·G for the
// partials, 1 KB of histogram per level and row, 8 per gathered key. Each launch's blocks spread
// the read over the SMs, where one block streams one SM's share; launches that find the select
// finished return after the state (a few hundred bytes).
// Each pass is a block function of (chunk, row) beside its kernel, so that the persistent decode
// kernel (kernels/persistent/decode_persistent.cu) runs the same passes as phases of its launch: its blocks
// of 128 threads are each two of these kernels' threads (LANES 2) where the order of a sum depends
// on it (z and its merge); counts, maxima, histograms and the gathered set do not.
// Programmatic dependent launch (mb_launch's pdl: the decode step's tail, kernels/launch.cuh):
// every pass first triggers its successor, then waits for its predecessor, in every block, before
// any read or write (the logits, the previous pass's partials; the scan's zeroing of counters the
// previous decision's passes may still use).
#ifndef ENTROPIX_KERNELS_SAMPLING_MB_CUH
#define ENTROPIX_KERNELS_SAMPLING_MB_CUH

#include "kernels/grid_sync.cuh"
#include "kernels/launch.cuh"
#include "kernels/sampling/agent_pool.h"
#include "kernels/sampling/sampling_device.cuh"

#define MB_THREADS 256
#define MB_CHUNK 2048
#define MB_LEVELS 3               // key bytes 7, 6, 5 (the float's sign, exponent, top mantissa)
#define MB_MIN_N (4 * MB_CHUNK)   // below this, one block does everything (one launch)

namespace {

// Where a row's sampler parameters come from: fixed (sampling), the entropix decision (made again
// from the same metrics and state, which nothing changes before the tail), or agent `row`.
enum { PS_FIXED, PS_ENTROPIX, PS_AGENTS };
struct ParamSrc {
    int kind;
    EmxSamplerParams sp;
    const EmxMetrics *metrics;
    EmxProfile prof;
    const EmxEntropixState *state;
    int pause_token;
    const EmxAgentParams *agents;
};

// false: no distribution is built for this row (an entropix argmax or insert).
__device__ bool params_of(const ParamSrc &ps, int row, EmxSamplerParams *sp) {
    if (ps.kind == PS_FIXED) {
        *sp = ps.sp;
        return true;
    }
    if (ps.kind == PS_AGENTS) {  // as agents_propose_kernel (sampler/agents.c): top-p, min-p off
        const EmxAgentParams a = ps.agents[row];
        sp->temperature = a.temperature;
        sp->top_k = a.top_k;
        sp->top_p = 1.0f;
        sp->min_p = 0.0f;
        sp->temperature_first = 0;
        return true;
    }
    const EmxMetrics mt = *ps.metrics;
    EmxEntropixState st = *ps.state;
    const EmxDecision d = emx_entropix_decide(&mt, &ps.prof, &st, ps.pause_token);
    *sp = d.params;
    return d.action == EMX_ACTION_SAMPLE || d.action == EMX_ACTION_BEST_OF_N;
}

// The workspace of the passes (device memory, laid out by mb_ws_at).
struct MbWs {
    int G, rows;
    size_t stride;    // floats from one row's logits to the next's (0: all rows read the same)
    ScanPart *scan;   // [rows][G] (one row of it used when stride is 0)
    double *zpart;    // [rows][G]
    MbState *st;      // [rows][MB_LEVELS + 1]: slot L = the state histogrammed at level L; the last: final
    unsigned *hist;   // [rows][MB_LEVELS][256]
    u64 *keys;        // [rows][BATCH_CAP]
    int *nkeys;       // [rows]
    unsigned *zero;   // [n_zero] another path's counters, zeroed by the scan too (sampling_wide.cuh)
    int n_zero;
};

__host__ __device__ inline size_t mb_align(size_t b) { return (b + 255) & ~(size_t)255; }
__host__ __device__ inline int mb_chunks(int n) { return n >= MB_MIN_N ? (n + MB_CHUNK - 1) / MB_CHUNK : 0; }

__host__ __device__ inline size_t mb_ws_bytes(int n, int rows) {
    const size_t G = (size_t)mb_chunks(n), r = (size_t)rows;
    if (G == 0) return 0;
    return mb_align(r * G * sizeof(ScanPart)) + mb_align(r * G * sizeof(double)) +
           mb_align(r * (MB_LEVELS + 1) * sizeof(MbState)) + mb_align(r * MB_LEVELS * 256 * sizeof(unsigned)) +
           mb_align(r * BATCH_CAP * sizeof(u64)) + mb_align(r * sizeof(int));
}

// stride: as MbWs.stride.
__host__ __device__ inline MbWs mb_ws_at(void *base, int n, int rows, size_t stride = 0) {
    MbWs w;
    w.G = mb_chunks(n);
    w.rows = rows;
    w.stride = stride;
    char *p = (char *)base;
    const size_t G = (size_t)w.G, r = (size_t)rows;
    w.scan = (ScanPart *)p;
    p += mb_align(r * G * sizeof(ScanPart));
    w.zpart = (double *)p;
    p += mb_align(r * G * sizeof(double));
    w.st = (MbState *)p;
    p += mb_align(r * (MB_LEVELS + 1) * sizeof(MbState));
    w.hist = (unsigned *)p;
    p += mb_align(r * MB_LEVELS * 256 * sizeof(unsigned));
    w.keys = (u64 *)p;
    p += mb_align(r * BATCH_CAP * sizeof(u64));
    w.nkeys = (int *)p;
    w.zero = nullptr;
    w.n_zero = 0;
    return w;
}

// The sampler's workspace (emx_cuda_sample_workspace_bytes): the kept list [n] (p, id, logit),
// then the passes' of one row (G == 0 below MB_MIN_N: one block does everything), then the wide
// draw's (sampling_wide.cuh). The persistent decode kernel writes the passes' part for the tail.
__host__ __device__ inline size_t kept_bytes(int n) {
    return mb_align((size_t)n * sizeof(double)) + mb_align((size_t)n * sizeof(int)) + mb_align((size_t)n * sizeof(float));
}
__host__ __device__ inline KeptList kept_list(void *ws, int n) {
    char *p = (char *)ws;
    KeptList kl;
    kl.p = (double *)p;
    p += mb_align((size_t)n * sizeof(double));
    kl.id = (int *)p;
    p += mb_align((size_t)n * sizeof(int));
    kl.logit = (float *)p;
    return kl;
}
__host__ __device__ inline MbWs sample_ws_passes(void *ws, int n) { return mb_ws_at((char *)ws + kept_bytes(n), n, 1); }

// The scan partials [G] decision row `row` reads: its own logits row's, or the shared row's.
__host__ __device__ inline ScanPart *mb_scan_of(const MbWs &w, int row) {
    return w.stride ? w.scan + (size_t)row * w.G : w.scan;
}

// Row `row`'s state slot of level `level` (MB_LEVELS: the final state, the tail's), which block 0
// stores for the next pass and the tail.
__host__ __device__ inline MbState *mb_slot(const MbWs &w, int row, int level) {
    return w.st + (size_t)row * (MB_LEVELS + 1) + level;
}

// Row `row`'s histogram [256] of level `level`.
__host__ __device__ inline unsigned *mb_hist_of(const MbWs &w, int row, int level) {
    return w.hist + ((size_t)row * MB_LEVELS + level) * 256;
}

// Row `row`'s view for the tail (G == 0: the one-block path).
__host__ __device__ inline MbRow mb_row(const MbWs &w, int row) {
    MbRow r;
    r.G = w.G;
    r.scan = mb_scan_of(w, row);
    r.st = mb_slot(w, row, MB_LEVELS);
    r.keys = w.keys + (size_t)row * BATCH_CAP;
    r.nkeys = w.nkeys + row;
    return r;
}

// Shared scratch of a pass block (red_*: one entry a thread).
struct MbSmem {
    int *red_i;
    float *red_f;
    emxr::ArgMax *red_a;
    double *red_d;
    unsigned *hist;  // [256]
    unsigned *scan;  // [256]
    int *res;        // [1]
};
// The scratch carved from `base` (mb_smem_bytes(threads) bytes, 8-byte aligned): one entry a
// thread of each reduction, the histogram and its prefix sums, a result.
__host__ __device__ constexpr size_t mb_smem_bytes(int threads) {
    return (size_t)threads * (sizeof(double) + sizeof(emxr::ArgMax) + sizeof(float) + sizeof(int)) +
           2 * 256 * sizeof(unsigned) + sizeof(int);
}
__device__ inline MbSmem mb_smem_at(void *base, int threads) {
    char *p = (char *)base;
    MbSmem s;
    s.red_d = (double *)p, p += threads * sizeof(double);
    s.red_a = (emxr::ArgMax *)p, p += threads * sizeof(emxr::ArgMax);
    s.red_f = (float *)p, p += threads * sizeof(float);
    s.red_i = (int *)p, p += threads * sizeof(int);
    s.hist = (unsigned *)p, p += 256 * sizeof(unsigned);
    s.scan = (unsigned *)p, p += 256 * sizeof(unsigned);
    s.res = (int *)p;
    return s;
}
// A pass kernel's block of MB_THREADS: the scratch as function-scope __shared__ (the persistent
// decode kernel carves it from its dynamic shared memory with mb_smem_at).
__device__ inline MbSmem mb_smem() {
    __shared__ __align__(8) unsigned char mem[mb_smem_bytes(MB_THREADS)];
    return mb_smem_at(mem, MB_THREADS);
}

// Chunk c of the logits: [i0, i0 + len).
__device__ __forceinline__ int chunk_len_of(int n, int c, int *i0) {
    *i0 = c * MB_CHUNK;
    return min(MB_CHUNK, n - *i0);
}
__device__ __forceinline__ int chunk_len(int n, int *i0) { return chunk_len_of(n, (int)blockIdx.x, i0); }

// The scan of chunk c of row `row`'s logits (row 0 when the rows share them): its candidates, max
// and argmax; chunk 0 of row 0 also zeroes the counters the later passes add to.
__device__ void mb_scan_chunk(const float *__restrict__ logits, int n, const MbWs &w, int c, int row,
                              const MbSmem &sm) {
    const int tid = threadIdx.x;
    logits += row * w.stride;
    if (c == 0 && row == 0) {
        for (int i = tid; i < w.rows * MB_LEVELS * 256; i += blockDim.x) w.hist[i] = 0;
        for (int i = tid; i < w.rows; i += blockDim.x) w.nkeys[i] = 0;
        for (int i = tid; i < w.n_zero; i += blockDim.x) w.zero[i] = 0;
    }
    int i0;
    const int len = chunk_len_of(n, c, &i0);
    int valid = 0;
    float mx = -INFINITY;
    emxr::ArgMax am = {-INFINITY, -1};
    for (int i = i0 + tid; i < i0 + len; i += blockDim.x) {
        const float l = logits[i];
        if (!is_candidate(l)) continue;
        valid++;
        mx = fmaxf(mx, l);
        emxr::ArgMax cand = {l, i};
        am = emxr::argmax_better(am, cand);
    }
    ScanPart p;
    p.valid = emxr::block_reduce(valid, sm.red_i, emxr::SumOp());
    p.mx = emxr::block_reduce(mx, sm.red_f, emxr::MaxOp());
    p.am = emxr::block_reduce(am, sm.red_a, emxr::ArgMaxOp());
    if (tid == 0) mb_scan_of(w, row)[c] = p;
}

__global__ void __launch_bounds__(MB_THREADS)
mb_scan_kernel(const float *__restrict__ logits, int n, MbWs w) {
    emx_pdl_trigger();
    emx_pdl_wait();
    mb_scan_chunk(logits, n, w, blockIdx.x, blockIdx.y, mb_smem());  // (blockIdx.y: 0 when the rows share the logits)
}

// The row's parameters and filters, from the scan's partials: what distribution_block derives in
// the tail, in the same order (greedy, nothing valid, +inf, no filter: no select).
struct RowSetup {
    EmxSamplerParams sp;
    Filters f;
    int valid;
    bool filtered, need_z;
};
__device__ RowSetup row_setup_of(const ParamSrc &ps, const MbWs &w, int row, const MbSmem &sm) {
    RowSetup r;
    int argmax;
    float mx;
    merge_scan(mb_scan_of(w, row), w.G, sm.red_i, sm.red_f, sm.red_a, &r.valid, &mx, &argmax);
    const bool dist = params_of(ps, row, &r.sp);
    r.f = filters_of(r.sp, r.valid, mx);
    r.filtered = dist && r.sp.temperature > 0.0f && r.sp.top_k != 1 && r.valid > 0 && mx != INFINITY &&
                 (r.f.top_k_on || r.f.top_p_on || r.f.min_p_on);
    r.need_z = r.filtered && !r.f.top_k_on && r.f.top_p_on;
    return r;
}
__device__ RowSetup row_setup(const ParamSrc &ps, const MbWs &w, const MbSmem &sm) {
    return row_setup_of(ps, w, (int)blockIdx.y, sm);
}

// Chunk c's Σ exp(s·(l - max)) of row r (a 256-thread block's order: lane j of thread t is the
// kernel's thread t + j * 256 / LANES).
template <int LANES>
__device__ void mb_z_chunk(const float *__restrict__ logits, int n, const RowSetup &r, const MbWs &w, int c, int row,
                           const MbSmem &sm) {
    logits += row * w.stride;
    int i0;
    const int len = chunk_len_of(n, c, &i0), width = MB_THREADS / LANES;
    double z[LANES];
#pragma unroll
    for (int j = 0; j < LANES; j++) {
        z[j] = 0.0;
        for (int i = i0 + (int)threadIdx.x + j * width; i < i0 + len; i += MB_THREADS)
            if (is_candidate(logits[i])) z[j] += exp(r.f.s * ((double)logits[i] - r.f.dmax));
    }
    const double t = emxr::lanes_reduce(z, sm.red_d, emxr::SumOp());
    if (threadIdx.x == 0) w.zpart[(size_t)row * w.G + c] = t;
}

__global__ void __launch_bounds__(MB_THREADS)
mb_z_kernel(const float *__restrict__ logits, int n, ParamSrc ps, MbWs w) {
    emx_pdl_trigger();
    emx_pdl_wait();
    const MbSmem sm = mb_smem();
    const RowSetup r = row_setup(ps, w, sm);
    if (!r.need_z) return;  // the same for every thread
    mb_z_chunk<1>(logits, n, r, w, blockIdx.x, blockIdx.y, sm);
}

// Row `row`'s z: mb_z's partials merged in a fixed order (the same bits in every block).
template <int LANES>
__device__ double mb_z_merge_of(const MbWs &w, int row, const MbSmem &sm) {
    const int width = MB_THREADS / LANES;
    double z[LANES];
#pragma unroll
    for (int j = 0; j < LANES; j++) {
        z[j] = 0.0;
        for (int i = (int)threadIdx.x + j * width; i < w.G; i += MB_THREADS) z[j] += w.zpart[(size_t)row * w.G + i];
    }
    return emxr::lanes_reduce(z, sm.red_d, emxr::SumOp());
}
__device__ inline double mb_z_merge(const MbWs &w, const MbSmem &sm) { return mb_z_merge_of<1>(w, (int)blockIdx.y, sm); }

// Level 0's state: the filters, z, the floor, and the first batch's size.
template <int LANES>
__device__ MbState mb_state0(const ParamSrc &ps, const MbWs &w, int row, const MbSmem &sm) {
    const RowSetup r = row_setup_of(ps, w, row, sm);
    MbState s = {};
    s.filtered = r.filtered;
    s.stop = !r.filtered;
    const double z = r.need_z ? mb_z_merge_of<LANES>(w, row, sm) : 0.0;
    s.z = z;
    s.floor = r.filtered ? filter_floor(r.sp, r.f, r.valid, z) : -INFINITY;
    // top-k collects its k keys in one batch when they fit; else keep_filtered's first size
    const int limit = r.f.top_k_on ? r.sp.top_k : r.valid;
    s.want = min(limit, r.f.top_k_on ? BATCH_CAP : FIRST_BATCH);
    s.shift = 56;
    return s;
}

// select_range's decision at one level, from the level's histogram (a 256-thread block, each
// thread one bin; LANES 2: two bins a thread, the same integer sums): the bin holding the
// want-th best key, counted from the top with the keys above the range.
template <int LANES>
__device__ MbState mb_decide(MbState s, const unsigned *gh, const MbSmem &sm) {
    if (s.stop) return s;  // the same for every thread
    const int t = threadIdx.x, width = 256 / LANES;  // bin i = t + j * width, held as 255 - i:
    __syncthreads();                                  // sm.scan becomes the count from the top
#pragma unroll
    for (int j = 0; j < LANES; j++) sm.scan[t + j * width] = gh[255 - (t + j * width)];
    if (t == 0) *sm.res = 256;
    __syncthreads();
    for (int d = 1; d < 256; d <<= 1) {
        unsigned v[LANES];
#pragma unroll
        for (int j = 0; j < LANES; j++) v[j] = t + j * width >= d ? sm.scan[t + j * width - d] : 0u;
        __syncthreads();
#pragma unroll
        for (int j = 0; j < LANES; j++) sm.scan[t + j * width] += v[j];
        __syncthreads();
    }
#pragma unroll
    for (int j = 0; j < LANES; j++) {
        const int i = t + j * width;
        const bool hit = (long long)s.above + sm.scan[i] >= s.want;
        if (hit && (i == 0 || (long long)s.above + sm.scan[i - 1] < s.want)) *sm.res = i;  // one bin
    }
    __syncthreads();
    const int tt = *sm.res;
    MbState r = s;
    if (tt == 256) {  // fewer than want in range (first level only): take them all
        r.stop = 1;
        r.thr = s.prefix;
    } else {
        const int b = 255 - tt;
        const int incl = s.above + (int)sm.scan[tt];  // keys in range at or above bin b
        if (incl <= BATCH_CAP) {
            r.stop = 1;
            r.thr = s.prefix | ((u64)b << s.shift);
        } else {
            r.prefix = s.prefix | ((u64)b << s.shift);
            r.mask = s.mask | ((u64)255 << s.shift);
            r.above = incl - (int)gh[b];
        }
    }
    r.shift = s.shift - 8;
    __syncthreads();  // sm.scan and sm.res are rewritten by the next call
    return r;
}

// Row `row`'s state at level `level` > 0 (MB_LEVELS: the final one): mb_decide of the level
// before's state and histogram.
template <int LANES>
__device__ MbState mb_next_state(const MbWs &w, int row, int level, const MbSmem &sm) {
    return mb_decide<LANES>(*mb_slot(w, row, level - 1), mb_hist_of(w, row, level - 1), sm);
}

// Row `row`'s state at level `level` (every block derives it the same way).
template <int LANES>
__device__ MbState mb_level_state(const ParamSrc &ps, const MbWs &w, int row, int level, const MbSmem &sm) {
    return level == 0 ? mb_state0<LANES>(ps, w, row, sm) : mb_next_state<LANES>(w, row, level, sm);
}

// Chunk c's keys in the range of state s, added to row `row`'s histogram of the level.
__device__ void mb_hist_chunk(const float *__restrict__ logits, int n, const MbWs &w, int row, int level,
                              const MbState &s, int c, const MbSmem &sm) {
    unsigned *gh = mb_hist_of(w, row, level);
    __syncthreads();  // the block's previous chunk may still read sm.hist
    for (int b = threadIdx.x; b < 256; b += blockDim.x) sm.hist[b] = 0;
    __syncthreads();
    logits += row * w.stride;
    int i0;
    const int len = chunk_len_of(n, c, &i0);
    for (int i = i0 + (int)threadIdx.x; i < i0 + len; i += blockDim.x) {
        const float l = logits[i];
        if (!is_candidate(l) || l < s.floor) continue;
        const u64 k = rank_key(l, i);
        if ((k & s.mask) == s.prefix) atomicAdd(&sm.hist[(k >> s.shift) & 255u], 1u);
    }
    __syncthreads();
    for (int b = threadIdx.x; b < 256; b += blockDim.x)
        if (sm.hist[b]) atomicAdd(&gh[b], sm.hist[b]);
}

// FIRST: level 0 (its state from the scan and z), else `level` > 0 (from the level before): two
// kernels, each with the registers of its own derivation only.
template <bool FIRST>
__global__ void __launch_bounds__(MB_THREADS)
mb_hist_kernel(const float *__restrict__ logits, int n, ParamSrc ps, MbWs w, int level) {
    emx_pdl_trigger();
    emx_pdl_wait();
    const MbSmem sm = mb_smem();
    const int row = blockIdx.y;
    const MbState s = FIRST ? mb_state0<1>(ps, w, row, sm) : mb_next_state<1>(w, row, level, sm);
    if (blockIdx.x == 0 && threadIdx.x == 0) *mb_slot(w, row, level) = s;
    if (s.stop) return;  // the same for every thread
    mb_hist_chunk(logits, n, w, row, level, s, blockIdx.x, sm);
}

// Chunk c's keys at or above the final threshold, appended to row `row`'s first batch (when the
// range fits one: s.filtered && s.stop).
__device__ void mb_gather_chunk(const float *__restrict__ logits, int n, const MbWs &w, int row, const MbState &s,
                                int c) {
    logits += row * w.stride;
    int i0;
    const int len = chunk_len_of(n, c, &i0);
    for (int i = i0 + (int)threadIdx.x; i < i0 + len; i += blockDim.x) {
        const float l = logits[i];
        if (!is_candidate(l) || l < s.floor) continue;
        const u64 k = rank_key(l, i);
        if (k >= s.thr) {
            const int pos = atomicAdd(&w.nkeys[row], 1);
            if (pos < BATCH_CAP) w.keys[(size_t)row * BATCH_CAP + pos] = k;  // always: the select bounded it
        }
    }
}

__global__ void __launch_bounds__(MB_THREADS)
mb_gather_kernel(const float *__restrict__ logits, int n, MbWs w) {
    emx_pdl_trigger();
    emx_pdl_wait();
    const int row = blockIdx.y;
    const MbState s = mb_next_state<1>(w, row, MB_LEVELS, mb_smem());  // the final state
    if (blockIdx.x == 0 && threadIdx.x == 0) *mb_slot(w, row, MB_LEVELS) = s;
    if (!s.filtered || !s.stop) return;  // nothing to walk, or the tail resumes the select
    mb_gather_chunk(logits, n, w, row, s, blockIdx.x);
}

// Many-block passes launched: a process-wide count (a test hook: the path is really taken).
unsigned long long mb_passes_launched = 0;

// Enqueues the passes for w.rows rows on stream s. select: a row may need the radix select (else
// only the scan runs); maybe_z: a row may need z (top-p may be on); pdl: every pass with
// programmatic dependent launch (the kernel before them on s must be a kernel).
inline cudaError_t mb_launch(const float *logits, int n, const ParamSrc &ps, bool select, bool maybe_z, const MbWs &w,
                      cudaStream_t s, bool pdl = false) {
    const dim3 g1(w.G, w.stride ? w.rows : 1), gr(w.G, w.rows);
    cudaError_t e = EMX_LAUNCH(pdl, g1, MB_THREADS, 0, s, mb_scan_kernel, logits, n, w);
    if (e == cudaSuccess) mb_passes_launched++;
    if (e != cudaSuccess || !select) return e;
    if (maybe_z && (e = EMX_LAUNCH(pdl, gr, MB_THREADS, 0, s, mb_z_kernel, logits, n, ps, w)) != cudaSuccess) return e;
    for (int level = 0; level < MB_LEVELS; level++)
        if ((e = level == 0 ? EMX_LAUNCH(pdl, gr, MB_THREADS, 0, s, mb_hist_kernel<true>, logits, n, ps, w, level)
                            : EMX_LAUNCH(pdl, gr, MB_THREADS, 0, s, mb_hist_kernel<false>, logits, n, ps, w, level)) !=
            cudaSuccess)
            return e;
    return EMX_LAUNCH(pdl, gr, MB_THREADS, 0, s, mb_gather_kernel, logits, n, w);
}

}  // namespace

#endif
