// test_eval_measures.c — what eval measures per generation beside correctness (tools/eval/trace.h,
// textstats.h, checks.h spans, stats.h AUROC), against values computed by hand or with the
// Python commands quoted: the tap's numbers for one step of known logits, the answer's byte
// span per check, the answer margin over the tokens that overlap it, repetition loops and
// distinct-n on hand-made ids, the AUROC with ties and empty classes; and the tap leaving the
// generated text of stories260K unchanged.
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/cli/cli_args.h"
#include "runtime/cli/run_setup.h"
#include "runtime/generate.h"
#include "runtime/model.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"
#include "tools/eval/checks.h"
#include "tools/eval/stats.h"
#include "tools/eval/tasks.h"
#include "tools/eval/textstats.h"
#include "tools/eval/trace.h"

// An inner sampler that answers a fixed id.
typedef struct {
    EmxSampler base;
    int id;
} Fixed;

static int fixed_choose(EmxSampler *self, EmxState *st, const float *logits, int n_vocab, int pos) {
    (void)st, (void)logits, (void)n_vocab, (void)pos;
    return ((Fixed *)self)->id;
}

//   python3 -c "import math
//   for l,c in [([2,1,0],1),([.5,3,3,-1],2),([1,0],0)]:  # NaN and -inf logits have no mass
//     Z=sum(map(math.exp,l)); p=sorted([math.exp(x)/Z for x in l],reverse=True)
//     print(-sum(q*math.log2(q) for q in p), p[0]-p[1], l[c]-math.log(Z))"
Test(eval_measures, tap_step_numbers) {
    static const struct {
        float logits[4];
        int id;
        double entropy_bits, margin, logprob;
        int not_argmax;
    } steps[] = {
        {{2.0f, 1.0f, 0.0f, -INFINITY}, 1, 1.200892977978363, 0.4205124847200242, -1.4076059644443804, 1},
        {{0.5f, 3.0f, 3.0f, -1.0f}, 2, 1.2619397504136025, 0.0, -0.7421281063011521, 0},  // a tie for the top
        {{NAN, 1.0f, 0.0f, -INFINITY}, 1, 0.8399415379831693, 0.4621171572600098, -0.3132616875182228, 0},  // NaN: no mass
    };
    EvalTrace trace = {0};
    Fixed inner = {.base.choose = fixed_choose};
    EvalTap tap;
    eval_tap_init(&tap, &inner.base, &trace);
    for (int k = 0; k < 3; k++) {
        inner.id = steps[k].id;
        cr_assert_eq(tap.base.choose(&tap.base, NULL, steps[k].logits, 4, 10 + k), steps[k].id, "the tap changed the choice");
        eval_trace_text(&trace, k, 2, k == 2);
    }
    cr_assert_eq(trace.n, 3);
    cr_expect(trace.measured && trace.ends_with_stop);
    for (int k = 0; k < 3; k++) {
        const EvalStep *s = &trace.steps[k];
        cr_expect_eq(s->id, steps[k].id);
        cr_expect(fabs(s->entropy_bits - steps[k].entropy_bits) < 1e-5, "step %d: H %.9f", k, s->entropy_bits);
        cr_expect(fabs(s->margin - steps[k].margin) < 1e-6, "step %d: margin %.9f", k, s->margin);
        cr_expect(fabs(s->logprob_nats - steps[k].logprob) < 1e-6, "step %d: logprob %.9f", k, s->logprob_nats);
        cr_expect_eq(s->not_argmax, steps[k].not_argmax, "step %d", k);
        cr_expect_eq(s->text_start, (size_t)(2 * k));
        cr_expect_eq(s->text_end, (size_t)(2 * k + 2));
    }
    int ids[8];
    cr_expect_eq(eval_trace_text_ids(&trace, ids, 8), 2, "the final stop token is not text");
    eval_trace_free(&trace);
}

// A task file of one line; its item loaded (must succeed).
static EvalTaskFile load_one(const char *line) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/emx_eval_measures_XXXXXX");
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    cr_assert_eq(write(fd, line, strlen(line)), (ssize_t)strlen(line));
    close(fd);
    EvalTaskFile tf;
    char err[512];
    const int rc = eval_tasks_load(path, &tf, err, sizeof err);
    unlink(path);
    cr_assert_eq(rc, 0, "%s: %s", line, err);
    return tf;
}

// Each check: the span of what it extracted, as the substring `want` at its occurrence `nth`.
Test(eval_measures, answer_span_locator) {
    static const struct {
        const char *line, *text, *want;
        int nth;  // 0: the first occurrence of want in text, 1: the second
    } cases[] = {
        {"{\"id\":\"a\",\"prompt\":\"p\",\"answer\":7,\"check\":\"number\"}", "so 1,234 apples and -7 pears", "-7", 0},
        {"{\"id\":\"a\",\"prompt\":\"p\",\"answer\":7,\"check\":\"number\"}", "3 + 4 = 1,234.5.", "1,234.5", 0},
        {"{\"id\":\"a\",\"prompt\":\"p\",\"answer\":5,\"check\":\"number\"}", "range 3-5", "5", 0},
        {"{\"id\":\"a\",\"prompt\":\"p\",\"answer\":\"B\",\"check\":\"choice\"}", "Answer: (b) because", "b", 0},
        {"{\"id\":\"a\",\"prompt\":\"p\",\"answer\":\"B\",\"check\":\"choice\"}", "I think (B) is right", "B", 0},
        {"{\"id\":\"a\",\"prompt\":\"p\",\"answer\":\"paris\",\"check\":\"exact\"}", "  Paris.\n", "Paris", 0},
        {"{\"id\":\"a\",\"prompt\":\"p\",\"answer\":\"17\",\"check\":\"regex\",\"pattern\":\"= (\\\\d+)\"}", "x = 17 and y = 3",
         "17", 0},
        {"{\"id\":\"a\",\"prompt\":\"p\",\"answer\":\"Lily\",\"check\":\"contains\"}", "LILY met Lily", "LILY", 0},
        {"{\"id\":\"a\",\"prompt\":\"p\",\"answer\":\"Rome\",\"check\":\"word\",\"answer_alphabet\":[\"Paris\",\"Rome\",\"York\","
         "\"New York\"]}", "Romeo went to new york, then Rome", "new york", 0},
        {"{\"id\":\"a\",\"prompt\":\"p\",\"answer\":\"Rome\",\"check\":\"word\",\"answer_alphabet\":[\"Paris\",\"Rome\"]}",
         "Romeo and Rome", "Rome", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        EvalTaskFile tf = load_one(cases[i].line);
        char *x = NULL;
        EvalSpan span;
        eval_check_at(&tf.items[0], cases[i].text, &x, &span);
        const char *at = strstr(cases[i].text, cases[i].want);
        if (cases[i].nth) at = strstr(at + 1, cases[i].want);
        cr_assert(at);
        const size_t start = (size_t)(at - cases[i].text);
        cr_expect(span.found && span.start == start && span.end == start + strlen(cases[i].want),
                  "case %zu '%s': span [%zu, %zu), expected [%zu, %zu)", i, cases[i].text, span.start, span.end, start,
                  start + strlen(cases[i].want));
        free(x);
        eval_tasks_free(&tf);
    }
    // nothing extracted: no span; an open item never has one
    EvalTaskFile tf = load_one("{\"id\":\"a\",\"prompt\":\"p\",\"answer\":7,\"check\":\"number\"}");
    char *x = NULL;
    EvalSpan span = {.found = 1};
    cr_expect_not(eval_check_at(&tf.items[0], "no digits", &x, &span));
    cr_expect(!span.found && !x);
    eval_tasks_free(&tf);
    tf = load_one("{\"id\":\"a\",\"prompt\":\"p\",\"check\":\"open\"}");
    span.found = 1;
    cr_expect_not(eval_check_at(&tf.items[0], "Answer: B, 42", &x, &span));
    cr_expect(!span.found && !x && !tf.items[0].answer);
    eval_tasks_free(&tf);
}

// "The answer is 42." in tokens "The"," answer"," is"," 4","2","." and a stop token: the number
// 42 is bytes [14, 16), which " 4" [13, 15) and "2" [15, 16) overlap: margin (0.8 + 0.6) / 2.
Test(eval_measures, answer_margin_over_the_answer_tokens) {
    static const char *const pieces[] = {"The", " answer", " is", " 4", "2", ".", ""};
    static const float margin[] = {0.1f, 0.2f, 0.3f, 0.8f, 0.6f, 0.9f, 0.5f};
    EvalTrace t = {0};
    for (int k = 0; k < 7; k++) {
        cr_assert_eq(eval_trace_push_id(&t, 100 + k), 0);
        t.steps[k].margin = margin[k];
        t.steps[k].entropy_bits = (float)(k + 1);        // mean 4
        t.steps[k].logprob_nats = -0.5f * (float)(k + 1);  // mean -2
        t.steps[k].not_argmax = k == 1 || k == 4;
        eval_trace_text(&t, k, strlen(pieces[k]), k == 6);
    }
    t.measured = 1;
    EvalTaskFile tf = load_one("{\"id\":\"a\",\"prompt\":\"p\",\"answer\":42,\"check\":\"number\"}");
    char *x = NULL;
    EvalSpan span;
    cr_assert(eval_check_at(&tf.items[0], "The answer is 42.", &x, &span));
    EvalConfidence c;
    cr_assert_eq(eval_confidence(&t, &span, &c), 0);
    cr_expect_eq(c.n_answer_tokens, 2);
    cr_expect(fabs(c.answer_margin - 0.7) < 1e-6, "%f", c.answer_margin);
    cr_expect(fabs(c.mean_entropy_bits - 4.0) < 1e-9);
    cr_expect(fabs(c.mean_logprob_nats + 2.0) < 1e-9);
    cr_expect_eq(c.n_not_argmax, 2);
    // no answer: no margin, the means stay
    span.found = 0;
    cr_assert_eq(eval_confidence(&t, &span, &c), 0);
    cr_expect(isnan(c.answer_margin) && c.n_answer_tokens == 0 && fabs(c.mean_entropy_bits - 4.0) < 1e-9);
    // a trace of ids only (the agent pool's): nothing measured
    t.measured = 0;
    cr_expect_eq(eval_confidence(&t, &span, &c), -1);
    cr_expect(isnan(c.mean_entropy_bits) && c.n_not_argmax == -1);
    free(x);
    eval_tasks_free(&tf);
    eval_trace_free(&t);
}

Test(eval_measures, repetition_loop) {
    int ids[64];
    for (int i = 0; i < 64; i++) ids[i] = i;  // all different
    cr_expect_not(eval_repetition_loop(ids, 64));
    for (int i = 0; i < 12; i++) ids[20 + i] = 7;  // 12 of one token at the end of 32
    cr_expect(eval_repetition_loop(ids, 32));
    cr_expect_not(eval_repetition_loop(ids + 21, 11), "11 tokens: shorter than the 12 a loop needs");
    ids[32] = 8;  // then one more token: it no longer ends in the loop
    cr_expect_not(eval_repetition_loop(ids, 33));
    for (int i = 0; i < 12; i++) ids[40 + i] = i % 2 ? 3 : 4;  // "a b" six times
    cr_expect(eval_repetition_loop(ids, 52));
    cr_expect_not(eval_repetition_loop(ids + 41, 11));
    for (int i = 0; i < 15; i++) ids[i] = 50 + i % 5;  // a 5-gram three times: 15 tokens
    cr_expect(eval_repetition_loop(ids, 15));
    cr_expect_not(eval_repetition_loop(ids + 1, 14), "not three whole 5-grams");
    for (int i = 0; i < 30; i++) ids[i] = 90 + i % 10;  // a 10-gram three times
    cr_expect(eval_repetition_loop(ids, 30));
    cr_expect_not(eval_repetition_loop(ids, 29), "the third repeat is short by one token");
    for (int i = 0; i < 64; i++) ids[i] = 200 + i % 32;  // a 32-gram twice
    cr_expect_not(eval_repetition_loop(ids, 64), "a 32-gram twice: no period up to 32 repeats three times");
    cr_expect_not(eval_repetition_loop(ids, 0));
}

Test(eval_measures, distinct_n) {
    const int a[] = {1, 2, 1, 2, 3};
    cr_expect(fabs(eval_distinct_n(a, 5, 1) - 3.0 / 5) < 1e-12);  // {1,2,3} of 5
    cr_expect(fabs(eval_distinct_n(a, 5, 2) - 3.0 / 4) < 1e-12);  // (1,2),(2,1),(1,2),(2,3)
    const int b[] = {2147483647, 0, 2147483647, 0};  // the largest ids: no collision in the pair key
    cr_expect(fabs(eval_distinct_n(b, 4, 1) - 2.0 / 4) < 1e-12);
    cr_expect(fabs(eval_distinct_n(b, 4, 2) - 2.0 / 3) < 1e-12);
    const int c[] = {0, 1, 1, 0};  // (0,1),(1,1),(1,0) are all different although 0 and 1 repeat
    cr_expect(fabs(eval_distinct_n(c, 4, 2) - 1.0) < 1e-12);
    cr_expect(isnan(eval_distinct_n(a, 1, 2)));
    cr_expect(isnan(eval_distinct_n(a, 0, 1)));
    cr_expect(fabs(eval_distinct_n(a, 1, 1) - 1.0) < 1e-12);
}

// By hand: positives {0.9, 0.8, 0.4}, negatives {0.7, 0.4, 0.1}: 0.9 and 0.8 beat all three
// (6), 0.4 beats 0.1 and ties 0.4 (1.5): 7.5 / 9.
Test(eval_measures, auroc) {
    const double s1[] = {0.9, 0.7, 0.8, 0.4, 0.4, 0.1};
    const int p1[] = {1, 0, 1, 0, 1, 0};
    cr_expect(fabs(eval_auroc(s1, p1, 6) - 7.5 / 9.0) < 1e-12, "%f", eval_auroc(s1, p1, 6));
    const double s2[] = {0.3, 0.3, 0.3, 0.3};  // all tied: one half
    const int p2[] = {1, 0, 0, 1};
    cr_expect(fabs(eval_auroc(s2, p2, 4) - 0.5) < 1e-12);
    const double s3[] = {0.1, 0.9, 0.5};  // the positive below both negatives
    const int p3[] = {1, 0, 0};
    cr_expect(eval_auroc(s3, p3, 3) == 0.0);
    const int p4[] = {1, 1, 1};  // one class empty: undefined
    cr_expect(isnan(eval_auroc(s3, p4, 3)));
    const int p5[] = {0, 0, 0};
    cr_expect(isnan(eval_auroc(s3, p5, 3)));
    cr_expect(isnan(eval_auroc(s3, p5, 0)));
    // a confidence that is the correctness itself: 1; negated: 0
    const double s6[] = {1, 0, 1, 0, 0};
    const int p6[] = {1, 0, 1, 0, 0};
    cr_expect(eval_auroc(s6, p6, 5) == 1.0);
    const double s7[] = {-1, 0, -1, 0, 0};
    cr_expect(eval_auroc(s7, p6, 5) == 0.0);
}

// One generation of stories260K with ./run's sampler for flags, with or without the tap around
// it; the text (and ids) into out.
static int generate(const EmxModel *m, const EmxTokenizer *tk, EmxState *st, const int *ids, int n_ids,
                    const char *const *flags, uint64_t seed, int with_tap, EvalTrace *trace, char **text, int *out) {
    const char *argv[16] = {"run", "m.bin"};
    int argc = 2;
    for (int i = 0; flags[i]; i++) argv[argc++] = flags[i];
    EmxCliArgs a;
    char err[512];
    cr_assert_eq(emx_cli_parse(argc, (char **)argv, &a, err, sizeof err), 0, "%s", err);
    EmxProfile prof;
    cr_assert_eq(emx_run_build_profile(&a, &prof, err, sizeof err), 0, "%s", err);
    EmxRunSampler rs = {0};
    cr_assert_eq(emx_run_sampler_init(&rs, &a, &prof, m, tk, emx_state_ctx(st), seed, 0, err, sizeof err), 0, "%s", err);
    EvalTap tap;
    eval_tap_init(&tap, rs.sampler, trace);
    size_t len = 0;
    FILE *f = open_memstream(text, &len);
    EmxGenerateOptions go = {.n_predict = 40, .out = f, .ids_out = out, .ids_cap = 40};
    EmxGenerateStats stats;
    cr_assert_eq(emx_generate(st, tk, ids, n_ids, with_tap ? &tap.base : rs.sampler, &go, &stats, err, sizeof err), 0,
                 "%s", err);
    fclose(f);
    emx_run_sampler_free(&rs);
    return stats.n_generated;
}

Test(eval_measures, tap_leaves_the_text_unchanged, .timeout = 120) {
    char path[512], err[512];
    test_build_path(path, sizeof path, "models/stories260K.f32.bin");
    if (access(path, R_OK) != 0) cr_assert_fail("%s is missing: convert it with `make test-models`", path);
    EmxModel m;
    cr_assert_eq(emx_model_open(&m, path, err, sizeof err), 0, "%s", err);
    EmxTokenizer *tk = emx_tokenizer_new(&m.tok, err, sizeof err);
    EmxState *st = emx_state_new(&m, &(EmxStateOptions){.n_threads = 1}, err, sizeof err);
    cr_assert(tk && st, "%s", err);
    int *ids, n_ids;
    EmxPromptSpec ps = {.text = "Once upon a time", .len = 16};
    cr_assert_eq(emx_prompt_ids(&m, tk, &ps, &ids, &n_ids, err, sizeof err), 0, "%s", err);
    const char *const samplers[][8] = {{"--sampler", "greedy", NULL},
                                       {"--sampler", "combined", "--temp", "1.0", "--top-k", "40", NULL},
                                       {"--sampler", "entropix", NULL}};
    for (int k = 0; k < 3; k++) {
        EvalTrace none = {0}, trace = {0};
        char *plain = NULL, *tapped = NULL;
        int a[40], b[40];
        const int na = generate(&m, tk, st, ids, n_ids, samplers[k], 5, 0, &none, &plain, a);
        const int nb = generate(&m, tk, st, ids, n_ids, samplers[k], 5, 1, &trace, &tapped, b);
        cr_expect_eq(none.n, 0);
        cr_expect_str_eq(tapped, plain, "%s: the tap changed the text", samplers[k][1]);
        cr_assert_eq(na, nb);
        cr_expect_arr_eq(a, b, (size_t)na * sizeof *a);
        cr_expect_eq(trace.n, nb, "%s: a step per chosen token", samplers[k][1]);
        for (int i = 0; i < trace.n; i++) {
            const EvalStep *s = &trace.steps[i];
            cr_expect_eq(s->id, b[i]);
            cr_expect(s->entropy_bits >= 0 && s->margin >= 0 && s->margin <= 1 && s->logprob_nats <= 0,
                      "%s step %d: H %f margin %f logprob %f", samplers[k][1], i, s->entropy_bits, s->margin, s->logprob_nats);
            if (k == 0) cr_expect_eq(s->not_argmax, 0, "greedy chose a token that is not the argmax");
        }
        free(plain);
        free(tapped);
        eval_trace_free(&trace);
    }
    free(ids);
    emx_state_free(st);
    emx_tokenizer_free(tk);
    emx_model_close(&m);
}
