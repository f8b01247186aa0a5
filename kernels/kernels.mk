# kernels/kernels.mk — `make cuda`: the real nvcc build of every kernels/*.cu (the kernels and
# their launchers) for sm_80 (A100) and sm_90 (H100) into $(BUILD)/cuda/libentropix_cuda.a.
# Warnings are errors on both sides of nvcc. Included by the top Makefile; nvcc need not be on
# PATH (CUDA's default install location is the fallback).
NVCC ?= $(or $(shell command -v nvcc 2>/dev/null),/usr/local/cuda/bin/nvcc)
CUDA_ARCHS ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90
NVCCFLAGS ?= -O3 -lineinfo -std=c++17 $(CUDA_ARCHS) -Werror all-warnings \
             -Xcompiler -Wall,-Wextra,-Werror -I.
# runtime/cuda/comm_nccl.cu: the agent pool's NCCL communicator (host code; links with -lnccl).
CUDA_SRC := $(wildcard kernels/*.cu) runtime/cuda/comm_nccl.cu
CUDA_OBJ := $(CUDA_SRC:%.cu=$(BUILD)/cuda/%.o)

.PHONY: cuda
cuda: $(BUILD)/cuda/libentropix_cuda.a $(BUILD)/cuda/run $(BUILD)/cuda/tools/bench

$(BUILD)/cuda/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/cuda/libentropix_cuda.a: $(CUDA_OBJ)
	@rm -f $@
	ar rcs $@ $^

-include $(CUDA_OBJ:.o=.d)

# The CUDA build of ./run and tools/bench: the CPU library, runtime/cuda/forward_cuda*.c (the CUDA
# backend of forward.h: C11 host code compiled against CUDA's headers) and the nvcc-built
# kernels, linked with the CUDA runtime. `--device auto` (the default) then runs on GPU 0 when
# there is one and on the CPU otherwise.
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
# runtime/cuda/comm_nccl.o goes in as an object too: libentropix.a reaches it through weak symbols
# (runtime/pool/comm_nccl_weak.h), which never pull a member out of an archive.
CUDA_HOST_OBJ := $(CUDA_HOST_SRC:%.c=$(BUILD)/cuda/obj/%.o)
CUDA_LINK_OBJ := $(CUDA_HOST_OBJ) $(BUILD)/cuda/runtime/cuda/comm_nccl.o
CUDA_LDLIBS := -L$(CUDA_HOME)/lib64 -lcudart -lcublas -lnccl -lstdc++

$(CUDA_HOST_OBJ): $(BUILD)/cuda/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I$(CUDA_HOME)/include -c $< -o $@

$(BUILD)/cuda/run: $(BUILD)/obj/runtime/cli/run.o $(CUDA_LINK_OBJ) $(BUILD)/cuda/libentropix_cuda.a $(BUILD)/libentropix.a
	$(CC) $(CFLAGS) $^ -o $@ $(CUDA_LDLIBS) $(LDLIBS)

$(BUILD)/cuda/tools/%: $(BUILD)/obj/tools/%.o $(CUDA_LINK_OBJ) $(BUILD)/cuda/libentropix_cuda.a $(BUILD)/libentropix.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(CUDA_LDLIBS) $(LDLIBS)

-include $(CUDA_HOST_OBJ:.o=.d)
