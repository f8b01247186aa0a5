// tools/lab/attn_metrics.cu — the attention metrics of one decoding step (kernels/attn_metrics.cu)
// against the CPU's emx_attention_metrics: per-head entropy (mean over heads), its variance
// across heads, the true varentropy, agreement and interaction strength, from the score rows;
// once recomputing the per-head statistics from the scores, once reading those the attention
// kernel wrote (head_stats, what the runtime does). `make lab K=attn_metrics`.
#include "tools/lab/lab.h"

#include "kernels/attention.h"
#include "kernels/attn_metrics.h"

extern "C" {
#include "sampler/metrics.h"
}

int main(int argc, char **argv) {
    Lab L;
    lab_init(&L, "attn_metrics", argc, argv, "--heads --keys",
             "entropy, varentropy, agreement, interaction strength of the last layer's attention rows");
    const int nh = lab_int(&L, "--heads", 9, 1, EMX_CUDA_ATTN_METRICS_MAX_HEADS);
    const int n_keys = lab_int(&L, "--keys", 512, 1, 1 << 20), hd = 64;
    // the scores come from the attention kernel itself (so its head statistics can be used):
    // one KV head per query head, random q, k, v
    std::vector<float> q = lab_random((size_t)nh * hd, 71, -2.0f, 2.0f), k = lab_random((size_t)n_keys * nh * hd, 72),
                       v = lab_random((size_t)n_keys * nh * hd, 73);
    LabBuf<float> dq(q), dk(k), dv(v), dout((size_t)nh * hd), dscores((size_t)nh * n_keys);
    LabBuf<EmxSoftmaxStats> dstats(nh);
    LabBuf<uint8_t> aws(emx_cuda_attention_workspace_bytes(EMX_ATTN_SPLIT_GQA, nh, hd, n_keys, 0));
    EmxAttentionArgs a;
    memset(&a, 0, sizeof a);
    a.kv_dtype = EMX_KV_F32;  // zero is EMX_KV_AUTO (base/kv_type.h), which a kernel refuses
    a.q = dq.p;
    a.k_cache = dk.p;
    a.v_cache = dv.p;
    a.n_heads = a.n_kv_heads = nh;
    a.head_dim = hd;
    a.n_keys = n_keys;
    a.out = dout.p;
    a.scores = dscores.p;
    a.score_stride = n_keys;
    a.head_stats = dstats.p;
    a.workspace = aws.p;
    LAB_CHECK(emx_cuda_attention(EMX_ATTN_SPLIT_GQA, &a, L.stream));
    LAB_CHECK(cudaStreamSynchronize(L.stream));
    const std::vector<float> scores = dscores.get();
    EmxMetrics cpu;
    memset(&cpu, 0, sizeof cpu);
    std::vector<double> scratch(n_keys);
    if (emx_attention_metrics(scores.data(), 1, nh, n_keys, n_keys, EMX_ATTN_LAYER_LAST, scratch.data(), &cpu)) {
        fprintf(stderr, "lab attn_metrics: the CPU twin refused the shape\n");
        exit(1);
    }
    const std::vector<double> want = {cpu.attn_entropy_bits, cpu.attn_varentropy_heads_bits2,
                                      cpu.attn_varentropy_true_bits2, cpu.attn_agreement, cpu.attn_interaction_strength};
    LabBuf<EmxMetrics> dm(1);
    LabBuf<uint8_t> ws(emx_cuda_attn_metrics_workspace_bytes(1));
    auto got = [&] {
        const EmxMetrics m = dm.get()[0];
        return std::vector<double>{m.attn_entropy_bits, m.attn_varentropy_heads_bits2, m.attn_varentropy_true_bits2,
                                   m.attn_agreement, m.attn_interaction_strength};
    };
    char shape[64];
    snprintf(shape, sizeof shape, "%d heads x %d keys, one layer (--heads --keys)", nh, n_keys);
    // double sums on both sides in different orders; the head statistics of the attention
    // kernel are merged chunk statistics (another order again): ~1e-12 apart, 1e-6 for a GPU's exp
    lab_header(&L, shape, "each metric |gpu - cpu| <= 1e-6 + 1e-6 * |cpu|");
    const double bytes = (double)nh * n_keys * 4;  // the score rows, read once
    lab_version(&L, "from scores", bytes, [&] {
        return emx_cuda_attn_metrics(dscores.p, nullptr, 1, nh, n_keys, n_keys, nullptr, EMX_ATTN_LAYER_LAST, dm.p, ws.p, L.stream);
    }, [&] { return lab_compare(got(), want, 1e-6, 1e-6); });
    lab_version(&L, "head_stats (runtime)", bytes, [&] {
        return emx_cuda_attn_metrics(dscores.p, dstats.p, 1, nh, n_keys, n_keys, nullptr, EMX_ATTN_LAYER_LAST, dm.p, ws.p, L.stream);
    }, [&] { return lab_compare(got(), want, 1e-6, 1e-6); });
    return lab_finish(&L);
}
