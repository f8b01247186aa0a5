// tok_wordcache.h — a per-encode-call cache of BPE results for short words. Natural text
// repeats its words, so a long prompt mostly skips the merge loop. Owned by one emx_encode
// call (the tokenizer itself stays immutable and thread-safe). Failures to grow are ignored:
// the cache is an optimisation only.
#ifndef ENTROPIX_TOK_WORDCACHE_H
#define ENTROPIX_TOK_WORDCACHE_H

#include <stddef.h>
#include <stdint.h>

#define WORDCACHE_MAX_WORD 48        // longer words are not cached
#define WORDCACHE_MAX_ENTRIES (1u << 20)

typedef struct {
    uint32_t word_off, ids_off;
    uint8_t word_len, n_ids;
} WordCacheEntry;

typedef struct {
    uint32_t *slot;          // [cap] entry index + 1; 0 = empty
    uint32_t *slot_hash;     // [cap]
    uint32_t cap, n;
    WordCacheEntry *ent;     // [ent_cap]
    uint32_t ent_cap;
    uint8_t *words;          // word bytes, back to back
    size_t words_n, words_cap;
    int32_t *ids;            // cached ids, back to back
    size_t ids_n, ids_cap;
} WordCache;

// Returns the cached ids of word w (hash h) or NULL.
const int32_t *wordcache_get(const WordCache *c, const uint8_t *w, size_t n, uint32_t h,
                             size_t *n_ids);
void wordcache_put(WordCache *c, const uint8_t *w, size_t n, uint32_t h, const int *ids,
                   size_t n_ids);
void wordcache_free(WordCache *c);

#endif
