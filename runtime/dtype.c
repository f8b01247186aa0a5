// dtype.c — sizes, conversions and group quantisation of tensor element types.
#include "dtype.h"

#include <math.h>

static const char *const dtype_names[EMX_DTYPE_COUNT] = {"f32", "f16", "bf16", "q8", "q4"};

const char *emx_dtype_name(uint32_t dtype) {
    return dtype < EMX_DTYPE_COUNT ? dtype_names[dtype] : "unknown";
}

int emx_dtype_from_name(const char *name) {
    for (int i = 0; i < EMX_DTYPE_COUNT; i++)
        if (strcmp(name, dtype_names[i]) == 0) return i;
    return -1;
}

uint64_t emx_tensor_bytes(uint32_t dtype, uint64_t rows, uint64_t cols) {
    uint64_t n = rows * cols;
    if (rows != 0 && n / rows != cols) return 0;  // overflow
    switch (dtype) {
    case EMX_F32: return n * 4;
    case EMX_F16:
    case EMX_BF16: return n * 2;
    case EMX_Q8:
        if (cols % EMX_GROUP_SIZE) return 0;
        return n + n / EMX_GROUP_SIZE * 2;
    case EMX_Q4:
        if (cols % EMX_GROUP_SIZE) return 0;
        return n / 2 + n / EMX_GROUP_SIZE * 2;
    default: return 0;
    }
}

float emx_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    uint32_t u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else {  // subnormal: renormalise
            int e = -1;
            do {
                man <<= 1;
                e++;
            } while (!(man & 0x400));
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t emx_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000;
    uint32_t absu = u & 0x7fffffffu;
    if (absu > 0x7f800000u) return (uint16_t)(sign | 0x7e00);      // NaN
    if (absu >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);     // overflow -> inf
    if (absu < 0x38800000u) {  // below the smallest normal half: units of 2^-24, exact in f32
        float a;
        memcpy(&a, &absu, 4);
        return (uint16_t)(sign | (uint32_t)lrintf(a * 16777216.0f));  // rounds to nearest even
    }
    uint32_t r = absu + 0xfffu + ((absu >> 13) & 1u) - ((127u - 15u) << 23);
    return (uint16_t)(sign | (r >> 13));
}

static const uint16_t *group_scales(uint32_t dtype, const void *data, uint64_t rows, uint64_t cols) {
    uint64_t qbytes = dtype == EMX_Q8 ? rows * cols : rows * cols / 2;
    return (const uint16_t *)((const uint8_t *)data + qbytes);
}

void emx_dequantize_row(uint32_t dtype, const void *data, uint64_t rows, uint64_t cols, uint64_t r,
                        float *out) {
    switch (dtype) {
    case EMX_F32: memcpy(out, (const float *)data + r * cols, cols * 4); return;
    case EMX_F16: {
        const uint16_t *p = (const uint16_t *)data + r * cols;
        for (uint64_t i = 0; i < cols; i++) out[i] = emx_f16_to_f32(p[i]);
        return;
    }
    case EMX_BF16: {
        const uint16_t *p = (const uint16_t *)data + r * cols;
        for (uint64_t i = 0; i < cols; i++) out[i] = emx_bf16_to_f32(p[i]);
        return;
    }
    case EMX_Q8: {
        const int8_t *q = (const int8_t *)data + r * cols;
        const uint16_t *d = group_scales(dtype, data, rows, cols) + r * (cols / EMX_GROUP_SIZE);
        for (uint64_t i = 0; i < cols; i++) out[i] = (float)q[i] * emx_f16_to_f32(d[i / EMX_GROUP_SIZE]);
        return;
    }
    case EMX_Q4: {
        const uint8_t *q = (const uint8_t *)data + r * cols / 2;
        const uint16_t *d = group_scales(dtype, data, rows, cols) + r * (cols / EMX_GROUP_SIZE);
        for (uint64_t g = 0; g < cols / EMX_GROUP_SIZE; g++) {
            float s = emx_f16_to_f32(d[g]);
            const uint8_t *b = q + g * 16;
            for (int j = 0; j < 16; j++) {
                out[g * 32 + j] = (float)((b[j] & 0xf) - 8) * s;
                out[g * 32 + j + 16] = (float)((b[j] >> 4) - 8) * s;
            }
        }
        return;
    }
    }
}

void emx_quantize(uint32_t dtype, const float *w, uint64_t rows, uint64_t cols, void *out) {
    uint64_t groups = rows * cols / EMX_GROUP_SIZE;
    uint16_t *scales = (uint16_t *)group_scales(dtype, out, rows, cols);
    for (uint64_t g = 0; g < groups; g++) {
        const float *x = w + g * EMX_GROUP_SIZE;
        float amax = 0, maxv = 0;
        for (unsigned i = 0; i < EMX_GROUP_SIZE; i++) {
            if (fabsf(x[i]) > amax) {
                amax = fabsf(x[i]);
                maxv = x[i];
            }
        }
        if (dtype == EMX_Q8) {
            // Quantise against the scale as stored (rounded to f16), so q*d is the nearest value.
            scales[g] = emx_f32_to_f16(amax / 127.0f);
            float d = emx_f16_to_f32(scales[g]);
            float id = d != 0 ? 1.0f / d : 0;
            int8_t *q = (int8_t *)out + g * EMX_GROUP_SIZE;
            for (unsigned i = 0; i < EMX_GROUP_SIZE; i++) {
                long v = lrintf(x[i] * id);
                q[i] = (int8_t)(v < -127 ? -127 : v > 127 ? 127 : v);
            }
        } else {
            scales[g] = emx_f32_to_f16(maxv / -8.0f);
            float d = emx_f16_to_f32(scales[g]);
            float id = d != 0 ? 1.0f / d : 0;
            uint8_t *q = (uint8_t *)out + g * 16;
            for (unsigned j = 0; j < 16; j++) {
                int lo = (int)lrintf(x[j] * id) + 8, hi = (int)lrintf(x[j + 16] * id) + 8;
                lo = lo < 0 ? 0 : lo > 15 ? 15 : lo;
                hi = hi < 0 ? 0 : hi > 15 ? 15 : hi;
                q[j] = (uint8_t)(lo | (hi << 4));
            }
        }
    }
}
