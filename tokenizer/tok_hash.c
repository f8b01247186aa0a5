// tok_hash.c — piece and merge hash tables (see tok_hash.h).
#include "tokenizer/tok_hash.h"

#include <stdlib.h>
#include <string.h>

// Multiply-xorshift over 8-byte words: fast on short pieces, good enough spread for probing.
uint32_t tok_hash_bytes(const void *s, size_t len) {
    const uint8_t *p = s;
    uint64_t h = 0x243F6A8885A308D3ull ^ (len * 0x9E3779B97F4A7C15ull);
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
        p += 8, len -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, len);
    h = (h ^ w) * 0x94D049BB133111EBull;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    return (uint32_t)h;
}

static uint32_t cap_for(uint32_t max_keys) {
    uint32_t cap = 16;
    while (cap < 2u * max_keys + 1) cap <<= 1;  // load factor <= 1/2
    return cap;
}

int strmap_init(StrMap *m, uint32_t max_keys, StrMapKeyFn key, const void *ctx) {
    memset(m, 0, sizeof *m);
    uint32_t cap = cap_for(max_keys);
    m->slot = calloc(cap, sizeof *m->slot);
    if (!m->slot) return -1;
    m->mask = cap - 1;
    m->key = key;
    m->ctx = ctx;
    return 0;
}

void strmap_free(StrMap *m) {
    free(m->slot);
    memset(m, 0, sizeof *m);
}

int strmap_put(StrMap *m, int32_t id) {
    uint32_t len;
    const char *s = m->key(m->ctx, id, &len);
    return strmap_put_h(m, id, tok_hash_bytes(s, len));
}

int strmap_put_h(StrMap *m, int32_t id, uint32_t h) {
    if (m->n + 1 > m->mask / 2 + 1) return -1;
    uint32_t len;
    const char *s = m->key(m->ctx, id, &len);
    uint32_t i = h & m->mask;
    for (uint64_t e; (e = m->slot[i]) != 0; i = (i + 1) & m->mask) {
        if ((uint32_t)(e >> 32) == h) {
            uint32_t l2;
            const char *s2 = m->key(m->ctx, (int32_t)(uint32_t)e - 1, &l2);
            if (l2 == len && memcmp(s, s2, len) == 0) return 1;
        }
    }
    m->slot[i] = ((uint64_t)h << 32) | (uint32_t)(id + 1);
    m->n++;
    return 0;
}

int32_t strmap_get(const StrMap *m, const char *s, size_t len) {
    return strmap_get_h(m, s, len, tok_hash_bytes(s, len));
}

int32_t strmap_get_h(const StrMap *m, const char *s, size_t len, uint32_t h) {
    if (!m->slot) return -1;
    uint32_t i = h & m->mask;
    for (uint64_t e; (e = m->slot[i]) != 0; i = (i + 1) & m->mask) {
        if ((uint32_t)(e >> 32) == h) {
            int32_t id = (int32_t)(uint32_t)e - 1;
            uint32_t l2;
            const char *s2 = m->key(m->ctx, id, &l2);
            if (l2 == len && memcmp(s, s2, len) == 0) return id;
        }
    }
    return -1;
}

int pairmap_init(PairMap *m, uint32_t max_keys) {
    memset(m, 0, sizeof *m);
    uint32_t cap = cap_for(max_keys);
    m->slot = calloc(cap, sizeof *m->slot);
    if (!m->slot) return -1;
    m->mask = cap - 1;
    return 0;
}

void pairmap_free(PairMap *m) {
    free(m->slot);
    memset(m, 0, sizeof *m);
}

void pairmap_put(PairMap *m, int32_t left, int32_t right, uint32_t rank, int32_t merged) {
    uint64_t k = (((uint64_t)(uint32_t)left << 32) | (uint32_t)right) + 1;
    uint32_t i = pairmap_index(m, left, right);
    while (m->slot[i].key != 0) {
        if (m->slot[i].key == k) return;
        i = (i + 1) & m->mask;
    }
    m->slot[i].key = k;
    m->slot[i].rank = rank;
    m->slot[i].merged = merged;
}
