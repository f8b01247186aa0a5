// test_cpu_code.c — promises about the machine code of the CPU kernels that no numeric test can
// see: the 4-row kernels that read weight rows as they are (decode, the server's few rows) ask
// for the next rows ahead with prefetch instructions. A prefetch changes no result, so when the
// compiler drops one (gcc 12 deleted every call of a small static helper that held only
// prefetches, judging it free of side effects) every output stays bitwise right and decode runs
// at two thirds of its speed. Read from the object files of this build ($EMX_BUILD/obj) with
// objdump (prefetcht0 or prefetcht1); a build without the 4-row kernels (no AVX2) has no such
// promise and says so. The same kernels keep their per-group sums in registers: no `rep stos`
// (gcc 12 put an array of them on the stack, zeroed with rep stos every four groups, and the
// AVX2 build's q4 decode ran at 0.6x, every result right).
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "runtime/cpu/cpu_matmul.h"
#include "tests/run_util.h"
#include "tests/test_util.h"

// The disassembly of function `name` in objdump's output `dis`, as [*start, *end), or 0 if the
// object has no such function.
static int function_body(const char *dis, const char *name, const char **start, const char **end) {
    char header[128];
    snprintf(header, sizeof header, " <%s>:\n", name);
    const char *h = strstr(dis, header);
    if (!h) return 0;
    *start = h + strlen(header);
    const char *next = strstr(*start, ">:\n");  // the next function's header
    *end = next ? next : *start + strlen(*start);
    return 1;
}


static int body_has(const char *start, const char *end, const char *insn) {
    const char *p = strstr(start, insn);
    return p && p < end;
}

Test(cpu_code, row_kernels_prefetch_the_next_rows, .timeout = 60) {
    if (!emx_quad_kernels_available()) cr_skip_test("this build has no 4-row kernels (%s)", emx_cpu_simd_name());
    const struct {
        const char *object, *function;
    } kernels[] = {{"cpu_qdot.o", "emx_dot4x1_q8"},
                   {"cpu_qdot.o", "emx_dot4x1_q4"},
                   {"cpu_qdot.o", "emx_dot4x1_q4_1"},
                   {"cpu_qdot.o", "emx_dot4x1_q4_1f"}};  // (emx_quad_direct runs these, row by row)
    for (size_t k = 0; k < sizeof kernels / sizeof kernels[0]; k++) {
        char rel[128], obj[512];
        snprintf(rel, sizeof rel, "obj/runtime/cpu/%s", kernels[k].object);
        test_build_path(obj, sizeof obj, rel);
        const char *args[] = {"objdump", "-d", "--no-show-raw-insn", obj, NULL};
        RunResult r = run_prog("/usr/bin/env", args);
        cr_assert_eq(r.code, 0, "objdump -d %s: exit %d (%s)", obj, r.code, r.err);
        const char *start, *end;
        cr_assert(function_body(r.out, kernels[k].function, &start, &end), "%s: no function %s", obj,
                  kernels[k].function);
        cr_expect(body_has(start, end, "prefetcht"),  // t0 or t1: the hint is the kernel's choice
                  "%s: %s has no prefetch: the compiler dropped the next rows' prefetch", obj, kernels[k].function);
        // a sanitized build (`make test-asan`, -O1) is compiled to check memory, not for speed: at
        // -O1 gcc keeps the AVX2 kernels' group sums in a stack array whatever the source does, so
        // the registers promise is the optimised builds' (`make test`, `make test-avx2`), checked there
        if (EMX_TEST_SANITIZED)
            cr_log_info("%s: %s: the registers check is not made in a sanitized (-O1) build", obj, kernels[k].function);
        else
            cr_expect(!body_has(start, end, "rep stos"),
                      "%s: %s zeroes memory with rep stos: its sums left the registers", obj, kernels[k].function);
        run_free(&r);
    }
}
