// speed_report.c — the `bench speed` report (speed_report.h).
#include "tools/bench/speed_report.h"

#include <stdint.h>
#include <string.h>

uint64_t emx_bench_kv_bytes_per_token(const EmxConfig *c, int n_gen, int depth, int elem_bytes) {
    if (n_gen <= 0) return 0;
    // 2 (keys and values) x ... x (2 depth + n_gen + 1) / 2: the 2s cancel, the result is exact.
    return (uint64_t)c->n_layers * c->n_kv_heads * c->head_dim * (uint64_t)elem_bytes *
           (uint64_t)(2 * (int64_t)depth + n_gen + 1);
}

static void tps_line(FILE *f, const char *what, int n, int depth, double tps) {
    char key[48];
    if (depth > 0) snprintf(key, sizeof key, "%s%d @ d%d:", what, n, depth);
    else snprintf(key, sizeof key, "%s%d:", what, n);
    if (tps > 0)
        fprintf(f, "%-18s %.2f tok/s, %.3f ms/token\n", key, tps, 1e3 / tps);
    else
        fprintf(f, "%-18s -\n", key);
}

// The comparison's line for one test: its median tok/s and ours/other, then, with two or more
// rounds where both measured, the lowest and highest ratio of one round (the rounds alternate,
// so a round's two figures shared the machine's state of that minute).
static void other_line(FILE *f, const char *what, int n, double ours, double theirs, const double *ou,
                       const double *th, int runs) {
    char key[40];
    snprintf(key, sizeof key, "other %s%d:", what, n);
    if (!(ours > 0 && theirs > 0)) {
        fprintf(f, "%-18s -\n", key);
        return;
    }
    fprintf(f, "%-18s %.2f tok/s, ours/other %.3f", key, theirs, ours / theirs);
    double lo = 0, hi = 0;
    int both = 0;
    for (int k = 0; ou && th && k < runs; k++) {
        if (!(ou[k] > 0 && th[k] > 0)) continue;
        const double q = ou[k] / th[k];
        lo = both == 0 || q < lo ? q : lo;
        hi = both == 0 || q > hi ? q : hi;
        both++;
    }
    if (both >= 2) fprintf(f, " (rounds %.3f-%.3f)", lo, hi);
    fputc('\n', f);
}

// "key: value" with the value printed by fmt, or "key: -" where the figure does not exist.
__attribute__((format(printf, 4, 0))) static void value_line(FILE *f, const char *key, int have, const char *fmt,
                                                              double v) {
    fprintf(f, "%-18s ", key);
    if (have) fprintf(f, fmt, v);
    else fputc('-', f);
    fputc('\n', f);
}

void emx_speed_report_print(FILE *f, const EmxSpeedReport *r) {
    const int gpu = strcmp(r->device, "cpu") != 0;
    fprintf(f, "%-18s %s (%s)%s\n", "device:", r->device, r->device_desc,
            !gpu ? "" : r->uses_graphs ? ", decode steps replayed as a CUDA graph" : ", decode steps launched directly");
    fprintf(f, "%-18s %s (%s weights, %u layers)\n", "model:", r->model, r->dtype, r->cfg->n_layers);
    if (r->n_prompt > 0) tps_line(f, "prefill pp", r->n_prompt, r->depth, r->prefill_tps);
    if (r->n_gen > 0) tps_line(f, "decode tg", r->n_gen, r->depth, r->decode_tps);

    const int decode = r->n_gen > 0 && r->decode_tps > 0, eb = r->kv_elem_bytes > 0 ? r->kv_elem_bytes : 4;
    const uint64_t kv = emx_bench_kv_bytes_per_token(r->cfg, r->n_gen, r->depth, eb);
    const double bytes = (double)(r->weight_bytes + kv), gbs = bytes * r->decode_tps / 1e9;
    if (decode) {
        fprintf(f, "%-18s %llu = weights %llu + KV cache %llu\n", "bytes/token:",
                (unsigned long long)(r->weight_bytes + kv), (unsigned long long)r->weight_bytes,
                (unsigned long long)kv);
        fprintf(f, "%-18s 2 x %u layers x %u KV heads x %u head_dim x %d B x %.1f keys (mean of tg%d: %s(n+1)/2)\n",
                "KV cache:", r->cfg->n_layers, r->cfg->n_kv_heads, r->cfg->head_dim, eb,
                r->depth + (r->n_gen + 1) / 2.0, r->n_gen, r->depth > 0 ? "depth + " : "");
        fprintf(f, "%-18s %.6g\n", "achieved GB/s:", gbs);
    } else {
        fprintf(f, "%-18s -\n%-18s -\n%-18s -\n", "bytes/token:", "KV cache:", "achieved GB/s:");
    }
    value_line(f, "peak GB/s:", r->peak_gbps > 0, "%.2f", r->peak_gbps);
    value_line(f, "of peak:", decode && r->peak_gbps > 0, "%.4g%%", 100.0 * gbs / r->peak_gbps);
    value_line(f, "launches/step:", r->launches_per_step > 0, "%.0f", (double)r->launches_per_step);
    value_line(f, "memcpy GB/s:", r->memcpy_gbs > 0, "%.1f (host copy, read + write)", r->memcpy_gbs);
    value_line(f, "read GB/s:", r->read_gbs > 0, "%.1f (read-only pass, median of the rounds)", r->read_gbs);
    value_line(f, "of read:", decode && r->read_gbs > 0, "%.1f%%", 100.0 * gbs / r->read_gbs);
    if (!r->other) return;
    fprintf(f, "%-18s %s\n", "other:", r->other);
    if (r->n_prompt > 0)
        other_line(f, "pp", r->n_prompt, r->prefill_tps, r->other_prefill_tps, r->ours_rounds[0], r->other_rounds[0],
                   r->runs);
    if (r->n_gen > 0)
        other_line(f, "tg", r->n_gen, r->decode_tps, r->other_decode_tps, r->ours_rounds[1], r->other_rounds[1], r->runs);
}
