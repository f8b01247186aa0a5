// test_grammar.c — the GBNF parser's errors (one line, naming line:column), acceptance and
// rejection of strings, UTF-8 split across calls, the state limits, and the mask against the
// brute-force definition (every token tried on a clone) over states reached by random walks on
// the SmolLM2 and the Qwen3 vocabularies.
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "run_util.h"
#include "test_grammar_util.h"

static EmxGrammar *parse_ok(const char *gbnf) {
    EmxGrammar *g = NULL;
    char err[256] = "";
    cr_assert_eq(emx_grammar_parse(gbnf, strlen(gbnf), &g, err, sizeof err), 0, "%s: %s", gbnf, err);
    return g;
}

Test(grammar, parse_errors_name_the_place) {
    static const char *const cases[][2] = {
        {"root ::= x", "grammar: 1:10: undefined rule 'x'"},
        {"root ::= \"abc", "grammar: 1:10: unterminated string"},
        {"root ::= [a-z", "grammar: 1:10: unterminated character class"},
        {"root ::= \"a\"\nfoo ::= \"b\" ( \"c\"", "grammar: 2:13: unclosed '('"},
        {"rooty ::= \"a\"", "grammar: 1:1: no rule named 'root'"},
        {"root ::= \"a\"\nroot ::= \"b\"", "grammar: 2:1: rule 'root' is defined twice"},
        {"root ::= \"\\q\"", "grammar: 1:11: unknown escape '\\q'"},
        {"root ::= [z-a]", "grammar: 1:10: range U+007A-U+0061 is reversed"},
        {"root ::= \"a\"{3,1}", "grammar: 1:13: {3,1}: the maximum is below the minimum"},
        {"root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\"", "grammar: 2:1: rule 'expr' is left-recursive"},
        {"root ::= \"a\" @", "grammar: 1:14: unexpected '@'"},
        {"root = \"a\"", "grammar: 1:6: expected '::=' after rule name 'root'"},
        {"root ::= \"\\x4\"", "grammar: 1:14: expected 2 hex digits in an escape"},
        {"root ::= (\"\")*", "is left-recursive"},
        {"root ::= \"a\"{100001}", "repetition count over 100000"},
        {"", "grammar: 1:1: no rule named 'root'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        EmxGrammar *g = (EmxGrammar *)1;
        char err[256] = "";
        cr_expect_eq(emx_grammar_parse(cases[i][0], strlen(cases[i][0]), &g, err, sizeof err), -1, "%s", cases[i][0]);
        cr_expect_null(g);
        cr_expect(strstr(err, cases[i][1]) && !strchr(err, '\n'), "%s: got \"%s\", want \"%s\"", cases[i][0], err,
                  cases[i][1]);
    }
}

Test(grammar, accepts_and_rejects) {
    EmxGrammar *g = parse_ok(
        "# a comment\n"
        "root ::= greeting (\" \" name)? \"!\"{1,3}   # trailing comment\n"
        "greeting ::= \"hi\" | \"hello\"\n"
        "  | \"hey\"\n"
        "name ::= [A-Z] [a-z_0-9]* | \"\\u00e9t\\xE9\"\n");
    cr_expect_eq(gram_text_state(g, "hi!"), 1);
    cr_expect_eq(gram_text_state(g, "hello Bob_9!!!"), 1);
    cr_expect_eq(gram_text_state(g, "hey \xc3\xa9t\xc3\xa9!"), 1);
    cr_expect_eq(gram_text_state(g, "hey Bob"), 0, "a prefix: accepted, not done");
    cr_expect_eq(gram_text_state(g, "hi!!!!"), -1, "{1,3}");
    cr_expect_eq(gram_text_state(g, "hi bob!"), -1);
    cr_expect_eq(gram_text_state(g, "yo!"), -1);
    emx_grammar_free(g);
    g = parse_ok("root ::= \"ab\"+ (\"c\" [0-9]){2} (\"x\" | \"yz\")* \"end\"?");
    cr_expect_eq(gram_text_state(g, "ababc1c2"), 1);
    cr_expect_eq(gram_text_state(g, "abc1c2xyzxend"), 1);
    cr_expect_eq(gram_text_state(g, "abac1c2"), -1, "\"ab\"+ repeats the whole literal");
    cr_expect_eq(gram_text_state(g, "abc1"), 0);
    cr_expect_eq(gram_text_state(g, "abc1c2c3"), -1, "{2}");
    cr_expect_eq(gram_text_state(g, "abc1c2y"), 0);
    cr_expect_eq(gram_text_state(g, "abc1c2endx"), -1);
    emx_grammar_free(g);
    g = parse_ok("root ::= [^\"\\\\]+ \".\" . [\\x00-\\x1F]?");
    cr_expect_eq(gram_text_state(g, "ab.\n"), 1);
    cr_expect_eq(gram_text_state(g, "a\"b."), -1);
    cr_expect_eq(gram_text_state(g, "\xe4\xbd\xa0.\xf0\x9f\x98\x80"), 1, "any character is one code point");
    emx_grammar_free(g);
}

Test(grammar, rejection_leaves_the_state_unchanged) {
    EmxGrammar *g = parse_ok("root ::= \"ab\" \"c\"*");
    EmxGrammarState *s = emx_grammar_state_new(g);
    cr_assert_eq(emx_grammar_accept(s, "a", 1), 0);
    cr_expect_eq(emx_grammar_accept(s, "bx", 2), -1);
    cr_expect_eq(emx_grammar_accept(s, "bccc", 4), 0, "the failed call changed nothing");
    cr_expect(emx_grammar_done(s) && !emx_grammar_finished(s));
    emx_grammar_state_free(s);
    emx_grammar_free(g);
}

Test(grammar, utf8_split_across_calls) {
    EmxGrammar *g = parse_ok("root ::= [\\u00e0-\\u00ff] \"\\u4f60\" [\\U0001F600-\\U0001F64F]");
    const char *text = "\xc3\xa9\xe4\xbd\xa0\xf0\x9f\x98\x80";
    for (size_t cut = 0; cut <= strlen(text); cut++) {
        EmxGrammarState *s = emx_grammar_state_new(g);
        cr_assert_eq(emx_grammar_accept(s, text, cut), 0, "cut %zu", cut);
        cr_expect_eq(emx_grammar_done(s), cut == strlen(text));
        cr_assert_eq(emx_grammar_accept(s, text + cut, strlen(text) - cut), 0, "cut %zu", cut);
        cr_expect(emx_grammar_finished(s));
        emx_grammar_state_free(s);
    }
    EmxGrammarState *s = emx_grammar_state_new(g);
    cr_expect_eq(emx_grammar_accept(s, "\xc2", 1), -1, "U+0080.. U+00BF cannot start this");
    cr_expect_eq(emx_grammar_accept(s, "\xc3", 1), 0);
    cr_expect_eq(emx_grammar_accept(s, "A", 1), -1, "a partial character needs a continuation byte");
    cr_expect_eq(emx_grammar_accept(s, "\xa9\xe4", 2), 0);
    cr_expect_eq(emx_grammar_accept(s, "\xbd\xa1", 2), -1, "U+4F61 is not U+4F60");
    cr_expect_eq(emx_grammar_accept(s, "\xc0\x80", 2), -1, "overlong");
    emx_grammar_state_free(s);
    emx_grammar_free(g);
}

Test(grammar, nesting_past_the_depth_limit_is_refused) {
    EmxGrammar *g = parse_ok("root ::= \"(\" root \")\" | \"x\"");
    EmxGrammarState *s = emx_grammar_state_new(g);
    int rc = 0, i = 0;
    for (; i < 5000 && rc == 0; i++) rc = emx_grammar_accept(s, "(", 1);
    cr_expect_eq(rc, -2, "a limit, not unbounded memory");
    cr_expect(i > 500 && i <= EMX_GRAMMAR_MAX_DEPTH + 1, "refused after %d", i);
    cr_expect_eq(emx_grammar_accept(s, "x)", 2), 0, "the state still works");
    emx_grammar_state_free(s);
    emx_grammar_free(g);
}

Test(grammar, ambiguous_alternatives_deduplicate) {
    EmxGrammar *g = parse_ok("root ::= (\"a\" | \"a\" | [a-c])* \"!\"");
    EmxGrammarState *s = emx_grammar_state_new(g);
    for (int i = 0; i < 2000; i++) cr_assert_eq(emx_grammar_accept(s, "a", 1), 0, "step %d", i);
    cr_expect_eq(emx_grammar_accept(s, "!", 1), 0);
    cr_expect(emx_grammar_finished(s));
    emx_grammar_state_free(s);
    emx_grammar_free(g);
}

// ---------------------------------------------------------------------------------------------
// The mask against brute force

typedef struct {
    EmxGrammarMasker *mk;
    const EmxTokenizer *tk;
    int every, step, checked;
    uint8_t *fast, *slow;
} BruteCtx;

static void check_state(const EmxGrammarState *s, void *p) {
    BruteCtx *c = p;
    if (c->step++ % c->every) return;
    int n = emx_tokenizer_n_vocab(c->tk);
    int fast = emx_grammar_mask(c->mk, s, c->fast), slow = gram_brute_mask(s, c->tk, c->slow);
    cr_assert_eq(fast, slow, "step %d: mask allows %d tokens, brute force %d", c->step - 1, fast, slow);
    for (int id = 0; id < n; id++)
        cr_assert_eq(c->fast[id], c->slow[id], "step %d: token %d: mask %d, brute force %d", c->step - 1, id,
                     c->fast[id], c->slow[id]);
    c->checked++;
}

static void mask_equals_brute_force(const char *model, int walks, int every, int min_checked) {
    GramModel gm;
    if (gram_model_open(&gm, model)) cr_skip_test("build/models/%s missing (make test-models)", model);
    static const char *const grammars[] = {
        NULL,  // json_object
        "root ::= \"{\" ws \"\\\"k\\\"\" ws \":\" ws ( [0-9]{1,4} | \"\\\"\" [^\"\\\\]* \"\\\"\" ) ws \"}\"\n"
        "ws ::= [ \\n]{0,2}\n",
        "root ::= ( [\\u4e00-\\u9fff] | [a-z] | \" \" )+ \"\\u3002\"",
    };
    int n = emx_tokenizer_n_vocab(gm.tk);
    BruteCtx c = {.tk = gm.tk, .every = every, .fast = malloc((size_t)n), .slow = malloc((size_t)n)};
    for (size_t k = 0; k < sizeof grammars / sizeof grammars[0]; k++) {
        EmxGrammar *g = NULL;
        char err[256];
        if (grammars[k]) cr_assert_eq(emx_grammar_parse(grammars[k], strlen(grammars[k]), &g, err, sizeof err), 0, "%s", err);
        else cr_assert_eq(emx_grammar_json_object(&g, err, sizeof err), 0, "%s", err);
        cr_assert(c.mk = emx_grammar_masker_new(gm.trie, g, err, sizeof err), "%s", err);
        for (int w = 0; w < walks; w++) {
            int done;
            free(gram_walk(c.mk, g, gm.tk, 42 + k, (uint32_t)w, 40, &done, check_state, &c));
        }
        emx_grammar_masker_free(c.mk);
        emx_grammar_free(g);
    }
    cr_expect(c.checked >= min_checked, "%d states checked", c.checked);
    free(c.fast);
    free(c.slow);
    gram_model_close(&gm);
}

// Under the sanitizers one walk per grammar (each state's brute force decodes all 49,152 tokens
// again, the same code each time): make test's build runs the three.
Test(grammar, mask_equals_brute_force_smollm2, .timeout = 600) {
    mask_equals_brute_force("smollm2.q8.bin", EMX_TEST_SANITIZED ? 1 : 3, 3, EMX_TEST_SANITIZED ? 20 : 60);
}

Test(grammar, mask_equals_brute_force_qwen3, .timeout = 600) { mask_equals_brute_force("qwen3-tiny.q8.bin", 2, 8, 20); }

// Stop tokens: allowed exactly when done; when nothing else can follow, only they are.
Test(grammar, stop_tokens_only_when_done) {
    GramModel gm;
    if (gram_model_open(&gm, "qwen3-tiny.q8.bin")) cr_skip_test("build/models/qwen3-tiny.q8.bin missing");
    EmxGrammar *g = parse_ok("root ::= \"yes\" | \"no\"");
    char err[256];
    EmxGrammarMasker *mk = emx_grammar_masker_new(gm.trie, g, err, sizeof err);
    int n = emx_tokenizer_n_vocab(gm.tk), stops = 0;
    uint8_t *allowed = malloc((size_t)n);
    for (int id = 0; id < n; id++) stops += emx_is_stop(gm.tk, id);
    cr_assert(stops > 0);
    EmxGrammarState *s = emx_grammar_state_new(g);
    cr_expect_gt(emx_grammar_mask(mk, s, allowed), 0);
    for (int id = 0; id < n; id++)
        if (emx_is_stop(gm.tk, id) || emx_is_control(gm.tk, id)) cr_expect_eq(allowed[id], 0, "token %d", id);
    cr_assert_eq(emx_grammar_accept(s, "yes", 3), 0);
    cr_expect_eq(emx_grammar_mask(mk, s, allowed), stops, "finished: only the stop tokens");
    for (int id = 0; id < n; id++) cr_expect_eq(allowed[id], emx_is_stop(gm.tk, id), "token %d", id);
    emx_grammar_state_free(s);
    free(allowed);
    emx_grammar_masker_free(mk);
    emx_grammar_free(g);
    gram_model_close(&gm);
}

// The independent check: tests/grammar/check_walks.py validates tools/grammar's random walks over
// every schema of tests/data/grammar/ with the PyPI jsonschema package, in the venv `make test`
// builds ($EMX_BUILD/server-venv). A missing venv or model is a failure, never a skip.
Test(grammar, walks_validate_with_python_jsonschema, .timeout = 900) {
    char py[512], tool[512], smol[512], qwen[512];
    test_build_path(py, sizeof py, "server-venv/bin/python");
    test_build_path(tool, sizeof tool, "tools/grammar");
    test_build_path(smol, sizeof smol, "models/smollm2.q8.bin");
    test_build_path(qwen, sizeof qwen, "models/qwen3-tiny.q8.bin");
    cr_assert_eq(access(py, X_OK), 0, "%s missing: make build/server-venv/.ok installs jsonschema", py);
    cr_assert_eq(access(tool, X_OK), 0, "%s missing: make builds it", tool);
    int have_smol = access(smol, R_OK) == 0;
    const char *with[] = {"tests/grammar/check_walks.py", tool, "tests/data/grammar", smol, qwen, NULL};
    const char *without[] = {"tests/grammar/check_walks.py", tool, "tests/data/grammar", qwen, NULL};
    RunResult r = run_prog(py, have_smol ? with : without);
    cr_assert_eq(r.code, 0, "check_walks.py failed:\n%s\n%s", r.out, r.err);
    cr_assert(strstr(r.out, " passed, 0 failed"), "%s", r.out);
    run_free(&r);
}
