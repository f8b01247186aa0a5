// tok_wordcache.c — see tok_wordcache.h.
#include "tokenizer/tok_wordcache.h"

#include <stdlib.h>
#include <string.h>

const int32_t *wordcache_get(const WordCache *c, const uint8_t *w, size_t n, uint32_t h,
                             size_t *n_ids) {
    if (!c->cap) return NULL;
    for (uint32_t i = h & (c->cap - 1);; i = (i + 1) & (c->cap - 1)) {
        uint32_t e = c->slot[i];
        if (!e) return NULL;
        const WordCacheEntry *en = &c->ent[e - 1];
        if (c->slot_hash[i] == h && en->word_len == n && memcmp(c->words + en->word_off, w, n) == 0) {
            *n_ids = en->n_ids;
            return c->ids + en->ids_off;
        }
    }
}

static int grow_slots(WordCache *c) {
    uint32_t cap = c->cap ? c->cap * 2 : 4096;
    uint32_t *slot = calloc(cap, sizeof *slot), *hash = malloc(cap * sizeof *hash);
    if (!slot || !hash) {
        free(slot);
        free(hash);
        return -1;
    }
    for (uint32_t i = 0; i < c->cap; i++) {
        if (!c->slot[i]) continue;
        uint32_t j = c->slot_hash[i] & (cap - 1);
        while (slot[j]) j = (j + 1) & (cap - 1);
        slot[j] = c->slot[i];
        hash[j] = c->slot_hash[i];
    }
    free(c->slot);
    free(c->slot_hash);
    c->slot = slot, c->slot_hash = hash, c->cap = cap;
    return 0;
}

static int reserve(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t nc = *cap ? *cap : 4096;
    while (nc < need) nc *= 2;
    void *q = realloc(*p, nc * elem);
    if (!q) return -1;
    *p = q, *cap = nc;
    return 0;
}

void wordcache_put(WordCache *c, const uint8_t *w, size_t n, uint32_t h, const int *ids,
                   size_t n_ids) {
    if (n > WORDCACHE_MAX_WORD || n_ids > 255 || c->n >= WORDCACHE_MAX_ENTRIES) return;
    if ((c->n + 1) * 2 > c->cap && grow_slots(c) != 0) return;
    size_t ecap = c->ent_cap;
    if (reserve((void **)&c->ent, &ecap, c->n + 1, sizeof *c->ent) != 0) return;
    c->ent_cap = (uint32_t)ecap;
    if (reserve((void **)&c->words, &c->words_cap, c->words_n + n, 1) != 0) return;
    if (reserve((void **)&c->ids, &c->ids_cap, c->ids_n + n_ids, sizeof *c->ids) != 0) return;
    WordCacheEntry *e = &c->ent[c->n];
    e->word_off = (uint32_t)c->words_n;
    e->word_len = (uint8_t)n;
    e->ids_off = (uint32_t)c->ids_n;
    e->n_ids = (uint8_t)n_ids;
    memcpy(c->words + c->words_n, w, n);
    c->words_n += n;
    for (size_t i = 0; i < n_ids; i++) c->ids[c->ids_n + i] = ids[i];
    c->ids_n += n_ids;
    uint32_t i = h & (c->cap - 1);
    while (c->slot[i]) i = (i + 1) & (c->cap - 1);
    c->slot[i] = ++c->n;
    c->slot_hash[i] = h;
}

void wordcache_free(WordCache *c) {
    free(c->slot);
    free(c->slot_hash);
    free(c->ent);
    free(c->words);
    free(c->ids);
    memset(c, 0, sizeof *c);
}
