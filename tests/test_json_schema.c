// test_json_schema.c — JSON Schema -> grammar (sampler/json_schema.h): refused keywords and bad
// schemas named with their JSON pointer, the GBNF of a small schema, and random walks through
// the mask over every schema of tests/data/grammar/ that always end in JSON cJSON parses.
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_grammar_util.h"

Test(json_schema, refusals_name_keyword_and_pointer) {
    static const char *const cases[][2] = {
        {"{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"contentEncoding\":\"base64\"}}}",
         "json schema: 'contentEncoding' at /properties/name is not supported"},
        {"{\"oneOf\":[{\"type\":\"string\"}]}", "json schema: 'oneOf' at / is not supported"},
        {"{\"type\":\"array\",\"items\":{\"allOf\":[]}}", "json schema: 'allOf' at /items is not supported"},
        {"{\"anyOf\":[{\"type\":\"string\"},{\"multipleOf\":2}]}", "json schema: 'multipleOf' at /anyOf/1 is not supported"},
        {"{\"properties\":{\"a/b~\":{\"not\":{}}}}", "json schema: 'not' at /properties/a~1b~0 is not supported"},
        {"{\"type\":\"date\"}", "json schema: type 'date' at / is not supported"},
        {"{\"$ref\":\"http://x/y\"}", "json schema: $ref 'http://x/y' at / is not supported"},
        {"{\"$ref\":\"#/$defs/none\"}", "json schema: $ref '#/$defs/none' at / names no definition"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"b\"]}", "names 'b', which is not in its properties"},
        {"{\"type\":\"array\",\"minItems\":3,\"maxItems\":1}", "json schema: maxItems below minItems at /"},
        {"{\"type\":\"string\",\"maxLength\":-1}", "'maxLength' at / is not an integer from 0 to 100000"},
        {"{\"properties\":{\"x\":false}}", "json schema: schema false at /properties/x matches nothing"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"additionalProperties\":true}", "only false is supported"},
        {"{\"type\": ", "json schema: the schema is not valid JSON"},
        {"[1]", "json schema: the schema at / is not an object"},
    };
    gram_expect_schemas_refused(cases, sizeof cases / sizeof cases[0]);
}

Test(json_schema, annotations_are_ignored_and_gbnf_is_readable) {
    const char *schema = "{\"$schema\":\"x\",\"title\":\"t\",\"description\":\"d\",\"type\":\"object\","
                         "\"properties\":{\"ok\":{\"type\":\"boolean\",\"default\":true,\"examples\":[true]}},"
                         "\"required\":[\"ok\"],\"additionalProperties\":false}";
    char *gbnf = NULL, err[256] = "";
    cr_assert_eq(emx_json_schema_to_gbnf(schema, strlen(schema), &gbnf, err, sizeof err), 0, "%s", err);
    cr_expect(strstr(gbnf, "root ::= "));
    cr_expect(strstr(gbnf, "\"\\\"ok\\\"\" space \":\" space"), "%s", gbnf);
    cr_expect(strstr(gbnf, "space ::= | \" \" | \"\\n\" [ \\t]{0,20}"), "%s", gbnf);
    EmxGrammar *g = NULL;
    cr_assert_eq(emx_grammar_parse(gbnf, strlen(gbnf), &g, err, sizeof err), 0, "%s", err);
    EmxGrammarState *s = emx_grammar_state_new(g);
    const char *good = "{ \"ok\" : true }\n  ";
    cr_expect_eq(emx_grammar_accept(s, good, strlen(good)), 0);
    cr_expect(emx_grammar_done(s));
    cr_expect_eq(emx_grammar_accept(s, "                  ", 18), 0, "up to 20 blanks after a newline");
    cr_expect_eq(emx_grammar_accept(s, " ", 1), -1, "whitespace is bounded");
    emx_grammar_state_free(s);
    s = emx_grammar_state_new(g);
    cr_expect_eq(emx_grammar_accept(s, "{\"ok\":\"\x01", 8), -1);
    emx_grammar_state_free(s);
    emx_grammar_free(g);
    free(gbnf);
}

static void walk_schemas(const char *model, int walks) {
    GramModel gm;
    if (gram_model_open(&gm, model)) cr_skip_test("build/models/%s missing (make test-models)", model);
    DIR *d = opendir("tests/data/grammar");
    cr_assert(d);
    int n_schemas = 0, n_done = 0, n_walks = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (!strstr(e->d_name, ".json")) continue;
        char path[512], err[256];
        snprintf(path, sizeof path, "tests/data/grammar/%s", e->d_name);
        size_t len = 0;
        char *text = test_read_file(path, &len);
        EmxGrammar *g = NULL;
        cr_assert_eq(emx_grammar_from_json_schema(text, len, &g, err, sizeof err), 0, "%s: %s", path, err);
        EmxGrammarMasker *mk = emx_grammar_masker_new(gm.trie, g, err, sizeof err);
        cr_assert(mk, "%s", err);
        for (int w = 0; w < walks; w++, n_walks++) {
            int done = 0;
            char *out = gram_walk(mk, g, gm.tk, 5, (uint32_t)w, 300, &done, NULL, NULL);
            if (done) {
                cJSON *v = cJSON_Parse(out);
                cr_expect(v, "%s walk %d: not JSON: %s", path, w, out);
                cJSON_Delete(v);
                n_done++;
            }
            free(out);
        }
        emx_grammar_masker_free(mk);
        emx_grammar_free(g);
        free(text);
        n_schemas++;
    }
    closedir(d);
    cr_expect(n_schemas >= 8, "%d schemas", n_schemas);
    cr_expect(4 * n_done >= 3 * n_walks, "%d of %d walks finished", n_done, n_walks);
    gram_model_close(&gm);
}

Test(json_schema, walks_parse_smollm2, .timeout = 600) { walk_schemas("smollm2.q8.bin", 6); }
Test(json_schema, walks_parse_qwen3, .timeout = 600) { walk_schemas("qwen3-tiny.q8.bin", 4); }
