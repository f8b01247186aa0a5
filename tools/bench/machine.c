// machine.c — CPU name, copy and read bandwidth, the OpenMP wait policy (machine.h).
#include "tools/bench/machine.h"

#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/clock.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

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

// Sum of the 64-bit words of p[0..n) (n % 32 == 0 bytes), four independent chains so that the
// loads, not an add's latency, set the pace.
static uint64_t sum_words(const char *p, size_t n) {
#if defined(__AVX2__)
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    size_t i = 0;
    for (; i + 128 <= n; i += 128) {
        a = _mm256_add_epi64(a, _mm256_load_si256((const __m256i *)(p + i)));
        b = _mm256_add_epi64(b, _mm256_load_si256((const __m256i *)(p + i + 32)));
        c = _mm256_add_epi64(c, _mm256_load_si256((const __m256i *)(p + i + 64)));
        d = _mm256_add_epi64(d, _mm256_load_si256((const __m256i *)(p + i + 96)));
    }
    for (; i < n; i += 32) a = _mm256_add_epi64(a, _mm256_load_si256((const __m256i *)(p + i)));
    a = _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d));
    uint64_t lanes[4];
    _mm256_storeu_si256((__m256i *)lanes, a);
    return lanes[0] + lanes[1] + lanes[2] + lanes[3];
#else
    const uint64_t *w = (const uint64_t *)(const void *)p;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i < n / 8; i += 4) s0 += w[i], s1 += w[i + 1], s2 += w[i + 2], s3 += w[i + 3];
    return s0 + s1 + s2 + s3;
#endif
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double emx_bench_read_gbs(size_t bytes, int n_threads, int rounds) {
    if (n_threads < 1) n_threads = 1;
    if (rounds < 1) rounds = 1;
    bytes &= ~(size_t)(4095);  // whole pages; every slice a multiple of 32 bytes below
    char *buf = aligned_alloc(4096, bytes ? bytes : 4096);
    double *gbs = malloc(sizeof(double) * (size_t)rounds);
    if (!buf || !gbs || bytes == 0) {
        free(buf);
        free(gbs);
        return -1.0;
    }
    memset(buf, 1, bytes);  // touch every page first: the pass must not time page faults
    uint64_t total = 0;
    for (int r = 0; r < rounds; r++) {
        double t0 = emx_now_s();
#pragma omp parallel num_threads(n_threads) reduction(+ : total)
        {
            int t = omp_get_thread_num(), nt = omp_get_num_threads();
            size_t lo = bytes / 32 * (size_t)t / (size_t)nt * 32, hi = bytes / 32 * (size_t)(t + 1) / (size_t)nt * 32;
            total += sum_words(buf + lo, hi - lo);
        }
        gbs[r] = (double)bytes / (emx_now_s() - t0) / 1e9;
    }
    volatile uint64_t sink = total;  // the sums have an observable result: the loads stay
    (void)sink;
    qsort(gbs, (size_t)rounds, sizeof *gbs, cmp_double);
    double med = rounds % 2 ? gbs[rounds / 2] : 0.5 * (gbs[rounds / 2 - 1] + gbs[rounds / 2]);
    free(buf);
    free(gbs);
    return med;
}

const char *emx_bench_wait_policy_note(void) {
    const char *p = getenv("OMP_WAIT_POLICY");
    if (!p || strcasecmp(p, "passive") != 0) return NULL;
    return "OMP_WAIT_POLICY=passive: OpenMP's threads sleep between parallel regions, and the wake-ups "
           "slow a multi-threaded decode (of this runtime and of llama.cpp alike); unset it to measure speed";
}
