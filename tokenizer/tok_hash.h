// tok_hash.h — the two hash tables the tokenizer needs: byte string -> id (pieces), and
// (left id, right id) -> (rank, merged id) (BPE merges). Open addressing, linear probing,
// fixed capacity chosen at init (the number of keys is known up front), no deletion.
#ifndef ENTROPIX_TOK_HASH_H
#define ENTROPIX_TOK_HASH_H

#include <stddef.h>
#include <stdint.h>

uint32_t tok_hash_bytes(const void *s, size_t len);

// Keys are not stored: the table holds ids, and `key` returns the bytes of an id (so the
// table costs 8 bytes a slot and the strings live wherever their owner keeps them).
typedef const char *(*StrMapKeyFn)(const void *ctx, int32_t id, uint32_t *len);

typedef struct {
    uint64_t *slot;    // [cap] hash << 32 | (id + 1); 0 = empty (one cache line per probe)
    uint32_t mask;     // cap - 1
    uint32_t n;
    StrMapKeyFn key;
    const void *ctx;
} StrMap;

int strmap_init(StrMap *m, uint32_t max_keys, StrMapKeyFn key, const void *ctx);
void strmap_free(StrMap *m);
// Inserts id under its key. Returns 0, or 1 if an equal key is already there (the first id
// is kept), or -1 when full (cannot happen within max_keys).
int strmap_put(StrMap *m, int32_t id);
int32_t strmap_get(const StrMap *m, const char *s, size_t len);  // -1 if absent
// The same with h = tok_hash_bytes(s, len) already computed (batched loads prefetch first).
int32_t strmap_get_h(const StrMap *m, const char *s, size_t len, uint32_t h);
int strmap_put_h(StrMap *m, int32_t id, uint32_t h);
static inline const void *strmap_slot_addr(const StrMap *m, uint32_t h) {
    return &m->slot[h & m->mask];
}

// (left, right) -> (rank, merged id). One 16-byte slot per pair: a lookup touches one line.
typedef struct {
    uint64_t key;      // (left << 32 | right) + 1; 0 = empty
    uint32_t rank;
    int32_t merged;
} PairSlot;

typedef struct {
    PairSlot *slot;    // [cap]
    uint32_t mask;
} PairMap;

int pairmap_init(PairMap *m, uint32_t max_keys);
void pairmap_free(PairMap *m);
static inline uint32_t pairmap_index(const PairMap *m, int32_t left, int32_t right) {
    uint64_t k = (((uint64_t)(uint32_t)left << 32) | (uint32_t)right) + 1;
    return (uint32_t)((k * 0x9E3779B97F4A7C15ull) >> 32) & m->mask;
}
// Keeps the first (lowest-rank) entry for a pair that appears twice.
void pairmap_put(PairMap *m, int32_t left, int32_t right, uint32_t rank, int32_t merged);

// Returns 1 and fills rank/merged if the pair merges.
static inline int pairmap_get(const PairMap *m, int32_t left, int32_t right, uint32_t *rank,
                              int32_t *merged) {
    uint64_t k = (((uint64_t)(uint32_t)left << 32) | (uint32_t)right) + 1;
    uint32_t i = pairmap_index(m, left, right);
    for (;;) {
        const PairSlot *s = &m->slot[i];
        if (s->key == k) {
            *rank = s->rank;
            *merged = s->merged;
            return 1;
        }
        if (s->key == 0) return 0;
        i = (i + 1) & m->mask;
    }
}

#endif
