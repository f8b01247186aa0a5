// decode_paths.c — the graph path against the persistent kernel, alternated (decode_paths.h).
#include "tools/bench/decode_paths.h"

#include <stdlib.h>
#include <string.h>

#include "base/errmsg.h"
#include "sampler/calibrate.h"
#include "tools/bench/bandwidth_model.h"
#include "tools/bench/forward_bench.h"

// One row: the state's decode path, its median µs a token, tok/s and share of the bound.
static void print_row(FILE *out, const char *path, double us, double bound_us) {
    fprintf(out, "  %-58s %10.2f %10.1f %9.1f%%\n", path, us, us > 0 ? 1e6 / us : 0, us > 0 ? 100 * bound_us / us : 0);
}

// The rounds, alternated: graph, persistent, then (n == 3) the persistent kernel without its L2
// warming; the medians in us[0..n).
static int measure(const EmxModel *m, EmxState *const *st, int n, const EmxTimelineRun *run, double *us, char *err,
                   size_t errlen) {
    double *r[3] = {NULL, NULL, NULL};
    int rc = 0;
    for (int i = 0; i < n; i++)
        if (!(r[i] = calloc((size_t)run->rounds, sizeof(double)))) rc = emx_seterr(err, errlen, "bench: out of memory");
    for (int k = 0; k < run->rounds && rc == 0; k++) {
        for (int i = 0; i < n && rc == 0; i++)
            rc = emx_bench_decode_us(st[i], m, run->n_gen, run->depth, &r[i][k], err, errlen);
        if (rc == 0 && n == 3)
            fprintf(stderr, "  paths round %d  graph %9.2f  persistent %9.2f  not warmed %9.2f µs/token\n", k + 1,
                    r[0][k], r[1][k], r[2][k]);
        else if (rc == 0)
            fprintf(stderr, "  paths round %d  graph %9.2f µs/token  persistent %9.2f µs/token\n", k + 1, r[0][k], r[1][k]);
    }
    for (int i = 0; i < n && rc == 0; i++) us[i] = emx_percentile(r[i], (size_t)run->rounds, 50.0);
    for (int i = 0; i < n; i++) free(r[i]);
    return rc;
}

// A persistent state sharing graph_state's weights; cold: without the L2 warming
// (EMX_CUDA_PERSISTENT_WARM_MB=0 while it is made, the caller's setting put back).
static EmxState *persistent_state(const EmxModel *m, EmxState *graph_state, const EmxStateOptions *so, int cold,
                                  char *why, size_t whylen) {
    EmxStateOptions po = *so;
    po.share_weights = graph_state;
    po.persistent = 1;
    const char *was = getenv("EMX_CUDA_PERSISTENT_WARM_MB");
    char *saved = was ? strdup(was) : NULL;
    if (cold) setenv("EMX_CUDA_PERSISTENT_WARM_MB", "0", 1);
    EmxState *st = emx_state_new(m, &po, why, whylen);
    if (cold && saved) setenv("EMX_CUDA_PERSISTENT_WARM_MB", saved, 1);
    else if (cold) unsetenv("EMX_CUDA_PERSISTENT_WARM_MB");
    free(saved);
    return st;
}

// The table: a row a path, the persistent kernel's ratio to the graph path, and with a third
// state its warming's.
static void print_table(FILE *out, const EmxStateInfo *info, int n, const double *us, const EmxTimelineRun *run,
                        const EmxBwModel *bm) {
    const double bound = emx_bw_us(bm->total_bytes, run->peak_gbps);
    fprintf(out, "\ndecode paths (%s, %s; tg%d at depth %d, %d rounds alternated):\n", info[0].device,
            info[0].device_desc, run->n_gen, run->depth, run->rounds);
    if (strstr(info[0].device_desc, "CUDA emulator"))
        fprintf(out, "  (emulated: these are the emulator's times on the CPU, not a GPU's)\n");
    fprintf(out, "  %-58s %11s %10s %10s\n", "path", "µs/token", "tok/s", "of bound");
    if (info[1].persistent_blocks == 0) {
        fprintf(out, "  not measured: %s\n", info[1].decode_path ? info[1].decode_path : "no decode path on this device");
        return;
    }
    for (int i = 0; i < n; i++) print_row(out, i == 0 && !info[0].decode_path ? "graph" : info[i].decode_path, us[i], bound);
    fprintf(out, "  persistent / graph: %.2fx tok/s; bound: %.2f µs (%llu bytes at %.0f GB/s, %s)\n",
            us[1] > 0 ? us[0] / us[1] : 0, bound, (unsigned long long)bm->total_bytes, run->peak_gbps, run->peak_label);
    if (n == 3) fprintf(out, "  L2 warmed / not warmed: %.2fx tok/s\n", us[1] > 0 ? us[2] / us[1] : 0);
}

int emx_bench_decode_paths(const EmxModel *m, EmxState *graph_state, const EmxStateOptions *so,
                           const EmxTimelineRun *run, FILE *out, char *err, size_t errlen) {
    char why[512];
    EmxState *st[3] = {graph_state, persistent_state(m, graph_state, so, 0, why, sizeof why), NULL};
    if (!st[1]) return emx_seterr(err, errlen, "bench: --persistent: %s", why);
    EmxStateInfo info[3];
    emx_state_info(st[0], &info[0]);
    emx_state_info(st[1], &info[1]);
    int n = 2, rc = 0;
    if (info[1].persistent_blocks > 0 && strstr(info[1].decode_path, "L2 warmed")) {  // and without it
        if (!(st[2] = persistent_state(m, graph_state, so, 1, why, sizeof why)))
            rc = emx_seterr(err, errlen, "bench: --persistent (not warmed): %s", why);
        else
            emx_state_info(st[2], &info[2]), n = 3;
    }
    EmxBwModel bm;  // at the mean position of the timed steps (as `bench speed`'s model)
    emx_bw_model(m, emx_bw_mean_pos(run->depth, run->n_gen), info[0].cache_type == EMX_KV_F16 ? 2 : 4, &bm);
    double us[3] = {0, 0, 0};
    if (rc == 0 && info[1].persistent_blocks > 0) rc = measure(m, st, n, run, us, err, errlen);
    if (rc == 0) print_table(out, info, n, us, run, &bm);
    emx_state_free(st[2]);
    emx_state_free(st[1]);
    return rc;
}

int emx_bench_gpu_tables(int timeline, int persistent, const EmxModel *m, EmxState *graph_state,
                         const EmxStateOptions *so, const EmxTimelineRun *run) {
    char err[512];
    if ((timeline && emx_bench_timeline(m, graph_state, so, run, persistent, stdout, err, sizeof err) != 0) ||
        (persistent && emx_bench_decode_paths(m, graph_state, so, run, stdout, err, sizeof err) != 0)) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    return 0;
}
