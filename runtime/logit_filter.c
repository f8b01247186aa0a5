// logit_filter.c — the logit rules as an EmxSampler in front of another (logit_filter.h).
#include "runtime/logit_filter.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/errmsg.h"

int emx_logit_rules_active(const EmxLogitRules *r) {
    return r->n_bias > 0 || emx_penalties_active(&r->penalties) || r->grammar;
}

int emx_logit_rules_check(const EmxLogitRules *r, int n_vocab, char *err, size_t errlen) {
    for (int i = 0; i < r->n_bias; i++)
        if (r->bias[i].id < 0 || r->bias[i].id >= n_vocab)
            return emx_seterr(err, errlen, "logit bias: token %d is not in the vocabulary (0 .. %d)", r->bias[i].id,
                              n_vocab - 1);
    return 0;
}

// The grammar's mask on f->logits: -inf for every token it does not allow next. 0, or -1 when
// it allows none (a partial character no token completes) or the masker ran out of memory.
static int apply_mask(EmxLogitFilter *f, int n_vocab) {
    memset(f->allowed, 0, (size_t)n_vocab);  // ids past the tokenizer's vocabulary: never
    if (emx_grammar_mask(f->masker, f->grammar, f->allowed) <= 0) return -1;
    for (int i = 0; i < n_vocab; i++)
        if (!f->allowed[i]) f->logits[i] = -INFINITY;
    return 0;
}

// The allowed token of the highest filtered logit (the lowest id on ties).
static int best_allowed(const EmxLogitFilter *f, int n_vocab) {
    int best = -1;
    for (int i = 0; i < n_vocab; i++)
        if (f->allowed[i] && (best < 0 || f->logits[i] > f->logits[best])) best = i;
    return best;
}

// The step that chooses the token of position pos: the context is positions 0 .. pos-1. A
// position the filter has not seen (a caller that fed tokens it did not choose) holds -1, which
// the penalties ignore; a replay from an earlier position forgets what came after it.
static int filter_choose(EmxSampler *self, EmxState *st, const float *logits, int n_vocab, int pos) {
    EmxLogitFilter *f = (EmxLogitFilter *)self;
    if (n_vocab > f->n_vocab || pos < 0 || pos >= f->ctx_cap) return -1;
    if (f->grammar && pos < f->n_ctx) return -1;  // a grammar's position is not kept per token: no replay
    for (int p = f->n_ctx; p < pos; p++) f->ctx[p] = -1;
    f->n_ctx = pos;
    memcpy(f->logits, logits, sizeof(float) * (size_t)n_vocab);
    emx_apply_logit_bias(f->logits, n_vocab, f->rules.bias, f->rules.n_bias);
    const int n_gen = pos > f->n_prompt ? pos - f->n_prompt : 0;
    emx_apply_penalties(f->logits, n_vocab, &f->rules.penalties, f->ctx, f->n_ctx, n_gen, f->seen, f->counts);
    if (f->grammar && apply_mask(f, n_vocab) != 0) return -1;
    int id = f->inner->choose(f->inner, st, f->logits, n_vocab, pos);
    if (f->grammar && (id < 0 || id >= n_vocab || !f->allowed[id])) id = best_allowed(f, n_vocab), f->n_overruled++;
    if (f->grammar && emx_grammar_accept_token(f->grammar, f->rules.tk, id) != 0) return -1;
    if (id >= 0 && id < n_vocab) f->ctx[f->n_ctx++] = id;
    return id;
}

int emx_logit_filter_init(EmxLogitFilter *f, EmxSampler *inner, const EmxLogitRules *r, int n_vocab, int ctx_cap,
                          char *err, size_t errlen) {
    memset(f, 0, sizeof *f);
    if (emx_logit_rules_check(r, n_vocab, err, errlen) != 0) return -1;
    f->base.choose = filter_choose;
    f->inner = inner;
    f->rules = *r;
    f->n_vocab = n_vocab;
    f->ctx_cap = ctx_cap;
    f->logits = malloc(sizeof(float) * (size_t)n_vocab);
    f->seen = calloc((size_t)n_vocab, 1);
    f->counts = calloc((size_t)n_vocab, sizeof(int));
    f->ctx = malloc(sizeof(int) * (size_t)(ctx_cap > 0 ? ctx_cap : 1));
    if (r->grammar) {
        f->grammar = emx_grammar_state_new(r->grammar);
        f->masker = emx_grammar_masker_new(r->trie, r->grammar, err, errlen);
        f->allowed = malloc((size_t)n_vocab);
    }
    if (!f->logits || !f->seen || !f->counts || !f->ctx || (r->grammar && (!f->grammar || !f->masker || !f->allowed))) {
        emx_logit_filter_free(f);
        return emx_seterr(err, errlen, "logit rules: out of memory for a vocabulary of %d", n_vocab);
    }
    return 0;
}

void emx_logit_filter_prompt(EmxLogitFilter *f, const int *ids, int n) {
    if (n > f->ctx_cap) n = f->ctx_cap;  // a prompt the context cannot hold fails in the forward pass
    memcpy(f->ctx, ids, sizeof(int) * (size_t)n);
    f->n_ctx = f->n_prompt = n;
}

void emx_logit_filter_free(EmxLogitFilter *f) {
    free(f->logits), free(f->seen), free(f->counts), free(f->ctx), free(f->allowed);
    if (f->grammar) emx_grammar_state_free(f->grammar);
    if (f->masker) emx_grammar_masker_free(f->masker);
    memset(f, 0, sizeof *f);
}
