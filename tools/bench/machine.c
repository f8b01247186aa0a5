// machine.c — CPU name and copy bandwidth (machine.h).
#include "tools/bench/machine.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"

void emx_bench_cpu_name(char *buf, size_t cap) {
    snprintf(buf, cap, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        const char *v = strchr(line, ':');
        if (!v) break;
        v++;
        while (*v == ' ' || *v == '\t') v++;
        snprintf(buf, cap, "%s", v);
        buf[strcspn(buf, "\n")] = 0;
        break;
    }
    fclose(f);
}

double emx_bench_memcpy_gbs(size_t bytes, int n_threads, int rounds) {
    char *src = malloc(bytes), *dst = malloc(bytes);
    if (!src || !dst) {
        free(src);
        free(dst);
        return -1.0;
    }
    memset(src, 1, bytes);  // touch every page first: the copy must not time page faults
    memset(dst, 2, bytes);
    if (n_threads < 1) n_threads = 1;
    double best = 0.0;
    for (int r = 0; r < rounds; r++) {
        double t0 = emx_now_s();
#pragma omp parallel num_threads(n_threads)
        {
            // Each thread copies one contiguous slice, as a matmul's threads stream row blocks.
            int t = omp_get_thread_num(), nt = omp_get_num_threads();
            size_t lo = bytes * (size_t)t / (size_t)nt, hi = bytes * (size_t)(t + 1) / (size_t)nt;
            memcpy(dst + lo, src + lo, hi - lo);
        }
        double dt = emx_now_s() - t0;
        double gbs = 2.0 * (double)bytes / dt / 1e9;  // read + write
        if (gbs > best) best = gbs;
    }
    volatile char sink = dst[bytes / 2];  // the copy has an observable result
    (void)sink;
    free(src);
    free(dst);
    return best;
}
