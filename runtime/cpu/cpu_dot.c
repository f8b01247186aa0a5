// cpu_dot.c — the float dot products of one weight row with one activation row (f32, bf16, f16:
// scalar, and AVX2 + FMA + F16C where the target has it) and the activations' int8 quantisation,
// declared in cpu_matmul.h. A file of their own, apart from the matmul that calls them
// (cpu_matmul.c): what needs only a dot product (the attention head, the kernel lab's CPU twins)
// links without the tiled matmul and its quantised kernels.
#include "runtime/cpu/cpu_matmul.h"

#include <math.h>

#include "base/dtype.h"

#include "runtime/cpu/cpu_simd.h"

// ---------------------------------------------------------------------------------------------
// Scalar reference kernels

void emx_quantize_acts_scalar(const float *x, int n, int8_t *q, float *d, float *s) {
    for (int g = 0; g < n / 32; g++) {
        const float *xg = x + g * 32;
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(xg[j]));
        float dg = amax / 127.0f;
        float id = dg != 0 ? 1.0f / dg : 0;
        d[g] = dg;
        int32_t sum = 0;
        for (int j = 0; j < 32; j++) {
            long v = lrintf(xg[j] * id);
            q[g * 32 + j] = (int8_t)(v < -127 ? -127 : v > 127 ? 127 : v);
            sum += q[g * 32 + j];
        }
        s[g] = dg * (float)sum;
    }
}

float emx_dot_f32_scalar(const float *w, const float *x, int n) {
    float s = 0;
    for (int j = 0; j < n; j++) s += w[j] * x[j];
    return s;
}

float emx_dot_bf16_scalar(const uint16_t *w, const float *x, int n) {
    float s = 0;
    for (int j = 0; j < n; j++) s += emx_bf16_to_f32(w[j]) * x[j];
    return s;
}

float emx_dot_f16_scalar(const uint16_t *w, const float *x, int n) {
    float s = 0;
    for (int j = 0; j < n; j++) s += emx_f16_to_f32(w[j]) * x[j];
    return s;
}

// ---------------------------------------------------------------------------------------------
// AVX2 kernels

#ifdef EMX_AVX2
static inline float hmax_ps(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

void emx_quantize_acts(const float *x, int n, int8_t *q, float *d, float *s) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    // packs_epi32/packs_epi16 interleave the 128-bit lanes; this puts the 4-byte runs back in order
    const __m256i unshuffle = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int g = 0; g < n / 32; g++) {
        const float *xg = x + g * 32;
        __m256 v0 = _mm256_loadu_ps(xg), v1 = _mm256_loadu_ps(xg + 8);
        __m256 v2 = _mm256_loadu_ps(xg + 16), v3 = _mm256_loadu_ps(xg + 24);
        __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1)),
                                 _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)));
        float amax = hmax_ps(m);
        float dg = amax / 127.0f;
        float id = dg != 0 ? 1.0f / dg : 0;
        d[g] = dg;
        __m256 vid = _mm256_set1_ps(id);
        // cvtps rounds to nearest even (default MXCSR), like lrintf in the scalar version
        __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v0, vid));
        __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v1, vid));
        __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v2, vid));
        __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v3, vid));
        __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
        _mm256_storeu_si256((__m256i *)(q + g * 32), _mm256_permutevar8x32_epi32(b, unshuffle));
        __m256i sum8 = _mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3));
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum8), _mm256_extracti128_si256(sum8, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
        s[g] = dg * (float)_mm_cvtsi128_si32(s4);
    }
}

float emx_dot_f32(const float *w, const float *x, int n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    int j = 0;
    for (; j + 32 <= n; j += 32) {  // four accumulators hide the FMA latency
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + j), _mm256_loadu_ps(x + j), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + j + 8), _mm256_loadu_ps(x + j + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w + j + 16), _mm256_loadu_ps(x + j + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w + j + 24), _mm256_loadu_ps(x + j + 24), a3);
    }
    for (; j + 8 <= n; j += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + j), _mm256_loadu_ps(x + j), a0);
    float s = emx_hsum_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; j < n; j++) s += w[j] * x[j];
    return s;
}

// bf16 is the top half of an f32: widen to 32 bits and shift left by 16
static inline __m256 load_bf16(const uint16_t *p) {
    __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
}

static inline __m256 load_f16(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

float emx_dot_bf16(const uint16_t *w, const float *x, int n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int j = 0;
    for (; j + 16 <= n; j += 16) {
        a0 = _mm256_fmadd_ps(load_bf16(w + j), _mm256_loadu_ps(x + j), a0);
        a1 = _mm256_fmadd_ps(load_bf16(w + j + 8), _mm256_loadu_ps(x + j + 8), a1);
    }
    for (; j + 8 <= n; j += 8) a0 = _mm256_fmadd_ps(load_bf16(w + j), _mm256_loadu_ps(x + j), a0);
    float s = emx_hsum_ps(_mm256_add_ps(a0, a1));
    for (; j < n; j++) s += emx_bf16_to_f32(w[j]) * x[j];
    return s;
}

float emx_dot_f16(const uint16_t *w, const float *x, int n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int j = 0;
    for (; j + 16 <= n; j += 16) {
        a0 = _mm256_fmadd_ps(load_f16(w + j), _mm256_loadu_ps(x + j), a0);
        a1 = _mm256_fmadd_ps(load_f16(w + j + 8), _mm256_loadu_ps(x + j + 8), a1);
    }
    for (; j + 8 <= n; j += 8) a0 = _mm256_fmadd_ps(load_f16(w + j), _mm256_loadu_ps(x + j), a0);
    float s = emx_hsum_ps(_mm256_add_ps(a0, a1));
    for (; j < n; j++) s += emx_f16_to_f32(w[j]) * x[j];
    return s;
}

#else  // no AVX2: the fast names are the scalar kernels

void emx_quantize_acts(const float *x, int n, int8_t *q, float *d, float *s) { emx_quantize_acts_scalar(x, n, q, d, s); }
float emx_dot_f32(const float *w, const float *x, int n) { return emx_dot_f32_scalar(w, x, n); }
float emx_dot_bf16(const uint16_t *w, const float *x, int n) { return emx_dot_bf16_scalar(w, x, n); }
float emx_dot_f16(const uint16_t *w, const float *x, int n) { return emx_dot_f16_scalar(w, x, n); }
#endif
