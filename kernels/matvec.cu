// matvec.cu — out[b][r] = W[r] · x[b] for a weight matrix W [rows, cols] and 1..16 activation
// vectors: the decode step's matmuls (q/k/v, wo, gate/up, down, classifier), where every weight
// is read once per step and the step's time is the time to stream the weights from DRAM.
//
// Three variants, same results up to f32 rounding (fast: up to the int8 rounding of the
// activations, which the CPU backend shares):
//  plain  one thread per output row, a loop over the columns that dequantises each weight to f32
//         (emx_weight_at) and multiplies it with every batch row's f32 activation. Easy to check,
//         but slow: neighbouring threads read rows `cols` bytes apart, so each warp load touches
//         32 different cache lines.
//  fast   one warp per row, 4 rows per 128-thread block. Lane l reads the row's 16-byte chunks
//         l, l+32, ...: a warp reads 512 consecutive bytes per load instruction (fully coalesced,
//         128-bit loads). Float weights (f32/f16/bf16) are converted in registers and multiplied
//         with f32 activations (float4 loads). Quantised weights meet int8 activations
//         (emx_cuda_quantize_acts, the CPU's scheme): __dp4a multiplies 4 int8 pairs and adds
//         them in one instruction, exactly, and each group's integer sum is scaled once by
//         d_weight * d_act. q4: a 32-bit word's low nibbles (& 0x0f0f0f0f) are weights j..j+3
//         and its high nibbles weights j+16..j+19, so unpacking is two ANDs and a shift; the -8
//         offset is removed per group as 8 * sum(xq) (precomputed by the quantiser). q4_1 adds
//         m * d_act * sum(xq) instead. The lanes' partial sums meet in a 5-step shuffle tree.
//  fast_f32  the fast kernel's loads and mapping, but quantised weights are dequantised in
//         registers (nibble/byte -> f32) and meet f32 activations: the alternative to __dp4a,
//         kept so that `make bench-kernels` can measure the choice below. Float weights: = fast.
//
// A set (emx_cuda_matvec_set: q, k and v, which read the same activations): the fast kernel's
// warp-per-row mapping over the matrices' rows one after the other, one launch instead of three;
// each row runs the same code (fast_row), so each matrix's result is bitwise its own launch's.
//
// The fast variant's row code is matvec_rows.cuh's, which the fused decode matvecs
// (matvec_fused.cu: the input made in the kernel's prologue) run too.
//
// Batched (B <= 16): each weight chunk is loaded once into registers and used against all B
// activation rows (B accumulators per thread); the activations (B * cols * 1 or 4 bytes) are
// small and stay in L1/L2, so B sequences cost little more DRAM traffic than one.
//
// Bytes per call: rows * cols * bytes_per_weight (weights.h) + B * cols * (4 f32 | ~1.1 int8)
// from L2 per block + B * rows * 4 written. At q4 (0.5625 B/weight) a 4096 x 4096 matrix is 9.4 MB.
//
// Which to use: "fast". Decoding is bandwidth-bound, and only the fast variant reads coalesced
// 128-bit lines. Between the two ways of handling quantised weights in it, int8 activations +
// __dp4a beat dequantising to f32 in registers on ALU work. Dequantising costs per weight an
// unpack, an int-to-float conversion (listed well below the FMA rate in the CUDA programming
// guide's instruction throughput table) and one FMA per batch row; __dp4a costs one integer
// instruction per 4 weights per batch row plus a shared unpack, and no conversions. At H100
// bandwidth a q4 matvec streams ~6e12 weights/s, so a conversion per weight alone comes close to
// the conversion units' limit, and at B = 16 the FMA path issues ~4x more instructions; __dp4a
// keeps the kernel bandwidth-bound. It is also the CPU backend's scheme, so the GPU reproduces
// the CPU's integer group sums exactly. The plain variant is the twin the tests and
// `make bench-kernels` compare against (the measured ratio belongs there, on a GPU).
#include "kernels/matvec.h"

#include <limits.h>
#include <math.h>
#include <string.h>

#include "kernels/common.cuh"
#include "kernels/matvec_rows.cuh"

#define FAST_WARPS 4       // rows (warps) per block of the fast kernel
#define PLAIN_THREADS 128  // rows (threads) per block of the plain kernel

// ---------------------------------------------------------------------------------------------
// Activation quantisation: one warp per group of 32, one value per lane.

__global__ void __launch_bounds__(128) quantize_acts_kernel(const float *__restrict__ x, int n_groups,
                                                            int8_t *__restrict__ xq, float *__restrict__ xd,
                                                            int *__restrict__ xsum) {
    const int g = blockIdx.x * FAST_WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    const bool valid = g < n_groups;  // a warp past the end still joins the shuffles, with zeros
    const EmxQuantLane t = emx_quantize_lane(valid ? x[(size_t)g * 32 + lane] : 0.0f);
    if (valid) {
        xq[(size_t)g * 32 + lane] = (int8_t)t.q;
        if (lane == 0) {
            xd[g] = t.d;
            xsum[g] = t.sum;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Fast variant: a warp per row; the row code is matvec_rows.cuh's (fast_row).

template <int DT, int MAXB, bool SWIGLU, bool INT8>
__global__ void __launch_bounds__(128) matvec_fast_kernel(const void *__restrict__ W, const void *__restrict__ W2,
                                                          int rows, int cols, const EmxCudaActs a, int nb,
                                                          float *__restrict__ out, int accumulate) {
    const int r = blockIdx.x * FAST_WARPS + (threadIdx.x >> 5);
    if constexpr (MAXB == 1) nb = 1;  // a constant: no batch test between the unrolled loads
    fast_row<DT, MAXB, SWIGLU, INT8>(W, W2, rows, cols, r, r < rows, a, nb, out, accumulate);
}

template <int DT, int MAXB, bool INT8>
__global__ void __launch_bounds__(128) matvec_fast_set_kernel(const MatvecSet set, int cols, const EmxCudaActs a,
                                                              int nb) {
    const SetRow row = set_row(set, blockIdx.x * FAST_WARPS + (threadIdx.x >> 5));
    if constexpr (MAXB == 1) nb = 1;
    fast_row<DT, MAXB, false, INT8>(row.W, nullptr, row.rows, cols, row.r, row.r < row.rows, a, nb, row.out, 0);
}

// ---------------------------------------------------------------------------------------------
// Plain variant: one thread per row, every weight dequantised to f32 once for all nb rows.

template <int DT, int MAXB, bool SWIGLU>
__global__ void __launch_bounds__(PLAIN_THREADS) matvec_plain_kernel(const void *__restrict__ W,
                                                                     const void *__restrict__ W2, int rows, int cols,
                                                                     const float *__restrict__ x, int nb,
                                                                     float *__restrict__ out, int accumulate) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    if constexpr (MAXB == 1) nb = 1;
    float acc[MAXB], acc2[MAXB];
#pragma unroll
    for (int b = 0; b < MAXB; b++) acc[b] = acc2[b] = 0.0f;
    for (int c = 0; c < cols; c++) {
        const float w = emx_weight_at<DT>(W, rows, cols, r, c);
        const float w2 = SWIGLU ? emx_weight_at<DT>(W2, rows, cols, r, c) : 0.0f;
#pragma unroll
        for (int b = 0; b < MAXB; b++) {
            if (b >= nb) break;
            acc[b] = fmaf(w, x[(size_t)b * cols + c], acc[b]);
            if constexpr (SWIGLU) acc2[b] = fmaf(w2, x[(size_t)b * cols + c], acc2[b]);
        }
    }
#pragma unroll
    for (int b = 0; b < MAXB; b++) {
        if (b >= nb) break;
        float s = acc[b];
        if constexpr (SWIGLU) s = s / (1.0f + expf(-s)) * acc2[b];
        float *o = out + (size_t)b * rows + r;
        *o = accumulate ? *o + s : s;
    }
}

// ---------------------------------------------------------------------------------------------
// Launchers

template <int DT, int MAXB, bool SWIGLU>
static cudaError_t launch_matvec(int variant, const EmxCudaWeight *w, const void *w2, const EmxCudaActs *a, int nb,
                                 float *out, int accumulate, cudaStream_t stream) {
    const int rows = w->rows, cols = w->cols;
    if (variant == EMX_MATVEC_PLAIN) {
        const int blocks = (rows + PLAIN_THREADS - 1) / PLAIN_THREADS;
        matvec_plain_kernel<DT, MAXB, SWIGLU><<<blocks, PLAIN_THREADS, 0, stream>>>(w->data, w2, rows, cols, a->x, nb, out, accumulate);
    } else {
        const int blocks = (rows + FAST_WARPS - 1) / FAST_WARPS;
        // fast_f32 differs from fast only for quantised weights: no second kernel for float ones
        constexpr bool quantised = DT == EMX_Q8 || DT == EMX_Q4 || DT == EMX_Q4_1 || DT == EMX_Q4_1F;
        if constexpr (quantised) {
            if (variant == EMX_MATVEC_FAST_F32)
                matvec_fast_kernel<DT, MAXB, SWIGLU, false><<<blocks, FAST_WARPS * 32, 0, stream>>>(w->data, w2, rows, cols, *a, nb, out, accumulate);
            else
                matvec_fast_kernel<DT, MAXB, SWIGLU, true><<<blocks, FAST_WARPS * 32, 0, stream>>>(w->data, w2, rows, cols, *a, nb, out, accumulate);
        } else {
            matvec_fast_kernel<DT, MAXB, SWIGLU, true><<<blocks, FAST_WARPS * 32, 0, stream>>>(w->data, w2, rows, cols, *a, nb, out, accumulate);
        }
    }
    return cudaGetLastError();
}

template <int DT, int MAXB>
static cudaError_t launch_matvec_set(const MatvecSet &set, int total_rows, int cols, const EmxCudaActs *a, int nb,
                                     cudaStream_t stream) {
    const int blocks = (total_rows + FAST_WARPS - 1) / FAST_WARPS;
    matvec_fast_set_kernel<DT, MAXB, true><<<blocks, FAST_WARPS * 32, 0, stream>>>(set, cols, *a, nb);
    return cudaGetLastError();
}

// The argument checks shared by both launchers; 0 when the call can go ahead.
static int bad_call(int variant, const EmxCudaWeight *w, const EmxCudaActs *a, int batch, const float *out) {
    if (variant < 0 || variant >= EMX_MATVEC_VARIANTS || !w || !a || !out) return 1;
    if (batch < 1 || batch > EMX_MATVEC_MAX_BATCH || w->rows < 0 || w->cols < 1) return 1;
    if (emx_cuda_weight_bytes(w->dtype, (uint64_t)w->rows, (uint64_t)w->cols) == 0 && w->rows > 0) return 1;
    const bool quantised = w->dtype == EMX_Q8 || w->dtype == EMX_Q4 || w->dtype == EMX_Q4_1 || w->dtype == EMX_Q4_1F;
    if (variant == EMX_MATVEC_PLAIN) return a->x == nullptr;
    if (w->cols % 32) return 1;
    // 16-byte loads: the rows start at multiples of 16 bytes, and so must the arrays
    const bool int8 = quantised && variant == EMX_MATVEC_FAST;
    const uintptr_t base = (uintptr_t)w->data | (uintptr_t)(int8 ? (const void *)a->xq : (const void *)a->x);
    if (base % 16) return 1;
    return int8 ? !a->xq || !a->xd || !a->xsum : !a->x;
}

extern "C" const char *emx_matvec_variant_name(int variant) {
    switch (variant) {
    case EMX_MATVEC_PLAIN: return "plain";
    case EMX_MATVEC_FAST: return "fast";
    case EMX_MATVEC_FAST_F32: return "fast_f32";
    default: return nullptr;
    }
}

extern "C" int emx_matvec_variant_from_name(const char *name) {
    for (int v = 0; v < EMX_MATVEC_VARIANTS; v++)
        if (name && strcmp(name, emx_matvec_variant_name(v)) == 0) return v;
    return -1;
}

extern "C" cudaError_t emx_cuda_quantize_acts(const float *x, int cols, int batch, int8_t *xq, float *xd, int *xsum,
                                              cudaStream_t stream) {
    if (cols < 1 || cols % 32 || batch < 0) return cudaErrorInvalidValue;
    const int groups = batch * (cols / 32);
    if (groups == 0) return cudaSuccess;
    quantize_acts_kernel<<<(groups + FAST_WARPS - 1) / FAST_WARPS, FAST_WARPS * 32, 0, stream>>>(x, groups, xq, xd, xsum);
    return cudaGetLastError();
}

extern "C" cudaError_t emx_cuda_matvec(int variant, const EmxCudaWeight *w, const EmxCudaActs *a, int batch, float *out,
                                       int accumulate, cudaStream_t stream) {
    if (bad_call(variant, w, a, batch, out)) return cudaErrorInvalidValue;
    if (w->rows == 0) return cudaSuccess;
    // B = 1 gets its own instantiation: no batch loop left in the decode step's hot kernel
    if (batch == 1) {
        EMX_DISPATCH_DTYPE(w->dtype, return launch_matvec<DT, 1, false>(variant, w, nullptr, a, 1, out, accumulate, stream));
    }
    EMX_DISPATCH_DTYPE(w->dtype, return launch_matvec<DT, EMX_MATVEC_MAX_BATCH, false>(variant, w, nullptr, a, batch, out, accumulate, stream));
    return cudaSuccess;
}

extern "C" cudaError_t emx_cuda_matvec_swiglu(int variant, const EmxCudaWeight *gate, const EmxCudaWeight *up,
                                              const EmxCudaActs *a, int batch, float *out, cudaStream_t stream) {
    if (bad_call(variant, gate, a, batch, out) || !up || up->dtype != gate->dtype || up->rows != gate->rows ||
        up->cols != gate->cols)
        return cudaErrorInvalidValue;
    if (gate->rows == 0) return cudaSuccess;
    if (batch == 1) {
        EMX_DISPATCH_DTYPE(gate->dtype, return launch_matvec<DT, 1, true>(variant, gate, up->data, a, 1, out, 0, stream));
    }
    EMX_DISPATCH_DTYPE(gate->dtype, return launch_matvec<DT, EMX_MATVEC_MAX_BATCH, true>(variant, gate, up->data, a, batch, out, 0, stream));
    return cudaSuccess;
}

extern "C" cudaError_t emx_cuda_matvec_set(int variant, const EmxCudaWeight *const *w, float *const *out, int n,
                                           const EmxCudaActs *a, int batch, cudaStream_t stream) {
    if (variant != EMX_MATVEC_FAST) return cudaErrorInvalidValue;
    MatvecSet set;
    long total = 0;
    const cudaError_t err = fill_matvec_set(
        &set, w, out, n, [&](const EmxCudaWeight *wi, const float *o) { return bad_call(variant, wi, a, batch, o) != 0; },
        &total);
    if (err != cudaSuccess) return err;
    if (total == 0) return cudaSuccess;
    if (total > INT_MAX - FAST_WARPS) return cudaErrorInvalidValue;
    if (batch == 1) {
        EMX_DISPATCH_DTYPE(w[0]->dtype, return launch_matvec_set<DT, 1>(set, (int)total, w[0]->cols, a, 1, stream));
    }
    EMX_DISPATCH_DTYPE(w[0]->dtype, return launch_matvec_set<DT, EMX_MATVEC_MAX_BATCH>(set, (int)total, w[0]->cols, a, batch, stream));
    return cudaSuccess;
}
