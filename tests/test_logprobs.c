// test_logprobs.c — ./run --logprobs N (runtime/token_log.h): the top_logprobs and logprob of a
// --metrics line against log-softmax computed here, in double, from the numpy reference logits
// of ../shared/testdata/tiny/qwen3-tiny (logits_step0.numpy.f32: the first generated token's
// distribution for each reference prompt). Single stream with two samplers and the agent pool;
// the keys stay absent without the flag; the flag's range.
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run_util.h"
#include "test_util.h"

#define VOCAB_MAX 200000

static char *tmp_file(char *buf) {
    strcpy(buf, "/tmp/emx_logprobs_XXXXXX");
    int fd = mkstemp(buf);
    cr_assert(fd >= 0);
    close(fd);
    return buf;
}

// Reference prompt pi of qwen3-tiny: its text, ids and the log-softmax of its numpy step-0 logits
// [vocab] (computed here: max-shifted sum in double).
typedef struct {
    char text[256];
    char ids[256];   // "9707 11 847 ..." as --verbose prints them
    double *logp;
    int vocab;
} Ref;

static void load_ref(int pi, Ref *ref) {
    char p[512];
    size_t n = 0;
    char *json = test_read_file(test_shared_path(p, sizeof p, "testdata/tiny/qwen3-tiny/reference.json"), &n);
    cr_assert(json, "missing %s", p);
    cJSON *root = cJSON_Parse(json);
    free(json);
    cr_assert(root);
    const cJSON *pr = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "prompts"), pi);
    snprintf(ref->text, sizeof ref->text, "%s", cJSON_GetObjectItem(pr, "text")->valuestring);
    ref->ids[0] = 0;
    const cJSON *id;
    cJSON_ArrayForEach(id, cJSON_GetObjectItem(pr, "ids")) {
        size_t l = strlen(ref->ids);
        snprintf(ref->ids + l, sizeof ref->ids - l, "%s%d", l ? " " : "", id->valueint);
    }
    ref->vocab = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "config"), "vocab_size")->valueint;
    cJSON_Delete(root);
    cr_assert(ref->vocab > 0 && ref->vocab < VOCAB_MAX);
    float *logits = (float *)test_read_file(test_shared_path(p, sizeof p, "testdata/tiny/qwen3-tiny/logits_step0.numpy.f32"), &n);
    cr_assert(logits && n >= (size_t)(pi + 1) * ref->vocab * 4, "%s: %zu bytes", p, n);
    const float *l = logits + (size_t)pi * ref->vocab;
    double mx = -INFINITY, sum = 0;
    for (int i = 0; i < ref->vocab; i++) mx = fmax(mx, l[i]);
    for (int i = 0; i < ref->vocab; i++) sum += exp((double)l[i] - mx);
    ref->logp = malloc(sizeof(double) * ref->vocab);
    for (int i = 0; i < ref->vocab; i++) ref->logp[i] = (double)l[i] - mx - log(sum);
    free(logits);
}

// Our forward pass matches numpy's logits to 2e-4 (test_forward.c); log-softmax adds the same
// error at most twice over.
#define TOL 1e-3

// One --metrics line's top_logprobs (n entries) and logprob against the reference.
static void check_line(const cJSON *line, const Ref *ref, int n) {
    const cJSON *top = cJSON_GetObjectItem(line, "top_logprobs");
    cr_assert(cJSON_IsArray(top), "no top_logprobs array");
    cr_assert_eq(cJSON_GetArraySize(top), n, "top_logprobs has %d entries, want %d", cJSON_GetArraySize(top), n);
    double prev = INFINITY;
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, top) {
        const int id = cJSON_GetObjectItem(e, "id")->valueint;
        const double lp = cJSON_GetObjectItem(e, "logprob")->valuedouble;
        cr_assert(id >= 0 && id < ref->vocab);
        cr_expect(fabs(lp - ref->logp[id]) < TOL, "entry %d: id %d logprob %.6f, numpy %.6f", i, id, lp, ref->logp[id]);
        cr_expect(lp <= prev, "entry %d: not in descending order (%g after %g)", i, lp, prev);
        cr_expect(cJSON_IsString(cJSON_GetObjectItem(e, "piece")), "entry %d: no piece", i);
        prev = lp;
        i++;
    }
    // Nothing left out: every token the reference ranks clearly above the last entry is listed.
    for (int t = 0; t < ref->vocab && n > 0; t++) {
        if (ref->logp[t] <= prev + TOL) continue;
        int found = 0;
        cJSON_ArrayForEach(e, top) found |= cJSON_GetObjectItem(e, "id")->valueint == t;
        cr_expect(found, "token %d (numpy logprob %.5f) missing from the top %d (last %.5f)", t, ref->logp[t], n, prev);
    }
    const int chosen = cJSON_GetObjectItem(line, "id")->valueint;
    const double own = cJSON_GetObjectItem(line, "logprob")->valuedouble;
    cr_expect(fabs(own - ref->logp[chosen]) < TOL, "chosen %d: logprob %.6f, numpy %.6f", chosen, own, ref->logp[chosen]);
}

// ./run qwen3-tiny --raw -p TEXT -n 1 [extra...] --metrics M --verbose; returns the first line.
static cJSON *first_line(const Ref *ref, const char *const *extra, char *mpath) {
    char mp[512];
    const char *args[40] = {test_build_path(mp, sizeof mp, "models/qwen3-tiny.f32.bin"), "--raw", "-p", ref->text, "-n", "1",
                            "-s", "5", "-t", "1", "-c", "64", "--verbose", "--metrics", tmp_file(mpath)};
    int k = 15;
    for (int i = 0; extra[i]; i++) args[k++] = extra[i];
    args[k] = NULL;
    RunResult r = run(args);
    cr_assert_eq(r.code, 0, "exit %d: %s", r.code, r.err);
    char want[300];
    snprintf(want, sizeof want, "): %s\n", ref->ids);  // the prompt is the reference's ids
    cr_assert(strstr(r.err, want), "prompt ids differ from the reference's (%s): %s", ref->ids, r.err);
    run_free(&r);
    char *text = test_read_file(mpath, NULL);
    unlink(mpath);
    cr_assert(text);
    char *nl = strchr(text, '\n');
    cr_assert(nl, "no --metrics line");
    *nl = 0;
    cJSON *line = cJSON_Parse(text);
    free(text);
    cr_assert(line);
    return line;
}

Test(logprobs, greedy_and_entropix_match_numpy_log_softmax, .timeout = 300) {
    char mpath[64];
    for (int pi = 0; pi < 2; pi++) {
        Ref ref;
        load_ref(pi, &ref);
        const char *greedy[] = {"--sampler", "greedy", "--logprobs", "20", NULL};
        cJSON *line = first_line(&ref, greedy, mpath);
        check_line(line, &ref, 20);
        // greedy picks the top entry: its own logprob is the first one's
        cr_expect_eq(cJSON_GetObjectItem(line, "id")->valueint,
                     cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(line, "top_logprobs"), 0), "id")->valueint);
        cJSON_Delete(line);
        const char *entropix[] = {"--logprobs", "7", NULL};  // the distribution, not the case's tempered one
        line = first_line(&ref, entropix, mpath);
        cr_expect(cJSON_IsString(cJSON_GetObjectItem(line, "case")));
        check_line(line, &ref, 7);
        cJSON_Delete(line);
        free(ref.logp);
    }
}

Test(logprobs, agents_match_numpy_log_softmax, .timeout = 300) {
    char mpath[64];
    Ref ref;
    load_ref(0, &ref);
    const char *agents[] = {"--agents", "3", "--logprobs", "5", NULL};
    cJSON *line = first_line(&ref, agents, mpath);
    cr_expect_str_eq(cJSON_GetObjectItem(line, "sampler")->valuestring, "agents");
    check_line(line, &ref, 5);
    cJSON_Delete(line);
    free(ref.logp);
}

Test(logprobs, absent_without_the_flag_and_zero_is_empty, .timeout = 300) {
    char mpath[64];
    Ref ref;
    load_ref(1, &ref);
    const char *none[] = {NULL};
    cJSON *line = first_line(&ref, none, mpath);
    cr_expect_null(cJSON_GetObjectItem(line, "top_logprobs"));
    cr_expect_null(cJSON_GetObjectItem(line, "logprob"));
    cJSON_Delete(line);
    const char *agents_none[] = {"--agents", "2", NULL};
    line = first_line(&ref, agents_none, mpath);
    cr_expect_null(cJSON_GetObjectItem(line, "top_logprobs"));
    cJSON_Delete(line);
    const char *zero[] = {"--logprobs", "0", NULL};
    line = first_line(&ref, zero, mpath);
    check_line(line, &ref, 0);
    cJSON_Delete(line);
    free(ref.logp);
    char mp[512];
    test_build_path(mp, sizeof mp, "models/qwen3-tiny.f32.bin");
    expect_error((const char *[]){mp, "--logprobs", "21", NULL}, 2, "--logprobs");
    expect_error((const char *[]){mp, "--logprobs", "-1", NULL}, 2, "--logprobs");
}
