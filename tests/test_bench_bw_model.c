// test_bench_bw_model.c — the decode step's bandwidth model of `bench speed`
// (tools/bench/bandwidth_model.h): its bytes from the model file's tensor table and shapes, the
// KV cache at its element size, the printed block's arithmetic, and the block in a CPU report.
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/bench/bandwidth_model.h"
#include "bench_report_util.h"
#include "run_util.h"
#include "test_util.h"

// ---------------------------------------------------------------------------------------------
// The bandwidth model (tools/bench/bandwidth_model.h): a pure function of the model file.

static void open_test_model(EmxModel *m, const char *rel) {
    char mp[1024], err[256];
    test_build_path(mp, sizeof mp, rel);
    cr_assert_eq(emx_model_open(m, mp, err, sizeof err), 0, "%s (make test-models)", err);
}

// Its weights are what the bytes/token line counts (the model file's tensor table, through
// emx_model_weight_bytes_per_token), its totals the sums of its rows, for every dtype.
Test(bench, bw_model_weights_are_the_tensor_table) {
    const char *models[] = {"models/stories260K.f32.bin", "models/stories260K.q8.bin", "models/llama3-tiny.q8.bin"};
    for (size_t k = 0; k < sizeof models / sizeof models[0]; k++) {
        EmxModel m;
        open_test_model(&m, models[k]);
        EmxBwModel bm;
        emx_bw_model(&m, 7, 4, &bm);
        cr_expect_eq(bm.weight_bytes, emx_model_weight_bytes_per_token(&m), "%s: %llu vs %llu", models[k],
                     (unsigned long long)bm.weight_bytes, (unsigned long long)emx_model_weight_bytes_per_token(&m));
        uint64_t w = 0, kv = 0, act = 0;
        for (int i = 0; i < bm.n_rows; i++) {
            w += bm.rows[i].weight_bytes, kv += bm.rows[i].kv_bytes, act += bm.rows[i].act_bytes;
            cr_expect(bm.rows[i].n_layers == 0 || bm.rows[i].n_layers == m.cfg.n_layers);
        }
        cr_expect(w == bm.weight_bytes && kv == bm.kv_bytes && act == bm.act_bytes && act > 0);
        cr_expect_eq(bm.total_bytes, w + kv + act);
        emx_model_close(&m);
    }
}

// The KV cache read grows by one position's keys and values per position, nothing else does
// but the score rows: p vs 2p differ by exactly p x n_layers x kv_dim x 2 x E B of KV, E = 4 for
// an f32 cache and 2 for an f16 one; the f16 cache's KV bytes are half the f32 cache's, and
// nothing else differs.
Test(bench, bw_model_kv_linear_in_position) {
    EmxModel m;
    open_test_model(&m, "models/llama3-tiny.q8.bin");
    const int elems[] = {4, 2};
    for (int e = 0; e < 2; e++) {
        const int E = elems[e];
        const uint64_t per_pos = (uint64_t)m.cfg.n_layers * m.cfg.n_kv_heads * m.cfg.head_dim * 2 * (uint64_t)E;
        cr_expect_eq(emx_bw_kv_bytes_per_position(&m.cfg, E), per_pos);
        const int ps[] = {0, 1, 5, 100};
        for (size_t k = 0; k < sizeof ps / sizeof ps[0]; k++) {
            const int p = ps[k];
            EmxBwModel a, b, c, f32;
            emx_bw_model(&m, p, E, &a);
            emx_bw_model(&m, p + 1, E, &b);
            emx_bw_model(&m, 2 * p, E, &c);
            emx_bw_model(&m, p, 4, &f32);
            cr_expect_eq(a.kv_elem_bytes, E);
            cr_expect_eq(b.kv_bytes - a.kv_bytes, per_pos, "E %d p %d", E, p);
            cr_expect_eq(c.kv_bytes - a.kv_bytes, (uint64_t)p * per_pos, "E %d p %d", E, p);
            cr_expect_eq(c.weight_bytes, a.weight_bytes);
            // the step at p reads p + 1 positions and writes one (rope + KV write)
            cr_expect_eq(a.kv_bytes, (uint64_t)(p + 2) * per_pos, "E %d p %d", E, p);
            cr_expect_eq(a.kv_bytes * (uint64_t)(4 / E), f32.kv_bytes, "E %d p %d", E, p);
            cr_expect(a.weight_bytes == f32.weight_bytes && a.act_bytes == f32.act_bytes, "E %d p %d", E, p);
        }
    }
    emx_model_close(&m);
}

// The printed block: every row's µs is its bytes at the device's peak, the rows add up to the
// total, and the bound and ceiling follow from it; on each named device.
Test(bench, bw_model_printed_us_are_bytes_over_peak) {
    cr_expect(fabs(emx_bw_us(3350000000ull, 3350) - 1e3) < 1e-9);  // 3.35 GB at 3350 GB/s: 1 ms
    cr_expect_null(emx_bw_device("b200"));
    char names[256];
    emx_bw_device_names(names, sizeof names);
    cr_expect_str_eq(names, "h100-sxm, h100-pcie, h200, a100-80gb, a100-40gb, l40s, rtx4090");
    EmxModel m;
    open_test_model(&m, "models/llama3-tiny.q8.bin");
    EmxBwModel bm;
    emx_bw_model(&m, 3, 4, &bm);
    const char *devs[] = {"h100-sxm", "rtx4090"};
    const double peaks[] = {3350, 1008};
    for (int k = 0; k < 2; k++) {
        const EmxBwDevice *d = emx_bw_device(devs[k]);
        cr_assert_not_null(d);
        cr_expect_eq(d->peak_gbps, peaks[k]);
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        emx_bw_model_print(f, &bm, d, "");
        fclose(f);
        char head[128];
        snprintf(head, sizeof head, "bandwidth model (a lower bound at %s's peak %.0f GB/s, not a measurement)",
                 d->label, d->peak_gbps);
        cr_expect(!strncmp(buf, head, strlen(head)), "%s", buf);
        uint64_t sum = 0;
        int rows = 0;
        for (const char *l = strchr(buf, '\n') + 1; l && !strncmp(l, "  ", 2); l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
            const char *nums = l + 2 + 40;  // past the kernel column
            unsigned long long b;
            double us;
            if (sscanf(nums, "%llu %lf", &b, &us) != 2) continue;  // the header row
            rows++;
            sum += b;
            cr_expect(fabs(us - (double)b / (d->peak_gbps * 1e3)) <= 0.0005, "[%.*s]", (int)strcspn(l, "\n"), l);
        }
        cr_expect_eq(rows, bm.n_rows, "%s", buf);
        cr_expect_eq(sum, bm.total_bytes, "%s", buf);
        cr_expect_eq((uint64_t)report_number(buf, "model bytes/step:"), bm.total_bytes);
        const double bound = report_number(buf, "model bound:"), want = (double)bm.total_bytes / (d->peak_gbps * 1e3);
        cr_expect(fabs(bound - want) <= 0.0005, "%g vs %g", bound, want);
        cr_expect(fabs(report_number(buf, "model ceiling:") - 1e6 / want) <= 0.05 + 1e-6 * 1e6 / want, "%s", buf);
        free(buf);
    }
    emx_model_close(&m);
}

// `bench speed`: the block with --bandwidth-model on the CPU (at the mean position of the tg
// run, rounded down), on the device --model-device names; none without the flag; an unknown
// device is a usage error that lists the names.
Test(bench, bw_model_in_cpu_speed_report, .timeout = 300) {
    char bin[1024], mp[1024];
    test_build_path(bin, sizeof bin, "cpu/tools/bench");
    test_build_path(mp, sizeof mp, "models/stories260K.q8.bin");
    if (access(bin, X_OK) != 0) cr_assert_fail("%s is not built", bin);
    expect_error_prog(bin, (const char *[]){"speed", mp, "--model-device", "b200", NULL}, 2,
                      "bench: --model-device: unknown device 'b200' (known: h100-sxm, h100-pcie, h200, a100-80gb, "
                      "a100-40gb, l40s, rtx4090)");
    EmxModel m;
    open_test_model(&m, "models/stories260K.q8.bin");
    EmxBwModel bm;
    emx_bw_model(&m, 2, 4, &bm);  // tg6: positions 0..5, mean 2.5
    emx_model_close(&m);
    RunResult r = run_prog(bin, (const char *[]){"speed", mp, "--device", "cpu", "-t", "1", "-p", "4", "-n", "6",
                                                 "--runs", "1", "--bandwidth-model", NULL});
    cr_assert_eq(r.code, 0, "%s", r.err);
    expect_report_lines(r.out);
    cr_expect(strstr(r.out, "\nbandwidth model (a lower bound at H100 SXM's peak 3350 GB/s, not a measurement): "
                            "decode step at position 2 (the mean of tg6's 0..5, rounded down)\n") != NULL,
              "%s", r.out);
    cr_expect_eq((uint64_t)report_number(r.out, "model bytes/step:"), bm.total_bytes, "%s", r.out);
    cr_expect(strstr(r.out, "\n  attention x 5 layers ") && strstr(r.out, "\n  classifier matvec "), "%s", r.out);
    run_free(&r);
    // an f16 cache: its elements counted at 2 bytes
    EmxModel m16;
    open_test_model(&m16, "models/stories260K.q8.bin");
    EmxBwModel bm16;
    emx_bw_model(&m16, 2, 2, &bm16);
    emx_model_close(&m16);
    r = run_prog(bin, (const char *[]){"speed", mp, "--device", "cpu", "-t", "1", "-p", "4", "-n", "6", "--runs", "1",
                                       "--cache-type", "f16", "--bandwidth-model", NULL});
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(bm16.kv_bytes * 2 == bm.kv_bytes && bm16.total_bytes < bm.total_bytes);
    cr_expect_eq((uint64_t)report_number(r.out, "model bytes/step:"), bm16.total_bytes, "%s", r.out);
    char kvline[128];
    snprintf(kvline, sizeof kvline, "+ KV cache %llu (f16) +", (unsigned long long)bm16.kv_bytes);
    cr_expect(strstr(r.out, kvline), "want [%s] in %s", kvline, r.out);
    run_free(&r);
    r = run_prog(bin, (const char *[]){"speed", mp, "--device", "cpu", "-t", "1", "-p", "0", "-n", "2", "--runs", "1",
                                       "--model-device", "h200", "--bandwidth-model", NULL});
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "bandwidth model (a lower bound at H200's peak 4800 GB/s, not a measurement)"), "%s", r.out);
    run_free(&r);
    r = run_prog(bin, (const char *[]){"speed", mp, "--device", "cpu", "-t", "1", "-p", "0", "-n", "2", "--runs", "1",
                                       NULL});
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "bandwidth model") == NULL, "a CPU run without the flag: %s", r.out);
    run_free(&r);
}
