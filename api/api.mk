# api/api.mk — the public C API (include/entropix.h, api/*.c) as libraries, and `make install`.
# Included from the Makefile after its library rules; docs/c-api.md says how to use what it builds,
# docs/python.md the Python package (python/) over it.
#
#   $(BUILD)/lib/libentropix.so.0.1.0  the shared library (SONAME libentropix.so.0), with the
#                                      symlinks libentropix.so.0 and libentropix.so beside it
#   $(BUILD)/lib/libentropix.a         the public static library: the API and the runtime it needs
#   make install PREFIX=/usr/local DESTDIR=   both, the header, entropix.pc and the programs
#   make uninstall PREFIX=... DESTDIR=        removes exactly what install wrote
#
# Both public libraries are built from position-independent objects of their own ($(BUILD)/pic/,
# -fPIC -fvisibility=hidden: only the ENTROPIX_API functions are visible, and the version script
# api/entropix.map exports entropix_* alone). The internal $(BUILD)/libentropix.a (every program's
# library, not installed) gets the API's objects too, so that the C suite tests the API through it.
# The public archive holds the runtime's objects as well (a static link needs them): it is named
# as the shared library is, in $(BUILD)/lib/, so it does not clash with the internal one.

API_VERSION := 0.1.0
API_SRC := $(wildcard api/*.c)
API_OBJ := $(API_SRC:%.c=$(BUILD)/obj/%.o)
# The runtime the API calls: the library without the programs' own folders.
API_RUNTIME_SRC := $(filter-out tools/%,$(LIB_SRC))
PIC_API_OBJ := $(API_SRC:%.c=$(BUILD)/pic/%.o)
PIC_RUNTIME_OBJ := $(API_RUNTIME_SRC:%.c=$(BUILD)/pic/%.o)
API_LIB_DIR := $(BUILD)/lib
API_SO := $(API_LIB_DIR)/libentropix.so.$(API_VERSION)
API_SO_LINKS := $(API_LIB_DIR)/libentropix.so.0 $(API_LIB_DIR)/libentropix.so
API_STATIC := $(API_LIB_DIR)/libentropix.a
API_LIBS_PRIVATE := -lm -lcjson -lpcre2-8 -lutf8proc -lpthread -lgomp
# A sanitized build's objects (make test-asan's OPT) need the sanitizers' runtimes at the link too.
API_SAN_FLAGS := $(filter -fsanitize% -fno-sanitize%,$(OPT))

.PHONY: lib install uninstall
lib: $(API_SO) $(API_SO_LINKS) $(API_STATIC)

$(BUILD)/libentropix.a: $(API_OBJ)
# The C suite's install test (api_generate) links programs against the public libraries. The
# AVX2 builds (make test-avx2, test-avx2-vnni) run only the CPU suites and set this to 0, so they
# do not compile the runtime a second time as position-independent objects.
API_LIBS_FOR_TESTS ?= 1
ifeq ($(API_LIBS_FOR_TESTS),1)
$(BUILD)/tests/tests: | $(API_SO) $(API_SO_LINKS) $(API_STATIC)
endif

$(BUILD)/pic/%.o: %.c
	@mkdir -p $(dir $@)
	$(call say,CC,$<)$(CC) $(CFLAGS) -fPIC -fvisibility=hidden -c $< -o $@
$(BUILD)/pic/runtime/report/report_template.o: runtime/report/report_template.html

# The runtime's objects as an archive, so the shared library takes only the members it calls.
$(BUILD)/pic/libruntime.a: $(PIC_RUNTIME_OBJ)
	@rm -f $@
	$(call say,AR,$@)ar rcs $@ $^

# With CUDA=1 the shared library carries the CUDA backend as ./run does (kernels/kernels.mk): the
# backend's host objects, given as objects since the runtime reaches them through weak symbols
# (which never pull a member out of an archive), the nvcc-built kernels and the CUDA libraries,
# found through the run path as the programs find them. All of them are position-independent
# (NVCC_PIC, and -fPIC for the host objects). The public libentropix.a stays CPU-only.
API_SO_CUDA := $(if $(filter 1,$(CUDA)),$(CUDA_LINK_OBJ) $(BUILD)/cuda/libentropix_cuda.a)
API_SO_CUDA_LIBS := $(if $(filter 1,$(CUDA)),$(CUDA_LDLIBS))

$(API_SO): $(PIC_API_OBJ) $(BUILD)/pic/libruntime.a $(API_SO_CUDA) api/entropix.map $(BUILD)/backend.cfg
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) -shared -fopenmp $(API_SAN_FLAGS) -Wl,-soname,libentropix.so.0 -Wl,--version-script=api/entropix.map -Wl,--no-undefined \
		-o $@ $(PIC_API_OBJ) $(API_SO_CUDA) $(BUILD)/pic/libruntime.a $(API_SO_CUDA_LIBS) $(API_LIBS_PRIVATE)

$(API_LIB_DIR)/libentropix.so.0: $(API_SO)
	ln -sf libentropix.so.$(API_VERSION) $@
$(API_LIB_DIR)/libentropix.so: $(API_LIB_DIR)/libentropix.so.0
	ln -sf libentropix.so.0 $@

$(API_STATIC): $(PIC_API_OBJ) $(PIC_RUNTIME_OBJ)
	@mkdir -p $(dir $@)
	@rm -f $@
	$(call say,AR,$@)ar rcs $@ $^

# ---- install ---------------------------------------------------------------------------------
# The programs go in as entropix-<name> (entropix-run, entropix-server, ...): `run` and `eval`
# alone would shadow other programs of those names in PREFIX/bin.
PREFIX ?= /usr/local
DESTDIR ?=
INSTALL_BIN := $(DESTDIR)$(PREFIX)/bin
INSTALL_LIB := $(DESTDIR)$(PREFIX)/lib
INSTALL_INC := $(DESTDIR)$(PREFIX)/include
INSTALL_PC := $(INSTALL_LIB)/pkgconfig
INSTALL_PROGS := run tools/server tools/eval tools/convert tools/bench

install: all lib
	install -d $(INSTALL_BIN) $(INSTALL_LIB) $(INSTALL_INC) $(INSTALL_PC)
	install -m 644 include/entropix.h $(INSTALL_INC)/entropix.h
	install -m 755 $(API_SO) $(INSTALL_LIB)/libentropix.so.$(API_VERSION)
	ln -sf libentropix.so.$(API_VERSION) $(INSTALL_LIB)/libentropix.so.0
	ln -sf libentropix.so.0 $(INSTALL_LIB)/libentropix.so
	install -m 644 $(API_STATIC) $(INSTALL_LIB)/libentropix.a
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(API_VERSION)|' -e 's|@LIBS_PRIVATE@|$(API_LIBS_PRIVATE)|' \
		api/entropix.pc.in > $(INSTALL_PC)/entropix.pc
	$(foreach p,$(INSTALL_PROGS),install -m 755 $(BUILD)/$(p) $(INSTALL_BIN)/entropix-$(notdir $(p)) &&) true

uninstall:
	rm -f $(INSTALL_INC)/entropix.h $(INSTALL_LIB)/libentropix.so.$(API_VERSION) $(INSTALL_LIB)/libentropix.so.0 \
		$(INSTALL_LIB)/libentropix.so $(INSTALL_LIB)/libentropix.a $(INSTALL_PC)/entropix.pc \
		$(foreach p,$(INSTALL_PROGS),$(INSTALL_BIN)/entropix-$(notdir $(p)))

# the internal library's API objects too (build/obj/api): a changed runtime header rebuilds them
-include $(PIC_API_OBJ:.o=.d) $(PIC_RUNTIME_OBJ:.o=.d) $(API_OBJ:.o=.d)

# ---- the Python package (python/, docs/python.md) ----------------------------------------------
# numpy (its one dependency), pytest for its suite (tests/test_api_python.c runs it), wheel for
# the suite's `pip install --no-build-isolation ./python`, matplotlib for the example the suite
# runs (python/examples/plot_entropy.py), in a venv as the server's tests have; remade when
# these pins change.
PY_VENV := $(BUILD)/py-venv/.ok
$(PY_VENV): api/api.mk
	rm -rf $(BUILD)/py-venv
	python3 -m venv $(BUILD)/py-venv
	$(BUILD)/py-venv/bin/pip install -q numpy==2.4.6 pytest==9.2.0 wheel==0.45.1 matplotlib==3.11.2
	touch $@
.PHONY: py-venv
py-venv: $(PY_VENV)
test: $(PY_VENV)

# ---- the API on the CUDA backend, under the emulation layer (tests/cuda_emu/emu.mk) ------------
# examples/c/generate.c linked statically with the API and the emulated CUDA backend, as the
# emulated ./run is: tests/test_api_generate.c runs it with -dev cuda:0 beside $(EMU_RUN_BIN).
ifneq ($(EMU_RUN_BIN),)
EMU_API_BIN := $(EMU_OUT)/api/generate
EMU_API_OBJ := $(call EMU_C_OBJ_OF,$(API_SRC) examples/c/generate.c)
$(call EMU_C_OBJ_OF,examples/c/generate.c): CFLAGS += -Iinclude
$(EMU_API_OBJ): $(EMU_OUT)/obj/%.o: %.c $(EMU_FLAGS_CFG)
	@mkdir -p $(dir $@)
	$(call say,CC,$@)$(CC) $(EMU_CFLAGS) $(EMU_DEBUG) $(EMU_SAN) $(EMU_PIC) -c $< -o $@
$(EMU_API_BIN): $(EMU_API_OBJ) $(EMU_HOST_C_OBJ) $(EMU_RUNTIME_OBJ) $(EMU_LAYER_OBJ) $(EMU_KERNEL_OBJ) $(EMU_LIB)
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(EMU_CXX) $(EMU_CXXFLAGS) $(filter %.o,$^) -o $@ $(EMU_LIB) $(LDLIBS)
test: $(EMU_API_BIN)

# The shared library's emulated twin: the API, the runtime and the CUDA backend on the emulation
# layer as one libentropix.so.0 (the version script of the real one; ASan and UBSan as every
# emulated object, so a program that loads it is built with them too), and examples/c/generate.c
# linked against it (found through its run path): tests/test_api_generate.c runs it with
# -dev cuda:0 against the CPU ./run's text.
EMU_API_SO := $(EMU_OUT)/lib/libentropix.so.0
EMU_API_SO_BIN := $(EMU_OUT)/api/generate_shared
$(EMU_API_SO): $(call EMU_C_OBJ_OF,$(API_SRC)) $(EMU_HOST_C_OBJ) $(EMU_RUNTIME_OBJ) $(EMU_LAYER_OBJ) $(EMU_KERNEL_OBJ) \
               $(EMU_LIB) api/entropix.map
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(EMU_CXX) -shared $(EMU_CXXFLAGS) -fopenmp -Wl,-soname,libentropix.so.0 \
		-Wl,--version-script=api/entropix.map -Wl,--no-undefined -o $@ $(filter %.o,$^) $(EMU_LIB) $(LDLIBS)
$(EMU_API_SO_BIN): $(call EMU_C_OBJ_OF,examples/c/generate.c) $(EMU_API_SO)
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(EMU_CXX) $(EMU_CXXFLAGS) $< -o $@ $(EMU_API_SO) -Wl,-rpath,'$$ORIGIN/../lib'
test: $(EMU_API_SO_BIN)
-include $(EMU_API_OBJ:.o=.d)
endif
