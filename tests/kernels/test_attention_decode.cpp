// test_attention_decode.cpp — kernels/attention_decode.cu (RoPE, the q/k norms and biases and the
// KV write inside the decode attention) against the graph path's two calls and the CPU.
//
// References and tolerances:
//  - the graph path: emx_cuda_rope_kv (one row) then emx_cuda_attention(EMX_ATTN_SPLIT_GQA) on a
//    copy of the same cache: BITWISE the outputs, the score rows (with the window's -inf), the
//    per-head softmax statistics and the whole cache (the new row included, f32 or f16). The fused
//    kernel adds the per-head norm's squares in rope_kv's block order, shares its pair arithmetic
//    (rope_pair.cuh) and runs SPLIT_GQA's code (attention_gqa.cuh's gqa_chunk) with the new key
//    from shared memory, rounded to the cache's type as the cache holds it.
//  - the CPU: the biases, emx_rmsnorm per head, emx_rope_angles / emx_rope, then
//    emx_attention_head over the window's keys (the cache's f16 values widened, as the device
//    reads them). f32 sums in other orders: outputs within 1e-4 * max|v| + 1e-6, scores within
//    1e-4 * (1 + |score|); with f16 the new key is rounded on both sides the same way.
//  - under both schedules of the emulator: bitwise. The combine is done by the block that arrives
//    last of each KV head's chunks: under the forward schedule the highest chunk, under the
//    reverse one (blocks in the opposite grid order) chunk 0, so both assignments are checked.
//    The call runs twice (the outputs cleared between): the second finds the counters the first
//    left, which must be zero again (a graph replays with them).
//  - several rows in one launch (emx_cuda_attention_decode_rows), each over its own cache (its
//    own context length, position and layer stride) at layer 1 of 2: BITWISE each row alone
//    through emx_cuda_attention_decode on a copy of its buffers (whole caches, score rows and
//    statistics of both layers, outputs), f32 and f16, under both schedules.
// Shapes: GQA 6/2 heads of 40 (attention_test_util.h), group 4 (8/2), group 8 of head_dim 64,
// MHA of 128; 1, 5, 33, 64, 65 and 150 keys in chunks of 64, 16 or 8 (1 to 19 chunks; the new key
// alone in the last chunk, or not);
// Qwen3's norms, Qwen2's biases, Llama's neither; Gemma's window and scale; f32 and f16 caches;
// the key count from device memory (graph replays).
#include <math.h>

#include <algorithm>
#include <memory>

#include "attention_test_util.h"
#include "dense_test_util.h"
#include "kernels/attention_decode.h"
#include "kernels/rope.h"

extern "C" {
#include "runtime/cpu/cpu_attention.h"
}

namespace {

struct Case {
    const char *name;
    int n_heads, n_kv_heads, head_dim;
    int n_keys, kpb;
    bool norm, bias;
    int style, kv_dtype;
    int window;
    float scale;
    bool dev_keys;
};

const Case kCases[] = {
    {"qwen3 gqa 6/2 hd40, 1 key", 6, 2, 40, 1, 0, true, false, EMX_ROPE_HALF, EMX_KV_F32, 0, 0, false},
    {"qwen3 gqa 6/2 hd40, 65 keys", 6, 2, 40, 65, 0, true, false, EMX_ROPE_HALF, EMX_KV_F32, 0, 0, true},
    {"qwen3 f16, 150 keys by 16", 6, 2, 40, 150, 16, true, false, EMX_ROPE_HALF, EMX_KV_F16, 0, 0, true},
    {"qwen2 biases, 64 keys", 6, 2, 40, 64, 0, false, true, EMX_ROPE_HALF, EMX_KV_F32, 0, 0, false},
    {"llama interleaved group 8 hd64, 5 keys", 8, 1, 64, 5, 0, false, false, EMX_ROPE_INTERLEAVED, EMX_KV_F16, 0, 0, true},
    {"gemma window 7, scale, 65 keys by 16", 4, 2, 128, 65, 16, true, false, EMX_ROPE_HALF, EMX_KV_F32, 7, 0.0625f, true},
    {"mha hd128 f16, 150 keys", 4, 4, 128, 150, 0, true, true, EMX_ROPE_INTERLEAVED, EMX_KV_F16, 0, 0, false},
    {"group 4 (8/2) hd32 f16, 150 keys by 8", 8, 2, 32, 150, 8, true, false, EMX_ROPE_HALF, EMX_KV_F16, 0, 0, true},
    {"group 4 (8/2) hd32, 33 keys by 16", 8, 2, 32, 33, 16, false, true, EMX_ROPE_INTERLEAVED, EMX_KV_F32, 0, 0, false},
};

float cache_value(const std::vector<uint8_t> &c, size_t i, int kv) {
    if (kv == EMX_KV_F16) {
        uint16_t h;
        memcpy(&h, &c[2 * i], 2);
        return emx_f16_to_f32(h);
    }
    float f;
    memcpy(&f, &c[4 * i], 4);
    return f;
}

// The outputs of one call: out, score rows, statistics and the cache (and the fused call's
// arrival counters after it).
struct Result {
    std::vector<float> out, scores;
    std::vector<EmxSoftmaxStats> stats;
    std::vector<uint8_t> k, v;
    std::vector<unsigned> arrivals;
    bool operator==(const Result &o) const {
        return same_bytes(out, o.out) && same_bytes(scores, o.scores) && same_stats(stats, o.stats) &&
               same_bytes(k, o.k) && same_bytes(v, o.v);
    }
};

Result run(const Case &c, bool fused, uint64_t seed) {
    const int q_dim = c.n_heads * c.head_dim, kv_dim = c.n_kv_heads * c.head_dim, pos = c.n_keys - 1, ctx = c.n_keys + 3;
    std::vector<float> hq = random_floats(q_dim, seed, -2, 2), hk = random_floats(kv_dim, seed + 1, -2, 2);
    std::vector<float> hv = random_floats(kv_dim, seed + 2), kc = random_floats((size_t)ctx * kv_dim, seed + 3);
    std::vector<float> vc = random_floats((size_t)ctx * kv_dim, seed + 4);
    std::vector<float> qn = random_floats(c.head_dim, seed + 5, 0.5f, 1.5f), kn = random_floats(c.head_dim, seed + 6, 0.5f, 1.5f);
    std::vector<float> bq = random_floats(q_dim, seed + 7), bk = random_floats(kv_dim, seed + 8), bv = random_floats(kv_dim, seed + 9);
    std::vector<double> inv(c.head_dim / 2);
    emx_rope_inv_freq(inv.data(), c.head_dim, 10000.0, nullptr);
    DevBuf<float> q(hq), k(hk), v(hv), dqn(qn), dkn(kn), dbq(bq), dbk(bk), dbv(bv);
    DevBuf<double> dinv(inv);
    DevBuf<uint8_t> kcache(cache_bytes(kc, c.kv_dtype)), vcache(cache_bytes(vc, c.kv_dtype));
    DevBuf<int> dpos(std::vector<int>{pos}), dkeys(std::vector<int>{c.n_keys});
    DevBuf<float> out(q_dim), scores((size_t)c.n_heads * ctx);
    DevBuf<EmxSoftmaxStats> stats(c.n_heads);
    DevBuf<uint8_t> ws(emx_cuda_attention_workspace_bytes(EMX_ATTN_SPLIT_GQA, c.n_heads, c.head_dim, ctx, c.kpb));
    DevBuf<unsigned> arrivals(std::vector<unsigned>((size_t)c.n_kv_heads, 0u));
    EmxAttentionArgs a = {};
    a.q = q.p;
    a.k_cache = kcache.p;
    a.v_cache = vcache.p;
    a.kv_dtype = c.kv_dtype;
    a.n_heads = c.n_heads;
    a.n_kv_heads = c.n_kv_heads;
    a.head_dim = c.head_dim;
    a.n_keys = c.dev_keys ? ctx : c.n_keys;
    a.n_keys_dev = c.dev_keys ? dkeys.p : nullptr;
    a.out = out.p;
    a.scores = scores.p;
    a.score_stride = ctx;
    a.head_stats = stats.p;
    a.keys_per_block = c.kpb;
    a.workspace = ws.p;
    a.scale = c.scale;
    a.window = c.window;
    if (fused) {
        EmxAttnDecodeArgs d = {};
        d.attn = a;
        d.k = k.p, d.v = v.p, d.pos = dpos.p, d.inv_freq = dinv.p;
        d.q_norm = c.norm ? dqn.p : nullptr, d.k_norm = c.norm ? dkn.p : nullptr;
        d.bq = c.bias ? dbq.p : nullptr, d.bk = c.bias ? dbk.p : nullptr, d.bv = c.bias ? dbv.p : nullptr;
        d.eps = 1e-6f;
        d.style = c.style;
        d.arrivals = arrivals.p;
        CUDA_OK(emx_cuda_attention_decode(&d, nullptr));
        // again, from outputs set to NaN: the counters must be ready for it (the cache row is
        // written again with the same values)
        CUDA_OK(cudaMemset(out.p, 0xff, (size_t)q_dim * sizeof(float)));
        CUDA_OK(cudaMemset(stats.p, 0xff, (size_t)c.n_heads * sizeof(EmxSoftmaxStats)));
        CUDA_OK(emx_cuda_attention_decode(&d, nullptr));
    } else {
        EmxRopeArgs r = {};
        r.q = q.p, r.k = k.p, r.v = v.p, r.k_cache = kcache.p, r.v_cache = vcache.p, r.kv_dtype = c.kv_dtype;
        r.pos = dpos.p, r.inv_freq = dinv.p;
        r.q_norm = c.norm ? dqn.p : nullptr, r.k_norm = c.norm ? dkn.p : nullptr;
        r.bq = c.bias ? dbq.p : nullptr, r.bk = c.bias ? dbk.p : nullptr, r.bv = c.bias ? dbv.p : nullptr;
        r.eps = 1e-6f, r.batch = 1, r.n_heads = c.n_heads, r.n_kv_heads = c.n_kv_heads, r.head_dim = c.head_dim;
        r.style = c.style;
        CUDA_OK(emx_cuda_rope_kv(&r, nullptr));
        CUDA_OK(emx_cuda_attention(EMX_ATTN_SPLIT_GQA, &a, nullptr));
    }
    CUDA_OK(cudaDeviceSynchronize());
    Result res;
    res.out = out.download();
    std::vector<float> sc = scores.download();
    for (int h = 0; h < c.n_heads; h++) res.scores.insert(res.scores.end(), sc.begin() + (size_t)h * ctx, sc.begin() + (size_t)h * ctx + c.n_keys);
    res.stats = stats.download();
    res.k = kcache.download();
    res.v = vcache.download();
    res.arrivals = arrivals.download();
    return res;
}

// The CPU's attention of the case (same random inputs as run()), against the fused result.
void check_cpu(const Case &c, const Result &got, uint64_t seed) {
    const int hd = c.head_dim, half = hd / 2, q_dim = c.n_heads * hd, kv_dim = c.n_kv_heads * hd, pos = c.n_keys - 1;
    const int ctx = c.n_keys + 3;
    std::vector<float> q = random_floats(q_dim, seed, -2, 2), k = random_floats(kv_dim, seed + 1, -2, 2);
    std::vector<float> v = random_floats(kv_dim, seed + 2);
    std::vector<float> qn = random_floats(hd, seed + 5, 0.5f, 1.5f), kn = random_floats(hd, seed + 6, 0.5f, 1.5f);
    std::vector<float> bq = random_floats(q_dim, seed + 7), bk = random_floats(kv_dim, seed + 8), bv = random_floats(kv_dim, seed + 9);
    std::vector<double> inv(half);
    emx_rope_inv_freq(inv.data(), hd, 10000.0, nullptr);
    for (int i = 0; c.bias && i < q_dim; i++) q[i] += bq[i];
    for (int i = 0; c.bias && i < kv_dim; i++) k[i] += bk[i], v[i] += bv[i];
    for (int h = 0; c.norm && h < c.n_heads; h++) emx_rmsnorm(&q[(size_t)h * hd], &q[(size_t)h * hd], qn.data(), hd, 1e-6f);
    for (int h = 0; c.norm && h < c.n_kv_heads; h++) emx_rmsnorm(&k[(size_t)h * hd], &k[(size_t)h * hd], kn.data(), hd, 1e-6f);
    std::vector<float> cs(half), sn(half);
    emx_rope_angles(cs.data(), sn.data(), inv.data(), half, pos);
    emx_rope(q.data(), c.n_heads, hd, c.style, cs.data(), sn.data());
    emx_rope(k.data(), c.n_kv_heads, hd, c.style, cs.data(), sn.data());
    std::vector<float> kc((size_t)ctx * kv_dim), vc((size_t)ctx * kv_dim);
    for (size_t i = 0; i < kc.size(); i++) kc[i] = cache_value(got.k, i, c.kv_dtype), vc[i] = cache_value(got.v, i, c.kv_dtype);
    for (int i = 0; i < kv_dim; i++) {  // the new row as the device wrote it, against the CPU's
        const float tk = 1e-5f * (1 + fabsf(k[i])) + (c.kv_dtype == EMX_KV_F16 ? fabsf(k[i]) / 1024 : 0);
        cr_assert(fabsf(kc[(size_t)pos * kv_dim + i] - k[i]) <= tk, "%s: new key[%d] %g, CPU %g", c.name, i,
                  kc[(size_t)pos * kv_dim + i], k[i]);
        const float tv = 1e-6f + (c.kv_dtype == EMX_KV_F16 ? fabsf(v[i]) / 1024 : 0);
        cr_assert(fabsf(vc[(size_t)pos * kv_dim + i] - v[i]) <= tv, "%s: new value[%d]", c.name, i);
    }
    const int first = c.window > 0 && c.n_keys > c.window ? c.n_keys - c.window : 0, n = c.n_keys - first;
    const float scale = c.scale > 0 ? c.scale : 1.0f / sqrtf((float)hd);
    std::vector<float> out(hd), score(n), probs(n);
    for (int h = 0; h < c.n_heads; h++) {
        const int kvh = h / (c.n_heads / c.n_kv_heads);
        emx_attention_head(out.data(), &q[(size_t)h * hd], &kc[(size_t)first * kv_dim + kvh * hd],
                           &vc[(size_t)first * kv_dim + kvh * hd], kv_dim, n, hd, scale, score.data(), probs.data());
        for (int d = 0; d < hd; d++)
            cr_assert(fabsf(got.out[(size_t)h * hd + d] - out[d]) <= 1e-4f * 2 + 1e-6f, "%s: out[%d][%d] %g, CPU %g",
                      c.name, h, d, got.out[(size_t)h * hd + d], out[d]);
        for (int t = 0; t < c.n_keys; t++) {
            const float g = got.scores[(size_t)h * c.n_keys + t];
            if (t < first) {
                cr_assert(isinf(g) && g < 0, "%s: score[%d][%d] before the window %g", c.name, h, t, g);
                continue;
            }
            const float w = score[t - first];
            cr_assert(fabsf(g - w) <= 1e-4f * (1 + fabsf(w)), "%s: score[%d][%d] %g, CPU %g", c.name, h, t, g, w);
        }
    }
}

}  // namespace

Test(attention_decode, equals_rope_then_attention_and_cpu) {
    uint64_t seed = 1000;
    for (const Case &c : kCases) {
        seed += 17;
        cr_assert(emx_cuda_attention_decode_fits(c.n_heads, c.n_kv_heads, c.head_dim, c.kpb, c.kv_dtype), "%s", c.name);
        const auto both = run_two_schedules([&] { return run(c, true, seed); });
        cr_assert(both.first == both.second, "%s: the schedules differ", c.name);
        for (unsigned n : both.first.arrivals) cr_assert_eq(n, 0u, "%s: a counter left at %u", c.name, n);
        const Result graph = run(c, false, seed);
        cr_assert(same_bytes(both.first.k, graph.k) && same_bytes(both.first.v, graph.v), "%s: caches differ", c.name);
        cr_assert(same_bytes(both.first.scores, graph.scores), "%s: score rows differ", c.name);
        cr_assert(same_stats(both.first.stats, graph.stats), "%s: head statistics differ", c.name);
        cr_assert(same_bytes(both.first.out, graph.out), "%s: outputs differ", c.name);
        check_cpu(c, both.first, seed);
    }
}

namespace {

const int kLayers = 2;  // the rows test's: each row's layer l after layer l - 1, ctx rows each
const int kRows = 3, kRowCtx[kRows] = {20, 70, 9}, kRowPos[kRows] = {5, 66, 0};

// The rows of the test in one launch (rows = true) or each alone, at layer 1.
RowsResult run_rows(int kv_dtype, bool rows, uint64_t seed) {
    const int kpb = 16, layer = 1;
    std::vector<std::unique_ptr<DecodeRowBufs>> b;
    for (int r = 0; r < kRows; r++) {
        const size_t n = (size_t)kLayers * kRowCtx[r] * kKvDim;
        const std::vector<EmxKvLayer> layout = {{0, kRowCtx[r], 0}, {kRowCtx[r], kRowCtx[r], 0}};
        b.emplace_back(new DecodeRowBufs(kRowCtx[r], kRowPos[r], kv_dtype, kpb, random_floats(n, seed + 10 * r),
                                         random_floats(n, seed + 10 * r + 1), layout));
    }
    DevBuf<float> q(random_floats((size_t)kRows * kQDim, seed + 100, -2, 2));
    DevBuf<float> k(random_floats((size_t)kRows * kKvDim, seed + 101, -2, 2)), v(random_floats((size_t)kRows * kKvDim, seed + 102));
    DevBuf<float> qn(random_floats(kHd, seed + 103, 0.5f, 1.5f)), kn(random_floats(kHd, seed + 104, 0.5f, 1.5f));
    DevBuf<float> out(std::vector<float>((size_t)kRows * kQDim, 0.0f));
    std::vector<double> inv(kHd / 2);
    emx_rope_inv_freq(inv.data(), kHd, 10000.0, nullptr);
    DevBuf<double> dinv(inv);
    EmxAttnDecodeArgs d = {};
    d.attn.kv_dtype = kv_dtype;
    d.attn.n_heads = kNh, d.attn.n_kv_heads = kNkv, d.attn.head_dim = kHd;
    d.attn.keys_per_block = kpb;
    d.inv_freq = dinv.p, d.q_norm = qn.p, d.k_norm = kn.p, d.eps = 1e-6f, d.style = EMX_ROPE_HALF;
    d.attn.q = q.p, d.attn.out = out.p, d.k = k.p, d.v = v.p;
    if (rows) {
        std::vector<EmxAttnDecodeRow> t(kRows);
        int most = 0;
        for (int r = 0; r < kRows; r++) {
            t[r] = b[r]->entry();
            most = std::max(most, b[r]->pos + 1);
        }
        DevBuf<EmxAttnDecodeRow> dt(t);
        d.attn.n_keys = most;
        CUDA_OK(emx_cuda_attention_decode_rows(&d, dt.p, kRows, layer, nullptr));
        CUDA_OK(cudaDeviceSynchronize());
    } else {
        for (int r = 0; r < kRows; r++) decode_row_alone(d, *b[r], r, layer);
    }
    return gather_rows(out, b);
}

}  // namespace

Test(attention_decode, rows_equal_each_row_alone) {
    for (int kv : {EMX_KV_F32, EMX_KV_F16}) {
        const char *name = kv == EMX_KV_F16 ? "f16" : "f32";
        const uint64_t seed = 5000 + (uint64_t)kv;
        const auto both = run_two_schedules([&] { return run_rows(kv, true, seed); });
        const RowsResult alone = run_rows(kv, false, seed);
        for (const RowsResult *g : {&both.first, &both.second}) {
            cr_assert(same_bytes(g->out, alone.out), "%s: outputs differ from each row alone", name);
            cr_assert(same_bytes(g->scores, alone.scores), "%s: score rows differ", name);
            cr_assert(same_stats(g->stats, alone.stats), "%s: head statistics differ", name);
            cr_assert(same_bytes(g->cache, alone.cache), "%s: caches differ", name);
            for (unsigned n : g->arrivals) cr_assert_eq(n, 0u, "%s: a counter left at %u", name, n);
        }
        bool any_out = false;  // the rows' outputs were written (not the zeros they started as)
        for (float x : alone.out) any_out |= x != 0.0f;
        cr_assert(any_out, "%s: no output", name);
    }
}

// Shapes it does not take (the caller keeps rope_kv + the attention) and bad calls, refused
// before launching.
Test(attention_decode, refuses_what_it_does_not_take) {
    cr_assert_eq(emx_cuda_attention_decode_fits(16, 1, 64, 0, EMX_KV_F32), 0, "a group of 16");
    cr_assert_eq(emx_cuda_attention_decode_fits(4, 2, 41, 0, EMX_KV_F32), 0, "odd head_dim");
    cr_assert_eq(emx_cuda_attention_decode_fits(4, 2, 1024, 0, EMX_KV_F32), 0, "head_dim over 512");
    cr_assert_eq(emx_cuda_attention_decode_fits(16, 2, 512, 2048, EMX_KV_F32), 0, "over 48 KiB of shared memory");
    cr_assert_eq(emx_cuda_attention_decode_fits(16, 2, 128, 0, EMX_KV_F32), 1);
    EmxAttnDecodeArgs d = {};
    cr_assert_eq(emx_cuda_attention_decode(&d, nullptr), cudaErrorInvalidValue);
    cr_assert_eq(emx_cuda_attention_decode(nullptr, nullptr), cudaErrorInvalidValue);
    cr_assert_eq(emx_cuda_attention_decode_rows(&d, nullptr, 1, 0, nullptr), cudaErrorInvalidValue);
    cr_assert_eq(emx_cuda_attention_decode_rows(nullptr, nullptr, 1, 0, nullptr), cudaErrorInvalidValue);
}
