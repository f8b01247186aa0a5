// run_pool.c — ./run --sampler agents (run_pool.h).
#include "run_pool.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "critic.h"
#include "pool_generate.h"
#include "rng.h"

int emx_run_pool(const EmxCliArgs *a, const EmxModel *m, const EmxTokenizer *tk, const int *ids, int n_ids, int ctx,
                 volatile sig_atomic_t *interrupted) {
    char err[512];
    if (strcmp(a->devices, "cpu") != 0) {
        // cuda:N lists are the CUDA runtime's (issue #7); nothing else is a device
        if (strncmp(a->devices, "cuda:", 5) == 0)
            fprintf(stderr, "run: --devices %s: this build runs the agent pool on the CPU only (--devices cpu)\n",
                    a->devices);
        else
            fprintf(stderr, "run: --devices: '%s' is not cpu or cuda:N[,cuda:M...]\n", a->devices);
        return 2;
    }
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
    if (a->workers > n_agents) {
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

    int status = 1;
    EmxCritic *critic = NULL;
    FILE *log = NULL, *metrics = NULL;
    if (a->check_every > 0) {
        EmxCriticOptions co = {.margin = a->critic_margin, .n_threads = a->threads};
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
        fprintf(log, "# entropix.c agent pool: model %s, %d agents, lookahead %d, %d worker(s), seed %" PRIu64 "\n",
                a->model_path, n_agents, a->lookahead, a->workers, seed);
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
                         .n_workers = a->workers, .n_threads = a->threads > 0 ? (a->threads + a->workers - 1) / a->workers : 0,
                         .ctx = ctx, .seed = seed, .n_predict = n_predict, .critic = critic,
                         .check_every = a->check_every, .rollback = a->rollback, .max_rollbacks = a->max_rollbacks,
                         .critic_window = a->critic_window, .out = stdout, .log = log, .metrics = metrics,
                         .interrupted = interrupted};
    EmxPoolStats stats;
    int rc = emx_pool_generate(m, tk, ids, n_ids, &po, &stats, NULL, NULL, err, sizeof err);
    printf("\n");
    fflush(stdout);
    if (rc != 0) {
        fprintf(stderr, "run: %s\n", err);
        goto out;
    }
    emx_pool_print_stats(stderr, &stats, a->lookahead);
    status = stats.stop == EMX_STOP_INTERRUPTED ? 130 : 0;
    if (metrics && (ferror(metrics) || fclose(metrics) != 0)) {
        fprintf(stderr, "run: --metrics %s: write failed\n", a->metrics_path);
        status = 1;
    }
    metrics = NULL;
    if (log && (ferror(log) || fclose(log) != 0)) {
        fprintf(stderr, "run: --log %s: write failed\n", a->log_path);
        status = 1;
    }
    log = NULL;
out:
    if (metrics) fclose(metrics);
    if (log) fclose(log);
    emx_critic_free(critic);
    return status;
}
