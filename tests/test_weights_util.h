// test_weights_util.h — f32 test weights stored in any dtype of the model format, for the
// matmul tests. Header-only, like the other test helpers.
#ifndef ENTROPIX_TEST_WEIGHTS_UTIL_H
#define ENTROPIX_TEST_WEIGHTS_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"

// w [rows][cols] f32 stored as `dtype` in a fresh buffer (free it), with `pad` spare bytes at
// the end (SIMD tests that read a little past a row). NULL if out of memory.
static inline void *test_encode_weights(uint32_t dtype, const float *w, int rows, int cols, size_t pad) {
    const size_t n = (size_t)rows * cols;
    void *out = malloc(emx_tensor_bytes(dtype, rows, cols) + pad);
    if (!out) return NULL;
    switch (dtype) {
    case EMX_F32: memcpy(out, w, n * sizeof(float)); break;
    case EMX_BF16:
        for (size_t i = 0; i < n; i++) ((uint16_t *)out)[i] = emx_f32_to_bf16(w[i]);
        break;
    case EMX_F16:
        for (size_t i = 0; i < n; i++) ((uint16_t *)out)[i] = emx_f32_to_f16(w[i]);
        break;
    default: emx_quantize(dtype, w, rows, cols, out); break;
    }
    return out;
}

#endif
