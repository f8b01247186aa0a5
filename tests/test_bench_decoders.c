// test_bench_decoders.c — `bench sampler` and `bench agents` (tools/bench): their rows on the CPU
// and on an emulated GPU ($EMX_GPU_BENCH: tools/bench linked with the CUDA backend under
// tests/cuda_emu), the persistent kernel's sampler runs, the pool's and the critic's rows, and the
// note where a build cannot run the pool on a GPU. No test here asserts a speed.
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "bench_report_util.h"
#include "run_util.h"
#include "test_util.h"

// bench sampler on the CPU: a row for each of greedy, entropix and combined with the host time
// it spends choosing, each one's overhead over greedy, and no queued-ahead line (a GPU's).
Test(bench, cpu_sampler_rows, .timeout = 300) {
    char bin[1024], mp[1024];
    cpu_bench_and_model(bin, mp, "stories260K.q8.bin");
    RunResult r = run_prog(bin, (const char *[]){"sampler", mp, "--device", "cpu", "-t", "1", "-n", "3", "--runs", "1",
                                                 "--prompt", "Once", NULL});
    cr_assert_eq(r.code, 0, "%s", r.err);
    double tok_s, ms;
    for (int k = 0; k < 3; k++) {
        const char *name = k == 0 ? "\ngreedy " : k == 1 ? "\nentropix " : "\ncombined ";
        const char *row = strstr(r.out, name);
        cr_assert(row && sscanf(row + strlen(name), "%lf %lf", &tok_s, &ms) == 2, "%s: %s", name + 1, r.out);
        cr_expect(tok_s > 0 && ms >= 0, "%s", row);
    }
    cr_expect(strstr(r.out, "\noverhead: decode ") && strstr(r.out, "\ncombined: decode "), "%s", r.out);
    cr_expect(strstr(r.out, "% of a greedy decode step") != NULL, "%s", r.out);
    cr_expect(strstr(r.out, "queued ahead") == NULL, "%s", r.out);
    cr_expect(strstr(r.err, "run 1 combined decode ") != NULL, "%s", r.err);
    run_free(&r);
}

// sampler and agents on the emulated GPU: they run there and say so, the pool's rows included;
// the sampler through the persistent kernel too.
Test(bench, gpu_sampler_and_agents, .timeout = 300) {
    const char *bin = gpu_bench();
    char mp[1024];
    test_build_path(mp, sizeof mp, "models/stories260K.q8.bin");
    RunResult r = run_prog(bin, (const char *[]){"sampler", mp, "--device", "cuda:0", "-n", "2", "--runs", "1",
                                                 "--prompt", "Once", NULL});
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(!strncmp(r.out, "device: cuda:0 (", 16), "%s", r.out);
    cr_expect(strstr(r.out, "\ngreedy ") && strstr(r.out, "\nentropix ") && strstr(r.out, "\ncombined ") &&
                  strstr(r.out, "\noverhead: ") && strstr(r.out, "\ncombined: decode "),
              "%s", r.out);
    // greedy with its steps in turn beside greedy queued ahead (a GPU's third sampler)
    cr_expect(strstr(r.out, "\nqueued ahead: greedy ") && strstr(r.out, ", with its steps in turn "), "%s", r.out);
    cr_expect(strstr(r.out, "\ndecode: ") == NULL, "%s", r.out);
    run_free(&r);
    // --persistent: both samplers through the persistent kernel, which the report names; a model it
    // does not take (stories260K: a hidden width of 172) is an error that says why
    char lp[1024];
    test_build_path(lp, sizeof lp, "models/llama3-tiny.q8.bin");
    r = run_prog(bin, (const char *[]){"sampler", lp, "--device", "cuda:0", "-n", "2", "--runs", "1", "--prompt", "Once",
                                       "--persistent", NULL});
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "\ndecode: persistent kernel, ") && strstr(r.out, "\nentropix ") &&
                  strstr(r.out, "\noverhead: "),
              "%s", r.out);
    run_free(&r);
    r = run_prog(bin, (const char *[]){"sampler", mp, "--device", "cuda:0", "-n", "1", "--runs", "1", "--prompt", "Once",
                                       "--persistent", NULL});
    cr_assert_eq(r.code, 1, "%s", r.err);
    cr_expect(strstr(r.err, "bench: --persistent: graph (the persistent kernel does not take it: ") != NULL, "%s", r.err);
    run_free(&r);
    r = run_prog(bin, (const char *[]){"agents", mp, "--device", "cuda:0", "-n", "2", "--runs", "1", "--agents", "2",
                                       "--lookahead", "2", "--prompt", "Once", NULL});
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(!strncmp(r.out, "device: cuda:0 (", 16), "%s", r.out);
    cr_expect(strstr(r.out, "single stream (greedy)") != NULL, "%s", r.out);
    // The pool on the same GPU (--devices defaults to --device): the CUDA build has its GPU path.
    cr_expect(strstr(r.out, "\npool: cuda:0, 1 worker(s)\n") && strstr(r.out, "\n2 agents, lookahead 1 ") &&
                  strstr(r.out, "\n2 agents, lookahead 2 "),
              "%s", r.out);
    run_free(&r);
}

// A build without the CUDA backend asked for the pool on a GPU: the single stream runs, a note
// says why the pool's rows are missing, and the run succeeds.
Test(bench, agents_pool_on_gpu_in_cpu_build_is_a_note, .timeout = 300) {
    char bin[1024], mp[1024];
    cpu_bench_and_model(bin, mp, "stories260K.q8.bin");
    RunResult r = run_prog(bin, (const char *[]){"agents", mp, "--device", "cpu", "--devices", "cuda:0", "-t", "1", "-n",
                                                 "2", "--runs", "1", "--agents", "2", NULL});
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(!strncmp(r.out, "device: cpu (", 13), "%s", r.out);
    cr_expect(strstr(r.out, "\nnote: the agent pool cannot run on cuda:0 in this build") != NULL, "%s", r.out);
    cr_expect(strstr(r.out, "single stream (greedy)") != NULL && strstr(r.out, "agents, lookahead") == NULL, "%s",
              r.out);
    run_free(&r);
    r = run_prog(bin, (const char *[]){"agents", mp, "--device", "cpu", "-t", "1", "-n", "2", "--runs", "1", "--agents",
                                       "2", "--lookahead", "2", NULL});
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "\npool: cpu, 1 worker(s)\n") && strstr(r.out, "\n2 agents, lookahead 2 "), "%s", r.out);
    cr_expect(strstr(r.out, "critic") == NULL, "no critic row without --check-every: %s", r.out);
    run_free(&r);
}

// --check-every K adds the pool with the model as its own critic: 6 committed tokens judged every
// 2 are 3 judgments, whose share of the decode time is printed; where the pool cannot run, no critic.
Test(bench, agents_critic_row, .timeout = 300) {
    char bin[1024], mp[1024];
    cpu_bench_and_model(bin, mp, "stories260K.q8.bin");
    RunResult r = run_prog(bin, (const char *[]){"agents", mp, "--device", "cpu", "-t", "1", "-n", "6", "--runs", "1",
                                                 "--agents", "2", "--check-every", "2", NULL});
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "\n2 agents, lookahead 1, critic every 2 ") != NULL, "%s", r.out);
    const char *c = strstr(r.out, "\ncritic: ");
    double share = -1;
    int judged = -1;
    cr_assert(c && sscanf(c, "\ncritic: %d judgments a run, %lf%% of the pool's decode time", &judged, &share) == 2,
              "%s", r.out);
    cr_expect_eq(judged, 3, "%s", r.out);
    cr_expect(share > 0 && share < 100, "%s", r.out);
    run_free(&r);
    r = run_prog(bin, (const char *[]){"agents", mp, "--device", "cpu", "--devices", "cuda:0", "-t", "1", "-n", "2",
                                       "--runs", "1", "--agents", "2", "--check-every", "2", NULL});
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "critic") == NULL && strstr(r.out, "\nnote: the agent pool cannot run") != NULL, "%s",
              r.out);
    run_free(&r);
}
