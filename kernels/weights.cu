// weights.cu — host code only: the repack of a model-file tensor into the device layout of
// weights.h, and its upload. No kernels: it runs once per tensor at load time.
// Bytes: reads and writes emx_cuda_weight_bytes once; for every dtype but q4_1/q4_1f the upload copies
// straight from the file's mapping (no host staging buffer).
#include "kernels/weights.h"

#include <stdlib.h>
#include <string.h>

#include "base/model_format.h"
#include "kernels/common.cuh"

extern "C" uint64_t emx_cuda_weight_bytes(uint32_t dtype, uint64_t rows, uint64_t cols) {
    return emx_tensor_bytes(dtype, rows, cols);  // the file's count (base/model_format.h)
}

extern "C" int emx_cuda_repack_weight(uint32_t dtype, const void *src, uint64_t rows, uint64_t cols, void *dst) {
    const uint64_t bytes = emx_cuda_weight_bytes(dtype, rows, cols);
    if (bytes == 0 && rows * cols != 0) return -1;
    if (dtype != EMX_Q4_1 && dtype != EMX_Q4_1F) {
        memcpy(dst, src, bytes);
        return 0;
    }
    // q4_1 / q4_1f: nibbles as they are; d[rows*G] and m[rows*G] -> dm[rows*G][2] (f16 / f32)
    const uint64_t nib_bytes = rows * cols / 2, groups = rows * cols / EMX_GROUP_SIZE;
    memcpy(dst, src, nib_bytes);
    if (dtype == EMX_Q4_1F) {
        const float *d = (const float *)((const uint8_t *)src + nib_bytes), *m = d + groups;
        float *dm = (float *)((uint8_t *)dst + nib_bytes);
        for (uint64_t g = 0; g < groups; g++) {
            dm[2 * g] = d[g];
            dm[2 * g + 1] = m[g];
        }
        return 0;
    }
    const uint16_t *d = (const uint16_t *)((const uint8_t *)src + nib_bytes), *m = d + groups;
    uint16_t *dm = (uint16_t *)((uint8_t *)dst + nib_bytes);
    for (uint64_t g = 0; g < groups; g++) {
        dm[2 * g] = d[g];
        dm[2 * g + 1] = m[g];
    }
    return 0;
}

extern "C" cudaError_t emx_cuda_upload_weight(uint32_t dtype, const void *src, int rows, int cols, EmxCudaWeight *out) {
    if (!out) return cudaErrorInvalidValue;
    out->data = nullptr;
    const uint64_t bytes = emx_cuda_weight_bytes(dtype, (uint64_t)rows, (uint64_t)cols);
    if (rows < 1 || cols < 1 || bytes == 0 || !src) return cudaErrorInvalidValue;
    void *host = (void *)src, *dev = nullptr;
    if (dtype == EMX_Q4_1 || dtype == EMX_Q4_1F) {  // the dtypes whose device layout differs from the file's
        if (!(host = malloc(bytes))) return cudaErrorMemoryAllocation;
        emx_cuda_repack_weight(dtype, src, (uint64_t)rows, (uint64_t)cols, host);
    }
    cudaError_t e = cudaMalloc(&dev, bytes);
    if (e == cudaSuccess) e = cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice);
    if (host != src) free(host);
    if (e != cudaSuccess) {
        cudaFree(dev);
        return e;
    }
    *out = EmxCudaWeight{dtype, rows, cols, dev};
    return cudaSuccess;
}
