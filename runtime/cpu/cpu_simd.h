// cpu_simd.h — what the CPU kernels share about the SIMD target (private to runtime/cpu_*.c):
// which instruction sets the compiler targets, the u8 x i8 dot of 4-byte runs, horizontal sums.
#ifndef ENTROPIX_CPU_SIMD_H
#define ENTROPIX_CPU_SIMD_H

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define EMX_AVX2 1
#include <immintrin.h>
#endif

// Sum of 4 adjacent u8 × i8 products into each int32 lane: one instruction with AVX-VNNI
// (vpdpbusd, no intermediate saturation), else maddubs (pairs into int16) then madd (pairs of
// those into int32). Our operands never saturate maddubs: |products| <= 128 * 127 per byte.
#ifdef EMX_AVX2
// dot_u8i8_acc(acc, u, s): the same sums added to acc (VNNI builds only: EMX_VNNI256).
#if defined(__AVXVNNI__)
#define EMX_VNNI "+vnni"
#define EMX_VNNI256 1
#define dot_u8i8_acc(acc, u, s) _mm256_dpbusd_avx_epi32((acc), (u), (s))
#define dot_u8i8(u, s) _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), (u), (s))
#elif defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define EMX_VNNI "+vnni"
#define EMX_VNNI256 1
#define dot_u8i8_acc(acc, u, s) _mm256_dpbusd_epi32((acc), (u), (s))
#define dot_u8i8(u, s) _mm256_dpbusd_epi32(_mm256_setzero_si256(), (u), (s))
#else
#define EMX_VNNI ""
#define EMX_VNNI256 0
#define dot_u8i8(u, s) _mm256_madd_epi16(_mm256_maddubs_epi16((u), (s)), _mm256_set1_epi16(1))
#endif
#endif

// The quantised kernels' 512-bit forms (four weight rows at once): AVX-512 VNNI with BW/VL/DQ.
#if defined(EMX_AVX2) && defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__)
#define EMX_AVX512_VNNI 1
#else
#define EMX_AVX512_VNNI 0
#endif

#ifdef EMX_AVX2
static inline float emx_hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
#endif

#endif
