# kernels/kernels.mk — `make cuda`: the real nvcc build of every kernels/*.cu (the kernels and
# their launchers) for sm_80 (A100) and sm_90 (H100) into $(BUILD)/cuda/libentropix_cuda.a.
# Warnings are errors on both sides of nvcc. Included by the top Makefile, which finds NVCC (not
# necessarily on PATH: CUDA's default install location is the fallback) and, when it is found,
# builds $(BUILD)/cuda/run and $(BUILD)/cuda/tools/{bench,eval,server} as part of `make` (CUDA=1).
CUDA_ARCHS ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90
# The architectures by name ("sm_80 sm_90"), for --version (runtime/cuda/forward_cuda.c).
CUDA_ARCH_NAMES = $(patsubst code=%,%,$(filter code=%,$(subst $(comma), ,$(CUDA_ARCHS))))
NVCCFLAGS ?= -O3 -lineinfo -std=c++17 $(CUDA_ARCHS) -Werror all-warnings \
             -Xcompiler -Wall,-Wextra,-Werror -I.
# The host side of every CUDA object is position-independent: the same objects go into the
# programs and into libentropix.so (api/api.mk). It costs the host code nothing measurable and
# changes no device code; archs.cfg (the top Makefile) records it, so objects built without it
# are built again.
NVCC_PIC := -Xcompiler -fPIC
# runtime/cuda/comm_nccl.cu: the agent pool's NCCL communicator (host code; links with -lnccl).
CUDA_SRC := $(wildcard kernels/*.cu kernels/*/*.cu) runtime/cuda/comm_nccl.cu
CUDA_OBJ := $(CUDA_SRC:%.cu=$(BUILD)/cuda/%.o)

# The programs a GPU machine runs first (kernels/bench.mk: the kernel tests against the real CUDA
# runtime, bench_kernels) are built here too, so that code only the real build compiles (what the
# emulator's #ifdefs leave out) is compiled, with -Werror, on every machine with nvcc.
.PHONY: cuda
cuda: $(BUILD)/cuda/libentropix_cuda.a $(BUILD)/cuda/run $(BUILD)/cuda/tools/bench $(BUILD)/cuda/resources.ok \
      $(BUILD)/cuda/kernel_tests $(BUILD)/cuda/bench_kernels

# ptxas's report (-Xptxas -v: registers, spill bytes, stack frame and shared memory of each kernel
# for each arch) is kept in X.ptxas beside the object for the resource report below; the lines
# that are not part of it (warnings, errors) still go to the terminal.
$(BUILD)/cuda/%.o $(BUILD)/cuda/%.ptxas: %.cu
	@mkdir -p $(dir $@)
	$(call say,NVCC,$<)$(NVCC) $(NVCCFLAGS) $(NVCC_PIC) -Xptxas -v -MMD -MP -c $< -o $(BUILD)/cuda/$*.o 2>$(BUILD)/cuda/$*.ptxas; rc=$$?; \
	grep -v -e '^ptxas info' -e '^ *[0-9]* bytes stack frame' $(BUILD)/cuda/$*.ptxas >&2; exit $$rc

# nvcc takes minutes for the whole backend: a make that is about to run it says so once, before
# the first compile (the notice is remade when a .cu file is newer than it, i.e. when nvcc runs).
$(CUDA_OBJ): | $(BUILD)/cuda/nvcc-notice
$(BUILD)/cuda/nvcc-notice: $(CUDA_SRC)
	@mkdir -p $(dir $@)
	@echo "  NVCC building the CUDA backend for $(CUDA_ARCH_NAMES) (nvcc, from nothing: about 16 CPU-minutes for sm_80 and sm_90 together, spread over the cores; make CUDA=0 skips it)"
	@touch $@

$(BUILD)/cuda/libentropix_cuda.a: $(CUDA_OBJ)
	@rm -f $@
	$(call say,AR,$@)ar rcs $@ $^

-include $(CUDA_OBJ:.o=.d)

# The CUDA build of ./run and tools/bench: the CPU library, runtime/cuda/forward_cuda*.c (the CUDA
# backend of forward.h: C11 host code compiled against CUDA's headers) and the nvcc-built
# kernels, linked with the CUDA runtime. `--device auto` (the default) then runs on GPU 0 when
# there is one and on the CPU otherwise, a machine without a GPU or driver included (cudart loads
# the driver when asked for devices, and finds none). The top Makefile copies these to
# $(BUILD)/run and $(BUILD)/tools/ when CUDA=1.
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
# runtime/cuda/comm_nccl.o goes in as an object too: libentropix.a reaches it through weak symbols
# (runtime/pool/comm_nccl_weak.h), which never pull a member out of an archive.
CUDA_HOST_OBJ := $(CUDA_HOST_SRC:%.c=$(BUILD)/cuda/obj/%.o)
CUDA_LINK_OBJ := $(CUDA_HOST_OBJ) $(BUILD)/cuda/runtime/cuda/comm_nccl.o
# The run path names the toolkit's libraries, so the binaries start where the toolkit is not in
# the loader's path (a pip-installed or unregistered one).
CUDA_LDLIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lcublas -lnccl -lstdc++

$(CUDA_HOST_OBJ): $(BUILD)/cuda/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(call say,CC,$<)$(CC) $(CFLAGS) -fPIC -I$(CUDA_HOME)/include -DEMX_CUDA_ARCHS='"$(CUDA_ARCH_NAMES)"' -c $< -o $@

$(BUILD)/cuda/run: $(BUILD)/obj/runtime/cli/run.o $(CUDA_LINK_OBJ) $(BUILD)/cuda/libentropix_cuda.a $(BUILD)/libentropix.a
	$(call say,LD,$@)$(CC) $(CFLAGS) $^ -o $@ $(CUDA_LDLIBS) $(LDLIBS)

$(BUILD)/cuda/tools/%: $(BUILD)/obj/tools/%.o $(CUDA_LINK_OBJ) $(BUILD)/cuda/libentropix_cuda.a $(BUILD)/libentropix.a
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(CFLAGS) $^ -o $@ $(CUDA_LDLIBS) $(LDLIBS)

-include $(CUDA_HOST_OBJ:.o=.d)

# The static resource report (tools/cuda_resources.py, docs/cuda-resources.md): registers, shared
# memory, spills, stack and theoretical occupancy of every kernel for sm_80 and sm_90 into
# resources.md and resources.json, and the SASS checks of the matvec and attention kernels (and
# of the decode kernels' PDL instructions on sm_90, the steps' tails included). It
# fails (and so does `make cuda`) on a spill in a decode-path kernel or a kernel it has no block
# size for. cuobjdump and nvdisasm (for -sass) come from the toolkit when it has them, else from
# NVIDIA's PyPI wheels in a venv (pip-installed CUDA toolkits such as this machine's lack them).
CUDA_KERNEL_SRC := $(wildcard kernels/*.cu kernels/*/*.cu)
CUOBJDUMP_VENV := $(BUILD)/cuda/cuobjdump-venv
CUOBJDUMP_WHEELS := nvidia-cuda-cuobjdump==13.2.51 nvidia-cuda-nvdisasm==13.2.51
CUOBJDUMP_BIN ?= $(or $(patsubst %/cuobjdump,%,$(shell command -v cuobjdump 2>/dev/null)), \
                      $(if $(wildcard $(CUDA_HOME)/bin/cuobjdump),$(CUDA_HOME)/bin), \
                      $(CUOBJDUMP_VENV)/wheels/nvidia/cu13/bin)

$(CUOBJDUMP_VENV)/wheels/nvidia/cu13/bin/cuobjdump:
	rm -rf $(CUOBJDUMP_VENV)
	python3 -m venv $(CUOBJDUMP_VENV)
	$(CUOBJDUMP_VENV)/bin/pip install -q --target $(CUOBJDUMP_VENV)/wheels $(CUOBJDUMP_WHEELS)

SASS_CHECKED_OBJ := $(patsubst %,$(BUILD)/cuda/kernels/%.o,matvec attention matvec_fused attention_decode \
                      logits_metrics attn_metrics sampling/sampling sampling/agent_pool)
$(BUILD)/cuda/resources.ok: tools/cuda_resources.py $(CUDA_KERNEL_SRC:%.cu=$(BUILD)/cuda/%.ptxas) \
                            $(SASS_CHECKED_OBJ) $(CUOBJDUMP_BIN)/cuobjdump
	@rm -f $@
	set -o pipefail; for o in $(SASS_CHECKED_OBJ); do \
	    PATH="$(CUOBJDUMP_BIN):$$PATH" $(CUOBJDUMP_BIN)/cuobjdump -sass $$o || exit 1; done | \
	python3 tools/cuda_resources.py --sass - --out $(BUILD)/cuda/resources $(CUDA_KERNEL_SRC:%.cu=$(BUILD)/cuda/%.ptxas)
	touch $@
