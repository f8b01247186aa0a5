// grammar_internal.h — the compiled grammar and the stack-set arithmetic shared by the parser
// (grammar_parse.c), the matcher (grammar_state.c) and the mask (grammar_mask.c).
//
// A grammar is a flat array of elements, as llama.cpp's: rule r's alternatives start at
// elems[rule_start[r]], each is a sequence of GE_CHAR / GE_RULE elements ended by GE_ALT (another
// alternative follows) or GE_END (the rule's last). A GE_CHAR element's value is a class: sorted,
// disjoint, inclusive code-point ranges (negated classes are complemented at compile time).
// Groups and repetitions are compiled into generated rules, so every element is one symbol.
//
// A stack is a list of element positions, bottom first; its top is always a GE_CHAR element
// (the next code point it wants), or the stack is empty (the input so far is complete). A stack
// set is stored flat, [len, pos...] per stack, sorted (by length, then positions) and unique,
// so equal sets are equal arrays (the mask's cache key).
#ifndef ENTROPIX_GRAMMAR_INTERNAL_H
#define ENTROPIX_GRAMMAR_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "sampler/grammar.h"

enum { GE_END = 0, GE_ALT = 1, GE_RULE = 2, GE_CHAR = 3 };

typedef struct {
    uint32_t type;   // GE_*
    uint32_t value;  // GE_RULE: rule index; GE_CHAR: class index
} GramElem;

struct EmxGrammar {
    GramElem *elems;
    uint32_t n_elems;
    uint32_t *rule_start;  // [n_rules]: index of the rule's first element
    uint32_t n_rules;
    uint32_t root;
    uint32_t *class_start;  // [n_classes + 1]: class c is ranges[2*class_start[c] .. 2*class_start[c+1])
    uint32_t n_classes;
    uint32_t *ranges;  // lo, hi pairs
};

// A growable flat stack set (see above).
typedef struct {
    uint32_t *w;
    size_t n, cap;  // words used, allocated
    uint32_t n_stacks;
    int overflow;  // a limit (EMX_GRAMMAR_MAX_*) or an allocation failed while building it
} GramSet;

void gram_set_free(GramSet *s);
int gram_set_reserve(GramSet *s, size_t words);  // room for `words` words; -1: no memory
// The start set of g (the root rule's alternatives, expanded). 0, or -2 on a limit / no memory.
int gram_set_start(const EmxGrammar *g, GramSet *out);
// out = the stacks of `in` (flat, n words) that accept code point cp, advanced and expanded,
// canonical. 0 (out may be empty: cp rejected), -2 on a limit / no memory.
int gram_set_advance(const EmxGrammar *g, const uint32_t *in, size_t n, uint32_t cp, GramSet *out);
// 1 when some stack's top class holds a code point in [lo, hi] (a partial UTF-8 character's
// possible values), else 0.
int gram_set_may_match(const EmxGrammar *g, const uint32_t *in, size_t n, uint32_t lo, uint32_t hi);
int gram_set_has_empty(const uint32_t *in, size_t n);
// 1 when every stack's top class holds either all of [lo, hi] or none of it: then every code
// point of the range advances the set to the same stacks (the mask folds partial characters).
int gram_set_uniform(const EmxGrammar *g, const uint32_t *in, size_t n, uint32_t lo, uint32_t hi);

// Partial UTF-8: the bytes of an incomplete character so far (n 0: none).
typedef struct {
    uint8_t b[4];
    uint8_t n, need;  // bytes held, bytes the character has
} GramUtf8;

// The code points a partial character can still become: [lo, hi].
void gram_utf8_range(const GramUtf8 *u, uint32_t *lo, uint32_t *hi);

// One byte through (stacks, partial): the next stacks in *out (which the caller owns and
// reuses) when the byte completed a character, else *out untouched and *advanced 0.
// Returns 0 (accepted; *pend updated), -1 (rejected) or -2 (limit / no memory).
int gram_step_byte(const EmxGrammar *g, const uint32_t *in, size_t n, GramUtf8 *pend, uint8_t byte,
                   GramSet *out, int *advanced);

// The stacks and partial character of a state, for the mask.
void gram_state_view(const EmxGrammarState *s, const uint32_t **w, size_t *n, GramUtf8 *pend);

#endif
