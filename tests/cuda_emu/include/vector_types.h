// vector_types.h (CUDA emulator) — CUDA's small vector types, dim3 and uint3, for C and C++.
//
// Same member names, sizes and alignments as the real header (float4 and int4 are 16-byte
// aligned, float2 and uint2 8-byte aligned), so a kernel that loads a float4 from memory reads
// the same bytes as on a GPU. In C++ dim3 has CUDA's constructor (missing sizes are 1).
#ifndef EMU_VECTOR_TYPES_H
#define EMU_VECTOR_TYPES_H

#define EMU_VEC2(name, T, align) typedef struct __attribute__((aligned(align))) { T x, y; } name;
#define EMU_VEC3(name, T) typedef struct { T x, y, z; } name;
#define EMU_VEC4(name, T, align) typedef struct __attribute__((aligned(align))) { T x, y, z, w; } name;

EMU_VEC2(char2, signed char, 2)
EMU_VEC2(uchar2, unsigned char, 2)
EMU_VEC2(short2, short, 4)
EMU_VEC2(ushort2, unsigned short, 4)
EMU_VEC2(int2, int, 8)
EMU_VEC2(uint2, unsigned int, 8)
EMU_VEC2(float2, float, 8)
EMU_VEC2(double2, double, 16)
EMU_VEC3(int3, int)
EMU_VEC3(uint3, unsigned int)
EMU_VEC3(float3, float)
EMU_VEC4(char4, signed char, 4)
EMU_VEC4(uchar4, unsigned char, 4)
EMU_VEC4(short4, short, 8)
EMU_VEC4(ushort4, unsigned short, 8)
EMU_VEC4(int4, int, 16)
EMU_VEC4(uint4, unsigned int, 16)
EMU_VEC4(float4, float, 16)

#undef EMU_VEC2
#undef EMU_VEC3
#undef EMU_VEC4

#ifdef __cplusplus
struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};
#else
typedef struct dim3 { unsigned int x, y, z; } dim3;
#endif

// make_<type>(...) constructors, as in vector_functions.h.
#define EMU_MAKE2(name, T) static inline name make_##name(T x, T y) { name v; v.x = x; v.y = y; return v; }
#define EMU_MAKE3(name, T) static inline name make_##name(T x, T y, T z) { name v; v.x = x; v.y = y; v.z = z; return v; }
#define EMU_MAKE4(name, T) \
    static inline name make_##name(T x, T y, T z, T w) { name v; v.x = x; v.y = y; v.z = z; v.w = w; return v; }
EMU_MAKE2(char2, signed char)
EMU_MAKE2(uchar2, unsigned char)
EMU_MAKE2(short2, short)
EMU_MAKE2(ushort2, unsigned short)
EMU_MAKE2(int2, int)
EMU_MAKE2(uint2, unsigned int)
EMU_MAKE2(float2, float)
EMU_MAKE2(double2, double)
EMU_MAKE3(int3, int)
EMU_MAKE3(uint3, unsigned int)
EMU_MAKE3(float3, float)
EMU_MAKE4(char4, signed char)
EMU_MAKE4(uchar4, unsigned char)
EMU_MAKE4(short4, short)
EMU_MAKE4(ushort4, unsigned short)
EMU_MAKE4(int4, int)
EMU_MAKE4(uint4, unsigned int)
EMU_MAKE4(float4, float)
#undef EMU_MAKE2
#undef EMU_MAKE3
#undef EMU_MAKE4

#endif
