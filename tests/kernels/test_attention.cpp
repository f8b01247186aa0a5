// test_attention.cpp — kernels/attention.cu (PLAIN, SPLIT, SPLIT_GQA; f32 and f16 KV caches) against the
// CPU twin emx_attention_head, and its per-head statistics against metrics.h on the CPU's scores.
// The two extensions are held to bitwise identities with the plain call: split key storage (an
// interleaved branch tail) against a contiguous cache holding the same keys, and n_rows query
// rows (causal prefill) against each row run alone.
#include <string.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include <vector>

#include "kernels/attention.h"
#include "attention_test_util.h"
#include "kb_util.h"
#include "kernels/rope.h"

extern "C" {
#include "runtime/cpu/cpu_ops.h"
#include "base/dtype.h"
#include "sampler/metrics.h"
#include "base/model_format.h"
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
        a.kv_dtype = EMX_KV_F32;  // zero is EMX_KV_AUTO (base/kv_type.h), which a kernel refuses
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
    a.kv_dtype = EMX_KV_F32;  // zero is EMX_KV_AUTO (base/kv_type.h), which a kernel refuses
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

// ---------------------------------------------------------------------------------------------
// Split key storage and several query rows: bitwise identities with the plain single-query call.

namespace {

// The shared shape (attention_test_util.h) over 37 keys (not a multiple of anything).
const int kKeys = 37;

// What one call leaves behind: the outputs, the score buffer (12345 where not written; the stride
// leaves room for the n_keys_dev runs' larger n_keys) and the statistics.
struct Result {
    std::vector<float> out, scores;
    std::vector<EmxSoftmaxStats> stats;
};
const int kScoreStride = kKeys + 16;

// Runs `a` (q, caches, shape, rows set by the caller) with fresh output buffers of `out_floats`
// floats (NaN: what the call does not write stays NaN), scores and statistics when `keep`.
Result run_call(int kernel, EmxAttentionArgs a, size_t out_floats, bool keep) {
    const int rows = a.n_rows > 1 ? a.n_rows : 1;
    DevBuf<float> d_out(out_floats), d_scores((size_t)kNh * kScoreStride);
    DevBuf<EmxSoftmaxStats> d_stats(kNh);
    d_out.upload(std::vector<float>(out_floats, NAN));
    d_scores.upload(std::vector<float>((size_t)kNh * kScoreStride, 12345.0f));
    DevBuf<uint8_t> d_ws(emx_cuda_attention_workspace_bytes_rows(kernel, kNh, kHd, a.n_keys, a.keys_per_block, rows));
    a.out = d_out.p;
    a.scores = keep ? d_scores.p : nullptr;
    a.score_stride = keep ? kScoreStride : 0;
    a.head_stats = keep ? d_stats.p : nullptr;
    a.workspace = d_ws.p;
    CUDA_OK(emx_cuda_attention(kernel, &a, 0));
    CUDA_OK(cudaDeviceSynchronize());
    Result r;
    r.out = d_out.download();
    if (keep) {
        r.scores = d_scores.download();
        r.stats = d_stats.download();
    }
    return r;
}

int first_diff(const std::vector<float> &a, const std::vector<float> &b) {
    for (size_t i = 0; i < a.size(); i++)
        if (memcmp(&a[i], &b[i], 4)) return (int)i;
    return -1;
}

bool same_bits(const void *a, const void *b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

// (a) The keys from tail_start on live in branch 1 of three interleaved branch tails (row j at
// tail + (3j + 1)·kv_dim, stride 3·kv_dim); the cache's own rows from tail_start on are NaN and
// the other branches' rows other random keys, so a read from the wrong place changes the bits.
// Output, scores and statistics must be bitwise those of a contiguous cache, with n_keys given
// on the host and from device memory (a grid sized for 13 keys more, as a graph replay).
void check_split_storage(int kernel, int kv_dtype) {
    const int n_branches = 3, branch = 1, kpb = 16;  // chunks of 16, 16 and 5 keys
    Rng rng(4000 + 10 * kernel + kv_dtype);
    std::vector<float> q(kQDim), kc((size_t)kKeys * kKvDim), vc(kc.size());
    for (float &x : q) x = rng.normal() * 1.5f;
    for (float &x : kc) x = rng.normal();
    for (float &x : vc) x = rng.normal();
    const std::vector<uint8_t> kb = cache_bytes(kc, kv_dtype), vb = cache_bytes(vc, kv_dtype);
    const size_t esz = kb.size() / kc.size(), row_bytes = (size_t)kKvDim * esz;
    DevBuf<float> d_q(q);
    DevBuf<uint8_t> d_k(kb), d_v(vb);
    DevBuf<int> d_n(1);
    d_n.upload(&kKeys, 1);
    const Result want = run_call(kernel, base_args(d_q.p, d_k.p, d_v.p, kv_dtype, kKeys, kpb), kQDim, true);
    for (float x : want.out) cr_assert(!isnan(x), "the contiguous run has NaN outputs");
    for (int h = 0; h < kNh; h++)
        for (int t = kKeys; t < kScoreStride; t++)
            cr_assert_eq(want.scores[(size_t)h * kScoreStride + t], 12345.0f, "score written past n_keys");

    for (int tail_start : {0, 1, 15, 16, 30, kKeys - 1, kKeys}) {
        const int n_tail = kKeys - tail_start;
        // the cache: rows before tail_start, NaN after (never to be read)
        std::vector<float> nan_row(kKvDim, NAN);
        std::vector<uint8_t> kmain = kb, vmain = vb, nan_bytes = cache_bytes(nan_row, kv_dtype);
        for (int t = tail_start; t < kKeys; t++) {
            memcpy(&kmain[t * row_bytes], nan_bytes.data(), row_bytes);
            memcpy(&vmain[t * row_bytes], nan_bytes.data(), row_bytes);
        }
        // the tails: [n_tail][n_branches][kv_dim], branch 1 holding keys tail_start.., the
        // others random
        std::vector<float> other((size_t)(n_tail > 0 ? n_tail : 1) * n_branches * kKvDim);
        for (float &x : other) x = rng.normal();
        std::vector<uint8_t> ktail = cache_bytes(other, kv_dtype), vtail = ktail;
        for (int j = 0; j < n_tail; j++) {
            memcpy(&ktail[((size_t)j * n_branches + branch) * row_bytes], &kb[(tail_start + j) * row_bytes], row_bytes);
            memcpy(&vtail[((size_t)j * n_branches + branch) * row_bytes], &vb[(tail_start + j) * row_bytes], row_bytes);
        }
        DevBuf<uint8_t> d_km(kmain), d_vm(vmain), d_kt(ktail), d_vt(vtail);
        DevBuf<int> d_ts(1);
        d_ts.upload(&tail_start, 1);
        // from_device 2: tail_start from device memory too, the host's field a wrong value
        for (int from_device = 0; from_device <= 2; from_device++) {
            EmxAttentionArgs a = base_args(d_q.p, d_km.p, d_vm.p, kv_dtype, kKeys + (from_device ? 13 : 0), kpb);
            a.n_keys_dev = from_device ? d_n.p : nullptr;
            a.tail_k = d_kt.p + branch * row_bytes;
            a.tail_v = d_vt.p + branch * row_bytes;
            a.tail_start = from_device == 2 ? (tail_start + 7) % (kKeys + 1) : tail_start;
            a.tail_start_dev = from_device == 2 ? d_ts.p : nullptr;
            a.tail_row_stride = n_branches * kKvDim;
            const Result got = run_call(kernel, a, kQDim, true);
            cr_assert(same_bits(got.out.data(), want.out.data(), kQDim * 4),
                      "kernel %d kv %d tail_start %d n_keys_dev %d: out differs from the contiguous cache", kernel,
                      kv_dtype, tail_start, from_device);
            cr_assert(same_bits(got.scores.data(), want.scores.data(), want.scores.size() * 4),
                      "kernel %d kv %d tail_start %d n_keys_dev %d: scores differ", kernel, kv_dtype, tail_start,
                      from_device);
            cr_assert(same_stats(got.stats, want.stats),
                      "kernel %d kv %d tail_start %d n_keys_dev %d: head_stats differ", kernel, kv_dtype, tail_start,
                      from_device);
        }
    }
}

// (b) 5 query rows at consecutive positions over 37 keys (rows attend 33..37 keys; with chunks of
// 9 keys the rows need 4 or 5 chunks). Row strides wider than a row (q + 5, out + 3 floats: the
// gaps stay NaN). Each row bitwise equal to the row run alone with n_keys = 33 + r, and close
// to the CPU twin (tolerances of check_case); scores and statistics those of the last row alone.
// The rows call runs under both schedules (block order forward and reversed) and must not depend
// on it. Also bitwise the same: default strides without scores (PLAIN's score rows all in the
// workspace), and the keys from 30 on in an interleaved tail (both extensions together).
void check_rows(int kernel, int kv_dtype) {
    const int n_rows = 5, kpb = 9, q_stride = kQDim + 5, out_stride = kQDim + 3;
    Rng rng(5000 + 10 * kernel + kv_dtype);
    std::vector<float> q((size_t)n_rows * q_stride, NAN), kc((size_t)kKeys * kKvDim), vc(kc.size());
    std::vector<float> q_packed((size_t)n_rows * kQDim);
    for (int r = 0; r < n_rows; r++)
        for (int i = 0; i < kQDim; i++)
            q[(size_t)r * q_stride + i] = q_packed[(size_t)r * kQDim + i] = rng.normal() * 1.5f;
    for (float &x : kc) x = rng.normal();
    for (float &x : vc) x = rng.normal();
    const std::vector<uint8_t> kb = cache_bytes(kc, kv_dtype), vb = cache_bytes(vc, kv_dtype);
    DevBuf<float> d_q(q), d_qp(q_packed);
    DevBuf<uint8_t> d_k(kb), d_v(vb);

    EmxAttentionArgs a = base_args(d_q.p, d_k.p, d_v.p, kv_dtype, kKeys, kpb);
    a.n_rows = n_rows;
    a.q_row_stride = q_stride;
    a.out_row_stride = out_stride;
    // Under both block orders: the rows share the score and statistics outputs, and a row other
    // than the last writing them would show as a difference between the two.
    const auto both = run_two_schedules([&] { return run_call(kernel, a, (size_t)n_rows * out_stride, true); });
    const Result &rows = both.first;
    cr_assert(same_bytes(rows.out, both.second.out),
              "kernel %d kv %d: the rows' outputs depend on the thread and block order (first at %d)", kernel,
              kv_dtype, first_diff(rows.out, both.second.out));
    cr_assert(same_bytes(rows.scores, both.second.scores),
              "kernel %d kv %d: the scores depend on the thread and block order (first at %d)", kernel, kv_dtype,
              first_diff(rows.scores, both.second.scores));
    cr_assert(same_stats(rows.stats, both.second.stats),
              "kernel %d kv %d: the statistics depend on the thread and block order", kernel, kv_dtype);

    const float scale = 1.0f / sqrtf((float)kHd);
    for (int r = 0; r < n_rows; r++) {
        const int n_keys = kKeys - n_rows + r + 1;
        const Result alone =
            run_call(kernel, base_args(d_q.p + (size_t)r * q_stride, d_k.p, d_v.p, kv_dtype, n_keys, kpb), kQDim, true);
        const float *got = &rows.out[(size_t)r * out_stride];
        cr_assert(same_bits(got, alone.out.data(), kQDim * 4), "kernel %d kv %d row %d: out differs from the row alone",
                  kernel, kv_dtype, r);
        for (int i = kQDim; i < out_stride; i++) cr_assert(isnan(got[i]), "row %d: written past the row at %d", r, i);
        std::vector<float> ref(kHd), sc(n_keys), pr(n_keys);
        for (int h = 0; h < kNh; h++) {
            const int kvh = h / (kNh / kNkv);
            emx_attention_head(ref.data(), &q[(size_t)r * q_stride + (size_t)h * kHd], &kc[(size_t)kvh * kHd],
                               &vc[(size_t)kvh * kHd], (size_t)kKvDim, n_keys, kHd, scale, sc.data(), pr.data());
            for (int d = 0; d < kHd; d++)
                cr_assert(close_to(got[h * kHd + d], ref[d], 2e-5, 1e-4),
                          "kernel %d kv %d row %d head %d d %d: %.9g, cpu %.9g",
                          kernel, kv_dtype, r, h, d, got[h * kHd + d], ref[d]);
        }
        if (r == n_rows - 1) {
            cr_assert(same_bits(rows.scores.data(), alone.scores.data(), rows.scores.size() * 4),
                      "kernel %d kv %d: the scores are not the last row's alone", kernel, kv_dtype);
            cr_assert(same_stats(rows.stats, alone.stats),
                      "kernel %d kv %d: the head_stats are not the last row's alone", kernel, kv_dtype);
        }
    }

    EmxAttentionArgs packed = base_args(d_qp.p, d_k.p, d_v.p, kv_dtype, kKeys, kpb);
    packed.n_rows = n_rows;
    const Result bare = run_call(kernel, packed, (size_t)n_rows * kQDim, false);
    for (int r = 0; r < n_rows; r++)
        cr_assert(same_bits(&bare.out[(size_t)r * kQDim], &rows.out[(size_t)r * out_stride], kQDim * 4),
                  "kernel %d kv %d row %d: default strides without scores differ", kernel, kv_dtype, r);

    // The key count read on the device (a captured graph replayed at another position): a call
    // sized for kKeys keys that finds 9 fewer in n_keys_dev is bitwise the call made with that
    // count, every row attending 9 keys fewer.
    const int fewer = kKeys - 9;
    DevBuf<int> d_n(std::vector<int>{fewer});
    EmxAttentionArgs dev = a, host = a;
    dev.n_keys_dev = d_n.p;
    host.n_keys = fewer;
    const Result from_dev = run_call(kernel, dev, (size_t)n_rows * out_stride, true);
    const Result from_host = run_call(kernel, host, (size_t)n_rows * out_stride, true);
    cr_assert(same_bits(from_dev.out.data(), from_host.out.data(), from_host.out.size() * 4) &&
                  same_bits(from_dev.scores.data(), from_host.scores.data(), from_host.scores.size() * 4) &&
                  same_stats(from_dev.stats, from_host.stats),
              "kernel %d kv %d: rows with n_keys_dev %d differ from n_keys %d", kernel, kv_dtype, fewer, fewer);
    cr_assert(!same_bits(from_dev.out.data(), rows.out.data(), rows.out.size() * 4),
              "kernel %d kv %d: n_keys_dev %d gave the %d-key result", kernel, kv_dtype, fewer, kKeys);

    const int tail_start = 30, n_tail = kKeys - tail_start, n_branches = 3, branch = 2;
    const size_t row_bytes = kb.size() / kKeys;
    std::vector<uint8_t> ktail((size_t)n_tail * n_branches * row_bytes, 0xff), vtail(ktail.size(), 0xff);  // NaN
    for (int j = 0; j < n_tail; j++) {
        memcpy(&ktail[((size_t)j * n_branches + branch) * row_bytes], &kb[(tail_start + j) * row_bytes], row_bytes);
        memcpy(&vtail[((size_t)j * n_branches + branch) * row_bytes], &vb[(tail_start + j) * row_bytes], row_bytes);
    }
    DevBuf<uint8_t> d_kt(ktail), d_vt(vtail);
    a.tail_k = d_kt.p + branch * row_bytes;
    a.tail_v = d_vt.p + branch * row_bytes;
    a.tail_start = tail_start;
    a.tail_row_stride = n_branches * kKvDim;
    const Result split = run_call(kernel, a, (size_t)n_rows * out_stride, true);
    cr_assert(same_bits(split.out.data(), rows.out.data(), rows.out.size() * 4),
              "kernel %d kv %d: rows over split storage differ from the contiguous cache", kernel, kv_dtype);
    cr_assert(same_bits(split.scores.data(), rows.scores.data(), rows.scores.size() * 4) &&
                  same_stats(split.stats, rows.stats),
              "kernel %d kv %d: rows over split storage: scores or statistics differ", kernel, kv_dtype);
}

}  // namespace

Test(attention, split_storage_plain) {
    check_split_storage(EMX_ATTN_PLAIN, EMX_KV_F32);
    check_split_storage(EMX_ATTN_PLAIN, EMX_KV_F16);
}
Test(attention, split_storage_split) {
    check_split_storage(EMX_ATTN_SPLIT, EMX_KV_F32);
    check_split_storage(EMX_ATTN_SPLIT, EMX_KV_F16);
}
Test(attention, split_storage_split_gqa) {
    check_split_storage(EMX_ATTN_SPLIT_GQA, EMX_KV_F32);
    check_split_storage(EMX_ATTN_SPLIT_GQA, EMX_KV_F16);
}
Test(attention, rows_plain) {
    check_rows(EMX_ATTN_PLAIN, EMX_KV_F32);
    check_rows(EMX_ATTN_PLAIN, EMX_KV_F16);
}
Test(attention, rows_split) {
    check_rows(EMX_ATTN_SPLIT, EMX_KV_F32);
    check_rows(EMX_ATTN_SPLIT, EMX_KV_F16);
}
Test(attention, rows_split_gqa) {
    check_rows(EMX_ATTN_SPLIT_GQA, EMX_KV_F32);
    check_rows(EMX_ATTN_SPLIT_GQA, EMX_KV_F16);
}

// The new fields' bad values and the unsupported combination are refused before any launch.
Test(attention, rejects_bad_rows_and_tails) {
    DevBuf<float> d(kQDim * 8);
    DevBuf<int> d_n(1);
    struct Bad {
        const char *what;
        void (*set)(EmxAttentionArgs *, float *, const int *);
    } bad[] = {
        {"n_rows > n_keys", [](EmxAttentionArgs *a, float *, const int *) { a->n_rows = kKeys + 1; }},
        {"n_rows < 0", [](EmxAttentionArgs *a, float *, const int *) { a->n_rows = -1; }},
        {"out_row_stride < a row", [](EmxAttentionArgs *a, float *, const int *) {
             a->n_rows = 2;
             a->out_row_stride = kQDim - 1;
         }},
        {"q_row_stride < 0", [](EmxAttentionArgs *a, float *, const int *) { a->n_rows = 2; a->q_row_stride = -1; }},
        {"tail_k without tail_v", [](EmxAttentionArgs *a, float *p, const int *) { a->tail_k = p; }},
        {"tail_row_stride < kv_dim", [](EmxAttentionArgs *a, float *p, const int *) {
             a->tail_k = a->tail_v = p;
             a->tail_row_stride = kKvDim - 1;
         }},
        {"tail_start < 0", [](EmxAttentionArgs *a, float *p, const int *) {
             a->tail_k = a->tail_v = p;
             a->tail_row_stride = kKvDim;
             a->tail_start = -1;
         }},
        {"tail_start_dev without a tail", [](EmxAttentionArgs *a, float *, const int *n) { a->tail_start_dev = n; }},
        {"PLAIN rows without a workspace", [](EmxAttentionArgs *a, float *, const int *) {
             a->n_rows = 2;
             a->workspace = nullptr;
         }},
    };
    for (const Bad &b : bad) {
        EmxAttentionArgs a = base_args(d.p, d.p, d.p, EMX_KV_F32, kKeys, 0);
        a.out = d.p;
        a.scores = d.p;
        a.score_stride = kKeys;
        a.workspace = d.p;
        b.set(&a, d.p, d_n.p);
        cr_assert_eq(emx_cuda_attention(EMX_ATTN_PLAIN, &a, 0), cudaErrorInvalidValue, "%s: accepted", b.what);
    }
    // and the sizes: the old function is the one-row case, rows add up
    for (int k = EMX_ATTN_PLAIN; k <= EMX_ATTN_SPLIT_GQA; k++) {
        cr_assert_eq(emx_cuda_attention_workspace_bytes(k, kNh, kHd, kKeys, 9),
                     emx_cuda_attention_workspace_bytes_rows(k, kNh, kHd, kKeys, 9, 1));
        cr_assert_eq(emx_cuda_attention_workspace_bytes_rows(k, kNh, kHd, kKeys, 9, 0),
                     emx_cuda_attention_workspace_bytes_rows(k, kNh, kHd, kKeys, 9, 1));
        cr_assert_gt(emx_cuda_attention_workspace_bytes_rows(k, kNh, kHd, kKeys, 9, 5),
                     emx_cuda_attention_workspace_bytes_rows(k, kNh, kHd, kKeys, 9, 4));
    }
}

// An f16 cache gives, bit for bit, what an f32 cache holding its values gives (outputs, scores,
// statistics): both element types run the same products in the same order (SPLIT_GQA's paired
// loads, the single ones of SPLIT and PLAIN), the f16 values widened exactly. head_dim 40: the
// last pairs of a row leave lanes idle.
Test(attention, f16_cache_is_the_f32_cache_of_its_values) {
    for (int kernel = EMX_ATTN_PLAIN; kernel <= EMX_ATTN_SPLIT_GQA; kernel++) {
        Rng rng(4700 + kernel);
        std::vector<float> q(kQDim), kc((size_t)kKeys * kKvDim), vc(kc.size());
        for (float &x : q) x = rng.normal() * 1.5f;
        for (float &x : kc) x = rng.normal();
        for (float &x : vc) x = rng.normal();
        const std::vector<uint8_t> k16 = cache_bytes(kc, EMX_KV_F16), v16 = cache_bytes(vc, EMX_KV_F16);  // rounds kc, vc
        const std::vector<uint8_t> k32 = cache_bytes(kc, EMX_KV_F32), v32 = cache_bytes(vc, EMX_KV_F32);
        DevBuf<float> d_q(q);
        DevBuf<uint8_t> d_k16(k16), d_v16(v16), d_k32(k32), d_v32(v32);
        const Result h = run_call(kernel, base_args(d_q.p, d_k16.p, d_v16.p, EMX_KV_F16, kKeys, 16), kQDim, true);
        const Result f = run_call(kernel, base_args(d_q.p, d_k32.p, d_v32.p, EMX_KV_F32, kKeys, 16), kQDim, true);
        cr_assert_eq(first_diff(h.out, f.out), -1, "kernel %d: output %d differs", kernel, first_diff(h.out, f.out));
        cr_assert_eq(first_diff(h.scores, f.scores), -1, "kernel %d: scores differ", kernel);
        cr_assert(same_stats(h.stats, f.stats), "kernel %d: head_stats differ", kernel);
    }
}
