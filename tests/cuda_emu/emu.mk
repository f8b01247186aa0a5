# tests/cuda_emu/emu.mk — the CUDA emulation layer and the emulated test binary.
# Included by the top Makefile after its library rules. Builds, with the host C++ compiler and
# always with AddressSanitizer + UBSan:
#   $(EMU_BUILD)/tests/emu_tests the layer + every kernels/*.cu, kernels/*/*.cu (rewritten by rewrite.py) +
#                                tests/cuda_emu/test_*.cpp + tests/kernels/test_*.cpp
#   $(EMU_BUILD)/tests/emu_selftest the layer + its self-tests only (works while kernels/ is broken)
#   make emu-selftest            builds and runs the latter
# Rewritten sources go to $(EMU_BUILD)/emu/<same path>, objects to $(EMU_BUILD)/emu/obj/<same path>.

EMU_DIR := tests/cuda_emu
# Where the emulated binaries are built: $(BUILD), but `make test-asan` (BUILD=build-asan) uses
# those of build/, which are built with the same sanitizers already.
EMU_BUILD ?= $(BUILD)
EMU_OUT := $(EMU_BUILD)/emu
EMU_CXX ?= g++
EMU_WERROR ?= -Werror
EMU_SAN := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
# Position-independent, as the real CUDA objects are (kernels/kernels.mk): the emulated objects
# make the emulated twin of libentropix.so too (api/api.mk). flags.cfg records it, so objects
# built without it are built again. Thread-local variables (threadIdx and the scheduler's engine,
# read at every switch) through TLS descriptors: in position-independent code the default reaches
# each through a call to __tls_get_addr, which AddressSanitizer intercepts (a tenth of the
# emulated suite's time); a descriptor of a library loaded at start is one load and a call that
# returns an offset, and a library loaded later by dlopen (Python's ctypes) still works, which
# the initial-exec model would not (the library's whole TLS block would need static TLS room).
EMU_PIC := -fPIC -mtls-dialect=gnu2
# #pragma unroll and friends are hints for nvcc; g++ ignores them.
# Line tables only (-g1): what the sanitizers' reports and backtraces print (file, line,
# function), without the variables' descriptions that full -g writes for every template instance
# of the kernels: the heaviest kernel object compiles in 22 s instead of 33 (2-core AVX2 EPYC,
# 2026-12-02). The C objects take it after CFLAGS' -g: the last -g level given wins.
# EMU_DEBUG=-g on the command line, for gdb on an emulated kernel's locals.
EMU_DEBUG ?= -g1
# Their optimisation: OPT, but `make test-asan`, whose own OPT (-O1 and the sanitizers) is the ASan
# build's, passes the OPT of the make that called it, so an object of these that it finds out of
# date is built again as `make test` built it. flags.cfg records it. EMU_CFLAGS: the C objects'.
EMU_OPT ?= $(OPT)
EMU_CFLAGS = $(call cflags_at,$(EMU_OPT))
EMU_CXXFLAGS := -std=c++17 $(EMU_OPT) $(ARCHFLAGS) $(EMU_DEBUG) -Wall -Wextra -Wno-unknown-pragmas $(EMU_WERROR) $(EMU_SAN) $(EMU_PIC) \
                -MMD -MP
# Includes are written from the repository root ("kernels/attention.h", "kernels/reduce.cuh",
# "sampler/metrics.h"). The rewritten tree comes first, so "kernels/attention.h" from a rewritten
# kernel or test is the rewritten header.
EMU_INC := -I$(EMU_OUT) -I. -I$(EMU_DIR)/include
EMU_FORCE := -include $(EMU_DIR)/include/emu/cuda_emu.h

EMU_LAYER_SRC := $(wildcard $(EMU_DIR)/src/*.cpp)
EMU_LAYER_OBJ := $(EMU_LAYER_SRC:%.cpp=$(EMU_OUT)/obj/%.o)
EMU_KERNEL_SRC := $(wildcard kernels/*.cu kernels/*/*.cu)
# The rewritten kernel headers, and the stamp of their rewrite (below): what a kernel, test or lab
# object compiled against them lists as prerequisites.
EMU_KERNEL_HDR_SRC := $(wildcard kernels/*.cuh kernels/*.h kernels/*/*.cuh kernels/*/*.h)
EMU_KERNEL_HDR_OUT := $(EMU_KERNEL_HDR_SRC:%=$(EMU_OUT)/%)
EMU_KERNEL_HDR_STAMP := $(EMU_OUT)/kernels/headers.stamp
EMU_KERNEL_HDR := $(EMU_KERNEL_HDR_OUT) $(EMU_KERNEL_HDR_STAMP)
EMU_KERNEL_OBJ := $(EMU_KERNEL_SRC:%.cu=$(EMU_OUT)/obj/%.o)
EMU_SELFTEST_SRC := $(wildcard $(EMU_DIR)/test_*.cpp)
EMU_SELFTEST_OBJ := $(EMU_SELFTEST_SRC:%.cpp=$(EMU_OUT)/obj/%.o)
# CUDA host code outside kernels/ (runtime/cuda/comm_nccl.cu: the NCCL communicator), rewritten and
# compiled like the kernels.
EMU_RUNTIME_SRC := runtime/cuda/comm_nccl.cu
EMU_RUNTIME_OBJ := $(EMU_RUNTIME_SRC:%.cu=$(EMU_OUT)/obj/%.o)
# CUDA host code in C11 (runtime/cuda/forward_cuda*.c, the CUDA backend of forward.h): compiled by the C
# compiler against the emulator's C-compatible headers, as against CUDA's on a GPU machine.
EMU_HOST_C_OBJ := $(CUDA_HOST_SRC:%.c=$(EMU_OUT)/obj/%.o)
EMU_KTEST_SRC := $(wildcard tests/kernels/test_*.cpp)
# Test headers are rewritten too (beside the rewritten tests, so quote includes find them first).
EMU_TEST_HDR := $(patsubst %,$(EMU_OUT)/%,$(wildcard tests/kernels/*.h $(EMU_DIR)/*.h))
EMU_KTEST_OBJ := $(EMU_KTEST_SRC:%.cpp=$(EMU_OUT)/obj/%.o)
# The C library and programs linked into the emulated binaries, compiled again with the same
# sanitizers as the layer: the CPU code those binaries run (the kernels' CPU twins, the pool's
# host side, ./run itself) is checked too, so `make test-asan` need not build and run them again.
EMU_C_OBJ_OF = $(patsubst %.c,$(EMU_OUT)/obj/%.o,$(1))
EMU_LIB := $(EMU_OUT)/libentropix.a
EMU_LIB_OBJ := $(call EMU_C_OBJ_OF,$(LIB_SRC))
EMU_LIBS := $(EMU_LIB) $(LDLIBS) -lcriterion

EMU_TEST_BIN := $(EMU_BUILD)/tests/emu_tests

# Rewrite (launches and __shared__ declarations; line numbers kept) before compiling.
$(EMU_OUT)/kernels/%: kernels/% $(EMU_DIR)/rewrite.py
	@mkdir -p $(dir $@)
	$(call say,EMU,$<)python3 $(EMU_DIR)/rewrite.py $< $@

# The kernel headers in one run of rewrite.py (Python's start is most of a header's rewrite: a run
# per header took 2 s of CPU of `make lab`'s cold start): those newer than the stamp, every one
# when rewrite.py changed. What compiles against them depends on the stamp (EMU_KERNEL_HDR): make
# reads a header's time before the stamp's recipe rewrites it, so the stamp says that one changed.
# A rewritten header missing afterwards (removed by hand) is made alone.
$(EMU_KERNEL_HDR_STAMP): $(EMU_KERNEL_HDR_SRC) $(EMU_DIR)/rewrite.py
	@mkdir -p $(sort $(dir $(EMU_KERNEL_HDR_OUT)))
	$(call say,EMU,kernels/ headers)python3 $(EMU_DIR)/rewrite.py \
	    $(foreach h,$(if $(filter $(EMU_DIR)/rewrite.py,$?),$(EMU_KERNEL_HDR_SRC),$(filter-out $(EMU_DIR)/rewrite.py,$?)),$h $(EMU_OUT)/$h)
	@touch $@
$(EMU_KERNEL_HDR_OUT): | $(EMU_KERNEL_HDR_STAMP)
	@[ -f $@ ] || python3 $(EMU_DIR)/rewrite.py $(@:$(EMU_OUT)/%=%) $@

$(EMU_OUT)/runtime/%.cu: runtime/%.cu $(EMU_DIR)/rewrite.py
	@mkdir -p $(dir $@)
	$(call say,EMU,$<)python3 $(EMU_DIR)/rewrite.py $< $@

$(EMU_OUT)/tests/%.cpp: tests/%.cpp $(EMU_DIR)/rewrite.py
	@mkdir -p $(dir $@)
	$(call say,EMU,$<)python3 $(EMU_DIR)/rewrite.py $< $@

$(EMU_OUT)/tests/%.h: tests/%.h $(EMU_DIR)/rewrite.py
	@mkdir -p $(dir $@)
	$(call say,EMU,$<)python3 $(EMU_DIR)/rewrite.py $< $@

# The layer's files that run once per API call (allocation and copies, streams and events, launch
# attributes, graph capture, the parking of co-resident blocks), not once per kernel thread or
# barrier as engine.cpp, device_calls.cpp and fiber.cpp do: compiled at -O0, which takes 40 %
# of -O2's compile time under the sanitizers (4.6 s of CPU less for the layer: `make lab`'s cold
# start, docs/kernel-lab.md); 21 emulated grid, stream and fused-matvec tests took 5.1 s of CPU
# against 5.0 s with every file at -O2 (2026-11-29: within the run-to-run spread).
EMU_LAYER_COLD := deferred graph grid_wait launch_ex memory runtime
$(patsubst %,$(EMU_OUT)/obj/$(EMU_DIR)/src/%.o,$(EMU_LAYER_COLD)): EMU_LAYER_OPT := -O0
# The scheduler's per-switch paths, run for every thread at every barrier and warp op: without the
# sanitizers (src/switch.cpp says why).
EMU_LAYER_UNCHECKED := switch
$(patsubst %,$(EMU_OUT)/obj/$(EMU_DIR)/src/%.o,$(EMU_LAYER_UNCHECKED)): EMU_LAYER_OPT := -fno-sanitize=address,undefined
$(EMU_OUT)/obj/$(EMU_DIR)/src/%.o: $(EMU_DIR)/src/%.cpp
	@mkdir -p $(dir $@)
	$(call say,CXX,$<)$(EMU_CXX) $(EMU_CXXFLAGS) $(EMU_LAYER_OPT) -I$(EMU_DIR)/include -c $< -o $@

$(EMU_OUT)/obj/kernels/%.o: $(EMU_OUT)/kernels/%.cu $(EMU_KERNEL_HDR)
	@mkdir -p $(dir $@)
	$(call say,CXX,$<)$(EMU_CXX) $(EMU_CXXFLAGS) $(EMU_INC) $(EMU_FORCE) -x c++ -c $< -o $@

$(EMU_OUT)/obj/runtime/%.o: $(EMU_OUT)/runtime/%.cu
	@mkdir -p $(dir $@)
	$(call say,CXX,$<)$(EMU_CXX) $(EMU_CXXFLAGS) $(EMU_INC) $(EMU_FORCE) -x c++ -c $< -o $@

$(EMU_HOST_C_OBJ): $(EMU_OUT)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(call say,CC,$@)$(CC) $(EMU_CFLAGS) $(EMU_DEBUG) $(EMU_SAN) $(EMU_PIC) -I$(EMU_DIR)/include -DEMX_CUDA_ARCHS='"emulated"' -c $< -o $@

# The CPU kernels that keep their accumulators in local arrays of vector registers (the attention's
# and the prefill tile's, AVX-512 and AVX2): ASan's stack instrumentation gives each such array
# red zones, so it lives in memory instead of registers, and UBSan's pointer-overflow check
# guards every address the unrolled loops form. Without those two (their heap and global accesses
# still checked by ASan, the rest of UBSan kept): cpu_ops' attention test 8.7 s -> 0.9 s, a
# SmolLM2 agent pool with its critic (mostly prefill tiles) 26-30 s -> 14-15 s, the two AVX-512
# files' compile 30-36 s -> 11 s each (2026-12-01, 2 cores); the decode's four-row dot products
# (cpu_qdot.c): SmolLM2 q8 decode under the sanitizers 95-103 -> 50-52 ms a token (build-asan's
# ./run, -t 1, 32 tokens), the ASan suite's SmolLM2 critic pool and structured-output tests
# 137 -> 90 s (2026-12-02, a 2-core AVX2 EPYC, one build each way). Their stack arrays are of
# fixed size, indexed by loop counters below it.
EMU_VECTOR_ARRAY_SRC := runtime/cpu/cpu_attention.c runtime/cpu/cpu_attention_avx2.c runtime/cpu/cpu_qtile.c \
                        runtime/cpu/cpu_qtile512.c runtime/cpu/cpu_qdot.c
$(call EMU_C_OBJ_OF,$(EMU_VECTOR_ARRAY_SRC)): EMU_C_SAN_TUNE := --param asan-stack=0 -fno-sanitize=pointer-overflow
$(EMU_LIB_OBJ) $(call EMU_C_OBJ_OF,$(PROGRAM_SRC)): $(EMU_OUT)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(call say,CC,$@)$(CC) $(EMU_CFLAGS) $(EMU_DEBUG) $(EMU_SAN) $(EMU_C_SAN_TUNE) $(EMU_PIC) -c $< -o $@

# EMU_PIC, EMU_DEBUG and EMU_OPT of the last build of these objects, rewritten (while the makefile
# is read, as archs.cfg is) only when they change.
EMU_FLAGS_CFG := $(EMU_OUT)/flags.cfg
ifneq ($(file < $(EMU_FLAGS_CFG)),$(EMU_PIC) $(EMU_DEBUG) $(EMU_OPT))
$(shell mkdir -p $(EMU_OUT) && printf '%s\n' '$(EMU_PIC) $(EMU_DEBUG) $(EMU_OPT)' > $(EMU_FLAGS_CFG))
endif
$(EMU_LAYER_OBJ) $(EMU_KERNEL_OBJ) $(EMU_RUNTIME_OBJ) $(EMU_HOST_C_OBJ) $(EMU_LIB_OBJ) $(EMU_SELFTEST_OBJ) $(EMU_KTEST_OBJ) \
    $(call EMU_C_OBJ_OF,$(PROGRAM_SRC)): $(EMU_FLAGS_CFG)

$(EMU_LIB): $(EMU_LIB_OBJ)
	@rm -f $@
	$(call say,AR,$@)ar rcs $@ $^

# The kernel tests (tests/kernels) define no kernel: their code runs on the host, once per
# comparison, and the kernels and CPU twins they call are compiled apart. At -O1 they compile in
# 99 s of CPU against 158 s at -O2 (35 files under the sanitizers), and 101 of their tests took
# the same time either way (2026-12-01: 94 s and 84 s of wall time against 95 s and 85 s).
# The emulator's self-tests define their kernels in the test files: -O2 as the kernels.
$(EMU_KTEST_OBJ): EMU_TEST_OPT := -O1
$(EMU_OUT)/obj/tests/%.o: $(EMU_OUT)/tests/%.cpp $(EMU_KERNEL_HDR) $(EMU_TEST_HDR)
	@mkdir -p $(dir $@)
	$(call say,CXX,$<)$(EMU_CXX) $(EMU_CXXFLAGS) $(EMU_TEST_OPT) $(EMU_INC) $(EMU_FORCE) -c $< -o $@

$(EMU_TEST_BIN): $(EMU_LAYER_OBJ) $(EMU_KERNEL_OBJ) $(EMU_RUNTIME_OBJ) $(EMU_HOST_C_OBJ) $(EMU_SELFTEST_OBJ) $(EMU_KTEST_OBJ) $(EMU_LIB)
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(EMU_CXX) $(EMU_CXXFLAGS) $(filter %.o,$^) -o $@ $(EMU_LIBS)

# ./run with the CUDA backend on emulated GPUs (--device cuda:N): the C suite runs it beside the
# CPU ./run (EMX_GPU_RUN) to compare whole generations. Slow (every kernel thread is a fiber) and
# always under ASan, like every emulated binary.
EMU_RUN_BIN := $(EMU_OUT)/run
$(EMU_RUN_BIN): $(EMU_OUT)/obj/runtime/cli/run.o $(EMU_HOST_C_OBJ) $(EMU_RUNTIME_OBJ) $(EMU_LAYER_OBJ) $(EMU_KERNEL_OBJ) $(EMU_LIB)
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(EMU_CXX) $(EMU_CXXFLAGS) $(filter %.o,$^) -o $@ $(EMU_LIB) $(LDLIBS)

# tools/bench on emulated GPUs (EMX_GPU_BENCH in the C suite): proves the GPU report's paths
# (launches per step, bytes per token, peak bandwidth from the device's properties) run; its
# timings are emulation timings.
EMU_BENCH_BIN := $(EMU_OUT)/tools/bench
# tools/eval on emulated GPUs (EMX_GPU_EVAL in the C suite): its results must equal the CPU eval's.
EMU_EVAL_BIN := $(EMU_OUT)/tools/eval
# tools/server on emulated GPUs (the first-contact script's emulated server-slots step).
EMU_SERVER_BIN := $(EMU_OUT)/tools/server
$(EMU_SERVER_BIN): LDLIBS += -lmicrohttpd
$(EMU_OUT)/tools/%: $(EMU_OUT)/obj/tools/%.o $(EMU_HOST_C_OBJ) $(EMU_RUNTIME_OBJ) $(EMU_LAYER_OBJ) $(EMU_KERNEL_OBJ) $(EMU_LIB)
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(EMU_CXX) $(EMU_CXXFLAGS) $(filter %.o,$^) -o $@ $(EMU_LIB) $(LDLIBS)

$(EMU_BUILD)/tests/emu_selftest: $(EMU_LAYER_OBJ) $(EMU_SELFTEST_OBJ) $(EMU_LIB)
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(EMU_CXX) $(EMU_CXXFLAGS) $(filter %.o,$^) -o $@ $(EMU_LIBS)

.PHONY: emu-selftest
emu-selftest: $(EMU_BUILD)/tests/emu_selftest
	$(EMU_BUILD)/tests/emu_selftest -j2 $(EMU_TEST_ARGS)

-include $(EMU_LIB_OBJ:.o=.d) $(patsubst %.c,$(EMU_OUT)/obj/%.d,$(PROGRAM_SRC)) $(EMU_LAYER_OBJ:.o=.d) $(EMU_KERNEL_OBJ:.o=.d) $(EMU_HOST_C_OBJ:.o=.d) $(EMU_RUNTIME_OBJ:.o=.d) $(EMU_SELFTEST_OBJ:.o=.d) $(EMU_KTEST_OBJ:.o=.d)

# Scheduling cost with the x86-64 switch and with ucontext (README, "Performance").
EMU_BENCH_SRC := $(EMU_OUT)/tests/cuda_emu/bench_switch.cpp
# (The per-switch paths without the sanitizers, as in the emulated binaries.)
$(foreach d,asm ucontext,$(patsubst %,$(EMU_OUT)/bench/$(d)/%.o,$(EMU_LAYER_UNCHECKED))): \
    EMU_LAYER_OPT := -fno-sanitize=address,undefined
$(EMU_OUT)/bench/asm/%.o: $(EMU_DIR)/src/%.cpp
	@mkdir -p $(dir $@)
	$(call say,CXX,$<)$(EMU_CXX) $(EMU_CXXFLAGS) $(EMU_LAYER_OPT) -I$(EMU_DIR)/include -c $< -o $@
$(EMU_OUT)/bench/ucontext/%.o: $(EMU_DIR)/src/%.cpp
	@mkdir -p $(dir $@)
	$(call say,CXX,$<)$(EMU_CXX) $(EMU_CXXFLAGS) $(EMU_LAYER_OPT) -DEMU_FIBER_UCONTEXT -I$(EMU_DIR)/include -c $< -o $@
$(EMU_OUT)/bench/asm/bench_switch: $(EMU_BENCH_SRC) $(EMU_LAYER_SRC:$(EMU_DIR)/src/%.cpp=$(EMU_OUT)/bench/asm/%.o)
	$(call say,LD,$@)$(EMU_CXX) $(EMU_CXXFLAGS) $(EMU_INC) $(EMU_FORCE) -DEMU_FIBER_NAME='"asm"' $^ -o $@
$(EMU_OUT)/bench/ucontext/bench_switch: $(EMU_BENCH_SRC) $(EMU_LAYER_SRC:$(EMU_DIR)/src/%.cpp=$(EMU_OUT)/bench/ucontext/%.o)
	$(call say,LD,$@)$(EMU_CXX) $(EMU_CXXFLAGS) $(EMU_INC) $(EMU_FORCE) -DEMU_FIBER_NAME='"ucontext"' $^ -o $@
.PHONY: emu-bench
emu-bench: $(EMU_OUT)/bench/asm/bench_switch $(EMU_OUT)/bench/ucontext/bench_switch
	$(EMU_OUT)/bench/asm/bench_switch
	$(EMU_OUT)/bench/ucontext/bench_switch

# What the emulator refuses must fail to compile, with a message naming it (compile_checks.sh).
.PHONY: emu-compile-checks
emu-compile-checks:
	$(EMU_DIR)/compile_checks.sh $(EMU_CXX)
