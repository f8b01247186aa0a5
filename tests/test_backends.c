// test_backends.c — the binaries `make` builds and which backends each has. The programs that
// run a model on a --device are built twice (Makefile, DEVICE_PROGS): CPU-only in
// $EMX_BUILD/cpu/, and as users run them, $EMX_BUILD/{run,tools/*}: with the CUDA backend when
// nvcc was found (CUDA=1), CPU-only otherwise. `make test` passes the backends the build should
// have ($EMX_BACKENDS, from the Makefile's own CUDA and CUDA_ARCHS).
//
// On a machine without a GPU (CI's, this one): the CUDA build runs --device auto on the CPU,
// with the CPU build's text byte for byte, and refuses --device cuda:0 in one line.
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run_util.h"
#include "test_util.h"

static const char *const PROGS[] = {"run", "tools/bench", "tools/eval", "tools/server"};

// $EMX_BUILD/<dir><prog> --version: exit 0, one line on stdout, nothing on stderr; returns the
// backends it names (the text inside "(backends: ...)"), malloc'd.
static char *backends_of(const char *dir, const char *prog) {
    char rel[128], bin[512];
    snprintf(rel, sizeof rel, "%s%s", dir, prog);
    test_build_path(bin, sizeof bin, rel);
    cr_assert(access(bin, X_OK) == 0, "%s is not built (make all)", bin);
    RunResult r = run_prog(bin, (const char *const[]){"--version", NULL});
    cr_assert_eq(r.code, 0, "%s --version: exit %d (%s)", bin, r.code, r.err);
    cr_assert_eq(count_lines(r.out), 1, "%s --version: [%s]", bin, r.out);
    cr_assert_eq(r.err[0], 0, "%s --version wrote to stderr: [%s]", bin, r.err);
    const char *name = strrchr(prog, '/') ? strrchr(prog, '/') + 1 : prog;
    char head[64];
    snprintf(head, sizeof head, "entropix.c %s ", name);
    cr_assert(strncmp(r.out, head, strlen(head)) == 0, "%s --version: [%s]", bin, r.out);
    const char *b = strstr(r.out, "(backends: "), *end = strstr(r.out, ")\n");
    cr_assert(b && end && end > b && end[2] == 0, "%s --version: [%s]", bin, r.out);
    b += strlen("(backends: ");
    char *names = strndup(b, (size_t)(end - b));
    run_free(&r);
    return names;
}

Test(backends, cpu_build_has_the_cpu_only) {
    for (size_t i = 0; i < sizeof PROGS / sizeof PROGS[0]; i++) {
        char *b = backends_of("cpu/", PROGS[i]);
        cr_expect_str_eq(b, "cpu", "cpu/%s", PROGS[i]);
        free(b);
    }
}

// What users run names the backends the Makefile built in: "cpu, cuda sm_80 sm_90" with nvcc.
Test(backends, user_build_names_its_backends) {
    const char *want = getenv("EMX_BACKENDS");
    if (!want || !*want) cr_skip_test("EMX_BACKENDS is not set (make test sets it from CUDA and CUDA_ARCHS)");
    for (size_t i = 0; i < sizeof PROGS / sizeof PROGS[0]; i++) {
        char *b = backends_of("", PROGS[i]);
        cr_expect_str_eq(b, want, "%s", PROGS[i]);
        free(b);
    }
}

// A GPU (its driver's control device) makes --device cuda:0 work: make test-gpu tests that.
static int gpu_driver_present(void) { return access("/dev/nvidiactl", F_OK) == 0; }

Test(backends, without_a_gpu_auto_is_the_cpu_and_cuda0_one_line, .timeout = 300) {
    char model[512], user_run[512], bench[512];
    test_build_path(model, sizeof model, "models/stories260K.f32.bin");
    if (access(model, R_OK) != 0) cr_skip_test("%s missing (make test-models converts it)", model);
    if (gpu_driver_present()) cr_skip_test("a GPU driver is present (/dev/nvidiactl): make test-gpu runs cuda:0");
    test_build_path(user_run, sizeof user_run, "run");
    test_build_path(bench, sizeof bench, "tools/bench");
    char *b = backends_of("", "run");
    const int has_cuda = strstr(b, "cuda") != NULL;
    free(b);

    // the default device (auto) runs on the CPU, silently: the CPU build's text and exit status
    const char *args[] = {model, "-p", "Once upon a time", "-n", "24", "--temp", "0", "-t", "1", NULL};
    RunResult c = run_prog(run_binary(), args), u = run_prog(user_run, args);
    cr_assert_eq(c.code, 0, "%s", c.err);
    cr_assert_eq(u.code, 0, "%s: %s", user_run, u.err);
    cr_assert(c.out_len > 20, "the CPU build generated almost nothing: [%s]", c.out);
    cr_expect_str_eq(u.out, c.out, "%s --device auto differs from the CPU build's text", user_run);
    cr_expect(strstr(u.err, "error") == NULL && strstr(u.err, "cuda") == NULL, "%s: [%s]", user_run, u.err);
    run_free(&c);
    run_free(&u);

    // --device cuda:0: one line that names the problem, exit 1
    const char *why = has_cuda ? "device cuda:0: no GPU found" : "device cuda:0: this build has no CUDA backend";
    expect_error_prog(user_run, (const char *const[]){model, "-p", "x", "--device", "cuda:0", NULL}, 1, why);
    expect_error_prog(bench, (const char *const[]){"speed", model, "--device", "cuda:0", "-p", "4", "-n", "2", NULL},
                      1, why);
}

// The CUDA build the C suite runs beside the CPU one ($EMX_GPU_RUN: build/emu/run under make test,
// build/cuda/run under make test-gpu) names both backends.
Test(backends, gpu_build_names_cpu_and_cuda, .timeout = 120) {
    const char *gpu = gpu_run_binary();
    RunResult r = run_prog(gpu, (const char *const[]){"--version", NULL});
    cr_assert_eq(r.code, 0, "%s --version: exit %d (%s)", gpu, r.code, r.err);
    cr_expect(strncmp(r.out, "entropix.c run ", 15) == 0 && strstr(r.out, "(backends: cpu, cuda ") != NULL,
              "%s --version: [%s]", gpu, r.out);
    run_free(&r);
}
