// test_json_schema_pattern.c — JSON Schema `pattern`, `format` and integer bounds
// (sampler/json_schema_pattern.c, json_schema_format.c): the grammar of each pattern and format
// of tests/grammar/string_cases.py against Python's re.search and its standard-library format
// checks on thousands of strings; the refusals, naming the construct, its offset and the JSON
// pointer; the JSON escapes a pattern's characters take; every integer in windows around the
// bounds accepted exactly when it is within them.
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run_util.h"
#include "test_grammar_util.h"

static EmxGrammar *schema_grammar(const char *schema) {
    EmxGrammar *g = NULL;
    char err[512] = "";
    cr_assert_eq(emx_grammar_from_json_schema(schema, strlen(schema), &g, err, sizeof err), 0, "%s: %s", schema, err);
    return g;
}

Test(json_schema, pattern_and_format_match_python, .timeout = 600) {
    char py[512];
    test_build_path(py, sizeof py, "server-venv/bin/python");
    cr_assert_eq(access(py, X_OK), 0, "%s missing: make build/server-venv/.ok", py);
    const char *args[] = {"tests/grammar/string_cases.py", NULL};
    RunResult r = run_prog(py, args);
    cr_assert_eq(r.code, 0, "string_cases.py failed:\n%s", r.err);
    char schema[1024] = "";
    EmxGrammar *g = NULL;
    int n = 0, bad = 0, hits = 0;
    for (char *line = strtok(r.out, "\n"); line; line = strtok(NULL, "\n")) {
        char *t1 = strchr(line, '\t'), *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
        cr_assert(t1 && t2, "bad line: %s", line);
        *t1 = *t2 = 0;
        if (strcmp(schema, line)) {
            emx_grammar_free(g);
            snprintf(schema, sizeof schema, "%s", line);
            g = schema_grammar(schema);
        }
        int want = atoi(t2 + 1), got = gram_text_state(g, t1 + 1) == 1;
        hits += want;
        if (got != want && bad++ < 20) cr_expect_eq(got, want, "%s: %s: grammar %d, Python %d", schema, t1 + 1, got, want);
        n++;
    }
    emx_grammar_free(g);
    cr_expect_eq(bad, 0, "%d of %d strings disagree", bad, n);
    cr_expect(n > 10000 && hits > 3000, "%d cases, %d matches", n, hits);
    run_free(&r);
}

Test(json_schema, pattern_refusals_name_construct_offset_and_pointer) {
    static const char *const cases[][2] = {
        {"{\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":\"x(?=y)\"}}}",
         "json schema: 'pattern' at /properties/a: a lookahead '(?=' at offset 1 is not supported"},
        {"{\"type\":\"string\",\"pattern\":\"(?<=a)b\"}", "a lookbehind at offset 0 is not supported"},
        {"{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", "a backreference or octal escape at offset 3 is not supported"},
        {"{\"type\":\"string\",\"pattern\":\"a+?\"}", "a lazy quantifier at offset 1 is not supported"},
        {"{\"type\":\"string\",\"pattern\":\"\\\\bword\"}", "a word boundary '\\\\b' at offset 0 is not supported"},
        {"{\"type\":\"string\",\"pattern\":\"(?i)abc\"}", "a group modifier or flag '(?' at offset 0 is not supported"},
        {"{\"type\":\"string\",\"pattern\":\"\\u00e9(?<n>x)\"}", "a named group at offset 1 is not supported"},
        {"{\"type\":\"string\",\"pattern\":\"\\\\p{L}\"}", "a Unicode property escape at offset 0 is not supported"},
        {"{\"type\":\"string\",\"pattern\":\"a{2,1}\"}", "a quantifier {n,m} with m below n at offset 1"},
        {"{\"type\":\"string\",\"pattern\":\"a{,3}\"}", "a '{' that is not a quantifier (write '\\\\{') at offset 1 is not supported"},
        {"{\"type\":\"string\",\"pattern\":\"*a\"}", "a quantifier with nothing to repeat at offset 0"},
        {"{\"type\":\"string\",\"pattern\":\"a**\"}", "a quantifier after a quantifier at offset 2 is not supported"},
        {"{\"type\":\"string\",\"pattern\":\"(a\"}", "an unclosed '(' at offset 0"},
        {"{\"type\":\"string\",\"pattern\":\"a)\"}", "an unmatched ')' at offset 1"},
        {"{\"type\":\"string\",\"pattern\":\"[a-\"}", "an unterminated character class at offset 0"},
        {"{\"type\":\"string\",\"pattern\":\"[z-a]\"}", "a range out of order at offset 1"},
        {"{\"type\":\"string\",\"pattern\":\"a^b\"}", "a '^' not at the start of the pattern or of a top-level alternative at offset 1"},
        {"{\"type\":\"string\",\"pattern\":\"(a$)\"}", "a '$' not at the end of the pattern or of a top-level alternative at offset 2"},
        {"{\"type\":\"string\",\"pattern\":\"(a*)*\"}", "an unbounded repetition of something that can match the empty string at offset 0"},
        {"{\"type\":\"string\",\"pattern\":\"[]\"}", "a character class starting with ']'"},
        {"{\"type\":\"string\",\"pattern\":\"[^\\\\s\\\\S]\"}", "a character class that matches no character at offset 0"},
        {"{\"type\":\"string\",\"pattern\":\"a\\\\\"}", "a trailing backslash at offset 1"},
        {"{\"type\":\"string\",\"pattern\":\"\\\\q\"}", "an unknown escape '\\\\q' at offset 0 is not supported"},
        {"{\"type\":\"string\",\"pattern\":1}", "json schema: 'pattern' at / is not a string"},
        {"{\"type\":\"string\",\"pattern\":\"a\",\"maxLength\":3}", "'pattern' with 'minLength' or 'maxLength' at / is not supported"},
        {"{\"type\":\"string\",\"pattern\":\"a\",\"format\":\"date\"}", "'pattern' and 'format' together at / are not supported"},
        {"{\"pattern\":\"a\"}", "json schema: 'pattern' at / is supported only beside a \"type\""},
        {"{\"type\":\"string\",\"format\":\"hostname\"}", "json schema: format 'hostname' at / is not supported (date, time, date-time, uuid, email, ipv4)"},
        {"{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "json schema: no integer is within the bounds at /"},
        {"{\"type\":\"integer\",\"exclusiveMinimum\":true}", "json schema: 'exclusiveMinimum' at / is not a number"},
        {"{\"type\":\"integer\",\"maximum\":1e17}", "'maximum' at / is beyond 2^53 - 1 in magnitude (not supported)"},
        {"{\"type\":\"number\",\"maximum\":1}", "json schema: 'maximum' on a number at / is not supported (only \"minimum\": 0; an integer takes any bounds)"},
        {"{\"type\":\"number\",\"minimum\":1}", "'minimum' on a number at / is not supported"},
        {"{\"type\":\"integer\",\"multipleOf\":2}", "json schema: 'multipleOf' at / is not supported"},
    };
    // (the message escapes a backslash of the pattern, as every json schema message does)
    gram_expect_schemas_refused(cases, sizeof cases / sizeof cases[0]);
}

// A character the regex allows is written as JSON writes it, in each of JSON's forms but the
// \uXXXX of a printable character; raw control characters never.
Test(json_schema, pattern_characters_take_their_json_escapes) {
    EmxGrammar *g = schema_grammar("{\"type\":\"string\",\"pattern\":\"^[\\n\\\"\\\\\\\\/\\u007f\\u0001]$\"}");
    static const char *const yes[] = {"\"\\n\"", "\"\\u000a\"", "\"\\u000A\"", "\"\\\"\"", "\"\\\\\"", "\"/\"", "\"\\/\"",
                                      "\"\\u007f\"", "\"\\u007F\"", "\"\\u0001\""};
    static const char *const no[] = {"\"\n\"", "\"\\\"", "\"\x7f\"", "\"\x01\"", "\"\\u0022\"", "\"a\"", "\"\\n\\n\""};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) cr_expect_eq(gram_text_state(g, yes[i]), 1, "%s", yes[i]);
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) cr_expect_neq(gram_text_state(g, no[i]), 1, "%s", no[i]);
    emx_grammar_free(g);
    g = schema_grammar("{\"type\":\"string\",\"pattern\":\"b\"}");  // unanchored: any characters around
    cr_expect_eq(gram_text_state(g, "\"a\\\"\\u0000\\n\\u00e9b\xc3\xa9\\\\\" "), 1);
    cr_expect_eq(gram_text_state(g, "\"a\\\"c\""), -1);
    emx_grammar_free(g);
    g = schema_grammar("{\"type\":\"string\",\"format\":\"email\"}");
    cr_expect_eq(gram_text_state(g, "\"ada.lovelace+x@example.co.uk\""), 1);
    cr_expect_eq(gram_text_state(g, "\"a@b\""), -1, "a domain of two labels or more");
    cr_expect_eq(gram_text_state(g, "\".a@b.c\""), -1);
    cr_expect_eq(gram_text_state(g, "\"a@-b.c\""), -1);
    emx_grammar_free(g);
}

// Every integer of the windows around the bounds (and around 0) accepted exactly when within
// them; "-0" and leading zeros never.
Test(json_schema, integer_bounds_are_exact) {
    static const char *const bounds[] = {
        "\"minimum\":0",
        "\"minimum\":1",
        "\"minimum\":-1",
        "\"maximum\":0",
        "\"maximum\":-1",
        "\"minimum\":-15,\"maximum\":1234",
        "\"exclusiveMinimum\":-3.5,\"exclusiveMaximum\":99",
        "\"minimum\":2.5,\"maximum\":7.5",
        "\"minimum\":100,\"maximum\":100",
        "\"minimum\":-1000,\"maximum\":-10",
        "\"exclusiveMinimum\":-1000,\"exclusiveMaximum\":-10",
        "\"minimum\":999999,\"maximum\":1000001",
        "\"minimum\":3,\"exclusiveMinimum\":5,\"maximum\":10,\"exclusiveMaximum\":10",
        "\"minimum\":-9007199254740991,\"maximum\":-9007199254740900",
        "\"minimum\":9007199254740900",
        "\"maximum\":-9007199254740900",
        "\"minimum\":19,\"maximum\":20001",
    };
    static const char *const kw[] = {"\"minimum\":", "\"exclusiveMinimum\":", "\"maximum\":", "\"exclusiveMaximum\":"};
    int checked = 0;
    for (size_t i = 0; i < sizeof bounds / sizeof bounds[0]; i++) {
        char schema[256];
        snprintf(schema, sizeof schema, "{\"type\":\"integer\",%s}", bounds[i]);
        EmxGrammar *g = schema_grammar(schema);
        double b[4];
        int has[4];
        long long centers[8] = {0};
        int n_centers = 1;
        for (int k = 0; k < 4; k++) {
            const char *at = strstr(bounds[i], kw[k]);
            has[k] = at && (k % 2 || at == bounds[i] || at[-1] == ',');
            if (has[k]) b[k] = strtod(at + strlen(kw[k]), NULL), centers[n_centers++] = (long long)b[k];
        }
        for (int c = 0; c < n_centers; c++)
            for (long long v = centers[c] - 1100; v <= centers[c] + 1100; v++) {
                double d = (double)v;
                int in = (!has[0] || d >= b[0]) && (!has[1] || d > b[1]) && (!has[2] || d <= b[2]) && (!has[3] || d < b[3]);
                char text[40];
                snprintf(text, sizeof text, "%lld", v);
                cr_expect_eq(gram_text_state(g, text) == 1, in, "%s: %s", schema, text);
                checked++;
            }
        cr_expect_neq(gram_text_state(g, "-0"), 1, "%s", schema);
        cr_expect_neq(gram_text_state(g, "0100"), 1, "%s", schema);
        emx_grammar_free(g);
    }
    cr_expect(checked > 50000, "%d", checked);
    EmxGrammar *g = schema_grammar("{\"type\":\"number\",\"minimum\":0}");
    static const char *const yes[] = {"0", "0.5", "12e-3", "1E+2", "3.25"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) cr_expect_eq(gram_text_state(g, yes[i]), 1, "%s", yes[i]);
    cr_expect_eq(gram_text_state(g, "-1"), -1);
    cr_expect_eq(gram_text_state(g, "-0.5"), -1);
    emx_grammar_free(g);
}
