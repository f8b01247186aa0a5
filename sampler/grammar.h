// grammar.h — constrained decoding: a GBNF grammar (llama.cpp's notation, docs/grammar.md) is
// compiled once into an immutable EmxGrammar; a generation follows it with an EmxGrammarState,
// fed the BYTES of each chosen token; the mask of the tokens that may come next is
// sampler/grammar_mask.h, and JSON Schema -> grammar is sampler/json_schema.h.
//
//   EmxGrammar       immutable after parse: any number of states (and threads) may share one;
//                    it must outlive them.
//   EmxGrammarState  one generation's position: a set of parse stacks (deduplicated, each a
//                    pushdown position in a rule alternative) plus the bytes of an incomplete
//                    UTF-8 character (tokens split characters). Not shared between threads.
//
// Limits: a state holds at most EMX_GRAMMAR_MAX_STACKS stacks of at most EMX_GRAMMAR_MAX_DEPTH
// positions; input that would pass either is refused (-2 from emx_grammar_accept), so memory is
// bounded whatever the grammar. Left-recursive grammars are refused by the parser.
//
// Errors: one line through (err, errlen) (base/errmsg.h); parser errors name line:column.
#ifndef ENTROPIX_GRAMMAR_H
#define ENTROPIX_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"

typedef struct EmxGrammar EmxGrammar;
typedef struct EmxGrammarState EmxGrammarState;

enum {
    EMX_GRAMMAR_MAX_STACKS = 1024,  // parse stacks in one state
    EMX_GRAMMAR_MAX_DEPTH = 1024,   // positions in one stack (nesting depth of the input)
};

// Parses GBNF text (len bytes, UTF-8; need not be NUL-terminated) with a rule named `root`.
// 0 and *out (free with emx_grammar_free), or -1 and a message "grammar: LINE:COL: problem"
// (*out NULL).
int emx_grammar_parse(const char *gbnf, size_t len, EmxGrammar **out, char *err, size_t errlen);
// The built-in grammar of OpenAI's response_format {"type": "json_object"}: any JSON object,
// bounded whitespace (the same rules emx_json_schema_to_gbnf emits for an open object).
int emx_grammar_json_object(EmxGrammar **out, char *err, size_t errlen);
void emx_grammar_free(EmxGrammar *g);

// A state at the start of the input. NULL: out of memory (or the start itself passes a limit).
EmxGrammarState *emx_grammar_state_new(const EmxGrammar *g);
EmxGrammarState *emx_grammar_state_clone(const EmxGrammarState *s);  // NULL: out of memory
void emx_grammar_state_free(EmxGrammarState *s);

// Feeds n bytes (any split of UTF-8: a character may end in a later call). Returns 0 (s
// advanced), -1 (the grammar cannot continue with these bytes, or they are not UTF-8), or -2
// (a state limit above was reached, or out of memory). On -1 and -2 s is unchanged.
int emx_grammar_accept(EmxGrammarState *s, const char *bytes, size_t n);
// 1 when the input so far is a complete sentence of the grammar (no partial character
// pending); more input may still be allowed after it.
int emx_grammar_done(const EmxGrammarState *s);
// 1 when nothing at all can follow (done, and no stack expects more input).
int emx_grammar_finished(const EmxGrammarState *s);

// The sampler's step: accepts token `id` of `tk`. A stop token (emx_is_stop) is accepted
// (returns 0, s unchanged) exactly when the state is done; any other control token, a token
// with no bytes or an id out of range is refused (-1); else emx_grammar_accept of its bytes.
int emx_grammar_accept_token(EmxGrammarState *s, const EmxTokenizer *tk, int id);

#endif
