// emu/cuda_emu.h — force-included (g++ -include) into every file the emulated test binary
// compiles: kernels/*.cu after rewrite.py, and the tests. It makes CUDA C++ ordinary host C++:
// qualifiers, built-in variables, barriers and warp ops (device.h), atomics, intrinsics,
// __shared__ memory, launches, and the compile errors for what is not modelled.
//
// __CUDACC__ is defined as under nvcc (so sampler/hostdevice.h marks EMX_HD functions
// __host__ __device__, which vanish here); ENTROPIX_CUDA_EMU tells code it runs emulated;
// __CUDA_ARCH__ stays undefined.
#ifndef EMU_CUDA_EMU_H
#define EMU_CUDA_EMU_H

#ifndef __CUDACC__
#define __CUDACC__ 1
#endif
#define ENTROPIX_CUDA_EMU 1

#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "../cuda_bf16.h"
#include "../cuda_fp16.h"
#include "../cuda_runtime.h"
#include "api.h"
#include "atomics.h"
#include "device.h"
#include "intrinsics.h"
#include "launch.h"
#include "shared.h"
#include "unsupported.h"

#endif
