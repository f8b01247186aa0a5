// test_decode_persistent.cpp — kernels/persistent/decode_persistent.cu (a decode step in one persistent
// launch) against the fused kernels it runs as phases, launched one after the other.
//
// A random two-layer model of small widths (dim 64, hidden 96, 4 query heads on 2 KV heads of
// 16, vocabulary 200) on the device twice: each copy decodes positions 0..steps-1, one through
// emx_cuda_decode_persistent, the other through the fused graph path's launches
// (emx_cuda_embedding_scaled; per layer emx_cuda_matvec_fused for q/k/v, emx_cuda_attention_decode,
// emx_cuda_matvec_fused for wo with the residual add, emx_cuda_matvec_fused_swiglu,
// emx_cuda_matvec_fused for w_down; the classifier). After every step: the logits, x, both
// layers' score rows and statistics and the whole KV caches BITWISE equal (the phases are the same
// code: matvec_fused.cuh, attention_decode.cuh).
// Breadth: every weight dtype, and beside 4-bit layers the q8 embedding and classifier a q4
// export keeps; Llama (no q/k norms), Qwen3 (norms), Qwen2 (biases), Gemma 3's
// layers (sandwich norms, GeGLU; against the fused path's Gemma launches); layer 1 local
// (a window of 6 keys, its cache a ring of 7 rows that wraps twice in 20 steps); f32 and f16
// caches; grids of 1 block (every phase by one block), 5, and all the emulator holds
// (emx_cuda_decode_persistent_blocks); keys per block 4 (several chunks, so several attention
// items a KV head). Under both emulator schedules (the Makefile's reverse pass): the reverse one
// starts the last block first, which would hang at the first barrier on a sequential schedule.
// The metrics phase (the logits' and the attention's statistics in the launch) against the
// metrics kernels launched after the fused ones, bitwise: a vocabulary of several chunks, rows
// longer than a thread's first lane, a windowed layer, head statistics recorded or recomputed.
// The entropix decision in the launch (the scan beside the metrics' items; z, three levels of the
// radix select and the gather as phases; then the last block's choice, 128 threads), against the
// metrics kernels then emx_cuda_entropix_step (its passes as kernels, its last kernel 1024
// threads): the same passes' states, token, decision, best-of-N score and entropix state,
// bitwise, every step; a vocabulary of five chunks (10,000), with profiles that
// force each way through the passes: top-p alone (z, a select over a wide nucleus), top-k and
// min-p (best of three draws), the argmax (no select). A fixed draw in the launch (top-k on: the
// same passes, then the last block's distribution and draw) against emx_cuda_sample, with and
// without the metrics in the launch: the token and the passes' states, bitwise.
// Every launch with its timeline's stamps (EmxDecodeStep.clocks): all written, in order, each step.
// Also the refusals: a grid past what is resident, widths that are not multiples of 32, NULL
// activations, metrics without the classifier, a workspace or of layers outside the model; and
// the counters left at zero for the next launch.
#include <math.h>
#include <string.h>

#include <vector>

#include "dense_test_util.h"
#include "kernels/attention_decode.h"
#include "kernels/attn_metrics.h"
#include "kernels/persistent/decode_persistent.h"
#include "kernels/embedding.h"
#include "kernels/logits_metrics.h"
#include "kernels/matvec_fused.h"
#include "kernels/sampling/sampling.h"
#include "kernels/weights.h"

#ifdef ENTROPIX_CUDA_EMU
#include "tests/cuda_emu/include/emu/kernel_runs.h"
#endif

extern "C" {
#include "runtime/cpu/cpu_ops.h"
#include "sampler/profile.h"
}

namespace {

constexpr int kDim = 64, kHidden = 96, kHeads = 4, kKv = 2, kHd = 16, kLayers = 2;
constexpr int kQ = kHeads * kHd, kKvDim = kKv * kHd, kWindow = 6, kRing = 7, kKpb = 4;

struct Variant {
    uint32_t dtype;
    int kv_dtype;
    bool norms, biases;
    int blocks;          // 0: what fits
    int vocab = 200;
    int ctx = 24;
    int metrics = 0;     // 1: the decision's statistics in the launch (both layers' attention), 2: without
                         // the attention's head statistics (recomputed from the rows)
    bool sandwich = false;  // Gemma 3's layers: GeGLU, each block's output normed before the add
    bool classifier = true; // false: the launch ends after the layers (x its output)
    const EmxProfile *entropix = nullptr;  // with metrics 1: the entropix decision in the launch
    const EmxSamplerParams *fixed = nullptr;  // or a fixed draw with these (top-k on) in the launch
    bool narrow = false;    // logits in a narrow band (narrow_classifier)
    bool edge_q8 = false;   // the embedding and the classifier in q8 beside 4-bit layers (a q4 export's)
    size_t warm = 0;        // EmxDecodeStep.warm_bytes: L2 warmed by the blocks the attention leaves idle
};

// A classifier whose logits crowd into a narrow band, 8 x[0] within about +-0.005 (the first column
// 8, the others small): most share their top bytes, so the radix select of the decision's passes
// needs every one of its levels to narrow the range to a batch.
std::vector<float> narrow_classifier(int vocab, uint64_t seed) {
    std::vector<float> f = random_floats((size_t)vocab * kDim, seed, -2e-4f, 2e-4f);
    for (int r = 0; r < vocab; r++) f[(size_t)r * kDim] = 8.0f;
    return f;
}

constexpr uint64_t kSeed = 77;
constexpr int kPause = 3;

// One layer's weights and small vectors (device), shared by both copies.
struct Layer {
    TestWeight wq, wk, wv, wo, gate, up, down;
    DevBuf<float> attn_norm, ffn_norm, q_norm, k_norm, bq, bk, bv, post_attn, post_ffn;
    Layer(uint32_t dt, uint64_t seed)
        : wq(dt, kQ, kDim, seed), wk(dt, kKvDim, kDim, seed + 1), wv(dt, kKvDim, kDim, seed + 2),
          wo(dt, kDim, kQ, seed + 3), gate(dt, kHidden, kDim, seed + 4), up(dt, kHidden, kDim, seed + 5),
          down(dt, kDim, kHidden, seed + 6), attn_norm(random_floats(kDim, seed + 7, 0.5f, 1.5f)),
          ffn_norm(random_floats(kDim, seed + 8, 0.5f, 1.5f)), q_norm(random_floats(kHd, seed + 9, 0.5f, 1.5f)),
          k_norm(random_floats(kHd, seed + 10, 0.5f, 1.5f)), bq(random_floats(kQ, seed + 11)),
          bk(random_floats(kKvDim, seed + 12)), bv(random_floats(kKvDim, seed + 13)),
          post_attn(random_floats(kDim, seed + 14, 0.5f, 1.5f)), post_ffn(random_floats(kDim, seed + 15, 0.5f, 1.5f)) {}
};

// One copy's state: activations, caches, score rows, workspace, counters.
struct Copy {
    size_t esize;
    int ctx;
    DevBuf<float> x, xb, tmp, q, k, v, att, hb, logits, scores;
    DevBuf<EmxSoftmaxStats> stats;
    DevBuf<uint8_t> kc, vc, ws, lm_ws, am_ws;
    DevBuf<unsigned> arrivals, sync;
    DevBuf<int> token, pos, argmax;
    DevBuf<EmxMetrics> metrics;
    DevBuf<uint8_t> sample_ws;  // the choice's (entropix's or a fixed draw's)
    DevBuf<EmxEntropixState> estate;
    DevBuf<int> chosen;
    DevBuf<EmxDecision> decision;
    DevBuf<double> score;
    explicit Copy(const Variant &v)
        : esize(v.kv_dtype == EMX_KV_F16 ? 2 : 4), ctx(v.ctx), x(kDim), xb(kDim), tmp(kDim), q(kQ), k(kKvDim), v(kKvDim), att(kQ),
          hb(kHidden), logits(v.vocab), scores((size_t)kLayers * kHeads * v.ctx), stats((size_t)kLayers * kHeads),
          kc((size_t)(v.ctx + kRing) * kKvDim * esize), vc((size_t)(v.ctx + kRing) * kKvDim * esize),
          ws(emx_cuda_attention_workspace_bytes(EMX_ATTN_SPLIT_GQA, kHeads, kHd, v.ctx, kKpb)),
          lm_ws(emx_cuda_logits_metrics_workspace_bytes(v.vocab)), am_ws(emx_cuda_attn_metrics_workspace_bytes(kLayers)),
          arrivals(std::vector<unsigned>(kKv, 0u)), sync(std::vector<unsigned>(2, 0u)), token(1), pos(1),
          argmax(std::vector<int>{-7}), metrics(1), sample_ws(emx_cuda_sample_workspace_bytes(v.vocab)),
          estate(std::vector<EmxEntropixState>(1, EmxEntropixState{0})), chosen(1), decision(1), score(1) {
        CUDA_OK(cudaMemset(kc.p, 0, kc.n));
        CUDA_OK(cudaMemset(vc.p, 0, vc.n));
        CUDA_OK(cudaMemset(scores.p, 0, scores.n * sizeof(float)));
        CUDA_OK(cudaMemset(stats.p, 0, stats.n * sizeof(EmxSoftmaxStats)));  // (its padding: never written)
        CUDA_OK(cudaMemset(metrics.p, 0, sizeof(EmxMetrics)));  // the fields neither path writes compare equal
    }
    // layer l's cache rows: layer 0 holds ctx rows, layer 1 (local) a ring of kRing after them
    void *kl(int l) const { return kc.p + (size_t)(l ? ctx : 0) * kKvDim * esize; }
    void *vl(int l) const { return vc.p + (size_t)(l ? ctx : 0) * kKvDim * esize; }
    // layer l's statistics, or none (metrics 2: the metrics recompute them from the rows)
    EmxSoftmaxStats *stats_of(const Variant &v, int l) const {
        return v.metrics == 2 ? nullptr : stats.p + (size_t)l * kHeads;
    }
};

// The embedding's and the classifier's dtype.
uint32_t edge_of(const Variant &v) { return v.edge_q8 ? (uint32_t)EMX_Q8 : v.dtype; }

// The cache a GPU's auto gives weights of dt (emx_kv_type_resolve): f32 for f32 weights, else f16,
// the pairs the persistent kernel is built for.
int built_cache(uint32_t dt) { return dt == EMX_F32 ? EMX_KV_F32 : EMX_KV_F16; }

struct Model {
    Variant var;
    TestWeight emb;
    TestWeight *out_w;
    const TestWeight &out;
    DevBuf<float> out_norm;
    DevBuf<double> inv_freq;
    std::vector<Layer *> layers;
    explicit Model(const Variant &v)
        : var(v), emb(edge_of(v), v.vocab, kDim, 901),
          out_w(v.narrow ? new TestWeight(edge_of(v), v.vocab, kDim, narrow_classifier(v.vocab, 902))
                         : new TestWeight(edge_of(v), v.vocab, kDim, 902)),
          out(*out_w), out_norm(random_floats(kDim, 903, 0.5f, 1.5f)), inv_freq(kHd / 2) {
        std::vector<double> inv(kHd / 2);
        emx_rope_inv_freq(inv.data(), kHd, 10000.0, nullptr);
        inv_freq.upload(inv);
        for (int l = 0; l < kLayers; l++) layers.push_back(new Layer(v.dtype, 1000 + 100 * (uint64_t)l));
    }
    ~Model() {
        delete out_w;
        for (Layer *l : layers) delete l;
    }
};

// The graph path's launches for one step of copy c.
void fused_step(const Model &m, Copy &c) {
    CUDA_OK(emx_cuda_embedding_scaled(&m.emb.w, c.token.p, 1, 1.0f, c.x.p, nullptr));
    const bool sw = m.var.sandwich;
    for (int l = 0; l < kLayers; l++) {
        const Layer &L = *m.layers[l];
        const EmxCudaWeight *qkv[3] = {&L.wq.w, &L.wk.w, &L.wv.w};
        float *qkv_out[3] = {c.q.p, c.k.p, c.v.p};
        if (sw && l > 0) {  // x = xb + rmsnorm(tmp) * post_ffn of the layer before, in the prologue
            const EmxFusedInput in = {c.xb.p, L.attn_norm.p, 1e-5f, 0, 1};
            const EmxFusedResidual res = {c.tmp.p, m.layers[l - 1]->post_ffn.p, c.x.p};
            CUDA_OK(emx_cuda_matvec_fused_residual(&in, &res, qkv, qkv_out, 3, nullptr));
        } else {
            const EmxFusedInput qkv_in = {c.x.p, L.attn_norm.p, 1e-5f, 0, 1};
            CUDA_OK(emx_cuda_matvec_fused(&qkv_in, qkv, qkv_out, 3, 0, nullptr));
        }
        EmxAttnDecodeArgs d = {};
        d.attn.k_cache = c.kl(l), d.attn.v_cache = c.vl(l), d.attn.cache_rows = l ? kRing : 0;
        d.attn.kv_dtype = m.var.kv_dtype;
        d.attn.n_heads = kHeads, d.attn.n_kv_heads = kKv, d.attn.head_dim = kHd;
        d.attn.q = c.q.p, d.attn.out = c.att.p;
        d.attn.n_keys_dev = nullptr;
        d.attn.scores = c.scores.p + (size_t)l * kHeads * c.ctx, d.attn.score_stride = c.ctx;
        d.attn.head_stats = c.stats_of(m.var, l);
        d.attn.keys_per_block = kKpb, d.attn.workspace = c.ws.p, d.attn.window = l ? kWindow : 0;
        const int pos = c.pos.get();
        d.attn.n_keys = pos + 1;
        d.k = c.k.p, d.v = c.v.p, d.pos = c.pos.p, d.inv_freq = m.inv_freq.p;
        d.q_norm = m.var.norms ? L.q_norm.p : nullptr, d.k_norm = m.var.norms ? L.k_norm.p : nullptr;
        d.bq = m.var.biases ? L.bq.p : nullptr, d.bk = m.var.biases ? L.bk.p : nullptr;
        d.bv = m.var.biases ? L.bv.p : nullptr;
        d.eps = 1e-5f, d.style = EMX_ROPE_HALF, d.arrivals = c.arrivals.p;
        CUDA_OK(emx_cuda_attention_decode(&d, nullptr));
        const EmxFusedInput att_in = {c.att.p, nullptr, 1e-5f, 0, 1};
        const EmxCudaWeight *wo[1] = {&L.wo.w};
        float *x_out[1] = {c.x.p}, *tmp_out[1] = {c.tmp.p};
        const EmxFusedInput hb_in = {c.hb.p, nullptr, 1e-5f, 0, 1};
        const EmxCudaWeight *down[1] = {&L.down.w};
        if (sw) {  // tmp = Wo att; hb = geglu(rmsnorm(h)), h = x + rmsnorm(tmp) * post_attn into xb; tmp = Wdown hb
            CUDA_OK(emx_cuda_matvec_fused(&att_in, wo, tmp_out, 1, 0, nullptr));
            const EmxFusedInput ffn_in = {c.x.p, L.ffn_norm.p, 1e-5f, 0, 1};
            const EmxFusedResidual res = {c.tmp.p, L.post_attn.p, c.xb.p};
            CUDA_OK(emx_cuda_matvec_fused_geglu(&ffn_in, &res, &L.gate.w, &L.up.w, c.hb.p, nullptr));
            CUDA_OK(emx_cuda_matvec_fused(&hb_in, down, tmp_out, 1, 0, nullptr));
            continue;
        }
        CUDA_OK(emx_cuda_matvec_fused(&att_in, wo, x_out, 1, 1, nullptr));
        const EmxFusedInput ffn_in = {c.x.p, L.ffn_norm.p, 1e-5f, 0, 1};
        CUDA_OK(emx_cuda_matvec_fused_swiglu(&ffn_in, &L.gate.w, &L.up.w, c.hb.p, nullptr));
        CUDA_OK(emx_cuda_matvec_fused(&hb_in, down, x_out, 1, 1, nullptr));
    }
    if (sw) {  // the last layer's residual add alone
        const EmxFusedInput in = {c.xb.p, nullptr, 1e-5f, 0, 1};
        const EmxFusedResidual res = {c.tmp.p, m.layers[kLayers - 1]->post_ffn.p, c.x.p};
        CUDA_OK(emx_cuda_fused_residual(&in, &res, kDim, nullptr));
    }
    if (!m.var.classifier) return;
    const EmxFusedInput cls_in = {c.x.p, m.out_norm.p, 1e-5f, 0, 1};
    const EmxCudaWeight *cls[1] = {&m.out.w};
    float *logits[1] = {c.logits.p};
    CUDA_OK(emx_cuda_matvec_fused(&cls_in, cls, logits, 1, 0, nullptr));
    const int vocab = m.var.vocab, n_keys = c.pos.get() + 1;
    if (m.var.fixed)  // the sampler's kernels: its passes, then the one block that draws
        CUDA_OK(emx_cuda_sample(c.logits.p, vocab, m.var.fixed, kSeed, (uint64_t)(n_keys - 1), nullptr, 0, c.chosen.p,
                                c.sample_ws.p, nullptr, 0));
    if (!m.var.metrics) return;
    // the graph path's tail: the metrics kernels, layer 1's rows from its window
    CUDA_OK(emx_cuda_logits_metrics(c.logits.p, vocab, c.metrics.p, c.argmax.p, nullptr, c.lm_ws.p, nullptr, 0));
    EmxCudaAttnWindow win = {};
    win.window = kWindow, win.local_layers[0] = 1u << 1;
    CUDA_OK(emx_cuda_attn_metrics_window(c.scores.p, c.stats_of(m.var, 0), kLayers, kHeads, c.ctx, n_keys, nullptr,
                                         &win, EMX_ATTN_LAYERS_ALL, c.metrics.p, c.am_ws.p, nullptr, 0));
    if (m.var.entropix)  // the decision: its passes as kernels, then the one block that decides
        CUDA_OK(emx_cuda_entropix_step(c.logits.p, vocab, c.metrics.p, m.var.entropix, c.estate.p, kPause, kSeed,
                                       (uint64_t)(n_keys - 1), nullptr, c.chosen.p, c.decision.p, c.score.p,
                                       c.sample_ws.p, nullptr, 0));
}

// The persistent kernel's arguments for copy c (its layer table in `table`).
EmxDecodeStep step_args(const Model &m, Copy &c, DevBuf<EmxDecodeLayer> &table) {
    std::vector<EmxDecodeLayer> t(kLayers);
    for (int l = 0; l < kLayers; l++) {
        const Layer &L = *m.layers[l];
        EmxDecodeLayer &e = t[l];
        e = EmxDecodeLayer{};
        e.wq = L.wq.w.data, e.wk = L.wk.w.data, e.wv = L.wv.w.data, e.wo = L.wo.w.data;
        e.gate = L.gate.w.data, e.up = L.up.w.data, e.down = L.down.w.data;
        e.attn_norm = L.attn_norm.p, e.ffn_norm = L.ffn_norm.p;
        e.post_attn_norm = m.var.sandwich ? L.post_attn.p : nullptr, e.post_ffn_norm = m.var.sandwich ? L.post_ffn.p : nullptr;
        e.q_norm = m.var.norms ? L.q_norm.p : nullptr, e.k_norm = m.var.norms ? L.k_norm.p : nullptr;
        e.bq = m.var.biases ? L.bq.p : nullptr, e.bk = m.var.biases ? L.bk.p : nullptr;
        e.bv = m.var.biases ? L.bv.p : nullptr;
        e.inv_freq = m.inv_freq.p;
        e.k_cache = c.kl(l), e.v_cache = c.vl(l), e.cache_rows = l ? kRing : 0, e.window = l ? kWindow : 0;
        e.scores = c.scores.p + (size_t)l * kHeads * c.ctx, e.head_stats = c.stats_of(m.var, l);
    }
    table.upload(t);
    EmxDecodeStep a = {};
    a.n_layers = kLayers, a.dim = kDim, a.hidden_dim = kHidden, a.n_heads = kHeads, a.n_kv_heads = kKv;
    a.head_dim = kHd, a.vocab = m.var.vocab, a.ctx = c.ctx, a.dtype = m.var.dtype, a.kv_dtype = m.var.kv_dtype;
    a.eps = 1e-5f, a.attn_scale = 0, a.embed_scale = 1.0f, a.rope_style = EMX_ROPE_HALF, a.keys_per_block = kKpb;
    a.layers = table.p, a.emb = m.emb.w.data, a.out = m.out.w.data, a.out_norm = m.out_norm.p;
    a.emb_dtype = m.emb.dtype, a.out_dtype = m.out.dtype;
    a.x = c.x.p, a.q = c.q.p, a.k = c.k.p, a.v = c.v.p, a.att = c.att.p, a.hb = c.hb.p, a.logits = c.logits.p;
    a.attn_ws = c.ws.p, a.arrivals = c.arrivals.p, a.sync = c.sync.p, a.token = c.token.p, a.pos = c.pos.p;
    a.blocks = m.var.blocks;
    a.warm_bytes = m.var.warm;
    a.sandwich = m.var.sandwich, a.xb = c.xb.p, a.tmp = c.tmp.p;
    if (!m.var.classifier) a.out = nullptr;
    if (m.var.metrics) {  // both layers' attention metrics (EMX_ATTN_LAYERS_ALL), and the argmax
        a.metrics.out = c.metrics.p, a.metrics.argmax = c.argmax.p;
        a.metrics.logits_ws = c.lm_ws.p, a.metrics.attn_ws = c.am_ws.p;
        a.metrics.attn_first = 0, a.metrics.attn_layers = kLayers;
    }
    if (m.var.entropix) {  // the draws' step: the position (set at each step)
        a.choice.sample_ws = c.sample_ws.p, a.choice.state = c.estate.p;
        a.choice.profile = *m.var.entropix, a.choice.pause_token = kPause, a.choice.seed = kSeed;
        a.choice.token = c.chosen.p, a.choice.decision = c.decision.p, a.choice.score = c.score.p;
    }
    if (m.var.fixed) {
        a.choice.sample_ws = c.sample_ws.p, a.choice.fixed = 1, a.choice.params = *m.var.fixed;
        a.choice.seed = kSeed, a.choice.token = c.chosen.p;
    }
    return a;
}

template <class T>
void expect_same(const DevBuf<T> &a, const DevBuf<T> &b, const char *what, const Variant &v, int pos) {
    const std::vector<T> x = a.download(), y = b.download();
    cr_assert(memcmp(x.data(), y.data(), x.size() * sizeof(T)) == 0,
              "dtype %u, cache %d, norms %d, biases %d, blocks %d: %s differ at pos %d", v.dtype, v.kv_dtype, v.norms,
              v.biases, v.blocks, what, pos);
}

// The timeline's stamps of a step (EmxDecodeStep.clocks): every block's slots written, each no
// earlier than the one before it (start, then each phase's arrival and departure, then the end),
// the first after the block's last stamp of the step before (*last, updated).
void expect_stamps(const DevBuf<long long> &clocks, int phases, int grid, std::vector<long long> &last,
                   const Variant &v, int pos) {
    const std::vector<long long> h = clocks.download();
    for (int b = 0; b < grid; b++) {
        long long prev = last[b];
        for (int k = 0; k <= phases; k++)
            for (int w = 0; w < 2; w++) {
                const long long t = h[((size_t)k * grid + b) * 2 + w];
                cr_assert(t > 0 && t >= prev, "dtype %u, blocks %d: block %d's stamp %d/%d at pos %d: %lld after %lld",
                          v.dtype, grid, b, k, w, pos, t, prev);
                prev = t;
            }
        last[b] = prev;
    }
}

// The bytes kernels have asked L2 for in bulk so far (the emulator counts them; 0 on a GPU).
long long prefetched_bytes() {
#ifdef ENTROPIX_CUDA_EMU
    return emu::l2_prefetch_bytes();
#else
    return 0;
#endif
}

// What a step's warming asked L2 for (emulated): in each layer, the blocks without an attention
// item (grid - items > 0: a short row on a grid of many blocks) ask for the first v.warm bytes of
// wo, gate, up and down, each matrix's slices tiling its part (its last bytes short of 16 apart):
// no slice twice, none left out. The emulator also faults a slice that is not 16-byte aligned or
// leaves its matrix.
void expect_warmed(const Variant &v, long long bytes, int grid, int pos) {
#ifdef ENTROPIX_CUDA_EMU
    const int items = (pos + kKpb) / kKpb * kKv;  // layer 0's (layer 1's window has fewer)
    const long long size[4] = {(long long)emx_cuda_weight_bytes(v.dtype, kDim, kQ),
                               (long long)emx_cuda_weight_bytes(v.dtype, kHidden, kDim),
                               (long long)emx_cuda_weight_bytes(v.dtype, kHidden, kDim),
                               (long long)emx_cuda_weight_bytes(v.dtype, kDim, kHidden)};
    long long want = 0, left = (long long)v.warm;
    for (long long n : size) {
        const long long part = n < left ? n : left;
        want += part & ~15LL, left -= part;
    }
    if (items >= grid && grid > 1) return;  // (layer 1's window may leave blocks idle: not counted here)
    if (grid == 1) want = 0;                 // one block, with an item: none idle
    cr_assert_eq(bytes, kLayers * want, "dtype %u, blocks %d, warm %zu: %lld bytes asked of L2 at pos %d, %lld expected",
                 v.dtype, grid, v.warm, bytes, pos, kLayers * want);
#else
    (void)v, (void)bytes, (void)grid, (void)pos;
#endif
}

void decode_equals_fused(const Variant &v, int steps) {
    Model m(v);
    Copy ref(v), per(v);
    DevBuf<EmxDecodeLayer> table(kLayers);
    EmxDecodeStep a = step_args(m, per, table);
    int grid = v.blocks;  // the timeline's stamps too: they must not change a bit of the results
    if (!grid) CUDA_OK(emx_cuda_decode_persistent_blocks(&a, &grid));
    const int phases = emx_cuda_decode_persistent_phases(&a);
    DevBuf<long long> clocks(std::vector<long long>((size_t)(phases + 1) * grid * 2, 0));
    std::vector<long long> last(grid, 0);
    a.clocks = clocks.p;
    for (int pos = 0; pos < steps; pos++) {
        const int tok = (7 + 31 * pos) % v.vocab;
        for (Copy *c : {&ref, &per}) {
            c->token.upload(&tok, 1);
            c->pos.upload(&pos, 1);
        }
        fused_step(m, ref);
        a.choice.step = (uint64_t)pos;
        const long long warmed = prefetched_bytes();
        CUDA_OK(emx_cuda_decode_persistent(&a, nullptr));
        CUDA_OK(cudaDeviceSynchronize());
        expect_warmed(v, prefetched_bytes() - warmed, grid, pos);
        if (v.classifier) expect_same(ref.logits, per.logits, "logits", v, pos);
        expect_same(ref.x, per.x, "x", v, pos);
        expect_same(ref.scores, per.scores, "score rows", v, pos);
        expect_same(ref.stats, per.stats, "statistics", v, pos);
        expect_same(ref.kc, per.kc, "keys", v, pos);
        expect_same(ref.vc, per.vc, "values", v, pos);
        if (v.metrics) {
            expect_same(ref.metrics, per.metrics, "metrics", v, pos);
            expect_same(ref.argmax, per.argmax, "argmax", v, pos);
        }
        if (v.entropix || v.fixed) {
            expect_same(ref.chosen, per.chosen, "the chosen token", v, pos);
            if (v.entropix) {
                expect_same(ref.decision, per.decision, "the entropix decision", v, pos);
                expect_same(ref.score, per.score, "the best-of-N score", v, pos);
                expect_same(ref.estate, per.estate, "the entropix state", v, pos);
            }
            unsigned char rs[512], ps[512];  // what the passes leave the decision: every level's state, z
            const size_t nb = emx_cuda_sample_passes_state(ref.sample_ws.p, v.vocab, rs, sizeof rs);
            cr_assert(nb > 0 && emx_cuda_sample_passes_state(per.sample_ws.p, v.vocab, ps, sizeof ps) == nb &&
                          memcmp(rs, ps, nb) == 0,
                      "the passes' states differ at pos %d (%zu bytes)", pos, nb);
        }
        expect_stamps(clocks, phases, grid, last, v, pos);
        const std::vector<unsigned> sync = per.sync.download(), arr = per.arrivals.download();
        cr_assert(sync[0] == 0 && sync[1] == 0 && arr[0] == 0 && arr[1] == 0, "counters left at %u %u / %u %u", sync[0],
                  sync[1], arr[0], arr[1]);
    }
}

}  // namespace

// Every dtype with the cache auto gives it (the kernels built), and f32 weights with the f16 cache.
Test(decode_persistent, every_dtype_equals_the_fused_kernels, .timeout = 600) {
    for (uint32_t dt : kAllDtypes) decode_equals_fused(Variant{dt, built_cache(dt), false, false, 0}, 9);
    decode_equals_fused(Variant{EMX_F32, EMX_KV_F16, false, false, 0}, 9);
}

// Past the local layer's ring twice (20 positions, a ring of 7), Qwen3's norms and Qwen2's biases,
// f32 and f16 caches, one block and five.
Test(decode_persistent, norms_biases_rings_and_grids, .timeout = 600) {
    decode_equals_fused(Variant{EMX_F32, EMX_KV_F32, true, false, 1}, 20);
    decode_equals_fused(Variant{EMX_Q4, EMX_KV_F16, false, true, 5}, 20);
    decode_equals_fused(Variant{EMX_BF16, EMX_KV_F16, true, true, 0}, 12);
}

// The decision's statistics in the launch (the metrics phase, run as two lanes a thread of the
// metrics kernels' blocks) against the metrics kernels after the fused launches: a vocabulary of
// three chunks, one partial; 140 positions, so layer 0's rows pass the 128 keys of a thread's
// first lane and layer 1's come from its window; head statistics recorded, and recomputed from
// the rows; every grid, and one block doing every item and the merge.
Test(decode_persistent, metrics_in_the_launch_equal_the_metrics_kernels, .timeout = 900) {
    Variant v{EMX_Q8, EMX_KV_F16, true, false, 0};
    v.vocab = 5000, v.ctx = 144, v.metrics = 1;
    decode_equals_fused(v, 140);
    Variant w{EMX_Q4, EMX_KV_F16, false, true, 1};
    w.vocab = 2100, w.metrics = 2;
    decode_equals_fused(w, 20);
}

// Profiles that put every step in one case (the thresholds), so each way through the passes is
// taken: HEHV with top-k off and min-p off (top-p alone: z, a wide nucleus) drawing once or the best
// of three; ADAPTIVE (top-k, top-p and min-p, the best of its draws); LELV (the argmax: the passes
// find nothing to select).
EmxProfile forced(EmxCase c, int n_samples) {
    EmxProfile p;
    emx_profile_classic(&p);
    p.lelv_entropy_below = c == EMX_CASE_LELV ? 1e30 : -1.0, p.lelv_varentropy_below = 1e30;
    p.helv_entropy_above = 1e30, p.lehv_entropy_below = -1.0;
    p.hehv_entropy_above = c == EMX_CASE_HEHV ? -1.0 : 1e30, p.hehv_varentropy_above = -1.0;
    if (c == EMX_CASE_HEHV) {
        p.top_k = 0, p.min_p = 0.0, p.top_p = 0.9, p.hehv_top_p_attn_entropy = 0.0, p.hehv_n_samples = n_samples;
    }
    return p;
}

// The entropix decision in the launch (its passes, then the last block's choice) against the
// metrics kernels and emx_cuda_entropix_step: each profile on every grid and on one block doing
// every chunk, with the random classifier's logits and with logits in a narrow band (f32 weights,
// which keep it).
Test(decode_persistent, entropix_decision_in_the_launch_equals_the_sampling_kernels, .timeout = 900) {
    const EmxProfile hehv1 = forced(EMX_CASE_HEHV, 1), hehv3 = forced(EMX_CASE_HEHV, 3);
    const EmxProfile ada = forced(EMX_CASE_ADAPTIVE, 1), lelv = forced(EMX_CASE_LELV, 1);
    int blocks = 0;
    for (bool narrow : {false, true})
        for (const EmxProfile *p : {&hehv1, &hehv3, &ada, &lelv}) {
            const uint32_t dt = narrow ? (uint32_t)EMX_F32 : (uint32_t)EMX_Q8;
            Variant v{dt, built_cache(dt), true, false, blocks};
            v.vocab = 10000, v.metrics = 1, v.entropix = p, v.narrow = narrow;
            decode_equals_fused(v, 4);
            blocks = blocks ? 0 : 1;
        }
}

// A fixed draw in the launch (top-k on: emx_cuda_sample's passes, then the last block's
// distribution and draw) against emx_cuda_sample after the fused launches: llama.cpp's combined
// default (top-k 40, top-p 0.95, min-p 0.05), top-k alone at a high temperature (a flat
// distribution: the draw lands anywhere in the batch) and top-k 2; without the metrics (the scan
// its own phase), and with them; random logits and logits in a narrow band (every level of the
// select), every grid and one block.
Test(decode_persistent, fixed_draw_in_the_launch_equals_the_sampler_kernels, .timeout = 900) {
    const EmxSamplerParams combined = {0.8f, 40, 0.95f, 0.05f, 0}, flat = {3.0f, 300, 1.0f, 0.0f, 0};
    const EmxSamplerParams two = {1.0f, 2, 1.0f, 0.0f, 0};
    int blocks = 0, metrics = 0;
    for (bool narrow : {false, true})
        for (const EmxSamplerParams *p : {&combined, &flat, &two}) {
            const uint32_t dt = narrow ? (uint32_t)EMX_F32 : (uint32_t)EMX_Q8;
            Variant v{dt, built_cache(dt), false, true, blocks};
            v.vocab = 10000, v.metrics = metrics, v.fixed = p, v.narrow = narrow;
            decode_equals_fused(v, 4);
            blocks = blocks ? 0 : 1, metrics = !metrics;
        }
}

// Gemma 3's layers: the sandwich norms' residual adds in the next phase's prologue (x and xb
// alternating), GeGLU, the last add in the classifier's prologue or, without the classifier in
// the launch, by one block at the end; with the metrics.
Test(decode_persistent, gemma3_layers_equal_the_fused_kernels, .timeout = 600) {
    for (uint32_t dt : {(uint32_t)EMX_Q8, (uint32_t)EMX_F32}) {
        Variant v{dt, built_cache(dt), true, false, 0};
        v.sandwich = true, v.metrics = 1;
        decode_equals_fused(v, 12);
    }
    Variant w{EMX_Q4, EMX_KV_F16, true, false, 3};
    w.sandwich = true;
    decode_equals_fused(w, 20);
    w.blocks = 1, w.classifier = false;  // the layers alone: x made by block 0 after the last barrier
    decode_equals_fused(w, 3);
}

// A q4 export's embedding and classifier, q8 beside 4-bit layers, in the launch (the q4 kernels'
// own q8 phases): every 4-bit dtype; Gemma 3's layers (the last residual add in the q8
// classifier's prologue) with the metrics; the entropix decision after a q8 classifier.
Test(decode_persistent, q8_embedding_and_classifier_beside_4bit_layers, .timeout = 600) {
    for (uint32_t dt : {(uint32_t)EMX_Q4, (uint32_t)EMX_Q4_1, (uint32_t)EMX_Q4_1F}) {
        Variant v{dt, EMX_KV_F16, false, false, 0};
        v.edge_q8 = true;
        decode_equals_fused(v, 6);
    }
    Variant g{EMX_Q4, EMX_KV_F16, true, false, 3};
    g.edge_q8 = true, g.sandwich = true, g.metrics = 1;
    decode_equals_fused(g, 8);
    const EmxProfile ada = forced(EMX_CASE_ADAPTIVE, 1);
    Variant e{EMX_Q4_1F, EMX_KV_F16, true, false, 0};
    e.edge_q8 = true, e.vocab = 10000, e.metrics = 1, e.entropix = &ada;
    decode_equals_fused(e, 3);
}

// L2 warmed by the blocks the attention phase leaves idle: the next phases' weights asked for in
// slices that tile them (counted by the emulator, which faults a misaligned slice or one past its
// matrix), capped (wo and part of gate) or not (all four), Llama's and Gemma 3's layers; the
// results the same bits. With no idle block (one block) nothing is asked.
Test(decode_persistent, idle_blocks_warm_l2_with_the_next_phases, .timeout = 600) {
    for (uint32_t dt : {(uint32_t)EMX_Q8, (uint32_t)EMX_Q4_1F, (uint32_t)EMX_F16}) {
        Variant v{dt, EMX_KV_F16, true, false, 0};
        v.warm = 10000;
        decode_equals_fused(v, 8);
        v.warm = (size_t)1 << 30, v.sandwich = dt == EMX_Q8;
        decode_equals_fused(v, 8);
    }
    Variant one{EMX_Q8, EMX_KV_F16, false, false, 1};
    one.warm = (size_t)1 << 30;
    const long long before = prefetched_bytes();
    decode_equals_fused(one, 3);
    cr_assert_eq(prefetched_bytes(), before, "one block, which has an attention item, warmed L2");
}

Test(decode_persistent, refuses_what_it_does_not_take) {
    Model m(Variant{EMX_Q8, EMX_KV_F16, false, false, 0});
    Copy c(m.var);
    DevBuf<EmxDecodeLayer> table(kLayers);
    const EmxDecodeStep good = step_args(m, c, table);
    int fit = 0;
    CUDA_OK(emx_cuda_decode_persistent_blocks(&good, &fit));
    cr_assert_gt(fit, 0);
    cr_assert_null(emx_cuda_decode_persistent_refusal(&good));
    EmxDecodeStep a = good;
    a.blocks = fit + 1;  // more than are resident: every block waits for every other
    cr_assert_eq(emx_cuda_decode_persistent(&a, nullptr), cudaErrorInvalidValue);
    a = good;
    a.hidden_dim = 100;
    cr_assert_not_null(emx_cuda_decode_persistent_refusal(&a));
    cr_assert_eq(emx_cuda_decode_persistent(&a, nullptr), cudaErrorInvalidValue);
    a = good;
    a.n_heads = 3;  // not a multiple of the KV heads
    cr_assert_not_null(emx_cuda_decode_persistent_refusal(&a));
    a = good;
    a.out_dtype = EMX_F16;  // a classifier of another dtype than the layers' (beside q8 layers: none)
    cr_assert_not_null(emx_cuda_decode_persistent_refusal(&a));
    a.out = nullptr;  // the launch without the classifier: its dtype not read
    cr_assert_null(emx_cuda_decode_persistent_refusal(&a));
    a = good;
    a.emb_dtype = EMX_Q4;
    cr_assert_not_null(emx_cuda_decode_persistent_refusal(&a));
    a = good;
    a.kv_dtype = EMX_KV_F32;  // beside q8 weights: not built (auto gives them the f16 cache)
    cr_assert_not_null(emx_cuda_decode_persistent_refusal(&a));
    cr_assert_eq(emx_cuda_decode_persistent(&a, nullptr), cudaErrorInvalidValue);
    a.kv_dtype = 3;  // no cache type
    cr_assert_not_null(emx_cuda_decode_persistent_refusal(&a));
    cr_assert(emx_cuda_decode_persistent_takes(EMX_Q4_1, EMX_Q8) && emx_cuda_decode_persistent_takes(EMX_Q8, EMX_Q8) &&
              !emx_cuda_decode_persistent_takes(EMX_Q8, EMX_Q4) && !emx_cuda_decode_persistent_takes(EMX_Q4, EMX_F32) &&
              !emx_cuda_decode_persistent_takes(EMX_F16, EMX_F32));
    a = good;
    a.hb = nullptr;
    cr_assert_eq(emx_cuda_decode_persistent(&a, nullptr), cudaErrorInvalidValue);
    a = good;  // the metrics: after the classifier, with their workspaces, of the model's layers
    a.metrics.out = c.metrics.p, a.metrics.logits_ws = c.lm_ws.p, a.metrics.attn_ws = c.am_ws.p;
    a.metrics.attn_first = 1, a.metrics.attn_layers = 2;
    cr_assert_eq(emx_cuda_decode_persistent(&a, nullptr), cudaErrorInvalidValue);
    a.metrics.attn_layers = 1;
    a.out = nullptr;
    cr_assert_eq(emx_cuda_decode_persistent(&a, nullptr), cudaErrorInvalidValue);
    a.out = good.out, a.metrics.logits_ws = nullptr;
    cr_assert_eq(emx_cuda_decode_persistent(&a, nullptr), cudaErrorInvalidValue);
    a = good;  // the entropix decision: after the metrics with their attention's, with the state and
               // the token's place, from 8192 logits
    a.choice.sample_ws = c.sample_ws.p, a.choice.state = c.estate.p, a.choice.token = c.chosen.p;
    cr_assert_eq(emx_cuda_decode_persistent(&a, nullptr), cudaErrorInvalidValue);
    a.metrics.out = c.metrics.p, a.metrics.logits_ws = c.lm_ws.p, a.metrics.attn_ws = c.am_ws.p;
    a.metrics.attn_layers = 1;
    cr_assert_eq(emx_cuda_decode_persistent(&a, nullptr), cudaErrorInvalidValue);  // a vocabulary of 200
    a.vocab = 8192, a.choice.state = nullptr;
    cr_assert_eq(emx_cuda_decode_persistent(&a, nullptr), cudaErrorInvalidValue);
    a.choice.state = c.estate.p, a.choice.token = nullptr;
    cr_assert_eq(emx_cuda_decode_persistent(&a, nullptr), cudaErrorInvalidValue);
    a = good;  // a fixed draw: top-k on and a temperature (else the sampler's wide or one-block draw)
    a.vocab = 8192, a.choice.sample_ws = c.sample_ws.p, a.choice.token = c.chosen.p, a.choice.fixed = 1;
    a.choice.params = EmxSamplerParams{0.8f, 0, 0.95f, 0.05f, 0};
    cr_assert_eq(emx_cuda_decode_persistent(&a, nullptr), cudaErrorInvalidValue);
    a.choice.params.top_k = 1;
    cr_assert_eq(emx_cuda_decode_persistent(&a, nullptr), cudaErrorInvalidValue);
    a.choice.params.top_k = 40, a.choice.params.temperature = 0.0f;
    cr_assert_eq(emx_cuda_decode_persistent(&a, nullptr), cudaErrorInvalidValue);
    a = good;
    a.emb = nullptr, a.out = nullptr;  // the layers alone are a valid step
    c.pos.upload(std::vector<int>{0});
    c.x.upload(random_floats(kDim, 5));
    CUDA_OK(emx_cuda_decode_persistent(&a, nullptr));
    CUDA_OK(cudaDeviceSynchronize());
}
