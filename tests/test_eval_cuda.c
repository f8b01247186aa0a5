// test_eval_cuda.c — tools/eval on the CUDA backend: the CUDA build's eval ($EMX_GPU_EVAL:
// build/emu/tools/eval on emulated GPUs under `make test`, build/cuda/tools/eval under `make
// test-gpu`) with --device cuda:0 gives the results of the CPU eval with --device cpu.
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run_util.h"
#include "test_util.h"

static const char *gpu_eval_binary(void) {
    const char *p = getenv("EMX_GPU_EVAL");
    if (!p || !*p) cr_skip_test("EMX_GPU_EVAL is not set (make test sets it to build/emu/tools/eval)");
    if (access(p, X_OK) != 0) cr_skip_test("EMX_GPU_EVAL=%s is not an executable (make build/emu/tools/eval)", p);
    return p;
}

// The measures computed from each step's logits: the backends' logits agree closely, not bitwise.
static const char *const FLOAT_MEASURES[] = {"answer_margin", "mean_entropy_bits", "mean_logprob_nats", NULL};

// The results file without the fields that differ by nature (time; the float measures, which
// measures_close compares), one line per result.
static char *results_without_time(const char *path) {
    char *s = test_read_file(path, NULL);
    cr_assert(s, "%s missing", path);
    size_t cap = strlen(s) + 1, n = 0;
    char *out = calloc(cap, 1);
    for (char *line = strtok(s, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        cr_assert(o, "%s", line);
        cJSON_DeleteItemFromObject(o, "time_s");
        for (int k = 0; FLOAT_MEASURES[k]; k++) cJSON_DeleteItemFromObject(o, FLOAT_MEASURES[k]);
        char *t = cJSON_PrintUnformatted(o);
        n += (size_t)snprintf(out + n, cap - n, "%s\n", t);
        cJSON_free(t);
        cJSON_Delete(o);
    }
    free(s);
    return out;
}

// Line by line, the float measures are both absent or within 1e-3 of each other.
static void measures_close(const char *path_a, const char *path_b) {
    char *a = test_read_file(path_a, NULL), *b = test_read_file(path_b, NULL);
    cr_assert(a && b);
    char *sa = NULL, *sb = NULL;
    for (char *la = strtok_r(a, "\n", &sa), *lb = strtok_r(b, "\n", &sb); la && lb;
         la = strtok_r(NULL, "\n", &sa), lb = strtok_r(NULL, "\n", &sb)) {
        cJSON *oa = cJSON_Parse(la), *ob = cJSON_Parse(lb);
        cr_assert(oa && ob);
        for (int k = 0; FLOAT_MEASURES[k]; k++) {
            const cJSON *x = cJSON_GetObjectItem(oa, FLOAT_MEASURES[k]), *y = cJSON_GetObjectItem(ob, FLOAT_MEASURES[k]);
            cr_expect(!x == !y, "%s: in one backend's line only", FLOAT_MEASURES[k]);
            if (x && y) cr_expect(fabs(x->valuedouble - y->valuedouble) < 1e-3, "%s: %g against %g", FLOAT_MEASURES[k],
                                  x->valuedouble, y->valuedouble);
        }
        cJSON_Delete(oa);
        cJSON_Delete(ob);
    }
    free(a);
    free(b);
}

Test(eval_cuda, greedy_and_entropix_same_results_as_cpu, .timeout = 900) {
    const char *gpu = gpu_eval_binary();
    char model[512];
    test_build_path(model, sizeof model, "models/stories260K.f32.bin");
    if (access(model, R_OK) != 0) cr_skip_test("%s missing (make test-models converts it)", model);
    char dir[] = "/tmp/emx_eval_cuda_XXXXXX";
    cr_assert(mkdtemp(dir));
    char tasks[128], out_cpu[128], out_gpu[128];
    snprintf(tasks, sizeof tasks, "%s/story.jsonl", dir);
    snprintf(out_cpu, sizeof out_cpu, "%s/cpu.jsonl", dir);
    snprintf(out_gpu, sizeof out_gpu, "%s/gpu.jsonl", dir);
    FILE *f = fopen(tasks, "w");
    fputs("{\"id\":\"s1\",\"prompt\":\"Once upon a time\",\"answer\":\"Lily\",\"check\":\"contains\",\"max_tokens\":16}\n"
          "{\"id\":\"s2\",\"prompt\":\"Tom had 3 apples\",\"answer\":\"3\",\"check\":\"number\",\"max_tokens\":12}\n"
          "{\"id\":\"s3\",\"prompt\":\"not run\",\"answer\":\"3\",\"check\":\"number\"}\n", f);
    fclose(f);
    char ebin[512];
    test_build_path(ebin, sizeof ebin, "cpu/tools/eval");
    const char *args[] = {model, tasks, "--limit", "2", "--seeds", "1", "--config", "greedy", "--config", "entropix",
                          "-o", out_cpu, "--device", "cpu", NULL};
    RunResult c = run_prog(ebin, args);
    cr_assert_eq(c.code, 0, "cpu: %s", c.err);
    args[11] = out_gpu;
    args[13] = "cuda:0";
    RunResult g = run_prog(gpu, args);
    cr_assert_eq(g.code, 0, "cuda:0: %s", g.err);
    char *rc = results_without_time(out_cpu), *rg = results_without_time(out_gpu);
    cr_expect_eq(count_lines(rc), 4);
    cr_expect_str_eq(rg, rc, "the CUDA backend's results differ from the CPU's");
    measures_close(out_cpu, out_gpu);
    free(rc);
    free(rg);
    run_free(&c);
    run_free(&g);
    char cmd[96];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
}
