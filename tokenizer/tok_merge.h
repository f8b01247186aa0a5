// tok_merge.h — what both encoders (tok_bpe.c, tok_spm.c) build on: the growable id vector, the
// scratch memory of one encode call, the min-heap of merge candidates and the merge loop itself.
// Knows nothing of the vocabulary: each encoder passes its own pair rule (EncPairFn).
#ifndef ENTROPIX_TOK_MERGE_H
#define ENTROPIX_TOK_MERGE_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tok_wordcache.h"

struct EmxTokenizer;  // tokenizer_internal.h; only passed through to the encoder's pair rule

// Growable id vector used while encoding.
typedef struct {
    int *v;
    size_t n, cap;
} IdVec;

int idvec_push(IdVec *a, int id);

// A merge candidate: the pair (left, right) starting at symbol `pos`. Lower prio first (BPE:
// the merge rank; SPM: the merged piece's score mapped so that a higher score sorts first),
// then lower position, as HF tokenizers and llama2.c break ties.
typedef struct {
    uint64_t key;  // prio << 32 | pos: a single compare orders by priority, then position
    int32_t left, right, merged;
} MergeCand;

static inline MergeCand merge_cand(uint32_t prio, int32_t pos, int32_t left, int32_t right,
                                   int32_t merged) {
    MergeCand c = {((uint64_t)prio << 32) | (uint32_t)pos, left, right, merged};
    return c;
}
static inline int32_t cand_pos(const MergeCand *c) { return (int32_t)(uint32_t)c->key; }

// Scratch memory of one emx_encode call (reused across words; grown, never shrunk).
typedef struct {
    int32_t *sym_id, *sym_prev, *sym_next;  // [cap] BPE/SPM symbols (linked list)
    MergeCand *heap;                        // [heap_cap] binary min-heap
    size_t cap, heap_cap, heap_n;
    char *cat;                              // SPM: concatenation buffer [2 * max piece + 1]
    pcre2_match_data *md;
    WordCache cache;                        // BPE results of short words seen in this call
    // Input bytes the vocabulary has no token for (left out of the ids, as HF tokenizers does):
    // how many, and the first one's value and offset in the sanitised text. `base` is the text
    // being encoded (the sanitised text, or an NFC copy of a segment of it starting at base_off).
    size_t n_dropped, drop_off;
    uint8_t drop_byte;
    const char *base;
    size_t base_off;
} EncScratch;

// Notes that the byte at p (inside s->base) has no token and is left out.
static inline void enc_note_drop(EncScratch *s, const char *p) {
    if (s->n_dropped++ == 0) {
        s->drop_byte = (uint8_t)*p;
        s->drop_off = s->base_off + (size_t)(p - s->base);
    }
}

void enc_scratch_free(EncScratch *s);
int enc_scratch_reserve(EncScratch *s, size_t n);  // symbol arrays for n symbols
int enc_heap_push(EncScratch *s, MergeCand c);
// Initial candidates: append them all, then heapify once (O(n) instead of O(n log n)).
int enc_heap_append(EncScratch *s, MergeCand c);
void enc_heap_build(EncScratch *s);
int enc_heap_pop(EncScratch *s, MergeCand *out);   // 0 when empty

// Pushes the merge candidate for the pair starting at symbol `pos`, if the vocabulary has one
// (BPE: by merge rank; SPM: by the merged piece's score). Returns -1 on out of memory.
typedef int (*EncPairFn)(const struct EmxTokenizer *tk, EncScratch *s, int32_t pos, int initial);
// The merge loop shared by BPE and SPM: links sym_id[0..n), then repeatedly applies the best
// candidate (a min-heap with lazy deletion of stale pairs), O(n log n) in the word length.
int enc_merge_symbols(const struct EmxTokenizer *tk, EncScratch *s, size_t n, EncPairFn push_pair);

#endif
