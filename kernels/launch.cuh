// launch.cuh — how the decode step's kernels are launched: one helper, with or without
// programmatic dependent launch (PDL).
//
//   EMX_LAUNCH(pdl, grid, block, shmem, stream, kernel, args...)
//     is kernel<<<grid, block, shmem, stream>>>(args...) through cudaLaunchKernelEx, with
//     cudaLaunchAttributeProgrammaticStreamSerialization when pdl != 0; returns the launch's
//     error. Write the kernel itself (a template with its arguments), so that the emulator names
//     the launch as written.
//
// With the attribute the kernel may start while the kernel before it on the stream still runs
// (once that one's blocks have all called emx_pdl_trigger or exited): its ramp-up and first
// weight loads overlap the previous kernel's tail, which at decode is most of a kernel's 2.5-5
// µs (docs/cuda.md). The rules for a kernel launched so (docs/cuda.md, "PDL in the decode step"):
//   (a) before emx_pdl_wait() it reads only what no kernel of the step writes (weights,
//       constants: emx_prefetch_l2 of its rows) and writes nothing another kernel reads or
//       writes;
//   (b) it calls emx_pdl_wait() in every block, even with nothing to wait for: the next
//       kernel's wait covers only this one, so this one must not end before the one before it;
//   (c) pdl is 0 for a kernel whose predecessor on the stream is a copy or a memset (a
//       programmatic edge joins two kernels; the first kernel of a step follows the input copy).
// pdl is the caller's choice (the CUDA state's, made from the device's compute capability:
// emx_pdl_wait and emx_pdl_trigger are nothing before sm_90, so the attribute is not passed
// there). Under the emulator the overlap is run at its earliest (tests/cuda_emu/src/launch_ex.cpp):
// a kernel that breaks (a) or (b) fails its tests.
#ifndef ENTROPIX_KERNELS_LAUNCH_CUH
#define ENTROPIX_KERNELS_LAUNCH_CUH

#include <cuda_runtime.h>

// The configuration, with *attr as its one attribute when pdl != 0.
static inline cudaLaunchConfig_t emx_launch_config(dim3 grid, dim3 block, size_t shmem, cudaStream_t stream, int pdl,
                                                   cudaLaunchAttribute *attr) {
    *attr = cudaLaunchAttribute{};
    attr->id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr->val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t c = {};
    c.gridDim = grid;
    c.blockDim = block;
    c.dynamicSmemBytes = shmem;
    c.stream = stream;
    c.attrs = attr;
    c.numAttrs = pdl ? 1 : 0;
    return c;
}

#define EMX_LAUNCH(pdl, grid, block, shmem, stream, ...)                                                         \
    [&]() -> cudaError_t {                                                                                       \
        cudaLaunchAttribute emx_attr_;                                                                           \
        const cudaLaunchConfig_t emx_cfg_ = emx_launch_config((grid), (block), (shmem), (stream), (pdl), &emx_attr_); \
        return cudaLaunchKernelEx(&emx_cfg_, __VA_ARGS__);                                                       \
    }()

#endif
