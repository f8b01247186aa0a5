// hostdevice.h — one macro so the sampler's math is written once for the host compiler and nvcc.
//
// EMX_HD marks a function __host__ __device__ under nvcc and is empty for the C compiler.
#ifndef ENTROPIX_HOSTDEVICE_H
#define ENTROPIX_HOSTDEVICE_H

#ifdef __CUDACC__
#define EMX_HD __host__ __device__
#else
#define EMX_HD
#endif

#endif
