// result.h — a benchmark result as a small JSON file, to compare a build with a saved one
// (the regression guard: `bench run ... --save base.json`, later `--baseline base.json`).
#ifndef ENTROPIX_BENCH_RESULT_H
#define ENTROPIX_BENCH_RESULT_H

#include <stddef.h>
#include <stdio.h>

typedef struct {
    char model[512];
    char device[32];        // "cpu", "cuda:0" (files from before devices: "", read as "cpu")
    char device_desc[128];  // the GPU's name; the CPU's SIMD kernels
    char cpu[128];
    char simd[32];
    int threads, n_prompt, n_gen;
    int depth;              // tokens of context before each test (absent in older files: 0)
    char cache_type[8];     // the KV cache's elements, "f32" or "f16" (older files: "f32")
    double prefill_tps, decode_tps;  // medians
    double memcpy_gbs;
    double read_gbs;  // the read pass's median over the rounds (machine.h); 0: not measured
} EmxBenchResult;

// Writes r as one JSON object. Returns 0, or -1 with a reason.
int emx_bench_result_save(const char *path, const EmxBenchResult *r, char *err, size_t errlen);

// Reads a file written by emx_bench_result_save. Returns 0, or -1 with a reason naming the file
// and the missing or bad field.
int emx_bench_result_load(const char *path, EmxBenchResult *r, char *err, size_t errlen);

// Prints how `now` compares with `base`: ratios and percentages for prefill and decode, and a
// warning line when the runs differ in model, threads, sizes or CPU (the ratio then means little).
void emx_bench_result_compare(FILE *f, const EmxBenchResult *now, const EmxBenchResult *base);

#endif
