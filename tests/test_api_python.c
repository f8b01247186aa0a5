// test_api_python.c — the Python package (python/, docs/python.md) through its pytest suite,
// run in the venv `make test` builds ($EMX_BUILD/py-venv: numpy, pytest): generation against
// ./run's text and llama2.c's, a Python greedy sampler against the built-in one, numpy views and
// the testdata's logits, errors as exceptions, memory over 1,000 open/close cycles, and
// `pip install ./python` (python/tests/). A missing venv is a failure, never a skip.
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run_util.h"
#include "test_util.h"

Test(api_python, pytest_suite, .timeout = 900) {
    // A sanitized libentropix.so (make test-asan) cannot be loaded into a python built without
    // ASan; the plain build (make test) runs this suite.
    if (EMX_TEST_SANITIZED) cr_skip_test("sanitized build: the Python suite runs in make test's plain build");
    const char *build = getenv("EMX_BUILD") && *getenv("EMX_BUILD") ? getenv("EMX_BUILD") : "build";
    char py[512], lib[512], models[512], shared[512], run_abs[1024], cwd[512];
    snprintf(py, sizeof py, "%s/py-venv/bin/python", build);
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
    const char *args[] = {"-m", "pytest", "-q", "-p", "no:cacheprovider", "python/tests", NULL};
    RunResult r = run_prog(py, args);
    cr_assert_eq(r.code, 0, "pytest failed:\n%s\n%s", r.out, r.err);
    cr_assert(strstr(r.out, " passed") && !strstr(r.out, "failed") && !strstr(r.out, "skipped"), "%s", r.out);
    fprintf(stderr, "api_python: %s", strrchr(r.out, '\n') ? r.out : r.out);
    run_free(&r);
}
