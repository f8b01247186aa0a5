// test_attention_branches.cpp — kernels/attention.cu's branch rows (attention.h): the lookahead
// round's branches, all at the same position, in one launch. Each row must be bitwise the single
// call over its own branch's tail (that call is held to the contiguous cache and the CPU twin in
// test_attention.cpp), under both block orders, with the key count and the tail's start given on
// the host or read from device memory (a graph replay), and with more branches than keys.
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <vector>

#include "kernels/attention.h"
#include "attention_test_util.h"
#include "kb_util.h"

namespace {

// The shared shape (attention_test_util.h) in chunks of 8 keys (so the rows need several, and
// the combine).
const int kKpb = 8;

// One call of `a` (pointers and sizes set by the caller) into fresh NaN outputs of `rows` rows.
std::vector<float> run(int kernel, EmxAttentionArgs a, int rows, int ws_keys) {
    DevBuf<float> d_out((size_t)rows * kQDim);
    d_out.upload(std::vector<float>((size_t)rows * kQDim, NAN));
    DevBuf<uint8_t> d_ws(emx_cuda_attention_workspace_bytes_rows(kernel, kNh, kHd, ws_keys, kKpb, rows));
    a.out = d_out.p;
    a.workspace = d_ws.p;
    CUDA_OK(emx_cuda_attention(kernel, &a, 0));
    CUDA_OK(cudaDeviceSynchronize());
    return d_out.download();
}

// B branches of `steps` tail rows after a prefix of `prefix` cache rows (the cache's rows from
// the prefix on NaN: never to be read); the tails interleaved as the pool keeps them, row j of
// branch b at tail + (j·B + b)·kv_dim, the rows after `steps` NaN too.
void check_branches(int kernel, int kv_dtype, int prefix, int steps, int n_branches) {
    const int n_keys = prefix + steps, tail_rows = steps + 2, ctx = prefix + tail_rows;
    Rng rng(7000 + 100 * kernel + 10 * kv_dtype + prefix);
    std::vector<float> q((size_t)n_branches * kQDim), kc((size_t)ctx * kKvDim, NAN), vc(kc.size(), NAN);
    std::vector<float> kt((size_t)tail_rows * n_branches * kKvDim, NAN), vt(kt.size(), NAN);
    for (float &x : q) x = rng.normal() * 1.5f;
    for (size_t i = 0; i < (size_t)prefix * kKvDim; i++) kc[i] = rng.normal(), vc[i] = rng.normal();
    for (size_t i = 0; i < (size_t)steps * n_branches * kKvDim; i++) kt[i] = rng.normal(), vt[i] = rng.normal();
    const std::vector<uint8_t> kcb = cache_bytes(kc, kv_dtype), vcb = cache_bytes(vc, kv_dtype);
    const std::vector<uint8_t> ktb = cache_bytes(kt, kv_dtype), vtb = cache_bytes(vt, kv_dtype);
    const size_t row_bytes = ktb.size() / kt.size() * kKvDim;
    DevBuf<float> d_q(q);
    DevBuf<uint8_t> d_kc(kcb), d_vc(vcb), d_kt(ktb), d_vt(vtb);
    DevBuf<int> d_n(1), d_ts(1);
    d_n.upload(&n_keys, 1);
    d_ts.upload(&prefix, 1);

    EmxAttentionArgs base = base_args(nullptr, d_kc.p, d_vc.p, kv_dtype, n_keys, kKpb);
    base.tail_start = prefix;
    base.tail_row_stride = n_branches * kKvDim;

    // each branch alone: its query, its tail
    std::vector<float> want((size_t)n_branches * kQDim);
    for (int b = 0; b < n_branches; b++) {
        EmxAttentionArgs a = base;
        a.q = d_q.p + (size_t)b * kQDim;
        a.tail_k = d_kt.p + b * row_bytes;
        a.tail_v = d_vt.p + b * row_bytes;
        const std::vector<float> one = run(kernel, a, 1, n_keys);
        for (float x : one) cr_assert(!isnan(x), "kernel %d kv %d branch %d alone: NaN output", kernel, kv_dtype, b);
        memcpy(&want[(size_t)b * kQDim], one.data(), kQDim * sizeof(float));
    }
    // all of them in one call; from_device: the key count and the tail's start read from device
    // memory, the grid sized for 11 keys more and the host's tail_start wrong, as in a replay
    for (int from_device = 0; from_device <= 1; from_device++) {
        EmxAttentionArgs a = base;
        a.q = d_q.p;
        a.tail_k = d_kt.p;
        a.tail_v = d_vt.p;
        a.n_rows = n_branches;
        a.tail_branch_stride = kKvDim;
        if (from_device) {
            a.n_keys = n_keys + 11;
            a.n_keys_dev = d_n.p;
            a.tail_start = prefix + 3;
            a.tail_start_dev = d_ts.p;
        }
        const auto both = run_two_schedules([&] { return run(kernel, a, n_branches, a.n_keys); });
        cr_assert(same_bytes(both.first, both.second),
                  "kernel %d kv %d prefix %d: the branch rows depend on the block order", kernel, kv_dtype, prefix);
        for (int b = 0; b < n_branches; b++)
            cr_assert(!memcmp(&both.first[(size_t)b * kQDim], &want[(size_t)b * kQDim], kQDim * sizeof(float)),
                      "kernel %d kv %d prefix %d steps %d device %d: branch %d differs from its call alone", kernel,
                      kv_dtype, prefix, steps, from_device, b);
    }
}

void check_kernel(int kernel) {
    for (int kv_dtype : {EMX_KV_F32, EMX_KV_F16}) {
        check_branches(kernel, kv_dtype, 21, 3, 5);  // 24 keys, 3 chunks: the prefix's and the tail's
        check_branches(kernel, kv_dtype, 1, 1, 5);   // 2 keys, 5 branches: more rows than keys
    }
}

}  // namespace

Test(attention_branches, plain) { check_kernel(EMX_ATTN_PLAIN); }
Test(attention_branches, split) { check_kernel(EMX_ATTN_SPLIT); }
Test(attention_branches, split_gqa) { check_kernel(EMX_ATTN_SPLIT_GQA); }

// Branch rows need a tail, and a stride of at least a KV row.
Test(attention_branches, rejects_bad_strides) {
    DevBuf<float> d(kQDim * 8);
    for (int c = 0; c < 3; c++) {
        EmxAttentionArgs a = {};
        a.kv_dtype = EMX_KV_F32;  // zero is EMX_KV_AUTO (base/kv_type.h), which a kernel refuses
        a.q = a.out = d.p;
        a.k_cache = a.v_cache = d.p;
        a.n_heads = kNh;
        a.n_kv_heads = kNkv;
        a.head_dim = kHd;
        a.n_keys = 4;
        a.n_rows = 2;
        a.workspace = d.p;
        a.tail_k = a.tail_v = d.p;
        a.tail_row_stride = kKvDim;
        const char *what = "";
        switch (c) {
            case 0: what = "tail_branch_stride without a tail"; a.tail_k = a.tail_v = nullptr; a.tail_branch_stride = kKvDim; break;
            case 1: what = "tail_branch_stride < kv_dim"; a.tail_branch_stride = kKvDim - 1; break;
            case 2: what = "tail_branch_stride < 0"; a.tail_branch_stride = -kKvDim; break;
        }
        cr_assert_eq(emx_cuda_attention(EMX_ATTN_SPLIT_GQA, &a, 0), cudaErrorInvalidValue, "%s: accepted", what);
    }
}
