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

// The 1-row 4-bit kernel's 512-bit form (see dot64_u4): AVX-512 VNNI with BW/VL/DQ.
#if defined(EMX_AVX2) && defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__)
#define EMX_NIBBLES_512 1
#else
#define EMX_NIBBLES_512 0
#endif

const char *emx_cpu_simd_name(void) {
#if EMX_NIBBLES_512
    return "avx2" EMX_VNNI "+avx512vnni(q4 decode)";
#elif defined(EMX_AVX2)
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

// ---------------------------------------------------------------------------------------------
// Quantised dots: one accumulation order for one activation row and for four
//
// Batch invariance (cpu_matmul.h) needs emx_dot_* and emx_dot4_* to give bitwise the same
// float for the same (weight row, activation row). The integer part of a group is exact
// whatever the instructions; the float part follows this order in every kernel, for one
// weight row against one activation row, with ng = n/32 groups, p_g = the group's 8 int32
// partial sums as floats (exact; lane l holds bytes 4l..4l+3) and s_g = d_w(g) * d_x(g):
//   chain A: A = fma(p_g, s_g, A) for the even groups g = 0, 2, 4, ..., in order, and the
//            last group if ng is odd;
//   chain B: the same for the odd groups g = 1, 3, 5, ... (ng odd: but the last);
//   sum = hsum(A + B)                                                        (chains_sum)
// so a pair of groups (2p, 2p+1) is one step of both chains: one 512-bit register holds it.
// (The kernels take the scales of 8 groups at a time; the last, partial block of 8 goes on in
// pairs, then the odd group, if any, alone.)
// and for q4/q4_1 the offset term sum c_g * s_x(g) over the groups (offsets_sum), combined by
// nibble_finish_q4 / nibble_finish_q4_1. Two chains and not one: for one row (decode) a single
// FMA chain's latency would bound the q4 kernel. The epilogues are shared functions, so the
// two kernels cannot round them differently; test_batch_invariance.c holds them to it.

// Sum of w[j] * x[j] over 32 signed bytes, as 8 int32 partial sums converted to float.
// maddubs multiplies unsigned by signed bytes, so move w's sign onto x: |w| * (x * sign(w)).
// Each int16 pair sum is at most 2 * 128 * 127 < 32768: no saturation. aw = |w|, taken once
// per weight group by the 4-row kernel.
static inline __m256 dot32_i8_abs(__m256i aw, __m256i w, __m256i x) {
    return _mm256_cvtepi32_ps(dot_u8i8(aw, _mm256_sign_epi8(x, w)));
}
static inline __m256 dot32_i8(__m256i w, __m256i x) { return dot32_i8_abs(_mm256_sign_epi8(w, w), w, x); }

// 16 bytes of nibbles -> 32 unsigned bytes 0..15: low nibbles are weights 0..15 (low 128-bit
// lane), high nibbles weights 16..31 (high lane), matching x's order. They are used as they are
// (maddubs' unsigned operand, no sign trick needed); the +8 offset of q4 is removed for the
// whole row at once: sum (nib - 8) x = sum nib x - 8 sum x (offsets_sum).
static inline __m256i unpack_nibbles(const uint8_t *b) {
    __m128i v = _mm_loadu_si128((const __m128i *)b);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0xf));
}
// Two consecutive groups' 32 bytes of nibbles at once: one 256-bit load, one mask for the low
// and one shift + mask for the high nibbles of both, then each group's lanes regathered
// (low | high). Per group that is half a load and fewer shuffles than unpack_nibbles: decode
// of q4 is bound by this unpacking, not by memory. Same bytes as unpack_nibbles(b), (b + 16).
static inline void unpack_nibbles_pair(const uint8_t *b, __m256i *first, __m256i *second) {
    const __m256i v = _mm256_loadu_si256((const __m256i *)b), mask = _mm256_set1_epi8(0xf);
    const __m256i lo = _mm256_and_si256(v, mask);                       // [g: 0..15 | g+1: 0..15]
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask); // [g: 16..31 | g+1: 16..31]
    *first = _mm256_permute2x128_si256(lo, hi, 0x20);
    *second = _mm256_permute2x128_si256(lo, hi, 0x31);
}
#if EMX_NIBBLES_512
// Two groups' nibble dots in one 512-bit register (the 1-row q4/q4_1 kernel): 32 bytes of
// nibbles, each 128-bit quarter of the weights' register then holds, in order, group g's
// weights 0..15 (low nibbles) and 16..31 (high), group g+1's 0..15 and 16..31, against the two
// groups' 64 activation bytes. Lanes 0..7: group g's 8 partial sums; lanes 8..15: group g+1's.
static inline __m512 dot64_u4(const uint8_t *b, const int8_t *x) {
    const __m512i v = _mm512_permutexvar_epi64(_mm512_set_epi64(3, 2, 3, 2, 1, 0, 1, 0),
                                               _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)b)));
    // quarters 1 and 3 take the high nibbles (16-bit elements 8..15 and 24..31 shifted)
    const __m512i nib = _mm512_and_si512(_mm512_mask_srli_epi16(v, 0xFF00FF00u, v, 4), _mm512_set1_epi8(0xf));
    const __m512i acc = _mm512_dpbusd_epi32(_mm512_setzero_si512(), nib, _mm512_loadu_si512((const void *)x));
    return _mm512_cvtepi32_ps(acc);
}
#endif
static inline __m256 dot32_u4(__m256i nib, const int8_t *x) {
    return _mm256_cvtepi32_ps(dot_u8i8(nib, _mm256_loadu_si256((const __m256i *)x)));
}

static inline float chains_sum(__m256 a, __m256 b) { return hsum_ps(_mm256_add_ps(a, b)); }

// sum over groups of c_g * xs_g (c: f16 per group, xs: the activation's d_x * sum(q_x)): 8
// lanes over the whole blocks of 8 groups, the tail groups one by one, then lanes + tail.
// (nibble_dot computes the same inline.)
static inline float offsets_total(__m256 lanes, float tail) { return hsum_ps(lanes) + tail; }
static inline float offsets_sum(const uint16_t *c, const float *xs, int ng) {
    __m256 acc = _mm256_setzero_ps();
    int g = 0;
    for (; g + 8 <= ng; g += 8)
        acc = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(c + g))), _mm256_loadu_ps(xs + g), acc);
    float tail = 0;
    for (; g < ng; g++) tail += _cvtsh_ss(c[g]) * xs[g];
    return offsets_total(acc, tail);
}

// q4: weight = (nib - 8) d, so the row's dot is the nibbles' dot minus 8 sum d_w s_x.
static inline float nibble_finish_q4(__m256 a, __m256 b, float offsets) { return chains_sum(a, b) - 8.0f * offsets; }
// q4_1: weight = nib d + m: the nibbles' dot plus sum m s_x.
static inline float nibble_finish_q4_1(__m256 a, __m256 b, float offsets) { return chains_sum(a, b) + offsets; }

float emx_dot_q8(const int8_t *w, const uint16_t *wd, const int8_t *xq, const float *xd, int n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();  // chains A and B
    float ds[8];  // s_g of a block of 8 groups, converted from f16 together
    int g = 0, ng = n / 32;
    for (; g + 8 <= ng; g += 8) {
        __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wd + g)));
        _mm256_storeu_ps(ds, _mm256_mul_ps(dw, _mm256_loadu_ps(xd + g)));
        for (int k = 0; k < 8; k += 2) {
            const int8_t *wg = w + (g + k) * 32, *xg = xq + (g + k) * 32;
            __m256 p0 = dot32_i8(_mm256_loadu_si256((const __m256i *)wg), _mm256_loadu_si256((const __m256i *)xg));
            __m256 p1 = dot32_i8(_mm256_loadu_si256((const __m256i *)(wg + 32)), _mm256_loadu_si256((const __m256i *)(xg + 32)));
            a0 = _mm256_fmadd_ps(p0, _mm256_broadcast_ss(ds + k), a0);
            a1 = _mm256_fmadd_ps(p1, _mm256_broadcast_ss(ds + k + 1), a1);
        }
    }
    for (; g < ng; g++) {  // the partial block: pairs into chains A and B, an odd last group into A
        __m256 p = dot32_i8(_mm256_loadu_si256((const __m256i *)(w + g * 32)), _mm256_loadu_si256((const __m256i *)(xq + g * 32)));
        if ((g & 1) == 0) a0 = _mm256_fmadd_ps(p, _mm256_set1_ps(_cvtsh_ss(wd[g]) * xd[g]), a0);
        else a1 = _mm256_fmadd_ps(p, _mm256_set1_ps(_cvtsh_ss(wd[g]) * xd[g]), a1);
    }
    return chains_sum(a0, a1);
}

// One row of nibbles against one activation row: chains A and B of the nibbles' dot, and the
// offset term computed alongside (the block loop converts d_w once for both): the same
// operations in the same order as offsets_sum, which the 4-row kernel calls instead.
// Always inlined: the q4 / q4_1 choice (wm == NULL: q4) is resolved at compile time.
static inline __attribute__((always_inline)) float nibble_dot(const uint8_t *w, const uint16_t *wd, const uint16_t *wm,
                                                              const int8_t *xq, const float *xd, const float *xs, int ng) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    __m256 off = _mm256_setzero_ps();  // offsets_sum's 8 lanes
#if EMX_NIBBLES_512
    __m512 ab = _mm512_setzero_ps();  // [chain A | chain B]
#endif
    float ds[8];
    int g = 0;
    for (; g + 8 <= ng; g += 8) {
        __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wd + g)));
        _mm256_storeu_ps(ds, _mm256_mul_ps(dw, _mm256_loadu_ps(xd + g)));
        __m256 c = wm ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wm + g))) : dw;
        off = _mm256_fmadd_ps(c, _mm256_loadu_ps(xs + g), off);
#if EMX_NIBBLES_512
        // chains A and B side by side in one 512-bit register: its low half takes the even
        // groups, its high half the odd ones, lane for lane the same FMAs as the two 256-bit
        // chains, so the result is bitwise that of the 256-bit kernel (and of the 4-row one).
        const __m512 dsz = _mm512_castps256_ps512(_mm256_loadu_ps(ds));
        for (int k = 0; k < 8; k += 2) {
            const __m512 p = dot64_u4(w + (g + k) * 16, xq + (g + k) * 32);
            const __m512 sc = _mm512_permutexvar_ps(_mm512_set_epi32(k + 1, k + 1, k + 1, k + 1, k + 1, k + 1, k + 1,
                                                                     k + 1, k, k, k, k, k, k, k, k), dsz);
            ab = _mm512_fmadd_ps(p, sc, ab);
        }
#else
        for (int k = 0; k < 8; k += 2) {
            __m256i n0, n1;
            unpack_nibbles_pair(w + (g + k) * 16, &n0, &n1);
            a0 = _mm256_fmadd_ps(dot32_u4(n0, xq + (g + k) * 32), _mm256_broadcast_ss(ds + k), a0);
            a1 = _mm256_fmadd_ps(dot32_u4(n1, xq + (g + k + 1) * 32), _mm256_broadcast_ss(ds + k + 1), a1);
        }
#endif
    }
#if EMX_NIBBLES_512
    a0 = _mm512_castps512_ps256(ab);
    a1 = _mm512_extractf32x8_ps(ab, 1);
#endif
    float tail = 0;  // offsets_sum's tail
    for (; g < ng; g++) {  // the partial block: even groups into chain A, odd into B
        const float dw = _cvtsh_ss(wd[g]);
        const __m256 p = dot32_u4(unpack_nibbles(w + g * 16), xq + g * 32);
        if ((g & 1) == 0) a0 = _mm256_fmadd_ps(p, _mm256_set1_ps(dw * xd[g]), a0);
        else a1 = _mm256_fmadd_ps(p, _mm256_set1_ps(dw * xd[g]), a1);
        tail += (wm ? _cvtsh_ss(wm[g]) : dw) * xs[g];
    }
    return wm ? nibble_finish_q4_1(a0, a1, offsets_total(off, tail)) : nibble_finish_q4(a0, a1, offsets_total(off, tail));
}

float emx_dot_q4(const uint8_t *w, const uint16_t *wd, const int8_t *xq, const float *xd, const float *xs, int n) {
    return nibble_dot(w, wd, NULL, xq, xd, xs, n / 32);
}

float emx_dot_q4_1(const uint8_t *w, const uint16_t *wd, const uint16_t *wm, const int8_t *xq, const float *xd,
                   const float *xs, int n) {
    return nibble_dot(w, wd, wm, xq, xd, xs, n / 32);
}

// 4 activation rows: per group of 32 weights, one load (q8) or unpack (q4) of the weights and
// one f16 scale conversion serve four rows. Each row keeps its own chains A and B and gets
// exactly the single-row kernel's order (8 accumulators: fits AVX2's 16 registers).
void emx_dot4_q8(const int8_t *w, const uint16_t *wd, const int8_t *xq, const float *xd, int n, float out[4]) {
    const int ng = n / 32;
    const int8_t *x0 = xq, *x1 = xq + n, *x2 = xq + 2 * n, *x3 = xq + 3 * n;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    __m256 b0 = _mm256_setzero_ps(), b1 = _mm256_setzero_ps(), b2 = _mm256_setzero_ps(), b3 = _mm256_setzero_ps();
    float ds[4][8];  // s_g per row of a block of 8 groups
    int g = 0;
    for (; g + 8 <= ng; g += 8) {
        __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wd + g)));
        for (int t = 0; t < 4; t++) _mm256_storeu_ps(ds[t], _mm256_mul_ps(dw, _mm256_loadu_ps(xd + (size_t)t * ng + g)));
        for (int k = 0; k < 8; k += 2) {
            // group k: chain A of each row, group k+1: chain B, as in emx_dot_q8
            const int8_t *wg = w + (g + k) * 32;
            const int o = (g + k) * 32;
            __m256i wv = _mm256_loadu_si256((const __m256i *)wg), aw = _mm256_sign_epi8(wv, wv);
#define EMX_Q8_ROW(acc, x, t, kk)                                                                          \
    acc = _mm256_fmadd_ps(dot32_i8_abs(aw, wv, _mm256_loadu_si256((const __m256i *)(x + o + 32 * (kk - k)))), \
                          _mm256_broadcast_ss(&ds[t][kk]), acc)
            EMX_Q8_ROW(a0, x0, 0, k);
            EMX_Q8_ROW(a1, x1, 1, k);
            EMX_Q8_ROW(a2, x2, 2, k);
            EMX_Q8_ROW(a3, x3, 3, k);
            wv = _mm256_loadu_si256((const __m256i *)(wg + 32));
            aw = _mm256_sign_epi8(wv, wv);
            EMX_Q8_ROW(b0, x0, 0, k + 1);
            EMX_Q8_ROW(b1, x1, 1, k + 1);
            EMX_Q8_ROW(b2, x2, 2, k + 1);
            EMX_Q8_ROW(b3, x3, 3, k + 1);
#undef EMX_Q8_ROW
        }
    }
    for (; g < ng; g++) {  // the partial block: even groups into chain A, odd into B, as in emx_dot_q8
        const float dw = _cvtsh_ss(wd[g]);
        const __m256i wv = _mm256_loadu_si256((const __m256i *)(w + g * 32));
#define EMX_Q8_TAIL(a, b, x, t)                                                                            \
    do {                                                                                                   \
        const __m256 p = dot32_i8(wv, _mm256_loadu_si256((const __m256i *)(x + g * 32)));                  \
        const __m256 sc = _mm256_set1_ps(dw * xd[(size_t)t * ng + g]);                                     \
        if ((g & 1) == 0) a = _mm256_fmadd_ps(p, sc, a);                                                   \
        else b = _mm256_fmadd_ps(p, sc, b);                                                                \
    } while (0)
        EMX_Q8_TAIL(a0, b0, x0, 0);
        EMX_Q8_TAIL(a1, b1, x1, 1);
        EMX_Q8_TAIL(a2, b2, x2, 2);
        EMX_Q8_TAIL(a3, b3, x3, 3);
#undef EMX_Q8_TAIL
    }
    out[0] = chains_sum(a0, b0);
    out[1] = chains_sum(a1, b1);
    out[2] = chains_sum(a2, b2);
    out[3] = chains_sum(a3, b3);
}

// Four activation rows against one row of 4-bit weights: the nibbles' chains as in nibble_dot,
// then each row's offset term (offsets_sum: nibble_dot's operations, in a loop of their own).
// Always inlined so each caller gets a copy with the q4 / q4_1 choice resolved at compile time.
static inline __attribute__((always_inline)) void dot4_nibbles(const uint8_t *w, const uint16_t *wd,
                                                               const uint16_t *wm /* NULL: q4 */,
                                                               const int8_t *xq, const float *xd,
                                                               const float *xs, int n, float out[4]) {
    const int ng = n / 32;
    const int8_t *x0 = xq, *x1 = xq + n, *x2 = xq + 2 * n, *x3 = xq + 3 * n;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    __m256 b0 = _mm256_setzero_ps(), b1 = _mm256_setzero_ps(), b2 = _mm256_setzero_ps(), b3 = _mm256_setzero_ps();
    float ds[4][8];
    int g = 0;
    for (; g + 8 <= ng; g += 8) {
        __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wd + g)));
        for (int t = 0; t < 4; t++) _mm256_storeu_ps(ds[t], _mm256_mul_ps(dw, _mm256_loadu_ps(xd + (size_t)t * ng + g)));
        for (int k = 0; k < 8; k += 2) {
            // group k: chain A of each row, group k+1: chain B, as in nibble_dot
            const int o = (g + k) * 32;
            __m256i nib = unpack_nibbles(w + (g + k) * 16);
#define EMX_Q4_ROW(acc, x, t, kk) \
    acc = _mm256_fmadd_ps(dot32_u4(nib, x + o + 32 * (kk - k)), _mm256_broadcast_ss(&ds[t][kk]), acc)
            EMX_Q4_ROW(a0, x0, 0, k);
            EMX_Q4_ROW(a1, x1, 1, k);
            EMX_Q4_ROW(a2, x2, 2, k);
            EMX_Q4_ROW(a3, x3, 3, k);
            nib = unpack_nibbles(w + (g + k + 1) * 16);
            EMX_Q4_ROW(b0, x0, 0, k + 1);
            EMX_Q4_ROW(b1, x1, 1, k + 1);
            EMX_Q4_ROW(b2, x2, 2, k + 1);
            EMX_Q4_ROW(b3, x3, 3, k + 1);
#undef EMX_Q4_ROW
        }
    }
    for (; g < ng; g++) {  // the partial block: even groups into chain A, odd into B
        const float dw = _cvtsh_ss(wd[g]);
        const __m256i nib = unpack_nibbles(w + g * 16);
#define EMX_Q4_TAIL(a, b, x, t)                                                                            \
    do {                                                                                                   \
        const __m256 p = dot32_u4(nib, x + g * 32), sc = _mm256_set1_ps(dw * xd[(size_t)t * ng + g]);      \
        if ((g & 1) == 0) a = _mm256_fmadd_ps(p, sc, a);                                                   \
        else b = _mm256_fmadd_ps(p, sc, b);                                                                \
    } while (0)
        EMX_Q4_TAIL(a0, b0, x0, 0);
        EMX_Q4_TAIL(a1, b1, x1, 1);
        EMX_Q4_TAIL(a2, b2, x2, 2);
        EMX_Q4_TAIL(a3, b3, x3, 3);
#undef EMX_Q4_TAIL
    }
    const __m256 a[4] = {a0, a1, a2, a3}, b[4] = {b0, b1, b2, b3};
    for (int t = 0; t < 4; t++)
        out[t] = wm ? nibble_finish_q4_1(a[t], b[t], offsets_sum(wm, xs + (size_t)t * ng, ng))
                    : nibble_finish_q4(a[t], b[t], offsets_sum(wd, xs + (size_t)t * ng, ng));
}

void emx_dot4_q4(const uint8_t *w, const uint16_t *wd, const int8_t *xq, const float *xd, const float *xs, int n,
                 float out[4]) {
    dot4_nibbles(w, wd, NULL, xq, xd, xs, n, out);
}

void emx_dot4_q4_1(const uint8_t *w, const uint16_t *wd, const uint16_t *wm, const int8_t *xq, const float *xd,
                   const float *xs, int n, float out[4]) {
    dot4_nibbles(w, wd, wm, xq, xd, xs, n, out);
}

// ---------------------------------------------------------------------------------------------
// 4 × 4 tiles (prefill): four weight rows against four activation rows
//
// The 4-row kernels above load each weight group once per four activation rows but still
// re-read every activation group once per weight row, and spend five instructions per group
// and row pair (sign, dot, convert, broadcast, FMA). Here a 512-bit register holds two groups
// (chains A and B side by side, as in dot64_u4), and 16 cells (weight row r, activation row t)
// share each load: per pair of groups and cell, one vpdpbusd, one convert, one multiply (the
// scales) and one FMA, for 64 multiply-adds. The order of the float operations of a cell is
// exactly the 1-row kernel's (chains A and B, an odd last group in chain A, chains_sum), so the
// result is bitwise emx_dot_* of that cell.
#if EMX_NIBBLES_512
// 32 bytes of nibbles (groups g, g+1) -> 64 unsigned bytes in the activations' order (dot64_u4)
static inline __m512i nibbles64(const uint8_t *b) {
    const __m512i v = _mm512_permutexvar_epi64(_mm512_set_epi64(3, 2, 3, 2, 1, 0, 1, 0),
                                               _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)b)));
    return _mm512_and_si512(_mm512_mask_srli_epi16(v, 0xFF00FF00u, v, 4), _mm512_set1_epi8(0xf));
}

// The pairs of groups of a 4 x 4 tile into acc[r][t] = [chain A | chain B] (an odd last group is
// left to the caller).
// q8: int8 rows (row r at w + r*n); nibbles: 4-bit rows (row r at w + r*n/2).
// vpdpbusd multiplies unsigned by signed bytes. Nibbles are unsigned already. int8 weights are
// made unsigned (w + 128: one xor per weight group, shared by the four activation rows) and
// each activation row's 128 * sum(x) taken off by starting its sums at -128 * sum(x) (one
// vpdpbusd per activation group, shared by the four weight rows): in every lane the same exact
// integer as the 1-row kernel's |w| * sign(x, w).
// Registers: 16 accumulators, 4 weight groups, the activation group and its start, the scale
// pair: the 32 zmm registers hold them without spilling. The 16 scale products of a block are
// computed at once (s_g = d_w * d_x, the 1-row kernel's multiply) and each pair spread over its
// lanes straight from memory.
static inline __attribute__((always_inline)) void tile_pairs(__m512 acc[4][4], int nt, int nibbles, const uint8_t *w,
                                                             const uint16_t *wd, const int8_t *xq, const float *xd,
                                                             int n, int ng) {
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    // the block's scales spread by pairs: [r or t][pair p][lanes 0..7: group 2p, 8..15: 2p+1]
    float wsp[4][4][16] __attribute__((aligned(64))), xsp[4][4][16] __attribute__((aligned(64)));
    for (int g = 0; g + 2 <= ng; g += 8) {
        // groups of this block: 8, or what is left of the row rounded down to pairs (the odd
        // last group, if any, is the caller's); masked loads stay inside the rows' scales
        const int m = ng - g >= 8 ? 8 : (ng - g) & ~1;
        const __mmask8 live = (__mmask8)((1u << m) - 1);
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const __m512i spread = _mm512_set_epi32(2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k + 1,
                                                    2 * k + 1, 2 * k + 1, 2 * k, 2 * k, 2 * k, 2 * k, 2 * k, 2 * k,
                                                    2 * k, 2 * k);
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) {
                const __m256i dw16 = _mm256_castsi128_si256(_mm_maskz_loadu_epi16(live, wd + (size_t)r * ng + g));
                const __m512 dw = _mm512_castps256_ps512(_mm256_cvtph_ps(_mm256_castsi256_si128(dw16)));
                _mm512_store_ps(wsp[r][k], _mm512_permutexvar_ps(spread, dw));
            }
#pragma GCC unroll 4
            for (int t = 0; t < nt; t++) {
                const __m512 dx = _mm512_castps256_ps512(_mm256_maskz_loadu_ps(live, xd + (size_t)t * ng + g));
                _mm512_store_ps(xsp[t][k], _mm512_permutexvar_ps(spread, dx));
            }
        }
#pragma GCC unroll 4
        for (int k = 0; k < 8; k += 2) {
            if (k >= m) break;
            __m512i wv[4];
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++)
                wv[r] = nibbles ? nibbles64(w + (size_t)r * n / 2 + (size_t)(g + k) * 16)
                                : _mm512_xor_si512(_mm512_loadu_si512((const void *)(w + (size_t)r * n + (size_t)(g + k) * 32)), flip);
#pragma GCC unroll 4
            for (int t = 0; t < nt; t++) {
                const __m512i x = _mm512_loadu_si512((const void *)(xq + (size_t)t * n + (size_t)(g + k) * 32));
                const __m512i start = nibbles ? _mm512_setzero_si512()
                                              : _mm512_sub_epi32(_mm512_setzero_si512(),
                                                                 _mm512_dpbusd_epi32(_mm512_setzero_si512(), flip, x));
#pragma GCC unroll 4
                for (int r = 0; r < 4; r++) {
                    const __m512 p = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start, wv[r], x));
                    // s_g = d_w(g) * d_x(g), the 1-row kernel's product, lane by lane
                    const __m512 sc = _mm512_mul_ps(_mm512_load_ps(wsp[r][k / 2]), _mm512_load_ps(xsp[t][k / 2]));
                    acc[r][t] = _mm512_fmadd_ps(p, sc, acc[r][t]);
                }
            }
        }
    }
}
#endif


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

// Four weight rows against nt = 4 or 1 activation rows: the tile's pairs, then per cell the odd
// last group (chain A) and the epilogue. out [4][nt]. Without AVX-512 VNNI: the 4-row and
// 1-row kernels, which give the same bits.
static inline __attribute__((always_inline)) void tile_q8(const int8_t *w, const uint16_t *wd, const int8_t *xq,
                                                          const float *xd, int n, int nt, float *out) {
    const int ng = n / 32;
#if EMX_NIBBLES_512
    __m512 acc[4][4];
    for (int r = 0; r < 4; r++)
        for (int t = 0; t < nt; t++) acc[r][t] = _mm512_setzero_ps();
    tile_pairs(acc, nt, 0, (const uint8_t *)w, wd, xq, xd, n, ng);
    for (int r = 0; r < 4; r++)
        for (int t = 0; t < nt; t++) {
            __m256 a = _mm512_castps512_ps256(acc[r][t]), b = _mm512_extractf32x8_ps(acc[r][t], 1);
            if (ng & 1) {  // the odd last group: chain A, as in emx_dot_q8
                const int g = ng - 1;
                const __m256i wv = _mm256_loadu_si256((const __m256i *)(w + (size_t)r * n + (size_t)g * 32));
                const __m256i xv = _mm256_loadu_si256((const __m256i *)(xq + (size_t)t * n + (size_t)g * 32));
                a = _mm256_fmadd_ps(dot32_i8(wv, xv), _mm256_set1_ps(_cvtsh_ss(wd[(size_t)r * ng + g]) * xd[(size_t)t * ng + g]), a);
            }
            out[r * nt + t] = chains_sum(a, b);
        }
#else
    for (int r = 0; r < 4; r++) {
        if (nt == 4) emx_dot4_q8(w + (size_t)r * n, wd + (size_t)r * ng, xq, xd, n, out + r * 4);
        else out[r] = emx_dot_q8(w + (size_t)r * n, wd + (size_t)r * ng, xq, xd, n);
    }
#endif
}

static inline __attribute__((always_inline)) void tile_nibbles(const uint8_t *w, const uint16_t *wd,
                                                               const uint16_t *wm /* NULL: q4 */, const int8_t *xq,
                                                               const float *xd, const float *xs, int n, int nt,
                                                               float *out) {
    const int ng = n / 32;
#if EMX_NIBBLES_512
    __m512 acc[4][4];
    for (int r = 0; r < 4; r++)
        for (int t = 0; t < nt; t++) acc[r][t] = _mm512_setzero_ps();
    tile_pairs(acc, nt, 1, w, wd, xq, xd, n, ng);
    for (int r = 0; r < 4; r++)
        for (int t = 0; t < nt; t++) {
            __m256 a = _mm512_castps512_ps256(acc[r][t]), b = _mm512_extractf32x8_ps(acc[r][t], 1);
            const uint16_t *wdr = wd + (size_t)r * ng;
            if (ng & 1) {  // the odd last group: chain A, as in nibble_dot
                const int g = ng - 1;
                const __m256i nib = unpack_nibbles(w + (size_t)r * n / 2 + (size_t)g * 16);
                a = _mm256_fmadd_ps(dot32_u4(nib, xq + (size_t)t * n + (size_t)g * 32),
                                    _mm256_set1_ps(_cvtsh_ss(wdr[g]) * xd[(size_t)t * ng + g]), a);
            }
            const float *xst = xs + (size_t)t * ng;
            out[r * nt + t] = wm ? nibble_finish_q4_1(a, b, offsets_sum(wm + (size_t)r * ng, xst, ng))
                                 : nibble_finish_q4(a, b, offsets_sum(wdr, xst, ng));
        }
#else
    for (int r = 0; r < 4; r++) {
        const uint8_t *wr = w + (size_t)r * n / 2;
        const uint16_t *wdr = wd + (size_t)r * ng, *wmr = wm ? wm + (size_t)r * ng : NULL;
        if (nt == 4) {
            if (wm) emx_dot4_q4_1(wr, wdr, wmr, xq, xd, xs, n, out + r * 4);
            else emx_dot4_q4(wr, wdr, xq, xd, xs, n, out + r * 4);
        } else {
            out[r] = wm ? emx_dot_q4_1(wr, wdr, wmr, xq, xd, xs, n) : emx_dot_q4(wr, wdr, xq, xd, xs, n);
        }
    }
#endif
}

void emx_dot4x4_q8(const int8_t *w, const uint16_t *wd, const int8_t *xq, const float *xd, int n, float out[4][4]) {
    tile_q8(w, wd, xq, xd, n, 4, &out[0][0]);
}
void emx_dot4x4_q4(const uint8_t *w, const uint16_t *wd, const int8_t *xq, const float *xd, const float *xs, int n,
                   float out[4][4]) {
    tile_nibbles(w, wd, NULL, xq, xd, xs, n, 4, &out[0][0]);
}
void emx_dot4x4_q4_1(const uint8_t *w, const uint16_t *wd, const uint16_t *wm, const int8_t *xq, const float *xd,
                     const float *xs, int n, float out[4][4]) {
    tile_nibbles(w, wd, wm, xq, xd, xs, n, 4, &out[0][0]);
}
void emx_dot4x1_q8(const int8_t *w, const uint16_t *wd, const int8_t *xq, const float *xd, int n, float out[4]) {
    tile_q8(w, wd, xq, xd, n, 1, out);
}
void emx_dot4x1_q4(const uint8_t *w, const uint16_t *wd, const int8_t *xq, const float *xd, const float *xs, int n,
                   float out[4]) {
    tile_nibbles(w, wd, NULL, xq, xd, xs, n, 1, out);
}
void emx_dot4x1_q4_1(const uint8_t *w, const uint16_t *wd, const uint16_t *wm, const int8_t *xq, const float *xd,
                     const float *xs, int n, float out[4]) {
    tile_nibbles(w, wd, wm, xq, xd, xs, n, 1, out);
}

// ---------------------------------------------------------------------------------------------
// Matmul

// The 4 x 4 tiles pay off where they are more than four 4-row kernels (AVX-512 VNNI).
#define EMX_TILES_4X4 EMX_NIBBLES_512

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
    // q8/q4/q4_1 take the activation rows four at a time: each group of weights is loaded (and
    // unpacked) once per four. The 4-row and 1-row kernels sum in the same order, so which one
    // a row lands in (it depends on n and on the row's index) does not change its result.
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

// out[i][r..r+3] for activation rows i in [i0, i0 + ni): four weight rows of one matrix at once,
// 4 x 4 tiles, then the activation rows left over one by one (the same bits either way).
static inline void matmul_quad(float *out, const EmxTensor *w, int r, const EmxActs *a, int i0, int ni) {
    const int rows = (int)w->rows, cols = (int)w->cols, ng = cols / 32;
    const uint8_t *base = (const uint8_t *)w->data;
    const size_t qbytes = w->dtype == EMX_Q8 ? (size_t)rows * cols : (size_t)rows * cols / 2;
    const uint16_t *scales = (const uint16_t *)(base + qbytes) + (size_t)r * ng;
    const uint16_t *mins = scales + (size_t)rows * ng;
    const size_t wrow = w->dtype == EMX_Q8 ? (size_t)cols : (size_t)cols / 2;  // bytes per weight row
    int i = i0;
    const int end = i0 + ni;
    for (; i + 4 <= end; i += 4) {
        float o[4][4];  // [weight row][activation row]
        const int8_t *xq = a->xq + (size_t)i * cols;
        const float *xd = a->xd + (size_t)i * ng, *xs = a->xs + (size_t)i * ng;
        if (w->dtype == EMX_Q8) emx_dot4x4_q8((const int8_t *)base + (size_t)r * wrow, scales, xq, xd, cols, o);
        else if (w->dtype == EMX_Q4) emx_dot4x4_q4(base + (size_t)r * wrow, scales, xq, xd, xs, cols, o);
        else emx_dot4x4_q4_1(base + (size_t)r * wrow, scales, mins, xq, xd, xs, cols, o);
        for (int t = 0; t < 4; t++)
            for (int k = 0; k < 4; k++) out[(size_t)(i + t) * rows + r + k] = o[k][t];
    }
    for (; i < end; i++) {  // the activation rows left over (decode: the only one), one at a time
        float o[4];
        const int8_t *xq = a->xq + (size_t)i * cols;
        const float *xd = a->xd + (size_t)i * ng, *xs = a->xs + (size_t)i * ng;
        if (w->dtype == EMX_Q8) emx_dot4x1_q8((const int8_t *)base + (size_t)r * wrow, scales, xq, xd, cols, o);
        else if (w->dtype == EMX_Q4) emx_dot4x1_q4(base + (size_t)r * wrow, scales, xq, xd, xs, cols, o);
        else emx_dot4x1_q4_1(base + (size_t)r * wrow, scales, mins, xq, xd, xs, cols, o);
        for (int k = 0; k < 4; k++) out[(size_t)i * rows + r + k] = o[k];
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
            for (int gr = g0; gr < g1;) {
                int j = 0, r = gr;  // global row -> (matrix, row)
                while (r >= (int)jobs[j].w->rows) r -= (int)jobs[j++].w->rows;
                const EmxTensor *w = jobs[j].w;
                if (EMX_TILES_4X4 && emx_dtype_wants_q8_acts(w->dtype) && r + 4 <= (int)w->rows && gr + 4 <= g1) {
                    matmul_quad(jobs[j].out, w, r, a, i, ni);
                    gr += 4;
                } else {
                    matmul_row(jobs[j].out, w, r, a, i, ni);
                    gr++;
                }
            }
        }
    }
}

void emx_matmul(float *out, const EmxTensor *w, const EmxActs *a, int n_threads) {
    EmxMatmulJob job = {out, w};
    emx_matmul_multi(&job, 1, a, n_threads);
}
