// comm_nccl_weak.h — the NCCL group of runtime/cuda/comm_nccl.h as the CPU library sees it: weak
// declarations of the few functions the agent pool calls, without CUDA's headers. The CPU build
// (build/run, libentropix.a) links without runtime/cuda/comm_nccl.cu and finds them NULL; the CUDA
// builds (build/cuda/run, build/emu/run) link comm_nccl.cu and they resolve. Semantics are
// those of comm_nccl.h. Check emx_comm_nccl_new (all come together) before calling any.
#ifndef ENTROPIX_COMM_NCCL_WEAK_H
#define ENTROPIX_COMM_NCCL_WEAK_H

#include <stddef.h>

#include "runtime/pool/comm.h"

typedef struct EmxCommNccl EmxCommNccl;

EmxCommNccl *emx_comm_nccl_new(const int *devices, int n, char *err, size_t errlen) __attribute__((weak));
EmxComm *emx_comm_nccl_host_rank(EmxCommNccl *g, int rank) __attribute__((weak));
const char *emx_comm_nccl_error(EmxCommNccl *g) __attribute__((weak));
void emx_comm_nccl_free(EmxCommNccl *g) __attribute__((weak));

#endif
