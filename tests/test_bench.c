// test_bench.c — the pieces of tools/bench that are not timings: llama-bench's JSONL output
// read back (a real llama-bench output, tests/data/bench/), results saved and compared, the
// forward-pass measurement's bookkeeping, the copy-bandwidth probe, and the CLI's errors.
// No test here asserts a speed.
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "forward_bench.h"
#include "llama_bench.h"
#include "machine.h"
#include "result.h"
#include "run_util.h"
#include "test_util.h"

Test(bench, llama_bench_jsonl_parsed) {
    // Two result lines (pp, tg) among other text, the shape llama-bench -o jsonl prints.
    const char *text =
        "{\"build_commit\":\"0c1e570\",\"model_type\":\"llama ?B Q8_0\",\"n_prompt\":512,\"n_gen\":0,"
        "\"n_threads\":2,\"avg_ns\":1,\"stddev_ns\":0,\"avg_ts\":321.5,\"stddev_ts\":1.5}\n"
        "not json\n"
        "{\"n_prompt\":0,\"n_gen\":128,\"avg_ts\":55.25}\n";
    EmxForwardSpeed fs;
    char err[256];
    cr_assert_eq(emx_llama_bench_parse(text, &fs, err, sizeof err), 0, "%s", err);
    cr_expect_eq(fs.prefill_tps, 321.5);
    cr_expect_eq(fs.decode_tps, 55.25);
    cr_expect_eq(emx_llama_bench_parse("| model | size |\n", &fs, err, sizeof err), -1);
    cr_expect(strstr(err, "no result") != NULL, "%s", err);
}

// A real llama-bench output (llama.cpp 0c1e570, -p 16 -n 4 -r 1 -o jsonl, SmolLM2 Q4_1): the
// figures are whatever that run measured; what matters is that both tests are found with
// their avg_ts, which the file's own numbers (read here independently) give.
Test(bench, llama_bench_real_output_parsed) {
    char err[256];
    char *text = test_read_file("tests/data/bench/llama-bench-smollm2.jsonl", NULL);
    cr_assert(text, "tests/data/bench/llama-bench-smollm2.jsonl missing");
    // The avg_ts of each line, found by hand: the pp line comes first, then tg.
    const char *pp = strstr(text, "\"avg_ts\": "), *tg = pp ? strstr(pp + 1, "\"avg_ts\": ") : NULL;
    cr_assert(pp && tg);
    double want_pp = atof(pp + 10), want_tg = atof(tg + 10);
    EmxForwardSpeed fs;
    cr_assert_eq(emx_llama_bench_parse(text, &fs, err, sizeof err), 0, "%s", err);
    cr_expect(fs.prefill_tps == want_pp && want_pp > 0, "%g vs %g", fs.prefill_tps, want_pp);
    cr_expect(fs.decode_tps == want_tg && want_tg > 0, "%g vs %g", fs.decode_tps, want_tg);
    free(text);
}

Test(bench, llama_bench_missing_binary_is_an_error) {
    EmxForwardSpeed fs;
    char err[256];
    cr_expect_eq(emx_llama_bench_run("/nonexistent/llama-bench", "x.gguf", 1, 8, 8, &fs, err, sizeof err), -1);
    cr_expect(strstr(err, "/nonexistent/llama-bench") != NULL, "%s", err);
}

Test(bench, result_round_trip_and_compare) {
    EmxBenchResult a = {.threads = 2, .n_prompt = 512, .n_gen = 128, .prefill_tps = 100.0,
                        .decode_tps = 50.0, .memcpy_gbs = 9.5};
    snprintf(a.model, sizeof a.model, "m.bin");
    snprintf(a.cpu, sizeof a.cpu, "cpu");
    snprintf(a.simd, sizeof a.simd, "avx2");
    char path[] = "/tmp/emx_bench_XXXXXX", err[256];
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    cr_assert_eq(emx_bench_result_save(path, &a, err, sizeof err), 0, "%s", err);
    EmxBenchResult b;
    cr_assert_eq(emx_bench_result_load(path, &b, err, sizeof err), 0, "%s", err);
    cr_expect(b.threads == 2 && b.n_prompt == 512 && b.n_gen == 128 && b.prefill_tps == 100.0 &&
              b.decode_tps == 50.0 && b.memcpy_gbs == 9.5);
    cr_expect_str_eq(b.model, "m.bin");
    b.decode_tps = 40.0;  // now 50 against a baseline of 40: 1.25×, +25%
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    emx_bench_result_compare(f, &a, &b);
    fclose(f);
    cr_expect(strstr(buf, "1.250× (+25.0%)") != NULL, "%s", buf);
    cr_expect(strstr(buf, "1.000× (+0.0%)") != NULL, "%s", buf);
    cr_expect(strstr(buf, "warning") == NULL, "%s", buf);
    free(buf);
    b.threads = 4;
    f = open_memstream(&buf, &len);
    emx_bench_result_compare(f, &a, &b);
    fclose(f);
    cr_expect(strstr(buf, "warning: the baseline ran m.bin, 4 threads") != NULL, "%s", buf);
    free(buf);
    // A file that is not a result names itself and the field.
    FILE *w = fopen(path, "w");
    fputs("{\"threads\": 2}", w);
    fclose(w);
    cr_expect_eq(emx_bench_result_load(path, &b, err, sizeof err), -1);
    cr_expect(strstr(err, "field 'n_prompt' is missing") != NULL, "%s", err);
    unlink(path);
    cr_expect_eq(emx_bench_result_load(path, &b, err, sizeof err), -1);
}

Test(bench, forward_measurement_and_copy_probe) {
    char mp[1024], err[256];
    test_build_path(mp, sizeof mp, "models/stories260K.f32.bin");
    EmxModel m;
    cr_assert_eq(emx_model_open(&m, mp, err, sizeof err), 0, "%s (make test-models)", err);
    EmxState *st = emx_state_new(&m, &(EmxStateOptions){.n_threads = 1, .ctx = 64}, err, sizeof err);
    cr_assert_not_null(st, "%s", err);
    EmxForwardSpeed fs;
    cr_assert_eq(emx_bench_forward_once(st, &m, 32, 16, &fs, err, sizeof err), 0, "%s", err);
    cr_expect(fs.prefill_tps > 0 && fs.decode_tps > 0);
    cr_assert_eq(emx_bench_forward_once(st, &m, 0, 16, &fs, err, sizeof err), 0);
    cr_expect(fs.prefill_tps == 0 && fs.decode_tps > 0, "-p 0 skips the prefill test");
    cr_expect_eq(emx_bench_forward_once(st, &m, 65, 0, &fs, err, sizeof err), -1);
    cr_expect(strstr(err, "65 tokens do not fit the context of 64") != NULL, "%s", err);
    emx_state_free(st);
    emx_model_close(&m);
    cr_expect(emx_bench_memcpy_gbs((size_t)1 << 20, 1, 2) > 0.0);
    char cpu[128];
    emx_bench_cpu_name(cpu, sizeof cpu);
    cr_expect(cpu[0] != 0);
}

Test(bench, cli_errors_are_one_line, .timeout = 60) {
    char bin[1024], mp[1024];
    test_build_path(bin, sizeof bin, "tools/bench");
    test_build_path(mp, sizeof mp, "models/stories260K.f32.bin");
    if (access(bin, X_OK) != 0) cr_assert_fail("%s is not built", bin);
    expect_error_prog(bin, (const char *[]){"warp", mp, NULL}, 2, "unknown benchmark 'warp'");
    expect_error_prog(bin, (const char *[]){"speed", mp, "--gguf", "x.gguf", NULL}, 2,
                      "--llama-bench and --gguf go together");
    expect_error_prog(bin, (const char *[]){"speed", mp, "-p", "0", "-n", "0", NULL}, 2, "nothing to measure");
    expect_error_prog(bin, (const char *[]){"speed", mp, "--baseline", "/nonexistent.json", NULL}, 2,
                      "--baseline /nonexistent.json: cannot open");
    expect_error_prog(bin, (const char *[]){"speed", mp, "-p", "999999", NULL}, 1, "exceed the model's context");
    expect_error_prog(bin, (const char *[]){"sampler", mp, "--frob", NULL}, 2, "unknown option '--frob'");
    // A run with --save writes a result that --baseline reads back.
    char path[] = "/tmp/emx_bench_XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    RunResult r = run_prog(bin, (const char *[]){"speed", mp, "-t", "1", "-p", "32", "-n", "16",
                                                 "--runs", "1", "--save", path, NULL});
    cr_assert_eq(r.code, 0, "%s", r.err);
    run_free(&r);
    r = run_prog(bin, (const char *[]){"speed", mp, "-t", "1", "-p", "32", "-n", "16", "--runs", "1",
                                       "--baseline", path, NULL});
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "against the baseline:") != NULL, "%s", r.out);
    run_free(&r);
    unlink(path);
}
