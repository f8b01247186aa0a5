# Test models: each converted from $(SHARED)/testdata by our converter into $(BUILD)/models/.
# `test-models` is the list the tests need (the Makefile's `test` depends on it). Each
# conversion's log (per-tensor dtypes and quantisation errors) lands next to it as <model>.log.
#
#   stories260K.{f32,q8}.bin            llama2.c checkpoint + tok512.bin
#   stories260K.gguf.{f32,q8}.bin       llama.cpp's GGUF of the same model
#   {qwen3,llama3}-tiny.{f32,bf16,q8,q4,q4_1,q4_1f}.bin   from hf/ (safetensors)
#   {qwen3,llama3}-tiny.gguf.f32.bin    from the .bf16.gguf / .f16.gguf
#   hf/{qwen2.5,gemma3}-tiny/           HF directories made by tools/make_tiny_hf.py (random
#                                       weights, real vocabulary sizes; a few seconds each)
#   hf/gemma3-{270m,1b}-shape/          the same at Gemma 3 270M's / 1B's widths, 2 layers (358 /
#                                       712 MB; not in test-models: `make tiny-hf-shapes`)

CONVERT ?= $(BUILD)/tools/convert
TEST_MODEL_DIR := $(BUILD)/models
TESTDATA := $(SHARED)/testdata

TEST_MODELS := \
	$(foreach d,f32 q8,$(TEST_MODEL_DIR)/stories260K.$(d).bin $(TEST_MODEL_DIR)/stories260K.gguf.$(d).bin) $(TEST_MODEL_DIR)/stories260K.q4.bin \
	$(foreach m,qwen3-tiny llama3-tiny,$(foreach d,f32 bf16 q8 q4 q4_1 q4_1f,$(TEST_MODEL_DIR)/$(m).$(d).bin) \
	  $(TEST_MODEL_DIR)/$(m).gguf.f32.bin)

TINY_HF_DIR := $(TEST_MODEL_DIR)/hf
TINY_HF_MODELS := $(foreach m,qwen2.5-tiny gemma3-tiny,$(TINY_HF_DIR)/$(m)/model.safetensors)
TINY_HF_SHAPES := $(foreach m,gemma3-270m-shape gemma3-1b-shape,$(TINY_HF_DIR)/$(m)/model.safetensors)
TEST_MODELS += $(TINY_HF_MODELS)

test-models: $(TEST_MODELS)
tiny-hf-shapes: $(TINY_HF_SHAPES)

# config.json, tokenizer files and the weights in one run; model.safetensors is written last
# (renamed into place), so it stands for the whole directory.
# --check: the files must be the bytes tests/data/hf/<name>/reference.json was computed from.
$(TINY_HF_DIR)/%/model.safetensors: tools/make_tiny_hf.py tests/data/hf/gemma3-tokenizer/tokenizer.json \
		tests/data/hf/%/reference.json \
		tests/data/chat_templates/gemma3.jinja tests/data/chat_templates/qwen2.5.jinja
	@mkdir -p $(@D); echo "make_tiny_hf $*"
	@python3 tools/make_tiny_hf.py --shape $* -o $(@D) --qwen-tokenizer-dir $(TESTDATA)/tokenizers/qwen3 \
		--check tests/data/hf/$*/reference.json > $(@D).log 2>&1 \
		|| { cat $(@D).log; rm -f $@; exit 1; }

# Run the converter with its log in <out>.log; show the log only when it fails.
convert_model = @mkdir -p $(@D); echo "convert $@"; \
	$(CONVERT) $(1) $@ $(2) > $@.log 2>&1 || { cat $@.log; exit 1; }

# (GNU make prefers the pattern with the shortest stem, so *.gguf.%.bin wins over *.%.bin.)
$(TEST_MODEL_DIR)/stories260K.%.bin: $(TESTDATA)/stories260K/stories260K.bin $(TESTDATA)/stories260K/tok512.bin $(CONVERT)
	$(call convert_model,$<,--dtype $* --tokenizer $(TESTDATA)/stories260K/tok512.bin)

$(TEST_MODEL_DIR)/stories260K.gguf.%.bin: $(TESTDATA)/stories260K/stories260K.gguf $(CONVERT)
	$(call convert_model,$<,--dtype $*)

$(TEST_MODEL_DIR)/qwen3-tiny.%.bin: $(TESTDATA)/tiny/qwen3-tiny/hf/model.safetensors $(CONVERT)
	$(call convert_model,$(TESTDATA)/tiny/qwen3-tiny/hf,--dtype $*)

$(TEST_MODEL_DIR)/qwen3-tiny.gguf.%.bin: $(TESTDATA)/tiny/qwen3-tiny/qwen3-tiny.bf16.gguf $(CONVERT)
	$(call convert_model,$<,--dtype $*)

$(TEST_MODEL_DIR)/llama3-tiny.%.bin: $(TESTDATA)/tiny/llama3-tiny/hf/model.safetensors $(CONVERT)
	$(call convert_model,$(TESTDATA)/tiny/llama3-tiny/hf,--dtype $*)

$(TEST_MODEL_DIR)/llama3-tiny.gguf.%.bin: $(TESTDATA)/tiny/llama3-tiny/llama3-tiny.f16.gguf $(CONVERT)
	$(call convert_model,$<,--dtype $*)
.PHONY: tiny-hf-shapes

# Qwen2 and Gemma 3 (model file version 2), converted from the make_tiny_hf.py directories:
#   {qwen2.5,gemma3}-tiny.{f32,bf16,q8,q4}.bin
ARCH_TINY := $(foreach m,qwen2.5-tiny gemma3-tiny,$(foreach d,f32 bf16 q8 q4,$(TEST_MODEL_DIR)/$(m).$(d).bin))
TEST_MODELS += $(ARCH_TINY)
test-models: $(ARCH_TINY)

$(TEST_MODEL_DIR)/qwen2.5-tiny.%.bin: $(TINY_HF_DIR)/qwen2.5-tiny/model.safetensors $(CONVERT)
	$(call convert_model,$(TINY_HF_DIR)/qwen2.5-tiny,--dtype $*)

$(TEST_MODEL_DIR)/gemma3-tiny.%.bin: $(TINY_HF_DIR)/gemma3-tiny/model.safetensors $(CONVERT)
	$(call convert_model,$(TINY_HF_DIR)/gemma3-tiny,--dtype $*)
