// test_eval.c — tools/eval's parts in-process: each check's extraction, task files and configs
// that must be refused (one error naming file, line and field / config and key), and the
// statistics against values computed independently (scipy / statsmodels, commands below).
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/eval/checks.h"
#include "tools/eval/config.h"
#include "tools/eval/stats.h"
#include "tools/eval/tasks.h"

// A task file with `text` under /tmp; returns its path (static buffer), removed by the caller.
static const char *write_tasks(const char *text) {
    static char path[64];
    snprintf(path, sizeof path, "/tmp/emx_eval_tasks_XXXXXX");
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path;
}

// Loads one item from a one-line file (must succeed) and runs its check on text.
static int check_one(const char *line, const char *text, char *extracted, size_t cap) {
    const char *p = write_tasks(line);
    EvalTaskFile tf;
    char err[512];
    int rc = eval_tasks_load(p, &tf, err, sizeof err);
    unlink(p);
    cr_assert_eq(rc, 0, "%s: %s", line, err);
    char *x = NULL;
    int ok = eval_check(&tf.items[0], text, &x);
    snprintf(extracted, cap, "%s", x ? x : "(null)");
    free(x);
    eval_tasks_free(&tf);
    return ok;
}

Test(eval, number_extraction) {
    static const struct { const char *text, *want; } cases[] = {
        {"The answer is 42.", "42"},       {"-7 degrees", "-7"},          {"from 3 to -5", "-5"},
        {"x = 1,234 apples", "1234"},      {"1,234,567 stars", "1234567"}, {"pi is 3.14159.", "3.14159"},
        {"a list 1,2,3", "3"},             {"range 3-5", "5"},             {"costs $12.50 total", "12.50"},
        {"12,34 is not grouped", "34"},    {"+8 points", "8"},             {"answer: 10\n\nthen 11", "11"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double v;
        char out[64];
        cr_expect(eval_last_number(cases[i].text, &v, out, sizeof out), "%s", cases[i].text);
        cr_expect_str_eq(out, cases[i].want, "'%s' -> '%s'", cases[i].text, out);
    }
    double v;
    char out[64];
    cr_expect_not(eval_last_number("no digits here", &v, out, sizeof out));
    cr_expect_not(eval_last_number("", &v, out, sizeof out));
}

Test(eval, number_check_tolerance) {
    char x[64];
    cr_expect(check_one("{\"id\":\"a\",\"prompt\":\"p\",\"answer\":1234,\"check\":\"number\"}", "so 1,234.", x, sizeof x));
    cr_expect_str_eq(x, "1234");
    cr_expect(check_one("{\"id\":\"a\",\"prompt\":\"p\",\"answer\":\"-2.5\",\"check\":\"number\"}", "is -2.5", x, sizeof x));
    cr_expect_not(check_one("{\"id\":\"a\",\"prompt\":\"p\",\"answer\":3,\"check\":\"number\"}", "3.1", x, sizeof x));
    cr_expect(check_one("{\"id\":\"a\",\"prompt\":\"p\",\"answer\":3,\"check\":\"number\",\"tolerance\":0.1}", "3.1", x, sizeof x));
    cr_expect_not(check_one("{\"id\":\"a\",\"prompt\":\"p\",\"answer\":3,\"check\":\"number\"}", "none", x, sizeof x));
    cr_expect_str_eq(x, "(null)");
}

Test(eval, choice_extraction) {
    static const struct { const char *text; int want; } cases[] = {
        {"Answer: c", 'C'},          {"answer:(b) because", 'B'},   {"I think (B) is right", 'B'},
        {"B) is it", 'B'},           {"Answer: A ... Answer: D", 'D'}, {"ABC and D", 'D'},
        {"Both are Fine", 0},        {"", 0},                       {"option E.", 'E'},
        {"F is not a choice", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        cr_expect_eq(eval_choice_letter(cases[i].text), cases[i].want, "'%s' -> %c", cases[i].text,
                     eval_choice_letter(cases[i].text) ? eval_choice_letter(cases[i].text) : '0');
}

Test(eval, exact_regex_contains) {
    char x[64];
    cr_expect(check_one("{\"id\":\"a\",\"prompt\":\"p\",\"answer\":\"paris\",\"check\":\"exact\"}", "  Paris.\n", x, sizeof x));
    cr_expect_str_eq(x, "Paris");
    cr_expect_not(check_one("{\"id\":\"a\",\"prompt\":\"p\",\"answer\":\"paris\",\"check\":\"exact\"}", "Paris..", x, sizeof x));
    cr_expect(check_one("{\"id\":\"a\",\"prompt\":\"p\",\"answer\":\"17\",\"check\":\"regex\",\"pattern\":\"= (\\\\d+)\"}",
                        "x = 17 and y = 3", x, sizeof x));
    cr_expect_str_eq(x, "17");
    cr_expect(check_one("{\"id\":\"a\",\"prompt\":\"p\",\"answer\":\"cat\",\"check\":\"regex\",\"pattern\":\"c.t\"}", "a cat", x, sizeof x));
    cr_expect_not(check_one("{\"id\":\"a\",\"prompt\":\"p\",\"answer\":\"x\",\"check\":\"regex\",\"pattern\":\"(q)\"}", "abc", x, sizeof x));
    cr_expect_str_eq(x, "(null)");
    cr_expect(check_one("{\"id\":\"a\",\"prompt\":\"p\",\"answer\":\"LILY\",\"check\":\"contains\"}", "named Lily.", x, sizeof x));
    cr_expect_not(check_one("{\"id\":\"a\",\"prompt\":\"p\",\"answer\":\"Tom\",\"check\":\"contains\"}", "named Lily.", x, sizeof x));
}

// Each class of mistake: the load fails with one line naming the file, the line and the field.
Test(eval, malformed_task_files) {
    static const struct { const char *text, *want; } cases[] = {
        {"{\"id\":\"a\",\"prompt\":\"p\",\"answer\":\"1\",\"check\":\"numbr\"}", ":1: field 'check': unknown check 'numbr' (number, exact"},
        {"\n{\"id\":\"a\",\"prompt\":\"p\",\"answer\":\"1\"}", ":2: field 'check': missing"},
        {"{\"id\":\"a\",\"prompt\":\"p\",\"check\":\"exact\"}", ":1: field 'answer': missing"},
        {"{\"prompt\":\"p\",\"answer\":\"1\",\"check\":\"exact\"}", ":1: field 'id': missing"},
        {"{\"id\":7,\"prompt\":\"p\",\"answer\":\"1\",\"check\":\"exact\"}", ":1: field 'id': not a non-empty string"},
        {"{\"id\":\"a\",\"answer\":\"1\",\"check\":\"exact\"}", ":1: field 'prompt': exactly one of"},
        {"{\"id\":\"a\",\"prompt\":\"p\",\"messages\":[],\"answer\":\"1\",\"check\":\"exact\"}", "exactly one of"},
        {"{\"id\":\"a\",\"messages\":[{\"role\":\"assistant\",\"content\":\"x\"}],\"answer\":\"1\",\"check\":\"exact\"}", ":1: field 'messages': message 0 has role 'assistant'"},
        {"{\"id\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"system\",\"content\":\"s\"}],\"answer\":\"1\",\"check\":\"exact\"}", "field 'messages': message 0 has role 'user'"},
        {"{\"id\":\"a\",\"messages\":\"hi\",\"answer\":\"1\",\"check\":\"exact\"}", "field 'messages': not an array"},
        {"{\"id\":\"a\",\"prompt\":\"p\",\"answer\":\"ten\",\"check\":\"number\"}", "field 'answer': 'ten' is not a number"},
        {"{\"id\":\"a\",\"prompt\":\"p\",\"answer\":\"AB\",\"check\":\"choice\"}", "field 'answer': 'AB' is not one letter A-Z"},
        {"{\"id\":\"a\",\"prompt\":\"p\",\"answer\":\"1\",\"check\":\"regex\"}", "field 'pattern': missing"},
        {"{\"id\":\"a\",\"prompt\":\"p\",\"answer\":\"1\",\"check\":\"regex\",\"pattern\":\"(ab\"}", "field 'pattern': bad regex at offset 3"},
        {"{\"id\":\"a\",\"prompt\":\"p\",\"answer\":\"1\",\"check\":\"exact\",\"tolerance\":1}", "field 'tolerance': only applies to check 'number'"},
        {"{\"id\":\"a\",\"prompt\":\"p\",\"answer\":1,\"check\":\"number\",\"tolerance\":-1}", "field 'tolerance': not a finite number >= 0"},
        {"{\"id\":\"a\",\"prompt\":\"p\",\"answer\":\"1\",\"check\":\"exact\",\"max_tokens\":0}", "field 'max_tokens': not an integer in 1..4096"},
        {"{\"id\":\"a\",\"prompt\":\"p\",\"answer\":\"1\",\"check\":\"exact\",\"max_tokens\":2.5}", "field 'max_tokens'"},
        {"{\"id\":\"a\",\"prompt\":\"p\",\"answer\":\"1\",\"check\":\"exact\",\"tolerence\":1}", "field 'tolerence': unknown field"},
        // a field name with a newline in it is escaped: the message stays one line
        {"{\"id\":\"a\",\"prompt\":\"p\",\"answer\":\"1\",\"check\":\"exact\",\"a\\nswer\":1}", "field 'a\\nswer': unknown field"},
        {"{\"id\":\"a\",\"prompt\":\"p\",\"answer\":\"1\",\"check\":\"exact\"}\n{\"id\":\"a\",\"prompt\":\"q\",\"answer\":\"1\",\"check\":\"exact\"}", ":2: field 'id': 'a' repeats line 1's"},
        {"{\"id\":\"a\",\"prompt\":\"p\",", ":1: not a JSON object"},
        {"[1,2]", ":1: not a JSON object"},
        {"{\"id\":\"a\",\"prompt\":\"p\",\"answer\":\"1\",\"check\":\"exact\"} trailing", ":1: not a JSON object"},
        {"\n\n", "no items"},
        {"{\"id\":\"a\",\"prompt\":\"p\",\"answer\":\"x\",\"check\":\"word\"}", "field 'answer_alphabet': missing (check 'word' needs one)"},
        {"{\"id\":\"a\",\"prompt\":\"p\",\"answer\":\"x\",\"check\":\"word\",\"answer_alphabet\":[\"y\"]}",
         "field 'answer_alphabet': the answer 'x' is not one of its entries"},
        {"{\"id\":\"a\",\"prompt\":\"p\",\"answer\":7,\"check\":\"number\",\"answer_alphabet\":[\"7\",\"\"]}",
         "field 'answer_alphabet': entry 1 is not a non-empty string"},
        {"{\"id\":\"a\",\"prompt\":\"p\",\"answer\":7,\"check\":\"number\",\"answer_alphabet\":[\"7\",\"7\"]}",
         "field 'answer_alphabet': entry 1 repeats entry 0 ('7')"},
        {"{\"id\":\"a\",\"prompt\":\"p\",\"answer\":7,\"check\":\"number\",\"answer_alphabet\":[]}",
         "field 'answer_alphabet': not an array of 1..256 strings"},
        {"{\"id\":\"a\",\"prompt\":\"p\",\"answer\":7,\"check\":\"number\",\"answer_alphabet\":\"7\"}",
         "field 'answer_alphabet': not an array"},
        {"{\"id\":\"a\",\"prompt\":\"p\",\"answer\":7,\"check\":\"number\",\"answer_cue\":\"\"}",
         "field 'answer_cue': not a non-empty string"},
        {"{\"id\":\"a\",\"prompt\":\"p\",\"answer\":\"x\",\"check\":\"open\"}", "field 'answer': check 'open' has no answer"},
        {"{\"id\":\"a\",\"prompt\":\"p\",\"check\":\"open\",\"answer_alphabet\":[\"x\"]}",
         "field 'answer_alphabet': check 'open' has no answer"},
        {"{\"id\":\"a\",\"prompt\":\"p\",\"answer\":7,\"check\":\"number\",\"baselines\":{\"Bad\":\"1\"}}",
         "field 'baselines': name 'Bad' is not 1..32 of [a-z0-9-]"},
        {"{\"id\":\"a\",\"prompt\":\"p\",\"answer\":7,\"check\":\"number\",\"baselines\":{\"zero\":0}}",
         "field 'baselines': 'zero': the answer is not a string"},
        {"{\"id\":\"a\",\"prompt\":\"p\",\"answer\":7,\"check\":\"number\",\"baselines\":{\"z\":\"0\",\"z\":\"1\"}}",
         "field 'baselines': name 'z' given twice"},
        {"{\"id\":\"a\",\"prompt\":\"p\",\"answer\":7,\"check\":\"number\",\"baselines\":[\"0\"]}",
         "field 'baselines': not an object of 1..8 names"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *p = write_tasks(cases[i].text);
        EvalTaskFile tf;
        char err[512] = {0};
        int rc = eval_tasks_load(p, &tf, err, sizeof err);
        unlink(p);
        cr_expect_eq(rc, -1, "case %zu accepted: %s", i, cases[i].text);
        cr_expect(strncmp(err, p, strlen(p)) == 0, "case %zu: [%s] does not start with the file name", i, err);
        cr_expect(strstr(err, cases[i].want) != NULL, "case %zu: [%s] lacks [%s]", i, err, cases[i].want);
        cr_expect(strchr(err, '\n') == NULL, "case %zu: not one line: [%s]", i, err);
    }
}

// answer_alphabet: 256 entries are allowed, 257 are not.
Test(eval, answer_alphabet_size) {
    for (int n = 256; n <= 257; n++) {
        char *line = malloc(8192);
        int k = snprintf(line, 8192, "{\"id\":\"a\",\"prompt\":\"p\",\"answer\":0,\"check\":\"number\",\"answer_alphabet\":[");
        for (int i = 0; i < n; i++) k += snprintf(line + k, 8192 - (size_t)k, "%s\"%d\"", i ? "," : "", i);
        snprintf(line + k, 8192 - (size_t)k, "]}");
        const char *p = write_tasks(line);
        EvalTaskFile tf;
        char err[512] = {0};
        const int rc = eval_tasks_load(p, &tf, err, sizeof err);
        unlink(p);
        if (n == 256) {
            cr_expect_eq(rc, 0, "%s", err);
            cr_expect(rc != 0 || tf.items[0].n_answer_alphabet == 256);
            if (rc == 0) eval_tasks_free(&tf);
        } else {
            cr_expect(rc == -1 && strstr(err, "not an array of 1..256 strings"), "%s", err);
        }
        free(line);
    }
}

Test(eval, task_fields_and_defaults) {
    const char *p = write_tasks("{\"id\":\"q1\",\"family\":\"geo\",\"messages\":[{\"role\":\"system\",\"content\":\"S\"},"
                                "{\"role\":\"user\",\"content\":\"U\"}],\"answer\":\"B\",\"check\":\"choice\",\"max_tokens\":9}\n"
                                "\n{\"id\":\"q1\",\"prompt\":\"P\",\"answer\":2,\"check\":\"number\"}\n");
    EvalTaskFile tf;
    char err[512];
    cr_assert_eq(eval_tasks_load(p, &tf, err, sizeof err), 0, "%s", err);
    const char *base = strrchr(p, '/') + 1;
    unlink(p);
    cr_assert_eq(tf.n, 2);
    cr_expect(tf.items[0].chat);
    cr_expect_str_eq(tf.items[0].system, "S");
    cr_expect_str_eq(tf.items[0].prompt, "U");
    cr_expect_str_eq(tf.items[0].family, "geo");
    cr_expect_eq(tf.items[0].max_tokens, 9);
    cr_expect_not(tf.items[1].chat);
    cr_expect_str_eq(tf.items[1].family, base);  // the same id in another family is no repeat
    cr_expect_eq(tf.items[1].max_tokens, 64);
    cr_expect_eq(tf.items[1].line, 3);
    cr_expect(!tf.items[0].answer_cue && tf.items[0].n_answer_alphabet == 0 && tf.items[0].n_baselines == 0);
    eval_tasks_free(&tf);
    p = write_tasks("{\"id\":\"w\",\"prompt\":\"P\",\"answer\":\"Rome\",\"check\":\"word\",\"answer_cue\":\"The answer is\","
                    "\"answer_alphabet\":[\"Paris\",\"Rome\"],\"baselines\":{\"capital-of-france\":\"Paris\",\"echo\":\"P\"}}\n"
                    "{\"id\":\"n\",\"prompt\":\"P\",\"answer\":7,\"check\":\"number\",\"answer_alphabet\":[\"6\",\"7.0\"]}\n"
                    "{\"id\":\"o\",\"prompt\":\"P\",\"check\":\"open\",\"max_tokens\":128}\n");
    cr_assert_eq(eval_tasks_load(p, &tf, err, sizeof err), 0, "%s", err);
    unlink(p);
    const EvalItem *w = &tf.items[0];
    cr_expect_str_eq(w->answer_cue, "The answer is");
    cr_expect(w->n_answer_alphabet == 2 && !strcmp(w->answer_alphabet[1], "Rome"));
    cr_expect(w->n_baselines == 2 && eval_item_baseline(w, "echo") == 1 && eval_item_baseline(w, "nope") == -1);
    cr_expect_str_eq(w->baseline_answers[0], "Paris");
    cr_expect_eq(tf.items[1].n_answer_alphabet, 2, "'7.0' holds the answer 7 by value");
    cr_expect(tf.items[2].check == EVAL_CHECK_OPEN && !tf.items[2].answer && tf.items[2].max_tokens == 128);
    eval_tasks_free(&tf);
}

// The word check: the first whole word of the alphabet, the longest at a start, any case; the
// extracted value is the alphabet's own spelling.
Test(eval, word_check) {
    static const struct { const char *text, *want; int ok; } cases[] = {
        {"The capital of France is Paris.", "Paris", 0},   {"It is ROME, not Paris", "Rome", 1},
        {"Romeo and Juliet", "(null)", 0},                 {"new york or york", "New York", 0},
        {"rome", "Rome", 1},                               {"no answer", "(null)", 0},
        {"(Rome)", "Rome", 1},                             {"Rome1 is not it", "(null)", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char x[64];
        const int ok = check_one("{\"id\":\"a\",\"prompt\":\"p\",\"answer\":\"Rome\",\"check\":\"word\","
                                 "\"answer_alphabet\":[\"Paris\",\"Rome\",\"York\",\"New York\"]}",
                                 cases[i].text, x, sizeof x);
        cr_expect_eq(ok, cases[i].ok, "'%s'", cases[i].text);
        cr_expect_str_eq(x, cases[i].want, "'%s'", cases[i].text);
    }
}

Test(eval, configs) {
    EvalConfig c;
    char err[512];
    cr_assert_eq(eval_config_parse("combined:temp=0.7,top_k=5", "m.bin", &c, err, sizeof err), 0, "%s", err);
    cr_expect_eq(c.args.sampler, EMX_SAMPLER_COMBINED);
    cr_expect_float_eq(c.args.sampling.temperature, 0.7f, 1e-6);
    cr_expect_eq(c.args.sampling.top_k, 5);
    cr_expect_not(c.deterministic);
    eval_config_free(&c);
    cr_assert_eq(eval_config_parse("agents:n=3,critic=off,lookahead=2", "m.bin", &c, err, sizeof err), 0, "%s", err);
    cr_expect_eq(c.args.n_agents, 3);
    cr_expect_eq(c.args.check_every, 0);
    cr_expect_eq(c.args.lookahead, 2);
    eval_config_free(&c);
    cr_assert_eq(eval_config_parse("agents:agent_configs=0.5:10;1.0:0", "m.bin", &c, err, sizeof err), 0, "%s", err);
    cr_expect_str_eq(c.args.agent_configs, "0.5:10,1.0:0");
    eval_config_free(&c);
    cr_assert_eq(eval_config_parse("greedy", "m.bin", &c, err, sizeof err), 0, "%s", err);
    cr_expect(c.deterministic);
    eval_config_free(&c);
    cr_assert_eq(eval_config_parse("entropix:profile=masked-bits", "m.bin", &c, err, sizeof err), 0, "%s", err);
    eval_config_free(&c);
    static const struct { const char *spec, *want; } bad[] = {
        {"combined:tmp=1", "config 'combined:tmp=1': key 'tmp': unknown key (temp"},
        {"combined:temp=abc", "key 'temp': --temp: 'abc' is not a number"},
        {"combined:top_p=2", "key 'top_p': --top-p: 2 is out of range"},
        {"greedy:n=3", "key 'n': the agent pool's flags need --sampler agents"},
        {"agents:critic=maybe", "key 'critic': 'maybe': expected on or off"},
        {"combined:temp", "key 'temp': expected key=value"},
        {"combined:temp=", "key 'temp': empty value"},
        {"nosuch", "config 'nosuch': sampler 'nosuch': --sampler"},
        {"entropix:profile=/nonexistent.profile", "config 'entropix:profile=/nonexistent.profile': key 'profile'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        cr_expect_eq(eval_config_parse(bad[i].spec, "m.bin", &c, err, sizeof err), -1, "%s accepted", bad[i].spec);
        cr_expect(strstr(err, bad[i].want) != NULL, "[%s] lacks [%s]", err, bad[i].want);
        cr_expect(strchr(err, '\n') == NULL, "not one line: [%s]", err);
    }
}

// Reference values, computed independently:
//   python3 -c "from statsmodels.stats.proportion import proportion_confint as pc
//   for k,n in [(0,10),(7,10),(10,10),(45,100),(1,3)]: print(k,n,'%.12f %.12f'%pc(k,n,alpha=0.05,method='wilson'))"
// (statsmodels 0.14, scipy 1.x in a venv)
Test(eval, wilson_interval) {
    static const struct { long k, n; double lo, hi; } ref[] = {
        {0, 10, 0.000000000000, 0.277532799863},  {7, 10, 0.396778147461, 0.892208732594},
        {10, 10, 0.722467200137, 1.000000000000}, {45, 100, 0.356145379795, 0.547553970026},
        {1, 3, 0.061491944720, 0.792340399198},
    };
    for (size_t i = 0; i < sizeof ref / sizeof ref[0]; i++) {
        double lo, hi;
        eval_wilson(ref[i].k, ref[i].n, &lo, &hi);
        cr_expect(fabs(lo - ref[i].lo) < 1e-9 && fabs(hi - ref[i].hi) < 1e-9, "%ld/%ld: [%.12f, %.12f]", ref[i].k,
                  ref[i].n, lo, hi);
    }
}

//   python3 -c "from scipy.stats import binomtest
//   for b,c in [(3,0),(5,1),(10,12),(7,0),(40,60),(1000,1100)]: print(b,c,'%.15g'%binomtest(min(b,c),b+c,0.5).pvalue)"
Test(eval, sign_test_p) {
    static const struct { long b, c; double p; } ref[] = {
        {3, 0, 0.25},  {5, 1, 0.21875}, {10, 12, 0.831811904907227}, {7, 0, 0.015625},
        {40, 60, 0.0568879336409809}, {1000, 1100, 0.0307207078642425},
    };
    for (size_t i = 0; i < sizeof ref / sizeof ref[0]; i++) {
        double p = eval_sign_test_p(ref[i].b, ref[i].c), q = eval_sign_test_p(ref[i].c, ref[i].b);
        cr_expect(fabs(p - ref[i].p) < 1e-9 * fmax(1.0, ref[i].p * 1e3), "b %ld c %ld: %.15g", ref[i].b, ref[i].c, p);
        cr_expect_eq(p, q, "not symmetric");
    }
    cr_expect_eq(eval_sign_test_p(0, 0), 1.0);
    cr_expect_eq(eval_sign_test_p(4, 4), 1.0);  // 2 * P(X <= 4 | n 8) > 1: capped
}
