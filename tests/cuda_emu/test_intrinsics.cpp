// test_intrinsics.cpp — __dp4a and the half/bfloat16 conversions, run in a kernel, against
// independent references: byte products summed in 64 bits, and base/dtype.h's converters
// (the C library's, tested on their own). Conversions must be bit-exact: all 65536 halves, and
// floats around every rounding case (ties, overflow, subnormals, inf, NaN) plus random bits.
#include <criterion/criterion.h>

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <vector>

#include "emu_test.h"

extern "C" {
#include "base/dtype.h"
}

__global__ void dp4a_kernel(const int *a, const int *b, const int *c, int *out_s, unsigned *out_u, int *out_c4, int n) {
    int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i >= n) return;
    out_s[i] = __dp4a(a[i], b[i], c[i]);
    out_u[i] = __dp4a((unsigned)a[i], (unsigned)b[i], (unsigned)c[i]);
    char4 ca, cb;
    memcpy(&ca, &a[i], 4);
    memcpy(&cb, &b[i], 4);
    out_c4[i] = __dp4a(ca, cb, c[i]);
}

static uint32_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*s >> 32);
}

Test(emu_intrinsics, dp4a_signed_unsigned_and_char4) {
    const int n = 1000;
    std::vector<int> a(n), b(n), c(n);
    uint64_t s = 42;
    for (int i = 0; i < n; i++) {
        a[i] = (int)lcg(&s);
        b[i] = (int)lcg(&s);
        c[i] = i < 10 ? (i % 2 ? INT32_MAX : INT32_MIN) : (int)lcg(&s); // accumulator wraps
    }
    a[0] = b[0] = (int)0x80808080u; // (-128)^2 * 4
    DeviceBuffer<int> da(a), db(b), dc(c), ds(n), dc4(n);
    DeviceBuffer<unsigned> du(n);
    dp4a_kernel<<<(n + 127) / 128, 128>>>(da.ptr, db.ptr, dc.ptr, ds.ptr, du.ptr, dc4.ptr, n);
    cr_assert_eq(cudaGetLastError(), cudaSuccess);
    std::vector<int> got_s = ds.to_host(), got_c4 = dc4.to_host();
    std::vector<unsigned> got_u = du.to_host();
    for (int i = 0; i < n; i++) {
        int64_t ss = c[i];
        uint64_t su = (uint32_t)c[i];
        for (int k = 0; k < 4; k++) {
            ss += (int64_t)(int8_t)(a[i] >> (8 * k)) * (int8_t)(b[i] >> (8 * k));
            su += (uint64_t)((uint32_t)a[i] >> (8 * k) & 0xff) * ((uint32_t)b[i] >> (8 * k) & 0xff);
        }
        cr_assert_eq(got_s[i], (int)(uint32_t)(uint64_t)ss, "signed %d", i);
        cr_assert_eq(got_c4[i], got_s[i]);
        cr_assert_eq(got_u[i], (uint32_t)su, "unsigned %d", i);
    }
}

__global__ void convert_kernel(const float *f, const unsigned short *h, unsigned short *f2h, unsigned short *f2b,
                               float *h2f, float *b2f, int n) {
    int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i >= n) return;
    f2h[i] = __half_as_ushort(__float2half(f[i]));
    f2b[i] = __bfloat16_as_ushort(__float2bfloat16(f[i]));
    h2f[i] = __half2float(__ushort_as_half(h[i]));
    b2f[i] = __bfloat162float(__ushort_as_bfloat16(h[i]));
}

static float bits_f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t f_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

// Floats at and around every rounding boundary of half and bfloat16, then random bit patterns.
static std::vector<float> conversion_inputs() {
    std::vector<float> v;
    for (uint32_t h = 0; h < 0x10000; h++) {
        float x = emx_f16_to_f32((uint16_t)h), next = emx_f16_to_f32((uint16_t)(h + 1));
        v.push_back(x);
        if (isfinite(x) && isfinite(next) && (h & 0x7fff) != 0x7bff && h != 0x7fff && h != 0xffff) {
            float mid = x + (next - x) / 2; // the tie between two halves (exact in float)
            v.push_back(mid);
            v.push_back(nextafterf(mid, -INFINITY));
            v.push_back(nextafterf(mid, INFINITY));
        }
    }
    for (uint32_t top = 0; top < 0x10000; top += 7) { // bf16 ties: low 16 bits 0x8000 and neighbours
        v.push_back(bits_f(top << 16 | 0x8000));
        v.push_back(bits_f(top << 16 | 0x7fff));
        v.push_back(bits_f(top << 16 | 0x8001));
    }
    float specials[] = {65504.0f, 65519.99f, 65520.0f, 65536.0f, 1e30f, INFINITY, -INFINITY, NAN, -NAN,
                        bits_f(0x7f800001), bits_f(0xffc00123), 5.96e-8f, 2.98e-8f, 2.9802322e-8f, 2.9802326e-8f,
                        1e-45f, bits_f(0x00000001), bits_f(0x807fffff), 3.4e38f, 0.0f, -0.0f};
    for (float x : specials) v.push_back(x);
    uint64_t s = 7;
    for (int i = 0; i < 100000; i++) v.push_back(bits_f(lcg(&s)));
    return v;
}

Test(emu_intrinsics, half_and_bf16_conversions_are_bit_exact) {
    std::vector<float> f = conversion_inputs();
    int n = (int)f.size();
    std::vector<unsigned short> h(n);
    for (int i = 0; i < n; i++) h[i] = (unsigned short)(i & 0xffff); // every half and bf16 pattern
    DeviceBuffer<float> df(f), dh2f(n), db2f(n);
    DeviceBuffer<unsigned short> dh(h), df2h(n), df2b(n);
    convert_kernel<<<(n + 255) / 256, 256>>>(df.ptr, dh.ptr, df2h.ptr, df2b.ptr, dh2f.ptr, db2f.ptr, n);
    cr_assert_eq(cudaGetLastError(), cudaSuccess);
    std::vector<unsigned short> f2h = df2h.to_host(), f2b = df2b.to_host();
    std::vector<float> h2f = dh2f.to_host(), b2f = db2f.to_host();
    for (int i = 0; i < n; i++) {
        if (isnan(f[i])) { // the hardware's canonical NaN (dtype.h keeps the sign and payload instead)
            cr_assert_eq(f2h[i], 0x7fff, "f16 of NaN %08x", f_bits(f[i]));
            cr_assert_eq(f2b[i], 0x7fff, "bf16 of NaN %08x", f_bits(f[i]));
            continue;
        }
        cr_assert_eq(f2h[i], emx_f32_to_f16(f[i]), "f16 of %a (%08x): %04x != %04x", f[i], f_bits(f[i]), f2h[i],
                     emx_f32_to_f16(f[i]));
        cr_assert_eq(f2b[i], emx_f32_to_bf16(f[i]), "bf16 of %a: %04x != %04x", f[i], f2b[i], emx_f32_to_bf16(f[i]));
        cr_assert_eq(f_bits(h2f[i]), f_bits(emx_f16_to_f32(h[i])), "f32 of half %04x", h[i]);
        cr_assert_eq(f_bits(b2f[i]), f_bits(emx_bf16_to_f32(h[i])), "f32 of bf16 %04x", h[i]);
    }
    // Named cases, so a reader sees the rules: ties go to even, 65520 overflows, 2^-25 is a tie to 0.
    cr_assert_eq(__half_as_ushort(__float2half(1.0f + 1.0f / 2048)), 0x3c00);        // tie, even below
    cr_assert_eq(__half_as_ushort(__float2half(1.0f + 3.0f / 2048)), 0x3c02);        // tie, even above
    cr_assert_eq(__half_as_ushort(__float2half(65520.0f)), 0x7c00);
    cr_assert_eq(__half_as_ushort(__float2half(ldexpf(1.0f, -25))), 0x0000);
    cr_assert_eq(__half_as_ushort(__float2half(ldexpf(3.0f, -26))), 0x0001);
    cr_assert_eq(__bfloat16_as_ushort(__float2bfloat16(bits_f(0x3f808000))), 0x3f80); // tie, even
    cr_assert_eq(__bfloat16_as_ushort(__float2bfloat16(bits_f(0x3f818000))), 0x3f82);
}

// Vector types have CUDA's sizes and alignments (a float4 load reads 16 aligned bytes).
Test(emu_intrinsics, vector_type_layout) {
    cr_assert_eq(sizeof(float4), 16u);
    cr_assert_eq(alignof(float4), 16u);
    cr_assert_eq(alignof(int4), 16u);
    cr_assert_eq(sizeof(float2), 8u);
    cr_assert_eq(alignof(float2), 8u);
    cr_assert_eq(alignof(uint2), 8u);
    cr_assert_eq(sizeof(char4), 4u);
    cr_assert_eq(alignof(char4), 4u);
    cr_assert_eq(sizeof(short2), 4u);
    cr_assert_eq(sizeof(__half2), 4u);
    float4 v = make_float4(1, 2, 3, 4);
    cr_assert_eq(v.x + v.y + v.z + v.w, 10.0f);
    cr_assert_eq(__float_as_uint(1.0f), 0x3f800000u);
    cr_assert_eq(__int_as_float(0x40000000), 2.0f);
    cr_assert_eq(min(3, -2), -2);
    cr_assert_eq(max(3u, 7u), 7u);
}
