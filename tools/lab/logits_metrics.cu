// tools/lab/logits_metrics.cu — entropy, varentropy and log-sum-exp of the logits
// (kernels/logits_metrics.cu, kernels/logits_metrics_naive.cu) against the CPU's
// emx_logits_metrics: naive (one block, two passes), fast (one read spread over n/2048 blocks,
// then a merge; also the argmax, checked against emx_sample_argmax). `make lab K=logits_metrics`.
#include "tools/lab/lab.h"

#include "kernels/logits_metrics.h"
#include "kernels/naive.h"

extern "C" {
#include "sampler/metrics.h"
#include "sampler/sample.h"
}

int main(int argc, char **argv) {
    Lab L;
    lab_init(&L, "logits_metrics", argc, argv, "--n",
             "H = -sum p log2 p, V = sum p (log2 p + H)^2, lse of softmax(logits)");
    const int n = lab_int(&L, "--n", 49152, 1, 1 << 24);
    // logits of a peaked distribution: normal-ish values at scale 3 (a sum of uniforms)
    std::vector<float> l = lab_random(n, 7, -3.0f, 3.0f), l2 = lab_random(n, 8, -3.0f, 3.0f);
    for (int i = 0; i < n; i++) l[i] += l2[i];
    EmxMetrics cpu;
    memset(&cpu, 0, sizeof cpu);
    emx_logits_metrics(l.data(), n, &cpu);
    const std::vector<double> want = {cpu.logits_entropy_bits, cpu.logits_varentropy_bits2, cpu.logits_lse_nats,
                                      (double)emx_sample_argmax(l.data(), n)};
    LabBuf<float> dl(l);
    LabBuf<EmxMetrics> dm(1);
    LabBuf<int> darg(1);
    LabBuf<uint8_t> ws(emx_cuda_logits_metrics_workspace_bytes(n));

    char shape[64];
    snprintf(shape, sizeof shape, "n %d logits (--n)", n);
    // Both sides sum in double, in different orders and forms (two passes vs the combinable
    // statistic), so they agree to ~1e-12; 1e-6 leaves room for a GPU's double exp/log.
    lab_header(&L, shape, "|gpu - cpu| <= 1e-6 + 1e-6 * |cpu| for H, V, lse; the argmax (fast) exactly");
    auto got = [&](bool with_argmax) {
        const EmxMetrics m = dm.get()[0];
        std::vector<double> g = {m.logits_entropy_bits, m.logits_varentropy_bits2, m.logits_lse_nats, want[3]};
        if (with_argmax) g[3] = darg.get()[0];
        return g;
    };
    const double bytes = 4.0 * n;
    lab_version(&L, "naive (1 block)", bytes, [&] { return emx_cuda_logits_metrics_naive(dl.p, n, dm.p, L.stream); },
                [&] { return lab_compare(got(false), want, 1e-6, 1e-6); });
    lab_version(&L, "fast (chunks+merge)", bytes,
                [&] { return emx_cuda_logits_metrics(dl.p, n, dm.p, darg.p, nullptr, ws.p, L.stream, 0); },
                [&] { return lab_compare(got(true), want, 1e-6, 1e-6); });
    return lab_finish(&L);
}
