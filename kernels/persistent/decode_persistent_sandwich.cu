// decode_persistent_sandwich.cu — the persistent decode kernel's instantiations for Gemma 3's
// layers (EmxDecodeStep.sandwich), every weight dtype and cache: the kernel is
// decode_persistent.cuh's, the entry points decode_persistent.cu's, which call these. A file of
// their own so that nvcc compiles them beside the other kind's (decode_persistent.cuh says why).
#include "kernels/persistent/decode_persistent.cuh"

namespace emx_persistent {

cudaError_t sandwich_blocks(const EmxDecodeStep *a, int *blocks) { return kind_blocks<true>(a, blocks); }

cudaError_t sandwich_launch(const EmxDecodeStep *a, int blocks, cudaStream_t stream) {
    return kind_launch<true>(a, blocks, stream);
}

}  // namespace emx_persistent
