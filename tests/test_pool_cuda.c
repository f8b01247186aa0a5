// test_pool_cuda.c — the agent pool on GPUs (issue #7): `--devices cuda:0,cuda:1` puts one
// worker on each GPU, the records and committed KV rows travel through NCCL, the critic runs on
// rank 0's GPU. The reference is the CPU pool (--devices cpu, 1 and 2 workers) with the same
// seed: the same stdout and the same log line for line (after the header, which names the
// devices), with critic rollbacks happening, at lookahead 1 and 4. Then the device-list errors.
//
// The GPU binary is $EMX_GPU_RUN (`make test` sets it to build/emu/run: ./run with the CUDA
// backend on the emulator's GPUs, 4 of them); the CPU one $EMX_RUN. Without EMX_GPU_RUN the
// tests skip and say why (all but the CPU build's refusal of GPUs). A real machine (make
// test-gpu) may have fewer GPUs than a test needs: that test is skipped and names the count.
//
// Model: stories260K f32. With f32 weights the backends' logits differ only in summation order
// (~1e-7 relative; no int8 activations, whose rounding may differ by a step between backends:
// see the top of tests/kernels/test_forward_cuda.cpp), far from any decision boundary of these
// runs, so every proposal, entropy and verdict must agree.
// Timeouts are safety nets only: these runs took 90-145 s on a 2-core machine with two busy
// processes beside the suite, so the longest get 900 s.
// Runs are short: an emulated GPU takes about 0.1 s per token of stories260K, and the critic
// (about 40 prompt tokens a check on rank 0's GPU) dominates; margin -2.12 makes the first
// check BAD (a rollback) and later ones GOOD, as in tests/test_pool.c.
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run_util.h"
#include "test_util.h"

static const char *stories(char *buf, size_t cap) {
    test_build_path(buf, cap, "models/stories260K.f32.bin");
    if (access(buf, R_OK) != 0) cr_skip_test("%s missing: run `make test-models` first", buf);
    return buf;
}

// Skips the test when the GPU build finds fewer than n GPUs (a probe run on cuda:0..n-1, whose
// error names the machine's count); the emulator has 4.
static void need_gpus(const char *gpu, const char *model, int n) {
    char list[64] = "cuda:0", agents[8];
    for (int i = 1; i < n; i++) snprintf(list + strlen(list), sizeof list - strlen(list), ",cuda:%d", i);
    snprintf(agents, sizeof agents, "%d", n);
    RunResult r = run_prog(gpu, (const char *[]){model, "-p", "Once", "-n", "1", "--agents", agents, "--check-every",
                                                 "0", "-c", "16", "-t", "1", "--devices", list, NULL});
    char why[256] = "";
    if (r.code != 0 && strstr(r.err, "(this machine has ")) snprintf(why, sizeof why, "%s", r.err);
    run_free(&r);
    if (why[0]) cr_skip_test("needs %d GPUs: %s", n, why);
}

static char *tmp_path(char *buf) {
    strcpy(buf, "/tmp/emx_pool_cuda_XXXXXX");
    int fd = mkstemp(buf);
    cr_assert(fd >= 0);
    close(fd);
    return buf;
}

// The log after its header ('#' lines, which name the workers and devices). malloc'd.
static char *log_body(const char *path) {
    size_t n;
    char *log = test_read_file(path, &n);
    cr_assert(log, "no log at %s", path);
    const char *s = log;
    while (*s == '#') {
        const char *nl = strchr(s, '\n');
        s = nl ? nl + 1 : s + strlen(s);
    }
    char *body = strdup(s);
    free(log);
    return body;
}

typedef struct {
    char *out, *log;
    int forwards, fused;  // the stats' single-token forwards, and those run with their proposals
    int passes, on_device;  // its branch passes, and those with the proposals on the device
    int in_graph;           // of those, run inside the round's one device call
} PoolRun;

// What a comparison runs: lookahead, seed and the agents (--agents N or --agent-configs S).
typedef struct {
    const char *lookahead, *seed, *agents_flag, *agents;
} PoolCase;

// One pool run of prog with the case's settings and `extra` flags (NULL-terminated): 8 tokens,
// a check every 4.
static PoolRun pool_run(const char *prog, const char *model, const PoolCase *pc, const char *const *extra) {
    char lp[64];
    const char *args[40] = {model, "-p", "Once upon a time", "-n", "8", "-s", pc->seed, pc->agents_flag, pc->agents,
                            "--lookahead", pc->lookahead, "--check-every", "4", "--critic-margin", "-2.12", "-c", "64",
                            "-t", "1", "--log", tmp_path(lp)};
    int n = 21;
    for (int i = 0; extra[i]; i++) args[n++] = extra[i];
    args[n] = NULL;
    RunResult r = run_prog(prog, args);
    cr_assert_eq(r.code, 0, "%s %s: exit %d: %s", prog, extra[0] ? extra[0] : "", r.code, r.err);
    PoolRun pr = {strdup(r.out), log_body(lp), -1, -1, -1, -1, -1};
    const char *st = strstr(r.err, "passes per replica: ");
    cr_assert(st && sscanf(st, "passes per replica: %d single-token forwards (%d with the proposals in one device call), "
                               "%d batched branch passes (%d with the proposals on the device, %d in",
                           &pr.forwards, &pr.fused, &pr.passes, &pr.on_device, &pr.in_graph) == 5,
              "no pass counts in the stats: %s", r.err);
    unlink(lp);
    run_free(&r);
    return pr;
}

static void pool_run_free(PoolRun *r) {
    free(r->out);
    free(r->log);
}

// Two emulated GPUs against the CPU pool with 1 and 2 workers.
static void check_same_as_cpu(const PoolCase *pc) {
    const char *gpu = gpu_run_binary();
    char mp[1024];
    const char *m = stories(mp, sizeof mp);
    need_gpus(gpu, m, 2);
    const char *L = pc->lookahead;
    PoolRun cpu1 = pool_run(run_binary(), m, pc, (const char *[]){"--devices", "cpu", NULL});
    PoolRun cpu2 = pool_run(run_binary(), m, pc, (const char *[]){"--devices", "cpu", "--workers", "2", NULL});
    PoolRun gpu2 = pool_run(gpu, m, pc, (const char *[]){"--devices", "cuda:0,cuda:1", NULL});
    // the comparison must cover rollbacks: the KV rows after one, and the ban and new epoch
    cr_assert(strstr(cpu1.log, "rolling back"), "L=%s: no rollback on the CPU to compare:\n%s", L, cpu1.log);
    cr_assert(strstr(cpu1.log, "=== Final text"), "L=%s: the CPU log has no final text", L);
    cr_expect(strlen(cpu1.out) > strlen("Once upon a time"), "L=%s: no text generated: [%s]", L, cpu1.out);
    cr_expect_str_eq(cpu2.out, cpu1.out, "L=%s: CPU text with 2 workers differs", L);
    cr_expect_str_eq(cpu2.log, cpu1.log, "L=%s: CPU log with 2 workers differs", L);
    cr_expect_str_eq(gpu2.out, cpu1.out, "L=%s: 2 GPUs' text differs from the CPU's", L);
    cr_expect_str_eq(gpu2.log, cpu1.log, "L=%s: 2 GPUs' log differs from the CPU's", L);
    // on the GPUs every round's forward and proposals were one device call (a captured graph),
    // every branch pass made its proposals there
    cr_expect(gpu2.forwards > 0 && gpu2.fused == gpu2.forwards, "L=%s: %d of %d forwards fused with the proposals", L,
              gpu2.fused, gpu2.forwards);
    cr_expect(gpu2.on_device == gpu2.passes && (strcmp(L, "1") == 0) == (gpu2.passes == 0),
              "L=%s: %d of %d branch passes proposed on the device", L, gpu2.on_device, gpu2.passes);
    // ... and fed there, inside the round's graph (emx_forward_lookahead_propose), in every round
    // but the first: the prompt's prefill left its logits for that one, so it has no step to fuse
    // with and its passes run one by one (at most L - 1 = 3 of them)
    cr_expect(gpu2.in_graph <= gpu2.passes && gpu2.passes - gpu2.in_graph <= 3 &&
                  (strcmp(L, "1") == 0) == (gpu2.in_graph == 0),
              "L=%s: %d of %d branch passes in the round's device call", L, gpu2.in_graph, gpu2.passes);
    cr_expect(cpu1.fused == 0 && cpu1.on_device == 0 && cpu1.in_graph == 0, "L=%s: the CPU ran device proposals", L);
    pool_run_free(&cpu1);
    pool_run_free(&cpu2);
    pool_run_free(&gpu2);
}

// L = 1: one forward per token, every agent on the same logits; the default spread of 4 agents.
Test(pool_cuda, two_gpus_same_text_and_log_as_cpu_l1, .timeout = 900) {
    check_same_as_cpu(&(PoolCase){"1", "4", "--agents", "4"});
}

// L = 4: the branches run on each GPU; agents 0-1 are worker 0's, 2-3 worker 1's, and with these
// agents and seed each worker wins a round, so committed KV rows travel both ways.
Test(pool_cuda, two_gpus_same_text_and_log_as_cpu_l4, .timeout = 900) {
    const PoolCase pc = {"4", "6", "--agent-configs", "0.8:40,1.5:100,0.7:40,1.2:50"};
    char mp[1024];
    need_gpus(gpu_run_binary(), stories(mp, sizeof mp), 2);
    PoolRun cpu = pool_run(run_binary(), stories(mp, sizeof mp), &pc, (const char *[]){NULL});
    cr_assert(strstr(cpu.log, "agent 0 wins") && strstr(cpu.log, "agent 2 wins"), "a worker never wins:\n%s", cpu.log);
    pool_run_free(&cpu);
    check_same_as_cpu(&pc);
}

// The header names the devices; the CPU's does not name any.
Test(pool_cuda, log_header_names_the_devices, .timeout = 300) {
    const char *gpu = gpu_run_binary();
    char mp[1024], lp[64];
    need_gpus(gpu, stories(mp, sizeof mp), 2);
    const char *args[] = {mp, "-p", "Once", "-n", "2", "-s", "1", "--agents", "3", "--check-every",
                          "0", "-c", "32", "--devices", "cuda:1,cuda:0", "--log", tmp_path(lp), NULL};
    RunResult r = run_prog(gpu, args);
    cr_assert_eq(r.code, 0, "%s", r.err);
    size_t n;
    char *log = test_read_file(lp, &n);
    cr_assert(log);
    cr_expect(strstr(log, "3 agents, lookahead 1, 2 worker(s) on cuda:1,cuda:0, seed 1\n"), "header: %s", log);
    cr_expect(strstr(log, "=== Final text (2 tokens) ==="), "%s", log);
    free(log);
    unlink(lp);
    run_free(&r);
}

// Device lists: one line each, non-zero exit, on the GPU build.
Test(pool_cuda, device_list_errors, .timeout = 300) {
    const char *gpu = gpu_run_binary();
    char mp[1024];
    const char *m = stories(mp, sizeof mp);
    expect_error_prog(gpu, (const char *[]){m, "--agents", "4", "--devices", "cuda:0,cuda:0", NULL}, 2,
                      "cuda:0 is listed twice");
    expect_error_prog(gpu, (const char *[]){m, "--agents", "4", "--devices", "cuda:0,cuda:9", NULL}, 1,
                      "no GPU cuda:9 (this machine has ");
    expect_error_prog(gpu, (const char *[]){m, "--agents", "4", "--workers", "3", "--devices", "cuda:0,cuda:1", NULL},
                      2, "--workers 3 with --devices cuda:0,cuda:1: one worker per device (2)");
    expect_error_prog(gpu, (const char *[]){m, "--agents", "2", "--devices", "cuda:0,cuda:1,cuda:2", NULL}, 2,
                      "3 devices for 2 agents");
    expect_error_prog(gpu, (const char *[]){m, "--agents", "4", "--devices", "cuda:0,gpu1", NULL}, 2,
                      "'gpu1' in 'cuda:0,gpu1' is not cpu or cuda:N");
    expect_error_prog(gpu, (const char *[]){m, "--agents", "4", "--devices", "cuda:0,", NULL}, 2,
                      "'' in 'cuda:0,' is not cpu or cuda:N");
}

// The CPU build (no CUDA backend, no NCCL: their weak symbols are NULL) refuses GPUs in one line.
Test(pool_cuda, cpu_build_refuses_gpus, .timeout = 300) {
    char mp[1024];
    const char *m = stories(mp, sizeof mp);
    expect_error((const char *[]){m, "--agents", "4", "--devices", "cuda:0,cuda:1", NULL}, 2,
                 "--devices cuda:0,cuda:1: this build has no CUDA backend");
    expect_error((const char *[]){m, "--agents", "4", "--devices", "cuda:0", "--check-every", "0", NULL}, 2,
                 "(make builds it in when nvcc is found, unless CUDA=0)");
}

// --critic-model: the critic's own model file gets its own state on rank 0's GPU (cuda:1 here,
// the first listed). Its verdicts are not compared with the CPU's: that model is q8, whose
// logits may differ between backends by a rounding step.
Test(pool_cuda, critic_model_on_rank0_gpu, .timeout = 900) {
    const char *gpu = gpu_run_binary();
    char mp[1024], cp[1024], lp[64];
    need_gpus(gpu, stories(mp, sizeof mp), 2);
    test_build_path(cp, sizeof cp, "models/stories260K.q8.bin");
    if (access(cp, R_OK) != 0) cr_skip_test("%s missing: run `make test-models` first", cp);
    const char *args[] = {mp, "-p", "Once upon a time", "-n", "8", "-s", "4", "--agents", "4", "--check-every", "4",
                          "--critic-model", cp, "-c", "64", "-t", "1", "--devices", "cuda:1,cuda:0", "--log",
                          tmp_path(lp), NULL};
    RunResult r = run_prog(gpu, args);
    cr_assert_eq(r.code, 0, "%s", r.err);
    size_t n;
    char *log = test_read_file(lp, &n);
    cr_assert(log);
    cr_expect(strstr(log, "# critic: ") && strstr(log, "stories260K.q8.bin, check every 4"), "%s", log);
    int verdicts = 0;
    for (const char *s = log; (s = strstr(s, "\nEvaluator after step ")); s++) verdicts++;
    cr_expect_eq(verdicts, 2, "%d verdicts in 8 tokens, checking every 4:\n%s", verdicts, log);
    cr_expect(strstr(log, "=== Final text (8 tokens) ==="), "%s", log);
    cr_expect(strstr(r.err, "critic: 2 checks"), "%s", r.err);
    free(log);
    unlink(lp);
    run_free(&r);
}
