// test_api_step.c — step-wise generation (entropix_generation_begin/next/result/end) against
// ./run's text for the same flags and seed (greedy, combined, entropix on stories260K, combined
// on qwen3-tiny) and its stop reasons (a stop token, max_tokens, the end of the context), each
// record against entropix_generate's for the same call, a failure mid-generation (a custom
// sampler that gives up at its fourth step: the status, the message naming the position, the
// same again on the next call), the state refusing other work while a generation runs, an
// early end (three tokens, three times, then the state reused for llama2.c's whole text), and
// reuse_prefix (only what the cache lacks runs; a fresh state's text).
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "include/entropix.h"
#include "api_test_util.h"
#include "run_util.h"
#include "test_ref_util.h"

typedef struct {
    char text[16384];
    size_t len;
    int n_tokens, ids[1024], n_tails;
    double logprobs[1024];
} Steps;

static void add_text(Steps *c, const entropix_token *t) {
    cr_assert_lt(c->len + t->text_len, sizeof c->text);
    memcpy(c->text + c->len, t->text, t->text_len);
    c->len += t->text_len;
    c->text[c->len] = 0;
}

// Runs a whole generation step by step into c; returns its result.
static entropix_generate_result step_all(entropix_state *s, entropix_sampler *smp, const int *ids, int n,
                                         const entropix_generate_params *gp, Steps *c) {
    entropix_generation *g = NULL;
    cr_assert_eq(entropix_generation_begin(s, smp, ids, n, gp, &g), ENTROPIX_OK, "%s", entropix_error_last());
    const entropix_token *t = NULL;
    for (;;) {
        cr_assert_eq(entropix_generation_next(g, &t), ENTROPIX_OK, "%s", entropix_error_last());
        if (!t) break;
        add_text(c, t);
        if (t->id < 0) {
            c->n_tails++;
            continue;
        }
        cr_assert_eq(t->index, c->n_tokens);
        cr_assert_eq(t->pos, n + c->n_tokens);
        cr_assert(t->logprob <= 1e-9, "logprob %g", t->logprob);
        if (c->n_tokens < 1024) c->ids[c->n_tokens] = t->id, c->logprobs[c->n_tokens] = t->logprob;
        c->n_tokens++;
    }
    cr_assert_eq(entropix_generation_next(g, &t), ENTROPIX_OK);  // ended: stays ended
    cr_assert_null(t);
    entropix_generate_result res = {.size = sizeof res};
    cr_assert_eq(entropix_generation_result(g, &res), ENTROPIX_OK);
    entropix_generation_end(g);
    return res;
}

static int collect(void *user, const entropix_token *t) {
    Steps *c = user;
    add_text(c, t);
    if (t->id >= 0 && c->n_tokens < 1024) c->ids[c->n_tokens] = t->id, c->logprobs[c->n_tokens] = t->logprob;
    if (t->id >= 0) c->n_tokens++;
    return 0;
}

// ./run --raw's stdout for flags, the step-wise text of the same generation, and the callback's.
static void expect_run_text(const char *model, const char *prompt, const char *const *flags,
                            const entropix_sampler_params *sp, int n, int ctx, int want_stop) {
    char path[512], rel[256], nbuf[16], cbuf[16];
    snprintf(rel, sizeof rel, "models/%s", model);
    test_build_path(path, sizeof path, rel);
    snprintf(nbuf, sizeof nbuf, "%d", n), snprintf(cbuf, sizeof cbuf, "%d", ctx);
    const char *args[32] = {path, "--raw", "-p", prompt, "-n", nbuf, "-t", "1", "-c", cbuf};
    int k = 10;
    for (int i = 0; flags[i]; i++) args[k++] = flags[i];
    args[k] = NULL;
    RunResult r = run(args);
    cr_assert_eq(r.code, 0, "%s", r.err);
    entropix_model *m = open_api(model, 1);
    entropix_state_params stp;
    entropix_state_params_init(&stp);
    stp.ctx = ctx;
    entropix_state *s = NULL;
    cr_assert_eq(entropix_state_new(m, &stp, &s), ENTROPIX_OK, "%s", entropix_error_last());
    entropix_sampler *smp = NULL;
    cr_assert_eq(entropix_sampler_new(sp, &smp), ENTROPIX_OK, "%s", entropix_error_last());
    int *ids = NULL, n_ids = 0;
    cr_assert_eq(entropix_prompt_tokens(m, prompt, strlen(prompt), 0, NULL, &ids, &n_ids), ENTROPIX_OK);
    entropix_generate_params gp;
    entropix_generate_params_init(&gp);
    gp.max_tokens = n, gp.n_top = 3;
    static Steps st, cb;
    memset(&st, 0, sizeof st), memset(&cb, 0, sizeof cb);
    const entropix_generate_result res = step_all(s, smp, ids, n_ids, &gp, &st);
    char full[16500];
    snprintf(full, sizeof full, "%s%s\n", prompt, st.text);  // ./run ends with a newline
    cr_assert_str_eq(full, r.out, "%s %s", model, flags[1]);
    cr_assert_eq(res.stop, want_stop, "%s %s: stop %d", model, flags[1], res.stop);
    cr_assert_eq(res.n_prompt, n_ids);
    cr_assert_eq(res.n_generated, st.n_tokens);
    // The callback API's records of the same call: the same ids and logprobs.
    gp.on_token = collect, gp.user = &cb;
    cr_assert_eq(entropix_generate(s, smp, ids, n_ids, &gp, NULL), ENTROPIX_OK, "%s", entropix_error_last());
    cr_assert_eq(cb.n_tokens, st.n_tokens);
    for (int i = 0; i < st.n_tokens && i < 1024; i++) {
        cr_assert_eq(cb.ids[i], st.ids[i], "token %d", i);
        cr_assert_eq(cb.logprobs[i], st.logprobs[i], "token %d", i);
    }
    fprintf(stderr, "api_step %s %s: %d tokens equal ./run's, stop %d\n", model, flags[1], st.n_tokens, res.stop);
    entropix_free(ids);
    entropix_sampler_free(smp);
    entropix_state_free(s);
    run_free(&r);
    entropix_model_close(m);
}

Test(api_step, same_text_as_run, .timeout = 300) {
    entropix_sampler_params sp;
    entropix_sampler_params_init(&sp, ENTROPIX_SAMPLER_GREEDY);
    const char *const greedy[] = {"--sampler", "greedy", NULL};
    expect_run_text("stories260K.f32.bin", "Once upon a time", greedy, &sp, 60, 256, ENTROPIX_STOP_MAX_TOKENS);
    expect_run_text("stories260K.f32.bin", "Zoo", greedy, &sp, -1, 256, ENTROPIX_STOP_TOKEN);  // 231 tokens, then eos
    expect_run_text("stories260K.f32.bin", "Zoo", greedy, &sp, -1, 16, ENTROPIX_STOP_CONTEXT);
    entropix_sampler_params_init(&sp, ENTROPIX_SAMPLER_COMBINED);
    sp.seed = 42, sp.temperature = 1.0f;
    expect_run_text("stories260K.f32.bin", "Once upon a time",
                    (const char *[]){"--sampler", "combined", "-s", "42", "--temp", "1.0", NULL}, &sp, 60, 256,
                    ENTROPIX_STOP_MAX_TOKENS);
    entropix_sampler_params_init(&sp, ENTROPIX_SAMPLER_ENTROPIX);
    sp.seed = 7;
    expect_run_text("stories260K.f32.bin", "The dog", (const char *[]){"--sampler", "entropix", "-s", "7", NULL}, &sp,
                    60, 256, ENTROPIX_STOP_MAX_TOKENS);
    entropix_sampler_params_init(&sp, ENTROPIX_SAMPLER_COMBINED);
    sp.seed = 3, sp.temperature = 0.9f, sp.top_k = 20;
    expect_run_text("qwen3-tiny.f32.bin", "The capital of France is",
                    (const char *[]){"--sampler", "combined", "-s", "3", "--temp", "0.9", "--top-k", "20", NULL}, &sp,
                    24, 256, ENTROPIX_STOP_MAX_TOKENS);
}

// max_tokens 0: the prefill runs, no token comes, the stop is max_tokens.
Test(api_step, zero_tokens, .timeout = 60) {
    entropix_model *m = open_api("stories260K.f32.bin", 1);
    entropix_state *s = NULL;
    cr_assert_eq(entropix_state_new(m, NULL, &s), ENTROPIX_OK);
    entropix_sampler_params sp;
    entropix_sampler_params_init(&sp, ENTROPIX_SAMPLER_GREEDY);
    entropix_sampler *smp = NULL;
    cr_assert_eq(entropix_sampler_new(&sp, &smp), ENTROPIX_OK);
    entropix_generate_params gp;
    entropix_generate_params_init(&gp);
    gp.max_tokens = 0;
    static Steps c;
    memset(&c, 0, sizeof c);
    const int prompt[] = {1, 410, 469, 347};  // "Zoo"
    const entropix_generate_result res = step_all(s, smp, prompt, 4, &gp, &c);
    cr_assert_eq(c.n_tokens, 0);
    cr_assert_eq(res.n_generated, 0);
    cr_assert_eq(res.stop, ENTROPIX_STOP_MAX_TOKENS);
    entropix_sampler_free(smp);
    entropix_state_free(s);
    entropix_model_close(m);
}

typedef struct {
    int calls, fail_at;
} GivesUp;

static int argmax_then_give_up(void *user, const float *logits, int n_vocab, const entropix_metrics *mt, int pos) {
    GivesUp *gu = user;
    (void)mt, (void)pos;
    if (++gu->calls == gu->fail_at) return -1;
    int best = 0;
    for (int i = 1; i < n_vocab; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

// A custom sampler's -1 at its fourth step: three records, then ERR_RUNTIME naming the position
// (4 prompt ids + 3 tokens: position 7), and the same status and message on the next call; the
// state refuses a forward until the generation ends, and works after.
Test(api_step, failure_mid_generation, .timeout = 60) {
    entropix_model *m = open_api("stories260K.f32.bin", 1);
    entropix_state *s = NULL;
    cr_assert_eq(entropix_state_new(m, NULL, &s), ENTROPIX_OK);
    GivesUp gu = {.fail_at = 4};
    entropix_sampler *smp = NULL;
    cr_assert_eq(entropix_sampler_new_custom(argmax_then_give_up, &gu, &smp), ENTROPIX_OK);
    const int prompt[] = {1, 410, 469, 347};
    entropix_generation *g = NULL;
    cr_assert_eq(entropix_generation_begin(s, smp, prompt, 4, NULL, &g), ENTROPIX_OK, "%s", entropix_error_last());
    entropix_step step = {.size = sizeof step};
    cr_assert_eq(entropix_forward(s, prompt, 1, 0, &step), ENTROPIX_ERR_ARGUMENT);
    cr_assert(strstr(entropix_error_last(), "a generation runs on this state"), "%s", entropix_error_last());
    entropix_generation *other = NULL;
    cr_assert_eq(entropix_generation_begin(s, smp, prompt, 4, NULL, &other), ENTROPIX_ERR_ARGUMENT);
    cr_assert_null(other);
    const entropix_token *t = NULL;
    char text[256] = "";
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(entropix_generation_next(g, &t), ENTROPIX_OK, "%s", entropix_error_last());
        cr_assert_not_null(t);
        cr_assert_not_null(t->metrics);  // a custom sampler's steps are measured
        strncat(text, t->text, t->text_len);
    }
    cr_assert_str_eq(text, " was a little");  // llama2.c's greedy text after "Zoo"
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(entropix_generation_next(g, &t), ENTROPIX_ERR_RUNTIME);
        cr_assert_null(t);
        cr_assert_str_eq(entropix_error_last(), "sampler found no token to choose at position 7");
    }
    entropix_generate_result res = {.size = sizeof res};
    cr_assert_eq(entropix_generation_result(g, &res), ENTROPIX_OK);
    cr_assert_eq(res.n_generated, 3);
    cr_assert_eq(res.stop, 0);
    entropix_generation_end(g);
    cr_assert_eq(entropix_forward(s, prompt, 4, 0, &step), ENTROPIX_OK, "%s", entropix_error_last());
    cr_assert_eq(entropix_generation_begin(s, NULL, prompt, 4, NULL, &g), ENTROPIX_ERR_ARGUMENT);
    cr_assert_null(g);
    entropix_generation_end(NULL);
    entropix_sampler_free(smp);
    entropix_state_free(s);
    entropix_model_close(m);
}

// Ending after three tokens frees the generation wherever it is; the state then runs a whole one.
Test(api_step, early_end, .timeout = 60) {
    entropix_model *m = open_api("stories260K.f32.bin", 1);
    entropix_state *s = NULL;
    cr_assert_eq(entropix_state_new(m, NULL, &s), ENTROPIX_OK);
    entropix_sampler_params sp;
    entropix_sampler_params_init(&sp, ENTROPIX_SAMPLER_GREEDY);
    entropix_sampler *smp = NULL;
    cr_assert_eq(entropix_sampler_new(&sp, &smp), ENTROPIX_OK);
    const int prompt[] = {1, 410, 469, 347};
    entropix_generate_params gp;
    entropix_generate_params_init(&gp);
    gp.max_tokens = 50;
    for (int round = 0; round < 3; round++) {
        entropix_generation *g = NULL;
        cr_assert_eq(entropix_generation_begin(s, smp, prompt, 4, &gp, &g), ENTROPIX_OK, "%s", entropix_error_last());
        const entropix_token *t = NULL;
        char text[256] = "";
        for (int i = 0; i < 3; i++) {
            cr_assert_eq(entropix_generation_next(g, &t), ENTROPIX_OK, "%s", entropix_error_last());
            strncat(text, t->text, t->text_len);
        }
        cr_assert_str_eq(text, " was a little");
        entropix_generation_end(g);
    }
    static Steps c;
    memset(&c, 0, sizeof c);
    gp.max_tokens = 100;
    const entropix_generate_result res = step_all(s, smp, prompt, 4, &gp, &c);
    cr_assert_eq(res.n_generated, 100);
    cr_assert_eq(c.n_tails, 0);
    cJSON *gold = ref_load_shared_json("testdata/stories260K/golden.json");
    const cJSON *p0 = cJSON_GetArrayItem(cJSON_GetObjectItem(gold, "prompts"), 0);
    char full[16500];
    snprintf(full, sizeof full, "Zoo%s", c.text);
    cr_assert_str_eq(full, cJSON_GetObjectItem(p0, "runc_stdout")->valuestring);  // llama2.c's 100 tokens
    cJSON_Delete(gold);
    entropix_sampler_free(smp);
    entropix_state_free(s);
    entropix_model_close(m);
}

// reuse_prefix: a second generation whose prompt continues the first's prompt and answer runs
// only what the cache lacks (result.n_cached: the first prompt and every answer token but the
// last, which was never fed) and gives a fresh state's text; a forward that rewrites a position
// cuts the reusable prefix there; a caller's struct that ends at `user` gets no reuse.
Test(api_step, reuse_prefix_runs_only_what_the_cache_lacks, .timeout = 120) {
    entropix_model *m = open_api("stories260K.f32.bin", 1);
    entropix_state *s = NULL, *fresh = NULL;
    entropix_sampler *smp = NULL;
    entropix_sampler_params sp;
    entropix_sampler_params_init(&sp, ENTROPIX_SAMPLER_GREEDY);
    cr_assert_eq(entropix_sampler_new(&sp, &smp), ENTROPIX_OK);
    cr_assert_eq(entropix_state_new(m, NULL, &s), ENTROPIX_OK);
    cr_assert_eq(entropix_state_new(m, NULL, &fresh), ENTROPIX_OK);
    int *a = NULL, *b = NULL, n_a = 0, n_b = 0;
    cr_assert_eq(entropix_prompt_tokens(m, "Once upon a time", 16, 0, NULL, &a, &n_a), ENTROPIX_OK);
    cr_assert_eq(entropix_prompt_tokens(m, "The end.", 8, 0, NULL, &b, &n_b), ENTROPIX_OK);
    entropix_generate_params gp;
    entropix_generate_params_init(&gp);
    gp.max_tokens = 20, gp.reuse_prefix = 1;
    static Steps c1, c2, c3;
    entropix_generate_result res = step_all(s, smp, a, n_a, &gp, &c1);
    cr_expect_eq(res.n_cached, 0, "a new state holds nothing");
    int prompt[256], n = 0;  // the first prompt, its answer, then more text (b without its BOS)
    memcpy(prompt, a, (size_t)n_a * sizeof *a), n = n_a;
    memcpy(prompt + n, c1.ids, (size_t)c1.n_tokens * sizeof *a), n += c1.n_tokens;
    memcpy(prompt + n, b + 1, (size_t)(n_b - 1) * sizeof *b), n += n_b - 1;
    res = step_all(s, smp, prompt, n, &gp, &c2);
    cr_expect_eq(res.n_cached, n_a + c1.n_tokens - 1, "held %d of the prompt", res.n_cached);
    cr_expect_eq(res.n_prompt, n);
    gp.reuse_prefix = 0;
    cr_expect_eq(step_all(fresh, smp, prompt, n, &gp, &c3).n_cached, 0);
    cr_expect_str_eq(c2.text, c3.text, "the reused prefix changed the text");
    // a forward rewriting position 2 with another id: the prefix ends there
    entropix_step st = {.size = sizeof st};
    const int other = prompt[2] == 5 ? 6 : 5;
    cr_assert_eq(entropix_forward(s, &other, 1, 2, &st), ENTROPIX_OK);
    gp.reuse_prefix = 1, gp.max_tokens = 4;
    cr_expect_eq(entropix_generate(s, smp, prompt, n, &gp, &res), ENTROPIX_OK);
    cr_expect_eq(res.n_cached, 2);
    cr_expect_eq(entropix_generate(s, smp, prompt, n, &gp, &res), ENTROPIX_OK);  // all held but the last, which runs
    cr_expect_eq(res.n_cached, n - 1, "held %d", res.n_cached);
    gp.size = offsetof(entropix_generate_params, reuse_prefix);  // an older caller's struct
    cr_expect_eq(entropix_generate(s, smp, prompt, n, &gp, &res), ENTROPIX_OK);
    cr_expect_eq(res.n_cached, 0);
    entropix_free(a), entropix_free(b);
    entropix_sampler_free(smp);
    entropix_state_free(s), entropix_state_free(fresh);
    entropix_model_close(m);
}
