// ggml_dequant.h — decode ggml tensor data (GGUF's element types) to f32 rows.
//
// The converter reads every source tensor through this one function: safetensors F32/F16/BF16
// and llama2.c float32 use the same type numbers (enum ggml_type in gguf.h).
#ifndef ENTROPIX_GGML_DEQUANT_H
#define ENTROPIX_GGML_DEQUANT_H

#include <stdint.h>

#include "runtime/convert/gguf.h"

// 1 if ggml_dequantize_rows can decode this type: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0, Q4_K, Q5_K, Q6_K.
int ggml_dequant_supported(uint32_t type);

// Bytes of one row of `cols` elements; 0 if the type is unknown or cols is not a multiple of
// its block.
uint64_t ggml_row_bytes(uint32_t type, uint64_t cols);

// Decodes rows [r0, r0 + n) of a row-major [rows, cols] tensor starting at `data` (which need
// not be aligned) into out[n][cols]. Returns 0, or -1 if the type is not supported.
int ggml_dequantize_rows(uint32_t type, const void *data, uint64_t cols, uint64_t r0, uint64_t n, float *out);

#endif
