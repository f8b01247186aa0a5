// attention_test_util.h — what the attention kernel tests share (test_attention*.cpp): the small
// GQA shape they run, the cache's bytes made from floats, the call's arguments for that shape, and
// the bitwise comparison of per-head statistics.
#ifndef ENTROPIX_TESTS_ATTENTION_TEST_UTIL_H
#define ENTROPIX_TESTS_ATTENTION_TEST_UTIL_H

#include <stdint.h>
#include <string.h>

#include <vector>

#include "kernels/attention.h"

extern "C" {
#include "base/dtype.h"
}

// GQA 6/2 heads of head_dim 40 (not a multiple of a warp).
const int kNh = 6, kNkv = 2, kHd = 40, kKvDim = kNkv * kHd, kQDim = kNh * kHd;

// Floats as the cache's bytes; with f16, `x` is rounded to what the cache holds (a CPU twin then
// sees exactly the device's values).
static inline std::vector<uint8_t> cache_bytes(std::vector<float> &x, int kv_dtype) {
    std::vector<uint8_t> b(x.size() * (kv_dtype == EMX_KV_F16 ? 2 : 4));
    for (size_t i = 0; i < x.size(); i++) {
        if (kv_dtype == EMX_KV_F16) {
            const uint16_t h = emx_f32_to_f16(x[i]);
            x[i] = emx_f16_to_f32(h);
            memcpy(&b[2 * i], &h, 2);
        } else {
            memcpy(&b[4 * i], &x[i], 4);
        }
    }
    return b;
}

// One query row of the shape over n_keys keys of one contiguous cache, in chunks of kpb keys
// (0: the kernel's choice); outputs, workspace, tails and rows are the caller's to set.
static inline EmxAttentionArgs base_args(const float *q, const void *k, const void *v, int kv_dtype, int n_keys,
                                         int kpb) {
    EmxAttentionArgs a = {};
    a.q = q;
    a.k_cache = k;
    a.v_cache = v;
    a.kv_dtype = kv_dtype;
    a.n_heads = kNh;
    a.n_kv_heads = kNkv;
    a.head_dim = kHd;
    a.n_keys = n_keys;
    a.keys_per_block = kpb;
    return a;
}

// The statistics field by field, each bitwise (the struct's padding after n_posinf is not data).
static inline bool same_stats(const std::vector<EmxSoftmaxStats> &a, const std::vector<EmxSoftmaxStats> &b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); i++) {
        const double x[4] = {a[i].max, a[i].sum_e, a[i].sum_et, a[i].sum_et2};
        const double y[4] = {b[i].max, b[i].sum_e, b[i].sum_et, b[i].sum_et2};
        if (memcmp(x, y, sizeof x) != 0 || a[i].n_posinf != b[i].n_posinf) return false;
    }
    return true;
}

#endif
