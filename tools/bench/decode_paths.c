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

// The rounds, alternated: graph then persistent; the medians in us[0], us[1].
static int measure(const EmxModel *m, EmxState *const st[2], const EmxTimelineRun *run, double us[2], char *err,
                   size_t errlen) {
    double *r[2] = {calloc((size_t)run->rounds, sizeof(double)), calloc((size_t)run->rounds, sizeof(double))};
    int rc = r[0] && r[1] ? 0 : emx_seterr(err, errlen, "bench: out of memory");
    for (int k = 0; k < run->rounds && rc == 0; k++) {
        for (int i = 0; i < 2 && rc == 0; i++)
            rc = emx_bench_decode_us(st[i], m, run->n_gen, run->depth, &r[i][k], err, errlen);
        if (rc == 0) fprintf(stderr, "  paths round %d  graph %9.2f µs/token  persistent %9.2f µs/token\n", k + 1, r[0][k], r[1][k]);
    }
    for (int i = 0; i < 2 && rc == 0; i++) us[i] = emx_percentile(r[i], (size_t)run->rounds, 50.0);
    free(r[0]);
    free(r[1]);
    return rc;
}

int emx_bench_decode_paths(const EmxModel *m, EmxState *graph_state, const EmxStateOptions *so,
                           const EmxTimelineRun *run, FILE *out, char *err, size_t errlen) {
    EmxStateOptions po = *so;
    po.share_weights = graph_state;
    po.persistent = 1;
    char why[512];
    EmxState *per = emx_state_new(m, &po, why, sizeof why);
    if (!per) return emx_seterr(err, errlen, "bench: --persistent: %s", why);
    EmxStateInfo gi, pi;
    emx_state_info(graph_state, &gi);
    emx_state_info(per, &pi);
    EmxBwModel bm;  // at the mean position of the timed steps (as `bench speed`'s model)
    emx_bw_model(m, emx_bw_mean_pos(run->depth, run->n_gen), gi.cache_type == EMX_KV_F16 ? 2 : 4, &bm);
    const double bound = emx_bw_us(bm.total_bytes, run->peak_gbps);
    const int taken = pi.persistent_blocks > 0;
    double us[2] = {0, 0};
    EmxState *const st[2] = {graph_state, per};
    const int rc = taken ? measure(m, st, run, us, err, errlen) : 0;
    if (rc == 0) {
        fprintf(out, "\ndecode paths (%s, %s; tg%d at depth %d, %d rounds alternated):\n", gi.device, gi.device_desc,
                run->n_gen, run->depth, run->rounds);
        if (strstr(gi.device_desc, "CUDA emulator"))
            fprintf(out, "  (emulated: these are the emulator's times on the CPU, not a GPU's)\n");
        fprintf(out, "  %-58s %11s %10s %10s\n", "path", "µs/token", "tok/s", "of bound");
        if (taken) {
            print_row(out, gi.decode_path ? gi.decode_path : "graph", us[0], bound);
            print_row(out, pi.decode_path, us[1], bound);
            fprintf(out, "  persistent / graph: %.2fx tok/s; bound: %.2f µs (%llu bytes at %.0f GB/s, %s)\n",
                    us[1] > 0 ? us[0] / us[1] : 0, bound, (unsigned long long)bm.total_bytes, run->peak_gbps,
                    run->peak_label);
        } else {
            fprintf(out, "  not measured: %s\n", pi.decode_path ? pi.decode_path : "no decode path on this device");
        }
    }
    emx_state_free(per);
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
