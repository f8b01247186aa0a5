// forward_test_util.h — what the CUDA-backend forward tests share: a state on a device, the
// comparison of two float arrays relative to the reference's largest magnitude, a row's argmax,
// and the emulator's count of the kernels a step runs.
#ifndef ENTROPIX_TESTS_FORWARD_TEST_UTIL_H
#define ENTROPIX_TESTS_FORWARD_TEST_UTIL_H

#include <math.h>
#include <stddef.h>

#include <criterion/criterion.h>

#ifdef ENTROPIX_CUDA_EMU
#include "tests/cuda_emu/include/emu/kernel_runs.h"
#endif

extern "C" {
#include "runtime/forward.h"
#include "runtime/pool/pool_forward.h"
#include "runtime/model.h"
#include "sampler/profile.h"
}

// A state of m on `device` ("cpu", "cuda:0") with ctx positions and one CPU thread; the decode
// graph off with no_graphs; the weights of `share` reused when given; a KV cache of `cache`: f32
// unless a test says otherwise, so that a comparison with the CPU compares the kernels alone (on
// a GPU, auto would round a quantised model's cache to f16: test_forward_cuda_kv16.cpp's tests).
static inline EmxState *new_state(const EmxModel *m, const char *device, int ctx, int no_graphs = 0,
                                  const EmxState *share = nullptr, EmxKvType cache = EMX_KV_F32) {
    EmxStateOptions opt = {};
    opt.n_threads = 1;
    opt.ctx = ctx;
    opt.device = device;
    opt.no_graphs = no_graphs;
    opt.share_weights = share;
    opt.cache_type = cache;
    char err[512];
    EmxState *s = emx_state_new(m, &opt, err, sizeof err);
    cr_assert(s, "emx_state_new(%s, %s cache): %s", device, emx_kv_type_name(cache), err);
    return s;
}

// A decision of `kind` for emx_forward_decide: the classic entropix profile, no pause token, the
// draws' seed, and for a sampled draw temperature, top-k (0: off) and top-p; the metrics asked for
// but with greedy.
static inline EmxDecideSpec decide_spec(int kind, uint64_t seed, float temperature, int top_k, float top_p) {
    EmxDecideSpec spec = {};
    spec.kind = kind;
    spec.pause_token = -1;
    spec.seed = seed;
    spec.want_metrics = kind != EMX_DECIDE_GREEDY;
    emx_profile_classic(&spec.profile);
    spec.params.temperature = temperature, spec.params.top_k = top_k, spec.params.top_p = top_p;
    spec.params.min_p = 0.0f;
    return spec;
}

// Worst |got - want| over n values as a fraction of max|want|; fails above tol.
static inline double compare(const char *what, const float *got, const float *want, size_t n, float tol) {
    float scale = 0, worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) scale = fmaxf(scale, fabsf(want[i]));
    for (size_t i = 0; i < n; i++)
        if (!(fabsf(got[i] - want[i]) <= worst)) worst = fabsf(got[i] - want[i]), at = i;
    cr_assert(worst <= tol * scale, "%s: value %zu differs by %.3g (CPU %.6g, CUDA %.6g; max %.3g)", what, at, worst,
              want[at], got[at], scale);
    return scale > 0 ? worst / scale : worst;
}

// The index of the largest of v[0..n) (the first of equals): a greedy token.
static inline int logits_argmax(const float *v, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
}

// Kernels the emulator has run so far whose names begin with prefix (emu/kernel_runs.h), all of
// them or only the cooperative launches; 0 outside the emulator, where nothing counts them.
static inline long emu_runs(const char *prefix) {
#ifdef ENTROPIX_CUDA_EMU
    return emu::kernel_runs(prefix);
#else
    (void)prefix;
    return 0;
#endif
}
static inline long emu_cooperative_runs(const char *prefix) {
#ifdef ENTROPIX_CUDA_EMU
    return emu::cooperative_kernel_runs(prefix);
#else
    (void)prefix;
    return 0;
#endif
}

#endif
