// lab_weight.h — a random weight matrix for the lab's dense families (matvec, gemm, embedding,
// swiglu): quantised by the CPU's emx_quantize (the model file's layout, what the CPU twins
// read), repacked to the device layout (kernels/weights.h) and uploaded.
#ifndef ENTROPIX_TOOLS_LAB_WEIGHT_H
#define ENTROPIX_TOOLS_LAB_WEIGHT_H

#include "tools/lab/lab.h"

#include "kernels/weights.h"

extern "C" {
#include "base/dtype.h"
#include "runtime/cpu/cpu_matmul.h"
}

struct LabWeight {
    uint32_t dtype;
    int rows, cols;
    std::vector<uint8_t> file;  // the model file's layout
    LabBuf<uint8_t> *dev = nullptr;
    EmxCudaWeight w;

    LabWeight(uint32_t dt, int r, int c, uint64_t seed) : dtype(dt), rows(r), cols(c) {
        std::vector<float> f = lab_random((size_t)r * c, seed);
        const uint64_t bytes = emx_tensor_bytes(dt, (uint64_t)r, (uint64_t)c);
        if (!bytes) {
            fprintf(stderr, "lab: a %s matrix cannot have %d columns (quantised types need a multiple of 32)\n",
                    emx_dtype_name(dt), c);
            exit(2);
        }
        file.resize(bytes);
        if (dt == EMX_F32) {
            memcpy(file.data(), f.data(), bytes);
        } else if (dt == EMX_F16 || dt == EMX_BF16) {
            uint16_t *h = (uint16_t *)file.data();
            for (size_t i = 0; i < f.size(); i++) h[i] = dt == EMX_F16 ? emx_f32_to_f16(f[i]) : emx_f32_to_bf16(f[i]);
        } else {
            emx_quantize(dt, f.data(), (uint64_t)r, (uint64_t)c, file.data());
        }
        std::vector<uint8_t> packed(bytes);
        if (emx_cuda_repack_weight(dt, file.data(), (uint64_t)r, (uint64_t)c, packed.data())) {
            fprintf(stderr, "lab: cannot repack a %s %dx%d matrix\n", emx_dtype_name(dt), r, c);
            exit(1);
        }
        dev = new LabBuf<uint8_t>(packed);
        w = EmxCudaWeight{dt, r, c, dev->p};
    }
    ~LabWeight() { delete dev; }
    LabWeight(const LabWeight &) = delete;
    LabWeight &operator=(const LabWeight &) = delete;

    double bytes() const { return (double)file.size(); }
    // row r dequantised by the CPU (emx_dequantize_row)
    std::vector<float> row(int r) const {
        std::vector<float> out((size_t)cols);
        emx_dequantize_row(dtype, file.data(), (uint64_t)rows, (uint64_t)cols, (uint64_t)r, out.data());
        return out;
    }
    // q8/q4/q4_1: the CPU's integer dot product of row r with activations quantised by
    // emx_quantize_acts_scalar (q [cols], d and s [cols/32]), what the fast matvec reproduces
    double int_dot(int r, const int8_t *q, const float *d, const float *s) const {
        const int n = cols;
        const size_t qbytes = (size_t)rows * n / (dtype == EMX_Q8 ? 1 : 2);
        const uint8_t *quants = file.data() + (size_t)r * n / (dtype == EMX_Q8 ? 1 : 2);
        const uint16_t *scales = (const uint16_t *)(file.data() + qbytes) + (size_t)r * (n / 32);
        if (dtype == EMX_Q8) return emx_dot_q8_scalar((const int8_t *)quants, scales, q, d, n);
        if (dtype == EMX_Q4) return emx_dot_q4_scalar(quants, scales, q, d, s, n);
        const uint16_t *mins = scales + (size_t)rows * (n / 32);  // q4_1: the mins follow all the scales
        return emx_dot_q4_1_scalar(quants, scales, mins, q, d, s, n);
    }
};

// --dtype NAME (f32 f16 bf16 q8 q4 q4_1), else def; an unknown name is an error (exit 2).
static inline uint32_t lab_dtype(Lab *L, const char *def) {
    const char *name = lab_str(L, "--dtype", def);
    const int dt = emx_dtype_from_name(name);
    if (dt < 0) {
        fprintf(stderr, "lab %s: --dtype '%s': not one of f32 f16 bf16 q8 q4 q4_1\n", L->family, name);
        exit(2);
    }
    return (uint32_t)dt;
}

// lab_dtype for a family whose CPU twin takes LabWeight::int_dot for the quantised types: q4_1f
// (the GGUF Q4_K holder), which the fast kernels read with int8 activations, has no integer twin
// there, so it is refused (exit 2) rather than FAILed against the float reference.
static inline uint32_t lab_dtype_int_dot(Lab *L, const char *def) {
    const uint32_t dt = lab_dtype(L, def);
    if (dt == EMX_Q4_1F) {
        fprintf(stderr, "lab %s: --dtype q4_1f: not one of f32 f16 bf16 q8 q4 q4_1\n", L->family);
        exit(2);
    }
    return dt;
}

#endif
