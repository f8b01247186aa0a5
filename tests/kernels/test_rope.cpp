// test_rope.cpp — kernels/rope.cu (per-head q/k RMSNorm, RoPE, KV-cache write) against the CPU's
// emx_rope_inv_freq / emx_rope_angles / emx_rmsnorm / emx_rope, as forward_cpu.c chains them.
//
// Tolerance for q and k (f32): the angles are computed in double on both sides and rounded to
// float, and the rotation is the same two products and a sum; nvcc may fuse one product into an
// FMA (one rounding less, 2^-24 relative to |x0| + |x1|). With the per-head norm the kernel sums
// squares in f32 where the CPU uses double (relative error ~ head_dim * 2^-24 = 8e-6 at 128).
// So |got - cpu| <= 1e-5 * (largest |value| of the row) + 1e-7.
// f16 cache: the f32 value rounded to half, so 2^-11 relative more (and 2^-25 absolute for
// subnormals); v goes into the cache unchanged: bit-identical in f32, emx_f32_to_f16's rounding
// (round to nearest even, as __float2half) in f16.
#include "dense_test_util.h"

#include "kernels/rope.h"

struct RopeCase {
    const char *name;
    int n_heads, n_kv_heads, head_dim, style;
    double theta;
    bool factors, qk_norm;
    bool f16_kv;  // the cache in f16 (EMX_KV_F16), else f32
};

static const RopeCase kCases[] = {
    {"llama2 interleaved", 4, 2, 64, EMX_ROPE_INTERLEAVED, 10000.0, false, false, false},
    {"llama3 scaled half", 6, 3, 40, EMX_ROPE_HALF, 500000.0, true, false, false},
    {"qwen3 qk-norm f16 kv", 4, 2, 128, EMX_ROPE_HALF, 1000000.0, false, true, true},
    {"qk-norm interleaved, 20 pairs", 3, 1, 40, EMX_ROPE_INTERLEAVED, 10000.0, true, true, false},
};

static float max_abs(const float *v, int n) {
    float m = 0;
    for (int i = 0; i < n; i++) m = fmaxf(m, fabsf(v[i]));
    return m;
}

static void run_case(const RopeCase &c) {
    const int batch = 3, hd = c.head_dim, half = hd / 2, ctx = 12;
    const int q_dim = c.n_heads * hd, kv_dim = c.n_kv_heads * hd;
    const std::vector<int> pos = {0, 7, 1000}, rows = {5, 1, 9};
    const float eps = 1e-6f;
    std::vector<float> q = random_floats((size_t)batch * q_dim, 1 + hd, -3.0f, 3.0f);
    std::vector<float> k = random_floats((size_t)batch * kv_dim, 2 + hd, -3.0f, 3.0f);
    std::vector<float> v = random_floats((size_t)batch * kv_dim, 3 + hd, -3.0f, 3.0f);
    std::vector<float> qn = random_floats((size_t)hd, 4, 0.5f, 2.0f), kn = random_floats((size_t)hd, 5, 0.5f, 2.0f);
    std::vector<float> factors = random_floats((size_t)half, 6, 1.0f, 8.0f);
    std::vector<double> inv_freq((size_t)half);
    emx_rope_inv_freq(inv_freq.data(), hd, c.theta, c.factors ? factors.data() : nullptr);

    // CPU twin, in forward_cpu.c's order: norm per head, then rotate
    std::vector<float> want_q = q, want_k = k, cs((size_t)half), sn((size_t)half);
    for (int b = 0; b < batch; b++) {
        float *qb = &want_q[(size_t)b * q_dim], *kb = &want_k[(size_t)b * kv_dim];
        if (c.qk_norm) {
            for (int h = 0; h < c.n_heads; h++) emx_rmsnorm(qb + h * hd, qb + h * hd, qn.data(), hd, eps);
            for (int h = 0; h < c.n_kv_heads; h++) emx_rmsnorm(kb + h * hd, kb + h * hd, kn.data(), hd, eps);
        }
        emx_rope_angles(cs.data(), sn.data(), inv_freq.data(), half, pos[b]);
        emx_rope(qb, c.n_heads, hd, c.style, cs.data(), sn.data());
        emx_rope(kb, c.n_kv_heads, hd, c.style, cs.data(), sn.data());
    }

    // device: caches filled with a sentinel, so rows that must not change can be checked
    const size_t esize = c.f16_kv ? 2 : 4, cache_bytes = (size_t)ctx * kv_dim * esize;
    std::vector<uint8_t> sentinel(cache_bytes);
    for (size_t i = 0; i < (size_t)ctx * kv_dim; i++) {
        if (c.f16_kv) {
            const uint16_t h = emx_f32_to_f16(1234.0f);
            memcpy(&sentinel[i * 2], &h, 2);
        } else {
            const float f = 1234.0f;
            memcpy(&sentinel[i * 4], &f, 4);
        }
    }
    DevBuf<float> dq(q), dk(k), dv(v), dqn(qn), dkn(kn);
    DevBuf<uint8_t> kc(sentinel), vc(sentinel);
    DevBuf<int> dpos(pos), drow(rows);
    DevBuf<double> dinv(inv_freq);
    EmxRopeArgs a = {};
    a.q = dq.p;
    a.k = dk.p;
    a.v = dv.p;
    a.k_cache = kc.p;
    a.v_cache = vc.p;
    a.kv_dtype = c.f16_kv ? EMX_KV_F16 : EMX_KV_F32;
    a.pos = dpos.p;
    a.cache_row = drow.p;
    a.inv_freq = dinv.p;
    a.q_norm = c.qk_norm ? dqn.p : nullptr;
    a.k_norm = c.qk_norm ? dkn.p : nullptr;
    a.eps = eps;
    a.batch = batch;
    a.n_heads = c.n_heads;
    a.n_kv_heads = c.n_kv_heads;
    a.head_dim = hd;
    a.style = c.style;
    CUDA_OK(emx_cuda_rope_kv(&a, nullptr));

    std::vector<float> gq = dq.download();
    for (int b = 0; b < batch; b++) {
        const float scale = max_abs(&want_q[(size_t)b * q_dim], q_dim);
        for (int i = 0; i < q_dim; i++) {
            const size_t j = (size_t)b * q_dim + i;
            cr_assert(fabsf(gq[j] - want_q[j]) <= 1e-5f * scale + 1e-7f, "%s: q[%d][%d] = %.9g, CPU %.9g", c.name, b, i,
                      gq[j], want_q[j]);
        }
    }
    std::vector<uint8_t> gk = kc.download(), gv = vc.download();
    auto cache_at = [&](const std::vector<uint8_t> &buf, size_t i) {
        if (c.f16_kv) {
            uint16_t h;
            memcpy(&h, &buf[i * 2], 2);
            return emx_f16_to_f32(h);
        }
        float f;
        memcpy(&f, &buf[i * 4], 4);
        return f;
    };
    for (int r = 0; r < ctx; r++) {
        int b = -1;
        for (int i = 0; i < batch; i++)
            if (rows[i] == r) b = i;
        for (int i = 0; i < kv_dim; i++) {
            const size_t ci = (size_t)r * kv_dim + i;
            if (b < 0) {  // not written
                cr_assert_eq(cache_at(gk, ci), 1234.0f, "%s: k cache row %d changed", c.name, r);
                cr_assert_eq(cache_at(gv, ci), 1234.0f, "%s: v cache row %d changed", c.name, r);
                continue;
            }
            const size_t j = (size_t)b * kv_dim + i;
            const float scale = max_abs(&want_k[(size_t)b * kv_dim], kv_dim);
            const float tol = 1e-5f * scale + 1e-7f + (c.f16_kv ? fabsf(want_k[j]) / 2048.0f + 3e-8f : 0.0f);
            cr_assert(fabsf(cache_at(gk, ci) - want_k[j]) <= tol, "%s: k cache[%d][%d] = %.9g, CPU %.9g", c.name, r, i,
                      cache_at(gk, ci), want_k[j]);
            const float vwant = c.f16_kv ? emx_f16_to_f32(emx_f32_to_f16(v[j])) : v[j];
            cr_assert_eq(cache_at(gv, ci), vwant, "%s: v cache[%d][%d] = %.9g, expected %.9g", c.name, r, i,
                         cache_at(gv, ci), vwant);
        }
    }
}

Test(rope, every_style_scaling_norm_and_cache_type_matches_cpu) {
    for (const RopeCase &c : kCases) run_case(c);
}

// Without cache_row the rows go to their positions.
Test(rope, cache_row_defaults_to_position) {
    const int hd = 32, kv_dim = 32;
    std::vector<float> q = random_floats(hd, 1), k = random_floats(kv_dim, 2), v = random_floats(kv_dim, 3);
    std::vector<double> inv((size_t)hd / 2);
    emx_rope_inv_freq(inv.data(), hd, 10000.0, nullptr);
    DevBuf<float> dq(q), dk(k), dv(v), kc(4 * kv_dim), vc(4 * kv_dim);
    CUDA_OK(cudaMemset(vc.p, 0, 4 * kv_dim * sizeof(float)));
    DevBuf<int> dpos(std::vector<int>{2});
    DevBuf<double> dinv(inv);
    EmxRopeArgs a = {};
    a.kv_dtype = EMX_KV_F32;  // zero is EMX_KV_AUTO (base/kv_type.h), which a kernel refuses
    a.q = dq.p;
    a.k = dk.p;
    a.v = dv.p;
    a.k_cache = kc.p;
    a.v_cache = vc.p;
    a.pos = dpos.p;
    a.inv_freq = dinv.p;
    a.batch = 1;
    a.n_heads = 1;
    a.n_kv_heads = 1;
    a.head_dim = hd;
    a.style = EMX_ROPE_HALF;
    CUDA_OK(emx_cuda_rope_kv(&a, nullptr));
    std::vector<float> gv = vc.download();
    for (int i = 0; i < kv_dim; i++) {
        cr_assert_eq(gv[2 * kv_dim + i], v[i]);
        cr_assert_eq(gv[i], 0.0f);
    }
    a.head_dim = 31;  // odd: no pairs
    cr_assert_eq(emx_cuda_rope_kv(&a, nullptr), cudaErrorInvalidValue);
    a.head_dim = hd;
    a.q_norm = dq.p;  // q_norm without k_norm
    cr_assert_eq(emx_cuda_rope_kv(&a, nullptr), cudaErrorInvalidValue);
}

// The decode step is captured once as a CUDA graph: the position must be read from device memory
// when the graph runs, not baked in at capture. Replays at positions 3 then 5 must write those
// cache rows, rotated by those positions (same tolerance as above), and leave the others alone.
Test(rope, captured_graph_reads_the_position_at_replay) {
    const int hd = 32, half = hd / 2, n_heads = 2, kv_dim = hd, ctx = 8;
    std::vector<float> q = random_floats((size_t)n_heads * hd, 7), k = random_floats(kv_dim, 8),
                       v = random_floats(kv_dim, 9);
    std::vector<double> inv((size_t)half);
    emx_rope_inv_freq(inv.data(), hd, 10000.0, nullptr);
    DevBuf<float> dq(q), dk(k), dv(v), kc(std::vector<float>((size_t)ctx * kv_dim, 1234.0f)),
        vc((size_t)ctx * kv_dim);
    DevBuf<int> dpos(std::vector<int>{0});
    DevBuf<double> dinv(inv);
    EmxRopeArgs a = {};
    a.kv_dtype = EMX_KV_F32;  // zero is EMX_KV_AUTO (base/kv_type.h), which a kernel refuses
    a.q = dq.p;
    a.k = dk.p;
    a.v = dv.p;
    a.k_cache = kc.p;
    a.v_cache = vc.p;
    a.pos = dpos.p;
    a.inv_freq = dinv.p;
    a.batch = 1;
    a.n_heads = n_heads;
    a.n_kv_heads = 1;
    a.head_dim = hd;
    a.style = EMX_ROPE_HALF;
    cudaStream_t s;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_OK(cudaStreamCreate(&s));
    CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CUDA_OK(emx_cuda_rope_kv(&a, s));
    CUDA_OK(cudaStreamEndCapture(s, &graph));
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    for (int p : {3, 5}) {
        dpos.upload(std::vector<int>{p});
        CUDA_OK(cudaGraphLaunch(exec, s));
        CUDA_OK(cudaStreamSynchronize(s));
        std::vector<float> want = k, cs((size_t)half), sn((size_t)half);
        emx_rope_angles(cs.data(), sn.data(), inv.data(), half, p);
        emx_rope(want.data(), 1, hd, EMX_ROPE_HALF, cs.data(), sn.data());
        std::vector<float> got = kc.download();
        const float scale = max_abs(want.data(), kv_dim);
        for (int i = 0; i < kv_dim; i++)
            cr_assert(fabsf(got[(size_t)p * kv_dim + i] - want[i]) <= 1e-5f * scale + 1e-7f,
                      "replay at pos %d: k[%d] = %.9g, CPU %.9g", p, i, got[(size_t)p * kv_dim + i], want[i]);
        for (int r = 0; r < ctx; r++)
            if (r != 3 && r != p) cr_assert_eq(got[(size_t)r * kv_dim], 1234.0f, "row %d written at pos %d", r, p);
    }
    CUDA_OK(cudaGraphExecDestroy(exec));
    CUDA_OK(cudaGraphDestroy(graph));
    CUDA_OK(cudaStreamDestroy(s));
}

// emx_cuda_kv_rows_copy: a branch commit's shapes (4 layers, the tail [layer][4 steps][3
// branches][row], branch 1's first 3 steps into cache rows 5..7 of a 12-row cache), f16 rows of 10
// elements (20 bytes: not a multiple of 8 or 16). Every copied word lands where the host loop puts
// it, and nothing else in the cache changes; bad sizes are refused.
Test(rope, kv_rows_copy_moves_a_branch_tail_into_the_cache) {
    const size_t row = 20, n_layers = 4, tail = 4, branches = 3, ctx = 12;
    const int steps = 3, branch = 1, prefix = 5;
    std::vector<uint8_t> src(n_layers * tail * branches * row), dst(n_layers * ctx * row);
    for (size_t i = 0; i < src.size(); i++) src[i] = (uint8_t)(i * 7 + 3);
    for (size_t i = 0; i < dst.size(); i++) dst[i] = (uint8_t)(200 + i % 13);
    std::vector<uint8_t> want = dst;
    for (size_t l = 0; l < n_layers; l++)
        for (int j = 0; j < steps; j++)
            memcpy(&want[(l * ctx + prefix + j) * row], &src[((l * tail + j) * branches + branch) * row], row);
    DevBuf<uint8_t> d_src(src), d_dst(dst);
    std::vector<EmxKvLayer> layout;
    for (size_t l = 0; l < n_layers; l++) layout.push_back({(int64_t)(l * ctx), (int32_t)ctx, 0});
    DevBuf<EmxKvLayer> layers(layout);
    cr_assert_eq(emx_cuda_kv_rows_copy(d_dst.p, layers.p, prefix, d_src.p + branch * row, tail * branches * row,
                                       branches * row, row, steps, (int)n_layers, 0),
                 cudaSuccess);
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<uint8_t> got = d_dst.download();
    for (size_t i = 0; i < got.size(); i++)
        cr_assert_eq(got[i], want[i], "byte %zu (layer %zu, row %zu): %d, want %d", i, i / (ctx * row),
                     i / row % ctx, got[i], want[i]);
    cr_assert_eq(emx_cuda_kv_rows_copy(d_dst.p, layers.p, 0, d_src.p, 0, 0, 0, 0, 3, 0), cudaSuccess, "0 rows");
    cr_assert_eq(emx_cuda_kv_rows_copy(d_dst.p, layers.p, 0, d_src.p, 0, 0, 18, 1, 1, 0), cudaErrorInvalidValue,
                 "a row of 18 bytes");
    cr_assert_eq(emx_cuda_kv_rows_copy(d_dst.p + 2, layers.p, 0, d_src.p, 0, 0, 4, 1, 1, 0), cudaErrorInvalidValue,
                 "a misaligned destination");
    cr_assert_eq(emx_cuda_kv_rows_copy(nullptr, layers.p, 0, d_src.p, 0, 0, 4, 1, 1, 0), cudaErrorInvalidValue);
    cr_assert_eq(emx_cuda_kv_rows_copy(d_dst.p, nullptr, 0, d_src.p, 0, 0, 4, 1, 1, 0), cudaErrorInvalidValue,
                 "no layer table");
    cr_assert_eq(emx_cuda_kv_rows_copy(d_dst.p, layers.p, 0, d_src.p, 0, 0, 4, -1, 1, 0), cudaErrorInvalidValue);
}
