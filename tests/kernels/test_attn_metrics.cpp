// test_attn_metrics.cpp — kernels/attn_metrics.cu against emx_attention_metrics on random score
// rows (several layers, layer selections, with and without precomputed head statistics) and
// rows with non-finite entries.
#include <math.h>

#include <vector>

#include "kernels/attention.h"
#include "kernels/attn_metrics.h"
#include "kb_util.h"

extern "C" {
#include "runtime/cpu/cpu_ops.h"
#include "sampler/metrics.h"
}

namespace {

// Same double formulas on both sides from the same float scores; the order of the sums differs
// (a tree over keys vs. a loop): the metrics agree to ~1e-14 relative. 1e-11 leaves room for
// the cancellation in the variance across heads, a difference of nearby entropies.
void expect_close(double g, double r, const char *name, const char *what) {
    cr_assert(close_to(g, r, 1e-11, 1e-10), "%s: %s %.17g, cpu %.17g", what, name, g, r);
}

void check(const std::vector<float> &scores, int n_layers, int n_heads, int stride, int valid_len,
           int layer, bool use_head_stats, const char *what) {
    std::vector<double> scratch(valid_len);
    EmxMetrics ref = {};
    cr_assert_eq(emx_attention_metrics(scores.data(), n_layers, n_heads, stride, valid_len, layer,
                                       scratch.data(), &ref), 0);
    DevBuf<float> d_s(scores.size());
    d_s.upload(scores);
    DevBuf<EmxSoftmaxStats> d_hs((size_t)n_layers * n_heads);
    if (use_head_stats) {  // what the attention kernel would have left: the rows' statistics
        std::vector<EmxSoftmaxStats> hs((size_t)n_layers * n_heads);
        for (size_t r = 0; r < hs.size(); r++) hs[r] = emx_softmax_stats_row(&scores[r * stride], valid_len);
        d_hs.upload(hs);
    }
    DevBuf<EmxMetrics> d_m(1);
    DevBuf<uint8_t> ws(emx_cuda_attn_metrics_workspace_bytes(n_layers));
    CUDA_OK(emx_cuda_attn_metrics(d_s.p, use_head_stats ? d_hs.p : nullptr, n_layers, n_heads, stride,
                                  valid_len, nullptr, layer, d_m.p, ws.p, 0));
    CUDA_OK(cudaDeviceSynchronize());
    const EmxMetrics m = d_m.get();
    expect_close(m.attn_entropy_bits, ref.attn_entropy_bits, "entropy", what);
    expect_close(m.attn_varentropy_heads_bits2, ref.attn_varentropy_heads_bits2, "varentropy across heads", what);
    expect_close(m.attn_varentropy_true_bits2, ref.attn_varentropy_true_bits2, "true varentropy", what);
    expect_close(m.attn_agreement, ref.attn_agreement, "agreement", what);
    expect_close(m.attn_interaction_strength, ref.attn_interaction_strength, "interaction strength", what);
}

std::vector<float> random_scores(Rng &rng, size_t n, float scale) {
    std::vector<float> s(n);
    for (float &x : s) x = rng.normal() * scale;
    return s;
}

}  // namespace

Test(attn_metrics, random_rows_layers_and_lengths) {
    Rng rng(11);
    const int n_layers = 3, n_heads = 9, stride = 310;
    std::vector<float> s = random_scores(rng, (size_t)n_layers * n_heads * stride, 2.5f);
    for (int valid : {1, 37, 300})
        for (int layer : {(int)EMX_ATTN_LAYER_LAST, (int)EMX_ATTN_LAYERS_ALL, 1})
            for (bool hs : {false, true}) check(s, n_layers, n_heads, stride, valid, layer, hs, "random");
}

Test(attn_metrics, qwen3_heads) {
    Rng rng(12);
    std::vector<float> s = random_scores(rng, (size_t)2 * 16 * 257, 6.0f);
    check(s, 2, 16, 257, 257, EMX_ATTN_LAYER_LAST, false, "16 heads, 257 keys");
}

Test(attn_metrics, non_finite_and_peaked) {
    Rng rng(13);
    const int n_heads = 5, stride = 64, valid = 61;
    std::vector<float> s = random_scores(rng, (size_t)n_heads * stride, 3.0f);
    s[3] = -INFINITY;
    s[stride + 7] = NAN;
    s[2 * stride + 9] = INFINITY;
    s[2 * stride + 10] = INFINITY;
    for (int k = 0; k < valid; k++) s[3 * stride + k] = k == 5 ? 50.0f : -50.0f;  // one-hot head
    for (int k = 0; k < valid; k++) s[4 * stride + k] = 1e30f * (k % 2 ? 1 : -1);  // huge
    check(s, 1, n_heads, stride, valid, EMX_ATTN_LAYER_LAST, false, "non-finite rows");
}

Test(attn_metrics, rejects_bad_layer) {
    DevBuf<float> s(10);
    DevBuf<EmxMetrics> m(1);
    DevBuf<uint8_t> ws(emx_cuda_attn_metrics_workspace_bytes(2));
    cr_assert_eq(emx_cuda_attn_metrics(s.p, nullptr, 2, 1, 5, 5, nullptr, 2, m.p, ws.p, 0), cudaErrorInvalidValue);
    cr_assert_eq(emx_cuda_attn_metrics(s.p, nullptr, 2, 1, 4, 5, nullptr, 0, m.p, ws.p, 0), cudaErrorInvalidValue);
}

// The decode-step pipeline: the attention kernel writes each layer's score rows and per-head
// statistics, the metrics kernel reads them (head_stats given, so it does not recompute them);
// against emx_attention_head's scores fed to emx_attention_metrics on the CPU. The device scores
// differ from the CPU's by float rounding of the dot products (~1e-6, test_attention.cpp), which
// moves the metrics by about as much: tolerance 1e-5 relative + 1e-6 absolute.
Test(attn_metrics, from_attention_kernel) {
    Rng rng(14);
    const int n_layers = 2, nh = 6, nkv = 2, hd = 48, valid = 70, ctx = 80, kv_dim = nkv * hd;
    std::vector<float> q((size_t)n_layers * nh * hd), kc((size_t)n_layers * ctx * kv_dim), vc(kc.size());
    for (float &x : q) x = rng.normal() * 2.0f;
    for (float &x : kc) x = rng.normal();
    for (float &x : vc) x = rng.normal();
    std::vector<float> cpu_scores((size_t)n_layers * nh * ctx, 0.0f), out(hd), probs(valid);
    for (int l = 0; l < n_layers; l++)
        for (int h = 0; h < nh; h++) {
            const float *kl = &kc[(size_t)l * ctx * kv_dim + (size_t)(h / (nh / nkv)) * hd];
            const float *vl = &vc[(size_t)l * ctx * kv_dim + (size_t)(h / (nh / nkv)) * hd];
            emx_attention_head(out.data(), &q[((size_t)l * nh + h) * hd], kl, vl, (size_t)kv_dim, valid, hd,
                               1.0f / sqrtf((float)hd), &cpu_scores[((size_t)l * nh + h) * ctx], probs.data());
        }
    DevBuf<float> d_q(q.size()), d_k(kc.size()), d_v(vc.size()), d_out((size_t)nh * hd), d_scores(cpu_scores.size());
    DevBuf<EmxSoftmaxStats> d_hs((size_t)n_layers * nh);
    DevBuf<uint8_t> ws(emx_cuda_attention_workspace_bytes(EMX_ATTN_SPLIT_GQA, nh, hd, valid, 32));
    d_q.upload(q);
    d_k.upload(kc);
    d_v.upload(vc);
    for (int l = 0; l < n_layers; l++) {
        EmxAttentionArgs a = {};
        a.kv_dtype = EMX_KV_F32;  // zero is EMX_KV_AUTO (base/kv_type.h), which a kernel refuses
        a.q = d_q.p + (size_t)l * nh * hd;
        a.k_cache = d_k.p + (size_t)l * ctx * kv_dim;
        a.v_cache = d_v.p + (size_t)l * ctx * kv_dim;
        a.n_heads = nh;
        a.n_kv_heads = nkv;
        a.head_dim = hd;
        a.n_keys = valid;
        a.out = d_out.p;
        a.scores = d_scores.p + (size_t)l * nh * ctx;
        a.score_stride = ctx;
        a.head_stats = d_hs.p + (size_t)l * nh;
        a.keys_per_block = 32;
        a.workspace = ws.p;
        CUDA_OK(emx_cuda_attention(EMX_ATTN_SPLIT_GQA, &a, 0));
    }
    std::vector<double> scratch(valid);
    DevBuf<EmxMetrics> d_m(1);
    DevBuf<uint8_t> mws(emx_cuda_attn_metrics_workspace_bytes(n_layers));
    for (int layer : {(int)EMX_ATTN_LAYER_LAST, (int)EMX_ATTN_LAYERS_ALL}) {
        EmxMetrics ref = {};
        cr_assert_eq(emx_attention_metrics(cpu_scores.data(), n_layers, nh, ctx, valid, layer, scratch.data(), &ref), 0);
        CUDA_OK(emx_cuda_attn_metrics(d_scores.p, d_hs.p, n_layers, nh, ctx, valid, nullptr, layer, d_m.p, mws.p, 0));
        const EmxMetrics m = d_m.get();
        const double got[] = {m.attn_entropy_bits, m.attn_varentropy_heads_bits2, m.attn_varentropy_true_bits2,
                              m.attn_agreement, m.attn_interaction_strength};
        const double want[] = {ref.attn_entropy_bits, ref.attn_varentropy_heads_bits2, ref.attn_varentropy_true_bits2,
                               ref.attn_agreement, ref.attn_interaction_strength};
        for (int i = 0; i < 5; i++)
            cr_assert(close_to(got[i], want[i], 1e-6, 1e-5), "layer %d metric %d: %.12g, cpu %.12g", layer, i, got[i],
                      want[i]);
    }
}
