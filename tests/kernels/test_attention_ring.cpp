// test_attention_ring.cpp — a local layer's KV cache kept as a ring of rows (key t in row t % ring;
// base/kv_type.h's EmxKvLayer, attention.h's and rope.h's cache_rows) in the kernels that read or
// write it: emx_cuda_attention, emx_cuda_attention_decode(_rows), emx_cuda_rope_kv and
// emx_cuda_kv_rows_copy.
//
// References (all BITWISE: the ring changes where a row is, not what is computed nor its order):
//  - attention and decode: the same call over a full contiguous cache holding the same keys at
//    their positions (a row per position), which test_attention*.cpp and test_attention_decode.cpp
//    pin against the CPU. Compared: outputs, the kept score rows (the window's -inf included, the
//    score buffer past n_keys untouched) and the per-head statistics. The ring is what writing
//    keys 0..n-1 in order leaves (the latest key of each row; rows never written NaN), so a key
//    read from the wrong row changes the bits. Every kernel x f32/f16; one wrapped query row,
//    causal rows whose keys run past the ring's end (window + n_rows - 1 == ring: exact fit),
//    n_keys_dev, a tail and branch rows; ring lengths that are not multiples of the chunk.
//  - the decode's new key/value: ring row pos % ring holds the full call's row pos, byte for
//    byte, and no other ring row changes; both emulator schedules (run_two_schedules). The rows
//    variant: a table where one row's layer 1 is a ring, another's is not, a third's layer 0 is
//    a ring and layer 1 not: each row bitwise its single call (whole caches, score rows,
//    statistics, outputs).
//  - rope_kv: ring row x % ring bytes equal the full call's row x (x: the position, or
//    cache_row's), q bitwise, every other ring row its sentinel.
//  - kv_rows_copy: every byte where a host loop (its own modulo) puts it, nothing else changed.
//  - refusals: cudaErrorInvalidValue, nothing launched.
#include <math.h>

#include <memory>

#include "attention_test_util.h"
#include "dense_test_util.h"
#include "kernels/attention_decode.h"
#include "kernels/rope.h"

namespace {

size_t row_bytes(int kv_dtype) { return (size_t)kKvDim * (kv_dtype == EMX_KV_F16 ? 2 : 4); }

// The ring of `ring` rows after keys 0..n-1 of `full` ([>= n] rows) were written in order: row i
// the latest key t with t % ring == i; rows never written NaN (0xff bytes in f32 and f16).
std::vector<uint8_t> ring_of(const std::vector<uint8_t> &full, int n, int ring, size_t rb) {
    std::vector<uint8_t> r((size_t)ring * rb, 0xff);
    for (int t = 0; t < n; t++) memcpy(&r[(size_t)(t % ring) * rb], &full[(size_t)t * rb], rb);
    return r;
}

bool has_nan(const std::vector<float> &x) {
    for (float f : x)
        if (isnan(f)) return true;
    return false;
}

// ---- emx_cuda_attention ----

struct AttnCase {
    const char *name;
    int n_keys, n_rows, window, ring, kpb;
    int dev_keys;    // 0, or the key count read on the device (the call sized for n_keys)
    int tail_start;  // -1: no tail; else keys from it on in an interleaved tail
    bool branches;   // the n_rows rows are branches at one position, each its own tail
};

const AttnCase kAttnCases[] = {
    {"one row wrapped 4x, window 8 ring 23", 97, 1, 8, 23, 16, 0, -1, false},
    {"one row, window 40 ring 71", 223, 1, 40, 71, 16, 0, -1, false},
    {"16 causal rows past the ring's end (8 + 16 - 1 = 23)", 97, 16, 8, 23, 16, 0, -1, false},
    {"5 causal rows, ring 23, chunks of 9", 97, 5, 8, 23, 9, 0, -1, false},
    {"32 causal rows, window 40 ring 71", 223, 32, 40, 71, 16, 0, -1, false},
    {"one row, n_keys_dev 150 of 223", 223, 1, 40, 71, 16, 150, -1, false},
    {"6 causal rows, n_keys_dev 60 of 97", 97, 6, 8, 23, 16, 60, -1, false},
    {"one row, tail from 90 (key 89 from the ring)", 97, 1, 8, 23, 16, 0, 90, false},
    {"4 causal rows, tail from 93", 97, 4, 8, 23, 9, 0, 93, false},
    {"3 branch rows, tail from 92, ring = window 8", 97, 3, 8, 8, 16, 0, 92, true},
};

struct Out {
    std::vector<float> out, scores;
    std::vector<EmxSoftmaxStats> stats;
};

// `a` with fresh outputs: out NaN, score rows 12345 (stride n_keys + 3), statistics zero.
Out run_attention(int kernel, EmxAttentionArgs a) {
    const int rows = a.n_rows > 1 ? a.n_rows : 1, stride = a.n_keys + 3;
    DevBuf<float> d_out(std::vector<float>((size_t)rows * kQDim, NAN));
    DevBuf<float> d_scores(std::vector<float>((size_t)kNh * stride, 12345.0f));
    DevBuf<EmxSoftmaxStats> d_stats{std::vector<EmxSoftmaxStats>(kNh)};
    DevBuf<uint8_t> d_ws(emx_cuda_attention_workspace_bytes_rows(kernel, kNh, kHd, a.n_keys, a.keys_per_block, rows));
    a.out = d_out.p;
    a.scores = d_scores.p;
    a.score_stride = stride;
    a.head_stats = d_stats.p;
    a.workspace = d_ws.p;
    CUDA_OK(emx_cuda_attention(kernel, &a, 0));
    CUDA_OK(cudaDeviceSynchronize());
    return Out{d_out.download(), d_scores.download(), d_stats.download()};
}

void check_attention(int kernel, int kv, const AttnCase &c, uint64_t seed) {
    const size_t rb = row_bytes(kv);
    const int n_rows = c.n_rows, tail = c.tail_start >= 0;
    const int nb = c.branches ? n_rows : 2;  // interleaved tail slots (the second never read without branches)
    const int n_tail = tail ? c.n_keys - c.tail_start : 0;
    std::vector<float> q = random_floats((size_t)n_rows * kQDim, seed, -2, 2);
    std::vector<float> kc = random_floats((size_t)c.n_keys * kKvDim, seed + 1, -2, 2);
    std::vector<float> vc = random_floats((size_t)c.n_keys * kKvDim, seed + 2);
    std::vector<float> kt = random_floats((size_t)(n_tail + 1) * nb * kKvDim, seed + 3, -2, 2);
    std::vector<float> vt = random_floats((size_t)(n_tail + 1) * nb * kKvDim, seed + 4);
    const std::vector<uint8_t> kb = cache_bytes(kc, kv), vb = cache_bytes(vc, kv);
    // the ring holds the keys written to the cache: all, those the device count sees, or those
    // before the tail
    const int written = tail ? c.tail_start : c.dev_keys ? c.dev_keys : c.n_keys;
    DevBuf<float> d_q(q);
    DevBuf<uint8_t> d_kf(kb), d_vf(vb), d_kr(ring_of(kb, written, c.ring, rb)), d_vr(ring_of(vb, written, c.ring, rb));
    DevBuf<uint8_t> d_kt(cache_bytes(kt, kv)), d_vt(cache_bytes(vt, kv));
    DevBuf<int> d_n(std::vector<int>{c.dev_keys});

    EmxAttentionArgs full = base_args(d_q.p, d_kf.p, d_vf.p, kv, c.n_keys, c.kpb);
    full.n_rows = n_rows;
    full.window = c.window;
    full.n_keys_dev = c.dev_keys ? d_n.p : nullptr;
    if (tail) {
        full.tail_k = d_kt.p, full.tail_v = d_vt.p;
        full.tail_start = c.tail_start;
        full.tail_row_stride = nb * kKvDim;
        full.tail_branch_stride = c.branches ? kKvDim : 0;
    }
    EmxAttentionArgs ring = full;
    ring.k_cache = d_kr.p, ring.v_cache = d_vr.p;
    ring.cache_rows = c.ring;
    const Out want = run_attention(kernel, full), got = run_attention(kernel, ring);
    char what[160];
    snprintf(what, sizeof what, "kernel %d kv %d, %s", kernel, kv, c.name);
    cr_assert(!has_nan(want.out), "%s: the full cache's call left NaN", what);
    cr_assert(isinf(want.scores[0]) && want.scores[0] < 0, "%s: key 0 not masked: no window in play", what);
    cr_assert(same_bytes(got.out, want.out), "%s: outputs differ from the full cache", what);
    cr_assert(same_bytes(got.scores, want.scores), "%s: score rows differ from the full cache", what);
    cr_assert(same_stats(got.stats, want.stats), "%s: head statistics differ from the full cache", what);
}

void check_kernel(int kernel) {
    uint64_t seed = 9000 + 100 * (uint64_t)kernel;
    for (int kv : {EMX_KV_F32, EMX_KV_F16})
        for (const AttnCase &c : kAttnCases) check_attention(kernel, kv, c, seed += 7);
}

// ---- emx_cuda_attention_decode ----

struct DecodeCase {
    const char *name;
    int kv_dtype, pos, window, ring, kpb;
    bool dev_keys;
};

const DecodeCase kDecodeCases[] = {
    {"f32 pos 100, window 8 ring 23 by 16", EMX_KV_F32, 100, 8, 23, 16, false},
    {"f16 pos 61, ring = window 8 by 8, n_keys_dev", EMX_KV_F16, 61, 8, 8, 8, true},
    {"f32 pos 300, window 40 ring 71 by 16, n_keys_dev", EMX_KV_F32, 300, 40, 71, 16, true},
    {"f16 pos 45, window 40 ring 41 by 64", EMX_KV_F16, 45, 40, 41, 64, false},
};

// The inputs of the decode tests: q, the new k and v, Qwen3's q/k norms, the angles.
struct DecodeInputs {
    DevBuf<float> q, k, v, qn, kn;
    DevBuf<double> inv;
    static std::vector<double> freqs() {
        std::vector<double> f(kHd / 2);
        emx_rope_inv_freq(f.data(), kHd, 10000.0, nullptr);
        return f;
    }
    DecodeInputs(int rows, uint64_t seed)
        : q(random_floats((size_t)rows * kQDim, seed, -2, 2)), k(random_floats((size_t)rows * kKvDim, seed + 1, -2, 2)),
          v(random_floats((size_t)rows * kKvDim, seed + 2)), qn(random_floats(kHd, seed + 3, 0.5f, 1.5f)),
          kn(random_floats(kHd, seed + 4, 0.5f, 1.5f)), inv(freqs()) {}
    // The shape and rope fields (window, scale and kpb given); attn's buffers are the caller's.
    EmxAttnDecodeArgs args(int kv_dtype, int window, int kpb) const {
        EmxAttnDecodeArgs d = {};
        d.attn.kv_dtype = kv_dtype;
        d.attn.n_heads = kNh, d.attn.n_kv_heads = kNkv, d.attn.head_dim = kHd;
        d.attn.keys_per_block = kpb;
        d.attn.window = window;
        d.attn.scale = 0.0625f;
        d.attn.q = q.p, d.k = k.p, d.v = v.p;
        d.inv_freq = inv.p, d.q_norm = qn.p, d.k_norm = kn.p, d.eps = 1e-6f, d.style = EMX_ROPE_HALF;
        return d;
    }
};

struct DecodeResult {
    std::vector<float> out, scores;
    std::vector<EmxSoftmaxStats> stats;
    std::vector<uint8_t> k, v, k_before, v_before;
    std::vector<unsigned> arrivals;
};

// One fused decode call at c.pos over the full cache (pos + 4 rows) or its ring.
DecodeResult run_decode(const DecodeCase &c, bool ring, uint64_t seed) {
    const int ctx = c.pos + 4, n_keys = c.pos + 1;
    const size_t rb = row_bytes(c.kv_dtype);
    DecodeInputs in(1, seed);
    std::vector<float> kc = random_floats((size_t)ctx * kKvDim, seed + 10, -2, 2);
    std::vector<float> vc = random_floats((size_t)ctx * kKvDim, seed + 11);
    std::vector<uint8_t> kb = cache_bytes(kc, c.kv_dtype), vb = cache_bytes(vc, c.kv_dtype);
    if (ring) kb = ring_of(kb, c.pos, c.ring, rb), vb = ring_of(vb, c.pos, c.ring, rb);  // keys 0..pos-1
    DevBuf<uint8_t> kcache(kb), vcache(vb), ws(emx_cuda_attention_workspace_bytes(EMX_ATTN_SPLIT_GQA, kNh, kHd, ctx, c.kpb));
    DevBuf<int> dpos(std::vector<int>{c.pos}), dkeys(std::vector<int>{n_keys});
    DevBuf<float> out(std::vector<float>(kQDim, NAN)), scores(std::vector<float>((size_t)kNh * ctx, 12345.0f));
    DevBuf<EmxSoftmaxStats> stats{std::vector<EmxSoftmaxStats>(kNh)};
    DevBuf<unsigned> arrivals(std::vector<unsigned>(kNkv, 0u));
    EmxAttnDecodeArgs d = in.args(c.kv_dtype, c.window, c.kpb);
    d.attn.k_cache = kcache.p, d.attn.v_cache = vcache.p;
    d.attn.cache_rows = ring ? c.ring : 0;
    d.attn.n_keys = c.dev_keys ? ctx : n_keys;
    d.attn.n_keys_dev = c.dev_keys ? dkeys.p : nullptr;
    d.attn.out = out.p, d.attn.scores = scores.p, d.attn.score_stride = ctx, d.attn.head_stats = stats.p;
    d.attn.workspace = ws.p;
    d.pos = dpos.p, d.arrivals = arrivals.p;
    CUDA_OK(emx_cuda_attention_decode(&d, nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    return DecodeResult{out.download(), scores.download(), stats.download(), kcache.download(), vcache.download(),
                        kb, vb, arrivals.download()};
}

// Ring rows after the call: row pos % ring the full call's row pos, the others as before.
void check_ring_rows(const DecodeCase &c, const char *kv_name, const std::vector<uint8_t> &ring,
                     const std::vector<uint8_t> &before, const std::vector<uint8_t> &full) {
    const size_t rb = row_bytes(c.kv_dtype);
    for (int i = 0; i < c.ring; i++) {
        const uint8_t *want = i == c.pos % c.ring ? &full[(size_t)c.pos * rb] : &before[(size_t)i * rb];
        cr_assert(memcmp(&ring[(size_t)i * rb], want, rb) == 0, "%s: %s ring row %d (pos %% ring = %d)", c.name,
                  kv_name, i, c.pos % c.ring);
    }
}

// The rows test: row r's cache holds its layers where layers[r] says (row0 in rows, rows).
const int kRows = 3, kLayers = 2, kRowCtx[kRows] = {120, 40, 64}, kRowPos[kRows] = {100, 30, 63};
const EmxKvLayer kRowLayers[kRows][kLayers] = {
    {{0, 120, 0}, {120, 23, 0}},  // layer 1 a ring of 23
    {{0, 40, 0}, {40, 40, 0}},    // no ring
    {{0, 9, 0}, {9, 64, 0}},      // layer 0 a ring of 9, layer 1 (the one called) not
};

// The rows at layer 1 in one emx_cuda_attention_decode_rows launch, or each alone.
RowsResult run_rows(int kv_dtype, bool together, uint64_t seed) {
    const int kpb = 16, layer = 1, window = 8;
    DecodeInputs in(kRows, seed);
    std::vector<std::unique_ptr<DecodeRowBufs>> b;
    for (int r = 0; r < kRows; r++) {
        const EmxKvLayer *l = kRowLayers[r];
        const size_t n = (size_t)(l[kLayers - 1].row0 + l[kLayers - 1].rows) * kKvDim;
        b.emplace_back(new DecodeRowBufs(kRowCtx[r], kRowPos[r], kv_dtype, kpb, random_floats(n, seed + 10 * r + 20, -2, 2),
                                         random_floats(n, seed + 10 * r + 21), std::vector<EmxKvLayer>(l, l + kLayers)));
    }
    DevBuf<float> out(std::vector<float>((size_t)kRows * kQDim, NAN));
    EmxAttnDecodeArgs d = in.args(kv_dtype, window, kpb);
    d.attn.out = out.p;
    if (together) {
        std::vector<EmxAttnDecodeRow> t(kRows);
        for (int r = 0; r < kRows; r++) t[r] = b[r]->entry();
        DevBuf<EmxAttnDecodeRow> dt(t);
        d.attn.n_keys = 101;  // the largest pos + 1
        CUDA_OK(emx_cuda_attention_decode_rows(&d, dt.p, kRows, layer, nullptr));
        CUDA_OK(cudaDeviceSynchronize());
    } else {
        for (int r = 0; r < kRows; r++) decode_row_alone(d, *b[r], r, layer);
    }
    return gather_rows(out, b);
}

// ---- emx_cuda_rope_kv ----

// batch 3 rows into an f32/f16 cache: the full cache (32 rows, at x) or a ring of 5 (at x % 5),
// x the position or cache_row's. Returns q after, then the k and v caches' bytes.
struct RopeResult {
    std::vector<float> q;
    std::vector<uint8_t> k, v;
};
const int kRopeBatch = 3, kRopeRing = 5, kRopeCtx = 32;
const int kRopePos[kRopeBatch] = {3, 12, 29}, kRopeCacheRow[kRopeBatch] = {7, 13, 21};
const uint8_t kSentinel = 0x5a;

RopeResult run_rope(int kv_dtype, bool ring, bool cache_row) {
    const size_t cache = (size_t)(ring ? kRopeRing : kRopeCtx) * row_bytes(kv_dtype);
    DecodeInputs in(kRopeBatch, 40 + (uint64_t)kv_dtype);
    DevBuf<uint8_t> kc(std::vector<uint8_t>(cache, kSentinel)), vc(std::vector<uint8_t>(cache, kSentinel));
    DevBuf<int> pos(std::vector<int>(kRopePos, kRopePos + kRopeBatch));
    DevBuf<int> rows(std::vector<int>(kRopeCacheRow, kRopeCacheRow + kRopeBatch));
    EmxRopeArgs a = {};
    a.q = in.q.p, a.k = in.k.p, a.v = in.v.p, a.k_cache = kc.p, a.v_cache = vc.p, a.kv_dtype = kv_dtype;
    a.pos = pos.p, a.cache_row = cache_row ? rows.p : nullptr, a.cache_rows = ring ? kRopeRing : 0;
    a.inv_freq = in.inv.p, a.q_norm = in.qn.p, a.k_norm = in.kn.p, a.eps = 1e-6f;
    a.batch = kRopeBatch, a.n_heads = kNh, a.n_kv_heads = kNkv, a.head_dim = kHd, a.style = EMX_ROPE_HALF;
    CUDA_OK(emx_cuda_rope_kv(&a, nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    a.cache_rows = -1;
    cr_assert_eq(emx_cuda_rope_kv(&a, nullptr), cudaErrorInvalidValue, "cache_rows -1");
    return RopeResult{in.q.download(), kc.download(), vc.download()};
}

}  // namespace

Test(attention_ring, plain) { check_kernel(EMX_ATTN_PLAIN); }
Test(attention_ring, split) { check_kernel(EMX_ATTN_SPLIT); }
Test(attention_ring, split_gqa) { check_kernel(EMX_ATTN_SPLIT_GQA); }

Test(attention_ring, decode_equals_the_full_cache_and_writes_row_pos_mod_ring) {
    uint64_t seed = 3000;
    for (const DecodeCase &c : kDecodeCases) {
        seed += 31;
        const DecodeResult full = run_decode(c, false, seed);
        const auto both = run_two_schedules([&] { return run_decode(c, true, seed); });
        cr_assert(!has_nan(full.out), "%s: the full cache's call left NaN", c.name);
        cr_assert(isinf(full.scores[0]) && full.scores[0] < 0, "%s: key 0 not masked", c.name);
        for (const DecodeResult *g : {&both.first, &both.second}) {
            cr_assert(same_bytes(g->out, full.out), "%s: outputs differ from the full cache", c.name);
            cr_assert(same_bytes(g->scores, full.scores), "%s: score rows differ from the full cache", c.name);
            cr_assert(same_stats(g->stats, full.stats), "%s: head statistics differ from the full cache", c.name);
            check_ring_rows(c, "key", g->k, g->k_before, full.k);
            check_ring_rows(c, "value", g->v, g->v_before, full.v);
            for (unsigned n : g->arrivals) cr_assert_eq(n, 0u, "%s: a counter left at %u", c.name, n);
        }
    }
}

Test(attention_ring, decode_rows_with_a_ring_layer_equal_each_row_alone) {
    for (int kv : {EMX_KV_F32, EMX_KV_F16}) {
        const uint64_t seed = 6000 + (uint64_t)kv;
        const auto both = run_two_schedules([&] { return run_rows(kv, true, seed); });
        const RowsResult alone = run_rows(kv, false, seed);
        cr_assert(!has_nan(alone.out), "kv %d: a row alone left NaN", kv);
        for (const RowsResult *g : {&both.first, &both.second}) {
            cr_assert(same_bytes(g->out, alone.out), "kv %d: outputs differ from each row alone", kv);
            cr_assert(same_bytes(g->scores, alone.scores), "kv %d: score rows differ", kv);
            cr_assert(same_stats(g->stats, alone.stats), "kv %d: head statistics differ", kv);
            cr_assert(same_bytes(g->cache, alone.cache), "kv %d: caches differ", kv);
            for (unsigned n : g->arrivals) cr_assert_eq(n, 0u, "kv %d: a counter left at %u", kv, n);
        }
    }
}

Test(attention_ring, rope_kv_writes_row_mod_cache_rows) {
    for (int kv : {EMX_KV_F32, EMX_KV_F16})
        for (bool cache_row : {false, true}) {
            const size_t rb = row_bytes(kv);
            const RopeResult full = run_rope(kv, false, cache_row), ring = run_rope(kv, true, cache_row);
            cr_assert(same_bytes(ring.q, full.q), "kv %d cache_row %d: q differs", kv, cache_row);
            std::vector<int> from(kRopeRing, -1);  // the full cache row each ring row must hold
            for (int b = 0; b < kRopeBatch; b++) {
                const int x = cache_row ? kRopeCacheRow[b] : kRopePos[b];
                cr_assert_eq(from[x % kRopeRing], -1, "test setup: two rows on ring row %d", x % kRopeRing);
                from[x % kRopeRing] = x;
            }
            for (int i = 0; i < kRopeRing; i++)
                for (size_t j = 0; j < rb; j++) {
                    const uint8_t wk = from[i] < 0 ? kSentinel : full.k[(size_t)from[i] * rb + j];
                    const uint8_t wv = from[i] < 0 ? kSentinel : full.v[(size_t)from[i] * rb + j];
                    cr_assert(ring.k[(size_t)i * rb + j] == wk && ring.v[(size_t)i * rb + j] == wv,
                              "kv %d cache_row %d: ring row %d byte %zu (from row %d)", kv, cache_row, i, j, from[i]);
                }
        }
}

// Layers 0 and 2 plain (16 rows), layer 1 a ring of 5 between them; 4 rows of branch 1 of a
// [layer][6 steps][2 branches][row] tail to positions 3..6 (ring rows 3, 4, 0, 1) and 9..12
// (ring rows 4, 0, 1, 2).
Test(attention_ring, kv_rows_copy_wraps_a_ring_layer) {
    const size_t row = 24, steps = 6, branches = 2, n_layers = 3, branch = 1;
    const int n = 4;
    const std::vector<EmxKvLayer> layout = {{0, 16, 0}, {16, 5, 0}, {21, 16, 0}};
    std::vector<uint8_t> src(n_layers * steps * branches * row), dst(37 * row);
    for (size_t i = 0; i < src.size(); i++) src[i] = (uint8_t)(i * 7 + 3);
    for (size_t i = 0; i < dst.size(); i++) dst[i] = (uint8_t)(200 + i % 13);
    DevBuf<uint8_t> d_src(src);
    DevBuf<EmxKvLayer> layers(layout);
    for (int dst_pos : {3, 9}) {
        std::vector<uint8_t> want = dst;
        for (size_t l = 0; l < n_layers; l++)
            for (int j = 0; j < n; j++) {
                const size_t at = (size_t)layout[l].row0 + (size_t)((dst_pos + j) % layout[l].rows);
                memcpy(&want[at * row], &src[((l * steps + j) * branches + branch) * row], row);
            }
        DevBuf<uint8_t> d_dst(dst);
        CUDA_OK(emx_cuda_kv_rows_copy(d_dst.p, layers.p, dst_pos, d_src.p + branch * row, steps * branches * row,
                                      branches * row, row, n, (int)n_layers, 0));
        CUDA_OK(cudaDeviceSynchronize());
        const std::vector<uint8_t> got = d_dst.download();
        for (size_t i = 0; i < got.size(); i++)
            cr_assert_eq(got[i], want[i], "dst_pos %d: byte %zu (cache row %zu): %d, want %d", dst_pos, i, i / row,
                         got[i], want[i]);
    }
    cr_assert_eq(emx_cuda_kv_rows_copy(d_src.p, layers.p, -1, d_src.p, 0, 0, 4, 1, 1, 0), cudaErrorInvalidValue,
                 "dst_pos -1");
}

// Each refused call is accepted with cache_rows 0 (the control, run on zeros): the ring is what
// is refused.
Test(attention_ring, refuses_a_ring_it_cannot_read) {
    const int n_keys = 21;
    DevBuf<float> zeros(std::vector<float>((size_t)4 * n_keys * kQDim, 0.0f)), out((size_t)4 * kQDim);
    DevBuf<uint8_t> ws(emx_cuda_attention_workspace_bytes_rows(EMX_ATTN_SPLIT, kNh, kHd, n_keys, 16, 4));
    DevBuf<int> pos(std::vector<int>{n_keys - 1});
    DevBuf<unsigned> arrivals(std::vector<unsigned>(kNkv, 0u));
    DecodeInputs in(1, 1);
    struct Bad {
        const char *what;
        int cache_rows, window, n_rows;
        bool branches;
    };
    const Bad bad[] = {
        {"cache_rows -1", -1, 0, 1, false},
        {"a ring without a window", 10, 0, 1, false},
        {"window 11 > ring 10", 10, 11, 1, false},
        {"causal rows: window 8 + 4 rows - 1 > ring 10", 10, 8, 4, false},
        {"branch rows: window 11 > ring 10", 10, 11, 3, true},
    };
    for (const Bad &b : bad) {
        for (int kernel : {EMX_ATTN_PLAIN, EMX_ATTN_SPLIT, EMX_ATTN_SPLIT_GQA}) {
            EmxAttentionArgs a = base_args(zeros.p, zeros.p, zeros.p, EMX_KV_F32, n_keys, 16);
            a.out = out.p, a.workspace = ws.p;
            a.cache_rows = b.cache_rows, a.window = b.window, a.n_rows = b.n_rows;
            if (b.branches) a.tail_k = a.tail_v = zeros.p, a.tail_row_stride = a.tail_branch_stride = kKvDim;
            cr_assert_eq(emx_cuda_attention(kernel, &a, 0), cudaErrorInvalidValue, "kernel %d: %s", kernel, b.what);
            a.cache_rows = 0;
            CUDA_OK(emx_cuda_attention(kernel, &a, 0));
        }
        if (b.n_rows > 1) continue;  // the decode takes one row
        EmxAttnDecodeArgs dc = in.args(EMX_KV_F32, b.window, 16);
        DevBuf<float> cache(std::vector<float>((size_t)n_keys * kKvDim, 0.0f));
        dc.attn.k_cache = dc.attn.v_cache = cache.p, dc.attn.out = out.p, dc.attn.n_keys = n_keys;
        dc.attn.workspace = ws.p, dc.attn.cache_rows = b.cache_rows;
        dc.pos = pos.p, dc.arrivals = arrivals.p;
        cr_assert_eq(emx_cuda_attention_decode(&dc, nullptr), cudaErrorInvalidValue, "decode: %s", b.what);
        dc.attn.cache_rows = 0;
        CUDA_OK(emx_cuda_attention_decode(&dc, nullptr));
    }
    CUDA_OK(cudaDeviceSynchronize());
}
