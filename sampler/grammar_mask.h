// grammar_mask.h — which tokens a grammar state allows next: the vocabulary mask of
// constrained decoding (docs/grammar.md "The mask").
//
//   EmxTokenTrie      built once per tokenizer from each token's byte piece; immutable, so one
//                     trie may be shared by any number of maskers and threads. It holds
//                     pointers into the tokenizer's pieces: the tokenizer must outlive it.
//   EmxGrammarMasker  one grammar's mask over one trie: a lazily built byte automaton over the
//                     grammar's stack sets (each distinct state is interned, its transitions
//                     computed once) and a cache of finished masks keyed by state. Mutable:
//                     one masker per thread (a server keeps one per slot, or per grammar while
//                     generations using it run one at a time); it may serve any number of
//                     generations of its grammar in turn, and its caches make later ones cheap.
//                     The grammar and the trie must outlive it.
//
// A mask step walks the trie once, depth first, following the automaton and skipping a whole
// subtree as soon as its prefix is rejected. Token rules: a control token (emx_is_control) is
// never allowed, except a stop token (emx_is_stop), which is allowed exactly when the state is
// done (emx_grammar_done); a token with no bytes is never allowed; any other token is allowed
// when emx_grammar_accept of its bytes would succeed (a token may end inside a character).
#ifndef ENTROPIX_GRAMMAR_MASK_H
#define ENTROPIX_GRAMMAR_MASK_H

#include <stddef.h>
#include <stdint.h>

#include "sampler/grammar.h"
#include "tokenizer/tokenizer.h"

typedef struct EmxTokenTrie EmxTokenTrie;
typedef struct EmxGrammarMasker EmxGrammarMasker;

// NULL with a one-line reason in err (out of memory).
EmxTokenTrie *emx_token_trie_new(const EmxTokenizer *tk, char *err, size_t errlen);
void emx_token_trie_free(EmxTokenTrie *t);
int emx_token_trie_n_vocab(const EmxTokenTrie *t);

// NULL with a one-line reason in err (out of memory).
EmxGrammarMasker *emx_grammar_masker_new(const EmxTokenTrie *trie, const EmxGrammar *g, char *err,
                                         size_t errlen);
void emx_grammar_masker_free(EmxGrammarMasker *m);

// Fills allowed[0 .. n_vocab) with 1 (may come next) or 0; s must be a state of the masker's
// grammar; allowed has emx_token_trie_n_vocab entries. Returns the number of allowed tokens, or
// -1 with nothing written when the masker ran out of memory. 0 means no token can continue and
// the state is not done: the grammar wants bytes no token begins with (a vocabulary without a
// byte the grammar requires) or a partial character no token completes; the caller ends the
// generation as failed.
int emx_grammar_mask(EmxGrammarMasker *m, const EmxGrammarState *s, uint8_t *allowed);

// Counters since the masker was made, for benchmarks.
typedef struct {
    uint64_t masks;        // emx_grammar_mask calls
    uint64_t cache_hits;   // of them, answered from the mask cache
    uint64_t trie_nodes;   // trie nodes visited by the walks (misses)
    uint64_t dfa_states;   // automaton states interned (now)
    uint64_t resets;       // times the automaton and caches were dropped for size
} EmxGrammarMaskStats;
void emx_grammar_masker_stats(const EmxGrammarMasker *m, EmxGrammarMaskStats *out);

#endif
