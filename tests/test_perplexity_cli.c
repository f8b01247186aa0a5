// test_perplexity_cli.c — tools/perplexity's command line: a run prints the perplexity line, and
// each bad input is one line naming the flag or file, exit 2 for usage and 1 for a file.
#include <criterion/criterion.h>
#include <string.h>

#include "run_util.h"
#include "test_util.h"

Test(perplexity_cli, runs_and_refuses_bad_input, .timeout = 120) {
    char bin[1024], model[1024], text[1024];
    test_build_path(bin, sizeof bin, "tools/perplexity");
    test_build_path(model, sizeof model, "models/stories260K.f32.bin");
    test_shared_path(text, sizeof text, "testdata/stories260K/expected.txt");
    RunResult r = run_prog(bin, (const char *[]){model, text, "-c", "64", "-t", "1", NULL});
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "perplexity ") && strstr(r.out, " scored tokens"), "[%s]", r.out);
    run_free(&r);
    expect_error_prog(bin, (const char *[]){model, text, "-c", "abc", NULL}, 2, "-c: 'abc' is not an integer");
    expect_error_prog(bin, (const char *[]){model, text, "-b", "0", NULL}, 2, "-b: '0' is not an integer in [1,");
    expect_error_prog(bin, (const char *[]){model, text, "--frob", NULL}, 2, "unknown option '--frob'");
    expect_error_prog(bin, (const char *[]){model, "/nonexistent.txt", NULL}, 1,
                      "perplexity: /nonexistent.txt: No such file or directory");
}
