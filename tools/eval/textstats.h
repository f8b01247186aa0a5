// textstats.h — the open-ended metrics of one generation, over its token ids (the final stop
// token left out): does it end in a repetition loop, and distinct-n (docs/eval.md "Open-ended
// prompts").
#ifndef ENTROPIX_EVAL_TEXTSTATS_H
#define ENTROPIX_EVAL_TEXTSTATS_H

#define EVAL_LOOP_MAX_PERIOD 32  // the longest repeated unit looked for, in tokens
#define EVAL_LOOP_MIN_TOKENS 12  // the shortest looping tail, in tokens

// 1 when ids[0..n) ends in a repetition loop: for some period k in 1..EVAL_LOOP_MAX_PERIOD, the
// last L = max(3k, EVAL_LOOP_MIN_TOKENS) tokens (L <= n) each equal the token k before them
// (the tail is one k-gram repeated at least three times, and at least 12 tokens long). Else 0.
int eval_repetition_loop(const int *ids, int n);

// distinct-order: distinct order-grams of ids[0..n) / the n - order + 1 order-grams (order 1 or
// 2). NaN when n < order. Returns -1 when out of memory.
double eval_distinct_n(const int *ids, int n, int order);

#endif
