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
#include "base/mem_available.h"
#include "runtime/cli/run_io.h"
#include "runtime/cpu/cpu_state_size.h"
#include "runtime/pool/pool_generate.h"
#include "sampler/rng.h"

uint64_t emx_run_pool_memory(const EmxCliArgs *a, const EmxModel *m, int ctx, int n_workers, uint64_t *kv_bytes) {
    const int cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    int per = a->threads > 0 ? (a->threads + n_workers - 1) / n_workers : cores / n_workers;
    uint64_t kv = 0, need = (uint64_t)n_workers * emx_cpu_state_bytes(&m->cfg, ctx, per > 0 ? per : 1, a->cache_type, &kv);
    kv *= (uint64_t)n_workers;
    if (a->check_every > 0 && !a->critic_model) {  // a critic model file is sized when it is opened
        const int cctx = m->cfg.max_seq_len < 2048 ? (int)m->cfg.max_seq_len : 2048;  // critic.c's context
        uint64_t ckv = 0;
        need += emx_cpu_state_bytes(&m->cfg, cctx, a->threads > 0 ? a->threads : cores, EMX_KV_F32, &ckv);
        kv += ckv;
    }
    if (kv_bytes) *kv_bytes = kv;
    return need;
}

// CPU workers: do their replicas (and a critic over the same model, on the CPU beside them) fit
// the memory there is? Checked before any is allocated; GPUs check their own.
static int check_pool_memory(const EmxCliArgs *a, const EmxModel *m, int ctx, int n_workers, char *err, size_t errlen) {
    uint64_t kv = 0;
    const uint64_t need = emx_run_pool_memory(a, m, ctx, n_workers, &kv);
    const int critic = a->check_every > 0 && !a->critic_model;
    char what[96];
    snprintf(what, sizeof what, "%d worker state%s%s", n_workers, n_workers > 1 ? "s" : "",
             critic ? " and a critic state" : "");
    return emx_mem_check(need, kv, emx_mem_available(), ctx, what, err, errlen);
}

// The --log file's header: the model, the pool, the critic and every agent's settings.
static void write_log_header(FILE *log, const EmxCliArgs *a, const EmxRunPoolSetup *ps, int critic, uint64_t seed) {
    fprintf(log, "# entropix.c agent pool: model %s, %d agents, lookahead %d, %d worker(s)", a->model_path,
            ps->n_agents, a->lookahead, ps->n_workers);
    if (ps->n_devices > 0) fprintf(log, " on %s", a->devices);
    fprintf(log, ", seed %" PRIu64 "\n", seed);
    fprintf(log, "# critic: %s, check every %d, window %d, margin %g, rollback %d, max rollbacks %d\n",
            critic ? (a->critic_model ? a->critic_model : "same model") : "off", a->check_every, a->critic_window,
            (double)a->critic_margin, a->rollback, a->max_rollbacks);
    fprintf(log, "# agents:");
    for (int i = 0; i < ps->n_agents; i++)
        fprintf(log, " %d=T%.2f/k%d", i, (double)ps->agents[i].temperature, ps->agents[i].top_k);
    fprintf(log, "\n");
    fflush(log);
}

// A write that failed during the run, in one line (the first: stdout, --log, --metrics). 1 if any.
static int report_failed_write(const EmxCliArgs *a, const EmxPoolStats *stats) {
    if (stats->out_errno)
        fprintf(stderr, "run: writing the generated text to stdout: %s\n", strerror(stats->out_errno));
    else if (stats->log_errno)
        fprintf(stderr, "run: --log %s: %s\n", a->log_path, strerror(stats->log_errno));
    else if (stats->metrics_errno)
        fprintf(stderr, "run: --metrics %s: %s\n", a->metrics_path, strerror(stats->metrics_errno));
    else
        return 0;
    return 1;
}

// Closes an output stream (not open: nothing to do); 1, said in one line, if its data did not all land.
static int close_output(EmxOut *o, const char *flag) {
    char err[512];
    if (emx_out_close(o, err, sizeof err) == 0) return 0;
    fprintf(stderr, "run: %s %s\n", flag, err);
    return 1;
}

// Opens --log or --metrics as a stream (base/out_file.h): NULL path, nothing to do. 0, or -1 said.
static int open_output(EmxOut *o, const char *flag, const char *path) {
    char err[512];
    if (!path || emx_out_open(o, path, EMX_OUT_STREAM, err, sizeof err) == 0) return 0;
    fprintf(stderr, "run: %s %s\n", flag, err);
    return -1;
}

int emx_run_pool(const EmxCliArgs *a, const EmxModel *m, const EmxTokenizer *tk, const int *ids, int n_ids, int ctx,
                 volatile sig_atomic_t *interrupted) {
    char err[512];
    EmxRunPoolSetup ps;
    const int bad = emx_run_pool_setup(a, &ps, err, sizeof err);
    if (bad) {
        fprintf(stderr, "run: %s\n", err);
        return bad;
    }
    const int n_workers = ps.n_workers, n_agents = ps.n_agents, n_devices = ps.n_devices;
    const EmxAgentParams *agents = ps.agents;
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
    EmxOut log_out = {0}, metrics_out = {0};
    FILE *log = NULL, *metrics = NULL;
    EmxReport *report = NULL;
    if (a->check_every > 0) {
        if (!(critic = emx_run_pool_critic(a, &ps, m, tk, a->threads, err, sizeof err))) {
            fprintf(stderr, "run: critic: %s\n", err);
            goto out;
        }
    }
    if (open_output(&log_out, "--log", a->log_path) != 0 || open_output(&metrics_out, "--metrics", a->metrics_path) != 0)
        goto out;
    log = log_out.f, metrics = metrics_out.f;
    if (!a->n_predict_given && n_predict < 25000)
        fprintf(stderr, "run: agents: -n 25000 capped to %d by the context (%d, prompt %d tokens)\n", room, ctx, n_ids);
    uint64_t seed = a->seed_given ? a->seed : emx_rng_seed_from_time();
    if (!a->seed_given)
        fprintf(stderr, "seed: %" PRIu64 " (time-based; -s %" PRIu64 " reproduces this run)\n", seed, seed);
    if (log) write_log_header(log, a, &ps, critic != NULL, seed);
    EmxPoolOptions po = emx_run_pool_options(a, &ps, a->threads, ctx, seed, n_predict, critic);
    po.out = stdout, po.log = log, po.metrics = metrics, po.interrupted = interrupted;
    po.want_logprobs = a->logprobs >= 0, po.n_logprobs = a->logprobs;
    if (a->report_path) {  // the pool's rounds, verdicts and rollbacks fill it
        if (!(report = emx_run_report_new(a, NULL, tk, ids, n_ids, seed, agents, n_agents))) goto out;
        po.on_event = emx_report_pool_event, po.on_event_user = report;
    }
    EmxPoolStats stats;
    int rc = emx_pool_generate(m, tk, ids, n_ids, &po, &stats, NULL, NULL, err, sizeof err);
    errno = 0;
    if (!stats.out_errno && (printf("\n") < 0 || fflush(stdout) != 0 || ferror(stdout)))
        stats.out_errno = errno ? errno : EIO;
    if (report_failed_write(a, &stats)) goto out;
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
    // `|`, not `||`: both files are closed, and each failure said
    if (close_output(&metrics_out, "--metrics") | close_output(&log_out, "--log")) status = 1;
out:
    emx_report_free(report);
    emx_out_discard(&metrics_out);
    emx_out_discard(&log_out);
    emx_critic_free(critic);
    return status;
}
