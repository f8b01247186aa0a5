// tools/lab/attention.cu — decode attention of one position over an f32 KV cache
// (kernels/attention_naive.cu, kernels/attention.cu) against the CPU's emx_attention_head:
// naive (a block per head, a thread per key), plain (a warp per key, three passes), split
// (flash-decoding: blocks per key chunk, then a combine), split_gqa (a block per KV head and
// chunk: each key read once per GQA group). The runtime uses split_gqa. `make lab K=attention`.
// --kv f16: the cache in f16 (half the bytes; the naive version reads f32 only and is left out),
// against the CPU twin over the same keys and values rounded to f16.
#include "tools/lab/lab.h"

#include "kernels/attention.h"
#include "kernels/naive.h"

extern "C" {
#include "base/dtype.h"
#include "runtime/cpu/cpu_attention.h"
}

int main(int argc, char **argv) {
    Lab L;
    lab_init(&L, "attention", argc, argv, "--heads --kv-heads --head-dim --keys --kv",
             "out_h = softmax(q_h . k_t / sqrt(head_dim)) v over the cached keys t, every head h");
    // SmolLM2-135M's heads (9 query heads over 3 KV heads of 64), 512 cached keys
    const int n_heads = lab_int(&L, "--heads", 9, 1, 256), n_kv = lab_int(&L, "--kv-heads", 3, 1, 256);
    const int hd = lab_int(&L, "--head-dim", 64, 1, 512), n_keys = lab_int(&L, "--keys", 512, 1, 1 << 20);
    if (n_heads % n_kv) {
        fprintf(stderr, "lab attention: --heads %d is not a multiple of --kv-heads %d\n", n_heads, n_kv);
        exit(2);
    }
    const char *kv_name = lab_str(&L, "--kv", "f32");
    const bool f16 = !strcmp(kv_name, "f16");
    if (!f16 && strcmp(kv_name, "f32")) {
        fprintf(stderr, "lab attention: --kv '%s': f32 or f16\n", kv_name);
        exit(2);
    }
    const int kv_dim = n_kv * hd;
    std::vector<float> q = lab_random((size_t)n_heads * hd, 11), k = lab_random((size_t)n_keys * kv_dim, 12),
                       v = lab_random((size_t)n_keys * kv_dim, 13);
    // f16: the device cache holds the halves, the CPU twin reads the same values widened back
    std::vector<uint16_t> k16(f16 ? k.size() : 0), v16(f16 ? v.size() : 0);
    for (size_t i = 0; i < k16.size(); i++) {
        k16[i] = emx_f32_to_f16(k[i]);
        v16[i] = emx_f32_to_f16(v[i]);
        k[i] = emx_f16_to_f32(k16[i]);
        v[i] = emx_f16_to_f32(v16[i]);
    }
    std::vector<float> want((size_t)n_heads * hd), want_s((size_t)n_heads * n_keys), probs(n_keys);
    const float scale = 1.0f / sqrtf((float)hd);
    for (int h = 0; h < n_heads; h++) {
        const size_t off = (size_t)(h / (n_heads / n_kv)) * hd;
        emx_attention_head(&want[(size_t)h * hd], &q[(size_t)h * hd], &k[off], &v[off], kv_dim, n_keys, hd, scale,
                           &want_s[(size_t)h * n_keys], probs.data());
    }
    LabBuf<float> dq(q), dk(k), dv(v), dout(want.size()), dscores(want_s.size());
    LabBuf<uint16_t> dk16(k16), dv16(v16);
    size_t ws_bytes = 0;
    for (int kn = EMX_ATTN_PLAIN; kn <= EMX_ATTN_SPLIT_GQA; kn++)
        ws_bytes = std::max(ws_bytes, emx_cuda_attention_workspace_bytes(kn, n_heads, hd, n_keys, 0));
    LabBuf<uint8_t> ws(ws_bytes);

    char shape[128];
    snprintf(shape, sizeof shape, "%d heads over %d KV heads of %d, %d keys, %s cache (--heads --kv-heads --head-dim --keys --kv)",
             n_heads, n_kv, hd, n_keys, kv_name);
    // Scores: f32 dot products in another order than the CPU's (~1e-6 for these inputs); out adds
    // the f32 exp and normalisation (~1e-6 relative) — as tests/kernels/test_attention.cpp.
    lab_header(&L, shape, "out and scores: |gpu - cpu| <= 2e-5 + 1e-4 * |cpu|");
    // compulsory traffic: K and V once, q and out, the score rows written
    const double bytes = 2.0 * n_keys * kv_dim * (f16 ? 2 : 4) + 2.0 * n_heads * hd * 4 + (double)n_heads * n_keys * 4;
    auto check = [&] { return lab_both(lab_compare(dout.get(), want, 2e-5, 1e-4), lab_compare(dscores.get(), want_s, 2e-5, 1e-4)); };
    if (!f16)
        lab_version(&L, "naive (block/head)", bytes, [&] {
            return emx_cuda_attention_naive(dq.p, dk.p, dv.p, dout.p, dscores.p, n_heads, n_kv, hd, n_keys, L.stream);
        }, check);
    const char *names[] = {"plain (warp/key)", "split (flash-decode)", "split_gqa (runtime)"};
    for (int kn = EMX_ATTN_PLAIN; kn <= EMX_ATTN_SPLIT_GQA; kn++) {
        EmxAttentionArgs a;
        memset(&a, 0, sizeof a);
        a.q = dq.p;
        a.k_cache = f16 ? (const void *)dk16.p : dk.p;
        a.v_cache = f16 ? (const void *)dv16.p : dv.p;
        a.kv_dtype = f16 ? EMX_KV_F16 : EMX_KV_F32;
        a.n_heads = n_heads;
        a.n_kv_heads = n_kv;
        a.head_dim = hd;
        a.n_keys = n_keys;
        a.out = dout.p;
        a.scores = dscores.p;
        a.score_stride = n_keys;
        a.workspace = ws.p;
        LAB_CHECK(cudaMemset(dout.p, 0, want.size() * 4));  // a version must write every output itself
        lab_version(&L, names[kn], bytes, [&] { return emx_cuda_attention(kn, &a, L.stream); }, check);
    }
    return lab_finish(&L);
}
