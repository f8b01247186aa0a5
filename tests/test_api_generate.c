// test_api_generate.c — the public C API's generation and what ships with it: entropix_generate
// against llama2.c's text for stories260K (the testdata's run.c output) and against ./run's text
// for the same flags and seed (greedy, combined, entropix; the logit rules: penalties, logit
// bias, a grammar, a JSON schema), the callback's stop, a caller's own
// sampler, the tokenizer's calls (a decoder's buffer too small: the size needed, no byte lost),
// the shared library's exported symbols (entropix_* only), the
// header's functions each documented in docs/c-api.md, and `make install` used by an outside
// program through pkg-config (tests/api/install_test.sh).
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "include/entropix.h"
#include "api_test_util.h"
#include "run_util.h"
#include "test_ref_util.h"
#include "test_util.h"

typedef struct {
    char text[16384];
    size_t len;
    int n_tokens, stop_after, ids[1024];
    int n_cases, n_metrics;
    double logprob_sum;
} Collected;

static int collect(void *user, const entropix_token *t) {
    Collected *c = user;
    cr_assert_lt(c->len + t->text_len, sizeof c->text);
    memcpy(c->text + c->len, t->text, t->text_len);
    c->len += t->text_len;
    c->text[c->len] = 0;
    if (t->id < 0) return 0;  // the final flush
    cr_assert(t->logprob <= 1e-9, "logprob %g", t->logprob);
    if (t->n_top > 0) cr_assert(fabs(t->top_logprobs[0] - t->logprob) < 1e-5 || t->top_logprobs[0] >= t->logprob);
    c->logprob_sum += t->logprob;
    if (t->metrics) c->n_metrics++;
    if (t->entropix_case >= 0) {
        cr_assert_not_null(t->case_name);
        c->n_cases++;
    }
    if (c->n_tokens < 1024) c->ids[c->n_tokens] = t->id;
    c->n_tokens++;
    return c->stop_after > 0 && c->n_tokens >= c->stop_after;
}

// Generates from a raw prompt; returns the status.
static int api_generate(entropix_model *m, const char *prompt, const entropix_sampler_params *sp, int max_tokens, int ctx,
                        Collected *c, entropix_generate_result *res) {
    entropix_state_params stp;
    entropix_state_params_init(&stp);
    stp.ctx = ctx;
    entropix_state *s = NULL;
    cr_assert_eq(entropix_state_new(m, &stp, &s), ENTROPIX_OK, "%s", entropix_error_last());
    entropix_sampler *smp = NULL;
    cr_assert_eq(entropix_sampler_new(sp, &smp), ENTROPIX_OK, "%s", entropix_error_last());
    int *ids = NULL, n = 0;
    cr_assert_eq(entropix_prompt_tokens(m, prompt, strlen(prompt), 0, NULL, &ids, &n), ENTROPIX_OK, "%s",
                 entropix_error_last());
    entropix_generate_params gp;
    entropix_generate_params_init(&gp);
    gp.max_tokens = max_tokens;
    gp.n_top = 5;
    gp.on_token = collect;
    gp.user = c;
    res->size = sizeof *res;
    const int rc = entropix_generate(s, smp, ids, n, &gp, res);
    entropix_free(ids);
    entropix_sampler_free(smp);
    entropix_state_free(s);
    return rc;
}

// Greedy from "Zoo": the prompt and 100 tokens are llama2.c run.c's stdout, byte for byte.
Test(api_generate, greedy_is_llama2c_text, .timeout = 120) {
    entropix_model *m = open_api("stories260K.f32.bin", 1);
    cJSON *g = ref_load_shared_json("testdata/stories260K/golden.json");
    const cJSON *p = cJSON_GetArrayItem(cJSON_GetObjectItem(g, "prompts"), 0);
    cr_assert_str_eq(cJSON_GetObjectItem(p, "prompt")->valuestring, "Zoo");
    entropix_sampler_params sp;
    entropix_sampler_params_init(&sp, ENTROPIX_SAMPLER_GREEDY);
    static Collected c;
    memset(&c, 0, sizeof c);
    entropix_generate_result res;
    cr_assert_eq(api_generate(m, "Zoo", &sp, 100, 256, &c, &res), ENTROPIX_OK, "%s", entropix_error_last());
    char full[16500];
    snprintf(full, sizeof full, "Zoo%s", c.text);
    cr_assert_str_eq(full, cJSON_GetObjectItem(p, "runc_stdout")->valuestring);
    cr_assert_eq(res.n_prompt, 4);
    cr_assert_eq(res.n_generated, 100);
    cr_assert_eq(res.stop, ENTROPIX_STOP_MAX_TOKENS);
    int n_gold;
    int *gold = ref_json_ints(cJSON_GetObjectItem(p, "greedy_ids_numpy"), &n_gold);
    for (int i = 0; i < n_gold; i++) cr_assert_eq(c.ids[i], gold[i], "token %d", i);
    free(gold);
    cJSON_Delete(g);
    entropix_model_close(m);
}

// ./run's stdout for the same flags: --raw echoes the prompt, then the text.
static void expect_run_text(const char *model, const char *prompt, const char *const *flags, const entropix_sampler_params *sp,
                            int n) {
    char path[512], rel[256], nbuf[16];
    snprintf(rel, sizeof rel, "models/%s", model);
    test_build_path(path, sizeof path, rel);
    snprintf(nbuf, sizeof nbuf, "%d", n);
    const char *args[32] = {path, "--raw", "-p", prompt, "-n", nbuf, "-t", "1", "-c", "256"};
    int k = 10;
    for (int i = 0; flags[i]; i++) args[k++] = flags[i];
    args[k] = NULL;
    RunResult r = run(args);
    cr_assert_eq(r.code, 0, "%s", r.err);
    entropix_model *m = open_api(model, 1);
    static Collected c;
    memset(&c, 0, sizeof c);
    entropix_generate_result res;
    cr_assert_eq(api_generate(m, prompt, sp, n, 256, &c, &res), ENTROPIX_OK, "%s", entropix_error_last());
    char full[16500];
    snprintf(full, sizeof full, "%s%s\n", prompt, c.text);  // ./run ends with a newline
    cr_assert_str_eq(full, r.out, "%s %s", model, flags[1]);
    if (sp->kind == ENTROPIX_SAMPLER_ENTROPIX) cr_assert_eq(c.n_cases, c.n_tokens);
    fprintf(stderr, "api_generate %s %s: %d tokens equal ./run's (mean logprob %.3f)\n", model, flags[1], c.n_tokens,
            c.logprob_sum / c.n_tokens);
    run_free(&r);
    entropix_model_close(m);
}

Test(api_generate, same_text_as_run_stories260K, .timeout = 300) {
    entropix_sampler_params sp;
    entropix_sampler_params_init(&sp, ENTROPIX_SAMPLER_GREEDY);
    expect_run_text("stories260K.f32.bin", "Once upon a time", (const char *[]){"--sampler", "greedy", NULL}, &sp, 60);
    entropix_sampler_params_init(&sp, ENTROPIX_SAMPLER_COMBINED);
    sp.seed = 42, sp.temperature = 1.0f;
    expect_run_text("stories260K.f32.bin", "Once upon a time",
                    (const char *[]){"--sampler", "combined", "-s", "42", "--temp", "1.0", NULL}, &sp, 60);
    entropix_sampler_params_init(&sp, ENTROPIX_SAMPLER_ENTROPIX);
    sp.seed = 7;
    expect_run_text("stories260K.f32.bin", "The dog", (const char *[]){"--sampler", "entropix", "-s", "7", NULL}, &sp, 60);
}

Test(api_generate, same_text_as_run_qwen3_tiny, .timeout = 300) {
    entropix_sampler_params sp;
    entropix_sampler_params_init(&sp, ENTROPIX_SAMPLER_COMBINED);
    sp.seed = 3, sp.temperature = 0.9f, sp.top_k = 20;
    expect_run_text("qwen3-tiny.f32.bin", "The capital of France is",
                    (const char *[]){"--sampler", "combined", "-s", "3", "--temp", "0.9", "--top-k", "20", NULL}, &sp, 24);
}

// The sampler's logit rules give ./run's text for the flags of the same names.
Test(api_generate, logit_rules_same_text_as_run, .timeout = 300) {
    entropix_sampler_params sp;
    entropix_sampler_params_init(&sp, ENTROPIX_SAMPLER_COMBINED);
    sp.seed = 5, sp.temperature = 0.9f;
    sp.repeat_penalty = 1.3f, sp.repeat_last_n = 32, sp.presence_penalty = 0.5f, sp.frequency_penalty = 0.25f;
    const int ids[] = {13, 29};
    const float bias[] = {-INFINITY, 2.5f};
    sp.logit_bias_ids = ids, sp.logit_bias = bias, sp.n_logit_bias = 2;
    expect_run_text("stories260K.f32.bin", "Once upon a time",
                    (const char *[]){"--sampler", "combined", "-s", "5", "--temp", "0.9", "--repeat-penalty", "1.3",
                                     "--repeat-last-n", "32", "--presence-penalty", "0.5", "--frequency-penalty", "0.25",
                                     "-l", "13-inf", "-l", "29+2.5", NULL},
                    &sp, 60);
    entropix_sampler_params_init(&sp, ENTROPIX_SAMPLER_GREEDY);
    sp.grammar = "root ::= \" Tom\" [a-z ]{1,24} \".\"";
    expect_run_text("stories260K.f32.bin", "Once upon a time", (const char *[]){"--sampler", "greedy", "--grammar",
                                                                               sp.grammar, NULL}, &sp, 60);
    entropix_sampler_params_init(&sp, ENTROPIX_SAMPLER_ENTROPIX);
    sp.seed = 9;
    sp.json_schema = "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\", \"maxLength\": 12}, "
                     "\"age\": {\"type\": \"integer\"}}, \"required\": [\"name\", \"age\"]}";
    expect_run_text("stories260K.f32.bin", "The dog", (const char *[]){"--sampler", "entropix", "-s", "9", "-j",
                                                                      sp.json_schema, NULL}, &sp, 60);
}

// One model, grammars in several threads: the model's token trie is made by the first generation
// that needs it and then shared, read-only. Two threads generate at once, each with its own state
// and sampler; each text equals the one generated alone, before and after.
typedef struct {
    entropix_model *m;
    const char *grammar;
    char text[2048];
    size_t len;
    int rc;
} GrammarThread;

static int append_text(void *user, const entropix_token *t) {  // no assertion: not Criterion's thread
    GrammarThread *g = user;
    if (g->len + t->text_len < sizeof g->text) memcpy(g->text + g->len, t->text, t->text_len), g->len += t->text_len;
    g->text[g->len] = 0;
    return 0;
}

static void *grammar_thread(void *arg) {
    GrammarThread *g = arg;
    entropix_state *s = NULL;
    entropix_sampler *smp = NULL;
    entropix_sampler_params sp;
    entropix_sampler_params_init(&sp, ENTROPIX_SAMPLER_GREEDY);
    sp.grammar = g->grammar;
    int *ids = NULL, n = 0;
    g->len = 0, g->text[0] = 0;
    if ((g->rc = entropix_state_new(g->m, NULL, &s)) == ENTROPIX_OK &&
        (g->rc = entropix_sampler_new(&sp, &smp)) == ENTROPIX_OK &&
        (g->rc = entropix_prompt_tokens(g->m, "Once upon a time", 16, 0, NULL, &ids, &n)) == ENTROPIX_OK) {
        entropix_generate_params gp;
        entropix_generate_params_init(&gp);
        gp.max_tokens = 40, gp.on_token = append_text, gp.user = g;
        entropix_generate_result res = {.size = sizeof res};
        g->rc = entropix_generate(s, smp, ids, n, &gp, &res);
    }
    entropix_free(ids);
    entropix_sampler_free(smp);
    entropix_state_free(s);
    return NULL;
}

Test(api_generate, grammar_model_shared_by_threads, .timeout = 300) {
    entropix_model *m = open_api("stories260K.f32.bin", 1);
    GrammarThread alone = {.m = m, .grammar = "root ::= \" Tom\" [a-z ]{1,24} \".\""}, after = alone, t[2] = {alone, alone};
    grammar_thread(&alone);
    cr_assert_eq(alone.rc, ENTROPIX_OK, "%s", entropix_error_last());
    cr_assert(alone.len > 5 && !strncmp(alone.text, " Tom", 4) && alone.text[alone.len - 1] == '.', "[%s]", alone.text);
    pthread_t th[2];
    for (int i = 0; i < 2; i++) cr_assert_eq(pthread_create(&th[i], NULL, grammar_thread, &t[i]), 0);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    grammar_thread(&after);
    for (int i = 0; i < 2; i++) {
        cr_expect_eq(t[i].rc, ENTROPIX_OK, "thread %d: status %d", i, t[i].rc);
        cr_expect_str_eq(t[i].text, alone.text, "thread %d", i);
    }
    cr_expect_str_eq(after.text, alone.text);
    entropix_model_close(m);
}

// A struct that ends before the rules (an older caller's) gets none and is not read past its
// size; bad rules fail with their reason: at entropix_sampler_new, or (an id past the
// vocabulary) at the generation.
Test(api_generate, logit_rules_checked_and_absent_from_older_structs, .timeout = 60) {
    entropix_sampler_params full;
    entropix_sampler_params_init(&full, ENTROPIX_SAMPLER_GREEDY);
    const size_t old = offsetof(entropix_sampler_params, grammar);
    unsigned char *first = malloc(old);  // exactly the first version's bytes (ASan: no read past)
    full.size = old;
    memcpy(first, &full, old);
    full.size = sizeof full;
    entropix_sampler *smp = NULL;
    cr_expect_eq(entropix_sampler_new((const entropix_sampler_params *)(void *)first, &smp), ENTROPIX_OK, "%s",
                 entropix_error_last());
    entropix_sampler_free(smp);
    free(first);
    const struct {
        const char *grammar, *schema;
        float repeat, presence;
        int n_bias;
        const char *why;
    } bad[] = {{"root ::= (", NULL, 1, 0, 0, "grammar: 1:"}, {"root ::= \"a\"", "{}", 1, 0, 0, "give one of them"},
               {NULL, "{\"type\": 7}", 1, 0, 0, "json schema"}, {NULL, NULL, 0, 0, 0, "repeat_penalty 0"},
               {NULL, NULL, 1, 2.5f, 0, "presence_penalty 2.5"}, {NULL, NULL, 1, 0, 301, "n_logit_bias 301"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        entropix_sampler_params sp = full;
        sp.grammar = bad[i].grammar, sp.json_schema = bad[i].schema, sp.repeat_penalty = bad[i].repeat;
        sp.presence_penalty = bad[i].presence, sp.n_logit_bias = bad[i].n_bias;
        cr_expect_eq(entropix_sampler_new(&sp, &smp), ENTROPIX_ERR_ARGUMENT, "case %zu", i);
        cr_expect(strstr(entropix_error_last(), bad[i].why), "case %zu: [%s]", i, entropix_error_last());
    }
    entropix_model *m = open_api("stories260K.f32.bin", 1);
    const int far[] = {9999};
    const float minus[] = {-1.0f};
    full.logit_bias_ids = far, full.logit_bias = minus, full.n_logit_bias = 1;
    static Collected c;
    memset(&c, 0, sizeof c);
    entropix_generate_result res;
    cr_expect_eq(api_generate(m, "Zoo", &full, 4, 64, &c, &res), ENTROPIX_ERR_ARGUMENT);
    cr_expect(strstr(entropix_error_last(), "token 9999 is not in the vocabulary"), "[%s]", entropix_error_last());
    entropix_model_close(m);
}

// The callback's non-zero return stops the run after that token; a status of OK.
Test(api_generate, callback_stops, .timeout = 60) {
    entropix_model *m = open_api("stories260K.f32.bin", 1);
    entropix_sampler_params sp;
    entropix_sampler_params_init(&sp, ENTROPIX_SAMPLER_GREEDY);
    static Collected c;
    memset(&c, 0, sizeof c);
    c.stop_after = 3;
    entropix_generate_result res;
    cr_assert_eq(api_generate(m, "Zoo", &sp, 50, 64, &c, &res), ENTROPIX_OK, "%s", entropix_error_last());
    cr_assert_eq(c.n_tokens, 3);
    cr_assert_eq(res.stop, ENTROPIX_STOP_CALLBACK);
    cr_assert_str_eq(c.text, " was a little");  // llama2.c's text after "Zoo": three tokens
    entropix_model_close(m);
}

typedef struct {
    int calls;
    int metrics_seen;
} Argmax;

static int choose_argmax(void *user, const float *logits, int n_vocab, const entropix_metrics *mt, int pos) {
    Argmax *a = user;
    (void)pos;
    a->calls++;
    if (mt && mt->logits_entropy >= 0 && mt->attn_entropy > 0) a->metrics_seen++;
    int best = 0;
    for (int i = 1; i < n_vocab; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

// A caller's argmax as the sampler gives the built-in greedy's tokens (llama2.c's).
Test(api_generate, custom_sampler_argmax_is_greedy, .timeout = 60) {
    entropix_model *m = open_api("stories260K.f32.bin", 1);
    entropix_state *s = NULL;
    cr_assert_eq(entropix_state_new(m, NULL, &s), ENTROPIX_OK, "%s", entropix_error_last());
    Argmax a = {0};
    entropix_sampler *smp = NULL;
    cr_assert_eq(entropix_sampler_new_custom(choose_argmax, &a, &smp), ENTROPIX_OK);
    const int prompt[] = {1, 410, 469, 347};  // "Zoo"
    static Collected c;
    memset(&c, 0, sizeof c);
    entropix_generate_params gp;
    entropix_generate_params_init(&gp);
    gp.max_tokens = 40, gp.on_token = collect, gp.user = &c;
    cr_assert_eq(entropix_generate(s, smp, prompt, 4, &gp, NULL), ENTROPIX_OK, "%s", entropix_error_last());
    cr_assert_eq(a.calls, 40);
    cr_assert_eq(a.metrics_seen, 40);
    cJSON *g = ref_load_shared_json("testdata/stories260K/golden.json");
    int n_gold;
    int *gold = ref_json_ints(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(g, "prompts"), 0), "greedy_ids_numpy"),
                              &n_gold);
    for (int i = 0; i < 40; i++) cr_assert_eq(c.ids[i], gold[i], "token %d", i);
    free(gold);
    cJSON_Delete(g);
    entropix_sampler_free(smp);
    entropix_state_free(s);
    entropix_model_close(m);
}

// The tokenizer's calls against the testdata's llama2.c encodings and Qwen3's special tokens.
Test(api_generate, tokenizer, .timeout = 60) {
    entropix_model *m = open_api("stories260K.f32.bin", 1);
    const entropix_tokenizer *tk = entropix_model_tokenizer(m);
    int ids[16];
    size_t n = 0;
    cr_assert_eq(entropix_tokenize(tk, "Zoo", 3, ENTROPIX_TOKENIZE_BOS, ids, 16, &n), ENTROPIX_OK);
    cr_assert_eq(n, 4);
    cr_assert(ids[0] == 1 && ids[1] == 410 && ids[2] == 469 && ids[3] == 347);
    cr_assert_eq(entropix_token_bos(tk), 1);
    cr_assert_eq(entropix_tokenizer_vocab_size(tk), 512);
    entropix_decoder *d = NULL;
    cr_assert_eq(entropix_decoder_new(tk, 1, &d), ENTROPIX_OK);
    char out[256], text[64] = "";
    size_t got = 0, len = 0;
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(entropix_decoder_push(d, ids[i], out, sizeof out, &got), ENTROPIX_OK);
        memcpy(text + len, out, got);
        len += got;
    }
    cr_assert_eq(entropix_decoder_flush(d, out, sizeof out, &got), ENTROPIX_OK);
    text[len + got] = 0;
    cr_assert_str_eq(text, "Zoo");  // the leading space after BOS dropped, as run.c
    entropix_decoder_free(d);
    entropix_model_close(m);

    m = open_api("qwen3-tiny.f32.bin", 1);
    tk = entropix_model_tokenizer(m);
    cr_assert_eq(entropix_token_find(tk, "<|im_end|>"), 151645);
    cr_assert(entropix_token_is_stop(tk, 151645));
    int stops[8];
    const int n_stop = entropix_token_stops(tk, stops, 8);
    cr_assert_geq(n_stop, 1);
    entropix_message msgs[] = {{"user", "Hi"}};
    char *rendered = NULL;
    cr_assert_eq(entropix_chat_render(m, msgs, 1, NULL, &rendered), ENTROPIX_OK, "%s", entropix_error_last());
    cr_assert_str_eq(rendered, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");  // Qwen3's template
    int *cids = NULL, n_c = 0;
    cr_assert_eq(entropix_chat_tokens(m, msgs, 1, NULL, &cids, &n_c), ENTROPIX_OK);
    cr_assert_eq(cids[0], 151644);  // <|im_start|>, one token
    entropix_free(cids);
    entropix_free(rendered);
    entropix_model_close(m);
}

// A push or flush whose text does not fit cap: ENTROPIX_ERR_BUFFER with the size needed in n,
// nothing written and the decoder as it was, so that the same call with that size gives every
// byte (the text was cut at cap and the rest lost: " ha" at cap 0, "S" of " S" at cap 1).
Test(api_generate, decoder_buffer_too_small, .timeout = 60) {
    entropix_model *m = open_api("stories260K.f32.bin", 1);
    const entropix_tokenizer *tk = entropix_model_tokenizer(m);
    char piece[8], out[64];
    size_t n = 0;
    const int ha = 300, s_ = 301, e2 = 229;  // " ha", " S", <0xE2>: the first byte of a 3-byte character
    cr_assert(!entropix_token_piece(tk, ha, piece, sizeof piece, &n) && n == 3 && !memcmp(piece, " ha", 3));
    cr_assert(!entropix_token_piece(tk, s_, piece, sizeof piece, &n) && n == 2 && !memcmp(piece, " S", 2));
    cr_assert(!entropix_token_piece(tk, e2, piece, sizeof piece, &n) && n == 1 && piece[0] == '\xE2');
    entropix_decoder *d = NULL;
    cr_assert_eq(entropix_decoder_new(tk, 1, &d), ENTROPIX_OK);
    memset(out, '#', sizeof out);
    cr_assert_eq(entropix_decoder_push(d, ha, out, 0, &n), ENTROPIX_ERR_BUFFER);
    cr_assert_eq(n, 3);
    cr_assert(strstr(entropix_error_last(), "3 bytes do not fit a buffer of 0"), "%s", entropix_error_last());
    cr_assert_eq(entropix_decoder_push(d, ha, NULL, 0, &n), ENTROPIX_ERR_BUFFER);  // NULL, 0: the size alone
    cr_assert_eq(n, 3);
    cr_assert_eq(entropix_decoder_push(d, ha, out, 3, &n), ENTROPIX_OK, "%s", entropix_error_last());
    cr_assert_eq(n, 3);
    cr_assert_eq(entropix_decoder_push(d, s_, out + 3, 1, &n), ENTROPIX_ERR_BUFFER);
    cr_assert_eq(n, 2);
    cr_assert_eq(out[3], '#');  // nothing written
    cr_assert_eq(entropix_decoder_push(d, s_, out + 3, 2, &n), ENTROPIX_OK, "%s", entropix_error_last());
    cr_assert_eq(n, 2);
    // A held byte survives a refused push: " ha" after it releases U+FFFD and " ha", 6 bytes.
    cr_assert_eq(entropix_decoder_push(d, e2, out + 5, 0, &n), ENTROPIX_OK);  // held: nothing to write
    cr_assert_eq(n, 0);
    cr_assert_eq(entropix_decoder_push(d, ha, out + 5, 5, &n), ENTROPIX_ERR_BUFFER);
    cr_assert_eq(n, 6);
    cr_assert_eq(entropix_decoder_push(d, ha, out + 5, 6, &n), ENTROPIX_OK, "%s", entropix_error_last());
    cr_assert_eq(n, 6);
    // And a refused flush: the held byte is still there for the next one.
    cr_assert_eq(entropix_decoder_push(d, e2, out + 11, 0, &n), ENTROPIX_OK);
    cr_assert_eq(entropix_decoder_flush(d, out + 11, 2, &n), ENTROPIX_ERR_BUFFER);
    cr_assert_eq(n, 3);
    cr_assert_eq(out[11], '#');
    cr_assert_eq(entropix_decoder_flush(d, out + 11, 3, &n), ENTROPIX_OK, "%s", entropix_error_last());
    cr_assert_eq(n, 3);
    cr_assert_eq(entropix_decoder_flush(d, NULL, 0, &n), ENTROPIX_OK);  // nothing held any more
    cr_assert_eq(n, 0);
    out[14] = 0;
    cr_assert_str_eq(out, " ha S\xEF\xBF\xBD ha\xEF\xBF\xBD");
    entropix_decoder_free(d);
    entropix_model_close(m);
}

// The shared library exports the API and nothing else.
Test(api_generate, exports_only_entropix_symbols, .timeout = 60) {
    char lib[512];
    test_build_path(lib, sizeof lib, "lib/libentropix.so.0.1.0");
    const char *args[] = {"-D", "--defined-only", lib, NULL};
    RunResult r = run_prog("/usr/bin/nm", args);
    cr_assert_eq(r.code, 0, "%s", r.err);
    int n = 0;
    for (char *line = strtok(r.out, "\n"); line; line = strtok(NULL, "\n")) {
        char addr[64], type[8], name[256];
        cr_assert_eq(sscanf(line, "%63s %7s %255s", addr, type, name), 3, "%s", line);
        if (!strcmp(type, "A")) continue;  // the version node (ENTROPIX_0), not a symbol
        cr_assert(!strncmp(name, "entropix_", 9), "exported: %s", name);
        n++;
    }
    cr_assert_geq(n, 40);
    run_free(&r);
}

// Every function include/entropix.h declares is named in docs/c-api.md.
Test(api_generate, every_function_documented) {
    char *h = test_read_file("include/entropix.h", NULL), *doc = test_read_file("docs/c-api.md", NULL);
    cr_assert(h && doc);
    int n = 0;
    for (char *p = strstr(h, "ENTROPIX_API "); p; p = strstr(p + 1, "ENTROPIX_API ")) {
        if (p > h && p[-1] != '\n') continue;  // a declaration starts its line (not the #define)
        char *paren = strchr(p, '(');
        if (!paren || strchr(p, ';') < paren) continue;
        char *name = paren;  // the identifier just before the parenthesis
        while (name > p && (isalnum((unsigned char)name[-1]) || name[-1] == '_')) name--;
        char fn[128];
        size_t len = (size_t)(paren - name);
        cr_assert(len > 9 && len < sizeof fn && !strncmp(name, "entropix_", 9), "%.60s", p);
        memcpy(fn, name, len);
        fn[len] = 0;
        char ref[140];
        snprintf(ref, sizeof ref, "%s(", fn);
        cr_expect(strstr(doc, ref), "docs/c-api.md does not document %s", fn);
        n++;
    }
    cr_assert_geq(n, 40);
    free(h);
    free(doc);
}

// The agent pool through the API (entropix_generate_agents) prints ./run --sampler agents's text
// for the same agents, lookahead, workers and seed; the callback's stop ends it after its round.
static void expect_agents_text(int n_agents, int lookahead, int workers, uint64_t seed) {
    char model[512], na[16], la[16], wk[16], sd[32];
    test_build_path(model, sizeof model, "models/stories260K.f32.bin");
    snprintf(na, sizeof na, "%d", n_agents), snprintf(la, sizeof la, "%d", lookahead), snprintf(wk, sizeof wk, "%d", workers);
    snprintf(sd, sizeof sd, "%llu", (unsigned long long)seed);
    const char *args[] = {model, "--raw", "-p", "Once upon a time", "-n", "40", "-t", "2", "-c", "256", "--sampler",
                          "agents", "--agents", na, "--lookahead", la, "--workers", wk, "-s", sd, NULL};
    RunResult r = run(args);
    cr_assert_eq(r.code, 0, "%s", r.err);
    entropix_model *m = open_api("stories260K.f32.bin", 1);
    int *ids = NULL, n = 0;
    cr_assert_eq(entropix_prompt_tokens(m, "Once upon a time", 16, 0, NULL, &ids, &n), ENTROPIX_OK);
    entropix_agents_params ap;
    entropix_agents_params_init(&ap);
    ap.n_agents = n_agents, ap.lookahead = lookahead, ap.workers = workers, ap.threads = 2, ap.ctx = 256, ap.seed = seed;
    entropix_generate_params gp;
    entropix_generate_params_init(&gp);
    static Collected c;
    memset(&c, 0, sizeof c);
    gp.max_tokens = 40, gp.n_top = 3, gp.on_token = collect, gp.user = &c;
    entropix_generate_result res = {.size = sizeof res};
    cr_assert_eq(entropix_generate_agents(m, &ap, ids, n, &gp, &res), ENTROPIX_OK, "%s", entropix_error_last());
    char full[16500];
    snprintf(full, sizeof full, "Once upon a time%s\n", c.text);
    cr_assert_str_eq(full, r.out, "agents %d lookahead %d workers %d", n_agents, lookahead, workers);
    cr_assert_eq(c.n_tokens, res.n_generated);
    cr_assert_eq(c.n_metrics, c.n_tokens);
    fprintf(stderr, "api agents %d, lookahead %d, workers %d: %d tokens equal ./run's\n", n_agents, lookahead, workers,
            c.n_tokens);
    memset(&c, 0, sizeof c);
    c.stop_after = 5;
    cr_assert_eq(entropix_generate_agents(m, &ap, ids, n, &gp, &res), ENTROPIX_OK, "%s", entropix_error_last());
    cr_assert_eq(res.stop, ENTROPIX_STOP_CALLBACK);
    cr_assert_eq(c.n_tokens, 5);
    entropix_free(ids);
    run_free(&r);
    entropix_model_close(m);
}

Test(api_generate, agents_same_text_as_run, .timeout = 300) {
    expect_agents_text(8, 1, 1, 5);
    expect_agents_text(4, 3, 2, 9);
}

// The API on the CUDA backend: examples/c/generate.c linked with the emulated backend
// ($(EMU_OUT)/api/generate beside $EMX_GPU_RUN, api/api.mk) with -dev cuda:0 prints the emulated
// ./run's text for the same flags, greedy and a seeded combined sampler, and says it ran there.
Test(api_generate, cuda_emulated_same_text_as_run, .timeout = 900) {
    const char *gpu_run = gpu_run_binary();
    char api_bin[1024], model[512];
    snprintf(api_bin, sizeof api_bin, "%.*s/api/generate", (int)(strrchr(gpu_run, '/') ? strrchr(gpu_run, '/') - gpu_run : 1),
             strrchr(gpu_run, '/') ? gpu_run : ".");
    if (access(api_bin, X_OK) != 0) cr_skip_test("%s missing (make %s builds it beside the emulated ./run)", api_bin, api_bin);
    test_build_path(model, sizeof model, "models/stories260K.f32.bin");
    const char *samplers[][6] = {{"--sampler", "greedy", NULL}, {"--sampler", "combined", "-s", "42", "--temp", "1.0"}};
    for (int k = 0; k < 2; k++) {
        const char *ra[24] = {model, "--raw", "-p", "Once upon a time", "-n", "24", "-t", "1", "-c", "256", "-dev", "cuda:0"};
        const char *ga[24] = {model, "Once upon a time", "-n", "24", "-t", "1", "-c", "256", "-dev", "cuda:0"};
        int nr = 12, ng = 10;
        for (int i = 0; i < 6 && samplers[k][i]; i++) ra[nr++] = ga[ng++] = samplers[k][i];
        RunResult r = run_prog(gpu_run, ra), g = run_prog(api_bin, ga);
        cr_assert_eq(r.code, 0, "%s", r.err);
        cr_assert_eq(g.code, 0, "%s", g.err);
        cr_assert(strstr(g.err, "generated on cuda:0"), "%s", g.err);
        cr_assert_str_eq(g.out, r.out, "%s", samplers[k][1]);
        fprintf(stderr, "api on emulated cuda:0, %s: %zu bytes equal the emulated ./run's\n", samplers[k][1], g.out_len);
        run_free(&r);
        run_free(&g);
    }
}

// make install into a temporary prefix, an outside program built with pkg-config against it,
// its text equal to ./run's (tests/api/install_test.sh says each step), make uninstall.
Test(api_generate, install_and_pkg_config, .timeout = 600) {
    char build[512], models[512];
    snprintf(build, sizeof build, "%s", getenv("EMX_BUILD") && *getenv("EMX_BUILD") ? getenv("EMX_BUILD") : "build");
    test_build_path(models, sizeof models, "models");
    // A sanitized library (make test-asan) needs its runtime in the program that loads it.
    const char *args[] = {"tests/api/install_test.sh", build, run_binary(), models,
                          EMX_TEST_SANITIZED ? "-fsanitize=address,undefined" : "", NULL};
    RunResult r = run_prog("/bin/bash", args);
    cr_assert_eq(r.code, 0, "install test failed:\n%s\n%s", r.out, r.err);
    cr_assert(strstr(r.out, "install test: ok"), "%s", r.out);
    fprintf(stderr, "%s", r.out);
    run_free(&r);
}

// The shared library's emulated twin ($(EMU_OUT)/lib/libentropix.so.0, api/api.mk: the API, the
// runtime and the CUDA backend on the emulation layer, position-independent) loaded by
// examples/c/generate.c: on cuda:0 it prints the CPU ./run's text for the tiny models, through the
// callback and step by step.
Test(api_generate, cuda_emulated_shared_library_same_text_as_cpu, .timeout = 900) {
    const char *gpu_run = gpu_run_binary();
    char so_bin[1024];
    snprintf(so_bin, sizeof so_bin, "%.*s/api/generate_shared",
             (int)(strrchr(gpu_run, '/') ? strrchr(gpu_run, '/') - gpu_run : 1), strrchr(gpu_run, '/') ? gpu_run : ".");
    if (access(so_bin, X_OK) != 0) cr_skip_test("%s missing (make %s builds it beside the emulated ./run)", so_bin, so_bin);
    const char *const models[][2] = {{"stories260K.f32.bin", "Once upon a time"}, {"qwen3-tiny.f32.bin", "Hello"},
                                     {"llama3-tiny.f32.bin", "The capital of France is"}};
    for (int k = 0; k < 3; k++) {
        char model[512], rel[256];
        snprintf(rel, sizeof rel, "models/%s", models[k][0]);
        test_build_path(model, sizeof model, rel);
        const char *ra[] = {model, "--raw", "-p", models[k][1], "-n", "16", "-t", "1", "-c", "128", "--sampler", "greedy",
                            "--device", "cpu", NULL};
        RunResult r = run(ra);
        cr_assert_eq(r.code, 0, "%s", r.err);
        for (int steps = 0; steps < 2; steps++) {
            const char *ga[] = {model, models[k][1], "-n", "16", "-t", "1", "-c", "128", "-dev", "cuda:0", "--steps",
                                steps ? "1" : "0", NULL};
            RunResult g = run_prog(so_bin, ga);
            cr_assert_eq(g.code, 0, "%s", g.err);
            cr_assert(strstr(g.err, "16 generated on cuda:0"), "%s", g.err);
            cr_assert_str_eq(g.out, r.out, "%s, steps %d", models[k][0], steps);
            run_free(&g);
        }
        fprintf(stderr, "api shared library on emulated cuda:0, %s: %zu bytes equal the CPU ./run's (callback, steps)\n",
                models[k][0], r.out_len);
        run_free(&r);
    }
}
