// ggml_dequant.c — decode ggml block formats to f32, written from the published layouts.
//
// Every block format stores a fixed number of weights (32, or 256 for the K-quants) in a fixed
// number of bytes; fp16 scales are little-endian IEEE halves. Reads go through memcpy/bytes so
// the data may sit at any address.
#include "runtime/convert/ggml_dequant.h"

#include <string.h>

#include "base/dtype.h"

static float f16_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return emx_f16_to_f32(h);
}

int ggml_dequant_supported(uint32_t type) {
    switch (type) {
    case GGML_F32: case GGML_F16: case GGML_BF16: case GGML_Q4_0: case GGML_Q4_1: case GGML_Q5_0:
    case GGML_Q5_1: case GGML_Q8_0: case GGML_Q4_K: case GGML_Q5_K: case GGML_Q6_K:
        return 1;
    default:
        return 0;
    }
}

uint64_t ggml_row_bytes(uint32_t type, uint64_t cols) {
    uint64_t be = ggml_block_elems(type), bb = ggml_block_bytes(type);
    if (be == 0 || cols % be) return 0;
    return cols / be * bb;
}

// Q4_0 (18 bytes / 32): f16 d, u8 qs[16]; byte j holds weight j (low nibble) and j+16 (high).
// w = (nibble - 8) * d.
static void q4_0(const uint8_t *b, float *y) {
    float d = f16_at(b);
    const uint8_t *qs = b + 2;
    for (int j = 0; j < 16; j++) {
        y[j] = (float)((qs[j] & 0xf) - 8) * d;
        y[j + 16] = (float)((qs[j] >> 4) - 8) * d;
    }
}

// Q4_1 (20 bytes / 32): f16 d, f16 m, u8 qs[16] as Q4_0; w = nibble * d + m.
static void q4_1(const uint8_t *b, float *y) {
    float d = f16_at(b), m = f16_at(b + 2);
    const uint8_t *qs = b + 4;
    for (int j = 0; j < 16; j++) {
        y[j] = (float)(qs[j] & 0xf) * d + m;
        y[j + 16] = (float)(qs[j] >> 4) * d + m;
    }
}

// Q5_0 (22 bytes / 32): f16 d, u32 qh (bit i = 5th bit of weight i), u8 qs[16] as Q4_0.
// w = (5-bit value - 16) * d.
static void q5_0(const uint8_t *b, float *y) {
    float d = f16_at(b);
    uint32_t qh;
    memcpy(&qh, b + 2, 4);
    const uint8_t *qs = b + 6;
    for (int j = 0; j < 16; j++) {
        int lo = (qs[j] & 0xf) | (int)(((qh >> j) & 1u) << 4);
        int hi = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
        y[j] = (float)(lo - 16) * d;
        y[j + 16] = (float)(hi - 16) * d;
    }
}

// Q5_1 (24 bytes / 32): f16 d, f16 m, u32 qh, u8 qs[16]; w = 5-bit value * d + m.
static void q5_1(const uint8_t *b, float *y) {
    float d = f16_at(b), m = f16_at(b + 2);
    uint32_t qh;
    memcpy(&qh, b + 4, 4);
    const uint8_t *qs = b + 8;
    for (int j = 0; j < 16; j++) {
        int lo = (qs[j] & 0xf) | (int)(((qh >> j) & 1u) << 4);
        int hi = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
        y[j] = (float)lo * d + m;
        y[j + 16] = (float)hi * d + m;
    }
}

// Q8_0 (34 bytes / 32): f16 d, i8 qs[32]; w = q * d.
static void q8_0(const uint8_t *b, float *y) {
    float d = f16_at(b);
    const int8_t *qs = (const int8_t *)(b + 2);
    for (int j = 0; j < 32; j++) y[j] = (float)qs[j] * d;
}

// K-quants' 12 bytes of 6-bit (scale, min) pairs for 8 sub-blocks of 32: sub-blocks 0..3 keep
// theirs in the low 6 bits of bytes j and j+4; sub-blocks 4..7 in the nibbles of bytes j+4,
// with the top 2 bits in the high bits of bytes j-4 (scale) and j (min).
static void k_scale_min(const uint8_t *s, int j, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

// Q4_K (144 bytes / 256): f16 d, f16 dmin, u8 scales[12], u8 qs[128]. Four groups of 64
// weights; group g uses 32 bytes of qs: low nibbles are sub-block 2g, high nibbles 2g+1.
// w = d * scale * nibble - dmin * min.
static void q4_k(const uint8_t *b, float *y) {
    float d = f16_at(b), dmin = f16_at(b + 2);
    const uint8_t *scales = b + 4, *qs = b + 16;
    for (int g = 0; g < 4; g++) {
        int sc0, m0, sc1, m1;
        k_scale_min(scales, 2 * g, &sc0, &m0);
        k_scale_min(scales, 2 * g + 1, &sc1, &m1);
        float d0 = d * (float)sc0, dm0 = dmin * (float)m0, d1 = d * (float)sc1, dm1 = dmin * (float)m1;
        const uint8_t *q = qs + 32 * g;
        for (int l = 0; l < 32; l++) {
            y[64 * g + l] = d0 * (float)(q[l] & 0xf) - dm0;
            y[64 * g + 32 + l] = d1 * (float)(q[l] >> 4) - dm1;
        }
    }
}

// Q5_K (176 bytes / 256): f16 d, f16 dmin, u8 scales[12], u8 qh[32], u8 qs[128]. As Q4_K;
// the 5th bit of weight l of sub-block s is bit s of qh[l].
static void q5_k(const uint8_t *b, float *y) {
    float d = f16_at(b), dmin = f16_at(b + 2);
    const uint8_t *scales = b + 4, *qh = b + 16, *qs = b + 48;
    for (int g = 0; g < 4; g++) {
        int sc0, m0, sc1, m1;
        k_scale_min(scales, 2 * g, &sc0, &m0);
        k_scale_min(scales, 2 * g + 1, &sc1, &m1);
        float d0 = d * (float)sc0, dm0 = dmin * (float)m0, d1 = d * (float)sc1, dm1 = dmin * (float)m1;
        const uint8_t *q = qs + 32 * g;
        for (int l = 0; l < 32; l++) {
            int lo = (q[l] & 0xf) | (((qh[l] >> (2 * g)) & 1) << 4);
            int hi = (q[l] >> 4) | (((qh[l] >> (2 * g + 1)) & 1) << 4);
            y[64 * g + l] = d0 * (float)lo - dm0;
            y[64 * g + 32 + l] = d1 * (float)hi - dm1;
        }
    }
}

// Q6_K (210 bytes / 256): u8 ql[128] (low 4 bits), u8 qh[64] (high 2 bits), i8 scales[16],
// f16 d. Two halves of 128 weights; in half h, for l < 32, weights l, l+32, l+64, l+96 take
// their low bits from ql[64h+l] low, ql[64h+l+32] low, ql[64h+l] high, ql[64h+l+32] high
// nibbles and their high bits from bit pairs 0, 2, 4, 6 of qh[32h+l]. Each 16 weights share a
// scale. w = d * scale * (6-bit value - 32).
static void q6_k(const uint8_t *b, float *y) {
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    float d = f16_at(b + 208);
    for (int h = 0; h < 2; h++) {
        const uint8_t *L = ql + 64 * h, *H = qh + 32 * h;
        const int8_t *S = sc + 8 * h;
        float *Y = y + 128 * h;
        for (int l = 0; l < 32; l++) {
            int is = l / 16;
            int q1 = ((L[l] & 0xf) | (((H[l] >> 0) & 3) << 4)) - 32;
            int q2 = ((L[l + 32] & 0xf) | (((H[l] >> 2) & 3) << 4)) - 32;
            int q3 = ((L[l] >> 4) | (((H[l] >> 4) & 3) << 4)) - 32;
            int q4 = ((L[l + 32] >> 4) | (((H[l] >> 6) & 3) << 4)) - 32;
            Y[l] = d * (float)S[is] * (float)q1;
            Y[l + 32] = d * (float)S[is + 2] * (float)q2;
            Y[l + 64] = d * (float)S[is + 4] * (float)q3;
            Y[l + 96] = d * (float)S[is + 6] * (float)q4;
        }
    }
}

int ggml_dequantize_rows(uint32_t type, const void *data, uint64_t cols, uint64_t r0, uint64_t n, float *out) {
    uint64_t rb = ggml_row_bytes(type, cols);
    if (!ggml_dequant_supported(type) || rb == 0) return -1;
    const uint8_t *p = (const uint8_t *)data + r0 * rb;
    uint64_t total = n * cols;
    switch (type) {
    case GGML_F32: memcpy(out, p, total * 4); return 0;
    case GGML_F16:
        for (uint64_t i = 0; i < total; i++) out[i] = f16_at(p + 2 * i);
        return 0;
    case GGML_BF16:
        for (uint64_t i = 0; i < total; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            out[i] = emx_bf16_to_f32(h);
        }
        return 0;
    default: break;
    }
    void (*block)(const uint8_t *, float *) = NULL;
    switch (type) {
    case GGML_Q4_0: block = q4_0; break;
    case GGML_Q4_1: block = q4_1; break;
    case GGML_Q5_0: block = q5_0; break;
    case GGML_Q5_1: block = q5_1; break;
    case GGML_Q8_0: block = q8_0; break;
    case GGML_Q4_K: block = q4_k; break;
    case GGML_Q5_K: block = q5_k; break;
    case GGML_Q6_K: block = q6_k; break;
    default: return -1;
    }
    uint64_t be = ggml_block_elems(type), bb = ggml_block_bytes(type);
    for (uint64_t i = 0; i < total / be; i++) block(p + i * bb, out + i * be);
    return 0;
}
