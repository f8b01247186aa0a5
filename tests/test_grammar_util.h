// test_grammar_util.h — helpers of the grammar tests (test_grammar.c, test_json_schema*.c): a
// model's tokenizer, a text fed to a fresh state, the brute-force mask (clone, accept each token,
// compare), and a random walk through the mask that returns its text.
#ifndef ENTROPIX_TEST_GRAMMAR_UTIL_H
#define ENTROPIX_TEST_GRAMMAR_UTIL_H

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/model.h"
#include "sampler/grammar.h"
#include "sampler/grammar_mask.h"
#include "sampler/json_schema.h"
#include "sampler/philox.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    EmxModel m;
    EmxTokenizer *tk;
    EmxTokenTrie *trie;
} GramModel;

// The tokenizer of $EMX_BUILD/models/<name>; 0, or 1 when the file is missing (the caller skips).
static inline int gram_model_open(GramModel *gm, const char *name) {
    char path[512], rel[256], err[512];
    snprintf(rel, sizeof rel, "models/%s", name);
    test_build_path(path, sizeof path, rel);
    FILE *f = fopen(path, "rb");
    if (!f) return 1;
    fclose(f);
    cr_assert_eq(emx_model_open(&gm->m, path, err, sizeof err), 0, "%s: %s", path, err);
    cr_assert(gm->tk = emx_tokenizer_new(&gm->m.tok, err, sizeof err), "%s", err);
    cr_assert(gm->trie = emx_token_trie_new(gm->tk, err, sizeof err), "%s", err);
    return 0;
}

static inline void gram_model_close(GramModel *gm) {
    emx_token_trie_free(gm->trie);
    emx_tokenizer_free(gm->tk);
    emx_model_close(&gm->m);
}

// text fed to a fresh state of g: 1 when it is a whole sentence, 0 a prefix of one, -1 refused.
static inline int gram_text_state(const EmxGrammar *g, const char *text) {
    EmxGrammarState *s = emx_grammar_state_new(g);
    cr_assert(s);
    int rc = emx_grammar_accept(s, text, strlen(text));
    int done = rc == 0 ? emx_grammar_done(s) : -1;
    emx_grammar_state_free(s);
    return done;
}

// Each schema cases[i][0] refused by emx_grammar_from_json_schema with a one-line message that
// holds cases[i][1].
static inline void gram_expect_schemas_refused(const char *const (*cases)[2], size_t n) {
    for (size_t i = 0; i < n; i++) {
        EmxGrammar *g = NULL;
        char err[512] = "";
        cr_expect_eq(emx_grammar_from_json_schema(cases[i][0], strlen(cases[i][0]), &g, err, sizeof err), -1, "%s",
                     cases[i][0]);
        cr_expect_null(g);
        cr_expect(strstr(err, cases[i][1]) && !strchr(err, '\n'), "%s: got \"%s\", want \"%s\"", cases[i][0], err,
                  cases[i][1]);
    }
}

// The mask by definition: every token tried on a clone of s. Returns the count.
static inline int gram_brute_mask(const EmxGrammarState *s, const EmxTokenizer *tk, uint8_t *allowed) {
    int n = emx_tokenizer_n_vocab(tk), count = 0;
    for (int id = 0; id < n; id++) {
        EmxGrammarState *c = emx_grammar_state_clone(s);
        cr_assert(c);
        allowed[id] = emx_grammar_accept_token(c, tk, id) == 0;
        count += allowed[id];
        emx_grammar_state_free(c);
    }
    return count;
}

static inline int gram_is_closing(const EmxTokenizer *tk, int id) {
    size_t len = 0;
    const char *b = emx_token_bytes_ref(tk, id, &len);
    if (emx_is_stop(tk, id)) return 1;
    for (size_t i = 0; b && i < len; i++)
        if (b[i] == '"' || b[i] == '}' || b[i] == ']') return 1;
    return 0;
}

// One random walk (the draw of tools/grammar.c: uniform among the allowed tokens, preferring
// closing ones 3 times in 4 after max/2 tokens). Its text (malloc'd); *done when it drew a stop
// token. on_step (if given) sees the state before each draw.
static inline char *gram_walk(EmxGrammarMasker *mk, const EmxGrammar *g, const EmxTokenizer *tk, uint64_t seed,
                              uint32_t lane, int max_tokens, int *done,
                              void (*on_step)(const EmxGrammarState *, void *), void *ctx) {
    int n_vocab = emx_tokenizer_n_vocab(tk);
    uint8_t *allowed = malloc((size_t)n_vocab);
    int *pick = malloc((size_t)n_vocab * sizeof *pick);
    size_t cap = 1 << 16, n = 0;
    char *out = malloc(cap);
    EmxGrammarState *s = emx_grammar_state_new(g);
    cr_assert(allowed && pick && out && s);
    *done = 0;
    for (int step = 0; step < max_tokens; step++) {
        if (on_step) on_step(s, ctx);
        int count = emx_grammar_mask(mk, s, allowed);
        cr_assert(count > 0, "step %d: no token allowed after \"%.*s\"", step, (int)n, out);
        int prefer = step >= max_tokens / 2 && emx_uniform_f64(seed, 2 * (uint64_t)step + 1, lane) < 0.75, m = 0;
        for (int id = 0; id < n_vocab && prefer; id++)
            if (allowed[id] && gram_is_closing(tk, id)) pick[m++] = id;
        for (int id = 0; id < n_vocab && !m; id++)
            if (allowed[id]) pick[m++] = id;
        int id = pick[(int)(emx_uniform_f64(seed, 2 * (uint64_t)step, lane) * m) % m];
        if (emx_is_stop(tk, id)) {
            *done = 1;
            break;
        }
        cr_assert_eq(emx_grammar_accept_token(s, tk, id), 0, "token %d allowed by the mask but refused", id);
        size_t len = 0;
        const char *b = emx_token_bytes_ref(tk, id, &len);
        cr_assert(n + len + 1 < cap, "walk longer than %zu bytes", cap);
        memcpy(out + n, b, len);
        n += len;
    }
    out[n] = 0;
    emx_grammar_state_free(s);
    free(allowed);
    free(pick);
    return out;
}

#endif
