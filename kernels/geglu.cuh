// geglu.cuh — GeGLU's activation on one element, the device code of both kernels that apply it:
// kernels/geglu.cu (after separate gate and up matvecs) and the fused gate/up pair
// (matvec_rows.cuh's fast_row, kernels/matvec_fused.cu). One copy: the same bits in either.
//
//   gelu_tanh(z) * u = 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z³))) * u
//
// the expression of the CPU twin emx_geglu, term for term (tanhf: within 2 ulp on the device).
#ifndef ENTROPIX_KERNELS_GEGLU_CUH
#define ENTROPIX_KERNELS_GEGLU_CUH

#include <math.h>

__device__ __forceinline__ float emx_gelu_mul(float z, float u) {
    return 0.5f * z * (1.0f + tanhf(0.7978845608028654f * (z + 0.044715f * z * z * z))) * u;
}

#endif
