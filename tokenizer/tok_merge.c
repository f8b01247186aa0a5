// tok_merge.c — the merge loop both encoders share (tok_merge.h).
//
// Merging follows HF tokenizers' Word::merge_all: all adjacent pairs that have a merge rule go
// into a min-heap keyed by (priority, position); the top is applied if still current, and the
// new symbol's pairs with its neighbours are pushed. Each merge costs O(log n), so a 100 KB
// word without spaces is as cheap per byte as a short one.
#include "tokenizer/tok_merge.h"

#include <stdlib.h>
#include <string.h>

int idvec_push(IdVec *a, int id) {
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 256;
        int *v = realloc(a->v, cap * sizeof *v);
        if (!v) return -1;
        a->v = v, a->cap = cap;
    }
    a->v[a->n++] = id;
    return 0;
}

void enc_scratch_free(EncScratch *s) {
    free(s->sym_id);
    free(s->sym_prev);
    free(s->sym_next);
    free(s->heap);
    free(s->cat);
    if (s->md) pcre2_match_data_free(s->md);
    wordcache_free(&s->cache);
    memset(s, 0, sizeof *s);
}

int enc_scratch_reserve(EncScratch *s, size_t n) {
    if (n <= s->cap) return 0;
    size_t cap = s->cap ? s->cap : 64;
    while (cap < n) cap *= 2;
    int32_t *a = realloc(s->sym_id, cap * sizeof *a);
    if (!a) return -1;
    s->sym_id = a;
    a = realloc(s->sym_prev, cap * sizeof *a);
    if (!a) return -1;
    s->sym_prev = a;
    a = realloc(s->sym_next, cap * sizeof *a);
    if (!a) return -1;
    s->sym_next = a;
    s->cap = cap;
    return 0;
}

static int heap_grow(EncScratch *s) {
    size_t cap = s->heap_cap ? s->heap_cap * 2 : 64;
    MergeCand *h = realloc(s->heap, cap * sizeof *h);
    if (!h) return -1;
    s->heap = h, s->heap_cap = cap;
    return 0;
}

int enc_heap_append(EncScratch *s, MergeCand c) {
    if (s->heap_n == s->heap_cap && heap_grow(s) != 0) return -1;
    s->heap[s->heap_n++] = c;
    return 0;
}

static void sift_down(MergeCand *h, size_t n, size_t i, MergeCand x) {
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && h[c + 1].key < h[c].key) c++;
        if (h[c].key >= x.key) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = x;
}

void enc_heap_build(EncScratch *s) {
    for (size_t i = s->heap_n / 2; i-- > 0;) sift_down(s->heap, s->heap_n, i, s->heap[i]);
}

int enc_heap_push(EncScratch *s, MergeCand c) {
    if (s->heap_n == s->heap_cap && heap_grow(s) != 0) return -1;
    MergeCand *h = s->heap;
    size_t i = s->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p].key <= c.key) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = c;
    return 0;
}

int enc_heap_pop(EncScratch *s, MergeCand *out) {
    if (s->heap_n == 0) return 0;
    *out = s->heap[0];
    MergeCand last = s->heap[--s->heap_n];
    if (s->heap_n) sift_down(s->heap, s->heap_n, 0, last);
    return 1;
}

int enc_merge_symbols(const struct EmxTokenizer *tk, EncScratch *s, size_t n, EncPairFn push_pair) {
    // Symbols sym_id[0..n) are linked in order; merged-away symbols get id -2.
    for (size_t i = 0; i < n; i++) {
        s->sym_prev[i] = (int32_t)i - 1;
        s->sym_next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    s->heap_n = 0;
    for (size_t i = 0; i + 1 < n; i++)
        if (push_pair(tk, s, (int32_t)i, 1) != 0) return -1;
    enc_heap_build(s);
    MergeCand c;
    while (enc_heap_pop(s, &c)) {
        int32_t pos = cand_pos(&c);
        // Stale if the left symbol changed or its right neighbour is no longer `right`.
        if (s->sym_id[pos] != c.left) continue;
        int32_t nx = s->sym_next[pos];
        if (nx < 0 || s->sym_id[nx] != c.right) continue;
        s->sym_id[pos] = c.merged;
        s->sym_id[nx] = -2;
        int32_t nn = s->sym_next[nx];
        s->sym_next[pos] = nn;
        if (nn >= 0) s->sym_prev[nn] = pos;
        if (s->sym_prev[pos] >= 0 && push_pair(tk, s, s->sym_prev[pos], 0) != 0) return -1;
        if (push_pair(tk, s, pos, 0) != 0) return -1;
    }
    return 0;
}
