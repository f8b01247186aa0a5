// lab.h — the kernel lab's shared part (tools/lab/<family>.cu, docs/kernel-lab.md): flags, the
// device line, checking a version against the CPU twin, timing it, and the table row.
//
// A family's program: lab_init, build inputs and the CPU twin's answer on the host, then for each
// version (naive first, the one the runtime uses last) lab_version(name, bytes, launch, check):
// launch once, compare (max abs / max rel error, PASS or FAIL against the family's stated
// tolerance), then time `iters` launches with cudaEvents. lab_finish returns the exit status:
// 1 if any version failed its check or a CUDA call failed, else 0.
//
// Compiled by nvcc for a GPU (real timings, % of the peak memory bandwidth from the device's
// attributes) or by g++ through the emulation layer (tests/cuda_emu; EMX_LAB_EMULATED defined):
// the same program, but every thread is a CPU fiber under ASan, so a time would say nothing about
// a GPU; the program checks every version and prints "emulated" where the time would be.
#ifndef ENTROPIX_TOOLS_LAB_H
#define ENTROPIX_TOOLS_LAB_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <vector>

#ifdef EMX_LAB_EMULATED
static const int kLabEmulated = 1;
#else
static const int kLabEmulated = 0;
#endif

// A CUDA call that must succeed: on failure the line names the call and the program exits 1.
// Every error after lab_init leaves by exit(), not by returning from main: main's buffers and
// the stream are then still reachable, so LeakSanitizer (emulated builds) has nothing to report.
#define LAB_CHECK(call)                                                                          \
    do {                                                                                         \
        cudaError_t e_ = (call);                                                                 \
        if (e_ != cudaSuccess) {                                                                 \
            fprintf(stderr, "lab: %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

struct Lab {
    const char *family;
    int argc;
    char **argv;
    int check_only;   // --check-only: compare, do not time (what `make lab-test` runs)
    int iters;        // timed launches per version (--iters, default 50; emulated, nothing is timed)
    int failed;       // versions that failed their check
    double peak_gbs;  // from the device's attributes; 0 if unknown
    cudaStream_t stream;
};

// Peak memory bandwidth: 2 (double data rate) x memory clock x bus width. CUDA 13 dropped the
// clock from cudaDeviceProp, so both come from attribute queries (as tools/bench_kernels).
static inline double lab_peak_gbs(int dev) {
    int clock_khz = 0, bus_bits = 0;
    if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, dev) != cudaSuccess)
        return 0.0;
    return 2.0 * clock_khz * 1e3 * (bus_bits / 8.0) / 1e9;
}

// `--name N` from the command line (every family flag is an integer), else def. A value that is
// not an integer in [lo, hi] is a one-line error and exit 2.
static inline int lab_int(Lab *L, const char *name, int def, int lo, int hi) {
    for (int i = 1; i + 1 < L->argc; i++) {
        if (strcmp(L->argv[i], name)) continue;
        char *end = NULL;
        const long v = strtol(L->argv[i + 1], &end, 10);
        if (end == L->argv[i + 1] || *end || v < lo || v > hi) {
            fprintf(stderr, "lab %s: %s '%s': not an integer in [%d, %d]\n", L->family, name, L->argv[i + 1], lo, hi);
            exit(2);
        }
        return (int)v;
    }
    return def;
}

// `--name VALUE` from the command line, else def (the family checks the value).
static inline const char *lab_str(Lab *L, const char *name, const char *def) {
    for (int i = 1; i + 1 < L->argc; i++)
        if (!strcmp(L->argv[i], name)) return L->argv[i + 1];
    return def;
}

// Whether `a` is one of the space-separated names in `flags` ("--n --rows").
static inline int lab_is_flag(const char *flags, const char *a) {
    const size_t len = strlen(a);
    for (const char *f = flags; (f = strstr(f, a)) != NULL; f += len)
        if ((f == flags || f[-1] == ' ') && (f[len] == ' ' || f[len] == '\0')) return 1;
    return 0;
}

// Parses the common flags, refuses unknown ones (`flags`: the family's flags, each taking a
// value, space-separated: "--n --rows"), prints what the family computes and the device line.
static inline void lab_init(Lab *L, const char *family, int argc, char **argv, const char *flags,
                            const char *what) {
    memset(L, 0, sizeof *L);
    L->family = family;
    L->argc = argc;
    L->argv = argv;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--check-only")) {
            L->check_only = 1;
        } else if (!strcmp(a, "--iters") || (a[0] == '-' && lab_is_flag(flags, a))) {
            if (++i >= argc) {  // the value itself is checked by lab_int
                fprintf(stderr, "lab %s: %s needs a value\n", family, a);
                exit(2);
            }
        } else {
            fprintf(stderr, "lab %s: unknown argument '%s' (usage: %s [--check-only] [--iters N]", family, a, argv[0]);
            for (const char *f = flags; *f;) {  // each family flag as "[--name VALUE]"
                const size_t len = strcspn(f, " ");
                fprintf(stderr, " [%.*s VALUE]", (int)len, f);
                f += len + (f[len] == ' ');
            }
            fprintf(stderr, ")\n");
            exit(2);
        }
    }
    L->iters = lab_int(L, "--iters", 50, 1, 1000000);
    int dev = 0;
    LAB_CHECK(cudaGetDevice(&dev));
    cudaDeviceProp prop;
    LAB_CHECK(cudaGetDeviceProperties(&prop, dev));
    L->peak_gbs = lab_peak_gbs(dev);
    LAB_CHECK(cudaStreamCreate(&L->stream));
    printf("lab %s: %s\n", family, what);
    if (kLabEmulated)
        printf("device: CUDA emulation layer (tests/cuda_emu: every thread a CPU fiber, under ASan): checks as on a "
               "GPU, no times\n");
    else
        printf("device: %s, %d SMs, peak memory bandwidth %.0f GB/s\n", prop.name, prop.multiProcessorCount,
               L->peak_gbs);
}

// The largest errors of got against want and whether every element is within abs_tol +
// rel_tol * |want|. A NaN or infinity must match exactly (same class and sign).
struct LabErr {
    double max_abs, max_rel;
    int pass;
};

template <typename T>
static inline LabErr lab_compare(const T *got, const T *want, size_t n, double abs_tol, double rel_tol) {
    LabErr e = {0.0, 0.0, 1};
    for (size_t i = 0; i < n; i++) {
        const double g = got[i], w = want[i];
        if (!isfinite(g) || !isfinite(w)) {
            if (!(isnan(g) && isnan(w)) && g != w) e.pass = 0;
            continue;
        }
        const double d = fabs(g - w), r = d / fmax(fabs(w), 1e-30);
        e.max_abs = fmax(e.max_abs, d);
        if (w != 0.0) e.max_rel = fmax(e.max_rel, r);
        if (d > abs_tol + rel_tol * fabs(w)) e.pass = 0;
    }
    return e;
}

template <typename T>
static inline LabErr lab_compare(const std::vector<T> &got, const std::vector<T> &want, double abs_tol,
                                 double rel_tol) {
    if (got.size() != want.size()) return LabErr{INFINITY, INFINITY, 0};
    return lab_compare(got.data(), want.data(), got.size(), abs_tol, rel_tol);
}

// As lab_compare, but element i may be off by tol * scale[i] (a dot product's rounding error is
// relative to sum |w_j x_j|, not to the result, which can be near 0).
static inline LabErr lab_compare_scaled(const std::vector<float> &got, const std::vector<double> &want,
                                        const std::vector<double> &scale, double tol) {
    LabErr e = {0.0, 0.0, got.size() == want.size()};
    for (size_t i = 0; i < got.size() && i < want.size(); i++) {
        const double d = fabs(got[i] - want[i]);
        e.max_abs = fmax(e.max_abs, d);
        if (want[i] != 0.0) e.max_rel = fmax(e.max_rel, d / fabs(want[i]));
        if (!(d <= tol * scale[i] + 1e-12)) e.pass = 0;  // a NaN fails too
    }
    return e;
}

// Two results in one check (both must pass; the larger errors are shown).
static inline LabErr lab_both(LabErr a, LabErr b) {
    return LabErr{fmax(a.max_abs, b.max_abs), fmax(a.max_rel, b.max_rel), a.pass && b.pass};
}

static inline void lab_header(const Lab *L, const char *shape, const char *tolerance) {
    printf("shape: %s\ntolerance: %s\n", shape, tolerance);
    // Emulated, a version's time is its count of threads and barriers on CPU fibers: it ranks the
    // naive versions (fewest threads) first, the opposite of a GPU, so no time is shown at all.
    if (kLabEmulated && !L->check_only)
        printf("time: not measured: emulated (every CUDA thread a CPU fiber) times cannot rank the versions; "
               "a GPU's are in docs/kernel-lab.md\n");
    printf("%-24s %10s %10s %5s", "version", "max abs", "max rel", "check");
    if (!L->check_only) printf(" %12s %12s %9s", "time (us)", "bytes", "GB/s");
    if (!L->check_only && !kLabEmulated) printf(" %7s", "of peak");
    printf("\n");
}

// One version: launch once and check, then (unless --check-only) time. `launch` enqueues the
// version on the stream and returns its launcher's status; `check` reads the result back and
// compares it with the CPU twin's. `bytes`: the compulsory traffic of one call (each input read
// once, each output written once), so GB/s is the effective bandwidth. Emulated, the time and
// GB/s columns say "emulated" and "-" (lab_header's note).
static inline void lab_version(Lab *L, const char *name, double bytes, const std::function<cudaError_t()> &launch,
                               const std::function<LabErr()> &check) {
    LAB_CHECK(launch());
    LAB_CHECK(cudaStreamSynchronize(L->stream));
    const LabErr e = check();
    if (!e.pass) L->failed++;
    printf("%-24s %10.3g %10.3g %5s", name, e.max_abs, e.max_rel, e.pass ? "PASS" : "FAIL");
    if (!L->check_only && kLabEmulated) printf(" %12s %12.0f %9s", "emulated", bytes, "-");
    if (!L->check_only && !kLabEmulated) {
        LAB_CHECK(launch());  // warm-up (caches, clocks)
        cudaEvent_t t0, t1;
        LAB_CHECK(cudaEventCreate(&t0));
        LAB_CHECK(cudaEventCreate(&t1));
        LAB_CHECK(cudaEventRecord(t0, L->stream));
        for (int i = 0; i < L->iters; i++) LAB_CHECK(launch());
        LAB_CHECK(cudaEventRecord(t1, L->stream));
        LAB_CHECK(cudaEventSynchronize(t1));
        float ms = 0.0f;
        LAB_CHECK(cudaEventElapsedTime(&ms, t0, t1));
        LAB_CHECK(cudaEventDestroy(t0));
        LAB_CHECK(cudaEventDestroy(t1));
        const double us = 1000.0 * ms / L->iters, gbs = us > 0 ? bytes / (us * 1e-6) / 1e9 : 0.0;
        printf(" %12.2f %12.0f %9.2f", us, bytes, gbs);
        if (L->peak_gbs > 0) printf(" %6.1f%%", 100.0 * gbs / L->peak_gbs);
    }
    printf("\n");
    fflush(stdout);
}

static inline int lab_finish(Lab *L) {
    LAB_CHECK(cudaStreamDestroy(L->stream));
    if (L->failed) printf("lab %s: %d version(s) FAILED the check against the CPU twin\n", L->family, L->failed);
    else printf("lab %s: every version matches the CPU twin\n", L->family);
    return L->failed ? 1 : 0;
}

// ---------------------------------------------------------------------------------------------
// Device buffers and inputs.

// A device array of n T, freed at scope exit.
template <typename T>
struct LabBuf {
    T *p = nullptr;
    size_t n = 0;
    explicit LabBuf(size_t count) : n(count) {
        LAB_CHECK(cudaMalloc((void **)&p, (count ? count : 1) * sizeof(T)));
        LAB_CHECK(cudaMemset(p, 0, (count ? count : 1) * sizeof(T)));
    }
    explicit LabBuf(const std::vector<T> &h) : LabBuf(h.size()) { upload(h); }
    LabBuf(const LabBuf &) = delete;
    LabBuf &operator=(const LabBuf &) = delete;
    ~LabBuf() { cudaFree(p); }
    void upload(const std::vector<T> &h) {
        if (!h.empty()) LAB_CHECK(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    }
    std::vector<T> get() const {
        std::vector<T> h(n);
        if (n) LAB_CHECK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
        return h;
    }
};

// Uniform floats in [lo, hi) from a fixed seed (xorshift64*): every run sees the same inputs.
static inline std::vector<float> lab_random(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    std::vector<float> v(n);
    for (float &x : v) {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        x = lo + (hi - lo) * (float)((double)((s * 0x2545F4914F6CDD1Dull) >> 11) * (1.0 / 9007199254740992.0));
    }
    return v;
}

#endif
