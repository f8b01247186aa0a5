// sampler_bench.c — one run of `bench sampler` and its report (sampler_bench.h).
#include "tools/bench/sampler_bench.h"

#include <stdio.h>
#include <string.h>

#include "runtime/entropix_sampler.h"
#include "runtime/generate.h"

int emx_bench_sampler_run(EmxState *st, EmxTokenizer *tk, const EmxModel *model, const EmxProfile *profile,
                          const int *ids, int n_ids, int n, int k, int r, double *tps, double *spt) {
    static const char *names[3] = {"greedy", "entropix", "greedy, steps in turn"};
    char err[512];
    EmxBasicSampler greedy = {0};
    EmxEntropixSampler es = {0};
    EmxSampler *s;
    EmxSamplerParams gp = {.temperature = 0.0f};
    int rc = k != 1 ? emx_basic_sampler_init(&greedy, &gp, 1, (int)model->cfg.vocab_size, err, sizeof err)
                    : emx_entropix_sampler_init(&es, profile, model, tk, emx_state_ctx(st),
                                                (uint64_t)(r + 1), err, sizeof err);
    if (rc != 0) {
        fprintf(stderr, "bench: %s\n", err);
        return -1;
    }
    s = k != 1 ? &greedy.base : &es.base;
    EmxGenerateOptions go = {.n_predict = n, .ignore_stop = 1, .steps_in_turn = k == 2};
    EmxGenerateStats gs;
    rc = emx_generate(st, tk, ids, n_ids, s, &go, &gs, err, sizeof err);
    emx_basic_sampler_free(&greedy);
    emx_entropix_sampler_free(&es);
    if (rc != 0) {
        fprintf(stderr, "bench: %s\n", err);
        return -1;
    }
    *tps = gs.n_generated / gs.decode_s;
    *spt = 1e3 * gs.sample_s / gs.n_generated;
    fprintf(stderr, "  run %d %-8s decode %7.2f tok/s, sampler %.3f ms/token\n", r + 1, names[k], *tps, *spt);
    return 0;
}

void emx_bench_sampler_report(const EmxState *st, double tg, double te, double sg, double se, double tt) {
    double ms_per_tok_g = 1e3 / tg;
    printf("sampler    decode tok/s (median)   sampler ms/token (median)\n");
    // On a GPU both samplers choose on the device (generate.c: only the id comes back), so no
    // host time is spent choosing: their cost is inside the decode tok/s, and "-" says so.
    if (sg == 0 && se == 0 && strcmp(emx_state_device(st), "cpu") != 0) {
        printf("greedy     %10.2f                       -\n", tg);
        printf("entropix   %10.2f                       -\n", te);
        printf("overhead: decode %.1f%% slower (tok/s ratio %.3f); the tokens are chosen on %s, inside the "
               "decode step (%.2f ms greedy)\n",
               100.0 * (tg / te - 1.0), te / tg, emx_state_device(st), ms_per_tok_g);
        if (tt > 0)  // the same greedy decode, each step's token read before the next is queued
            printf("queued ahead: greedy %.2f tok/s, with its steps in turn %.2f (ratio %.3f: %.2f us a token "
                   "saved)\n",
                   tg, tt, tg / tt, 1e6 / tt - 1e6 / tg);
    } else {
        printf("greedy     %10.2f              %10.3f\n", tg, sg);
        printf("entropix   %10.2f              %10.3f\n", te, se);
        printf("overhead: decode %.1f%% slower (tok/s ratio %.3f); sampler cost +%.3f ms/token = %.1f%% "
               "of a greedy decode step (%.2f ms)\n",
               100.0 * (tg / te - 1.0), te / tg, se - sg, 100.0 * (se - sg) / ms_per_tok_g, ms_per_tok_g);
    }
}

