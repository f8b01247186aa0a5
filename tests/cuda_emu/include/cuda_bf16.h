// cuda_bf16.h (CUDA emulator) — __nv_bfloat16: the top 16 bits of a float.
//
// float -> bf16 rounds to nearest even on the dropped 16 bits (overflow gives ±inf) and turns
// every NaN into 0x7fff, as the hardware does; bf16 -> float is exact (append 16 zero bits).
// Implicit conversions to and from float as in CUDA; bf16 arithmetic is deleted (not modelled).
#ifndef EMU_CUDA_BF16_H
#define EMU_CUDA_BF16_H

#include <stdint.h>
#include <string.h>

#include "cuda_fp16.h"

static inline unsigned short emu_float_to_bf16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;
    u += 0x7fffu + ((u >> 16) & 1u); // round to nearest, ties to even
    return (unsigned short)(u >> 16);
}

static inline float emu_bf16_bits_to_float(unsigned short b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#ifdef __cplusplus
struct __nv_bfloat16 {
    unsigned short __x;
    __nv_bfloat16() = default;
    __nv_bfloat16(float f) : __x(emu_float_to_bf16_bits(f)) {}
    __nv_bfloat16(double d) : __x(emu_float_to_bf16_bits((float)d)) {}
    operator float() const { return emu_bf16_bits_to_float(__x); }
};
struct __attribute__((aligned(4))) __nv_bfloat162 {
    __nv_bfloat16 x, y;
};
typedef __nv_bfloat16 nv_bfloat16;
typedef __nv_bfloat162 nv_bfloat162;

__nv_bfloat16 operator+(__nv_bfloat16, __nv_bfloat16) = delete;
__nv_bfloat16 operator-(__nv_bfloat16, __nv_bfloat16) = delete;
__nv_bfloat16 operator*(__nv_bfloat16, __nv_bfloat16) = delete;
__nv_bfloat16 operator/(__nv_bfloat16, __nv_bfloat16) = delete;
__nv_bfloat16 operator-(__nv_bfloat16) = delete;
__nv_bfloat16 &operator+=(__nv_bfloat16 &, __nv_bfloat16) = delete;
__nv_bfloat16 &operator-=(__nv_bfloat16 &, __nv_bfloat16) = delete;
__nv_bfloat16 &operator*=(__nv_bfloat16 &, __nv_bfloat16) = delete;
__nv_bfloat16 &operator/=(__nv_bfloat16 &, __nv_bfloat16) = delete;

static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { __nv_bfloat16 b; b.__x = u; return b; }
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.__x; }
static inline __nv_bfloat16 __float2bfloat16(float f) { return __ushort_as_bfloat16(emu_float_to_bf16_bits(f)); }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __float2bfloat16(f); }
static inline float __bfloat162float(__nv_bfloat16 b) { return emu_bf16_bits_to_float(b.__x); }
#else
typedef struct { unsigned short __x; } __nv_bfloat16;
typedef struct __attribute__((aligned(4))) { __nv_bfloat16 x, y; } __nv_bfloat162;
#endif

#endif
