// test_logits_metrics.cpp — kernels/logits_metrics.cu against emx_logits_metrics and
// emx_sample_argmax on random and adversarial logit vectors.
#include <math.h>

#include <vector>

#include "kb_util.h"
#include "kernels/logits_metrics.h"

extern "C" {
#include "sampler/metrics.h"
#include "sampler/sample.h"
}

namespace {

// Both sides compute the same double sums of exp(l - m) with exact t = l - m; only the order of
// the additions differs (chunks of 2048 merged by a tree vs. chunks of 1024 merged in order),
// so the results agree to a few ulp of the sums: 1e-11 relative (plus 1e-11 absolute, for the
// cancellation in H = ln Z - E[t] of a near one-hot row, whose H is ~1e-13).
void check(const std::vector<float> &logits, const char *what) {
    const int n = (int)logits.size();
    EmxMetrics ref = {};
    const int ref_valid = emx_logits_metrics(logits.data(), n, &ref);
    const int ref_arg = emx_sample_argmax(logits.data(), n);

    DevBuf<float> d_l(n);
    d_l.upload(logits);
    DevBuf<EmxMetrics> d_m(1);
    DevBuf<int> d_arg(1), d_valid(1);
    DevBuf<uint8_t> ws(emx_cuda_logits_metrics_workspace_bytes(n));
    CUDA_OK(emx_cuda_logits_metrics(d_l.p, n, d_m.p, d_arg.p, d_valid.p, ws.p, 0, 0));
    CUDA_OK(cudaDeviceSynchronize());
    const EmxMetrics m = d_m.get();
    cr_assert_eq(d_arg.get(), ref_arg, "%s (n %d): argmax %d, cpu %d", what, n, d_arg.get(), ref_arg);
    cr_assert_eq(d_valid.get(), ref_valid, "%s (n %d): n_valid %d, cpu %d", what, n, d_valid.get(), ref_valid);
    cr_assert(close_to(m.logits_entropy_bits, ref.logits_entropy_bits, 1e-11, 1e-11),
              "%s (n %d): H %.17g, cpu %.17g", what, n, m.logits_entropy_bits, ref.logits_entropy_bits);
    cr_assert(close_to(m.logits_varentropy_bits2, ref.logits_varentropy_bits2, 1e-10, 1e-10),
              "%s (n %d): V %.17g, cpu %.17g", what, n, m.logits_varentropy_bits2, ref.logits_varentropy_bits2);
    cr_assert(close_to(m.logits_lse_nats, ref.logits_lse_nats, 1e-11, 1e-12),
              "%s (n %d): lse %.17g, cpu %.17g", what, n, m.logits_lse_nats, ref.logits_lse_nats);
}

std::vector<float> random_logits(Rng &rng, int n, float scale) {
    std::vector<float> l(n);
    for (float &x : l) x = rng.normal() * scale;
    return l;
}

}  // namespace

Test(logits_metrics, random_sizes) {
    Rng rng(7);
    const int sizes[] = {1, 31, 1000, 2049, 4099, 49157, 151936};  // ..., SmolLM2-ish, Qwen3's vocabulary
    for (int n : sizes)
        for (float scale : {0.5f, 3.0f, 12.0f}) check(random_logits(rng, n, scale), "random");
}

Test(logits_metrics, minus_inf_and_nan) {
    Rng rng(8);
    std::vector<float> l = random_logits(rng, 5003, 4.0f);
    for (int i = 0; i < 5003; i += 3) l[i] = -INFINITY;
    l[17] = NAN;
    l[4000] = NAN;
    check(l, "-inf and NaN sprinkled");
    std::vector<float> all(3000, -INFINITY);
    check(all, "all -inf");
    all[2999] = NAN;
    check(all, "all -inf and a NaN");
}

Test(logits_metrics, one_hot_and_uniform) {
    std::vector<float> l(4100, -INFINITY);
    l[2500] = 1.5f;
    check(l, "one-hot among -inf");
    std::vector<float> u(4100, 0.25f);
    check(u, "uniform (argmax: the lowest id)");
    std::vector<float> peaked(4100, -80.0f);
    peaked[3] = 40.0f;
    check(peaked, "near one-hot");
}

Test(logits_metrics, plus_inf_and_huge) {
    Rng rng(9);
    std::vector<float> l = random_logits(rng, 3001, 2.0f);
    l[2222] = INFINITY;
    l[100] = INFINITY;
    check(l, "two +inf (argmax: the lower id)");
    std::vector<float> h = random_logits(rng, 3001, 1e30f);
    h[5] = 3.0e38f;
    h[2900] = -3.0e38f;
    check(h, "magnitudes ~1e30");
    std::vector<float> t(2050, 1e6f);
    t[2049] = 1e6f + 0.0625f;  // the max in the last, one-element chunk
    check(t, "large equal logits");
}

// emx_cuda_logit_pair against emx_logit_pair: the two logits and the max bitwise (a max does not
// depend on its order), the sum within the rounding of n double additions made in two orders
// (1e-11 relative: a sequential sum of 151,936 terms against a tree).
namespace {

void check_pair(const std::vector<float> &logits, int id_a, int id_b, const char *what) {
    const int n = (int)logits.size();
    EmxLogitPair ref;
    cr_assert_eq(emx_logit_pair(logits.data(), n, id_a, id_b, &ref), 0, "%s: cpu refused", what);
    DevBuf<float> d_l(n);
    d_l.upload(logits);
    DevBuf<EmxLogitPair> d_p(1);
    CUDA_OK(emx_cuda_logit_pair(d_l.p, n, id_a, id_b, d_p.p, 0, 0));
    CUDA_OK(cudaDeviceSynchronize());
    const EmxLogitPair p = d_p.get();
    cr_assert(memcmp(&p.logit_a, &ref.logit_a, sizeof(float)) == 0 && memcmp(&p.logit_b, &ref.logit_b, sizeof(float)) == 0,
              "%s (n %d): logits %g %g, cpu %g %g", what, n, p.logit_a, p.logit_b, ref.logit_a, ref.logit_b);
    cr_assert(memcmp(&p.max, &ref.max, sizeof(float)) == 0, "%s (n %d): max %.9g, cpu %.9g", what, n, p.max, ref.max);
    cr_assert(close_to(p.sum, ref.sum, 0.0, 1e-11), "%s (n %d): sum %.17g, cpu %.17g", what, n, p.sum, ref.sum);
}

}  // namespace

Test(logits_metrics, logit_pair) {
    Rng rng(10);
    for (int n : {1, 1023, 1025, 49157, 151936})
        for (float scale : {0.5f, 12.0f}) {
            std::vector<float> l = random_logits(rng, n, scale);
            check_pair(l, n - 1, n / 2, "random");
        }
    std::vector<float> l = random_logits(rng, 5003, 4.0f);
    for (int i = 0; i < 5003; i += 3) l[i] = -INFINITY;
    l[17] = NAN, l[4000] = INFINITY, l[4001] = -INFINITY;
    check_pair(l, 17, 4000, "NaN and +inf candidates: no mass, left out of the max");
    check_pair(l, 4001, 2, "a -inf candidate");
    std::vector<float> none(2000, NAN);
    none[7] = -INFINITY;
    check_pair(none, 7, 8, "nothing finite: max -inf, sum 0");
    std::vector<float> h = random_logits(rng, 3001, 1e30f);
    h[5] = 3.0e38f;
    check_pair(h, 5, 6, "magnitudes ~1e30");
}

Test(logits_metrics, logit_pair_refuses) {
    DevBuf<float> d_l(8);
    DevBuf<EmxLogitPair> d_p(1);
    cr_assert_eq(emx_cuda_logit_pair(d_l.p, 8, 8, 0, d_p.p, 0, 0), cudaErrorInvalidValue);
    cr_assert_eq(emx_cuda_logit_pair(d_l.p, 8, 0, -1, d_p.p, 0, 0), cudaErrorInvalidValue);
    cr_assert_eq(emx_cuda_logit_pair(d_l.p, 0, 0, 0, d_p.p, 0, 0), cudaErrorInvalidValue);
    cr_assert_eq(emx_cuda_logit_pair(d_l.p, 8, 0, 1, nullptr, 0, 0), cudaErrorInvalidValue);
}
