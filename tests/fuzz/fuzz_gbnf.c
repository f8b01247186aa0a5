// fuzz_gbnf.c — the GBNF parser (sampler/grammar_parse.c) and the matcher behind it
// (sampler/grammar_state.c). Input: GBNF text, then optionally NUL and bytes to feed.
// A refused grammar has a one-line "grammar: LINE:COL: ..." message; an accepted one makes a
// state that takes the bytes in chunks (a refused chunk leaves the state as it was: the same
// verdict when the rest is fed to a clone), and done/finished agree.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "sampler/grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t pos = 0, glen = 0, tlen = 0;
    const uint8_t *gtext = NULL, *text = NULL;
    if (!fuzz_next_part(data, size, &pos, &gtext, &glen)) return 0;
    if (!fuzz_next_part(data, size, &pos, &text, &tlen)) text = (const uint8_t *)"", tlen = 0;
    EmxGrammar *g = NULL;
    char err[512] = "";
    if (emx_grammar_parse((const char *)gtext, glen, &g, err, sizeof err) != 0) {
        if (g || strncmp(err, "grammar: ", 9) != 0 || strchr(err, '\n')) {
            fprintf(stderr, "fuzz_gbnf: bad refusal: \"%s\"\n", err);
            abort();
        }
        return 0;
    }
    EmxGrammarState *s = emx_grammar_state_new(g);
    for (size_t i = 0; s && i < tlen; i += 3) {
        size_t n = tlen - i < 3 ? tlen - i : 3;
        EmxGrammarState *c = emx_grammar_state_clone(s);
        if (!c) break;
        int rc = emx_grammar_accept(s, (const char *)text + i, n);
        if (rc != 0) {
            if (emx_grammar_accept(c, (const char *)text + i, n) != rc) {
                fprintf(stderr, "fuzz_gbnf: a refused chunk changed the state\n");
                abort();
            }
        }
        if (emx_grammar_finished(s) && !emx_grammar_done(s)) abort();
        emx_grammar_state_free(c);
    }
    emx_grammar_state_free(s);
    emx_grammar_free(g);
    return 0;
}
