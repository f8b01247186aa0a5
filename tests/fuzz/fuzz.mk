# libFuzzer harnesses of every parser (tests/fuzz/README.md). Included from the top Makefile;
# not part of `make all`. Built with clang into $(BUILD)/fuzz/ (its own objects: the library
# sources compiled again with clang, coverage instrumentation and ASan + UBSan).
#
#   make fuzz                 each target for FUZZ_SECONDS (60), FUZZ_JOBS targets at a time (1)
#   make fuzz-ci              the fixed budget `make check` runs: 40 s each, 2 at a time (~5 min)
#   make fuzz-model ...       one target; fuzz-build builds them all without running
#
# Each run first replays tests/fuzz/regressions/<target>/*, then fuzzes from the committed
# corpus tests/fuzz/corpus/<target>/ (read-only: what the run finds goes to
# $(BUILD)/fuzz/work/<target>/). A crash, leak, timeout (FUZZ_TIMEOUT s for one input) or
# out-of-memory (FUZZ_RSS_MB) fails the target and the make; the input is left in
# $(BUILD)/fuzz/artifacts/<target>/ and the log in $(BUILD)/fuzz/logs/<target>.log.
#
# A new target: tests/fuzz/fuzz_<name>.c (LLVMFuzzerTestOneInput), a seed or two in
# tests/fuzz/corpus/<name>/, and <name> added to FUZZ_TARGETS below.

FUZZ_TARGETS := model gguf hf tokjson roundtrip profile chat cli server http evaltasks gbnf jsonschema

FUZZ_CC ?= clang
FUZZ_SECONDS ?= 60
FUZZ_JOBS ?= 1
FUZZ_TIMEOUT ?= 10
FUZZ_RSS_MB ?= 2048
FUZZ_ARGS ?=
FUZZ_BUILD := $(BUILD)/fuzz
FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_CFLAGS := -std=c11 -D_DEFAULT_SOURCE -Wall -Wextra -Werror -O1 -g -fno-omit-frame-pointer $(ARCHFLAGS) \
               -fopenmp $(FUZZ_SAN) -I.
# The library less what no harness links (the benchmark, the evaluator but its task reader, the
# reference forward pass): a fifth of the sources, not compiled for the fuzzers. A harness that
# comes to need one fails to link, naming the symbol.
FUZZ_UNREACHED_SRC := $(filter-out tools/eval/tasks.c,$(filter tools/bench/% tools/eval/%,$(LIB_SRC))) \
                      runtime/reference/forward_ref.c
FUZZ_LIB_OBJ := $(patsubst %.c,$(FUZZ_BUILD)/obj/%.o,$(filter-out $(FUZZ_UNREACHED_SRC),$(LIB_SRC))) \
                $(FUZZ_BUILD)/obj/tools/convert_main.o
FUZZ_BINS := $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/fuzz_%)
# An impossible allocation (more than the address space) returns NULL as the C library's would,
# so the code's own NULL check is what is tested; anything over FUZZ_RSS_MB still fails the run.
FUZZ_ENV := FUZZ_MODELS=$(TEST_MODEL_DIR) ASAN_OPTIONS=allocator_may_return_null=1
# Dictionaries (libFuzzer -dict): tokens the mutator splices in.
FUZZ_DICT_gguf := tests/fuzz/dict/gguf.dict
FUZZ_DICT_hf := tests/fuzz/dict/json.dict
FUZZ_DICT_tokjson := tests/fuzz/dict/json.dict
FUZZ_DICT_profile := tests/fuzz/dict/profile.dict
FUZZ_DICT_cli := tests/fuzz/dict/cli.dict
FUZZ_DICT_chat := tests/fuzz/dict/chat.dict
FUZZ_DICT_server := tests/fuzz/dict/json.dict
FUZZ_DICT_http := tests/fuzz/dict/http.dict
FUZZ_DICT_evaltasks := tests/fuzz/dict/json.dict
FUZZ_DICT_gbnf := tests/fuzz/dict/gbnf.dict
FUZZ_DICT_jsonschema := tests/fuzz/dict/jsonschema.dict
# The round trip reads real vocabularies from the converted test models; the HTTP server serves one.
FUZZ_NEEDS_roundtrip := $(TEST_MODEL_DIR)/qwen3-tiny.f32.bin $(TEST_MODEL_DIR)/stories260K.f32.bin
FUZZ_NEEDS_http := $(TEST_MODEL_DIR)/stories260K.f32.bin
# Libraries of one target beyond LDLIBS (the server is the one program that links libmicrohttpd).
FUZZ_LIBS_http := -lmicrohttpd

.PHONY: fuzz fuzz-ci fuzz-build $(FUZZ_TARGETS:%=fuzz-%)

# The SIMD kernels at -O0, every sanitizer kept: clang's ASan at -O1 on their always-inlined,
# unrolled loops takes minutes a file (clang 14, ASan + UBSan, a 2-core EPYC, 2026-12-02: the
# AVX-512 attention 227 s, the AVX2 one 184 s, the AVX-512 prefill tile 80 s, the AVX2 tile 12 s;
# at -O0 1-3 s), the whole fuzz build's longest step, for kernels the harnesses run only on tiny
# test models.
FUZZ_O0_SRC := runtime/cpu/cpu_attention.c runtime/cpu/cpu_attention_avx2.c runtime/cpu/cpu_qtile512.c \
               runtime/cpu/cpu_qtile.c

$(FUZZ_BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(if $(filter $<,$(FUZZ_O0_SRC)),-O0) -MMD -MP -fsanitize=fuzzer-no-link -c $< -o $@

# The converter's main, callable from a harness (the GGUF and HuggingFace targets run the
# whole conversion, exactly as the command does).
$(FUZZ_BUILD)/obj/tools/convert_main.o: tools/convert.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -MMD -MP -fsanitize=fuzzer-no-link -Dmain=emx_convert_main -c $< -o $@

$(FUZZ_BUILD)/libentropix_fuzz.a: $(FUZZ_LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(FUZZ_BUILD)/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz_util.h $(FUZZ_BUILD)/libentropix_fuzz.a
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer $< $(FUZZ_BUILD)/libentropix_fuzz.a -o $@ $(LDLIBS) $(FUZZ_LIBS_$*)

fuzz-build: $(FUZZ_BINS)

# One target: replay its regression inputs, then fuzz. The summary line (executions, exec/s,
# coverage) comes from libFuzzer's final statistics.
fuzz-roundtrip: $(FUZZ_NEEDS_roundtrip)
fuzz-http: $(FUZZ_NEEDS_http)
$(FUZZ_TARGETS:%=fuzz-%): fuzz-%: $(FUZZ_BUILD)/fuzz_%
	@mkdir -p $(FUZZ_BUILD)/logs $(FUZZ_BUILD)/artifacts/$* && rm -rf $(FUZZ_BUILD)/work/$* && mkdir -p $(FUZZ_BUILD)/work/$*
	@set -o pipefail; regs=$$(find tests/fuzz/regressions/$* -type f 2>/dev/null | sort); \
	if [ -n "$$regs" ]; then \
		$(FUZZ_ENV) $< -timeout=$(FUZZ_TIMEOUT) -rss_limit_mb=$(FUZZ_RSS_MB) $$regs \
			> $(FUZZ_BUILD)/logs/$*.regressions.log 2>&1 </dev/null || { tail -n 60 $(FUZZ_BUILD)/logs/$*.regressions.log; \
			echo "fuzz-$*: a regression input fails (log: $(FUZZ_BUILD)/logs/$*.regressions.log)"; exit 1; }; \
		echo "fuzz-$*: $$(echo $$regs | wc -w) regression inputs pass"; fi
	@echo "fuzz-$*: fuzzing for $(FUZZ_SECONDS) s (log: $(FUZZ_BUILD)/logs/$*.log)"
	@$(FUZZ_ENV) $< -max_total_time=$(FUZZ_SECONDS) -timeout=$(FUZZ_TIMEOUT) \
		-rss_limit_mb=$(FUZZ_RSS_MB) -print_final_stats=1 $(if $(FUZZ_DICT_$*),-dict=$(FUZZ_DICT_$*)) \
		-artifact_prefix=$(FUZZ_BUILD)/artifacts/$*/ $(FUZZ_ARGS) $(FUZZ_BUILD)/work/$* tests/fuzz/corpus/$* \
		> $(FUZZ_BUILD)/logs/$*.log 2>&1 </dev/null || { tail -n 60 $(FUZZ_BUILD)/logs/$*.log; \
		echo "fuzz-$*: FAILED; the input is in $(FUZZ_BUILD)/artifacts/$*/ (tests/fuzz/README.md: what to do)"; exit 1; }
	@awk '/stat::number_of_executed_units/ {n=$$2} /stat::average_exec_per_sec/ {s=$$2} \
		/^#[0-9]+[ \t]+(DONE|pulse|NEW|REDUCE|INITED)/ {for (i=1;i<=NF;i++) {if ($$i=="cov:") c=$$(i+1); if ($$i=="ft:") f=$$(i+1)}} \
		END {printf "fuzz-$*: ok: %s executions, %s exec/s, cov %s, ft %s, 0 crashes\n", n, s, c, f}' $(FUZZ_BUILD)/logs/$*.log

fuzz:
	$(MAKE) -j$(FUZZ_JOBS) $(FUZZ_TARGETS:%=fuzz-%)

# CI's budget: 13 targets x 40 s, two at a time (~5 minutes of fuzzing on 2 cores).
fuzz-ci:
	$(MAKE) -j2 fuzz-build $(FUZZ_NEEDS_roundtrip) $(FUZZ_NEEDS_http)
	$(MAKE) fuzz FUZZ_SECONDS=40 FUZZ_JOBS=2

-include $(FUZZ_LIB_OBJ:.o=.d)
