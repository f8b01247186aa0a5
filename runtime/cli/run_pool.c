// run_pool.c — ./run --sampler agents (run_pool.h).
#include "runtime/cli/run_pool.h"
#include "runtime/cli/run_report.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/pool/critic.h"
#include "runtime/run_io.h"
#include "runtime/pool/pool_generate.h"
#include "sampler/rng.h"

// CPU workers: do their replicas (and a critic over the same model, on the CPU beside them) fit
// the memory there is? Checked before any is allocated; GPUs check their own.
static int check_pool_memory(const EmxCliArgs *a, const EmxModel *m, int ctx, int n_workers, char *err, size_t errlen) {
    const int cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    int per = a->threads > 0 ? (a->threads + n_workers - 1) / n_workers : cores / n_workers;
    uint64_t kv = 0, need = (uint64_t)n_workers * emx_cpu_state_bytes(&m->cfg, ctx, per > 0 ? per : 1, &kv);
    kv *= (uint64_t)n_workers;
    int critic = a->check_every > 0 && !a->critic_model;  // a critic model file is sized when it is opened
    if (critic) {
        const int cctx = m->cfg.max_seq_len < 2048 ? (int)m->cfg.max_seq_len : 2048;  // critic.c's context
        uint64_t ckv = 0;
        need += emx_cpu_state_bytes(&m->cfg, cctx, a->threads > 0 ? a->threads : cores, &ckv);
        kv += ckv;
    }
    char what[96];
    snprintf(what, sizeof what, "%d worker state%s%s", n_workers, n_workers > 1 ? "s" : "",
             critic ? " and a critic state" : "");
    return emx_mem_check(need, kv, emx_mem_available(), ctx, what, err, errlen);
}

int emx_run_pool(const EmxCliArgs *a, const EmxModel *m, const EmxTokenizer *tk, const int *ids, int n_ids, int ctx,
                 volatile sig_atomic_t *interrupted) {
    char err[512];
    // --devices: cpu, or one worker per listed GPU
    int cuda_devices[EMX_POOL_MAX_AGENTS];
    const int n_devices = emx_pool_parse_devices(a->devices, cuda_devices, EMX_POOL_MAX_AGENTS, err, sizeof err);
    if (n_devices < 0) {
        fprintf(stderr, "run: %s\n", err);
        return 2;
    }
    const int n_gpus = n_devices > 0 ? emx_pool_gpu_count() : 0;
    if (n_gpus < 0) {
        fprintf(stderr,
                "run: --devices %s: this build has no CUDA backend, so the agent pool runs on the CPU only (make cuda "
                "builds build/cuda/run)\n",
                a->devices);
        return 2;
    }
    // one worker per GPU: --workers may only repeat the count (1 is the default, not a choice)
    if (n_devices > 0 && a->workers != 1 && a->workers != n_devices) {
        fprintf(stderr, "run: --workers %d with --devices %s: one worker per device (%d), leave --workers out\n",
                a->workers, a->devices, n_devices);
        return 2;
    }
    for (int i = 0; i < n_devices; i++)
        if (cuda_devices[i] >= n_gpus) {
            fprintf(stderr, "run: --devices %s: no GPU cuda:%d (this machine has %d)\n", a->devices, cuda_devices[i], n_gpus);
            return 1;
        }
    const int n_workers = n_devices > 0 ? n_devices : a->workers;
    char critic_device[24] = "cpu";  // the critic runs on rank 0, beside worker 0's replica
    if (n_devices > 0) snprintf(critic_device, sizeof critic_device, "cuda:%d", cuda_devices[0]);
    EmxAgentParams agents[EMX_POOL_MAX_AGENTS];
    int n_agents = a->n_agents;
    if (a->agent_configs) {
        n_agents = emx_pool_parse_configs(a->agent_configs, agents, EMX_POOL_MAX_AGENTS, err, sizeof err);
        if (n_agents < 0) {
            fprintf(stderr, "run: %s\n", err);
            return 2;
        }
    } else {
        emx_pool_default_configs(agents, n_agents);
    }
    if (n_workers > n_agents) {
        if (n_devices > 0)
            fprintf(stderr, "run: --devices %s: %d devices for %d agents (one worker per device, at least one agent each)\n",
                    a->devices, n_devices, n_agents);
        else
            fprintf(stderr, "run: --workers %d is more than the %d agents\n", a->workers, n_agents);
        return 2;
    }
    // MAX_TOKENS of the original design: 25000 by default, capped by the context
    int n_predict = a->n_predict_given ? a->n_predict : 25000;
    const int room = ctx - n_ids;
    if (n_predict < 0 || n_predict > room) {
        if (a->n_predict_given && n_predict >= 0) {
            fprintf(stderr, "run: -n %d is more than the %d tokens the context has room for (-c %d, prompt %d tokens)\n",
                    n_predict, room, ctx, n_ids);
            return 1;
        }
        n_predict = room;
    }

    if (n_devices == 0 && check_pool_memory(a, m, ctx, n_workers, err, sizeof err) != 0) {
        fprintf(stderr, "run: %s\n", err);
        return 1;
    }
    int status = 1;
    EmxCritic *critic = NULL;
    FILE *log = NULL, *metrics = NULL;
    EmxReport *report = NULL;
    if (a->check_every > 0) {
        EmxCriticOptions co = {.margin = a->critic_margin, .n_threads = a->threads, .device = critic_device};
        critic = a->critic_model ? emx_critic_open(a->critic_model, &co, err, sizeof err)
                                 : emx_critic_new(m, tk, &co, err, sizeof err);
        if (!critic) {
            fprintf(stderr, "run: critic: %s\n", err);
            goto out;
        }
    }
    if (a->log_path && !(log = fopen(a->log_path, "w"))) {
        fprintf(stderr, "run: --log %s: %s\n", a->log_path, strerror(errno));
        goto out;
    }
    if (a->metrics_path && !(metrics = fopen(a->metrics_path, "w"))) {
        fprintf(stderr, "run: --metrics %s: %s\n", a->metrics_path, strerror(errno));
        goto out;
    }
    if (!a->n_predict_given && n_predict < 25000)
        fprintf(stderr, "run: agents: -n 25000 capped to %d by the context (%d, prompt %d tokens)\n", room, ctx, n_ids);
    uint64_t seed = a->seed_given ? a->seed : emx_rng_seed_from_time();
    if (!a->seed_given)
        fprintf(stderr, "seed: %" PRIu64 " (time-based; -s %" PRIu64 " reproduces this run)\n", seed, seed);
    if (log) {
        fprintf(log, "# entropix.c agent pool: model %s, %d agents, lookahead %d, %d worker(s)", a->model_path, n_agents,
                a->lookahead, n_workers);
        if (n_devices > 0) fprintf(log, " on %s", a->devices);
        fprintf(log, ", seed %" PRIu64 "\n", seed);
        fprintf(log, "# critic: %s, check every %d, window %d, margin %g, rollback %d, max rollbacks %d\n",
                critic ? (a->critic_model ? a->critic_model : "same model") : "off", a->check_every, a->critic_window,
                (double)a->critic_margin, a->rollback, a->max_rollbacks);
        fprintf(log, "# agents:");
        for (int i = 0; i < n_agents; i++)
            fprintf(log, " %d=T%.2f/k%d", i, (double)agents[i].temperature, agents[i].top_k);
        fprintf(log, "\n");
        fflush(log);
    }
    EmxPoolOptions po = {.agents = agents, .n_agents = n_agents, .lookahead = a->lookahead,
                         .n_workers = n_workers, .cuda_devices = n_devices > 0 ? cuda_devices : NULL,
                         .n_threads = a->threads > 0 ? (a->threads + n_workers - 1) / n_workers : 0,
                         .ctx = ctx, .seed = seed, .n_predict = n_predict, .critic = critic,
                         .check_every = a->check_every, .rollback = a->rollback, .max_rollbacks = a->max_rollbacks,
                         .critic_window = a->critic_window, .out = stdout, .log = log, .metrics = metrics,
                         .interrupted = interrupted, .want_logprobs = a->logprobs >= 0, .n_logprobs = a->logprobs};
    if (a->report_path) {  // the pool's rounds, verdicts and rollbacks fill it
        if (!(report = emx_run_report_new(a, NULL, tk, ids, n_ids, seed, agents, n_agents))) goto out;
        po.on_event = emx_report_pool_event, po.on_event_user = report;
    }
    EmxPoolStats stats;
    int rc = emx_pool_generate(m, tk, ids, n_ids, &po, &stats, NULL, NULL, err, sizeof err);
    errno = 0;
    if (!stats.out_errno && (printf("\n") < 0 || fflush(stdout) != 0 || ferror(stdout)))
        stats.out_errno = errno ? errno : EIO;
    if (stats.out_errno || stats.log_errno || stats.metrics_errno) {  // one line: the first that failed
        if (stats.out_errno)
            fprintf(stderr, "run: writing the generated text to stdout: %s\n", strerror(stats.out_errno));
        else if (stats.log_errno)
            fprintf(stderr, "run: --log %s: %s\n", a->log_path, strerror(stats.log_errno));
        else
            fprintf(stderr, "run: --metrics %s: %s\n", a->metrics_path, strerror(stats.metrics_errno));
        goto out;
    }
    if (rc != 0) {
        fprintf(stderr, "run: %s\n", err);
        goto out;
    }
    if (emx_run_report_finish(&report, a->report_path) != 0) goto out;  // an interrupted run's too
    if (a->critic_default_off)  // beside the summary: a failed run's error stays its one line
        fprintf(stderr, "run: agents: no critic (a model judges its own text poorly; --critic-model FILE or "
                        "--check-every K turns it on)\n");
    emx_pool_print_stats(stderr, &stats, a->lookahead);
    status = stats.stop == EMX_STOP_INTERRUPTED ? 130 : 0;
    errno = 0;
    if (metrics && (ferror(metrics) || fclose(metrics) != 0)) {
        fprintf(stderr, "run: --metrics %s: %s\n", a->metrics_path, errno ? strerror(errno) : "write failed");
        status = 1;
    }
    metrics = NULL;
    errno = 0;
    if (log && (ferror(log) || fclose(log) != 0)) {
        fprintf(stderr, "run: --log %s: %s\n", a->log_path, errno ? strerror(errno) : "write failed");
        status = 1;
    }
    log = NULL;
out:
    emx_report_free(report);
    if (metrics) fclose(metrics);
    if (log) fclose(log);
    emx_critic_free(critic);
    return status;
}
