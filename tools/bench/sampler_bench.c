// sampler_bench.c — the rounds of `bench sampler` and their report (sampler_bench.h).
#include "tools/bench/sampler_bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/entropix_sampler.h"
#include "runtime/generate.h"
#include "sampler/calibrate.h"

// The samplers a round runs, in this order (the last on a GPU only).
typedef enum {
    EMX_BENCH_GREEDY,
    EMX_BENCH_ENTROPIX,   // seeded with the run's number + 1
    EMX_BENCH_COMBINED,   // the CLI's defaults (T 0.8, top-k 40, top-p 0.95, min-p 0.05), same seed
    EMX_BENCH_IN_TURN,    // greedy, each step's token read before the next step is queued
                          // (EmxGenerateOptions.steps_in_turn): what queuing ahead saves
    EMX_BENCH_SAMPLERS
} EmxBenchSampler;

static const char *const sampler_names[EMX_BENCH_SAMPLERS] = {
    [EMX_BENCH_GREEDY] = "greedy", [EMX_BENCH_ENTROPIX] = "entropix", [EMX_BENCH_COMBINED] = "combined",
    [EMX_BENCH_IN_TURN] = "greedy, steps in turn"};

// One decode with sampler k in run r: its decode tok/s (*tps) and host ms a token choosing (*spt).
static int sampler_run(EmxState *st, EmxTokenizer *tk, const EmxModel *model, const EmxProfile *profile,
                       const int *ids, int n_ids, int n, EmxBenchSampler k, int r, double *tps, double *spt) {
    char err[512];
    EmxBasicSampler basic = {0};
    EmxEntropixSampler es = {0};
    EmxSamplerParams params = k == EMX_BENCH_COMBINED ? EMX_SAMPLER_PARAMS_DEFAULT : (EmxSamplerParams){.temperature = 0};
    const uint64_t seed = (uint64_t)(r + 1);
    int rc = k == EMX_BENCH_ENTROPIX
                 ? emx_entropix_sampler_init(&es, profile, model, tk, emx_state_ctx(st), seed, err, sizeof err)
                 : emx_basic_sampler_init(&basic, &params, seed, (int)model->cfg.vocab_size, err, sizeof err);
    if (rc != 0) {
        fprintf(stderr, "bench: %s\n", err);
        return -1;
    }
    EmxSampler *s = k == EMX_BENCH_ENTROPIX ? &es.base : &basic.base;
    EmxGenerateOptions go = {.n_predict = n, .ignore_stop = 1, .steps_in_turn = k == EMX_BENCH_IN_TURN};
    EmxGenerateStats gs;
    rc = emx_generate(st, tk, ids, n_ids, s, &go, &gs, err, sizeof err);
    emx_basic_sampler_free(&basic);
    emx_entropix_sampler_free(&es);
    if (rc != 0) {
        fprintf(stderr, "bench: %s\n", err);
        return -1;
    }
    *tps = gs.n_generated / gs.decode_s;
    *spt = 1e3 * gs.sample_s / gs.n_generated;
    fprintf(stderr, "  run %d %-8s decode %7.2f tok/s, sampler %.3f ms/token\n", r + 1, sampler_names[k], *tps, *spt);
    return 0;
}

// The table of medians (tps, spt: indexed by EmxBenchSampler; kinds: how many ran) and the overheads.
static void sampler_report(const EmxState *st, const double *tps, const double *spt, int kinds) {
    const double tg = tps[EMX_BENCH_GREEDY], ms_per_tok_g = 1e3 / tg;
    // On a GPU every sampler chooses on the device (generate.c: only the id comes back), so no
    // host time is spent choosing: the cost is inside the decode tok/s, and "-" says so.
    const int on_device = spt[EMX_BENCH_ENTROPIX] == 0 && spt[EMX_BENCH_COMBINED] == 0 &&
                          strcmp(emx_state_device(st), "cpu") != 0;
    printf("sampler    decode tok/s (median)   sampler ms/token (median)\n");
    for (int k = EMX_BENCH_GREEDY; k <= EMX_BENCH_COMBINED; k++)
        if (on_device)
            printf("%-10s %10.2f                       -\n", sampler_names[k], tps[k]);
        else
            printf("%-10s %10.2f              %10.3f\n", sampler_names[k], tps[k], spt[k]);
    // "overhead:" is entropix's, "combined:" the fixed sampler's, each against greedy
    for (int k = EMX_BENCH_ENTROPIX; k <= EMX_BENCH_COMBINED; k++) {
        printf("%s: decode %.1f%% slower (tok/s ratio %.3f); ", k == EMX_BENCH_ENTROPIX ? "overhead" : "combined",
               100.0 * (tg / tps[k] - 1.0), tps[k] / tg);
        if (on_device)
            printf("the tokens are chosen on %s, inside the decode step (%.2f ms greedy)\n", emx_state_device(st),
                   ms_per_tok_g);
        else
            printf("sampler cost +%.3f ms/token = %.1f%% of a greedy decode step (%.2f ms)\n",
                   spt[k] - spt[EMX_BENCH_GREEDY], 100.0 * (spt[k] - spt[EMX_BENCH_GREEDY]) / ms_per_tok_g,
                   ms_per_tok_g);
    }
    if (kinds > EMX_BENCH_IN_TURN) {  // the same greedy decode, each step's token read before the next is queued
        const double tt = tps[EMX_BENCH_IN_TURN];
        printf("queued ahead: greedy %.2f tok/s, with its steps in turn %.2f (ratio %.3f: %.2f us a token saved)\n",
               tg, tt, tg / tt, 1e6 / tt - 1e6 / tg);
    }
}

int emx_bench_sampler_rounds(EmxState *st, EmxTokenizer *tk, const EmxModel *model, const EmxProfile *profile,
                             const int *ids, int n_ids, int n, int runs) {
    // greedy with its steps in turn on a GPU only: a CPU step has nothing queued ahead
    const int kinds = emx_device_is_cpu(emx_state_device(st)) ? EMX_BENCH_IN_TURN : EMX_BENCH_SAMPLERS;
    double *tps = calloc(2 * EMX_BENCH_SAMPLERS * (size_t)runs, sizeof(double));  // [sampler][run]
    if (!tps) {
        fprintf(stderr, "bench: out of memory\n");
        return -1;
    }
    double *spt = tps + EMX_BENCH_SAMPLERS * (size_t)runs;
    for (int r = 0; r < runs; r++)
        for (int k = 0; k < kinds; k++)
            if (sampler_run(st, tk, model, profile, ids, n_ids, n, (EmxBenchSampler)k, r, &tps[k * runs + r],
                            &spt[k * runs + r])) {
                free(tps);
                return -1;
            }
    double tps_median[EMX_BENCH_SAMPLERS] = {0}, spt_median[EMX_BENCH_SAMPLERS] = {0};
    for (int k = 0; k < kinds; k++)  // numpy's median (the mean of the middle two for an even count)
        tps_median[k] = emx_percentile(tps + k * runs, (size_t)runs, 50.0),
        spt_median[k] = emx_percentile(spt + k * runs, (size_t)runs, 50.0);
    sampler_report(st, tps_median, spt_median, kinds);
    free(tps);
    return 0;
}
