// llama_bench.h — running llama.cpp's llama-bench as the comparison runtime and reading its
// result. llama-bench is built from the llama.cpp vendored in the llama-cpp-python sdist
// (docs/benchmarking.md); it runs on the GGUF of the same model.
//
// It is run as:  LLAMA_BENCH -m GGUF -t THREADS -ngl N_GPU_LAYERS -p N_PROMPT -n N_GEN -r 1 -o jsonl
// with -ngl 0 when ours runs on the CPU and -ngl 99 (every layer) when ours runs on a GPU, so
// both runtimes use the same device (a llama.cpp built with CUDA picks its GPUs itself: set
// CUDA_VISIBLE_DEVICES to the one ours uses).
// and prints one JSON object per test; the pp test has n_prompt > 0, n_gen == 0, the tg test
// n_prompt == 0, n_gen > 0; their "avg_ts" is tokens/s.
#ifndef ENTROPIX_BENCH_LLAMA_BENCH_H
#define ENTROPIX_BENCH_LLAMA_BENCH_H

#include <stddef.h>

#include "tools/bench/forward_bench.h"

// Reads llama-bench's JSONL output text into out (fields it lacks stay 0). Returns 0, or -1
// with a reason if no line is a result object.
int emx_llama_bench_parse(const char *jsonl, EmxForwardSpeed *out, char *err, size_t errlen);

// Runs llama-bench once (command line above) and parses its stdout. Returns 0, or -1 with a
// reason (cannot start, non-zero exit with its last stderr line, unreadable output).
int emx_llama_bench_run(const char *llama_bench, const char *gguf, int threads, int n_gpu_layers,
                        int n_prompt, int n_gen, EmxForwardSpeed *out, char *err, size_t errlen);

#endif
