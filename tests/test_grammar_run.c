// test_grammar_run.c — ./run's grammar flags (--grammar, --grammar-file, -j/--json-schema,
// --json-schema-file; runtime/logit_filter.h): SmolLM2's outputs under JSON schemas validated by
// the PyPI jsonschema package for each sampler (tests/grammar/check_run.py), a GBNF grammar that
// the text must match whatever the sampler, and the flags' errors.
#include <criterion/criterion.h>
#include <regex.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "run_util.h"
#include "test_util.h"

Test(grammar_run, smollm2_json_schemas_validate_with_python_jsonschema, .timeout = 900) {
    char py[512], smol[512];
    test_build_path(py, sizeof py, "server-venv/bin/python");
    test_build_path(smol, sizeof smol, "models/smollm2.q8.bin");
    cr_assert_eq(access(py, X_OK), 0, "%s missing: make build/server-venv/.ok installs jsonschema", py);
    if (access(smol, R_OK) != 0) cr_skip_test("%s missing: needs `make weights`, then make %s", smol, smol);
    const char *args[] = {"tests/grammar/check_run.py", run_binary(), smol, "tests/data/grammar/person.json",
                          "tests/data/grammar/enums.json", NULL};
    RunResult r = run_prog(py, args);
    cr_assert_eq(r.code, 0, "check_run.py failed:\n%s\n%s", r.out, r.err);
    cr_assert(strstr(r.out, " passed, 0 failed"), "%s", r.out);
    run_free(&r);
}

// A GBNF grammar on stories260K (a base model: no chat template, raw prompt): the text after the
// prompt matches the grammar's language, checked here by a POSIX regex of the same language.
Test(grammar_run, gbnf_text_matches_under_every_sampler, .timeout = 300) {
    char mp[1024];
    test_build_path(mp, sizeof mp, "models/stories260K.f32.bin");
    const char *gbnf = "root ::= \" \" word (\" \" word){2,5} \".\"\nword ::= [a-z]{1,8}";
    regex_t re;
    cr_assert_eq(regcomp(&re, "^Once upon a time [a-z]{1,8}( [a-z]{1,8}){2,5}\\.\n$", REG_EXTENDED), 0);
    const char *samplers[][4] = {{"--sampler", "greedy", NULL}, {"--sampler", "combined", "--temp", "1.5"},
                                 {"--sampler", "entropix", NULL}};
    for (int k = 0; k < 3; k++)
        for (int seed = 1; seed <= 3; seed++) {
            char s[16];
            snprintf(s, sizeof s, "%d", seed);
            const char *args[16] = {mp, "-p", "Once upon a time", "--grammar", gbnf, "-n", "60", "-s", s, "-t", "1",
                                    samplers[k][0], samplers[k][1], samplers[k][2], samplers[k][3], NULL};
            RunResult r = run(args);
            cr_assert_eq(r.code, 0, "%s: %s", samplers[k][1], r.err);
            cr_expect_eq(regexec(&re, r.out, 0, NULL, 0), 0, "%s -s %d: [%s] is not in the grammar's language",
                         samplers[k][1], seed, r.out);
            run_free(&r);
        }
    regfree(&re);
}

Test(grammar_run, flag_errors_are_one_line) {
    char mp[1024];
    test_build_path(mp, sizeof mp, "models/stories260K.f32.bin");
    expect_error((const char *[]){mp, "--grammar", "root ::= x", "-j", "{}", NULL}, 2, "a grammar is given already");
    expect_error((const char *[]){mp, "--sampler", "agents", "--grammar", "root ::= \"a\"", NULL}, 2,
                 "not available with --sampler agents");
    expect_error((const char *[]){mp, "-n", "2", "--grammar", "root ::= undefined", NULL}, 2, "--grammar: grammar: 1:");
    expect_error((const char *[]){mp, "-n", "2", "--json-schema", "{\"type\": \"object\", \"multipleOf\": 2}", NULL}, 2,
                 "--json-schema: ");
    expect_error((const char *[]){mp, "-n", "2", "--json-schema-file", "/nonexistent.json", NULL}, 2,
                 "--json-schema-file /nonexistent.json: No such file or directory");
    expect_error((const char *[]){mp, "-n", "2", "--grammar-file", mp, "--metrics", mp, NULL}, 2, "");
}
