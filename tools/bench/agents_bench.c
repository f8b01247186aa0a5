// agents_bench.c — the runs of `bench agents` (agents_bench.h).
#include "tools/bench/agents_bench.h"

#include <stdio.h>

#include "base/errmsg.h"
#include "sampler/calibrate.h"
#include "runtime/generate.h"
#include "sampler/sample.h"

int emx_bench_pool_devices(const char *devices, int *cuda_devices, int *n_devices_out, int *workers, int n_agents,
                           char *err, size_t errlen) {
    const int n_devices = emx_pool_parse_devices(devices, cuda_devices, EMX_POOL_MAX_AGENTS, err, errlen);
    if (n_devices < 0) return -1;
    *n_devices_out = n_devices;
    int pool_rows = EMX_AGENTS_ROWS;
    if (n_devices > 0) {
        const int n_gpus = emx_pool_gpu_count();
        if (n_gpus < 0) {
            pool_rows = 1;
            printf("note: the agent pool cannot run on %s in this build (no CUDA backend or NCCL group): its rows are "
                   "skipped\n", devices);
        }
        for (int i = 0; i < n_devices && n_gpus >= 0; i++)
            if (cuda_devices[i] >= n_gpus)
                return emx_seterr(err, errlen, "--devices %s: no GPU cuda:%d (this machine has %d)", devices,
                                  cuda_devices[i], n_gpus);
        if (*workers != 1 && *workers != n_devices)
            return emx_seterr(err, errlen, "--workers %d with --devices %s: one worker per GPU (%d)", *workers,
                              devices, n_devices);
        *workers = n_devices;
        if (*workers > n_agents)
            return emx_seterr(err, errlen, "--devices %s: %d GPUs for %d agents (a worker per GPU)", devices,
                              *workers, n_agents);
    }
    return pool_rows;
}

int emx_bench_agents_run(EmxState *st, const EmxModel *model, const EmxTokenizer *tk, const int *ids, int n_ids,
                         int n, int row, int seed, const EmxPoolOptions *pool, EmxAgentsRun *out, char *err,
                         size_t errlen) {
    double decode_s = 0;
    int generated = 0, rc;
    *out = (EmxAgentsRun){0};
    if (row == EMX_AGENTS_SINGLE) {
        EmxBasicSampler greedy = {0};
        EmxSamplerParams gp = {.temperature = 0.0f};
        if (emx_basic_sampler_init(&greedy, &gp, 1, (int)model->cfg.vocab_size, err, errlen) != 0) return -1;
        EmxGenerateOptions go = {.n_predict = n, .ignore_stop = 1};
        EmxGenerateStats gs;
        rc = emx_generate(st, tk, ids, n_ids, &greedy.base, &go, &gs, err, errlen);
        emx_basic_sampler_free(&greedy);
        decode_s = gs.decode_s;
        generated = gs.n_generated;
    } else {
        EmxPoolOptions po = *pool;
        if (row != EMX_AGENTS_LOOKAHEAD) po.lookahead = 1;
        if (row != EMX_AGENTS_CRITIC) po.critic = NULL, po.check_every = 0;
        po.seed = (uint64_t)seed;
        EmxPoolStats ps;
        rc = emx_pool_generate(model, tk, ids, n_ids, &po, &ps, NULL, NULL, err, errlen);
        decode_s = ps.decode_s;
        generated = ps.n_generated;
        out->n_checks = ps.n_checks;
        out->critic_share = decode_s > 0 ? ps.critic_s / decode_s : 0;
    }
    if (rc != 0) return -1;
    // the first token comes from the prefill's logits: n - 1 decode steps, as emx_generate counts
    out->tok_s = generated / decode_s;
    return 0;
}

void emx_bench_agents_names(char (*names)[48], int n_agents, int lookahead, int check_every) {
    snprintf(names[EMX_AGENTS_SINGLE], 48, "single stream (greedy)");
    snprintf(names[EMX_AGENTS_L1], 48, "%d agents, lookahead 1", n_agents);
    snprintf(names[EMX_AGENTS_LOOKAHEAD], 48, "%d agents, lookahead %d", n_agents, lookahead);
    snprintf(names[EMX_AGENTS_CRITIC], 48, "%d agents, lookahead 1, critic every %d", n_agents, check_every);
}

void emx_bench_agents_table(const EmxAgentsRun *res, int runs, int rows, const char (*names)[48], double *tps,
                            double *shares) {
    double t[EMX_AGENTS_ROWS], share[EMX_AGENTS_ROWS];
    for (int k = 0; k < rows; k++) {
        for (int r = 0; r < runs; r++)
            tps[r] = res[r * EMX_AGENTS_ROWS + k].tok_s, shares[r] = res[r * EMX_AGENTS_ROWS + k].critic_share;
        t[k] = emx_percentile(tps, (size_t)runs, 50.0), share[k] = emx_percentile(shares, (size_t)runs, 50.0);
    }
    printf("configuration                            decode tok/s (median)   vs single stream\n");
    for (int k = 0; k < rows; k++)
        printf("%-38s   %10.2f              %.3f (%+.1f%% time per token)\n", names[k], t[k], t[k] / t[0],
               100.0 * (t[0] / t[k] - 1.0));
    if (rows > EMX_AGENTS_CRITIC)
        printf("critic: %d judgments a run, %.1f%% of the pool's decode time (median; verdicts forced GOOD)\n",
               res[EMX_AGENTS_CRITIC].n_checks, 100.0 * share[EMX_AGENTS_CRITIC]);
}
