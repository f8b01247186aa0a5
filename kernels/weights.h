// weights.h — how a weight matrix lies in GPU memory, and the host function that puts it there.
//
// The device layout of an [rows, cols] matrix (row-major, weight matrices are [out, in]) is the
// model file's layout (base/model_format.h) except for q4_1 and q4_1f, whose scales and mins
// are interleaved. Bytes per weight in brackets:
//   f32   float w[rows][cols]                                               [4]
//   f16   u16 w[rows][cols]  (IEEE half)                                    [2]
//   bf16  u16 w[rows][cols]  (top half of an f32)                           [2]
//   q8    int8 q[rows][cols], then u16 d[rows][cols/32] (f16)               [34/32 = 1.0625]
//   q4    u8 nib[rows][cols/2], then u16 d[rows][cols/32] (f16); in group g byte j holds weight
//         32g+j (low nibble) and 32g+j+16 (high); w = (nib - 8) * d         [18/32 = 0.5625]
//   q4_1  u8 nib[rows][cols/2] as q4, then u16 dm[rows][cols/32][2] = {d, m} (f16 pairs);
//         w = nib * d + m                                                   [20/32 = 0.625]
//   q4_1f u8 nib[rows][cols/2] as q4, then f32 dm[rows][cols/32][2] = {d, m} (f32 pairs);
//         w = nib * d + m (llama.cpp's Q4_K, exactly)                       [24/32 = 0.75]
// Why this is already the coalesced layout: the fast matvec gives each row to a warp and each
// lane reads 16 consecutive bytes of that row, so 32 lanes read 512 consecutive bytes per load
// (a row is a multiple of 16 bytes: cols % 32 == 0). For q4 one 16-byte load is exactly one group
// (32 weights) and its nibble order matches __dp4a: the low nibbles of a 32-bit word are weights
// j..j+3, its high nibbles j+16..j+19, both against 4 consecutive int8 activations. The one
// change is q4_1's (and q4_1f's): the file keeps d and m in two arrays rows*cols/32*2 (*4) bytes
// apart, so a group needed two scattered loads; interleaved it is one 4-byte (8-byte) load next
// to its neighbours'.
#ifndef ENTROPIX_KERNELS_WEIGHTS_H
#define ENTROPIX_KERNELS_WEIGHTS_H

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// A matrix in device memory, layout above (data: emx_cuda_weight_bytes bytes).
typedef struct {
    uint32_t dtype;    // enum emx_dtype (base/model_format.h)
    int rows, cols;    // [rows, cols]
    const void *data;  // device pointer
} EmxCudaWeight;

// Bytes of the device layout (equal to the file's, emx_tensor_bytes); 0 if cols does not fit the
// dtype (quantised types need cols % 32 == 0) or the dtype is unknown.
uint64_t emx_cuda_weight_bytes(uint32_t dtype, uint64_t rows, uint64_t cols);

// Host to host: converts a tensor in the model file's layout (src) to the device layout (dst,
// emx_cuda_weight_bytes bytes; then cudaMemcpy it up). Returns 0, or -1 for a bad dtype/shape.
int emx_cuda_repack_weight(uint32_t dtype, const void *src, uint64_t rows, uint64_t cols, void *dst);

// Repack (when the dtype needs it, through a host buffer) and upload one tensor: allocates
// out->data with cudaMalloc (free it with cudaFree) and fills *out. src is host memory in the file
// layout (e.g. the mmapped model). Returns cudaErrorInvalidValue for a bad dtype/shape, else the
// status of the allocation or copy (out->data is NULL after a failure).
cudaError_t emx_cuda_upload_weight(uint32_t dtype, const void *src, int rows, int cols, EmxCudaWeight *out);

#ifdef __cplusplus
}
#endif

#endif
