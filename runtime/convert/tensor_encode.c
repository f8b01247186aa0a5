// tensor_encode.c — source rows into our dtypes: exact block copies, else quantisation.
#include "runtime/convert/tensor_encode.h"

#include <string.h>

#include "base/dtype.h"
#include "base/model_format.h"
#include "runtime/convert/ggml_dequant.h"
#include "runtime/convert/gguf.h"

int te_exact_copy(uint32_t dtype, uint32_t src_type) {
    return (dtype == EMX_Q8 && src_type == GGML_Q8_0) || (dtype == EMX_Q4 && src_type == GGML_Q4_0) ||
           (dtype == EMX_Q4_1 && src_type == GGML_Q4_1) || (dtype == EMX_Q4_1F && src_type == GGML_Q4_K);
}

int te_parts(uint32_t dtype, uint64_t cols, uint64_t *qrow, uint64_t *prow) {
    const uint64_t ng = cols / EMX_GROUP_SIZE;
    switch (dtype) {
    case EMX_Q8: *qrow = cols, *prow = ng * 2; return 1;
    case EMX_Q4: *qrow = cols / 2, *prow = ng * 2; return 1;
    case EMX_Q4_1: *qrow = cols / 2, *prow = ng * 2; return 2;
    case EMX_Q4_1F: *qrow = cols / 2, *prow = ng * 4; return 2;
    default: return 0;
    }
}

// ggml Q8_0 / Q4_0 / Q4_1 blocks hold exactly what q8 / q4 / q4_1 store: per 32 weights an f16 d
// (Q4_1: then an f16 m) and the quants in the same order (Q8_0: 32 int8; Q4_0/Q4_1: 16 bytes, byte
// j holding weight j low and j+16 high, Q4_0 with the same -8 offset as q4).
static void copy_32_blocks(uint32_t dtype, uint32_t src_type, const void *src, uint64_t cols, uint64_t r0,
                           uint64_t n, void *out) {
    const uint64_t ng = cols / EMX_GROUP_SIZE, qbytes = dtype == EMX_Q8 ? 32 : 16, head = dtype == EMX_Q4_1 ? 4 : 2;
    uint8_t *q = out;                                       // [n][ng][qbytes]
    uint8_t *d = q + n * ng * qbytes, *m = d + n * ng * 2;  // [n][ng] f16 each
    for (uint64_t r = 0; r < n; r++)
        for (uint64_t g = 0; g < ng; g++) {
            const uint8_t *b = (const uint8_t *)src + (r0 + r) * ggml_row_bytes(src_type, cols) + g * ggml_block_bytes(src_type);
            memcpy(d + (r * ng + g) * 2, b, 2);
            if (dtype == EMX_Q4_1) memcpy(m + (r * ng + g) * 2, b + 2, 2);
            memcpy(q + (r * ng + g) * qbytes, b + head, qbytes);
        }
}

// The 6-bit (scale, min) of sub-block j of a K-quant block's 12 scale bytes (as ggml_dequant.c).
static void k_scale_min(const uint8_t *s, int j, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

// Q4_K (144 bytes / 256: f16 d, f16 dmin, 12 scale bytes, 128 nibble bytes; sub-block s of 32
// weights in the low (s even) or high (s odd) nibbles of qs[32 (s/2) .. +32]) -> q4_1f groups:
// d_s = d * sc_s and m_s = -(dmin * min_s), both exact in f32 (11-bit x 6-bit significands), so
// nibble * d_s + m_s is the value ggml computes, d_s * q - dmin * min_s, to the bit.
static void copy_q4_k(const void *src, uint64_t cols, uint64_t r0, uint64_t n, void *out) {
    const uint64_t ng = cols / EMX_GROUP_SIZE;
    uint8_t *q = out;                                    // [n][ng][16]
    float *d = (float *)(void *)(q + n * ng * 16), *m = d + n * ng;  // [n][ng] f32 each
    for (uint64_t r = 0; r < n; r++)
        for (uint64_t g = 0; g < ng; g++) {
            const uint8_t *b = (const uint8_t *)src + (r0 + r) * ggml_row_bytes(GGML_Q4_K, cols) + g / 8 * 144;
            const int s = (int)(g % 8);
            uint16_t hd, hm;
            memcpy(&hd, b, 2);
            memcpy(&hm, b + 2, 2);
            int sc, mn;
            k_scale_min(b + 4, s, &sc, &mn);
            d[r * ng + g] = emx_f16_to_f32(hd) * (float)sc;
            m[r * ng + g] = -(emx_f16_to_f32(hm) * (float)mn);
            const uint8_t *qs = b + 16 + 32 * (s / 2);
            uint8_t *o = q + (r * ng + g) * 16;
            for (int j = 0; j < 16; j++) {
                const int lo = s % 2 ? qs[j] >> 4 : qs[j] & 0xf, hi = s % 2 ? qs[j + 16] >> 4 : qs[j + 16] & 0xf;
                o[j] = (uint8_t)(lo | (hi << 4));
            }
        }
}

void te_encode_rows(uint32_t dtype, uint32_t src_type, const void *src, uint64_t cols, uint64_t r0, uint64_t n,
                    const float *x, void *out) {
    const uint64_t count = n * cols;
    if (te_exact_copy(dtype, src_type)) {
        if (dtype == EMX_Q4_1F) copy_q4_k(src, cols, r0, n, out);
        else copy_32_blocks(dtype, src_type, src, cols, r0, n, out);
        return;
    }
    switch (dtype) {
    case EMX_F32: memcpy(out, x, count * 4); return;
    case EMX_F16:
    case EMX_BF16: {
        uint16_t *h = out;
        for (uint64_t i = 0; i < count; i++) h[i] = dtype == EMX_F16 ? emx_f32_to_f16(x[i]) : emx_f32_to_bf16(x[i]);
        return;
    }
    default: emx_quantize(dtype, x, n, cols, out); return;
    }
}
