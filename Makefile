# entropix.c — build with the system C compiler; the CUDA backend is built in when nvcc is found.
#   make            ./run and tools/ programs (build/); with the CUDA backend when nvcc is found;
#                   on every core (-jN to say otherwise), one line per file (V=1: the commands)
#   make CUDA=0     the same, CPU-only (no nvcc, no CUDA libraries needed)
#   make test       Criterion suite (converts the test models first)
#   make test-asan  the same suite under AddressSanitizer + UndefinedBehaviorSanitizer
#   make fuzz       libFuzzer on every parser (clang; tests/fuzz/README.md)
#   make weights    fetch and convert the default model (SmolLM2-135M-Instruct)

CC      ?= gcc
SHELL   := /bin/bash
NPROC   := $(shell nproc 2>/dev/null || echo 2)
# Every core unless the command line says otherwise (-jN, -j1 for one at a time): a first build is
# hundreds of files. Not in sub-makes (they share the jobserver or have their own -j), nor for
# clean, check and the fuzzers, whose recipes run sub-makes with a -j of their own.
ifeq ($(MAKELEVEL)$(filter -j%,$(MAKEFLAGS))$(filter clean check fuzz fuzz-ci,$(MAKECMDGOALS)),0)
MAKEFLAGS += -j$(NPROC)
endif
# One short line per file ("  CC   runtime/model.c", "  LD   build/cpu/run"); V=1 prints the
# commands instead. A rule's command line starts with $(call say,WHAT,file).
V ?= 0
ifeq ($(V),1)
say =
else
say = @printf '  %-4s %s\n' '$(1)' '$(2)';
endif
SHARED  ?= ../shared
BUILD   ?= build
ARCHFLAGS ?= -march=native
OPT     ?= -O2
# Includes are written from the repository root ("runtime/cpu/cpu_ops.h"): one -I.
CFLAGS  += -std=c11 -D_DEFAULT_SOURCE -Wall -Wextra -Werror $(OPT) $(ARCHFLAGS) -fopenmp -g \
           -I. -MMD -MP
# CFLAGS with optimisation $(1) in place of OPT (the lab's twins, the emulated objects).
cflags_at = $(filter-out $(OPT),$(CFLAGS)) $(1)
LDLIBS  += -lm -lcjson -lpcre2-8 -lutf8proc -lpthread -fopenmp

# The CUDA backend: on (CUDA=1) when nvcc is found, on PATH or at CUDA's default install location,
# else off (CUDA=0, a CPU-only build that needs nothing of the toolkit); either can be forced on
# the command line. Sanitized builds (OPT with -fsanitize: `make test-asan`, the ASan build of
# the checks) default to CPU-only: the CUDA driver maps memory where ASan keeps its shadow gap (it
# would need ASAN_OPTIONS=protect_shadow_gap=0 on a GPU machine), and the emulated binaries
# (tests/cuda_emu) run the CUDA host code under ASan already.
comma := ,
NVCC ?= $(or $(shell command -v nvcc 2>/dev/null),/usr/local/cuda/bin/nvcc)
NVCC_FOUND := $(shell command -v "$(NVCC)" 2>/dev/null)
CUDA ?= $(if $(findstring -fsanitize,$(OPT)),0,$(if $(NVCC_FOUND),1,0))
ifeq ($(filter 0 1,$(CUDA)),)
$(error CUDA=$(CUDA): expected 0 (CPU-only) or 1 (with the CUDA backend))
endif
ifeq ($(CUDA):$(NVCC_FOUND),1:)
$(error CUDA=1 but there is no nvcc at $(NVCC) (install the CUDA toolkit, set NVCC=path, or make CUDA=0))
endif

# Library: everything but the files with a main(). Folders in layer order (tools/check_layers.py).
PROGRAM_SRC := runtime/cli/run.c $(wildcard tools/*.c)
# runtime/cuda/*.c are the CUDA backend: built only against a CUDA runtime (the real one in
# kernels/kernels.mk, the emulator in tests/cuda_emu/emu.mk), never into the CPU library.
CUDA_HOST_SRC := $(wildcard runtime/cuda/*.c)
LIB_SRC := $(filter-out $(PROGRAM_SRC) $(CUDA_HOST_SRC), $(wildcard base/*.c tokenizer/*.c sampler/*.c runtime/*.c runtime/*/*.c tools/convert/*.c tools/bench/*.c tools/eval/*.c tools/server/*.c))
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
TEST_SRC := $(wildcard tests/test_*.c)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/obj/%.o)
TOOLS := $(patsubst tools/%.c,$(BUILD)/tools/%,$(wildcard tools/*.c))

# The programs that run a model on a --device are linked twice: CPU-only into $(BUILD)/cpu/, and
# with the CUDA backend into $(BUILD)/cuda/ (kernels/kernels.mk). What users run, ./run and
# $(BUILD)/{run,tools/bench,tools/eval,tools/server}, is a copy of the CUDA one when CUDA=1 and of
# the CPU-only one otherwise: one binary for GPU users, whose --device auto picks GPU 0 when there
# is one. The CPU-only build is made either way (it is one more link of the same objects): the C
# suite runs it (EMX_RUN=$(BUILD)/cpu/run, $(BUILD)/cpu/tools/*), so that its byte-exact CPU
# comparisons and its "this build has no CUDA backend" checks test the CPU on every machine, a
# GPU machine's included, and `make test-gpu` compares the CUDA build against it.
DEVICE_PROGS := run tools/bench tools/eval tools/server
CPU_PROGS := $(DEVICE_PROGS:%=$(BUILD)/cpu/%)
USER_PROGS := $(DEVICE_PROGS:%=$(BUILD)/%)
BACKEND_DIR := $(if $(filter 1,$(CUDA)),cuda,cpu)

.SECONDARY:
.PHONY: all check check-layers check-links test test-asan test-models weights clean FORCE
# With the CUDA backend, its nvcc notice comes first: made at once, so that the nvcc jobs (the
# longest) start among the first, not (under -j) deferred until the whole C library has started.
ifeq ($(CUDA),1)
all: $(BUILD)/cuda/nvcc-notice
endif
# ./run at the top for users; each build folder has its own (the ASan one must not replace it).
ifeq ($(BUILD),build)
all: run $(TOOLS) $(CPU_PROGS)
run: $(BUILD)/run
	$(call say,CP,$@)cp $< $@
else
all: $(BUILD)/run $(TOOLS) $(CPU_PROGS)
endif

# CUDA=0 or 1 of the last make in this build folder, rewritten only when it changes: the copies
# below depend on it, so that switching CUDA in the same folder copies the other binary.
$(BUILD)/backend.cfg: FORCE
	@mkdir -p $(dir $@)
	@echo "CUDA=$(CUDA)" | cmp -s - $@ || echo "CUDA=$(CUDA)" > $@

$(USER_PROGS): $(BUILD)/%: $(BUILD)/$(BACKEND_DIR)/% $(BUILD)/backend.cfg
	@mkdir -p $(dir $@)
	$(call say,CP,$@)cp $< $@

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(call say,CC,$<)$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/libentropix.a: $(LIB_OBJ)
	@rm -f $@
	$(call say,AR,$@)ar rcs $@ $^

$(BUILD)/cpu/run: $(BUILD)/obj/runtime/cli/run.o $(BUILD)/libentropix.a
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/cpu/tools/%: $(BUILD)/obj/tools/%.o $(BUILD)/libentropix.a
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/tools/%: $(BUILD)/obj/tools/%.o $(BUILD)/libentropix.a
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

# The HTTP server (tools/server/http.c) is the one program that links libmicrohttpd.
$(BUILD)/cpu/tools/server $(BUILD)/cuda/tools/server: LDLIBS += -lmicrohttpd

# The official openai Python client, in a venv (python3-venv) so a fresh Debian 12 needs no
# system pip install; tests/test_server.c runs tests/server/test_openai_client.py with it and
# fails when it is missing. jsonschema validates the grammar walks and structured outputs
# (tests/grammar/, tests/server/test_structured.py); langchain-openai makes the one LangChain call
# (tests/server/test_langchain.py), as applications built on it call the server.
SERVER_VENV := $(BUILD)/server-venv/.ok
$(SERVER_VENV):
	rm -rf $(BUILD)/server-venv
	python3 -m venv $(BUILD)/server-venv
	$(BUILD)/server-venv/bin/pip install -q openai==3.57.0 jsonschema==4.26.0 langchain-openai==1.7.4
	touch $@

# matplotlib for the soak test's figure (tools/soak/plot.py, docs/server.md "Soak test"); no test
# needs it. `make soak-venv` makes it.
SOAK_VENV := $(BUILD)/soak-venv/.ok
$(SOAK_VENV):
	rm -rf $(BUILD)/soak-venv
	python3 -m venv $(BUILD)/soak-venv
	$(BUILD)/soak-venv/bin/pip install -q matplotlib==3.11.2
	touch $@
.PHONY: soak-venv
soak-venv: $(SOAK_VENV)

$(BUILD)/tests/tests: $(TEST_OBJ) $(BUILD)/libentropix.a
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS) -lcriterion

# Models converted from ../shared/testdata by our converter; the tests read them from here.
include tests/models.mk
include tests/models_smollm2.mk
# libFuzzer harnesses of the parsers (clang; `make fuzz`, `make fuzz-ci`): tests/fuzz/README.md.
include tests/fuzz/fuzz.mk

# nvcc compiles for the GPUs of this machine when nvidia-smi lists some (compute capability 8.x
# runs sm_80's code, 9.0 sm_90's): one architecture, half the nvcc time of a first build. Without
# a GPU, or with none of those, kernels/kernels.mk's list (sm_80 and sm_90); CUDA_ARCHS=... on the
# command line chooses. The objects are rebuilt when the architectures change (archs.cfg below).
ifeq ($(CUDA)$(origin CUDA_ARCHS),1undefined)
GPU_CAPS := $(shell nvidia-smi -L 2>/dev/null | grep -q '^GPU' && nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null)
GPU_SMS := $(sort $(patsubst 8.%,80,$(filter 8.%,$(GPU_CAPS))) $(patsubst 9.0,90,$(filter 9.0,$(GPU_CAPS))))
ifneq ($(GPU_SMS),)
CUDA_ARCHS := $(foreach s,$(GPU_SMS),-gencode arch=compute_$(s)$(comma)code=sm_$(s))
endif
endif

# CUDA: kernels/kernels.mk (`make cuda`: the real nvcc build of kernels/*.cu for sm_80 and sm_90),
# kernels/bench.mk (`make bench-kernels`) and tests/cuda_emu/emu.mk (the emulation layer, which
# builds the unmodified kernels with the host C++ compiler; it sets EMU_TEST_BIN, a second
# Criterion binary that `make test` runs after the C suite).
-include kernels/kernels.mk
-include kernels/bench.mk
-include tests/cuda_emu/emu.mk
# The kernel lab (`make lab K=<family>`, `make lab-test`): tools/lab/lab.mk, docs/kernel-lab.md.
-include tools/lab/lab.mk
# The public C API: libentropix.so.0, the public libentropix.a, `make install` (api/api.mk,
# docs/c-api.md); after emu.mk, whose objects its emulated CUDA check links.
include api/api.mk

# make test-asan (SAN_OBJ_FROM_EMU=1): the library's and the programs' objects are the emulated
# binaries' (tests/cuda_emu/emu.mk: the same sources with the same sanitizers, at -O2 and -fPIC),
# which make test compiled already: linked here, not compiled a second time (made by emu.mk's
# rules when missing). The tests' and the API's objects, and the position-independent ones of the
# shared library (-fvisibility=hidden), are compiled as usual.
# make test-avx2 / test-avx2-vnni (ISA_OBJ_FROM=build): a source whose text does not depend on the
# instruction set (no ISA macro or intrinsics header in it, nor in a header its object in
# $(ISA_OBJ_FROM) was made from, by that object's dependency file) compiles to the same code
# there but for the compiler's own vectorisation: its object is $(ISA_OBJ_FROM)'s, linked, not
# compiled again. The CPU kernels, the vocabulary passes and their tests are compiled here.
ifneq ($(ISA_OBJ_FROM),)
ISA_RE := __AVX|__F16C__|__FMA__|__AMX|__SSE|immintrin|x86intrin
ISA_HEADERS := $(shell grep -lE '$(ISA_RE)' $$(find base tokenizer sampler runtime api tools tests -name '*.h'))
ISA_CANDIDATE_SRC := $(LIB_SRC) $(PROGRAM_SRC) $(API_SRC) $(TEST_SRC)
ISA_DEP_FILES := $(wildcard $(ISA_CANDIDATE_SRC:%.c=$(ISA_OBJ_FROM)/obj/%.d))
ISA_OWN_SRC := $(shell grep -lE '$(ISA_RE)' $(ISA_CANDIDATE_SRC)) \
               $(patsubst $(ISA_OBJ_FROM)/obj/%.d,%.c,$(if $(ISA_HEADERS),$(shell grep -lF $(ISA_HEADERS:%=-e %) $(ISA_DEP_FILES))))
ISA_SHARED_SRC := $(filter-out $(ISA_OWN_SRC),$(patsubst $(ISA_OBJ_FROM)/obj/%.d,%.c,$(ISA_DEP_FILES)))
$(ISA_SHARED_SRC:%.c=$(BUILD)/obj/%.o): $(BUILD)/obj/%.o: $(ISA_OBJ_FROM)/obj/%.o
	@mkdir -p $(dir $@)
	$(call say,LN,$@)ln -f $< $@ 2>/dev/null || cp $< $@
endif

ifeq ($(SAN_OBJ_FROM_EMU),1)
$(LIB_OBJ) $(PROGRAM_SRC:%.c=$(BUILD)/obj/%.o): $(BUILD)/obj/%.o: $(EMU_OUT)/obj/%.o
	@mkdir -p $(dir $@)
	$(call say,LN,$@)ln -f $< $@ 2>/dev/null || cp $< $@
endif

# CUDA_ARCHS of the last nvcc build in this folder, with NVCC_PIC, rewritten only when it changes
# (a GPU added or gone, CUDA_ARCHS given): the CUDA objects depend on it, so they are built again
# for the new architectures (or position-independent) instead of linked as they were. Written while the makefile is read, not by a
# rule: a rule run every time would hold every nvcc job back behind the C compiles under -j.
ifeq ($(CUDA),1)
CUDA_ARCHS_CFG := $(BUILD)/cuda/archs.cfg
ifneq ($(file < $(CUDA_ARCHS_CFG)),$(CUDA_ARCHS) $(NVCC_PIC))
$(shell mkdir -p $(BUILD)/cuda && printf '%s\n' '$(CUDA_ARCHS) $(NVCC_PIC)' > $(CUDA_ARCHS_CFG))
endif
$(CUDA_OBJ) $(CUDA_HOST_OBJ) $(BUILD)/cuda/nvcc-notice: $(CUDA_ARCHS_CFG)
endif

# The --report page is built into report_template.o by the assembler's .incbin, which the
# compiler's dependency files do not see: every build of that object names the page here.
REPORT_TEMPLATE_OBJ := $(BUILD)/obj/runtime/report/report_template.o $(FUZZ_BUILD)/obj/runtime/report/report_template.o \
                       $(if $(EMU_OUT),$(EMU_OUT)/obj/runtime/report/report_template.o)
$(REPORT_TEMPLATE_OBJ): runtime/report/report_template.html
# The server's chat page (tools/server/page.c) is built in the same way.
SERVER_PAGE_OBJ := $(BUILD)/obj/tools/server/page.o $(FUZZ_BUILD)/obj/tools/server/page.o \
                   $(if $(EMU_OUT),$(EMU_OUT)/obj/tools/server/page.o)
$(SERVER_PAGE_OBJ): tools/server/page.html

# The emulated kernel tests run twice: threads of a block in forward, then reverse order between
# barriers (a missing __syncthreads shows as a difference; tests/cuda_emu/README.md). The reverse
# pass runs every kernel's own tests (the sampler's and the metrics' at 151,936 logits included)
# and the whole-model tests on stories260K and the small shapes; the whole-model tests of the
# larger tiny models (EMU_FORWARD_ONLY: the same kernels again at Qwen3's, Llama 3's, Qwen2.5's
# and Gemma 3's vocabularies, three quarters of the emulated suite's time; Gemma's own kernels,
# GeGLU, the windowed attention and its ring, have tests of their own in both passes, so
# gemma3-tiny's ring through the whole model, forward_cuda_ring, runs once) run in the forward
# pass only. The reverse pass also defers the streams' work until the host waits for it, where
# the forward pass runs it when it is queued (tests/cuda_emu/README.md): a host that reads a
# result before waiting for it, or rewrites a pinned input a queued copy has not read, fails one
# of the two (the same time as a synchronous reverse pass: 4 min 17 s against 4 min 11 s, 2 cores).
# A kernel stuck in a loop fails by the timeout instead of hanging the run (a safety net only: the longest
# test, forward_cuda/lookahead_round_at_qwen3_vocabulary, took 426 s on 2 cores shared with
# about four other busy processes). They are built with ASan and
# UBSan always, so their log is searched for sanitizer reports here (Criterion does not count a
# report printed at a test's exit), and `make test-asan` does not run them again.
EMU_TEST_ARGS ?= --timeout 900
EMU_FORWARD_ONLY := forward_cuda*/*@(qwen3|llama3|qwen25|gemma3)*|forward_cuda_ring/*|forward_cuda_prefill/@(two_chunks_of_150_rows_match_cpu|the_threshold_chooses_the_path)
SAN_REPORT := ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:
# Tests run two at a time (-j2), each with OpenMP threads, on 2 cores: with OpenMP's default
# spin-waiting at barriers, a thread spins on a core while the thread it waits for sits
# descheduled behind the other test's, and a 6 s pool test took over 300 s beside the SmolLM2
# forward test. Passive waiting sleeps instead: the same results, no collapse when oversubscribed.
TEST_OMP_ENV := OMP_WAIT_POLICY=passive
# The backends $(BUILD)/run should name in --version (tests/test_backends.c).
BUILD_BACKENDS = $(if $(filter 1,$(CUDA)),cpu$(comma) cuda $(CUDA_ARCH_NAMES),cpu)
EMU_TEST_ENV = $(TEST_OMP_ENV) LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp EMX_SHARED=$(SHARED) EMX_BUILD=$(BUILD)
test: check-layers check-links all $(BUILD)/tests/tests test-models $(SERVER_VENV) $(EMU_TEST_BIN) $(EMU_RUN_BIN) $(EMU_BENCH_BIN) $(EMU_EVAL_BIN)
	$(call stamp,test: the C suite)
	$(TEST_OMP_ENV) EMX_SHARED=$(SHARED) EMX_BUILD=$(BUILD) EMX_RUN=$(BUILD)/cpu/run EMX_BACKENDS="$(BUILD_BACKENDS)" EMX_GPU_RUN=$(EMU_RUN_BIN) EMX_GPU_BENCH=$(EMU_BENCH_BIN) EMX_GPU_EVAL=$(EMU_EVAL_BIN) $(BUILD)/tests/tests -j2 $(TEST_ARGS)
	$(if $(EMU_TEST_BIN),$(call stamp,test: the emulated suite))
	$(if $(EMU_TEST_BIN),set -o pipefail; $(EMU_TEST_ENV) $(EMU_TEST_BIN) -j2 $(EMU_TEST_ARGS) 2>&1 | tee $(EMU_BUILD)/emu_tests.log)
	$(if $(EMU_TEST_BIN),$(call stamp,test: the emulated suite under the reverse schedule and deferred streams))
	$(if $(EMU_TEST_BIN),set -o pipefail; EMU_SCHEDULE=reverse EMU_STREAMS=deferred $(EMU_TEST_ENV) $(EMU_TEST_BIN) -j2 --filter '!($(EMU_FORWARD_ONLY))' $(EMU_TEST_ARGS) 2>&1 | tee -a $(EMU_BUILD)/emu_tests.log)
	$(if $(EMU_TEST_BIN),@if grep -nE "$(SAN_REPORT)" $(EMU_BUILD)/emu_tests.log; then \
		echo "test: sanitizer reports in the emulated tests above"; exit 1; fi)
	$(if $(EMU_TEST_BIN),$(call stamp,test: lab-test))
	$(if $(EMU_TEST_BIN),$(MAKE) --no-print-directory lab-test)

# On a machine with a GPU: the kernel and backend tests against the real CUDA runtime
# (kernels/bench.mk), then the C suite's comparisons of whole generations and benchmark reports,
# run with the real CUDA build of ./run and tools/bench instead of the emulated ones.
.PHONY: test-gpu
GPU_C_SUITES ?= run_cuda pool_cuda bench eval_cuda
test-gpu: test-kernels-gpu $(BUILD)/cuda/run $(BUILD)/cuda/tools/bench $(BUILD)/cuda/tools/eval all $(BUILD)/tests/tests test-models
	for suite in $(GPU_C_SUITES); do \
		$(TEST_OMP_ENV) EMX_SHARED=$(SHARED) EMX_BUILD=$(BUILD) EMX_RUN=$(BUILD)/cpu/run EMX_GPU_RUN=$(BUILD)/cuda/run \
		EMX_GPU_BENCH=$(BUILD)/cuda/tools/bench EMX_GPU_EVAL=$(BUILD)/cuda/tools/eval $(BUILD)/tests/tests -j1 --filter "$$suite/*" || exit 1; done

# tools/gpu_first_run.sh run end to end in --emulated mode, and its report read back
# (tests/first_run/, docs/gpu-first-run.md): a binary of its own that make check runs after make
# test, since the emulated run takes minutes and runs make, the emulated binaries and the C suites.
FIRST_RUN_TEST_BIN := $(BUILD)/tests/first_run_tests
$(FIRST_RUN_TEST_BIN): $(BUILD)/obj/tests/first_run/test_first_run.o
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS) -lcriterion
.PHONY: test-first-run
test-first-run: $(FIRST_RUN_TEST_BIN) all $(BUILD)/tests/tests test-models $(EMU_TEST_BIN) $(EMU_RUN_BIN) \
                $(EMU_BENCH_BIN) $(EMU_EVAL_BIN) $(EMU_SERVER_BIN) $(BENCH_KERNELS_EMU_BIN) $(LAB_EMU_BINS)
	$(TEST_OMP_ENV) EMX_SHARED=$(SHARED) $(FIRST_RUN_TEST_BIN) -j1 $(TEST_ARGS)

# Criterion runs each test in a child process and does not count a sanitizer report printed at
# the child's exit (LeakSanitizer) as a failure: the log is searched for reports instead.
# The C suite's comparisons of the CUDA build with the CPU one (run_cuda, pool_cuda, eval_cuda,
# the GPU rows of bench and branch_run) skip here, saying so: their CUDA side is build/emu's
# binaries, which are built with these sanitizers and which `make test` ran already, so here
# they would only run the same emulated generations again (the slowest tests of the suite). Its
# library and program objects are those emulated binaries' too (SAN_OBJ_FROM_EMU, above).
test-asan:
	@mkdir -p build-asan
	set -o pipefail; LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp $(MAKE) BUILD=build-asan CUDA=0 EMU_BUILD=build EMU_OPT='$(EMU_OPT)' SAN_OBJ_FROM_EMU=1 EMU_TEST_BIN= EMU_RUN_BIN= EMU_BENCH_BIN= EMU_EVAL_BIN= OPT="-O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined" test 2>&1 | tee build-asan/test.log
	@if grep -nE "$(SAN_REPORT)" build-asan/test.log; then \
		echo "test-asan: sanitizer reports above"; exit 1; fi

# The AVX2-only build (AVX2 + FMA + F16C, no AVX-512: most laptops and desktops) has kernels of
# its own (the AVX2 4-row int8/int4 kernels, cpu_attention_avx2.c): built in build-avx2/ and run
# through the CPU suites that cover them (about a minute on 2 cores), whatever the machine's own
# flags (-march=native above). CPU-only (CUDA=0): these suites test the CPU. Only the sources
# whose text depends on the instruction set are compiled there (ISA_OBJ_FROM, below): the others'
# objects are build/'s, so these builds run on this machine, not on an AVX2-only one.
# Where $(ARCHFLAGS) already selects exactly that instruction set (an AVX2-only CPU under
# -march=native: the same ISA macros, so the same kernel text), make test ran these kernels and
# suites in $(BUILD): the step says so and is not run twice.
AVX2_SUITES ?= @(cpu_ops|cpu_code|batch_invariance|forward|forward_ref|forward_multi|forward_group|branches|generate_cached|generate|cli|run_entropix|smollm2)/*
AVX2_FLAGS := -mavx2 -mfma -mf16c
VNNI_FLAGS := $(AVX2_FLAGS) -mavxvnni
# The ISA macros the CPU code tests (#if __AVX2__, __AVX512VNNI__, ...) that flags $(1) define.
isa_macros = $(shell $(CC) $(1) -dM -E - </dev/null | grep -oE '__(AVX[A-Z0-9_]*|AMX[A-Z0-9_]*|F16C|FMA)__' | sort | tr '\n' ' ')
# make $(1)'s shell command: the CPU suites built in $(2) with ARCHFLAGS $(3) and run, or the
# SKIP line where $(ARCHFLAGS) defines the same ISA macros as $(3). Its recipe lines start with
# '+': make does not see the $(MAKE) inside a call, and a line it knows recursive passes the jobs on.
isa_suites = m='$(strip $(call isa_macros,$(3)))'; \
	if [ "$(strip $(call isa_macros,$(ARCHFLAGS)))" = "$$m" ]; then \
		echo "SKIP make $(1): $(ARCHFLAGS) defines the same ISA macros as $(3) ($$m), so make test ran these kernels and suites in $(BUILD)"; \
	else $(MAKE) BUILD=$(2) CUDA=0 API_LIBS_FOR_TESTS=0 ISA_OBJ_FROM=$(BUILD) ARCHFLAGS="$(3)" $(2)/run $(2)/tests/tests test-models && \
		$(TEST_OMP_ENV) EMX_SHARED=$(SHARED) EMX_BUILD=$(2) EMX_RUN=$(2)/cpu/run $(2)/tests/tests -j2 --filter '$(AVX2_SUITES)'; fi
.PHONY: test-avx2
test-avx2:
	+@$(call isa_suites,test-avx2,build-avx2,$(AVX2_FLAGS))

# The same suites on AVX2 + AVX-VNNI (Intel client cores from Alder Lake on: 256-bit vpdpbusd,
# no AVX-512), whose 4-row kernels take the VNNI forms; only where this CPU can run them.
.PHONY: test-avx2-vnni
test-avx2-vnni:
	+@if ! grep -qw avx_vnni /proc/cpuinfo; then echo "SKIP make test-avx2-vnni: this CPU has no AVX-VNNI (avx_vnni in /proc/cpuinfo)"; \
	else $(call isa_suites,test-avx2-vnni,build-vnni,$(VNNI_FLAGS)); fi

# On a CPU with AMX the prefill tile runs there (runtime/cpu/cpu_amx.c), and the AVX-512 tile
# that other AVX-512 CPUs run would go untested but for its own kernel tests: the same CPU suites
# again with EMX_AMX=0, only where this CPU has AMX (elsewhere `make test` ran that tile).
.PHONY: test-no-amx
test-no-amx: all $(BUILD)/tests/tests test-models
	@if grep -qw amx_int8 /proc/cpuinfo; then \
		$(TEST_OMP_ENV) EMX_AMX=0 EMX_SHARED=$(SHARED) EMX_BUILD=$(BUILD) EMX_RUN=$(BUILD)/cpu/run $(BUILD)/tests/tests -j2 --filter '$(AVX2_SUITES)'; \
	else echo "SKIP make test-no-amx: this CPU has no AMX, so make test ran the prefill tile EMX_AMX=0 selects"; fi

weights: all
	CONVERT=$(BUILD)/tools/convert bash weights/get-default.sh

# The README's test command: everything CI runs. It renders the --report pages in headless
# chromium (tests/test_report.c; EMX_REQUIRE_BROWSER=1: a missing chromium fails, not skips). The default model is fetched first so the
# SmolLM2 tests run; without network they skip and say why. The real nvcc build of the kernels
# (sm_80, sm_90, warnings as errors) runs when nvcc is installed, and says so when it is not.
# The include graph between folders follows the layers and no file or function outgrows its
# limit (tools/check_layers.py; the allowed offenders are in tools/layer_limits_allow.txt).
check-layers:
	python3 tools/check_layers.py

# Every relative link and #anchor in README.md and docs/*.md resolves inside the repository, and
# README.md stays a front door of at most 12 KB (12,000 bytes) (tools/check_links.py; its self-test first, so a
# checker that stopped catching broken links fails here instead of passing everything).
check-links:
	python3 tools/check_links.py --self-test
	python3 tools/check_links.py

# Builds use every core (CHECK_JOBS, default: nproc): a fresh clone compiles five build folders
# (build, its emulated and nvcc objects, build-avx2, build-asan) and the fuzzers, most of them
# one file at a time otherwise. Tests set their own parallelism (each Criterion run is -j2).
# Each step's start is stamped (`== HH:MM:SS step`, UTC), so a CI log shows where the time goes.
CHECK_JOBS ?= $(NPROC)
stamp = @date -u "+== %T $(1)"
check:
	$(call stamp,build)
	$(MAKE) -j$(CHECK_JOBS) check-layers check-links all
	$(call stamp,weights)
	$(MAKE) weights || echo "make weights failed: the SmolLM2 tests will be skipped"
	$(call stamp,cuda)
	@if [ "$(CUDA)" = 1 ]; then $(MAKE) -j$(CHECK_JOBS) cuda; \
	else echo "SKIP make cuda: CUDA=0$(if $(NVCC_FOUND),, (no nvcc at $(NVCC): install the CUDA toolkit to compile the kernels))"; fi
	$(call stamp,emu-compile-checks)
	$(MAKE) emu-compile-checks
	$(call stamp,test)
	EMX_REQUIRE_BROWSER=1 $(MAKE) -j$(CHECK_JOBS) test
	$(call stamp,test-avx2)
	$(MAKE) -j$(CHECK_JOBS) test-avx2
	$(MAKE) -j$(CHECK_JOBS) test-avx2-vnni
	$(MAKE) -j$(CHECK_JOBS) test-no-amx
	$(call stamp,test-first-run)
	$(MAKE) -j$(CHECK_JOBS) test-first-run
	$(call stamp,fuzz-ci)
	@if command -v "$(FUZZ_CC)" >/dev/null 2>&1; then $(MAKE) fuzz-ci; \
	else echo "SKIP make fuzz-ci: no $(FUZZ_CC) (install clang and libclang-rt-14-dev to fuzz the parsers)"; fi
	$(call stamp,test-asan)
	EMX_REQUIRE_BROWSER=1 $(MAKE) -j$(CHECK_JOBS) test-asan
	$(call stamp,check done)

clean:
	rm -rf build build-asan build-avx2 build-vnni run

-include $(LIB_OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(BUILD)/obj/tests/first_run/test_first_run.d $(BUILD)/obj/runtime/cli/run.d $(patsubst tools/%.c,$(BUILD)/obj/tools/%.d,$(wildcard tools/*.c))

# Tokenizer throughput (encode/decode MB/s on a fixed corpus) beside HF tokenizers when
# `python3 -c "import tokenizers"` works; docs/tokenizer-bench.md. Quick look: TOKBENCH_ARGS="--rounds 1".
TOKBENCH_CORPUS ?= tests/data/tokbench/corpus.txt
TOKBENCH_ARGS ?= --runs 3 --rounds 5
.PHONY: bench-tokenizer
bench-tokenizer: $(BUILD)/tools/tokbench
	$(BUILD)/tools/tokbench $(SHARED)/testdata/tokenizers/qwen3 $(TOKBENCH_CORPUS) $(TOKBENCH_ARGS)
	$(BUILD)/tools/tokbench $(SHARED)/testdata/tokenizers/llama3 $(TOKBENCH_CORPUS) $(TOKBENCH_ARGS)

# Perplexity of each weight type against f32 (the table of docs/quantisation.md).
.PHONY: quality
quality: all
	OMP_WAIT_POLICY=passive tools/quant_quality.sh $(SHARED)/testdata/stories260K/stories260K.bin tests/data/perplexity/tinystory.txt --tokenizer $(SHARED)/testdata/stories260K/tok512.bin
	$(MAKE) weights
	OMP_WAIT_POLICY=passive tools/quant_quality.sh weights/download/SmolLM2-135M-Instruct.Q4_1.gguf tests/data/perplexity/text.txt

# The case-distribution table of docs/entropix.md (generated tokens, classic vs calibrated).
.PHONY: entropix-cases
entropix-cases: all
	$(MAKE) weights
	OMP_WAIT_POLICY=passive tools/entropix_cases.sh weights/smollm2-135m-instruct.q8.bin classic sampler/profiles/smollm2-135m-instruct.profile
