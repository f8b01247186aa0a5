# tools/lab/lab.mk — the kernel lab (docs/kernel-lab.md): one small program per kernel family,
# tools/lab/<family>.cu, that runs every version of the family (naive ... fast) on the same
# inputs, checks each against the CPU twin and times it.
#   make lab K=rmsnorm [LAB_ARGS="--rows 64"]   build and run one family: on the GPU when nvcc
#                        and a GPU are there (LAB_MODE=gpu), else through the emulation layer
#                        (LAB_MODE=emu, tests/cuda_emu: emulation timings, not GPU timings)
#   make lab-build K=rmsnorm LAB_MODE=gpu       build only (here: the nvcc build, sm_80 + sm_90)
#   make lab-cuda        nvcc-build every family (a compile and link check on machines without GPU)
#   make lab-test        every family, emulated, with --check-only: fails if a version FAILs
#                        (run by `make test` after the emulated kernel tests)
# A family's program links only what it needs: its kernels (LAB_DEPS_<family>), its CPU twins'
# objects (LAB_CPU_<family>, not the whole CPU library) and, emulated, the emulation layer's core
# (LAB_EMU_CORE, plus its cuBLAS for gemm), so a cold `make lab K=rmsnorm` compiles a dozen files.
# Included by the top Makefile after tests/cuda_emu/emu.mk (EMU_* and NVCC* are set).

LAB_FAMILIES := matvec matvec_fused gemm attention rmsnorm rope swiglu embedding logits_metrics attn_metrics sampling agent_pool
# kernels/<name>.cu each family's program links (its launchers, and what those call)
LAB_DEPS_matvec := matvec_naive matvec weights
LAB_DEPS_matvec_fused := rmsnorm_naive matvec_naive add_naive rmsnorm matvec matvec_fused weights
LAB_DEPS_gemm := gemm_naive gemm weights
LAB_DEPS_attention := attention_naive attention
LAB_DEPS_rmsnorm := rmsnorm_naive rmsnorm
LAB_DEPS_rope := rope
LAB_DEPS_swiglu := swiglu matvec weights
LAB_DEPS_embedding := embedding weights
LAB_DEPS_logits_metrics := logits_metrics_naive logits_metrics
LAB_DEPS_attn_metrics := attn_metrics attention
LAB_DEPS_sampling := sampling/sampling_naive sampling/sampling
LAB_DEPS_agent_pool := sampling/agent_pool

# the CPU twins' objects each family's program links (the C files whose functions it calls, and
# what those call: found by following the undefined symbols): cpu_ops.c's softmax calls
# cpu_attention.c's exp, cpu_attention.c cpu_dot.c's dot products; none needs the matmul
# (cpu_matmul.c and its quantised tiles: 2 s of CPU of the cold start). cpu_attention_avx2.c
# goes with cpu_attention.c: on a CPU with AVX2 and no AVX-512 it holds the exp and the attention
# (elsewhere it compiles to nothing).
LAB_CPU_ATTN := runtime/cpu/cpu_attention runtime/cpu/cpu_attention_avx2
LAB_CPU_OPS := base/dtype runtime/cpu/cpu_ops $(LAB_CPU_ATTN) runtime/cpu/cpu_dot
LAB_CPU_matvec := base/dtype runtime/cpu/cpu_dot runtime/cpu/cpu_qdot
LAB_CPU_matvec_fused := $(LAB_CPU_OPS) runtime/cpu/cpu_qdot
LAB_CPU_gemm := base/dtype
LAB_CPU_attention := base/dtype $(LAB_CPU_ATTN) runtime/cpu/cpu_dot
LAB_CPU_rmsnorm := $(LAB_CPU_OPS)
LAB_CPU_rope := $(LAB_CPU_OPS)
LAB_CPU_swiglu := $(LAB_CPU_OPS) runtime/cpu/cpu_qdot
LAB_CPU_embedding := base/dtype
LAB_CPU_logits_metrics := sampler/metrics sampler/sample
LAB_CPU_attn_metrics := sampler/metrics
LAB_CPU_sampling := sampler/sample
LAB_CPU_agent_pool := sampler/agents sampler/sample
# the emulation layer without NCCL (tests/cuda_emu/src); gemm adds its cuBLAS
LAB_EMU_CORE := deferred device_calls engine fiber graph grid_wait launch_ex memory runtime switch
LAB_EMU_EXTRA_gemm := cublas

LAB_EMU_DIR := $(EMU_OUT)/lab
LAB_GPU_DIR := $(BUILD)/cuda/lab
LAB_DIR_emu := $(LAB_EMU_DIR)
LAB_DIR_gpu := $(LAB_GPU_DIR)
LAB_EMU_BINS := $(addprefix $(LAB_EMU_DIR)/,$(LAB_FAMILIES))
LAB_GPU_BINS := $(addprefix $(LAB_GPU_DIR)/,$(LAB_FAMILIES))
# gpu when nvidia-smi lists a GPU and nvcc is there; deferred, so only `make lab` runs nvidia-smi
LAB_MODE ?= $(if $(shell nvidia-smi -L 2>/dev/null | grep -q '^GPU' && command -v $(NVCC) >/dev/null && echo y),gpu,emu)
LAB_ARGS ?=
# The kernel objects of family $1 (functions: a '%' written in a rule's prerequisites would be the stem)
lab_emu_kobj = $(patsubst %,$(EMU_OUT)/obj/kernels/%.o,$(LAB_DEPS_$1))
lab_gpu_kobj = $(patsubst %,$(BUILD)/cuda/kernels/%.o,$(LAB_DEPS_$1))
# ... its CPU twins' objects: the lab's own, built at -O0 (emulated: with the sanitizers), since
# at -O2 the SIMD files the twins call into (cpu_attention.c, cpu_qtile512.c) take ~70 s of CPU
# to compile under ASan and at -O0 ~3 s; the twins compute the same (C11: no FMA contraction)
lab_emu_cobj = $(patsubst %,$(LAB_EMU_DIR)/cpu/%.o,$(LAB_CPU_$1))
lab_gpu_cobj = $(patsubst %,$(LAB_GPU_DIR)/cpu/%.o,$(LAB_CPU_$1))
LAB_CFLAGS = $(call cflags_at,-O0)
LAB_CPU_ALL := $(sort $(foreach f,$(LAB_FAMILIES),$(LAB_CPU_$f)))
# ... and the emulation layer's objects
lab_emu_layer = $(patsubst %,$(EMU_OUT)/obj/$(EMU_DIR)/src/%.o,$(LAB_EMU_CORE) $(LAB_EMU_EXTRA_$1))

.PHONY: lab lab-build lab-cuda lab-test
lab: lab-build
	$(LAB_DIR_$(LAB_MODE))/$(K) $(LAB_ARGS)

lab-build:
	@case " $(LAB_FAMILIES) " in *" $(K) "*) ;; *) echo "lab: K='$(K)' is not a kernel family; one of: $(LAB_FAMILIES)"; exit 2;; esac
	@case "$(LAB_MODE)" in emu|gpu) ;; *) echo "lab: LAB_MODE='$(LAB_MODE)': emu or gpu"; exit 2;; esac
	$(MAKE) --no-print-directory $(LAB_DIR_$(LAB_MODE))/$(K)

lab-cuda: $(LAB_GPU_BINS)

# Each family's check, emulated, under both thread schedules (tests/cuda_emu/README.md: a race
# between the threads of a block, a missing __syncthreads, gives a wrong result under one of
# them; the naive kernels have no other test). Every family runs even after a failure, then the
# list of those that failed. Sanitizer reports abort (UBSan) or make the exit status non-zero
# (ASan, LSan).
lab-test: $(LAB_EMU_BINS)
	@failed=""; for k in $(LAB_FAMILIES); do for sched in forward reverse; do \
		echo "lab-test: $$k, $$sched schedule"; \
		EMU_SCHEDULE=$$sched $(EMU_TEST_ENV) $(LAB_EMU_DIR)/$$k --check-only || failed="$$failed $$k($$sched)"; \
		done; done; \
	if [ -n "$$failed" ]; then echo "lab-test: FAILED:$$failed"; exit 1; fi; \
	echo "lab-test: every version of every family matches its CPU twin"

# Emulated: the program rewritten like the kernels (launch syntax), compiled by the host C++
# compiler with the layer's flags (ASan + UBSan), linked with the layer and the family's kernels.
$(LAB_EMU_DIR)/src/%.cu: tools/lab/%.cu $(EMU_DIR)/rewrite.py
	@mkdir -p $(dir $@)
	$(call say,EMU,$<)python3 $(EMU_DIR)/rewrite.py $< $@

# At -O0 (after EMU_CXXFLAGS' -O2): the program makes its inputs and runs its CPU twin once, on a
# few MB; -O0 compiles it in 60 % of the time (ISO C++: no multiply-add contraction at any level).
$(LAB_EMU_DIR)/obj/%.o: $(LAB_EMU_DIR)/src/%.cu tools/lab/lab.h $(EMU_KERNEL_HDR)
	@mkdir -p $(dir $@)
	$(call say,CXX,$<)$(EMU_CXX) $(EMU_CXXFLAGS) -O0 -DEMX_LAB_EMULATED $(EMU_INC) $(EMU_FORCE) -x c++ -c $< -o $@

$(LAB_EMU_DIR)/%: $(LAB_EMU_DIR)/obj/%.o $$(call lab_emu_layer,$$*) $$(call lab_emu_kobj,$$*) $$(call lab_emu_cobj,$$*)
	$(call say,LD,$@)$(EMU_CXX) $(EMU_CXXFLAGS) $(filter %.o,$^) -o $@ $(LDLIBS)

$(LAB_EMU_DIR)/cpu/%.o: %.c
	@mkdir -p $(dir $@)
	$(call say,CC,$<)$(CC) $(LAB_CFLAGS) $(EMU_SAN) -c $< -o $@

# GPU: nvcc, the flags of `make cuda` (sm_80 + sm_90, warnings as errors); the CPU objects are
# built with -fopenmp, so nvcc links libgomp instead of the flag (as kernels/bench.mk).
$(LAB_GPU_DIR)/obj/%.o: tools/lab/%.cu
	@mkdir -p $(dir $@)
	$(call say,NVCC,$<)$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@

$(LAB_GPU_DIR)/cpu/%.o: %.c
	@mkdir -p $(dir $@)
	$(call say,CC,$<)$(CC) $(LAB_CFLAGS) -c $< -o $@

$(LAB_GPU_DIR)/%: $(LAB_GPU_DIR)/obj/%.o $$(call lab_gpu_kobj,$$*) $$(call lab_gpu_cobj,$$*)
	$(call say,LD,$@)$(NVCC) $(CUDA_ARCHS) $(filter %.o,$^) -o $@ -lcublas -lgomp $(filter-out -fopenmp,$(LDLIBS))

-include $(patsubst %,$(LAB_EMU_DIR)/obj/%.d,$(LAB_FAMILIES)) $(patsubst %,$(LAB_GPU_DIR)/obj/%.d,$(LAB_FAMILIES)) \
         $(patsubst %,$(LAB_EMU_DIR)/cpu/%.d,$(LAB_CPU_ALL)) $(patsubst %,$(LAB_GPU_DIR)/cpu/%.d,$(LAB_CPU_ALL))
