// test_warp.cpp — every shuffle and vote against a CPU computation of CUDA's definition, for all
// widths, several deltas and lane masks, partial masks in divergent branches, the classic
// butterfly reduction, and kernels/common.cuh's warp reductions (one rendezvous here) against
// the five shuffles they stand for.
#include <criterion/criterion.h>

#include <math.h>
#include <string.h>

#include <random>
#include <vector>

#include "emu_test.h"
#include "kernels/common.cuh"

#define FULL 0xffffffffu

// out[op][t] for op = shfl, up, down, xor, ballot, any, all.
__global__ void warp_ops(const int *in, int *out, int n, int src, unsigned delta, int lane_mask, int width) {
    int t = threadIdx.x, v = in[t];
    out[0 * n + t] = __shfl_sync(FULL, v, src + t, width);
    out[1 * n + t] = __shfl_up_sync(FULL, v, delta, width);
    out[2 * n + t] = __shfl_down_sync(FULL, v, delta, width);
    out[3 * n + t] = __shfl_xor_sync(FULL, v, lane_mask, width);
    out[4 * n + t] = (int)__ballot_sync(FULL, v & 1);
    out[5 * n + t] = __any_sync(FULL, v > 90);
    out[6 * n + t] = __all_sync(FULL, v > 2);
}

// CUDA's definitions, one lane at a time (warps of 32, segments of `width` lanes).
static std::vector<int> cpu_warp_ops(const std::vector<int> &in, int src, unsigned delta, int lane_mask, int width) {
    int n = (int)in.size();
    std::vector<int> out(7 * n);
    for (int t = 0; t < n; t++) {
        int warp = t / 32 * 32, lane = t % 32, seg = lane / width * width;
        out[0 * n + t] = in[warp + seg + ((src + t) & (width - 1))];
        out[1 * n + t] = lane - seg >= (int)delta ? in[t - delta] : in[t];
        out[2 * n + t] = lane - seg + (int)delta < width ? in[t + delta] : in[t];
        int x = lane ^ lane_mask;
        out[3 * n + t] = x >= seg + width ? in[t] : in[warp + x];
        unsigned ballot = 0;
        bool any = false, all = true;
        for (int l = 0; l < 32; l++) {
            int u = in[warp + l];
            ballot |= (unsigned)(u & 1) << l;
            any = any || u > 90;
            all = all && u > 2;
        }
        out[4 * n + t] = (int)ballot;
        out[5 * n + t] = any;
        out[6 * n + t] = all;
    }
    return out;
}

Test(emu_warp, every_shuffle_and_vote_matches_cpu) {
    const int n = 96; // three warps
    std::vector<int> in(n);
    for (int i = 0; i < n; i++) in[i] = (i * 53 + 7) % 97;
    DeviceBuffer<int> din(in), dout(7 * n);
    for (int width : {32, 16, 8, 4, 2, 1}) {
        for (unsigned delta : {1u, 3u, 16u}) {
            for (int lane_mask : {1, 6, 16, 31}) {
                int src = (int)delta * 5;
                warp_ops<<<1, n>>>(din.ptr, dout.ptr, n, src, delta, lane_mask, width);
                cr_assert_eq(cudaGetLastError(), cudaSuccess);
                std::vector<int> got = dout.to_host(), want = cpu_warp_ops(in, src, delta, lane_mask, width);
                for (int i = 0; i < 7 * n; i++)
                    cr_assert_eq(got[i], want[i], "op %d thread %d width %d delta %u mask %d: %d != %d", i / n,
                                 i % n, width, delta, lane_mask, got[i], want[i]);
            }
        }
    }
}

// Values of every shuffleable width travel intact (8-byte doubles, 2-byte halves).
__global__ void shuffle_types(const double *d, double *dout, float *fout) {
    int t = threadIdx.x;
    dout[t] = __shfl_xor_sync(FULL, d[t], 1);
    __half h = __shfl_down_sync(FULL, __float2half((float)t + 0.5f), 2);
    fout[t] = __half2float(h);
}

Test(emu_warp, doubles_and_halves) {
    std::vector<double> d(32);
    for (int i = 0; i < 32; i++) d[i] = 1.0 / (i + 3);
    DeviceBuffer<double> dd(d), dout(32);
    DeviceBuffer<float> fout(32);
    shuffle_types<<<1, 32>>>(dd.ptr, dout.ptr, fout.ptr);
    cr_assert_eq(cudaGetLastError(), cudaSuccess);
    std::vector<double> got = dout.to_host();
    std::vector<float> halves = fout.to_host();
    for (int i = 0; i < 32; i++) {
        cr_assert_eq(got[i], d[i ^ 1]);
        float want = (float)(i + 2 < 32 ? i + 2 : i) + 0.5f; // exact in half
        cr_assert_eq(halves[i], want);
    }
}

// Two halves of each warp in different branches, each shuffling with its own 16-lane mask, then
// meeting again at __syncwarp.
__global__ void partial_masks(const int *in, int *out) {
    int t = threadIdx.x, lane = t % 32, v = in[t], r;
    if (lane < 16)
        r = __shfl_sync(0x0000ffffu, v, 15 - lane);
    else
        r = __shfl_xor_sync(0xffff0000u, v, 1);
    __syncwarp();
    out[t] = r + (int)__ballot_sync(FULL, lane < 16 ? r > 50 : 0) * 0;
}

Test(emu_warp, partial_masks_in_divergent_branches) {
    const int n = 64;
    std::vector<int> in(n);
    for (int i = 0; i < n; i++) in[i] = (i * 31) % 101;
    DeviceBuffer<int> din(in), dout(n);
    partial_masks<<<1, n>>>(din.ptr, dout.ptr);
    cr_assert_eq(cudaGetLastError(), cudaSuccess);
    std::vector<int> got = dout.to_host();
    for (int t = 0; t < n; t++) {
        int warp = t / 32 * 32, lane = t % 32;
        int want = lane < 16 ? in[warp + 15 - lane] : in[warp + (lane ^ 1)];
        cr_assert_eq(got[t], want, "thread %d", t);
    }
}

// The butterfly sum: every lane ends with the warp's total.
__global__ void warp_sum(const float *x, float *out) {
    float v = x[threadIdx.x];
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(FULL, v, o);
    out[threadIdx.x] = v;
}

Test(emu_warp, butterfly_sum) {
    const int n = 128;
    std::vector<float> x(n);
    for (int i = 0; i < n; i++) x[i] = (float)(i % 17) - 8.0f; // small integers: exact sums
    DeviceBuffer<float> dx(x), dout(n);
    warp_sum<<<1, n>>>(dx.ptr, dout.ptr);
    cr_assert_eq(cudaGetLastError(), cudaSuccess);
    std::vector<float> got = dout.to_host();
    for (int t = 0; t < n; t++) {
        float want = 0.0f;
        for (int l = 0; l < 32; l++) want += x[t / 32 * 32 + l];
        cr_assert_eq(got[t], want, "thread %d", t);
    }
}

// A block of 48 threads: the second warp has 16 lanes. Votes see only the lanes that exist; a
// shuffle that stays inside them works.
__global__ void partial_warp(int *out) {
    int t = threadIdx.x;
    out[t] = (int)__ballot_sync(FULL, 1);
    out[48 + t] = __all_sync(FULL, t >= 0);
    out[96 + t] = __shfl_xor_sync(FULL, t, 8);
}

Test(emu_warp, partial_last_warp) {
    DeviceBuffer<int> dout(3 * 48);
    partial_warp<<<1, 48>>>(dout.ptr);
    cr_assert_eq(cudaGetLastError(), cudaSuccess);
    std::vector<int> out = dout.to_host();
    for (int t = 0; t < 48; t++) {
        cr_assert_eq((unsigned)out[t], t < 32 ? 0xffffffffu : 0x0000ffffu, "thread %d", t);
        cr_assert_eq(out[48 + t], 1);
        cr_assert_eq(out[96 + t], t ^ 8);
    }
}

// kernels/common.cuh's emx_warp_sum, emx_warp_max and emx_warp_sum_int (emu::warp_reduce: one
// rendezvous) beside the loop the GPU runs, written out here: bitwise the same in every lane.
__global__ void common_reductions(const float *x, const int *q, float *out, int *iout, int n) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    float s = x[t], m = x[t];
    int is = q[t];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(FULL, s, o);
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(FULL, m, o));
    for (int o = 16; o > 0; o >>= 1) is += __shfl_xor_sync(FULL, is, o);
    out[t] = emx_warp_sum(x[t]);
    out[n + t] = s;
    out[2 * n + t] = emx_warp_max(x[t]);
    out[3 * n + t] = m;
    iout[t] = emx_warp_sum_int(q[t]);
    iout[n + t] = is;
}

Test(emu_warp, common_reductions_equal_the_five_shuffles) {
    // Magnitudes from 1e-8 to 1e8 with both signs (a float sum whose value depends on the order
    // of its adds), signed zeros, and warps holding infinities or NaNs; ints up to 2^25.
    const int n = 256;
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
    std::uniform_int_distribution<int> expo(-8, 8), ints(-(1 << 25), 1 << 25);
    std::vector<float> x(n);
    std::vector<int> q(n);
    for (int i = 0; i < n; i++) {
        x[i] = mant(rng) * powf(10.0f, (float)expo(rng));
        q[i] = ints(rng);
    }
    x[3] = -0.0f, x[4] = 0.0f;                          // warp 0: signed zeros among others
    x[40] = INFINITY, x[41] = -INFINITY;                // warp 1: inf - inf
    x[70] = NAN;                                        // warp 2: a NaN (fmaxf drops it, the sum keeps it)
    for (int i = 96; i < 128; i++) x[i] = i % 2 ? -0.0f : 0.0f;  // warp 3: zeros only (+0 + -0 = +0)
    DeviceBuffer<float> dx(x), dout(4 * n);
    DeviceBuffer<int> dq(q), diout(2 * n);
    auto outs = emu::run_both_schedules([&] {
        common_reductions<<<2, n / 2>>>(dx.ptr, dq.ptr, dout.ptr, diout.ptr, n);
        cr_assert_eq(cudaGetLastError(), cudaSuccess);
        std::vector<float> f = dout.to_host();
        std::vector<int> i = diout.to_host();
        std::vector<uint32_t> bits(6 * n);
        memcpy(bits.data(), f.data(), 4 * n * sizeof(float));
        memcpy(bits.data() + 4 * n, i.data(), 2 * n * sizeof(int));
        return bits;
    });
    cr_assert(outs.first == outs.second, "the reductions depend on the thread schedule");
    const std::vector<uint32_t> &b = outs.first;
    const char *what[3] = {"emx_warp_sum", "emx_warp_max", "emx_warp_sum_int"};
    // But the sign of a zero that fmaxf returns for +0 and -0: C leaves it open, and GCC treats
    // fmaxf as commutative (it may swap the operands, so the loop's own sign varies with the code
    // around it). No kernel depends on it (their maxima are of |x|, or are subtracted).
    for (int k = 0; k < 3; k++)
        for (int t = 0; t < n; t++) {
            const uint32_t got = b[2 * k * n + t], want = b[(2 * k + 1) * n + t];
            if (k == 1 && (got | want) == 0x80000000u) continue;
            cr_assert_eq(got, want, "%s, thread %d: bits 0x%08x, the shuffles 0x%08x", what[k], t, got, want);
        }
    // Not a test that cannot fail: the sums of warp 0 differ in their last bits from a sum in
    // lane order, so a reduction in any other order would differ from the shuffles.
    float in_order = 0.0f;
    for (int l = 0; l < 32; l++) in_order += x[l];
    float got;
    memcpy(&got, &b[0], 4);
    cr_assert(isnan(got) == false && got != in_order, "warp 0's sum %.9g equals the lane-order sum: pick other data", got);
}
