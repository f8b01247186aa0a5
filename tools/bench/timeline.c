// timeline.c — one decode token's phases on a GPU beside the bandwidth model (timeline.h).
#include "tools/bench/timeline.h"

#include <stdlib.h>
#include <string.h>

#include "base/errmsg.h"
#include "sampler/calibrate.h"
#include "tools/bench/forward_bench.h"

typedef struct {
    double phase_us[EMX_PHASES];  // mean µs a step, over every timed step of every round
    double wait_us[EMX_PHASES];   // the persistent kernel's: of phase_us, its barriers'
    double timed_us, graph_us;    // median µs a token: the timed state's, the graph state's
} Timeline;

// The rounds, alternated: the graph state, then the timed one; t gets the means and medians.
static int measure(const EmxModel *m, EmxState *graph, EmxState *timed, const EmxTimelineRun *run, Timeline *t,
                   char *err, size_t errlen) {
    double *g = calloc((size_t)run->rounds, sizeof *g), *d = calloc((size_t)run->rounds, sizeof *d);
    EmxStateInfo before, after;
    int rc = g && d ? 0 : emx_seterr(err, errlen, "bench: out of memory");
    emx_state_info(timed, &before);
    for (int k = 0; k < run->rounds && rc == 0; k++) {
        rc = emx_bench_decode_us(graph, m, run->n_gen, run->depth, &g[k], err, errlen) ||
                     emx_bench_decode_us(timed, m, run->n_gen, run->depth, &d[k], err, errlen)
                 ? -1
                 : 0;
        if (rc == 0) fprintf(stderr, "  timeline round %d  graph %9.2f µs/token  timed %9.2f µs/token\n", k + 1, g[k], d[k]);
    }
    emx_state_info(timed, &after);
    const long steps = after.phases.steps - before.phases.steps;
    if (rc == 0 && steps <= 0) rc = emx_seterr(err, errlen, "bench: the timed state recorded no phases");
    if (rc == 0) {
        for (int p = 0; p < EMX_PHASES; p++) {
            t->phase_us[p] = (after.phases.us[p] - before.phases.us[p]) / (double)steps;
            t->wait_us[p] = (after.phases.wait_us[p] - before.phases.wait_us[p]) / (double)steps;
        }
        t->graph_us = emx_percentile(g, (size_t)run->rounds, 50.0);
        t->timed_us = emx_percentile(d, (size_t)run->rounds, 50.0);
    }
    free(g);
    free(d);
    return rc;
}

// A phase's row; wait_us >= 0 (the persistent kernel's): its barriers' µs in a last column.
static void print_row(FILE *out, const char *name, double us, double total_us, uint64_t bytes, double peak_gbps,
                      double wait_us) {
    const double bound = emx_bw_us(bytes, peak_gbps);
    fprintf(out, "  %-34s %10.2f %6.1f%% %14llu %11.2f %8.1f%%", name, us, total_us > 0 ? 100 * us / total_us : 0,
            (unsigned long long)bytes, bound, us > 0 ? 100 * bound / us : 0);
    if (wait_us >= 0) fprintf(out, " %11.2f", wait_us);
    fputc('\n', out);
}

// The table; timed: the timed state's info (its decode path: the persistent kernel's adds a column
// of each phase's barrier time).
static void print_table(FILE *out, const EmxModel *m, const EmxStateInfo *info, const EmxStateInfo *timed,
                        const EmxTimelineRun *run, const Timeline *t) {
    EmxBwModel bm;  // at the mean position of the timed steps (as `bench speed`'s model)
    emx_bw_model(m, emx_bw_mean_pos(run->depth, run->n_gen), info->cache_type == EMX_KV_F16 ? 2 : 4, &bm);
    const int per = timed->persistent_blocks > 0;
    double sum = 0, waits = 0;
    for (int p = 0; p < EMX_PHASES; p++) sum += t->phase_us[p], waits += t->wait_us[p];
    fprintf(out, "\ntimeline of one decode token (%s, %s; %s%stg%d at depth %d, %d rounds alternated with the graph "
                 "path):\n",
            info->device, info->device_desc, per ? timed->decode_path : "", per ? "; " : "", run->n_gen, run->depth,
            run->rounds);
    if (strstr(info->device_desc, "CUDA emulator"))
        fprintf(out, "  (emulated: these are the emulator's times on the CPU, not a GPU's)\n");
    // (%11s and %12s: "µ" is two bytes)
    fprintf(out, "  %-34s %11s %7s %14s %12s %9s%s\n", "phase", "µs/token", "share", "bytes/token", "µs at peak",
            "of bound", per ? "  barrier µs" : "");
    for (int p = 0; p < EMX_PHASES; p++)
        print_row(out, emx_phase_name((EmxPhase)p), t->phase_us[p], sum, emx_bw_phase_bytes(&bm, (EmxPhase)p),
                  run->peak_gbps, per ? t->wait_us[p] : -1);
    print_row(out, "all phases (timed step)", sum, sum, bm.total_bytes, run->peak_gbps, per ? waits : -1);
    if (per)
        fprintf(out, "  (the launch split between its phases by its blocks' clocks; barrier: from a phase's slowest "
                     "block's arrival to the grid's departure)\n");
    fprintf(out, "  %-34s %10.2f   (direct launches, an event after each phase; median of the rounds)\n",
            "timed step, wall clock", t->timed_us);
    fprintf(out, "  %-34s %10.2f   (%.2f of the timed step; %.1f%% of the bound)\n", "graph step, wall clock", t->graph_us,
            t->timed_us > 0 ? t->graph_us / t->timed_us : 0, 100 * emx_bw_us(bm.total_bytes, run->peak_gbps) / t->graph_us);
    fprintf(out, "  bound: the phase's bytes at %.0f GB/s (%s); \"of bound\": bound / measured\n", run->peak_gbps,
            run->peak_label);
}

int emx_bench_timeline(const EmxModel *m, EmxState *graph_state, const EmxStateOptions *so, const EmxTimelineRun *run,
                       int persistent, FILE *out, char *err, size_t errlen) {
    EmxStateOptions to = *so;
    to.share_weights = graph_state;
    to.phase_timeline = 1;
    to.persistent = persistent;
    char why[512];
    EmxState *timed = emx_state_new(m, &to, why, sizeof why);
    if (!timed) return emx_seterr(err, errlen, "bench: --timeline: %s", why);
    EmxStateInfo info, ti;
    emx_state_info(graph_state, &info);
    emx_state_info(timed, &ti);
    Timeline t;
    memset(&t, 0, sizeof t);
    int rc = 0;
    if (persistent && !ti.persistent_blocks)
        fprintf(out, "\ntimeline of one decode token through the persistent kernel: not measured: %s\n",
                ti.decode_path ? ti.decode_path : "no decode path on this device");
    else if ((rc = measure(m, graph_state, timed, run, &t, err, errlen)) == 0)
        print_table(out, m, &info, &ti, run, &t);
    emx_state_free(timed);
    return rc;
}
