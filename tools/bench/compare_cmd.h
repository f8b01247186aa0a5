// compare_cmd.h — any other runtime as the comparison, through a shell command given on the
// command line (`bench speed ... --compare-cmd "CMD"`). The command decodes with that runtime
// and prints its decode speed; we read the figure and report ours / theirs.
//
// Contract: CMD runs as `/bin/sh -c CMD`, once per round (alternating with ours), with the run's
// sizes in its environment so it can measure the same thing:
//   EMX_BENCH_N_PROMPT  -p,   EMX_BENCH_N_GEN  -n,   EMX_BENCH_THREADS  -t (resolved),
//   EMX_BENCH_DEVICE    "cpu" or "cuda:N" (where ours runs)
// It must exit 0 and print, somewhere on stdout, its decode speed as a number followed by a
// unit: `tok/s`, `tokens/s` or `t/s` ("tg128: 55.3 tok/s"; llama.cpp's llama-cli prints
// "... 55.30 tokens per second" — use its llama-bench through --llama-bench instead). When
// several figures are printed, the last one counts.
#ifndef ENTROPIX_BENCH_COMPARE_CMD_H
#define ENTROPIX_BENCH_COMPARE_CMD_H

#include <stddef.h>

// The last "<number> tok/s|tokens/s|t/s" in text. Returns 0, or -1 with a reason.
int emx_compare_parse_tps(const char *text, double *tps, char *err, size_t errlen);

typedef struct {
    int n_prompt, n_gen, threads;
    const char *device;  // "cpu", "cuda:0"
} EmxCompareRun;

// Runs cmd once (contract above) and reads its decode tok/s. Returns 0, or -1 with a reason
// (cannot start, non-zero exit with its last stderr line, no figure in its output).
int emx_compare_cmd_run(const char *cmd, const EmxCompareRun *run, double *tps, char *err, size_t errlen);

#endif
