#!/bin/bash
# compile_checks.sh — what the emulator refuses at compile time must really fail to compile,
# with a message that names the problem. Each case is a small .cu snippet put through
# rewrite.py and g++ exactly as emu.mk compiles kernels; the first case must compile (so a
# broken command line cannot pass as "everything failed").
#   tests/cuda_emu/compile_checks.sh [g++]
set -u
CXX=${1:-g++}
DIR=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0

# check NAME EXPECT SOURCE: EXPECT is "ok" or a message that the compiler output must contain.
check() {
    local name=$1 expect=$2 src=$3
    printf '%s\n' "$src" > "$TMP/$name.cu"
    if ! python3 "$DIR/rewrite.py" "$TMP/$name.cu" "$TMP/$name.rw.cu" > "$TMP/$name.log" 2>&1; then
        status=1
    else
        $CXX -std=c++17 -fsyntax-only -Wall -Wextra -Werror -Wno-unknown-pragmas -I"$DIR/include" -I"$DIR/../.." \
            -include "$DIR/include/emu/cuda_emu.h" -x c++ "$TMP/$name.rw.cu" > "$TMP/$name.log" 2>&1
        status=$?
    fi
    if [ "$expect" = ok ]; then
        [ $status -eq 0 ] && echo "ok    $name compiles" && return
        echo "FAIL  $name should compile:"; cat "$TMP/$name.log"; fails=$((fails + 1)); return
    fi
    if [ $status -ne 0 ] && grep -qF -- "$expect" "$TMP/$name.log"; then
        echo "ok    $name: refused ($expect)"
    else
        echo "FAIL  $name: expected a compile error containing \"$expect\""; cat "$TMP/$name.log"; fails=$((fails + 1))
    fi
}

check supported ok '
__global__ void k(float *x) { __shared__ float s[32]; s[threadIdx.x] = x[threadIdx.x]; __syncthreads();
    x[threadIdx.x] = __shfl_xor_sync(0xffffffffu, s[31 - threadIdx.x], 1); }
void launch(float *x, cudaStream_t st) { k<<<1, 32, 0, st>>>(x); }'
check grid_sync ok '
#include "kernels/grid_sync.cuh"
__global__ void k(unsigned *c, int *x) { x[blockIdx.x] = 1; __threadfence(); emx_grid_signal(c, 1); emx_grid_wait(c, gridDim.x);
    cudaGridDependencySynchronize(); cudaTriggerProgrammaticLaunchCompletion(); }
cudaError_t launch(unsigned *c, int *x, cudaStream_t st) { void *args[] = {&c, &x};
    return cudaLaunchCooperativeKernel(k, dim3(2), dim3(32), args, 0, st); }'
check threadfence_block "__threadfence_block is not supported by the CUDA emulator" '
__global__ void k(int *x) { x[0] = 1; __threadfence_block(); }'
check cooperative_void_kernel "pass the kernel itself, not a void *" '
__global__ void k(int *x) { x[0] = 1; }
cudaError_t launch(int *x) { void *args[] = {&x}; return cudaLaunchCooperativeKernel((const void *)k, dim3(1), dim3(1), args, 0, 0); }'
check match_any "__match_any_sync is not supported" '
__global__ void k(int *x) { x[threadIdx.x] = __match_any_sync(0xffffffffu, x[threadIdx.x]); }'
check constant_memory "__constant___memory_is_not_supported_by_the_CUDA_emulator" '
__constant__ float table[16];'
check half_arithmetic "use of deleted function" '
__global__ void k(__half *x) { x[0] = x[1] + x[2]; }'
check cooperative_groups "cooperative_groups.h is not supported by the CUDA emulator" '
#include <cooperative_groups.h>'
check tensor_cores "mma.h is not supported by the CUDA emulator" '
#include <mma.h>'
check shuffle_struct "this type cannot be shuffled" '
struct P { int a, b, c; };
__global__ void k(P *x) { x[threadIdx.x] = __shfl_sync(0xffffffffu, x[threadIdx.x], 0); }'
check launch_on_two_lines "kernel launch without" '
__global__ void k(int *x) { x[0] = 1; }
void launch(int *x) { k<<<1,
    32>>>(x); }'
check deduced_template_launch "no matches converting function" '
template <class T> __global__ void k(T *x) { x[0] = 1; }
void launch(int *x) { k<<<1, 1>>>(x); }'

[ $fails -eq 0 ] && echo "compile checks: all passed" || echo "compile checks: $fails failed"
exit $((fails > 0))
