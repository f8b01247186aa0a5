// test_penalties.c — the logit rules (sampler/penalties.h, runtime/logit_filter.h): each rule
// against values worked out by hand from its definition, the filter's memory of the context,
// and ./run's flags end to end (the chosen token is the argmax of the raw logits as --logprobs
// reports them, with the penalties applied by this test's own arithmetic).
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run_util.h"
#include "runtime/logit_filter.h"
#include "sampler/penalties.h"
#include "test_util.h"

#define V 8

static void expect_logits(const float *got, const float *want, const char *what) {
    for (int i = 0; i < V; i++)
        cr_expect(fabsf(got[i] - want[i]) < 1e-6f, "%s: logit %d is %g, expected %g", what, i, (double)got[i],
                  (double)want[i]);
}

Test(penalties, bias_adds_and_ignores_ids_outside_the_vocabulary) {
    float l[V] = {0, 1, 2, 3, 4, 5, 6, 7};
    const EmxLogitBias b[] = {{1, 2.5f}, {7, -100}, {8, 50}, {-1, 50}};
    emx_apply_logit_bias(l, V, b, 4);
    const float want[V] = {0, 3.5f, 2, 3, 4, 5, 6, -93};
    expect_logits(l, want, "bias");
}

Test(penalties, repetition_divides_positive_multiplies_negative_once_per_token) {
    float l[V] = {2, -2, 3, -1, 4, 0.5f, 1, 1};
    uint8_t seen[V] = {0};
    int counts[V] = {0};
    // context 5 4 0 1 0 1 6: the last 4 are 1 0 1 6 (window 4); 0 and 1 appear twice there
    const int ctx[] = {5, 4, 0, 1, 0, 1, 6};
    EmxPenalties p = {.repeat_penalty = 2, .repeat_last_n = 4};
    emx_apply_penalties(l, V, &p, ctx, 7, 0, seen, counts);
    const float want[V] = {1, -4, 3, -1, 4, 0.5f, 0.5f, 1};  // 5 and 4 lie outside the window
    expect_logits(l, want, "repetition");
    for (int i = 0; i < V; i++) cr_expect(seen[i] == 0 && counts[i] == 0, "scratch %d not left at zero", i);
    float all[V] = {2, -2, 3, -1, 4, 0.5f, 1, 1};
    p.repeat_last_n = -1;  // the whole context: 4 and 5 too
    emx_apply_penalties(all, V, &p, ctx, 7, 0, seen, counts);
    const float want_all[V] = {1, -4, 3, -1, 2, 0.25f, 0.5f, 1};
    expect_logits(all, want_all, "repetition over all");
}

Test(penalties, presence_and_frequency_count_generated_tokens_only) {
    float l[V] = {0};
    uint8_t seen[V] = {0};
    int counts[V] = {0};
    // prompt 3 3 3, generated 2 5 2 2
    const int ctx[] = {3, 3, 3, 2, 5, 2, 2};
    EmxPenalties p = {.repeat_penalty = 1, .presence_penalty = 0.5f, .frequency_penalty = 0.25f};
    emx_apply_penalties(l, V, &p, ctx, 7, 4, seen, counts);
    const float want[V] = {0, 0, -(0.5f + 3 * 0.25f), 0, 0, -(0.5f + 0.25f), 0, 0};
    expect_logits(l, want, "presence + frequency");
    for (int i = 0; i < V; i++) cr_expect(counts[i] == 0, "counts[%d] not left at zero", i);
}

Test(penalties, off_values_change_nothing) {
    EmxPenalties off = EMX_PENALTIES_OFF;
    cr_expect(!emx_penalties_active(&off));
    off.repeat_penalty = 1.3f, off.repeat_last_n = 0;
    cr_expect(!emx_penalties_active(&off), "a window of 0 turns the repetition penalty off");
    EmxLogitRules r = EMX_LOGIT_RULES_OFF;
    cr_expect(!emx_logit_rules_active(&r));
    r.n_bias = 1;
    cr_expect(emx_logit_rules_active(&r));
}

// ---------------------------------------------------------------------------------------------
// The filter: what it hands its inner sampler, and the context it remembers.

typedef struct {
    EmxSampler base;
    float seen[V];  // the logits of the last call
} Argmax;

static int argmax_choose(EmxSampler *self, EmxState *st, const float *logits, int n, int pos) {
    (void)st, (void)pos;
    Argmax *a = (Argmax *)self;
    memcpy(a->seen, logits, sizeof a->seen);
    int best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

Test(penalties, filter_penalises_what_it_chose_and_forgets_a_replayed_tail) {
    Argmax inner = {.base.choose = argmax_choose};
    EmxLogitRules r = EMX_LOGIT_RULES_OFF;
    r.penalties.frequency_penalty = 1.0f;
    r.bias[r.n_bias++] = (EmxLogitBias){6, -100};
    EmxLogitFilter f;
    char err[256];
    cr_assert_eq(emx_logit_filter_init(&f, &inner.base, &r, V, 16, err, sizeof err), 0, "%s", err);
    const int prompt[] = {7, 7};
    emx_logit_filter_prompt(&f, prompt, 2);
    const float logits[V] = {0, 0, 0, 0, 0, 2.5f, 3, 1};  // 6 banned; 7 is the prompt's (no frequency penalty)
    cr_expect_eq(f.base.choose(&f.base, NULL, logits, V, 2), 5);
    cr_expect_eq(f.base.choose(&f.base, NULL, logits, V, 3), 5, "2.5 - 1 still beats 1");
    cr_expect_eq(f.base.choose(&f.base, NULL, logits, V, 4), 7, "2.5 - 2 < 1: the prompt's token");
    cr_expect(fabsf(inner.seen[5] - 0.5f) < 1e-6f, "the inner sampler saw %g", (double)inner.seen[5]);
    // Replayed from position 3: only one 5 generated before it.
    cr_expect_eq(f.base.choose(&f.base, NULL, logits, V, 3), 5);
    cr_expect(fabsf(inner.seen[5] - 1.5f) < 1e-6f, "after the replay the inner sampler saw %g", (double)inner.seen[5]);
    cr_expect(logits[6] == 3, "the caller's logits are not changed");
    EmxLogitRules bad = EMX_LOGIT_RULES_OFF;
    bad.bias[bad.n_bias++] = (EmxLogitBias){V, 1};
    EmxLogitFilter g;
    cr_expect_eq(emx_logit_filter_init(&g, &inner.base, &bad, V, 16, err, sizeof err), -1);
    cr_expect(strstr(err, "logit bias: token 8 is not in the vocabulary (0 .. 7)"), "%s", err);
    emx_logit_filter_free(&f);
}

// ---------------------------------------------------------------------------------------------
// ./run's flags.

static const char *model(char *buf, size_t cap) { return test_build_path(buf, cap, "models/stories260K.f32.bin"); }

// The --metrics lines of a greedy run with extra flags (NULL-terminated), parsed.
static cJSON **greedy_steps(const char *const *extra, int *n) {
    char mp[1024], path[] = "/tmp/emx_pen_XXXXXX";
    const int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    const char *args[32] = {model(mp, sizeof mp), "-p", "Once upon a time", "-n", "40", "--sampler", "greedy",
                            "-t", "1", "--metrics", path, "--logprobs", "20"};
    int k = 13;
    for (int i = 0; extra[i]; i++) args[k++] = extra[i];
    args[k] = NULL;
    RunResult r = run(args);
    cr_assert_eq(r.code, 0, "run: %s", r.err);
    run_free(&r);
    char *t = test_read_file(path, NULL);
    unlink(path);
    cr_assert(t);
    cJSON **steps = calloc(64, sizeof *steps);
    *n = 0;
    for (char *line = strtok(t, "\n"); line && *n < 64; line = strtok(NULL, "\n")) steps[(*n)++] = cJSON_Parse(line);
    free(t);
    return steps;
}

static int step_id(const cJSON *s) { return cJSON_GetObjectItem(s, "id")->valueint; }

Test(penalties, run_frequency_and_presence_choose_the_penalised_argmax, .timeout = 120) {
    const float fp = 0.7f, pp = 0.3f;
    int n = 0;
    cJSON **steps = greedy_steps((const char *[]){"--frequency-penalty", "0.7", "--presence-penalty", "0.3", NULL}, &n);
    cr_assert_geq(n, 10);
    int counts[4096] = {0}, checked = 0;
    for (int i = 0; i < n; i++) {
        // Each step's raw top 20 (logprob = logit - lse, so differences are the logits'), penalised here.
        const cJSON *top = cJSON_GetObjectItem(steps[i], "top_logprobs"), *e;
        int best = -1;
        double best_v = -INFINITY, second = -INFINITY;
        cJSON_ArrayForEach(e, top) {
            const int id = cJSON_GetObjectItem(e, "id")->valueint;
            const double v = cJSON_GetObjectItem(e, "logprob")->valuedouble - fp * counts[id] - (counts[id] ? pp : 0);
            if (v > best_v) second = best_v, best_v = v, best = id;
            else if (v > second) second = v;
        }
        if (best_v - second > 1e-3) {  // a clear winner among the top 20 (ties are the sampler's to break)
            cr_expect_eq(step_id(steps[i]), best, "step %d chose %d, the penalised argmax is %d", i, step_id(steps[i]), best);
            checked++;
        }
        counts[step_id(steps[i])]++;
        cJSON_Delete(steps[i]);
    }
    free(steps);
    cr_expect_geq(checked, n / 2, "only %d of %d steps had a clear winner", checked, n);
}

Test(penalties, run_logit_bias_bans_a_token, .timeout = 120) {
    int n = 0;
    cJSON **plain = greedy_steps((const char *[]){NULL}, &n);
    int counts[4096] = {0}, top = 0;
    for (int i = 0; i < n; i++) counts[step_id(plain[i])]++, cJSON_Delete(plain[i]);
    free(plain);
    for (int i = 0; i < 4096; i++)
        if (counts[i] > counts[top]) top = i;
    cr_assert_geq(counts[top], 2, "the greedy text repeats no token");
    char ban[32];
    snprintf(ban, sizeof ban, "%d-inf", top);
    int m = 0;
    cJSON **banned = greedy_steps((const char *[]){"--logit-bias", ban, NULL}, &m);
    cr_expect_geq(m, 10);
    for (int i = 0; i < m; i++) {
        cr_expect_neq(step_id(banned[i]), top, "step %d chose the banned token %d", i, top);
        cJSON_Delete(banned[i]);
    }
    free(banned);
}

Test(penalties, run_flag_errors_are_one_line) {
    char mp[1024];
    model(mp, sizeof mp);
    expect_error((const char *[]){mp, "-l", "abc", NULL}, 2, "--logit-bias: 'abc' is not TOKEN_ID+BIAS");
    expect_error((const char *[]){mp, "--logit-bias", "5+200", NULL}, 2, "--logit-bias: 200 is out of range");
    expect_error((const char *[]){mp, "--repeat-penalty", "0", NULL}, 2, "--repeat-penalty: 0 is out of range (0, 100]");
    expect_error((const char *[]){mp, "--presence-penalty", "3", NULL}, 2, "--presence-penalty: 3 is out of range");
    expect_error((const char *[]){mp, "--repeat-last-n", "-2", NULL}, 2, "--repeat-last-n: -2 is out of range");
    expect_error((const char *[]){mp, "--sampler", "agents", "--repeat-penalty", "1.1", NULL}, 2,
                 "not available with --sampler agents");
    expect_error((const char *[]){mp, "-n", "4", "--logit-bias", "99999+1", NULL}, 1,
                 "logit bias: token 99999 is not in the vocabulary (0 .. 511)");
}
