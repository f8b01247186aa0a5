# kernels/bench.mk — `make bench-kernels`: times every kernel family (tools/bench_kernels/bench_kernels.cu)
# at SmolLM2-135M and Qwen3-0.6B shapes and prints time, bytes, GB/s and the fraction of the GPU's
# peak memory bandwidth. Needs nvcc and a GPU. `make bench-kernels-emu` builds the same program
# through the CPU emulation layer (tests/cuda_emu) with reduced sizes: it proves the launch paths
# run; its timings are emulation timings, not GPU timings (the program prints that).
# Included by the top Makefile after kernels/kernels.mk (NVCCFLAGS and CUDA_ARCHS come from there, NVCC from the top Makefile).
BENCH_KERNELS_ARGS ?=
BENCH_KERNELS_BIN := $(BUILD)/cuda/bench_kernels

.PHONY: bench-kernels bench-kernels-emu
bench-kernels: $(BENCH_KERNELS_BIN)
	$(BENCH_KERNELS_BIN) $(BENCH_KERNELS_ARGS)

$(BUILD)/cuda/tools/bench_kernels/bench_kernels.o: tools/bench_kernels/bench_kernels.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@

# libentropix.a is built with -fopenmp: nvcc links it with libgomp rather than the flag
$(BENCH_KERNELS_BIN): $(BUILD)/cuda/tools/bench_kernels/bench_kernels.o $(BUILD)/cuda/libentropix_cuda.a $(BUILD)/libentropix.a
	$(NVCC) $(CUDA_ARCHS) $^ -o $@ -lcublas -lnccl -lgomp $(filter-out -fopenmp,$(LDLIBS))

-include $(BUILD)/cuda/tools/bench_kernels/bench_kernels.d

# The emulated build. The top Makefile includes this file before tests/cuda_emu/emu.mk, so the
# emulator's variables are not set yet when these rules are read: secondary expansion ($$) reads
# them when the prerequisites are needed.
BENCH_KERNELS_EMU_BIN := $(BUILD)/emu/bench_kernels
.SECONDEXPANSION:
bench-kernels-emu: $(BENCH_KERNELS_EMU_BIN)
	$(BENCH_KERNELS_EMU_BIN) --emu $(BENCH_KERNELS_ARGS)

$(BUILD)/emu/tools/bench_kernels/%.cu: tools/bench_kernels/%.cu tests/cuda_emu/rewrite.py
	@mkdir -p $(dir $@)
	python3 tests/cuda_emu/rewrite.py $< $@

$(BUILD)/emu/obj/tools/bench_kernels/bench_kernels.o: $(BUILD)/emu/tools/bench_kernels/bench_kernels.cu $$(EMU_KERNEL_HDR)
	@mkdir -p $(dir $@)
	$(EMU_CXX) $(EMU_CXXFLAGS) -DEMX_BENCH_EMULATED $(EMU_INC) $(EMU_FORCE) -x c++ -c $< -o $@

$(BENCH_KERNELS_EMU_BIN): $(BUILD)/emu/obj/tools/bench_kernels/bench_kernels.o $$(EMU_LAYER_OBJ) $$(EMU_KERNEL_OBJ) $(BUILD)/libentropix.a
	$(EMU_CXX) $(EMU_CXXFLAGS) $(filter %.o,$^) -o $@ $(BUILD)/libentropix.a $(LDLIBS)

# The kernel tests (tests/kernels/test_*.cpp, plain C++ over the CUDA runtime API) built against the
# real CUDA runtime and the nvcc-built kernels instead of the emulator: `make test-kernels-gpu` on a
# machine with a GPU runs the same comparisons with the CPU twins on the device. (Here, in this file,
# because it shares the nvcc build; the design's `make test-gpu` can call it.)
KERNEL_TEST_GPU_OBJ := $(patsubst %.cpp,$(BUILD)/cuda/obj/%.o,$(wildcard tests/kernels/test_*.cpp))
KERNEL_TEST_GPU_BIN := $(BUILD)/cuda/kernel_tests

.PHONY: test-kernels-gpu
test-kernels-gpu: $(KERNEL_TEST_GPU_BIN)
	EMX_SHARED=$(SHARED) EMX_BUILD=$(BUILD) $(KERNEL_TEST_GPU_BIN) $(TEST_ARGS)

$(BUILD)/cuda/obj/tests/kernels/%.o: tests/kernels/%.cpp
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 $(OPT) -g -Wall -Wextra -Werror -I$(CUDA_HOME)/include -I. -MMD -MP -c $< -o $@

$(KERNEL_TEST_GPU_BIN): $(KERNEL_TEST_GPU_OBJ) $(CUDA_LINK_OBJ) $(BUILD)/cuda/libentropix_cuda.a $(BUILD)/libentropix.a
	$(CXX) $^ -o $@ -L$(CUDA_HOME)/lib64 -lcudart -lcublas -lnccl -lcriterion $(LDLIBS)

-include $(KERNEL_TEST_GPU_OBJ:.o=.d)
