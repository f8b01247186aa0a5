// kb_util.h — small helpers of the kernel tests: a device buffer that frees itself, copies, a
// seeded random generator (the tests must be reproducible) and random logits rows.
// dense_test_util.h builds on it for the dense kernels.
#ifndef ENTROPIX_TESTS_KB_UTIL_H
#define ENTROPIX_TESTS_KB_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include <criterion/criterion.h>
#include <cuda_runtime.h>

#include <utility>
#include <vector>

extern "C" {
#include "runtime/model.h"
}

#define CUDA_OK(call)                                                                        \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        cr_assert_eq(e_, cudaSuccess, "%s: %s", #call, cudaGetErrorString(e_));              \
    } while (0)

// Runs `run` (kernels launched, output copied to the host) twice and returns both outputs. Under
// the emulator the two runs take the threads and blocks in forward, then reverse order, so a
// missing barrier or a race on a shared output shows as a difference; on a GPU the hardware picks
// the order, and two runs catch only what varied between them.
template <class F>
auto run_two_schedules(F run) -> std::pair<decltype(run()), decltype(run())> {
#ifdef ENTROPIX_CUDA_EMU
    return emu::run_both_schedules(run);
#else
    auto first = run();
    auto second = run();
    return {std::move(first), std::move(second)};
#endif
}

// Bytewise equality of two outputs (NaN == NaN, -0 != 0: any difference counts).
template <class T>
bool same_bytes(const std::vector<T> &a, const std::vector<T> &b) {
    return a.size() == b.size() && (a.empty() || memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// A device allocation of n elements of T, freed when it goes out of scope.
template <typename T>
struct DevBuf {
    T *p = nullptr;
    size_t n = 0;
    explicit DevBuf(size_t count) : n(count) { CUDA_OK(cudaMalloc((void **)&p, (count ? count : 1) * sizeof(T))); }
    DevBuf(const std::vector<T> &h) : DevBuf(h.size()) { upload(h); }
    DevBuf(const DevBuf &) = delete;
    DevBuf &operator=(const DevBuf &) = delete;
    ~DevBuf() {
        if (p) cudaFree(p);
    }
    void upload(const T *src, size_t count) {
        if (count) CUDA_OK(cudaMemcpy(p, src, count * sizeof(T), cudaMemcpyHostToDevice));
    }
    void upload(const std::vector<T> &v) { upload(v.data(), v.size()); }
    std::vector<T> download(size_t count) const {
        std::vector<T> v(count);
        if (count) CUDA_OK(cudaMemcpy(v.data(), p, count * sizeof(T), cudaMemcpyDeviceToHost));
        return v;
    }
    std::vector<T> download() const { return download(n); }
    T get() const { return download(1)[0]; }
};

// xorshift64*: uniform numbers from a fixed seed.
struct Rng {
    uint64_t s;
    explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
    uint64_t next() {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        return s * 0x2545F4914F6CDD1Dull;
    }
    double uniform() { return (double)(next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
    float uniform(float lo, float hi) { return lo + (hi - lo) * (float)uniform(); }
    int below(int n) { return (int)(next() % (uint64_t)n); }
    // Standard normal (Box-Muller).
    float normal() {
        double u1 = uniform(), u2 = uniform();
        if (u1 < 1e-300) u1 = 1e-300;
        return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
    }
};

// A random logits row of n: normal values at one of three scales, and by `kind` exact ties (the
// rank order must fall back on the id), -inf holes (never drawn or proposed), a NaN, a -0.
static inline std::vector<float> random_logits(Rng &rng, int n, int kind) {
    std::vector<float> l(n);
    const float scales[] = {0.5f, 2.0f, 8.0f};
    const float sc = scales[kind % 3];
    for (float &x : l) x = rng.normal() * sc;
    if (kind % 4 == 1)
        for (float &x : l) x = roundf(x * 2.0f) * 0.5f;
    if (kind % 5 == 2)
        for (int i = 0; i < n; i += 3) l[i] = -INFINITY;
    if (kind % 7 == 3) l[rng.below(n)] = NAN;
    if (kind % 11 == 4) l[rng.below(n)] = 0.0f * -1.0f;
    return l;
}

// |a - b| <= abs_tol + rel_tol * |b|
static inline bool close_to(double a, double b, double abs_tol, double rel_tol) {
    if (isinf(a) || isinf(b)) return a == b;
    return fabs(a - b) <= abs_tol + rel_tol * fabs(b);
}

// Opens build/models/<name> (under $EMX_BUILD): a converted test model (make test-models).
// false if the file is not there, so the caller can skip and say why.
static inline bool open_test_model(const char *name, EmxModel *m) {
    const char *root = getenv("EMX_BUILD");
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/models/%s", root && *root ? root : "build", name);
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    fclose(f);
    cr_assert(emx_model_open(m, path, err, sizeof err) == 0, "%s", err);
    return true;
}

#endif
