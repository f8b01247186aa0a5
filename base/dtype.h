// dtype.h — element types of tensors: sizes, half-precision conversions, group quantisation.
// Shared by the converter (which writes them) and the runtime (which reads them).
#ifndef ENTROPIX_DTYPE_H
#define ENTROPIX_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/model_format.h"

// emx_tensor_bytes (the bytes of a [rows, cols] tensor of a dtype): base/model_format.h.
const char *emx_dtype_name(uint32_t dtype);
// Parses "f32", "f16", "bf16", "q8", "q4", "q4_1", "q4_1f"; returns -1 if unknown.
int emx_dtype_from_name(const char *name);

static inline float emx_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// Round to nearest even, NaN kept quiet.
static inline uint16_t emx_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float emx_f16_to_f32(uint16_t h);
uint16_t emx_f32_to_f16(float f);
// dst[i] = emx_f32_to_f16(src[i]), i < n: a row rounded to f16 (the way back, widening, is
// emx_dequantize_row with EMX_F16).
void emx_f32_to_f16_row(uint16_t *dst, const float *src, size_t n);

// Dequantise one row of `cols` weights of a tensor stored as `dtype` (row r of [rows, cols]).
// For q8/q4/q4_1/q4_1f `data` points at the start of the tensor (quants, then scales, then
// q4_1's and q4_1f's mins).
void emx_dequantize_row(uint32_t dtype, const void *data, uint64_t rows, uint64_t cols,
                        uint64_t r, float *out);

// Quantise a whole [rows, cols] f32 matrix into `out` (emx_tensor_bytes(dtype, rows, cols)
// bytes). Symmetric per group of 32 with one f16 scale: q8 uses d = max|w| / 127 (as llama.cpp's
// Q8_0); q4 searches scales near max|w| / -8 for the least squared error of the group (see
// q4_best_scale in dtype.c; llama.cpp's Q4_0 uses max|w| / -8 itself). q4_1 is asymmetric,
// w = k*d + m, k in 0..15: it starts from m = min, d = (max - min) / 15 (llama.cpp's Q4_1) and
// keeps a least-squares refit of d and m when that leaves less squared error (q4_1_best); q4_1f
// makes the same fit and keeps d and m in f32 (its purpose is Q4_K's blocks, copied exactly by the
// converter, not this quantiser).
void emx_quantize(uint32_t dtype, const float *w, uint64_t rows, uint64_t cols, void *out);

#endif
