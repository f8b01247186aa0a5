// test_cuda_resources.c — tools/cuda_resources.py, the static resource report of the CUDA kernels
// (`make cuda`), on saved ptxas -v logs and cuobjdump -sass listings (tests/data/cuda_resources):
// a spill in a decode-path kernel, a kernel without a block size and a broken SASS promise each
// fail with one line naming kernel and arch; a clean build passes and its reports carry the
// occupancy that the architecture's limits give. No nvcc or GPU needed. Paths are relative to the
// repository root (make test runs from there).
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/run_util.h"
#include "tests/test_util.h"

#define TOOL "tools/cuda_resources.py"
#define DATA "tests/data/cuda_resources/"

// python3 TOOL args... (args NULL-terminated)
static RunResult tool(const char *const *args) {
    const char *argv[16] = {"python3", TOOL};
    int n = 2;
    for (int i = 0; args[i] && n < 15; i++) argv[n++] = args[i];
    argv[n] = NULL;
    return run_prog("/usr/bin/env", argv);
}

// Exit 1 and exactly one line on stderr that holds every needle.
static void expect_one_line_failure(const char *const *args, const char *needle1, const char *needle2) {
    RunResult r = tool(args);
    cr_expect_eq(r.code, 1, "exit %d, expected 1 (stderr: %s)", r.code, r.err);
    cr_expect_eq(count_lines(r.err), 1, "stderr is not one line: [%s]", r.err);
    cr_expect(strstr(r.err, needle1) != NULL, "stderr [%s] lacks [%s]", r.err, needle1);
    cr_expect(strstr(r.err, needle2) != NULL, "stderr [%s] lacks [%s]", r.err, needle2);
    run_free(&r);
}

Test(cuda_resources, clean_logs_pass_and_reports_hold_the_occupancy, .timeout = 60) {
    char dir[] = "/tmp/emx_cuda_res_XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char prefix[256], md_path[300], json_path[300];
    snprintf(prefix, sizeof prefix, "%s/resources", dir);
    snprintf(md_path, sizeof md_path, "%s.md", prefix);
    snprintf(json_path, sizeof json_path, "%s.json", prefix);
    const char *args[] = {DATA "ok.ptxas", "--sass", DATA "ok.sass", "--out", prefix, NULL};
    RunResult r = tool(args);
    cr_expect_eq(r.code, 0, "exit %d (stderr: %s)", r.code, r.err);
    cr_expect_str_eq(r.err, "");
    run_free(&r);
    char *md = test_read_file(md_path, NULL), *json = test_read_file(json_path, NULL);
    cr_assert(md && json, "the reports were not written");
    // matvec_fast<q8, B=1> at 76 registers: 2560 per warp, 6 warps in each quarter of the
    // 64K-register file, 24 warps = 6 blocks of 4 warps: 37.5 % of 64 warps, registers bind
    cr_expect(strstr(md, "| `matvec_fast_kernel<3, 1, false, true>` | sm_80 | decode | 76 | 0 | 0 | 0/0 | 0 | 0 "
                         "| 128 | 6 | 37.5 | registers |"),
              "row missing from [%s]", md);
    // attn_layer at 32 registers, 256 threads, 25600 bytes static shared memory (+1 KB reserved):
    // 6 blocks in 164 KB of shared memory, 8 by registers: 6 * 8 warps = 75 %
    cr_expect(strstr(md, "| `attn_layer_kernel` | sm_80 | decode | 32 | 25600 | 0 | 0/0 | 0 | 0 | 256 | 6 | 75.0 "
                         "| shared memory |"),
              "row missing from [%s]", md);
    // 96 registers, one warp per block: 3072 registers per warp, 5 warps in each 16K quarter of the
    // register file, so 20 blocks (21 if the file were one pool)
    cr_expect(strstr(md, "| `attn_average_kernel` | sm_90 | decode | 96 | 0 | 0 | 0/0 | 0 | 0 | 32 | 20 | 31.2 | registers |"),
              "row missing from [%s]", md);
    // a naive kernel's spill is reported, not failed
    cr_expect(strstr(md, "| `rmsnorm_naive_kernel` | sm_80 | naive | 32 | 0 | 0 | 8/8 |"), "row missing from [%s]", md);
    cr_expect(strstr(md, "| `attention_split_gqa_kernel<float>` | sm_80 | 32: 3 | 0 | reported |"),
              "SASS row missing from [%s]", md);
    cr_expect(strstr(json, "\"problems\": []"), "json: %s", json);
    free(md);
    free(json);
    unlink(md_path);
    unlink(json_path);
    rmdir(dir);
}

Test(cuda_resources, spill_in_a_decode_kernel_fails, .timeout = 60) {
    const char *args[] = {DATA "spill.ptxas", NULL};
    expect_one_line_failure(args, "spill in decode-path kernel attn_layer_kernel (sm_80)", "16 bytes spill stores");
}

// The matvec's fast_f32 instantiations (INT8 false) are launched only by the lab and the kernel
// benchmarks: their spill is reported, not failed; the same spill in the int8 one, which a decode
// step launches, fails. (q4_1f's fast_f32 kernel at 16 rows with SwiGLU, as ptxas 13 printed it.)
Test(cuda_resources, a_spill_in_the_fast_f32_matvec_is_reported_not_failed, .timeout = 60) {
    const char *ok[] = {DATA "fast_f32_spill.ptxas", NULL};
    RunResult r = tool(ok);
    cr_expect_eq(r.code, 0, "exit %d (stderr: %s)", r.code, r.err);
    cr_expect_str_eq(r.err, "");
    run_free(&r);
    const char *bad[] = {DATA "fast_int8_spill.ptxas", NULL};
    expect_one_line_failure(bad, "spill in decode-path kernel matvec_fast_kernel<6, 16, true, true> (sm_80)",
                            "24 bytes spill stores");
}

// a non-inlined device function (here CUDA's trig slow path, which rope_kv calls) has its own
// spill counts, which its callers pay; a stack frame alone (rope_kv's local array) is no spill
Test(cuda_resources, spill_in_a_called_device_function_fails, .timeout = 60) {
    const char *args[] = {DATA "subroutine_spill.ptxas", NULL};
    expect_one_line_failure(args, "spill in device function __internal_trig_reduction_slowpathd (sm_80)",
                            "24 bytes spill stores");
}

Test(cuda_resources, kernel_without_block_size_fails, .timeout = 60) {
    const char *args[] = {DATA "ok.ptxas", DATA "unknown.ptxas", NULL};
    expect_one_line_failure(args, "kernel new_fancy_kernel (sm_90)", "no block size");
}

Test(cuda_resources, missing_idp4a_in_the_int8_matvec_fails, .timeout = 60) {
    const char *args[] = {DATA "ok.ptxas", "--sass", DATA "no_idp.sass", NULL};
    expect_one_line_failure(args, "SASS of matvec_fast_kernel<3, 1, false, true> (sm_90)", "no IDP.4A");
}

// The decode kernels launched with PDL: on sm_90 the fused matvec must hold emx_pdl_wait's
// ACQBULK (and its PREEXIT and L2 prefetch); the sm_80 code, where both compile to nothing, is
// not asked for them (ok.sass has both archs).
Test(cuda_resources, missing_pdl_wait_in_the_fused_matvec_fails, .timeout = 60) {
    const char *args[] = {DATA "ok.ptxas", "--sass", DATA "no_pdl_wait.sass", NULL};
    expect_one_line_failure(args, "SASS of matvec_fused_kernel<3, false, true> (sm_90)", "no ACQBULK (emx_pdl_wait)");
}

// The decode step's decide tail is launched with PDL too: its kernels are checked the same way
// (no_tail_pdl_wait.sass: ok.sass without sample_kernel's ACQBULK on sm_90).
Test(cuda_resources, missing_pdl_wait_in_a_tail_kernel_fails, .timeout = 60) {
    const char *args[] = {DATA "ok.ptxas", "--sass", DATA "no_tail_pdl_wait.sass", NULL};
    expect_one_line_failure(args, "SASS of sample_kernel (sm_90)", "no ACQBULK (emx_pdl_wait)");
}

Test(cuda_resources, sass_without_the_checked_kernels_fails, .timeout = 60) {
    // a listing of some other object: the checks must not pass on nothing
    const char *args[] = {DATA "ok.ptxas", "--sass", DATA "spill.ptxas", NULL};
    RunResult r = tool(args);
    cr_expect_eq(r.code, 1, "exit %d (stderr: %s)", r.code, r.err);
    cr_expect(strstr(r.err, "has no matvec_fast_kernel"), "stderr: %s", r.err);
    run_free(&r);
}

Test(cuda_resources, unreadable_log_fails, .timeout = 60) {
    const char *args[] = {DATA "no_such.ptxas", NULL};
    expect_one_line_failure(args, "no_such.ptxas", "No such file");
}
