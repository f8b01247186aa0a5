// tools/lab/rope.cu — rotary position embedding of q and k, fused with Qwen3's per-head q/k
// RMSNorm before it and the KV-cache write after it (kernels/rope.cu), against the CPU's
// emx_rmsnorm + emx_rope_angles + emx_rope in forward_cpu.c's order. One kernel, in two
// configurations: without and with the q/k norm. `make lab K=rope`.
#include "tools/lab/lab.h"

#include "kernels/rope.h"

extern "C" {
#include "base/model_format.h"
#include "runtime/cpu/cpu_ops.h"
}

int main(int argc, char **argv) {
    Lab L;
    lab_init(&L, "rope", argc, argv, "--batch --heads --kv-heads --head-dim",
             "q_h, k_h = rope(norm(q_h)), rope(norm(k_h)) at each row's position; k, v -> the caches");
    // Qwen3-0.6B's heads (16 over 8 KV heads of 128), half-split pairs, theta 1e6; 16 prompt rows
    const int batch = lab_int(&L, "--batch", 16, 1, 65535), nh = lab_int(&L, "--heads", 16, 1, 256);
    const int nkv = lab_int(&L, "--kv-heads", 8, 1, 256), hd = lab_int(&L, "--head-dim", 128, 2, 512);
    if (hd % 2) {
        fprintf(stderr, "lab rope: --head-dim %d: must be even\n", hd);
        exit(2);
    }
    const int half = hd / 2, q_dim = nh * hd, kv_dim = nkv * hd;
    const float eps = 1e-6f;
    std::vector<float> q = lab_random((size_t)batch * q_dim, 61, -3.0f, 3.0f);
    std::vector<float> k = lab_random((size_t)batch * kv_dim, 62, -3.0f, 3.0f);
    std::vector<float> v = lab_random((size_t)batch * kv_dim, 63, -3.0f, 3.0f);
    std::vector<float> qn = lab_random(hd, 64, 0.5f, 2.0f), kn = lab_random(hd, 65, 0.5f, 2.0f);
    std::vector<double> inv_freq(half);
    emx_rope_inv_freq(inv_freq.data(), hd, 1000000.0, nullptr);
    std::vector<int> pos(batch);
    for (int b = 0; b < batch; b++) pos[b] = 100 + 37 * b;  // rows at scattered positions
    LabBuf<float> dq(q), dk(k), dv(v), dqn(qn), dkn(kn);
    LabBuf<int> dpos(pos);
    LabBuf<double> dinv(inv_freq);
    const int ctx = pos[batch - 1] + 1;
    LabBuf<float> kc((size_t)ctx * kv_dim), vc((size_t)ctx * kv_dim);

    char shape[128];
    snprintf(shape, sizeof shape, "%d rows, %d heads over %d KV heads of %d (--batch --heads --kv-heads --head-dim)",
             batch, nh, nkv, hd);
    // angles in double on both sides; the rotations and norms in f32: ~1e-6 of the row's largest
    // value (tests/kernels/test_rope.cpp allows 1e-5 of it; here a plain relative bound on
    // values of order 1 after the norm or 3 before)
    lab_header(&L, shape, "q and the cached k: |gpu - cpu| <= 3e-5 + 1e-5 * |cpu|; the cached v exactly");
    const double bytes = 2.0 * batch * q_dim * 4 + 2.0 * batch * kv_dim * 4 * 2 + (double)batch * 4;
    for (int norm = 0; norm <= 1; norm++) {
        std::vector<float> wq = q, wk = k, cs(half), sn(half);
        for (int b = 0; b < batch; b++) {
            float *qb = &wq[(size_t)b * q_dim], *kb = &wk[(size_t)b * kv_dim];
            if (norm) {
                for (int h = 0; h < nh; h++) emx_rmsnorm(qb + h * hd, qb + h * hd, qn.data(), hd, eps);
                for (int h = 0; h < nkv; h++) emx_rmsnorm(kb + h * hd, kb + h * hd, kn.data(), hd, eps);
            }
            emx_rope_angles(cs.data(), sn.data(), inv_freq.data(), half, pos[b]);
            emx_rope(qb, nh, hd, EMX_ROPE_HALF, cs.data(), sn.data());
            emx_rope(kb, nkv, hd, EMX_ROPE_HALF, cs.data(), sn.data());
        }
        EmxRopeArgs a;
        memset(&a, 0, sizeof a);
        a.q = dq.p;
        a.k = dk.p;
        a.v = dv.p;
        a.k_cache = kc.p;
        a.v_cache = vc.p;
        a.kv_dtype = EMX_KV_F32;
        a.pos = dpos.p;
        a.inv_freq = dinv.p;
        a.q_norm = norm ? dqn.p : nullptr;
        a.k_norm = norm ? dkn.p : nullptr;
        a.eps = eps;
        a.batch = batch;
        a.n_heads = nh;
        a.n_kv_heads = nkv;
        a.head_dim = hd;
        a.style = EMX_ROPE_HALF;
        // q is rotated in place: the check reads it after the first launch, then the timed
        // launches keep rotating it (only their time counts); reloaded for the next configuration
        dq.upload(q);
        lab_version(&L, norm ? "fused qk-norm+rope+kv" : "rope+kv (runtime)", bytes,
                    [&] { return emx_cuda_rope_kv(&a, L.stream); }, [&] {
                        const std::vector<float> gk = kc.get(), gv = vc.get();
                        std::vector<float> ck((size_t)batch * kv_dim), cv((size_t)batch * kv_dim);
                        for (int b = 0; b < batch; b++) {
                            memcpy(&ck[(size_t)b * kv_dim], &gk[(size_t)pos[b] * kv_dim], (size_t)kv_dim * 4);
                            memcpy(&cv[(size_t)b * kv_dim], &gv[(size_t)pos[b] * kv_dim], (size_t)kv_dim * 4);
                        }
                        return lab_both(lab_both(lab_compare(dq.get(), wq, 3e-5, 1e-5), lab_compare(ck, wk, 3e-5, 1e-5)),
                                        lab_compare(cv, v, 0, 0));
                    });
    }
    return lab_finish(&L);
}
