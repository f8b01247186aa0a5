// emu/intrinsics.h — CUDA's device intrinsics and math that the contract allows, as host code.
//
// __dp4a: four byte products summed into a 32-bit accumulator, wrapping like the hardware.
// Fast-math variants (__expf, __logf, __fdividef) are the accurate libm functions: the GPU's
// are less precise, so tests of kernels that use them need tolerances (say so at the test).
// min/max take the overloads CUDA's math headers declare (mixed signed/unsigned included).
#ifndef EMU_INTRINSICS_H
#define EMU_INTRINSICS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../vector_types.h"

inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }

inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
inline int __float_as_int(float f) { int i; memcpy(&i, &f, 4); return i; }
inline float __uint_as_float(unsigned int u) { float f; memcpy(&f, &u, 4); return f; }
inline unsigned int __float_as_uint(float f) { unsigned int u; memcpy(&u, &f, 4); return u; }

template <class T> inline T __ldg(const T *p) { return *p; }

// Sum of the four byte products, plus c; the 32-bit result wraps (computed unsigned: no UB).
inline int __dp4a(int a, int b, int c) {
    uint32_t acc = (uint32_t)c;
    for (int i = 0; i < 4; i++)
        acc += (uint32_t)((int32_t)(int8_t)(a >> (8 * i)) * (int32_t)(int8_t)(b >> (8 * i)));
    return (int)acc;
}
inline unsigned int __dp4a(unsigned int a, unsigned int b, unsigned int c) {
    uint32_t acc = c;
    for (int i = 0; i < 4; i++) acc += ((a >> (8 * i)) & 0xffu) * ((b >> (8 * i)) & 0xffu);
    return acc;
}
inline int __dp4a(char4 a, char4 b, int c) {
    int ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    return __dp4a(ia, ib, c);
}
inline unsigned int __dp4a(uchar4 a, uchar4 b, unsigned int c) {
    unsigned int ua, ub;
    memcpy(&ua, &a, 4);
    memcpy(&ub, &b, 4);
    return __dp4a(ua, ub, c);
}

#define EMU_MINMAX(R, A, B)                                                                      \
    inline R min(A a, B b) { return (R)a < (R)b ? (R)a : (R)b; }                                 \
    inline R max(A a, B b) { return (R)a > (R)b ? (R)a : (R)b; }
EMU_MINMAX(int, int, int)
EMU_MINMAX(unsigned int, unsigned int, unsigned int)
EMU_MINMAX(unsigned int, int, unsigned int)
EMU_MINMAX(unsigned int, unsigned int, int)
EMU_MINMAX(long, long, long)
EMU_MINMAX(unsigned long, unsigned long, unsigned long)
EMU_MINMAX(unsigned long, long, unsigned long)
EMU_MINMAX(unsigned long, unsigned long, long)
EMU_MINMAX(long long, long long, long long)
EMU_MINMAX(unsigned long long, unsigned long long, unsigned long long)
EMU_MINMAX(unsigned long long, long long, unsigned long long)
EMU_MINMAX(unsigned long long, unsigned long long, long long)
#undef EMU_MINMAX
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
inline double min(float a, double b) { return fmin(a, b); }
inline double max(float a, double b) { return fmax(a, b); }
inline double min(double a, float b) { return fmin(a, b); }
inline double max(double a, float b) { return fmax(a, b); }

#endif
