// test_generate_cached.c — EmxGenerateOptions.n_cached: the prompt's positions 0..n-2 run once,
// then several generations each run only the last prompt token (what tools/eval does per item).
// Their ids must be bitwise those of a generation that prefills the whole prompt, for greedy,
// entropix and a seeded sampler, on f32 and quantised models, on the CPU.
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/cli/cli_args.h"
#include "runtime/cli/run_setup.h"
#include "runtime/forward.h"
#include "runtime/generate.h"
#include "runtime/model.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

#define N_GEN 24

typedef struct {
    EmxModel m;
    EmxTokenizer *tk;
    EmxState *st;
    int *ids, n_ids;
} Setup;

static void setup_open(Setup *s, const char *rel, const char *prompt) {
    char p[512], err[512];
    test_build_path(p, sizeof p, rel);
    if (access(p, R_OK) != 0) cr_assert_fail("%s is missing: convert it with `make test-models`", p);
    cr_assert_eq(emx_model_open(&s->m, p, err, sizeof err), 0, "%s", err);
    s->tk = emx_tokenizer_new(&s->m.tok, err, sizeof err);
    cr_assert(s->tk, "%s", err);
    s->st = emx_state_new(&s->m, &(EmxStateOptions){.n_threads = 1, .ctx = 0}, err, sizeof err);
    cr_assert(s->st, "%s", err);
    EmxPromptSpec ps = {.text = prompt, .len = strlen(prompt)};
    cr_assert_eq(emx_prompt_ids(&s->m, s->tk, &ps, &s->ids, &s->n_ids, err, sizeof err), 0, "%s", err);
    cr_assert(s->n_ids >= 3, "the prompt must be several tokens (%d)", s->n_ids);
}

static void setup_close(Setup *s) {
    free(s->ids);
    emx_state_free(s->st);
    emx_tokenizer_free(s->tk);
    emx_model_close(&s->m);
}

// One generation with ./run's sampler for `flags` and `seed`; n_cached as given. Returns the
// number of ids (out[N_GEN]); stats->n_prompt in *n_prompt.
static int gen(Setup *s, const char *const *flags, uint64_t seed, int n_cached, int *out, int *n_prompt) {
    const char *argv[16] = {"run", "m.bin"};
    int argc = 2;
    for (int i = 0; flags[i]; i++) argv[argc++] = flags[i];
    EmxCliArgs a;
    char err[512];
    cr_assert_eq(emx_cli_parse(argc, (char **)argv, &a, err, sizeof err), 0, "%s", err);
    EmxProfile prof;
    cr_assert_eq(emx_run_build_profile(&a, &prof, err, sizeof err), 0, "%s", err);
    EmxRunSampler rs = {0};
    cr_assert_eq(emx_run_sampler_init(&rs, &a, &prof, &s->m, s->tk, emx_state_ctx(s->st), seed, 0, err, sizeof err), 0,
                 "%s", err);
    EmxGenerateOptions go = {.n_predict = N_GEN, .ids_out = out, .ids_cap = N_GEN, .n_cached = n_cached};
    EmxGenerateStats stats;
    cr_assert_eq(emx_generate(s->st, s->tk, s->ids, s->n_ids, rs.sampler, &go, &stats, err, sizeof err), 0, "%s", err);
    emx_run_sampler_free(&rs);
    *n_prompt = stats.n_prompt;
    return stats.n_generated;
}

// For each sampler: the full-prefill ids first (which leaves positions 0..n-2 in the cache as
// they are after a prefill), then the prefix prefilled on its own, then each sampler again from
// that cache, in another order, so every cached generation follows a different generation.
static void same_ids_with_cache(const char *model, const char *prompt) {
    Setup s;
    setup_open(&s, model, prompt);
    const char *const samplers[][8] = {{"--sampler", "greedy", NULL},
                                       {"--sampler", "entropix", NULL},
                                       {"--sampler", "combined", "--temp", "1.0", "--top-k", "40", NULL}};
    const uint64_t seeds[] = {0, 7, 3};
    int want[3][N_GEN], n_want[3], got[N_GEN], n_prompt;
    for (int k = 0; k < 3; k++) {
        n_want[k] = gen(&s, samplers[k], seeds[k], 0, want[k], &n_prompt);
        cr_expect_eq(n_prompt, s.n_ids);
    }
    // the shared prefix, as tools/eval runs it: positions 0..n-2 once
    cr_assert(emx_forward(s.st, s.ids, s.n_ids - 1, 0));
    for (int k = 2; k >= 0; k--) {
        const int n = gen(&s, samplers[k], seeds[k], s.n_ids - 1, got, &n_prompt);
        cr_expect_eq(n_prompt, 1, "stats.n_prompt counts what ran");
        cr_expect_eq(n, n_want[k], "%s %s: %d tokens with the cache, %d without", model, samplers[k][1], n, n_want[k]);
        cr_expect_arr_eq(got, want[k], sizeof(int) * (size_t)(n < n_want[k] ? n : n_want[k]),
                         "%s %s: the ids differ with n_cached", model, samplers[k][1]);
    }
    // a cache that holds only the start (another prompt shared it): the rest of the prefix runs
    // from there, as its own batch, and the ids are still the same
    const int half = (s.n_ids - 1) / 2;
    cr_assert(emx_forward(s.st, s.ids, half, 0));
    cr_assert(emx_forward(s.st, s.ids + half, s.n_ids - 1 - half, half));
    const int n = gen(&s, samplers[1], seeds[1], s.n_ids - 1, got, &n_prompt);
    cr_expect(n == n_want[1] && memcmp(got, want[1], sizeof(int) * (size_t)n) == 0,
              "%s: the ids differ when the prefix ran in two batches", model);
    setup_close(&s);
}

Test(generate_cached, same_ids_stories260K_f32, .timeout = 300) {
    same_ids_with_cache("models/stories260K.f32.bin", "Once upon a time, there was a little girl named");
}

Test(generate_cached, same_ids_qwen3_q8, .timeout = 300) {
    same_ids_with_cache("models/qwen3-tiny.q8.bin", "The capital of France is Paris. The capital of Italy is");
}

Test(generate_cached, same_ids_llama3_q4, .timeout = 300) {
    same_ids_with_cache("models/llama3-tiny.q4.bin", "One, two, three, four, five, six");
}

// n_cached must leave the last prompt token to run (its logits choose the first token).
Test(generate_cached, n_cached_out_of_range_is_an_error, .timeout = 120) {
    Setup s;
    setup_open(&s, "models/stories260K.f32.bin", "Once upon a time");
    EmxBasicSampler bs;
    char err[512];
    cr_assert_eq(emx_basic_sampler_init(&bs, &(EmxSamplerParams){.temperature = 0.0f}, 0,
                                        emx_tokenizer_n_vocab(s.tk), err, sizeof err), 0);
    EmxGenerateStats stats;
    const int bad[] = {-1, s.n_ids, s.n_ids + 5};
    for (int i = 0; i < 3; i++) {
        EmxGenerateOptions go = {.n_predict = 4, .n_cached = bad[i]};
        err[0] = 0;
        cr_expect_eq(emx_generate(s.st, s.tk, s.ids, s.n_ids, &bs.base, &go, &stats, err, sizeof err), -1);
        cr_expect(strstr(err, "generate: n_cached") && strstr(err, "is outside 0.."), "%s", err);
    }
    emx_basic_sampler_free(&bs);
    setup_close(&s);
}
