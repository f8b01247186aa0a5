// cuda_fp16.h (CUDA emulator) — __half: IEEE binary16 stored as its 16 bits.
//
// Conversions are bit-exact with the GPU: float -> half rounds to nearest even (ties to even),
// overflows to ±inf from 65520 up, keeps subnormals, and turns every NaN into 0x7fff as the
// hardware's cvt.rn.f16.f32 does; half -> float is exact. As in CUDA, __half converts implicitly
// to and from float, but half arithmetic (__hadd, h1 + h2, ...) is not modelled: those are
// deleted here, so a kernel that needs them fails to compile instead of computing in float.
#ifndef EMU_CUDA_FP16_H
#define EMU_CUDA_FP16_H

#include <stdint.h>
#include <string.h>

#include <vector_types.h>

static inline unsigned short emu_float_to_half_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return 0x7fffu;                      // NaN: canonical, sign dropped
    if (a >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u); // >= 65520 rounds to inf
    if (a < 0x38800000u) {                                    // below 2^-14: half subnormal or 0
        uint32_t shift = 126u - (a >> 23);                    // value = mant * 2^-24 >> shift'
        if (shift > 24u) return (unsigned short)sign;         // below 2^-25: rounds to zero
        uint32_t mant = (a & 0x7fffffu) | 0x800000u;
        uint32_t q = mant >> shift, rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u))) q++;     // nearest, ties to even
        return (unsigned short)(sign | q);
    }
    // Normal: re-bias the exponent and round the 13 dropped bits to nearest even.
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u) - ((127u - 15u) << 23);
    return (unsigned short)(sign | (r >> 13));
}

static inline float emu_half_bits_to_float(unsigned short h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
    if (e == 0 && m == 0) {
        u = sign;
    } else if (e == 0) { // subnormal: m * 2^-24, exact in float
        float f = (float)m * (1.0f / 16777216.0f);
        memcpy(&u, &f, 4);
        u |= sign;
    } else if (e == 31) { // inf / NaN (payload kept)
        u = sign | 0x7f800000u | (m << 13);
    } else {
        u = sign | ((e + 127u - 15u) << 23) | (m << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#ifdef __cplusplus
struct __half {
    unsigned short __x;
    __half() = default;
    __half(float f) : __x(emu_float_to_half_bits(f)) {}
    __half(double d) : __x(emu_float_to_half_bits((float)d)) {}
    operator float() const { return emu_half_bits_to_float(__x); }
};
struct __attribute__((aligned(4))) __half2 {
    __half x, y;
};
typedef __half half;
typedef __half2 half2;

// Half arithmetic is not modelled (see above): a compile error, not float math in disguise.
__half operator+(__half, __half) = delete;
__half operator-(__half, __half) = delete;
__half operator*(__half, __half) = delete;
__half operator/(__half, __half) = delete;
__half operator-(__half) = delete;
__half &operator+=(__half &, __half) = delete;
__half &operator-=(__half &, __half) = delete;
__half &operator*=(__half &, __half) = delete;
__half &operator/=(__half &, __half) = delete;

static inline __half __ushort_as_half(unsigned short u) { __half h; h.__x = u; return h; }
static inline unsigned short __half_as_ushort(__half h) { return h.__x; }
static inline __half __float2half(float f) { return __ushort_as_half(emu_float_to_half_bits(f)); }
static inline __half __float2half_rn(float f) { return __float2half(f); }
static inline float __half2float(__half h) { return emu_half_bits_to_float(h.__x); }
static inline float2 __half22float2(__half2 h) { return make_float2(__half2float(h.x), __half2float(h.y)); }
#else
typedef struct { unsigned short __x; } __half;
typedef struct __attribute__((aligned(4))) { __half x, y; } __half2;
#endif

#endif
