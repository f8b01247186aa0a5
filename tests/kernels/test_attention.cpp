// test_attention.cpp — kernels/attention.cu (PLAIN, SPLIT, SPLIT_GQA; f32 and f16 KV caches) against the
// CPU twin emx_attention_head, and its per-head statistics against metrics.h on the CPU's scores.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include <vector>

#include "attention.h"
#include "kb_util.h"
#include "rope.h"

extern "C" {
#include "cpu_ops.h"
#include "dtype.h"
#include "metrics.h"
#include "model_format.h"
}

namespace {

struct Shape {
    int n_heads, n_kv_heads, head_dim, n_keys, ctx, keys_per_block;
};

// Runs one case through `kernel` and compares with the CPU. Tolerances: the scores are float dot
// products of head_dim terms summed in another order than the CPU's SIMD loop (|error| ~ a few
// ulp of Σ|q_d k_d| ≈ 1e-6 for these N(0,1) inputs); out adds the float exp / normalisation
// rounding (~1e-6 relative). The statistics are double sums of exps of those float scores:
// they inherit the score error (entropy changes by ≤ max|ΔS| ≈ 1e-6 nats), hence 2e-5.
void check_case(int kernel, int kv_dtype, const Shape &sh, uint64_t seed) {
    Rng rng(seed);
    const int hd = sh.head_dim, kv_dim = sh.n_kv_heads * hd, group = sh.n_heads / sh.n_kv_heads;
    std::vector<float> q((size_t)sh.n_heads * hd), kc((size_t)sh.ctx * kv_dim), vc(kc.size());
    for (float &x : q) x = rng.normal() * 1.5f;
    for (float &x : kc) x = rng.normal();
    for (float &x : vc) x = rng.normal();
    std::vector<uint16_t> k16(kc.size()), v16(vc.size());
    if (kv_dtype == EMX_KV_F16) {  // the CPU sees exactly the values the f16 cache holds
        for (size_t i = 0; i < kc.size(); i++) {
            k16[i] = emx_f32_to_f16(kc[i]);
            kc[i] = emx_f16_to_f32(k16[i]);
            v16[i] = emx_f32_to_f16(vc[i]);
            vc[i] = emx_f16_to_f32(v16[i]);
        }
    }
    // CPU twin
    const float scale = 1.0f / sqrtf((float)hd);
    std::vector<float> out_ref((size_t)sh.n_heads * hd), sc_ref((size_t)sh.n_heads * sh.n_keys),
        probs(sh.n_keys);
    for (int h = 0; h < sh.n_heads; h++) {
        const int kvh = h / group;
        emx_attention_head(&out_ref[(size_t)h * hd], &q[(size_t)h * hd], &kc[(size_t)kvh * hd],
                           &vc[(size_t)kvh * hd], (size_t)kv_dim, sh.n_keys, hd, scale,
                           &sc_ref[(size_t)h * sh.n_keys], probs.data());
    }

    // device
    const size_t esz = kv_dtype == EMX_KV_F16 ? 2 : 4;
    DevBuf<float> d_q(q.size()), d_out(out_ref.size());
    DevBuf<uint8_t> d_k(kc.size() * esz), d_v(vc.size() * esz);
    d_q.upload(q);
    d_k.upload(kv_dtype == EMX_KV_F16 ? (const uint8_t *)k16.data() : (const uint8_t *)kc.data(), kc.size() * esz);
    d_v.upload(kv_dtype == EMX_KV_F16 ? (const uint8_t *)v16.data() : (const uint8_t *)vc.data(), vc.size() * esz);
    const int stride = sh.n_keys + 3;  // a stride wider than the row: entries past it untouched
    std::vector<float> sentinel((size_t)sh.n_heads * stride, 12345.0f);
    DevBuf<float> d_scores(sentinel.size());
    d_scores.upload(sentinel);
    DevBuf<EmxSoftmaxStats> d_stats(sh.n_heads);
    size_t ws_bytes = emx_cuda_attention_workspace_bytes(kernel, sh.n_heads, hd, sh.n_keys, sh.keys_per_block);
    cr_assert_gt(ws_bytes, 0u);
    DevBuf<uint8_t> d_ws(ws_bytes);

    EmxAttentionArgs a = {};
    a.q = d_q.p;
    a.k_cache = d_k.p;
    a.v_cache = d_v.p;
    a.kv_dtype = kv_dtype;
    a.n_heads = sh.n_heads;
    a.n_kv_heads = sh.n_kv_heads;
    a.head_dim = hd;
    a.n_keys = sh.n_keys;
    a.out = d_out.p;
    a.scores = d_scores.p;
    a.score_stride = stride;
    a.head_stats = d_stats.p;
    a.keys_per_block = sh.keys_per_block;
    a.workspace = d_ws.p;
    CUDA_OK(emx_cuda_attention(kernel, &a, 0));
    CUDA_OK(cudaDeviceSynchronize());

    std::vector<float> out = d_out.download(out_ref.size()), sc = d_scores.download(sentinel.size());
    std::vector<EmxSoftmaxStats> st = d_stats.download(sh.n_heads);
    for (int h = 0; h < sh.n_heads; h++) {
        for (int t = 0; t < sh.n_keys; t++) {
            float g = sc[(size_t)h * stride + t], r = sc_ref[(size_t)h * sh.n_keys + t];
            cr_assert(close_to(g, r, 2e-5, 1e-5), "kernel %d kv %d head %d key %d: score %.9g, cpu %.9g",
                      kernel, kv_dtype, h, t, g, r);
        }
        for (int t = sh.n_keys; t < stride; t++)
            cr_assert_eq(sc[(size_t)h * stride + t], 12345.0f, "head %d: score written past n_keys at %d", h, t);
        for (int d = 0; d < hd; d++) {
            float g = out[(size_t)h * hd + d], r = out_ref[(size_t)h * hd + d];
            cr_assert(close_to(g, r, 2e-5, 1e-4), "kernel %d kv %d head %d d %d: out %.9g, cpu %.9g", kernel,
                      kv_dtype, h, d, g, r);
        }
        EmxSoftmaxStats ref = emx_softmax_stats_row(&sc_ref[(size_t)h * sh.n_keys], sh.n_keys);
        double he = emx_softmax_stats_entropy_nats(st[h]), hr = emx_softmax_stats_entropy_nats(ref);
        double ve = emx_softmax_stats_varentropy_nats2(st[h]), vr = emx_softmax_stats_varentropy_nats2(ref);
        double le = emx_softmax_stats_lse(st[h]), lr = emx_softmax_stats_lse(ref);
        cr_assert(close_to(he, hr, 2e-5, 1e-5), "head %d: entropy %.12g nats, cpu %.12g", h, he, hr);
        cr_assert(close_to(ve, vr, 2e-5, 1e-4), "head %d: varentropy %.12g, cpu %.12g", h, ve, vr);
        cr_assert(close_to(le, lr, 2e-5, 1e-5), "head %d: lse %.12g, cpu %.12g", h, le, lr);
    }
}

// Key counts 1 (the token's own key alone), 37, 300 (not multiples of a warp, a block or a
// chunk), with chunks smaller than the row so the combine merges several.
const Shape kShapes[] = {
    {9, 3, 64, 1, 8, 0},       // SmolLM2-135M heads, first position
    {9, 3, 64, 37, 40, 16},    // 3 chunks, the last partial
    {9, 3, 64, 300, 301, 0},   // default chunk 256: two chunks
    {4, 2, 128, 300, 300, 64}, // Qwen3-0.6B head_dim (heads reduced for emulation speed)
    {3, 3, 40, 37, 50, 10},    // no GQA, head_dim not a multiple of 32
    {16, 8, 128, 1000, 1003, 0},  // Qwen3-0.6B heads at 1000 keys: 4 default chunks
};

void run_all(int kernel, int kv_dtype) {
    uint64_t seed = 1;
    for (const Shape &sh : kShapes) check_case(kernel, kv_dtype, sh, seed++);
}

}  // namespace

Test(attention, plain_f32) { run_all(EMX_ATTN_PLAIN, EMX_KV_F32); }
Test(attention, split_f32) { run_all(EMX_ATTN_SPLIT, EMX_KV_F32); }
Test(attention, plain_f16) { run_all(EMX_ATTN_PLAIN, EMX_KV_F16); }
Test(attention, split_f16) { run_all(EMX_ATTN_SPLIT, EMX_KV_F16); }
Test(attention, split_gqa_f32) { run_all(EMX_ATTN_SPLIT_GQA, EMX_KV_F32); }
Test(attention, split_gqa_f16) { run_all(EMX_ATTN_SPLIT_GQA, EMX_KV_F16); }

// A group of 12 query heads per KV head is over SPLIT_GQA's limit (8): it must run SPLIT instead.
Test(attention, split_gqa_large_group_falls_back) {
    const Shape sh = {12, 1, 32, 45, 45, 16};
    check_case(EMX_ATTN_SPLIT_GQA, EMX_KV_F32, sh, 77);
}

// The position read from device memory (CUDA graph replay): a grid sized for 300 keys that
// finds 37 in n_keys_dev must give the 37-key result.
Test(attention, n_keys_from_device) {
    Rng rng(99);
    const int nh = 2, nkv = 1, hd = 32, big = 300, small = 37;
    std::vector<float> q(nh * hd), kc((size_t)big * nkv * hd), vc(kc.size());
    for (float &x : q) x = rng.normal();
    for (float &x : kc) x = rng.normal();
    for (float &x : vc) x = rng.normal();
    std::vector<float> out_ref(nh * hd), sc(small), pr(small);
    for (int h = 0; h < nh; h++)
        emx_attention_head(&out_ref[h * hd], &q[h * hd], kc.data(), vc.data(), (size_t)hd, small, hd,
                           1.0f / sqrtf((float)hd), sc.data(), pr.data());
    DevBuf<float> d_q(q.size()), d_k(kc.size()), d_v(vc.size()), d_out(out_ref.size());
    DevBuf<int> d_n(1);
    d_q.upload(q);
    d_k.upload(kc);
    d_v.upload(vc);
    d_n.upload(&small, 1);
    for (int kernel = EMX_ATTN_PLAIN; kernel <= EMX_ATTN_SPLIT_GQA; kernel++) {
        DevBuf<uint8_t> ws(emx_cuda_attention_workspace_bytes(kernel, nh, hd, big, 64));
        EmxAttentionArgs a = {};
        a.q = d_q.p;
        a.k_cache = d_k.p;
        a.v_cache = d_v.p;
        a.n_heads = nh;
        a.n_kv_heads = nkv;
        a.head_dim = hd;
        a.n_keys = big;
        a.n_keys_dev = d_n.p;
        a.out = d_out.p;
        a.keys_per_block = 64;
        a.workspace = ws.p;
        CUDA_OK(emx_cuda_attention(kernel, &a, 0));
        CUDA_OK(cudaDeviceSynchronize());
        std::vector<float> out = d_out.download(out_ref.size());
        for (int i = 0; i < nh * hd; i++)
            cr_assert(close_to(out[i], out_ref[i], 2e-5, 1e-4), "kernel %d [%d]: %g vs cpu %g", kernel, i,
                      out[i], out_ref[i]);
    }
}

Test(attention, rejects_bad_shapes) {
    EmxAttentionArgs a = {};
    a.n_heads = 9;
    a.n_kv_heads = 4;  // 9 % 4 != 0
    a.head_dim = 64;
    a.n_keys = 5;
    cr_assert_eq(emx_cuda_attention(EMX_ATTN_SPLIT, &a, 0), cudaErrorInvalidValue);
}

// Decode steps through KA's RoPE + KV-write kernel (kernels/rope.h) and then attention, against
// the CPU's emx_rope + cache write + emx_attention_head: the two kernels agree on the cache
// layout and its f16 format. Tolerances: the device's sin/cos and rotation differ from the CPU's
// by float rounding (~1e-7 relative); an f16 cache can then round a key or value to the
// neighbouring half (1e-3 relative), hence 3e-3 for f16 against 1e-4 for f32.
Test(attention, decode_steps_after_rope_kv_write) {
    const int nh = 4, nkv = 2, hd = 64, half = hd / 2, steps = 21, q_dim = nh * hd, kv_dim = nkv * hd;
    std::vector<double> inv_freq(half);
    emx_rope_inv_freq(inv_freq.data(), hd, 10000.0, nullptr);
    for (int kv_dtype = EMX_KV_F32; kv_dtype <= EMX_KV_F16; kv_dtype++) {
        Rng rng(500 + kv_dtype);
        const size_t esz = kv_dtype == EMX_KV_F16 ? 2 : 4;
        std::vector<float> kc_cpu((size_t)steps * kv_dim), vc_cpu(kc_cpu.size()), cs(half), sn(half);
        DevBuf<float> d_q(q_dim), d_k(kv_dim), d_v(kv_dim), d_out(q_dim);
        DevBuf<uint8_t> d_kc((size_t)steps * kv_dim * esz), d_vc((size_t)steps * kv_dim * esz);
        DevBuf<double> d_freq(half);
        DevBuf<int> d_pos(1);
        DevBuf<uint8_t> ws(emx_cuda_attention_workspace_bytes(EMX_ATTN_SPLIT_GQA, nh, hd, steps, 8));
        d_freq.upload(inv_freq);
        for (int pos = 0; pos < steps; pos++) {
            std::vector<float> q(q_dim), k(kv_dim), v(kv_dim);
            for (float &x : q) x = rng.normal();
            for (float &x : k) x = rng.normal();
            for (float &x : v) x = rng.normal();
            d_q.upload(q);
            d_k.upload(k);
            d_v.upload(v);
            d_pos.upload(&pos, 1);
            EmxRopeArgs r = {};
            r.q = d_q.p;
            r.k = d_k.p;
            r.v = d_v.p;
            r.k_cache = d_kc.p;
            r.v_cache = d_vc.p;
            r.kv_dtype = kv_dtype;
            r.pos = d_pos.p;
            r.inv_freq = d_freq.p;
            r.eps = 1e-6f;
            r.batch = 1;
            r.n_heads = nh;
            r.n_kv_heads = nkv;
            r.head_dim = hd;
            r.style = EMX_ROPE_HALF;
            CUDA_OK(emx_cuda_rope_kv(&r, 0));
            EmxAttentionArgs a = {};
            a.q = d_q.p;
            a.k_cache = d_kc.p;
            a.v_cache = d_vc.p;
            a.kv_dtype = kv_dtype;
            a.n_heads = nh;
            a.n_kv_heads = nkv;
            a.head_dim = hd;
            a.n_keys = pos + 1;
            a.out = d_out.p;
            a.keys_per_block = 8;
            a.workspace = ws.p;
            CUDA_OK(emx_cuda_attention(EMX_ATTN_SPLIT_GQA, &a, 0));
            CUDA_OK(cudaDeviceSynchronize());

            // CPU: rotate, write the cache row (rounded through f16 as the device stores it), attend
            emx_rope_angles(cs.data(), sn.data(), inv_freq.data(), half, pos);
            emx_rope(q.data(), nh, hd, EMX_ROPE_HALF, cs.data(), sn.data());
            emx_rope(k.data(), nkv, hd, EMX_ROPE_HALF, cs.data(), sn.data());
            for (int i = 0; i < kv_dim; i++) {
                float kk = k[i], vv = v[i];
                if (kv_dtype == EMX_KV_F16) {
                    kk = emx_f16_to_f32(emx_f32_to_f16(kk));
                    vv = emx_f16_to_f32(emx_f32_to_f16(vv));
                }
                kc_cpu[(size_t)pos * kv_dim + i] = kk;
                vc_cpu[(size_t)pos * kv_dim + i] = vv;
            }
            std::vector<float> ref(q_dim), sc(pos + 1), pr(pos + 1);
            for (int h = 0; h < nh; h++)
                emx_attention_head(&ref[(size_t)h * hd], &q[(size_t)h * hd], &kc_cpu[(size_t)(h / (nh / nkv)) * hd],
                                   &vc_cpu[(size_t)(h / (nh / nkv)) * hd], (size_t)kv_dim, pos + 1, hd,
                                   1.0f / sqrtf((float)hd), sc.data(), pr.data());
            const std::vector<float> out = d_out.download(q_dim);
            const double tol = kv_dtype == EMX_KV_F16 ? 3e-3 : 1e-4;
            for (int i = 0; i < q_dim; i++)
                cr_assert(close_to(out[i], ref[i], tol, tol), "kv %d pos %d [%d]: %.7g, cpu %.7g", kv_dtype, pos, i,
                          out[i], ref[i]);
        }
    }
}
