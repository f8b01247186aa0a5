// test_attention_window.cpp — kernels/attention.cu's Gemma 3 fields (attention.h's scale and
// window) and kernels/attn_metrics.cu's windowed metrics, against the CPU twins:
// emx_attention_head over the keys a row sees (keys p - window + 1 .. p for the row at key p)
// with the same scale, metrics.h's statistics of those scores, and emx_attention_metrics_window.
// Every kernel, f32 and f16 caches; 5 causal rows over 37 keys with a window of 11 and chunks of
// 9 keys (the rows' first keys 22..26: whole chunks before the window and a chunk cut by it), one
// query with the key count read on the device, and a window wider than the keys (nothing
// masked: bitwise the call without a window). Tolerances as test_attention.cpp's check_case.
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <vector>

#include "attention_test_util.h"
#include "kb_util.h"
#include "kernels/attention.h"
#include "kernels/attn_metrics.h"

extern "C" {
#include "runtime/cpu/cpu_ops.h"
#include "sampler/metrics.h"
}

namespace {

const int kKeys = 37, kWindow = 11, kStride = kKeys + 3;
const float kScale = 0.3f;  // not 1/sqrt(40): the scale must come from the arguments

struct Out {
    std::vector<float> out, scores;
    std::vector<EmxSoftmaxStats> stats;
};

Out run(int kernel, EmxAttentionArgs a, int rows) {
    DevBuf<float> d_out((size_t)rows * kQDim), d_scores((size_t)kNh * kStride);
    DevBuf<EmxSoftmaxStats> d_stats(kNh);
    d_out.upload(std::vector<float>((size_t)rows * kQDim, NAN));
    d_scores.upload(std::vector<float>((size_t)kNh * kStride, 12345.0f));
    DevBuf<uint8_t> d_ws(emx_cuda_attention_workspace_bytes_rows(kernel, kNh, kHd, a.n_keys, a.keys_per_block, rows));
    a.out = d_out.p;
    a.scores = d_scores.p;
    a.score_stride = kStride;
    a.head_stats = d_stats.p;
    a.workspace = d_ws.p;
    CUDA_OK(emx_cuda_attention(kernel, &a, 0));
    CUDA_OK(cudaDeviceSynchronize());
    return Out{d_out.download(), d_scores.download(), d_stats.download()};
}

// Row r of `rows` (its last key n_keys - 1) against the CPU over its window; for the last row
// also the kept scores (-inf before the window, the CPU's after, untouched past n_keys) and the
// statistics.
void check_row(const char *what, const Out &got, int r, bool last, int n_keys, const float *q,
               const std::vector<float> &kc, const std::vector<float> &vc) {
    const int first = n_keys > kWindow ? n_keys - kWindow : 0, seen = n_keys - first;
    std::vector<float> ref(kHd), sc(seen), pr(seen);
    for (int h = 0; h < kNh; h++) {
        const int kvh = h / (kNh / kNkv);
        emx_attention_head(ref.data(), q + (size_t)h * kHd, &kc[(size_t)first * kKvDim + kvh * kHd],
                           &vc[(size_t)first * kKvDim + kvh * kHd], (size_t)kKvDim, seen, kHd, kScale, sc.data(),
                           pr.data());
        for (int d = 0; d < kHd; d++)
            cr_assert(close_to(got.out[(size_t)r * kQDim + h * kHd + d], ref[d], 2e-5, 1e-4),
                      "%s row %d head %d d %d: %.9g, cpu %.9g", what, r, h, d, got.out[(size_t)r * kQDim + h * kHd + d],
                      ref[d]);
        if (!last) continue;
        const float *row = &got.scores[(size_t)h * kStride];
        for (int t = 0; t < first; t++)
            cr_assert(isinf(row[t]) && row[t] < 0, "%s head %d: score of key %d before the window is %g", what, h, t, row[t]);
        for (int t = first; t < n_keys; t++)
            cr_assert(close_to(row[t], sc[t - first], 1e-5, 1e-5), "%s head %d key %d: score %.9g, cpu %.9g", what, h, t,
                      row[t], sc[t - first]);
        for (int t = n_keys; t < kStride; t++) cr_assert_eq(row[t], 12345.0f, "%s: score %d written past the keys", what, t);
        const EmxSoftmaxStats want = emx_softmax_stats_row(row + first, seen);
        cr_assert(close_to(emx_softmax_stats_entropy_nats(got.stats[h]), emx_softmax_stats_entropy_nats(want), 2e-5, 2e-5),
                  "%s head %d: entropy of the window's keys", what, h);
    }
}

void check_kernel(int kernel, int kv_dtype) {
    const int n_rows = 5, kpb = 9;
    Rng rng(7000 + 10 * kernel + kv_dtype);
    std::vector<float> q((size_t)n_rows * kQDim), kc((size_t)kKeys * kKvDim), vc(kc.size());
    for (float &x : q) x = rng.normal() * 1.5f;
    for (float &x : kc) x = rng.normal();
    for (float &x : vc) x = rng.normal();
    const std::vector<uint8_t> kb = cache_bytes(kc, kv_dtype), vb = cache_bytes(vc, kv_dtype);
    DevBuf<float> d_q(q);
    DevBuf<uint8_t> d_k(kb), d_v(vb);
    char what[96];
    snprintf(what, sizeof what, "kernel %d kv %d rows", kernel, kv_dtype);

    EmxAttentionArgs a = base_args(d_q.p, d_k.p, d_v.p, kv_dtype, kKeys, kpb);
    a.n_rows = n_rows;
    a.scale = kScale;
    a.window = kWindow;
    const Out rows = run(kernel, a, n_rows);
    for (int r = 0; r < n_rows; r++)
        check_row(what, rows, r, r == n_rows - 1, kKeys - n_rows + r + 1, &q[(size_t)r * kQDim], kc, vc);

    // one query at key 29, its count read on the device from a call sized for 37 keys
    snprintf(what, sizeof what, "kernel %d kv %d n_keys_dev", kernel, kv_dtype);
    DevBuf<int> d_n(std::vector<int>{30});
    EmxAttentionArgs one = base_args(d_q.p, d_k.p, d_v.p, kv_dtype, kKeys, kpb);
    one.n_keys_dev = d_n.p;
    one.scale = kScale;
    one.window = kWindow;
    check_row(what, run(kernel, one, 1), 0, true, 30, q.data(), kc, vc);

    // a window wider than the keys: bitwise the call without one
    EmxAttentionArgs wide = base_args(d_q.p, d_k.p, d_v.p, kv_dtype, kKeys, kpb), none = wide;
    wide.window = kKeys;
    const Out w = run(kernel, wide, 1), n = run(kernel, none, 1);
    cr_assert(memcmp(w.out.data(), n.out.data(), w.out.size() * 4) == 0 &&
                  memcmp(w.scores.data(), n.scores.data(), w.scores.size() * 4) == 0,
              "kernel %d kv %d: a window of every key differs from none", kernel, kv_dtype);
}

}  // namespace

Test(attention_window, plain) {
    check_kernel(EMX_ATTN_PLAIN, EMX_KV_F32);
    check_kernel(EMX_ATTN_PLAIN, EMX_KV_F16);
}
Test(attention_window, split) {
    check_kernel(EMX_ATTN_SPLIT, EMX_KV_F32);
    check_kernel(EMX_ATTN_SPLIT, EMX_KV_F16);
}
Test(attention_window, split_gqa) {
    check_kernel(EMX_ATTN_SPLIT_GQA, EMX_KV_F32);
    check_kernel(EMX_ATTN_SPLIT_GQA, EMX_KV_F16);
}

Test(attention_window, rejects_a_negative_window) {
    DevBuf<float> d(kQDim * 4);
    EmxAttentionArgs a = base_args(d.p, d.p, d.p, EMX_KV_F32, 2, 0);
    a.out = d.p;
    a.window = -1;
    cr_assert_eq(emx_cuda_attention(EMX_ATTN_SPLIT, &a, 0), cudaErrorInvalidValue);
}

// The metrics of 4 layers, 1 and 3 local, over 20 keys with a window of 7: each layer's rows from
// its first visible key (13 for the local ones), against emx_attention_metrics_window with
// emx_attention_first_key's keys, every layer selection, with and without head statistics.
Test(attention_window, metrics_over_the_window) {
    const int n_layers = 4, n_heads = 3, stride = 24, valid = 20, window = 7;
    Rng rng(77);
    std::vector<float> scores((size_t)n_layers * n_heads * stride);
    for (float &x : scores) x = rng.normal() * 2.0f;
    for (int l : {1, 3})  // what the attention kernel leaves in a local layer's rows
        for (int h = 0; h < n_heads; h++)
            for (int t = 0; t < valid - window; t++) scores[((size_t)l * n_heads + h) * stride + t] = -INFINITY;
    const int first_key[4] = {0, valid - window, 0, valid - window};
    EmxCudaAttnWindow win = {};
    win.window = window;
    win.local_layers[0] = (1u << 1) | (1u << 3);
    std::vector<EmxSoftmaxStats> hs((size_t)n_layers * n_heads);
    for (int l = 0; l < n_layers; l++)
        for (int h = 0; h < n_heads; h++)
            hs[(size_t)l * n_heads + h] = emx_softmax_stats_row(&scores[((size_t)l * n_heads + h) * stride + first_key[l]],
                                                                valid - first_key[l]);
    DevBuf<float> d_s(scores);
    DevBuf<EmxSoftmaxStats> d_hs(hs);
    DevBuf<EmxMetrics> d_m(1);
    DevBuf<uint8_t> ws(emx_cuda_attn_metrics_workspace_bytes(n_layers));
    std::vector<double> scratch(valid);
    for (int layer : {(int)EMX_ATTN_LAYERS_ALL, (int)EMX_ATTN_LAYER_LAST, 1, 0})
        for (bool stats : {false, true}) {
            EmxMetrics ref = {};
            cr_assert_eq(emx_attention_metrics_window(scores.data(), n_layers, n_heads, stride, valid, first_key, layer,
                                                      scratch.data(), &ref), 0);
            CUDA_OK(emx_cuda_attn_metrics_window(d_s.p, stats ? d_hs.p : nullptr, n_layers, n_heads, stride, valid,
                                                 nullptr, &win, layer, d_m.p, ws.p, 0, 0));
            CUDA_OK(cudaDeviceSynchronize());
            const EmxMetrics m = d_m.get();
            const double got[5] = {m.attn_entropy_bits, m.attn_varentropy_heads_bits2, m.attn_varentropy_true_bits2,
                                   m.attn_agreement, m.attn_interaction_strength};
            const double want[5] = {ref.attn_entropy_bits, ref.attn_varentropy_heads_bits2,
                                    ref.attn_varentropy_true_bits2, ref.attn_agreement, ref.attn_interaction_strength};
            for (int i = 0; i < 5; i++)
                cr_assert(close_to(got[i], want[i], 1e-11, 1e-10), "layer %d stats %d: metric %d %.17g, cpu %.17g",
                          layer, stats, i, got[i], want[i]);
        }
}
