// attention_test_util.h — what the attention kernel tests share (test_attention*.cpp): the small
// GQA shape they run, the cache's bytes made from floats, the call's arguments for that shape, the
// bitwise comparison of per-head statistics, and one row of the decode attention's rows call with
// what a launch leaves in it.
#ifndef ENTROPIX_TESTS_ATTENTION_TEST_UTIL_H
#define ENTROPIX_TESTS_ATTENTION_TEST_UTIL_H

#include <stdint.h>
#include <string.h>

#include <memory>
#include <vector>

#include "kb_util.h"
#include "kernels/attention.h"
#include "kernels/attention_decode.h"

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

// One row of an emx_cuda_attention_decode_rows test: a state's own buffers in this shape: its
// cache (keys, values: the rows `layout` places, one entry a layer), workspace, score rows and
// statistics of every layer at ctx positions, arrival counters; and its table entry.
struct DecodeRowBufs {
    int ctx, pos;
    DevBuf<uint8_t> k, v, ws;
    DevBuf<float> scores;
    DevBuf<EmxSoftmaxStats> stats;
    DevBuf<unsigned> arrivals;
    DevBuf<EmxKvLayer> layers;
    DecodeRowBufs(int ctx_, int pos_, int kv_dtype, int kpb, std::vector<float> kc, std::vector<float> vc,
                  const std::vector<EmxKvLayer> &layout)
        : ctx(ctx_), pos(pos_), k(cache_bytes(kc, kv_dtype)), v(cache_bytes(vc, kv_dtype)),
          ws(emx_cuda_attention_workspace_bytes(EMX_ATTN_SPLIT_GQA, kNh, kHd, ctx_, kpb)),
          scores(std::vector<float>(layout.size() * kNh * ctx_, 0.0f)),
          stats(std::vector<EmxSoftmaxStats>(layout.size() * kNh)), arrivals(std::vector<unsigned>(kNkv, 0u)),
          layers(layout) {}
    EmxAttnDecodeRow entry() const { return {k.p, v.p, layers.p, scores.p, stats.p, ws.p, arrivals.p, ctx, pos}; }
};

// What a rows test compares: the outputs, then every row's score rows, statistics, caches (keys
// and values) and counters, concatenated.
struct RowsResult {
    std::vector<float> out, scores;
    std::vector<EmxSoftmaxStats> stats;
    std::vector<uint8_t> cache;
    std::vector<unsigned> arrivals;
};

// Row r alone through emx_cuda_attention_decode at `layer`: a's shape and rope fields, q, k, v
// and out at row r of a's (rows of kQDim, kKvDim), the row's own buffers, position and layer.
static inline void decode_row_alone(EmxAttnDecodeArgs a, const DecodeRowBufs &o, int r, int layer) {
    const size_t row = (size_t)kKvDim * (a.attn.kv_dtype == EMX_KV_F16 ? 2 : 4);
    const EmxKvLayer at = o.layers.download()[layer];
    DevBuf<int> pos(std::vector<int>{o.pos});
    a.attn.q += (size_t)r * kQDim, a.attn.out += (size_t)r * kQDim;
    a.k += (size_t)r * kKvDim, a.v += (size_t)r * kKvDim;
    a.attn.k_cache = o.k.p + (size_t)at.row0 * row, a.attn.v_cache = o.v.p + (size_t)at.row0 * row;
    a.attn.cache_rows = at.rows < o.ctx ? at.rows : 0;
    a.attn.n_keys = o.pos + 1;
    a.attn.scores = o.scores.p + (size_t)layer * kNh * o.ctx, a.attn.score_stride = o.ctx;
    a.attn.head_stats = o.stats.p + (size_t)layer * kNh;
    a.attn.workspace = o.ws.p;
    a.pos = pos.p, a.arrivals = o.arrivals.p;
    CUDA_OK(emx_cuda_attention_decode(&a, nullptr));
    CUDA_OK(cudaDeviceSynchronize());
}

static inline RowsResult gather_rows(const DevBuf<float> &out, const std::vector<std::unique_ptr<DecodeRowBufs>> &b) {
    RowsResult res;
    res.out = out.download();
    for (const auto &r : b) {
        const std::vector<float> sc = r->scores.download();
        const std::vector<EmxSoftmaxStats> st = r->stats.download();
        const std::vector<uint8_t> kc = r->k.download(), vc = r->v.download();
        const std::vector<unsigned> ar = r->arrivals.download();
        res.scores.insert(res.scores.end(), sc.begin(), sc.end());
        res.stats.insert(res.stats.end(), st.begin(), st.end());
        res.cache.insert(res.cache.end(), kc.begin(), kc.end());
        res.cache.insert(res.cache.end(), vc.begin(), vc.end());
        res.arrivals.insert(res.arrivals.end(), ar.begin(), ar.end());
    }
    return res;
}

#endif
