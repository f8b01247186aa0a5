// cpu_matmul.c — dot-product kernels per weight dtype (scalar, and AVX2 + FMA + F16C with
// AVX-VNNI's vpdpbusd where the target has it) and the threaded, tiled matmul.
#include "cpu_matmul.h"

#include <math.h>

#include "dtype.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define EMX_AVX2 1
#include <immintrin.h>
#endif

// Sum of 4 adjacent u8 × i8 products into each int32 lane: one instruction with AVX-VNNI
// (vpdpbusd, no intermediate saturation), else maddubs (pairs into int16) then madd (pairs of
// those into int32). Our operands never saturate maddubs: |products| <= 128 * 127 per byte.
#ifdef EMX_AVX2
#if defined(__AVXVNNI__)
#define EMX_VNNI "+vnni"
#define dot_u8i8(u, s) _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), (u), (s))
#elif defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define EMX_VNNI "+vnni"
#define dot_u8i8(u, s) _mm256_dpbusd_epi32(_mm256_setzero_si256(), (u), (s))
#else
#define EMX_VNNI ""
#define dot_u8i8(u, s) _mm256_madd_epi16(_mm256_maddubs_epi16((u), (s)), _mm256_set1_epi16(1))
#endif
#endif

const char *emx_cpu_simd_name(void) {
#ifdef EMX_AVX2
    return "avx2" EMX_VNNI;
#else
    return "scalar";
#endif
}

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

float emx_dot_q8_scalar(const int8_t *w, const uint16_t *wd, const int8_t *xq, const float *xd, int n) {
    float s = 0;
    for (int g = 0; g < n / 32; g++) {
        int32_t isum = 0;  // exact: |sum| <= 32 * 128 * 127
        for (int j = 0; j < 32; j++) isum += (int32_t)w[g * 32 + j] * xq[g * 32 + j];
        s += (float)isum * (emx_f16_to_f32(wd[g]) * xd[g]);
    }
    return s;
}

float emx_dot_q4_scalar(const uint8_t *w, const uint16_t *wd, const int8_t *xq, const float *xd, const float *xs, int n) {
    (void)xs;
    float s = 0;
    for (int g = 0; g < n / 32; g++) {
        const uint8_t *b = w + g * 16;
        const int8_t *xg = xq + g * 32;
        int32_t isum = 0;
        for (int j = 0; j < 16; j++) {
            isum += ((b[j] & 0xf) - 8) * xg[j];
            isum += ((b[j] >> 4) - 8) * xg[j + 16];
        }
        s += (float)isum * (emx_f16_to_f32(wd[g]) * xd[g]);
    }
    return s;
}

float emx_dot_q4_1_scalar(const uint8_t *w, const uint16_t *wd, const uint16_t *wm, const int8_t *xq, const float *xd,
                          const float *xs, int n) {
    (void)xs;
    float s = 0;
    for (int g = 0; g < n / 32; g++) {
        const uint8_t *b = w + g * 16;
        const int8_t *xg = xq + g * 32;
        int32_t isum = 0, xsum = 0;
        for (int j = 0; j < 16; j++) {
            isum += (b[j] & 0xf) * xg[j] + (b[j] >> 4) * xg[j + 16];
            xsum += xg[j] + xg[j + 16];
        }
        s += (float)isum * (emx_f16_to_f32(wd[g]) * xd[g]) + emx_f16_to_f32(wm[g]) * (xd[g] * (float)xsum);
    }
    return s;
}

void emx_dot4_q8_scalar(const int8_t *w, const uint16_t *wd, const int8_t *xq, const float *xd, int n, float out[4]) {
    for (int t = 0; t < 4; t++) out[t] = emx_dot_q8_scalar(w, wd, xq + (size_t)t * n, xd + (size_t)t * (n / 32), n);
}

void emx_dot4_q4_scalar(const uint8_t *w, const uint16_t *wd, const int8_t *xq, const float *xd, const float *xs, int n,
                        float out[4]) {
    for (int t = 0; t < 4; t++)
        out[t] = emx_dot_q4_scalar(w, wd, xq + (size_t)t * n, xd + (size_t)t * (n / 32), xs + (size_t)t * (n / 32), n);
}

void emx_dot4_q4_1_scalar(const uint8_t *w, const uint16_t *wd, const uint16_t *wm, const int8_t *xq, const float *xd,
                          const float *xs, int n, float out[4]) {
    for (int t = 0; t < 4; t++)
        out[t] = emx_dot_q4_1_scalar(w, wd, wm, xq + (size_t)t * n, xd + (size_t)t * (n / 32), xs + (size_t)t * (n / 32), n);
}

// ---------------------------------------------------------------------------------------------
// AVX2 kernels

#ifdef EMX_AVX2
static inline float hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

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
    float s = hsum_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
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
    float s = hsum_ps(_mm256_add_ps(a0, a1));
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
    float s = hsum_ps(_mm256_add_ps(a0, a1));
    for (; j < n; j++) s += emx_f16_to_f32(w[j]) * x[j];
    return s;
}

// Sum of w[j] * x[j] over 32 signed bytes, as 8 int32 partial sums converted to float.
// maddubs multiplies unsigned by signed bytes, so move w's sign onto x: |w| * (x * sign(w)).
// Each int16 pair sum is at most 2 * 128 * 127 < 32768: no saturation.
static inline __m256 dot32_i8(__m256i w, __m256i x) {
    return _mm256_cvtepi32_ps(dot_u8i8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w)));
}

float emx_dot_q8(const int8_t *w, const uint16_t *wd, const int8_t *xq, const float *xd, int n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    float ds[8];  // d_w * d_x of 8 groups, converted from f16 together
    int g = 0, ng = n / 32;
    for (; g + 8 <= ng; g += 8) {
        __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wd + g)));
        _mm256_storeu_ps(ds, _mm256_mul_ps(dw, _mm256_loadu_ps(xd + g)));
        for (int k = 0; k < 8; k += 2) {  // two independent FMA chains
            const int8_t *wg = w + (g + k) * 32, *xg = xq + (g + k) * 32;
            __m256 p0 = dot32_i8(_mm256_loadu_si256((const __m256i *)wg), _mm256_loadu_si256((const __m256i *)xg));
            __m256 p1 = dot32_i8(_mm256_loadu_si256((const __m256i *)(wg + 32)), _mm256_loadu_si256((const __m256i *)(xg + 32)));
            a0 = _mm256_fmadd_ps(p0, _mm256_broadcast_ss(ds + k), a0);
            a1 = _mm256_fmadd_ps(p1, _mm256_broadcast_ss(ds + k + 1), a1);
        }
    }
    for (; g < ng; g++) {
        __m256 p0 = dot32_i8(_mm256_loadu_si256((const __m256i *)(w + g * 32)),
                             _mm256_loadu_si256((const __m256i *)(xq + g * 32)));
        a0 = _mm256_fmadd_ps(p0, _mm256_set1_ps(_cvtsh_ss(wd[g]) * xd[g]), a0);
    }
    return hsum_ps(_mm256_add_ps(a0, a1));
}

// 16 bytes of nibbles against 32 int8 activations: low nibbles are weights 0..15 (low 128-bit
// lane), high nibbles weights 16..31 (high lane), matching x's order. The nibbles are used as
// they are, unsigned 0..15 (maddubs' unsigned operand, no sign trick needed); the caller
// subtracts the +8 offset for the whole group at once: sum (nib - 8) x = sum nib x - 8 sum x.
static inline __m256 dot32_u4(const uint8_t *b, const int8_t *x) {
    __m128i v = _mm_loadu_si128((const __m128i *)b);
    __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0xf));
    return _mm256_cvtepi32_ps(dot_u8i8(nib, _mm256_loadu_si256((const __m256i *)x)));
}

float emx_dot_q4(const uint8_t *w, const uint16_t *wd, const int8_t *xq, const float *xd, const float *xs, int n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    __m256 offset = _mm256_setzero_ps();  // sum over groups of d_w * d_x * sum(q_x)
    float ds[8];
    int g = 0, ng = n / 32;
    for (; g + 8 <= ng; g += 8) {
        __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wd + g)));
        _mm256_storeu_ps(ds, _mm256_mul_ps(dw, _mm256_loadu_ps(xd + g)));
        offset = _mm256_fmadd_ps(dw, _mm256_loadu_ps(xs + g), offset);
        for (int k = 0; k < 8; k += 2) {
            a0 = _mm256_fmadd_ps(dot32_u4(w + (g + k) * 16, xq + (g + k) * 32), _mm256_broadcast_ss(ds + k), a0);
            a1 = _mm256_fmadd_ps(dot32_u4(w + (g + k + 1) * 16, xq + (g + k + 1) * 32), _mm256_broadcast_ss(ds + k + 1), a1);
        }
    }
    float tail_offset = 0;
    for (; g < ng; g++) {
        float dw = _cvtsh_ss(wd[g]);
        a0 = _mm256_fmadd_ps(dot32_u4(w + g * 16, xq + g * 32), _mm256_set1_ps(dw * xd[g]), a0);
        tail_offset += dw * xs[g];
    }
    return hsum_ps(_mm256_add_ps(a0, a1)) - 8.0f * (hsum_ps(offset) + tail_offset);
}

// q4_1: as q4 with the nibbles' offset replaced by the per-group min: sum of d*xd*dot(k, xq)
// plus sum of m * xs over the groups.
float emx_dot_q4_1(const uint8_t *w, const uint16_t *wd, const uint16_t *wm, const int8_t *xq, const float *xd,
                   const float *xs, int n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    __m256 mins = _mm256_setzero_ps();  // sum over groups of m * xs
    float ds[8];
    int g = 0, ng = n / 32;
    for (; g + 8 <= ng; g += 8) {
        __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wd + g)));
        _mm256_storeu_ps(ds, _mm256_mul_ps(dw, _mm256_loadu_ps(xd + g)));
        mins = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wm + g))), _mm256_loadu_ps(xs + g), mins);
        for (int k = 0; k < 8; k += 2) {
            a0 = _mm256_fmadd_ps(dot32_u4(w + (g + k) * 16, xq + (g + k) * 32), _mm256_broadcast_ss(ds + k), a0);
            a1 = _mm256_fmadd_ps(dot32_u4(w + (g + k + 1) * 16, xq + (g + k + 1) * 32), _mm256_broadcast_ss(ds + k + 1), a1);
        }
    }
    float tail = 0;
    for (; g < ng; g++) {
        a0 = _mm256_fmadd_ps(dot32_u4(w + g * 16, xq + g * 32), _mm256_set1_ps(_cvtsh_ss(wd[g]) * xd[g]), a0);
        tail += _cvtsh_ss(wm[g]) * xs[g];
    }
    return hsum_ps(_mm256_add_ps(a0, a1)) + hsum_ps(mins) + tail;
}

// 4 activation rows: per group of 32 weights, one load (q8) or unpack (q4) of the weights and
// one f16 scale conversion serve four rows; each row has its own accumulator.
void emx_dot4_q8(const int8_t *w, const uint16_t *wd, const int8_t *xq, const float *xd, int n, float out[4]) {
    const int ng = n / 32;
    const int8_t *x0 = xq, *x1 = xq + n, *x2 = xq + 2 * n, *x3 = xq + 3 * n;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    float ds[4][8];  // d_w * d_x per row and group of a block of 8 groups
    int g = 0;
    for (; g + 8 <= ng; g += 8) {
        __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wd + g)));
        for (int t = 0; t < 4; t++) _mm256_storeu_ps(ds[t], _mm256_mul_ps(dw, _mm256_loadu_ps(xd + (size_t)t * ng + g)));
        for (int k = 0; k < 8; k++) {
            const int o = (g + k) * 32;
            __m256i wv = _mm256_loadu_si256((const __m256i *)(w + o));
            __m256i aw = _mm256_sign_epi8(wv, wv);
#define EMX_Q8_ROW(a, x, t)                                                                                    \
    a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_u8i8(aw, _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)(x + o)), wv))), \
                        _mm256_broadcast_ss(&ds[t][k]), a)
            EMX_Q8_ROW(a0, x0, 0);
            EMX_Q8_ROW(a1, x1, 1);
            EMX_Q8_ROW(a2, x2, 2);
            EMX_Q8_ROW(a3, x3, 3);
#undef EMX_Q8_ROW
        }
    }
    out[0] = hsum_ps(a0);
    out[1] = hsum_ps(a1);
    out[2] = hsum_ps(a2);
    out[3] = hsum_ps(a3);
    for (; g < ng; g++) {  // groups past the last block of 8
        float dw = _cvtsh_ss(wd[g]);
        __m256i wv = _mm256_loadu_si256((const __m256i *)(w + g * 32));
        for (int t = 0; t < 4; t++)
            out[t] += hsum_ps(dot32_i8(wv, _mm256_loadu_si256((const __m256i *)(xq + (size_t)t * n + g * 32)))) *
                      (dw * xd[(size_t)t * ng + g]);
    }
}

// Four activation rows against one row of 4-bit weights: out[t] = sum over groups of
// d_w d_x sum(nib * q_x) + c_g * s_x, where s_x = d_x sum(q_x) and c_g is the group's offset
// coefficient: -8 d_w for q4 (nibble - 8), the stored min m for q4_1 (nibble * d + m).
// Always inlined so each caller gets a copy with the q4 / q4_1 choice resolved at compile time.
static inline __attribute__((always_inline)) void dot4_nibbles(const uint8_t *w, const uint16_t *wd,
                                                               const uint16_t *wm /* NULL: q4 */,
                                                               const int8_t *xq, const float *xd,
                                                               const float *xs, int n, float out[4]) {
    const int ng = n / 32;
    const int8_t *x0 = xq, *x1 = xq + n, *x2 = xq + 2 * n, *x3 = xq + 3 * n;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    __m256 off[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    float ds[4][8];
    int g = 0;
    for (; g + 8 <= ng; g += 8) {
        __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wd + g)));
        // -8 d_w is exact (a power of two), so q4 keeps the rounding of sum(d_w s_x) * -8
        __m256 cw = wm ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wm + g))) : _mm256_mul_ps(dw, _mm256_set1_ps(-8.0f));
        for (int t = 0; t < 4; t++) {
            _mm256_storeu_ps(ds[t], _mm256_mul_ps(dw, _mm256_loadu_ps(xd + (size_t)t * ng + g)));
            off[t] = _mm256_fmadd_ps(cw, _mm256_loadu_ps(xs + (size_t)t * ng + g), off[t]);
        }
        for (int k = 0; k < 8; k++) {
            const int o = (g + k) * 32;
            __m128i v = _mm_loadu_si128((const __m128i *)(w + (g + k) * 16));
            __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0xf));
#define EMX_Q4_ROW(a, x, t)                                                                                    \
    a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_u8i8(nib, _mm256_loadu_si256((const __m256i *)(x + o)))),          \
                        _mm256_broadcast_ss(&ds[t][k]), a)
            EMX_Q4_ROW(a0, x0, 0);
            EMX_Q4_ROW(a1, x1, 1);
            EMX_Q4_ROW(a2, x2, 2);
            EMX_Q4_ROW(a3, x3, 3);
#undef EMX_Q4_ROW
        }
    }
    out[0] = hsum_ps(a0) + hsum_ps(off[0]);
    out[1] = hsum_ps(a1) + hsum_ps(off[1]);
    out[2] = hsum_ps(a2) + hsum_ps(off[2]);
    out[3] = hsum_ps(a3) + hsum_ps(off[3]);
    for (; g < ng; g++) {
        float dw = _cvtsh_ss(wd[g]), cw = wm ? _cvtsh_ss(wm[g]) : -8.0f * dw;
        for (int t = 0; t < 4; t++) {
            const size_t tg = (size_t)t * ng + g;
            out[t] += hsum_ps(dot32_u4(w + g * 16, xq + (size_t)t * n + g * 32)) * (dw * xd[tg]) + cw * xs[tg];
        }
    }
}

void emx_dot4_q4(const uint8_t *w, const uint16_t *wd, const int8_t *xq, const float *xd, const float *xs, int n,
                 float out[4]) {
    dot4_nibbles(w, wd, NULL, xq, xd, xs, n, out);
}

void emx_dot4_q4_1(const uint8_t *w, const uint16_t *wd, const uint16_t *wm, const int8_t *xq, const float *xd,
                   const float *xs, int n, float out[4]) {
    dot4_nibbles(w, wd, wm, xq, xd, xs, n, out);
}

#else  // no AVX2: the fast names are the scalar kernels

void emx_quantize_acts(const float *x, int n, int8_t *q, float *d, float *s) { emx_quantize_acts_scalar(x, n, q, d, s); }
float emx_dot_f32(const float *w, const float *x, int n) { return emx_dot_f32_scalar(w, x, n); }
float emx_dot_bf16(const uint16_t *w, const float *x, int n) { return emx_dot_bf16_scalar(w, x, n); }
float emx_dot_f16(const uint16_t *w, const float *x, int n) { return emx_dot_f16_scalar(w, x, n); }
float emx_dot_q8(const int8_t *w, const uint16_t *wd, const int8_t *xq, const float *xd, int n) {
    return emx_dot_q8_scalar(w, wd, xq, xd, n);
}
float emx_dot_q4(const uint8_t *w, const uint16_t *wd, const int8_t *xq, const float *xd, const float *xs, int n) {
    return emx_dot_q4_scalar(w, wd, xq, xd, xs, n);
}
void emx_dot4_q8(const int8_t *w, const uint16_t *wd, const int8_t *xq, const float *xd, int n, float out[4]) {
    emx_dot4_q8_scalar(w, wd, xq, xd, n, out);
}
void emx_dot4_q4(const uint8_t *w, const uint16_t *wd, const int8_t *xq, const float *xd, const float *xs, int n,
                 float out[4]) {
    emx_dot4_q4_scalar(w, wd, xq, xd, xs, n, out);
}
float emx_dot_q4_1(const uint8_t *w, const uint16_t *wd, const uint16_t *wm, const int8_t *xq, const float *xd,
                   const float *xs, int n) {
    return emx_dot_q4_1_scalar(w, wd, wm, xq, xd, xs, n);
}
void emx_dot4_q4_1(const uint8_t *w, const uint16_t *wd, const uint16_t *wm, const int8_t *xq, const float *xd,
                   const float *xs, int n, float out[4]) {
    emx_dot4_q4_1_scalar(w, wd, wm, xq, xd, xs, n, out);
}
#endif

// ---------------------------------------------------------------------------------------------
// Matmul

// Below this many multiply-adds a parallel region costs more than it saves.
#define EMX_PARALLEL_MIN_WORK 32768

// out[i][r] for activation rows i in [i0, i0 + ni) and weight row r.
static inline void matmul_row(float *out, const EmxTensor *w, int r, const EmxActs *a, int i0, int ni) {
    const int rows = (int)w->rows, cols = (int)w->cols, ng = cols / 32;
    const uint8_t *base = (const uint8_t *)w->data;
    // q8/q4/q4_1: quants [rows][...] then f16 scales [rows][cols/32] (then q4_1's f16 mins)
    const size_t qbytes = w->dtype == EMX_Q8 ? (size_t)rows * cols : (size_t)rows * cols / 2;
    const uint16_t *scales = (const uint16_t *)(base + qbytes) + (size_t)r * ng;
    const uint16_t *mins = scales + (size_t)rows * ng;
    int i = i0;
    const int end = i0 + ni;
    // q8/q4 take the activation rows four at a time: each group of weights is loaded (and
    // unpacked) once per four
    if (w->dtype == EMX_Q8 || w->dtype == EMX_Q4 || w->dtype == EMX_Q4_1) {
        for (; i + 4 <= end; i += 4) {
            float o4[4];
            if (w->dtype == EMX_Q4_1)
                emx_dot4_q4_1(base + (size_t)r * cols / 2, scales, mins, a->xq + (size_t)i * cols, a->xd + (size_t)i * ng,
                              a->xs + (size_t)i * ng, cols, o4);
            else if (w->dtype == EMX_Q8)
                emx_dot4_q8((const int8_t *)base + (size_t)r * cols, scales, a->xq + (size_t)i * cols,
                            a->xd + (size_t)i * ng, cols, o4);
            else
                emx_dot4_q4(base + (size_t)r * cols / 2, scales, a->xq + (size_t)i * cols, a->xd + (size_t)i * ng,
                            a->xs + (size_t)i * ng, cols, o4);
            for (int t = 0; t < 4; t++) out[(size_t)(i + t) * rows + r] = o4[t];
        }
    }
    for (; i < end; i++) {
        const float *x = a->x + (size_t)i * cols;
        float s = 0;
        switch (w->dtype) {
        case EMX_F32: s = emx_dot_f32((const float *)base + (size_t)r * cols, x, cols); break;
        case EMX_BF16: s = emx_dot_bf16((const uint16_t *)base + (size_t)r * cols, x, cols); break;
        case EMX_F16: s = emx_dot_f16((const uint16_t *)base + (size_t)r * cols, x, cols); break;
        case EMX_Q8:
            s = emx_dot_q8((const int8_t *)base + (size_t)r * cols, scales, a->xq + (size_t)i * cols,
                           a->xd + (size_t)i * ng, cols);
            break;
        case EMX_Q4:
            s = emx_dot_q4(base + (size_t)r * cols / 2, scales, a->xq + (size_t)i * cols, a->xd + (size_t)i * ng,
                           a->xs + (size_t)i * ng, cols);
            break;
        case EMX_Q4_1:
            s = emx_dot_q4_1(base + (size_t)r * cols / 2, scales, mins, a->xq + (size_t)i * cols, a->xd + (size_t)i * ng,
                             a->xs + (size_t)i * ng, cols);
            break;
        }
        out[(size_t)i * rows + r] = s;
    }
}

// Tiles: ROW_TILE weight rows (a few KiB, stay in L1) meet TOK_TILE activation rows at a time,
// so in a prefill neither the weights nor the activations are streamed from L2 for every
// pairing. Threads take whole row tiles (static: thread t gets the same rows every call).
#define ROW_TILE 16
#define TOK_TILE 16

void emx_matmul_multi(const EmxMatmulJob *jobs, int n_jobs, const EmxActs *a, int n_threads) {
    int total = 0;
    int64_t work = 0;
    for (int j = 0; j < n_jobs; j++) {
        total += (int)jobs[j].w->rows;
        work += (int64_t)jobs[j].w->rows * jobs[j].w->cols * a->n;
    }
    const int n_tiles = (total + ROW_TILE - 1) / ROW_TILE;
#pragma omp parallel for num_threads(n_threads) schedule(static) if (work > EMX_PARALLEL_MIN_WORK)
    for (int tile = 0; tile < n_tiles; tile++) {
        const int g0 = tile * ROW_TILE, g1 = g0 + ROW_TILE < total ? g0 + ROW_TILE : total;
        for (int i = 0; i < a->n; i += TOK_TILE) {
            const int ni = a->n - i < TOK_TILE ? a->n - i : TOK_TILE;
            for (int gr = g0; gr < g1; gr++) {
                int j = 0, r = gr;  // global row -> (matrix, row)
                while (r >= (int)jobs[j].w->rows) r -= (int)jobs[j++].w->rows;
                matmul_row(jobs[j].out, jobs[j].w, r, a, i, ni);
            }
        }
    }
}

void emx_matmul(float *out, const EmxTensor *w, const EmxActs *a, int n_threads) {
    EmxMatmulJob job = {out, w};
    emx_matmul_multi(&job, 1, a, n_threads);
}
