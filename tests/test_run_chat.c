// test_run_chat.c — ./run -cnv, a conversation read from stdin. Each answer equals the greedy
// answer of a fresh state to the whole conversation so far, rendered by the C API's
// entropix_chat_tokens (whose templates are checked against HF's Jinja in test_chat_template.c)
// and run in one prefill: keeping the KV cache between turns and running only the new tokens
// changes no token. Also: the oldest exchanges left out when the conversation outgrows the
// context, a message too long for it refused while the chat goes on, the end of the input,
// the flags -cnv refuses, and the CUDA build on an emulated GPU giving the CPU's text.
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "include/entropix.h"
#include "api_test_util.h"
#include "run_util.h"
#include "test_util.h"

#define N_PREDICT "8"

// text in a fresh temporary file, its path in path (64 bytes).
static void write_input(char *path, const char *text) {
    strcpy(path, "/tmp/emx_chat_in_XXXXXX");
    const int fd = mkstemp(path);
    cr_assert(fd >= 0);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

// ./run MODEL -cnv --temp 0 -n 8 -c ctx [extra...] with input on stdin.
static RunResult chat_run(const char *model, const char *input, const char *ctx, const char *const *extra) {
    char path[512], rel[256], in[64];
    snprintf(rel, sizeof rel, "models/%s", model);
    test_build_path(path, sizeof path, rel);
    write_input(in, input);
    const char *args[32] = {path, "-cnv", "--temp", "0", "-n", N_PREDICT, "-t", "1", "-c", ctx};
    int k = 10;
    for (int i = 0; extra && extra[i]; i++) args[k++] = extra[i];
    args[k] = NULL;
    RunResult r = run_prog_in(run_binary(), args, in);
    unlink(in);
    return r;
}

typedef struct {
    char text[4096];
    size_t len;
} Text;

static int append_token(void *user, const entropix_token *t) {
    Text *x = user;
    cr_assert_lt(x->len + t->text_len, sizeof x->text);
    memcpy(x->text + x->len, t->text, t->text_len);
    x->text[x->len += t->text_len] = 0;
    return 0;
}

// The greedy answer of a fresh state to msgs, rendered with the assistant header by the C API
// (entropix_chat_tokens): one prefill of the whole conversation (malloc'd).
static char *fresh_answer(entropix_model *m, const entropix_message *msgs, int n, int *n_prompt) {
    int *ids = NULL, n_ids = 0;
    cr_assert_eq(entropix_chat_tokens(m, msgs, n, NULL, &ids, &n_ids), ENTROPIX_OK, "%s", entropix_error_last());
    entropix_state_params stp;
    entropix_state_params_init(&stp);
    stp.ctx = 512;
    entropix_state *s = NULL;
    entropix_sampler *smp = NULL;
    entropix_sampler_params sp;
    entropix_sampler_params_init(&sp, ENTROPIX_SAMPLER_GREEDY);
    cr_assert_eq(entropix_state_new(m, &stp, &s), ENTROPIX_OK, "%s", entropix_error_last());
    cr_assert_eq(entropix_sampler_new(&sp, &smp), ENTROPIX_OK, "%s", entropix_error_last());
    entropix_generate_params gp;
    entropix_generate_params_init(&gp);
    static Text x;
    x.len = 0, x.text[0] = 0;
    gp.max_tokens = atoi(N_PREDICT), gp.on_token = append_token, gp.user = &x;
    entropix_generate_result res = {.size = sizeof res};
    cr_assert_eq(entropix_generate(s, smp, ids, n_ids, &gp, &res), ENTROPIX_OK, "%s", entropix_error_last());
    entropix_free(ids);
    *n_prompt = n_ids;
    entropix_sampler_free(smp);
    entropix_state_free(s);
    return strdup(x.text);
}

// Three turns after a system message: stdout is each fresh answer and a newline, in turn; the
// prompt tokens that ran (the closing timings' count) are fewer than the three prompts' sum.
static void expect_fresh_answers(const char *model) {
    entropix_model *m = open_api(model, 1);
    const char *user[3] = {"Hello there", "What is two plus two?", "Thanks, and why?"};
    char *answer[3];
    entropix_message msgs[7] = {{"system", "You are terse."}};
    char expected[8192] = "";
    int n_prompts = 0, n_ran = 0;
    for (int t = 0; t < 3; t++) {
        int n_prompt;
        msgs[1 + 2 * t] = (entropix_message){"user", user[t]};
        answer[t] = fresh_answer(m, msgs, 2 + 2 * t, &n_prompt);
        n_prompts += n_prompt;
        msgs[2 + 2 * t] = (entropix_message){"assistant", answer[t]};
        snprintf(expected + strlen(expected), sizeof expected - strlen(expected), "%s\n", answer[t]);
    }
    RunResult r = chat_run(model, "Hello there\nWhat is two plus two?\nThanks, and why?\n", "512",
                           (const char *[]){"--system", "You are terse.", NULL});
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect_str_eq(r.out, expected, "%s: the conversation's answers differ from fresh runs", model);
    const char *timings = strstr(r.err, "prompt: ");
    cr_assert(timings && sscanf(timings, "prompt: %d tokens", &n_ran) == 1, "no closing timings: %s", r.err);
    cr_expect(n_ran < n_prompts, "%d prompt tokens ran, the three prompts hold %d: the cache was not kept", n_ran,
              n_prompts);
    for (int t = 0; t < 3; t++) free(answer[t]);
    run_free(&r);
    entropix_model_close(m);
}

Test(run_chat, answers_equal_fresh_runs_qwen3, .timeout = 300) { expect_fresh_answers("qwen3-tiny.f32.bin"); }
Test(run_chat, answers_equal_fresh_runs_gemma3, .timeout = 300) { expect_fresh_answers("gemma3-tiny.f32.bin"); }

// A message on two lines (a '\' at the end of the first) is one message; -p is the first one.
Test(run_chat, continued_line_and_first_message_from_p, .timeout = 300) {
    const char *model = "qwen3-tiny.f32.bin";
    entropix_model *m = open_api(model, 1);
    entropix_message msgs[3] = {{"user", "Hi"}};
    int n_prompt;
    char *a1 = fresh_answer(m, msgs, 1, &n_prompt);
    msgs[1] = (entropix_message){"assistant", a1};
    msgs[2] = (entropix_message){"user", "one\ntwo"};
    char *a2 = fresh_answer(m, msgs, 3, &n_prompt), expected[4096];
    snprintf(expected, sizeof expected, "%s\n%s\n", a1, a2);
    RunResult r = chat_run(model, "one\\\ntwo\n", "512", (const char *[]){"-p", "Hi", NULL});
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect_str_eq(r.out, expected);
    free(a1), free(a2);
    run_free(&r);
    entropix_model_close(m);
}

// -c 96: the conversation outgrows it and its oldest exchanges are left out (said); a message
// that alone does not fit is refused and the chat goes on; the run ends at the input's end, 0.
Test(run_chat, context_full_drops_oldest_and_refuses_too_long, .timeout = 300) {
    char input[4096] = "";
    for (int t = 0; t < 8; t++) strcat(input, "Tell me one more thing about the sea and the ships on it.\n");
    RunResult r = chat_run("qwen3-tiny.f32.bin", input, "96", NULL);
    cr_assert_eq(r.code, 0, "exit %d: %s", r.code, r.err);
    cr_expect(strstr(r.err, "run: the conversation outgrew the context (-c 96): its oldest "), "%s", r.err);
    run_free(&r);
    char lng[2048] = "";
    for (int i = 0; i < 60; i++) strcat(lng, "word after word ");
    snprintf(input, sizeof input, "%s\nHi\n", lng);
    r = chat_run("qwen3-tiny.f32.bin", input, "96", NULL);
    cr_assert_eq(r.code, 0, "exit %d: %s", r.code, r.err);
    cr_expect(strstr(r.err, "the context holds 96 (-c): not sent"), "%s", r.err);
    cr_expect(strstr(r.err, "generated: "), "the chat did not go on after the refused message: %s", r.err);
    run_free(&r);
    r = chat_run("qwen3-tiny.f32.bin", "", "96", NULL);  // no message at all
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect_eq(r.out_len, 0, "[%s]", r.out);
    run_free(&r);
}

// Flags that make no sense in a chat are usage errors (2), told before the model opens; a model
// without a chat template is the model's error (1).
Test(run_chat, refused_flags_and_models, .timeout = 120) {
    const char *const cases[][3] = {{"--raw", NULL, "-cnv: --raw is not available in a conversation"},
                                    {"--report", "x.html", "-cnv: --report is not available"},
                                    {"--sampler", "agents", "-cnv: --sampler agents is not available"},
                                    {"-f", "-", "-cnv: -f - is not available"},
                                    {"--ignore-eos", NULL, "-cnv: --ignore-eos is not available"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        RunResult r = chat_run("qwen3-tiny.f32.bin", "Hi\n", "64", (const char *[]){cases[i][0], cases[i][1], NULL});
        cr_expect_eq(r.code, 2, "%s: exit %d", cases[i][0], r.code);
        cr_expect(strstr(r.err, cases[i][2]), "%s: [%s]", cases[i][0], r.err);
        cr_expect_eq(count_lines(r.err), 1, "%s", r.err);
        run_free(&r);
    }
    RunResult r = chat_run("stories260K.f32.bin", "Hi\n", "64", NULL);
    cr_expect_eq(r.code, 1);
    cr_expect(strstr(r.err, "has no chat template"), "%s", r.err);
    run_free(&r);
}

// The CUDA build on an emulated GPU ($EMX_GPU_RUN): the conversation's turns, each from the
// cache the previous one left on the device, give the CPU's greedy text (qwen3-tiny, f32).
Test(run_chat, cuda_conversation_same_text_as_cpu, .timeout = 600) {
    const char *gpu = gpu_run_binary();
    char path[512], in[64];
    test_build_path(path, sizeof path, "models/qwen3-tiny.f32.bin");
    write_input(in, "Hello there\nWhat is two plus two?\n");
    const char *args[] = {path, "-cnv", "--temp", "0", "-n", N_PREDICT, "-t", "1", "-c", "128", "--device", "cpu", NULL};
    RunResult cpu = run_prog_in(run_binary(), args, in);
    args[11] = "cuda:0";
    RunResult cuda = run_prog_in(gpu, args, in);
    unlink(in);
    cr_assert_eq(cpu.code, 0, "%s", cpu.err);
    cr_assert_eq(cuda.code, 0, "%s", cuda.err);
    cr_expect_str_eq(cuda.out, cpu.out);
    run_free(&cpu), run_free(&cuda);
}
