// fuzz_jsonschema.c — JSON Schema -> GBNF (sampler/json_schema.c). Input: a schema.
// A refused schema has a one-line "json schema: ..." message; an accepted one's GBNF is
// refused by the parser only for a reason of its own (left recursion through $ref, size), with
// a one-line "grammar: ..." message; a parsed one starts a state and takes a few JSON texts.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "sampler/grammar.h"
#include "sampler/json_schema.h"

static void one_line(const char *err, const char *prefix) {
    if (strncmp(err, prefix, strlen(prefix)) != 0 || strchr(err, '\n')) {
        fprintf(stderr, "fuzz_jsonschema: bad message: \"%s\"\n", err);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *gbnf = NULL, err[512] = "";
    if (emx_json_schema_to_gbnf((const char *)data, size, &gbnf, err, sizeof err) != 0) {
        if (gbnf) abort();
        one_line(err, "json schema: ");
        return 0;
    }
    EmxGrammar *g = NULL;
    if (emx_grammar_parse(gbnf, strlen(gbnf), &g, err, sizeof err) != 0) {
        one_line(err, "grammar: ");
    } else {
        static const char *const texts[] = {"{}", "[1, 2.5e3, \"a\\u00e9\"]", "null", "{\"a\": {\"b\": [true]}}", "\"x\""};
        for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
            EmxGrammarState *s = emx_grammar_state_new(g);
            if (s) emx_grammar_accept(s, texts[i], strlen(texts[i]));
            emx_grammar_state_free(s);
        }
    }
    emx_grammar_free(g);
    free(gbnf);
    return 0;
}
