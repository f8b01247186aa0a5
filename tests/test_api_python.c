// test_api_python.c — the Python package (python/, docs/python.md) through its pytest suite,
// run in the venv `make test` builds ($EMX_BUILD/py-venv: numpy, pytest): generation against
// ./run's text and llama2.c's, a Python greedy sampler against the built-in one, numpy views and
// the testdata's logits, errors as exceptions, memory over 1,000 open/close cycles, and
// `pip install ./python` (python/tests/); and device="cuda:0" on the shared library's emulated
// twin. A missing venv is a failure, never a skip.
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run_util.h"
#include "test_util.h"

// The suite's environment: the venv's python into py, the test models, ./run and the shared data.
static void suite_env(char *py, size_t cap) {
    const char *build = getenv("EMX_BUILD") && *getenv("EMX_BUILD") ? getenv("EMX_BUILD") : "build";
    char lib[512], models[512], shared[512], run_abs[1024], cwd[512];
    snprintf(py, cap, "%s/py-venv/bin/python", build);
    cr_assert_eq(access(py, X_OK), 0, "%s missing: make %s/py-venv/.ok installs numpy and pytest", py, build);
    cr_assert(getcwd(cwd, sizeof cwd));
    const char *run_bin = run_binary();
    snprintf(run_abs, sizeof run_abs, "%s%s%s", run_bin[0] == '/' ? "" : cwd, run_bin[0] == '/' ? "" : "/", run_bin);
    snprintf(lib, sizeof lib, "%s/lib/libentropix.so.0", build);
    test_build_path(models, sizeof models, "models");
    test_shared_path(shared, sizeof shared, "");
    setenv("ENTROPIX_LIBRARY", lib, 1);
    setenv("ENTROPIX_BUILD", build, 1);
    setenv("ENTROPIX_TEST_MODELS", models, 1);
    setenv("ENTROPIX_TEST_RUN", run_abs, 1);
    setenv("ENTROPIX_TEST_SHARED", shared, 1);
    setenv("PYTHONPATH", "python", 1);
}

Test(api_python, pytest_suite, .timeout = 900) {
    // A sanitized libentropix.so (make test-asan) cannot be loaded into a python built without
    // ASan; the plain build (make test) runs this suite.
    if (EMX_TEST_SANITIZED) cr_skip_test("sanitized build: the Python suite runs in make test's plain build");
    char py[512];
    suite_env(py, sizeof py);
    const char *args[] = {"-m", "pytest", "-q", "-p", "no:cacheprovider", "python/tests", NULL};
    RunResult r = run_prog(py, args);
    cr_assert_eq(r.code, 0, "pytest failed:\n%s\n%s", r.out, r.err);
    cr_assert(strstr(r.out, " passed") && !strstr(r.out, "failed") && !strstr(r.out, "skipped"), "%s", r.out);
    fprintf(stderr, "api_python: %s", strrchr(r.out, '\n') ? r.out : r.out);
    run_free(&r);
}

// device="cuda:0" from Python on the shared library's emulated twin ($(EMU_OUT)/lib, api/api.mk):
// the CPU's text (python/tests/test_entropix.py's cuda test, told that cuda:0 must run). The twin is
// built with ASan, so python runs with the compiler's libasan preloaded (leak checks off: the
// interpreter keeps memory to its exit).
Test(api_python, cuda_on_the_emulated_shared_library, .timeout = 900) {
    if (EMX_TEST_SANITIZED) cr_skip_test("sanitized build: the Python suite runs in make test's plain build");
    const char *gpu_run = gpu_run_binary();
    char so[1024], py[512];
    snprintf(so, sizeof so, "%.*s/lib/libentropix.so.0", (int)(strrchr(gpu_run, '/') ? strrchr(gpu_run, '/') - gpu_run : 1),
             strrchr(gpu_run, '/') ? gpu_run : ".");
    if (access(so, R_OK) != 0) cr_skip_test("%s missing (make %s builds it beside the emulated ./run)", so, so);
    suite_env(py, sizeof py);
    const char *cc_args[] = {"-print-file-name=libasan.so", NULL};
    RunResult cc = run_prog(getenv("CC") && *getenv("CC") ? getenv("CC") : "/usr/bin/gcc", cc_args);
    cr_assert_eq(cc.code, 0, "%s", cc.err);
    cc.out[strcspn(cc.out, "\n")] = 0;
    cr_assert_eq(access(cc.out, R_OK), 0, "libasan: %s", cc.out);
    setenv("LD_PRELOAD", cc.out, 1);
    setenv("ASAN_OPTIONS", "detect_leaks=0", 1);
    setenv("ENTROPIX_LIBRARY", so, 1);
    setenv("ENTROPIX_TEST_CUDA", "1", 1);
    const char *args[] = {"-m", "pytest", "-q", "-p", "no:cacheprovider", "python/tests/test_entropix.py", "-k",
                          "cuda_device", NULL};
    RunResult r = run_prog(py, args);
    unsetenv("LD_PRELOAD");
    cr_assert_eq(r.code, 0, "pytest failed:\n%s\n%s", r.out, r.err);
    cr_assert(strstr(r.out, "1 passed"), "%s", r.out);
    fprintf(stderr, "api_python on emulated cuda:0: %s", r.out);
    run_free(&r);
    run_free(&cc);
}
