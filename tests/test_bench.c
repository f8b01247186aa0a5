// test_bench.c — the pieces of tools/bench that are not timings: llama-bench's JSONL output
// read back (a real llama-bench output, tests/data/bench/), a --compare-cmd's figure read
// back, results saved and compared, the forward-pass measurement's bookkeeping, the
// copy-bandwidth probe, the note on OpenMP's wait policy, the CLI's errors, and the `speed`
// report on the CPU and on an emulated GPU ($EMX_GPU_BENCH: tools/bench linked with the CUDA
// backend under tests/cuda_emu): the same lines on both, bytes per token from the model's
// shapes, the peak bandwidth from the emulated device's properties, kernel launches per decode
// step (`sampler` and `agents`: test_bench_decoders.c). No test here asserts a speed.
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/bench/compare_cmd.h"
#include "tools/bench/forward_bench.h"
#include "tools/bench/llama_bench.h"
#include "tools/bench/machine.h"
#include "tools/bench/result.h"
#include "tools/bench/speed_report.h"
#include "bench_report_util.h"
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

// The note on OpenMP's wait policy: "passive" in any case gives one, anything else none.
Test(bench, wait_policy_note) {
    unsetenv("OMP_WAIT_POLICY");
    cr_expect_null(emx_bench_wait_policy_note());
    setenv("OMP_WAIT_POLICY", "active", 1);
    cr_expect_null(emx_bench_wait_policy_note());
    setenv("OMP_WAIT_POLICY", "Passive", 1);
    const char *note = emx_bench_wait_policy_note();
    cr_assert_not_null(note);
    cr_expect(strstr(note, "unset it to measure speed") != NULL, "%s", note);
}

// The comparison's lines: the ratio of the medians, then the lowest and highest ratio of one
// round (rounds where either side has no figure left out; one round: no range).
Test(bench, other_lines_give_the_rounds_ratio_range) {
    const EmxConfig cfg = {.n_layers = 2, .n_kv_heads = 1, .head_dim = 8};
    const double ours_pp[3] = {120, 90, 150}, other_pp[3] = {100, 100, 100};  // 1.2, 0.9, 1.5
    const double ours_tg[3] = {10, 20, 0}, other_tg[3] = {20, 10, 5};         // 0.5, 2.0, none
    EmxSpeedReport r = {.device = "cpu", .device_desc = "x", .model = "m.bin", .dtype = "q8", .cfg = &cfg,
                        .n_prompt = 8, .n_gen = 4, .prefill_tps = 120, .decode_tps = 10, .weight_bytes = 1000,
                        .other = "other runtime", .other_prefill_tps = 100, .other_decode_tps = 20, .runs = 3,
                        .ours_rounds = {ours_pp, ours_tg}, .other_rounds = {other_pp, other_tg}};
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cr_assert_not_null(f);
    emx_speed_report_print(f, &r);
    r.runs = 1;  // one round: the ratio alone
    emx_speed_report_print(f, &r);
    fclose(f);
    const char *pp = strstr(text, "other pp8:         100.00 tok/s, ours/other 1.200 (rounds 0.900-1.500)\n");
    cr_expect(pp != NULL, "%s", text);
    cr_expect(strstr(text, "other tg4:         20.00 tok/s, ours/other 0.500 (rounds 0.500-2.000)\n") != NULL, "%s",
              text);
    cr_expect(pp && strstr(pp + 1, "other pp8:         100.00 tok/s, ours/other 1.200\n") != NULL, "%s", text);
    free(text);
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
    cr_expect_eq(emx_llama_bench_run("/nonexistent/llama-bench", "x.gguf", 1, 0, 8, 8, &fs, err, sizeof err), -1);
    cr_expect(strstr(err, "/nonexistent/llama-bench") != NULL, "%s", err);
}

Test(bench, result_round_trip_and_compare) {
    EmxBenchResult a = {.threads = 2, .n_prompt = 512, .n_gen = 128, .prefill_tps = 100.0,
                        .decode_tps = 50.0, .memcpy_gbs = 9.5, .read_gbs = 21.25};
    snprintf(a.model, sizeof a.model, "m.bin");
    snprintf(a.device, sizeof a.device, "cpu");
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
              b.decode_tps == 50.0 && b.memcpy_gbs == 9.5 && b.read_gbs == 21.25);
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
    b.threads = 2;  // the same run on another device is not the same run
    snprintf(b.device, sizeof b.device, "cuda:0");
    f = open_memstream(&buf, &len);
    emx_bench_result_compare(f, &a, &b);
    fclose(f);
    cr_expect(strstr(buf, "warning: the baseline ran m.bin, 2 threads, pp512/tg128 on cuda:0") != NULL, "%s", buf);
    free(buf);
    snprintf(b.device, sizeof b.device, "cpu");  // nor at another depth, or with another cache
    b.depth = 4096;
    cr_assert_eq(emx_bench_result_save(path, &b, err, sizeof err), 0, "%s", err);
    cr_assert_eq(emx_bench_result_load(path, &b, err, sizeof err), 0, "%s", err);
    cr_expect_eq(b.depth, 4096);
    cr_expect_str_eq(b.cache_type, "f32");
    f = open_memstream(&buf, &len);
    emx_bench_result_compare(f, &a, &b);
    fclose(f);
    cr_expect(strstr(buf, "depth 4096, f32 KV cache: not the same run") != NULL, "%s", buf);
    free(buf);
    b.depth = 0;
    snprintf(b.cache_type, sizeof b.cache_type, "f16");
    f = open_memstream(&buf, &len);
    emx_bench_result_compare(f, &a, &b);
    fclose(f);
    cr_expect(strstr(buf, "depth 0, f16 KV cache: not the same run") != NULL, "%s", buf);
    free(buf);
    // A result saved before devices (no "device" field) was a CPU run.
    FILE *old = fopen(path, "w");
    fputs("{\"model\": \"m.bin\", \"threads\": 2, \"n_prompt\": 512, \"n_gen\": 128, \"prefill_tps\": 1,"
          " \"decode_tps\": 1, \"memcpy_gbs\": 1}", old);
    fclose(old);
    cr_assert_eq(emx_bench_result_load(path, &b, err, sizeof err), 0, "%s", err);
    cr_expect_str_eq(b.device, "cpu");
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
    cr_assert_eq(emx_bench_forward_once(st, &m, 32, 16, 0, &fs, err, sizeof err), 0, "%s", err);
    cr_expect(fs.prefill_tps > 0 && fs.decode_tps > 0);
    cr_assert_eq(emx_bench_forward_once(st, &m, 0, 16, 0, &fs, err, sizeof err), 0);
    cr_expect(fs.prefill_tps == 0 && fs.decode_tps > 0, "-p 0 skips the prefill test");
    cr_expect_eq(emx_bench_forward_once(st, &m, 65, 0, 0, &fs, err, sizeof err), -1);
    cr_expect(strstr(err, "65 tokens (depth 0) do not fit the context of 64") != NULL, "%s", err);
    // at a depth: both tests after 40 positions of context, which must fit too
    cr_assert_eq(emx_bench_forward_once(st, &m, 16, 8, 40, &fs, err, sizeof err), 0, "%s", err);
    cr_expect(fs.prefill_tps > 0 && fs.decode_tps > 0);
    cr_expect_eq(emx_bench_forward_once(st, &m, 16, 8, 49, &fs, err, sizeof err), -1);
    cr_expect(strstr(err, "65 tokens (depth 49) do not fit the context of 64") != NULL, "%s", err);
    emx_state_free(st);
    emx_model_close(&m);
    cr_expect(emx_bench_memcpy_gbs((size_t)1 << 20, 1, 2) > 0.0);
    cr_expect(emx_bench_read_gbs((size_t)1 << 20, 2, 3) > 0.0);
    cr_expect(emx_bench_read_gbs(100, 1, 1) <= 0.0, "less than a page: nothing to measure");
    char cpu[128];
    emx_bench_cpu_name(cpu, sizeof cpu);
    cr_expect(cpu[0] != 0);
}

Test(bench, cli_errors_are_one_line, .timeout = 300) {
    char bin[1024], mp[1024];
    cpu_bench_and_model(bin, mp, "stories260K.f32.bin");
    expect_error_prog(bin, (const char *[]){"warp", mp, NULL}, 2, "unknown benchmark 'warp'");
    expect_error_prog(bin, (const char *[]){"speed", mp, "--gguf", "x.gguf", NULL}, 2,
                      "--llama-bench and --gguf go together");
    expect_error_prog(bin, (const char *[]){"speed", mp, "-p", "0", "-n", "0", NULL}, 2, "nothing to measure");
    expect_error_prog(bin, (const char *[]){"speed", mp, "--baseline", "/nonexistent.json", NULL}, 2,
                      "--baseline /nonexistent.json: cannot open");
    expect_error_prog(bin, (const char *[]){"speed", mp, "-p", "999999", NULL}, 1, "exceed the model's context");
    expect_error_prog(bin, (const char *[]){"sampler", mp, "--frob", NULL}, 2, "unknown option '--frob'");
    expect_error_prog(bin, (const char *[]){"sampler", mp, "--device", "cpu", "--persistent", NULL}, 2,
                      "--persistent decodes with a GPU's persistent kernel: it needs --device cuda:N, not cpu");
    expect_error_prog(bin, (const char *[]){"speed", mp, "--peak-gbps", "fast", NULL}, 2,
                      "--peak-gbps: 'fast' is not a positive number");
    expect_error_prog(bin, (const char *[]){"speed", mp, "--llama-bench", "lb", "--gguf", "g", "--compare-cmd", "c", NULL},
                      2, "one comparison runtime at a time");
    expect_error_prog(bin, (const char *[]){"speed", mp, "-d", "8", "--compare-cmd", "c", NULL}, 2,
                      "--depth runs ours alone");
    expect_error_prog(bin, (const char *[]){"speed", mp, "-p", "8", "-d", "600", NULL}, 1, "exceed the model's context");
    expect_error_prog(bin, (const char *[]){"speed", mp, "-d", "-1", NULL}, 2, "-d: '-1' is not an integer in [0, ");
    expect_error_prog(bin, (const char *[]){"speed", mp, "--cache-type", "q8", NULL}, 2,
                      "--cache-type 'q8': expected auto, f32 or f16");
    expect_error_prog(bin, (const char *[]){"speed", mp, "--device", "cpu", "-n", "2", "--timeline", NULL}, 2,
                      "--timeline times a GPU's decode steps: it needs --device cuda:N");
    expect_error_prog(bin, (const char *[]){"speed", mp, "--device", "cpu", "-n", "2", "--persistent", NULL}, 2,
                      "--persistent times a GPU's decode steps: it needs --device cuda:N");
    expect_error_prog(bin, (const char *[]){"agents", mp, "--device", "cpu", "--devices", "gpu1", NULL}, 1,
                      "--devices: 'gpu1' in 'gpu1' is not cpu or cuda:N");
    for (int k = 0; k < 3; k++) {  // every subcommand takes --device; a bad one is named
        const char *sub = k == 0 ? "speed" : k == 1 ? "sampler" : "agents";
        expect_error_prog(bin, (const char *[]){sub, mp, "--device", "gpu0", NULL}, 1,
                          "device 'gpu0': expected cpu, cuda:N or auto");
        expect_error_prog(bin, (const char *[]){sub, mp, "--device", "cuda:0", NULL}, 1,
                          "device cuda:0: this build has no CUDA backend");
    }
    // A run with --save writes a result that --baseline reads back.
    char path[] = "/tmp/emx_bench_XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    setenv("OMP_WAIT_POLICY", "passive", 1);  // inherited by the run: its note on stderr
    RunResult r = run_prog(bin, (const char *[]){"speed", mp, "-t", "1", "-p", "32", "-n", "16",
                                                 "--runs", "1", "--save", path, NULL});
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.err, "bench: note: OMP_WAIT_POLICY=passive: ") != NULL, "%s", r.err);
    run_free(&r);
    unsetenv("OMP_WAIT_POLICY");
    r = run_prog(bin, (const char *[]){"speed", mp, "-t", "1", "-p", "32", "-n", "16", "--runs", "1",
                                       "--baseline", path, NULL});
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "against the baseline:") != NULL, "%s", r.out);
    run_free(&r);
    unlink(path);
}

Test(bench, compare_cmd_output_parsed) {
    double t = 0;
    char err[256];
    cr_assert_eq(emx_compare_parse_tps("tg128: 55.3 tok/s\n", &t, err, sizeof err), 0, "%s", err);
    cr_expect_eq(t, 55.3);
    // The last figure counts; numbers without a unit, or glued to a word, do not.
    cr_assert_eq(emx_compare_parse_tps("pp512 100 tok/s\nllama v2 run 7\ntg128 = 20.5 tokens/s (x3)\n", &t, err,
                                       sizeof err), 0);
    cr_expect_eq(t, 20.5);
    cr_assert_eq(emx_compare_parse_tps("eval: 12 t/s", &t, err, sizeof err), 0);
    cr_expect_eq(t, 12.0);
    cr_expect_eq(emx_compare_parse_tps("x1 tok/s, 3 tok/sec, 4 tokens per second", &t, err, sizeof err), -1);
    cr_expect(strstr(err, "no '<number> tok/s'") != NULL, "%s", err);
    // The command runs under sh with the run's sizes and device in its environment.
    const EmxCompareRun run = {.n_prompt = 8, .n_gen = 4, .threads = 1, .device = "cpu"};
    cr_assert_eq(emx_compare_cmd_run("test \"$EMX_BENCH_N_PROMPT/$EMX_BENCH_N_GEN/$EMX_BENCH_THREADS/"
                                     "$EMX_BENCH_DEVICE\" = 8/4/1/cpu && echo 'decode 42.5 tok/s'",
                                     &run, &t, err, sizeof err), 0, "%s", err);
    cr_expect_eq(t, 42.5);
    cr_expect_eq(emx_compare_cmd_run("echo 'model not found' >&2; exit 3", &run, &t, err, sizeof err), -1);
    cr_expect(strstr(err, "--compare-cmd failed (exit status 3): model not found") != NULL, "%s", err);
}

// ---------------------------------------------------------------------------------------------
// The `speed` report, read back line by line.

// The bytes one decode step reads, averaged over n_gen steps from an empty cache: the weights
// once, and at position p the keys and values of positions 0..p (f32, every layer and KV head).
static double expected_bytes_per_token(const char *model_rel, int n_gen, int depth, int kv_esize) {
    char mp[1024], err[256];
    test_build_path(mp, sizeof mp, model_rel);
    EmxModel m;
    cr_assert_eq(emx_model_open(&m, mp, err, sizeof err), 0, "%s (make test-models)", err);
    double kv_row = 2.0 * m.cfg.n_layers * m.cfg.n_kv_heads * m.cfg.head_dim * kv_esize;  // one position's K and V
    double kv = 0;
    for (int p = depth; p < depth + n_gen; p++) kv += kv_row * (p + 1);
    double bytes = (double)emx_model_weight_bytes_per_token(&m) + kv / n_gen;
    emx_model_close(&m);
    return bytes;
}

// The bytes of a KV cache element that --cache-type auto gives model_rel's state on the CPU or a
// GPU (emx_kv_type_resolve: f16 on a GPU for 16-bit and quantised weights).
static int auto_kv_esize(const char *model_rel, int on_gpu) {
    char mp[1024], err[256];
    test_build_path(mp, sizeof mp, model_rel);
    EmxModel m;
    cr_assert_eq(emx_model_open(&m, mp, err, sizeof err), 0, "%s (make test-models)", err);
    const int esize = emx_kv_type_resolve(EMX_KV_AUTO, &m, on_gpu) == EMX_KV_F16 ? 2 : 4;
    emx_model_close(&m);
    return esize;
}

// bytes/token, achieved GB/s and of peak agree with each other and with the model's shapes and
// the KV cache's element size, which the report states and which is auto's on its device.
static void expect_bytes_and_rates(const char *out, const char *model_rel, int n_gen, double peak) {
    char key[32];
    snprintf(key, sizeof key, "decode tg%d:", n_gen);
    char line[256];
    cr_assert(report_value(out, key, line, sizeof line), "no '%s' in [%s]", key, out);
    const char *ms = strstr(line, "tok/s, ");
    cr_assert(ms && strstr(ms, " ms/token"), "[%s]", line);
    // tok/s (2 decimals) and ms/token (3 decimals) say the same; the finer one counts (an
    // emulated step takes seconds: 0.15 tok/s, 6512.345 ms/token).
    const double a = atof(line), m = atof(ms + 7), b = m > 0 ? 1e3 / m : 0;
    const double err_a = 0.005, err_b = b * b * 0.0005 / 1e3;
    cr_expect(a > 0 && b > 0 && fabs(a - b) <= 1.01 * (err_a + err_b), "[%s]", line);
    const double tps = err_a / a < 0.0005 / m ? a : b, bytes = report_number(out, "bytes/token:");
    char dev[256], kv[256], esize_text[32];
    cr_assert(report_value(out, "device:", dev, sizeof dev) && report_value(out, "KV cache:", kv, sizeof kv), "%s", out);
    const int esize = auto_kv_esize(model_rel, strncmp(dev, "cuda:", 5) == 0);
    snprintf(esize_text, sizeof esize_text, " x %d B x ", esize);
    cr_expect(strstr(kv, esize_text) != NULL, "%s on %s: KV cache [%s], want%selements", model_rel, dev, kv, esize_text);
    const double want = expected_bytes_per_token(model_rel, n_gen, 0, esize);
    cr_expect(bytes == want, "bytes/token %.0f, expected %.1f", bytes, want);
    const double gbs = report_number(out, "achieved GB/s:");
    cr_expect(fabs(gbs - bytes * tps / 1e9) <= 0.01 * gbs, "achieved %g vs %g", gbs, bytes * tps / 1e9);
    if (peak > 0) cr_expect(fabs(report_number(out, "of peak:") - 100.0 * gbs / peak) <= 0.01 * 100.0 * gbs / peak + 1e-9);
}

// The emulated device reports an H100's memory: 2619000 kHz, 5120 bits, double data rate.
static const double EMU_PEAK_GBPS = 2.0 * 2619000e3 * 5120 / 8 / 1e9;  // 3352.32

// The peak a GPU report must show: the emulated device's, known here; a real GPU's (make
// test-gpu) comes from its own clock and bus width, which this test cannot know: a positive
// figure, against which 'of peak' is then checked.
static double expected_peak(const char *out) {
    char v[256];
    cr_assert(report_value(out, "device:", v, sizeof v), "%s", out);
    const double peak = report_number(out, "peak GB/s:");
    if (strstr(v, "CUDA emulator")) {
        cr_expect(fabs(peak - EMU_PEAK_GBPS) < 0.005, "%s", out);
        return EMU_PEAK_GBPS;
    }
    cr_expect(peak > 0, "%s", out);
    return peak;
}

Test(bench, gpu_speed_report, .timeout = 300) {
    const char *bin = gpu_bench();
    char mp[1024];
    test_build_path(mp, sizeof mp, "models/stories260K.q8.bin");
    // A comparison command that checks what it is told (sizes, device) and reports 1000 tok/s.
    RunResult r = run_prog(bin, (const char *[]){"speed", mp, "--device", "cuda:0", "-p", "4", "-n", "3", "--runs", "1",
                                                 "--compare-cmd",
                                                 "test \"$EMX_BENCH_N_GEN $EMX_BENCH_DEVICE\" = '3 cuda:0' && "
                                                 "echo 'tg: 1000 tok/s'",
                                                 NULL});
    cr_assert_eq(r.code, 0, "%s", r.err);
    expect_report_lines(r.out);
    char v[256];
    cr_assert(report_value(r.out, "device:", v, sizeof v));
    cr_expect(!strncmp(v, "cuda:0 (", 8) && strstr(v, "CUDA graph"), "%s", v);
    cr_expect(report_number(r.out, "prefill pp4:") > 0);
    expect_bytes_and_rates(r.out, "models/stories260K.q8.bin", 3, expected_peak(r.out));
    cr_assert(report_value(r.out, "launches/step:", v, sizeof v));
    char *end;
    long launches = strtol(v, &end, 10);
    // At least 5 per layer (the fused layer: q/k/v with the norm, the attention with RoPE, the
    // cache write and the combine in one kernel, wo, gate/up with the norm, down).
    cr_expect(*end == 0 && launches >= 5 * 5, "launches/step [%s]", v);
    expect_dash(r.out, "memcpy GB/s:");
    expect_dash(r.out, "read GB/s:");
    expect_dash(r.out, "of read:");
    cr_assert(report_value(r.out, "other tg3:", v, sizeof v), "%s", r.out);
    cr_expect(!strncmp(v, "1000.00 tok/s, ours/other ", 26), "%s", v);
    const double ratio = atof(v + 26), tps = report_number(r.out, "decode tg3:");
    cr_expect(fabs(ratio - tps / 1000.0) <= 0.0005 + 0.01 * ratio, "%g vs %g", ratio, tps / 1000.0);
    expect_dash(r.out, "other pp4:");  // the command reports decode only
    // under the emulator the bandwidth model is printed unasked (tg3: the step at position 1); on a
    // GPU only with --bandwidth-model
    const bool emulated = strstr(r.out, "CUDA emulator") != NULL;
    const char *model = strstr(r.out, "\nbandwidth model (");
    cr_expect(emulated == (model != NULL), "%s", r.out);
    if (emulated)
        cr_expect(strstr(r.out, "\nbandwidth model (a lower bound at H100 SXM's peak 3350 GB/s, not a measurement): "
                                "decode step at position 1 ") != NULL, "%s", r.out);
    run_free(&r);
}

// --timeline on the GPU: a row per phase of the decode step, each with time and bytes; the
// phases' bytes add up to the bandwidth model's step (printed too under the emulator, at the same
// position), and the graph path's token is reported beside the timed one.
Test(bench, gpu_timeline, .timeout = 300) {
    const char *bin = gpu_bench();
    char mp[1024];
    test_build_path(mp, sizeof mp, "models/stories260K.q8.bin");
    RunResult r = run_prog(bin, (const char *[]){"speed", mp, "--device", "cuda:0", "-p", "0", "-n", "3", "--runs", "1",
                                                 "--timeline", "--bandwidth-model", NULL});
    cr_assert_eq(r.code, 0, "%s", r.err);
    const char *t = strstr(r.out, "\ntimeline of one decode token (cuda:0");
    cr_assert(t, "%s", r.out);
    cr_expect(strstr(t, "tg3 at depth 0, 1 rounds alternated with the graph path") != NULL, "%s", t);
    unsigned long long sum = 0, bytes;
    double us, share;
    for (int p = 0; p < EMX_PHASES; p++) {
        const char *row = strstr(t, emx_phase_name((EmxPhase)p));
        cr_assert(row, "no row '%s' in %s", emx_phase_name((EmxPhase)p), t);
        cr_assert_eq(sscanf(row + strlen(emx_phase_name((EmxPhase)p)), "%lf %lf%% %llu", &us, &share, &bytes), 3, "%s", row);
        cr_expect(us > 0 && share >= 0 && share <= 100, "%s", row);
        sum += bytes;
    }
    const char *all = strstr(t, "all phases (timed step)");
    cr_assert(all && sscanf(all + 23, "%lf %lf%% %llu", &us, &share, &bytes) == 3, "%s", t);
    cr_expect_eq(bytes, sum);
    cr_expect(fabs(share - 100.0) < 1e-9, "%s", all);
    cr_expect_eq((double)sum, report_number(r.out, "model bytes/step:"), "%s", r.out);
    cr_expect(strstr(t, "graph step, wall clock") && strstr(t, "timed step, wall clock"), "%s", t);
    cr_expect(strstr(r.err, "timeline round 1  graph") != NULL, "%s", r.err);
    run_free(&r);
}

// --persistent on the GPU: the graph path's row and the persistent kernel's, with its L2 warming
// and without, alternated round by round, with their ratios (llama3-tiny: every layer one
// dtype), and with --timeline the persistent
// kernel's phases; a model the kernel does not take (stories260K: a hidden width of 172) gets the
// reason instead of a row and a timeline.
Test(bench, gpu_decode_paths, .timeout = 300) {
    const char *bin = gpu_bench();
    char mp[1024];
    test_build_path(mp, sizeof mp, "models/llama3-tiny.q8.bin");
    RunResult r = run_prog(bin, (const char *[]){"speed", mp, "--device", "cuda:0", "-p", "0", "-n", "2", "--runs", "1",
                                                 "--persistent", "--timeline", NULL});
    cr_assert_eq(r.code, 0, "%s", r.err);
    // --timeline with it: the persistent kernel's phases, each row ending with its barrier time
    const char *tl = strstr(r.out, "\ntimeline of one decode token (cuda:0");
    cr_assert(tl && strstr(tl, "; persistent kernel, ") && strstr(tl, "barrier µs\n"), "%s", r.out);
    const char *row = strstr(tl, emx_phase_name(EMX_PHASE_ATTN));
    double us = 0, share = 0, bound = 0, of = 0, wait = -1;
    unsigned long long bytes = 0;
    cr_assert(row && sscanf(row + strlen(emx_phase_name(EMX_PHASE_ATTN)), "%lf %lf%% %llu %lf %lf%% %lf", &us, &share,
                            &bytes, &bound, &of, &wait) == 6,
              "%s", tl);
    cr_expect(us > 0 && wait >= 0 && wait <= us, "%s", row);
    const char *t = strstr(r.out, "\ndecode paths (cuda:0");
    cr_assert(t, "%s", r.out);
    // the rows: graph, the persistent kernel warming L2 (the emulated device: sm_90, a 50 MiB L2,
    // a third of it), then without the warming; a path padded to 58 columns, then its µs a token
    double graph_us = 0, per_us = 0, cold_us = 0, ratio = 0, warm_ratio = 0;
    const char *g = strstr(t, "\n  graph "), *p = strstr(t, "\n  persistent kernel, ");
    cr_assert(g && sscanf(g + 3 + 58, "%lf", &graph_us) == 1 && graph_us > 0, "%s", t);
    const char *c = p ? strstr(p + 1, "\n  persistent kernel, ") : NULL;
    char prow[256] = "", crow[256] = "";
    cr_assert(p && c && sscanf(p + 1, "%255[^\n]", prow) == 1 && sscanf(c + 1, "%255[^\n]", crow) == 1, "%s", t);
    cr_assert(strstr(prow, " blocks, L2 warmed 16.7 MiB ") && !strstr(crow, "L2 warmed"), "%s", t);
    cr_assert(sscanf(prow + 2 + 58, "%lf", &per_us) == 1 && per_us > 0 && sscanf(crow + 2 + 58, "%lf", &cold_us) == 1 &&
                  cold_us > 0,
              "%s", t);
    const char *q = strstr(t, "persistent / graph: ");
    cr_assert(q && sscanf(q + 20, "%lfx", &ratio) == 1, "%s", t);
    cr_expect(fabs(ratio - graph_us / per_us) < 0.01, "%s", t);
    const char *w = strstr(t, "L2 warmed / not warmed: ");
    cr_assert(w && sscanf(w + 24, "%lfx", &warm_ratio) == 1, "%s", t);
    cr_expect(fabs(warm_ratio - cold_us / per_us) < 0.01, "%s", t);
    cr_expect(strstr(r.err, "paths round 1  graph") != NULL, "%s", r.err);
    run_free(&r);
    test_build_path(mp, sizeof mp, "models/stories260K.q8.bin");
    r = run_prog(bin, (const char *[]){"speed", mp, "--device", "cuda:0", "-p", "0", "-n", "1", "--runs", "1",
                                       "--persistent", "--timeline", NULL});
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "\n  not measured: graph (the persistent kernel does not take it: ") != NULL, "%s", r.out);
    cr_expect(strstr(r.out, "\ntimeline of one decode token through the persistent kernel: not measured: graph (the "
                            "persistent kernel does not take it: ") != NULL,
              "%s", r.out);
    run_free(&r);
}

// --cache-type f16 on the GPU: the machine line says so, and the KV bytes a decode step reads
// are counted at 2 bytes an element (half of the f32 cache's, at a depth: -d 6).
Test(bench, gpu_f16_cache_report, .timeout = 300) {
    const char *bin = gpu_bench();
    char mp[1024];
    test_build_path(mp, sizeof mp, "models/stories260K.q8.bin");
    RunResult r = run_prog(bin, (const char *[]){"speed", mp, "--device", "cuda:0", "-p", "0", "-n", "2", "--runs", "1",
                                                 "--cache-type", "f16", "-d", "6", NULL});
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.err, "f16 KV cache") != NULL, "%s", r.err);
    char kv[256];
    cr_assert(report_value(r.out, "KV cache:", kv, sizeof kv), "%s", r.out);
    cr_expect(strstr(kv, "x 2 B x 7.5 keys (mean of tg2: depth + (n+1)/2)") != NULL, "%s", kv);
    const double f32_bytes = expected_bytes_per_token("models/stories260K.q8.bin", 2, 6, 4);
    char wp[1024], err[256];
    test_build_path(wp, sizeof wp, "models/stories260K.q8.bin");
    EmxModel m;
    cr_assert_eq(emx_model_open(&m, wp, err, sizeof err), 0, "%s", err);
    const double weights = (double)emx_model_weight_bytes_per_token(&m);
    emx_model_close(&m);
    cr_expect_eq(report_number(r.out, "bytes/token:"), weights + (f32_bytes - weights) / 2);
    run_free(&r);
    r = run_prog(bin, (const char *[]){"speed", mp, "--device", "cuda:0", "-n", "2", "--cache-type", "f8", NULL});
    cr_expect_eq(r.code, 2);
    cr_expect(strstr(r.err, "--cache-type 'f8': expected auto, f32 or f16") != NULL, "%s", r.err);
    run_free(&r);
}

// Launches per step: the captured graph's node count grows with the layers, by exactly 5
// kernels a layer with the fused decode layer (the default: q/k/v with the norm in its prologue,
// the attention with RoPE, the cache write and its combine in one kernel, wo, gate/up with the
// norm, down; llama3-tiny, 3 layers, against stories260K, 5, both q8, the same tail). With
// EMX_CUDA_FUSED=0 (the separate kernels) stories260K's graph has 5 more a layer (the two norms,
// RoPE + cache write, the attention's combine, the quantisation of att; its hidden width, 172, is
// not a multiple of 32, so hb is not quantised) and one more for the output norm. With the graph off there is no graph to count.
Test(bench, gpu_launches_per_step, .timeout = 300) {
    const char *bin = gpu_bench();
    const char *models[2] = {"models/llama3-tiny.q8.bin", "models/stories260K.q8.bin"};
    const int layers[2] = {3, 5};
    long launches[2] = {0, 0};
    char mp[1024], v[256];
    for (int k = 0; k < 2; k++) {
        test_build_path(mp, sizeof mp, models[k]);
        // llama3-tiny's 128k-row classifier is slow under emulation: one timed step.
        RunResult r = run_prog(bin, (const char *[]){"speed", mp, "--device", "cuda:0", "-p", "0", "-n", "1", "--runs",
                                                     "1", NULL});
        cr_assert_eq(r.code, 0, "%s", r.err);
        cr_expect(strstr(r.out, "prefill pp") == NULL, "-p 0: no prefill line\n%s", r.out);
        cr_expect(strstr(r.out, "decode tg1:") != NULL, "%s", r.out);
        expect_bytes_and_rates(r.out, models[k], 1, expected_peak(r.out));
        cr_assert(report_value(r.out, "launches/step:", v, sizeof v), "%s", r.out);
        launches[k] = strtol(v, NULL, 10);
        cr_expect(launches[k] >= 5 * layers[k], "%s: %ld launches for %d layers", models[k], launches[k], layers[k]);
        run_free(&r);
    }
    cr_expect(launches[1] - launches[0] == 5 * (layers[1] - layers[0]), "%ld launches (5 layers) vs %ld (3)",
              launches[1], launches[0]);
    setenv("EMX_CUDA_FUSED", "0", 1);  // inherited by the run: the separate kernels
    RunResult sep = run_prog(bin, (const char *[]){"speed", mp, "--device", "cuda:0", "-p", "0", "-n", "1", "--runs",
                                                   "1", NULL});
    unsetenv("EMX_CUDA_FUSED");
    cr_assert_eq(sep.code, 0, "%s", sep.err);
    cr_assert(report_value(sep.out, "launches/step:", v, sizeof v), "%s", sep.out);
    cr_expect(strtol(v, NULL, 10) == launches[1] + 5 * layers[1] + 1, "EMX_CUDA_FUSED=0: %s launches, fused %ld", v,
              launches[1]);
    run_free(&sep);
    RunResult r = run_prog(bin, (const char *[]){"speed", mp, "--device", "cuda:0", "-p", "0", "-n", "2", "--runs", "1",
                                                 "--graphs", "0", NULL});
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_assert(report_value(r.out, "device:", v, sizeof v));
    cr_expect(strstr(v, "launched directly") != NULL, "%s", v);
    expect_dash(r.out, "launches/step:");
    run_free(&r);
}

// The CPU report: the same lines, "-" where the CPU has no figure, a peak when given one.
Test(bench, cpu_speed_report_same_lines, .timeout = 300) {
    char bin[1024], mp[1024];
    cpu_bench_and_model(bin, mp, "stories260K.q8.bin");
    RunResult r = run_prog(bin, (const char *[]){"speed", mp, "--device", "cpu", "-t", "1", "-p", "4", "-n", "3",
                                                 "--runs", "1", NULL});
    cr_assert_eq(r.code, 0, "%s", r.err);
    expect_report_lines(r.out);
    char v[256];
    cr_assert(report_value(r.out, "device:", v, sizeof v));
    cr_expect(!strncmp(v, "cpu (", 5), "%s", v);
    expect_bytes_and_rates(r.out, "models/stories260K.q8.bin", 3, 0);
    expect_dash(r.out, "peak GB/s:");
    expect_dash(r.out, "of peak:");
    expect_dash(r.out, "launches/step:");
    cr_expect(report_number(r.out, "memcpy GB/s:") > 0);
    cr_expect(report_number(r.out, "read GB/s:") > 0);
    cr_expect(report_number(r.out, "of read:") > 0);
    cr_expect(strstr(r.out, "other") == NULL, "no comparison asked: %s", r.out);
    run_free(&r);
    r = run_prog(bin, (const char *[]){"speed", mp, "--device", "cpu", "-t", "1", "-p", "0", "-n", "3", "--runs", "1",
                                       "--peak-gbps", "20", NULL});
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect_eq(report_number(r.out, "peak GB/s:"), 20.0);
    expect_bytes_and_rates(r.out, "models/stories260K.q8.bin", 3, 20.0);
    run_free(&r);
    // -d: the tests after 8 positions, said in their lines; the KV bytes count the depth's keys
    r = run_prog(bin, (const char *[]){"speed", mp, "--device", "cpu", "-t", "1", "-p", "4", "-n", "3", "--runs", "1",
                                       "-d", "8", NULL});
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "prefill pp4 @ d8:") && strstr(r.out, "decode tg3 @ d8:"), "%s", r.out);
    char kv[256];
    cr_assert(report_value(r.out, "KV cache:", kv, sizeof kv), "%s", r.out);
    cr_expect(strstr(kv, "x 4 B x 10.0 keys (mean of tg3: depth + (n+1)/2)") != NULL, "%s", kv);
    cr_expect_eq(report_number(r.out, "bytes/token:"), expected_bytes_per_token("models/stories260K.q8.bin", 3, 8, 4));
    run_free(&r);
}
