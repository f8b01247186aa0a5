// dtype.c — names, conversions and group quantisation of tensor element types.
#include "base/dtype.h"

#include <math.h>

static const char *const dtype_names[EMX_DTYPE_COUNT] = {"f32", "f16", "bf16", "q8", "q4", "q4_1", "q4_1f"};

const char *emx_dtype_name(uint32_t dtype) {
    return dtype < EMX_DTYPE_COUNT ? dtype_names[dtype] : "unknown";
}

int emx_dtype_from_name(const char *name) {
    for (int i = 0; i < EMX_DTYPE_COUNT; i++)
        if (strcmp(name, dtype_names[i]) == 0) return i;
    return -1;
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

// q8/q4/q4_1: the f16 scales d [rows][cols/32] after the quants; q4_1's mins m follow them.
static const uint16_t *group_scales(uint32_t dtype, const void *data, uint64_t rows, uint64_t cols) {
    uint64_t qbytes = dtype == EMX_Q8 ? rows * cols : rows * cols / 2;
    return (const uint16_t *)((const uint8_t *)data + qbytes);
}

void emx_f32_to_f16_row(uint16_t *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = emx_f32_to_f16(src[i]);
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
    case EMX_Q4_1: {
        const uint8_t *q = (const uint8_t *)data + r * cols / 2;
        const uint16_t *d = group_scales(dtype, data, rows, cols);
        const uint16_t *m = d + rows * (cols / EMX_GROUP_SIZE) + r * (cols / EMX_GROUP_SIZE);
        d += r * (cols / EMX_GROUP_SIZE);
        for (uint64_t g = 0; g < cols / EMX_GROUP_SIZE; g++) {
            float s = emx_f16_to_f32(d[g]), mn = emx_f16_to_f32(m[g]);
            const uint8_t *b = q + g * 16;
            for (int j = 0; j < 16; j++) {
                out[g * 32 + j] = (float)(b[j] & 0xf) * s + mn;
                out[g * 32 + j + 16] = (float)(b[j] >> 4) * s + mn;
            }
        }
        return;
    }
    case EMX_Q4_1F: {
        const uint8_t *q = (const uint8_t *)data + r * cols / 2;
        const float *d = (const float *)((const uint8_t *)data + rows * cols / 2);
        const float *m = d + rows * (cols / EMX_GROUP_SIZE) + r * (cols / EMX_GROUP_SIZE);
        d += r * (cols / EMX_GROUP_SIZE);
        for (uint64_t g = 0; g < cols / EMX_GROUP_SIZE; g++) {
            const uint8_t *b = q + g * 16;
            for (int j = 0; j < 16; j++) {  // two roundings, as ggml's Q4_K: (d * nibble) + m
                out[g * 32 + j] = (float)(b[j] & 0xf) * d[g] + m[g];
                out[g * 32 + j + 16] = (float)(b[j] >> 4) * d[g] + m[g];
            }
        }
        return;
    }
    }
}

// q4 scale for one group of 32 weights: for candidate inverse scales -(8 + k/10)/maxv,
// k = -9..9 (maxv = the largest-magnitude weight, so it lands near level -8), round every weight
// to a level in [-8, 7], then take the least-squares scale for those levels,
// d = sum(x*l) / sum(l*l), which minimises sum((x - d*l)^2) for them. The candidate whose levels
// leave the least error (the largest sum(x*l)^2 / sum(l*l)) wins. k = 0 alone is llama.cpp's Q4_0.
static float q4_best_scale(const float *x, float maxv) {
    if (maxv == 0) return 0;
    double best_gain = -1, best_d = maxv / -8.0;
    for (int k = -9; k <= 9; k++) {
        double iscale = -(8.0 + 0.1 * k) / maxv, sum_xl = 0, sum_ll = 0;
        for (unsigned i = 0; i < EMX_GROUP_SIZE; i++) {
            long l = lrint(x[i] * iscale);
            l = l < -8 ? -8 : l > 7 ? 7 : l;
            sum_xl += (double)x[i] * (double)l;
            sum_ll += (double)(l * l);
        }
        if (sum_ll > 0 && sum_xl * sum_xl / sum_ll > best_gain) {
            best_gain = sum_xl * sum_xl / sum_ll;
            best_d = sum_xl / sum_ll;
        }
    }
    return (float)best_d;
}

// Levels 0..15 of x against w = k*d + m (nearest, clamped) and the squared error they leave.
static double q4_1_levels(const float *x, double d, double m, int *k) {
    double id = d > 0 ? 1.0 / d : 0, err = 0;
    for (unsigned i = 0; i < EMX_GROUP_SIZE; i++) {
        long l = lrint(((double)x[i] - m) * id);
        k[i] = (int)(l < 0 ? 0 : l > 15 ? 15 : l);
        double e = (double)x[i] - (k[i] * d + m);
        err += e * e;
    }
    return err;
}

// q4_1 scale and min for one group of 32 weights. Start from the full range, m = min and
// d = (max - min) / 15 (llama.cpp's Q4_1); then for candidate steps range / (15 + k/10),
// k = -5..10 (a slightly finer grid can clip the ends but fit the bulk better), take the levels
// those give and fit d and m to them by least squares: min sum((x - d*l - m)^2) is the 2x2
// system [sum l^2, sum l; sum l, 32] [d; m] = [sum x*l; sum x]. Re-rounding against the fitted
// pair only lowers the error further; the pair with the least error wins, so the result is
// never worse than the plain start.
static void q4_1_best(const float *x, float mn, float mx, float *d_out, float *m_out) {
    double range = (double)mx - (double)mn;
    *m_out = mn;
    *d_out = (float)(range / 15.0);
    if (range <= 0) return;
    int k[EMX_GROUP_SIZE];
    double best = q4_1_levels(x, range / 15.0, mn, k);
    for (int c = -5; c <= 10; c++) {
        double d = range / (15.0 + 0.1 * c);
        q4_1_levels(x, d, mn, k);
        double sl = 0, sll = 0, sx = 0, sxl = 0;
        for (unsigned i = 0; i < EMX_GROUP_SIZE; i++) {
            sl += k[i];
            sll += (double)k[i] * k[i];
            sx += x[i];
            sxl += (double)x[i] * k[i];
        }
        double det = EMX_GROUP_SIZE * sll - sl * sl;
        if (det <= 0) continue;  // every weight on one level: nothing to fit
        double fd = (EMX_GROUP_SIZE * sxl - sl * sx) / det, fm = (sll * sx - sl * sxl) / det;
        if (!(fd > 0)) continue;
        double err = q4_1_levels(x, fd, fm, k);
        if (err < best) {
            best = err;
            *d_out = (float)fd;
            *m_out = (float)fm;
        }
    }
}

void emx_quantize(uint32_t dtype, const float *w, uint64_t rows, uint64_t cols, void *out) {
    uint64_t groups = rows * cols / EMX_GROUP_SIZE;
    uint16_t *scales = (uint16_t *)group_scales(dtype, out, rows, cols);
    uint16_t *mins = scales + groups;  // q4_1 only
    float *scales32 = (float *)(void *)scales, *mins32 = scales32 + groups;  // q4_1f only
    for (uint64_t g = 0; g < groups; g++) {
        const float *x = w + g * EMX_GROUP_SIZE;
        if (dtype == EMX_Q4_1F) {  // q4_1's fit, its d and m kept in f32
            float mn = x[0], mx = x[0];
            for (unsigned i = 1; i < EMX_GROUP_SIZE; i++) {
                mn = fminf(mn, x[i]);
                mx = fmaxf(mx, x[i]);
            }
            q4_1_best(x, mn, mx, &scales32[g], &mins32[g]);
            int k[EMX_GROUP_SIZE];
            q4_1_levels(x, scales32[g], mins32[g], k);
            uint8_t *q = (uint8_t *)out + g * 16;
            for (unsigned j = 0; j < 16; j++) q[j] = (uint8_t)(k[j] | (k[j + 16] << 4));
            continue;
        }
        if (dtype == EMX_Q4_1) {
            float mn = x[0], mx = x[0], df, mf;
            for (unsigned i = 1; i < EMX_GROUP_SIZE; i++) {
                mn = fminf(mn, x[i]);
                mx = fmaxf(mx, x[i]);
            }
            q4_1_best(x, mn, mx, &df, &mf);
            // Levels against d and m as stored (rounded to f16), so k*d + m is the nearest value.
            scales[g] = emx_f32_to_f16(df);
            mins[g] = emx_f32_to_f16(mf);
            int k[EMX_GROUP_SIZE];
            q4_1_levels(x, emx_f16_to_f32(scales[g]), emx_f16_to_f32(mins[g]), k);
            uint8_t *q = (uint8_t *)out + g * 16;
            for (unsigned j = 0; j < 16; j++) q[j] = (uint8_t)(k[j] | (k[j + 16] << 4));
            continue;
        }
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
            // 16 levels are too few for "largest weight exact" to be a good rule: try scales
            // around maxv/-8 and keep the one with the least squared error over the group.
            scales[g] = emx_f32_to_f16(q4_best_scale(x, maxv));
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
