// tools/lab/sampling.cu — choosing the next token on the device (kernels/sampling/sampling.cu) against the
// CPU's emx_sample: the combined sampler (top-k -> top-p -> min-p -> temperature, then one
// inverse-CDF draw with u = emx_uniform_f64(seed, step, 0)), over several steps (one u each), in
// three versions: naive (one block, one pass over the logits per kept token,
// kernels/sampling/sampling_naive.cu), one block of 1024 threads (a radix select finds the kept
// set in a few passes), and the runtime's
// (from n = 8192: the passes over the vocabulary on one block per 2048 logits, the tail in one
// block; try --n 151936 for Qwen3; with --top-k 0 the kept set is found by a select on mass,
// sampling_wide.cuh). The result is a token id: it must be the CPU's, exactly (the two
// can differ only when a cumulative sum lands within rounding of u, which these inputs avoid;
// sampling.h). `make lab K=sampling`.
#include "tools/lab/lab.h"

#include "kernels/naive.h"
#include "kernels/sampling/sampling.h"

extern "C" {
#include "sampler/philox.h"
#include "sampler/sample.h"
}

int main(int argc, char **argv) {
    Lab L;
    lab_init(&L, "sampling", argc, argv, "--n --steps --top-k",
             "token = emx_sample(logits, top-k 40, top-p 0.95, min-p 0.05, T 0.8, u(seed, step))");
    const int n = lab_int(&L, "--n", 49152, 1, 1 << 24), steps = lab_int(&L, "--steps", 4, 1, 1000);
    EmxSamplerParams sp = {0.8f, lab_int(&L, "--top-k", 40, 0, 1 << 24), 0.95f, 0.05f, 0};
    const uint64_t seed = 1234;
    std::vector<float> l = lab_random(n, 81, -4.0f, 4.0f), l2 = lab_random(n, 82, -4.0f, 4.0f);
    for (int i = 0; i < n; i++) l[i] += l2[i];
    std::vector<EmxCandidate> work(n);
    std::vector<float> want(steps);
    for (int s = 0; s < steps; s++) want[s] = (float)emx_sample(l.data(), n, &sp, emx_uniform_f64(seed, s, 0), work.data());
    LabBuf<float> dl(l);
    LabBuf<int> dtok(steps);
    LabBuf<uint8_t> ws(emx_cuda_sample_workspace_bytes(n));
    LabBuf<EmxCandidate> kept(n);
    char shape[96];
    snprintf(shape, sizeof shape, "n %d logits, %d steps (--n --steps --top-k)", n, steps);
    lab_header(&L, shape, "the token id of every step equals the CPU's");
    auto check = [&] {
        const std::vector<int> got = dtok.get();
        return lab_compare(std::vector<float>(got.begin(), got.end()), want, 0, 0);
    };
    // one run = all steps; bytes: the logits read once per step (the naive version reads them
    // once per kept token, the others 3-5 times)
    lab_version(&L, "naive (pass per token)", 4.0 * n * steps, [&] {
        for (int s = 0; s < steps; s++) {
            const cudaError_t e = emx_cuda_sample_naive(dl.p, n, &sp, emx_uniform_f64(seed, s, 0), kept.p, dtok.p + s, L.stream);
            if (e != cudaSuccess) return e;
        }
        return cudaSuccess;
    }, check);
    lab_version(&L, "one block (radix select)", 4.0 * n * steps, [&] {
        for (int s = 0; s < steps; s++) {
            const cudaError_t e = emx_cuda_sample_one_block(dl.p, n, &sp, seed, s, nullptr, 0, dtok.p + s, ws.p, L.stream);
            if (e != cudaSuccess) return e;
        }
        return cudaSuccess;
    }, check);
    char name[80];
    snprintf(name, sizeof name, sp.top_k > 0 ? "%d blocks + 1 (runtime)" : "%d blocks, select on mass (runtime)",
             emx_cuda_sample_grid(n));
    lab_version(&L, name, 4.0 * n * steps, [&] {
        for (int s = 0; s < steps; s++) {
            const cudaError_t e = emx_cuda_sample(dl.p, n, &sp, seed, s, nullptr, 0, dtok.p + s, ws.p, L.stream, 0);
            if (e != cudaSuccess) return e;
        }
        return cudaSuccess;
    }, check);
    return lab_finish(&L);
}
