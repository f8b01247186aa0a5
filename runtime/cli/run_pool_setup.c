// run_pool_setup.c — the agent pool's layout, critic and options from ./run's flags (run_pool.h),
// one code path for ./run --sampler agents and tools/eval's agents configurations.
#include "runtime/cli/run_pool.h"

#include <stdio.h>

#include "base/errmsg.h"

int emx_run_pool_setup(const EmxCliArgs *a, EmxRunPoolSetup *s, char *err, size_t errlen) {
    // --devices: cpu, or one worker per listed GPU
    s->n_devices = emx_pool_parse_devices(a->devices, s->cuda_devices, EMX_POOL_MAX_AGENTS, err, errlen);
    if (s->n_devices < 0) return 2;
    const int n_gpus = s->n_devices > 0 ? emx_pool_gpu_count() : 0;
    if (n_gpus < 0)
        return emx_seterr(err, errlen, "--devices %s: this build has no CUDA backend, so the agent pool runs on the "
                          "CPU only (make builds it in when nvcc is found, unless CUDA=0)", a->devices), 2;
    // one worker per GPU: --workers may only repeat the count (1 is the default, not a choice)
    if (s->n_devices > 0 && a->workers != 1 && a->workers != s->n_devices)
        return emx_seterr(err, errlen, "--workers %d with --devices %s: one worker per device (%d), leave --workers out",
                          a->workers, a->devices, s->n_devices), 2;
    s->n_workers = s->n_devices > 0 ? s->n_devices : a->workers;
    snprintf(s->critic_device, sizeof s->critic_device, "cpu");  // the critic runs on rank 0, beside worker 0
    if (s->n_devices > 0) snprintf(s->critic_device, sizeof s->critic_device, "cuda:%d", s->cuda_devices[0]);
    s->n_agents = a->n_agents;
    if (a->agent_configs) {
        s->n_agents = emx_pool_parse_configs(a->agent_configs, s->agents, EMX_POOL_MAX_AGENTS, err, errlen);
        if (s->n_agents < 0) return 2;
    } else {
        emx_pool_default_configs(s->agents, s->n_agents);
    }
    if (s->n_workers > s->n_agents) {
        if (s->n_devices > 0)
            return emx_seterr(err, errlen, "--devices %s: %d devices for %d agents (one worker per device, at least one "
                              "agent each)", a->devices, s->n_devices, s->n_agents), 2;
        return emx_seterr(err, errlen, "--workers %d is more than the %d agents", a->workers, s->n_agents), 2;
    }
    // the machine last: every usage error (exit 2) is named whatever GPUs this machine has
    for (int i = 0; i < s->n_devices; i++)
        if (s->cuda_devices[i] >= n_gpus)
            return emx_seterr(err, errlen, "--devices %s: no GPU cuda:%d (this machine has %d)", a->devices,
                              s->cuda_devices[i], n_gpus), 1;
    return 0;
}

EmxCritic *emx_run_pool_critic(const EmxCliArgs *a, const EmxRunPoolSetup *s, const EmxModel *m,
                               const EmxTokenizer *tk, int threads, char *err, size_t errlen) {
    EmxCriticOptions co = {.margin = a->critic_margin, .n_threads = threads, .device = s->critic_device};
    return a->critic_model ? emx_critic_open(a->critic_model, &co, err, errlen) : emx_critic_new(m, tk, &co, err, errlen);
}

EmxPoolOptions emx_run_pool_options(const EmxCliArgs *a, const EmxRunPoolSetup *s, int threads, int ctx,
                                    uint64_t seed, int n_predict, EmxCritic *critic) {
    return (EmxPoolOptions){.agents = s->agents, .n_agents = s->n_agents, .lookahead = a->lookahead,
                            .n_workers = s->n_workers, .cuda_devices = s->n_devices > 0 ? s->cuda_devices : NULL,
                            .cache_type = a->cache_type,
                            .n_threads = threads > 0 ? (threads + s->n_workers - 1) / s->n_workers : 0,
                            .ctx = ctx, .seed = seed, .n_predict = n_predict,
                            .critic = a->check_every > 0 ? critic : NULL, .check_every = a->check_every,
                            .rollback = a->rollback, .max_rollbacks = a->max_rollbacks,
                            .critic_window = a->critic_window};
}
