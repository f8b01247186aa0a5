// emu/atomics.h — CUDA's atomic functions on host memory.
//
// Threads of a block are fibers on one host thread and only switch inside barriers and warp
// ops, so an atomic never interleaves with another thread of the launch; the GCC __atomic
// builtins (relaxed) still make them safe when two host threads (two emulated devices) run
// kernels at once. Each returns the old value, as in CUDA. Only the overloads of the CUDA
// contract (plus the 64-bit max/min) exist: another type is a compile error.
#ifndef EMU_ATOMICS_H
#define EMU_ATOMICS_H

#include <string.h>

#define EMU_ATOMIC_INT(T)                                                                        \
    inline T atomicAdd(T *p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }         \
    inline T atomicExch(T *p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_RELAXED); }       \
    inline T atomicCAS(T *p, T expected, T desired) {                                            \
        __atomic_compare_exchange_n(p, &expected, desired, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED); \
        return expected; /* the old value whether or not it was swapped */                       \
    }                                                                                            \
    inline T atomicMax(T *p, T v) {                                                              \
        T old = __atomic_load_n(p, __ATOMIC_RELAXED);                                            \
        while (old < v && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {} \
        return old;                                                                              \
    }                                                                                            \
    inline T atomicMin(T *p, T v) {                                                              \
        T old = __atomic_load_n(p, __ATOMIC_RELAXED);                                            \
        while (old > v && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {} \
        return old;                                                                              \
    }

EMU_ATOMIC_INT(int)
EMU_ATOMIC_INT(unsigned int)
EMU_ATOMIC_INT(unsigned long long)
#undef EMU_ATOMIC_INT
inline long long atomicMax(long long *p, long long v) {
    long long old = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (old < v && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
    return old;
}
inline long long atomicMin(long long *p, long long v) {
    long long old = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (old > v && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
    return old;
}

// Floating-point add and exchange: a compare-and-swap loop on the bits.
#define EMU_ATOMIC_FLOAT(T, U)                                                                   \
    inline T atomicAdd(T *p, T v) {                                                              \
        U *bits = reinterpret_cast<U *>(p);                                                      \
        U old = __atomic_load_n(bits, __ATOMIC_RELAXED), sum;                                    \
        do {                                                                                     \
            T f;                                                                                 \
            memcpy(&f, &old, sizeof f);                                                          \
            f += v;                                                                              \
            memcpy(&sum, &f, sizeof f);                                                          \
        } while (!__atomic_compare_exchange_n(bits, &old, sum, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)); \
        T f;                                                                                     \
        memcpy(&f, &old, sizeof f);                                                              \
        return f;                                                                                \
    }                                                                                            \
    inline T atomicExch(T *p, T v) {                                                             \
        U nv, old;                                                                               \
        memcpy(&nv, &v, sizeof v);                                                               \
        old = __atomic_exchange_n(reinterpret_cast<U *>(p), nv, __ATOMIC_RELAXED);               \
        T f;                                                                                     \
        memcpy(&f, &old, sizeof f);                                                              \
        return f;                                                                                \
    }

EMU_ATOMIC_FLOAT(float, unsigned int)
EMU_ATOMIC_FLOAT(double, unsigned long long)
#undef EMU_ATOMIC_FLOAT

#endif
