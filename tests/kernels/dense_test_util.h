// dense_test_util.h — helpers of the dense-kernel tests (tests/kernels/test_{embedding,rmsnorm,
// matvec,gemm,rope,swiglu}.cpp): deterministic random data, device buffers, random weight
// matrices in every dtype (quantised by the CPU's emx_quantize, uploaded in the device layout),
// and the f64 reference dot product of a dequantised weight row. Device buffers and the random
// generator are kb_util.h's.
#ifndef ENTROPIX_DENSE_TEST_UTIL_H
#define ENTROPIX_DENSE_TEST_UTIL_H

#include <criterion/criterion.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <vector>

extern "C" {
#include "runtime/cpu/cpu_matmul.h"
#include "runtime/cpu/cpu_ops.h"
#include "base/dtype.h"
}
#include "kb_util.h"
#include "kernels/weights.h"

static const uint32_t kAllDtypes[] = {EMX_F32, EMX_F16, EMX_BF16, EMX_Q8, EMX_Q4, EMX_Q4_1, EMX_Q4_1F};

static inline std::vector<float> random_floats(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
    Rng r(seed);
    std::vector<float> v(n);
    for (auto &x : v) x = r.uniform(lo, hi);
    return v;
}

// A random [rows, cols] matrix of `dtype`: `file` holds it in the model file's layout (what the
// CPU twins read), `dev` the device layout of weights.h (what the kernels read).
struct TestWeight {
    uint32_t dtype;
    int rows, cols;
    std::vector<uint8_t> file;
    DevBuf<uint8_t> *dev = nullptr;
    EmxCudaWeight w;

    TestWeight(uint32_t dt, int r, int c, uint64_t seed) : dtype(dt), rows(r), cols(c) {
        std::vector<float> f = random_floats((size_t)r * c, seed);
        // a few larger weights, as real matrices have: the quantisers' scales must follow them
        Rng rng(seed + 1);
        for (size_t i = 0; i < f.size(); i += 97) f[i] *= rng.uniform(2.0f, 6.0f);
        store(f);
    }
    // The given weights [r][c] (row-major f32), stored in dtype dt.
    TestWeight(uint32_t dt, int r, int c, const std::vector<float> &f) : dtype(dt), rows(r), cols(c) { store(f); }
    void store(const std::vector<float> &f) {
        const uint32_t dt = dtype;
        const int r = rows, c = cols;
        cr_assert_eq(f.size(), (size_t)r * c);
        const uint64_t bytes = emx_tensor_bytes(dt, (uint64_t)r, (uint64_t)c);
        cr_assert_gt(bytes, 0, "dtype %u does not fit %d x %d", dt, r, c);
        file.resize(bytes);
        if (dt == EMX_F32) {
            memcpy(file.data(), f.data(), bytes);
        } else if (dt == EMX_F16 || dt == EMX_BF16) {
            uint16_t *h = (uint16_t *)file.data();
            for (size_t i = 0; i < f.size(); i++) h[i] = dt == EMX_F16 ? emx_f32_to_f16(f[i]) : emx_f32_to_bf16(f[i]);
        } else {
            emx_quantize(dt, f.data(), (uint64_t)r, (uint64_t)c, file.data());
        }
        cr_assert_eq(emx_cuda_weight_bytes(dt, (uint64_t)r, (uint64_t)c), bytes);
        std::vector<uint8_t> packed(bytes);
        cr_assert_eq(emx_cuda_repack_weight(dt, file.data(), (uint64_t)r, (uint64_t)c, packed.data()), 0);
        dev = new DevBuf<uint8_t>(packed);
        w = EmxCudaWeight{dt, r, c, dev->p};
    }
    ~TestWeight() { delete dev; }
    TestWeight(const TestWeight &) = delete;
    TestWeight &operator=(const TestWeight &) = delete;

    std::vector<float> row(int r) const {
        std::vector<float> out((size_t)cols);
        emx_dequantize_row(dtype, file.data(), (uint64_t)rows, (uint64_t)cols, (uint64_t)r, out.data());
        return out;
    }
    // q8/q4/q4_1 pieces of the file layout, for the CPU's integer dot products
    const uint8_t *quants(int r) const {
        return file.data() + (size_t)r * cols / (dtype == EMX_Q8 ? 1 : 2);
    }
    const uint16_t *scales(int r) const {
        const size_t qbytes = (size_t)rows * cols / (dtype == EMX_Q8 ? 1 : 2);
        return (const uint16_t *)(file.data() + qbytes) + (size_t)r * (cols / 32);
    }
    const uint16_t *mins(int r) const {  // q4_1: the mins follow all the scales
        return scales(r) + (size_t)rows * (cols / 32);
    }
    const float *scales32(int r) const {  // q4_1f: f32 scales, then f32 mins
        return (const float *)(const void *)(file.data() + (size_t)rows * cols / 2) + (size_t)r * (cols / 32);
    }
    const float *mins32(int r) const { return scales32(r) + (size_t)rows * (cols / 32); }
};

// Dot product in double of dequantised weight row r with x [cols]; *mag = sum |w_j x_j|, the
// scale of the rounding error of any f32 evaluation of that sum.
static inline double ref_dot(const TestWeight &tw, int r, const float *x, double *mag) {
    std::vector<float> w = tw.row(r);
    double s = 0, m = 0;
    for (int j = 0; j < tw.cols; j++) {
        s += (double)w[j] * x[j];
        m += fabs((double)w[j] * x[j]);
    }
    if (mag) *mag = m;
    return s;
}

static inline bool is_quantised(uint32_t dt) {
    return dt == EMX_Q8 || dt == EMX_Q4 || dt == EMX_Q4_1 || dt == EMX_Q4_1F;
}

// q4_1 and q4_1f compute nib * d + m, which a GPU may fuse into one FMA: one rounding less.
static inline bool has_min(uint32_t dt) { return dt == EMX_Q4_1 || dt == EMX_Q4_1F; }

#endif
