// grammar_mask.c — the token trie and the masker of grammar_mask.h.
//
// Trie: the non-control, non-empty tokens sorted by their bytes, laid out as nodes in preorder
// (one node per distinct prefix, byte + depth + index past its subtree), each node's tokens
// contiguous in `tokens`. A walk is one pass over the node array that jumps past a rejected
// subtree.
//
// Automaton: a state is a canonical stack set plus a partial character, interned as words
// [partial bytes, n | need << 8, set words...] in an arena; its row of 256 transitions
// (UNKNOWN, REJECT or a state id) is filled on first use by gram_step_byte. Inside a JSON
// string, say, every ordinary byte leads back to the same state, so the walk over most of the
// vocabulary is one table look-up per node. Finished masks are bitsets cached per state (a
// small pool, replaced round robin): a state that recurs (after each comma, inside a string)
// costs one copy-out. When the automaton passes MAX_STATES it is dropped and rebuilt.
#include <stdlib.h>
#include <string.h>

#include "base/errmsg.h"
#include "sampler/grammar_internal.h"
#include "sampler/grammar_mask.h"

enum {
    UNKNOWN = -2,
    REJECT = -1,
    MAX_STATES = 1 << 14,     // interned automaton states before a reset (rows are 1 KiB each)
    MAX_ARENA_WORDS = 1 << 24,
    MASK_SLOTS = 256,         // cached masks (Qwen3: 19 KiB each)
};

typedef struct {
    uint32_t end;    // node index past this subtree
    uint16_t depth;  // 1 for a first byte
    uint8_t byte;
} TrieNode;

struct EmxTokenTrie {
    int n_vocab;
    TrieNode *nodes;
    uint32_t n_nodes;
    uint32_t *tok_start;  // [n_nodes + 1]: node i's tokens are tokens[tok_start[i] .. tok_start[i+1])
    int32_t *tokens;
    int32_t *stops;       // stop token ids (allowed when done)
    uint32_t n_stops;
    uint16_t max_depth;
};

typedef struct {
    uint64_t *bits;
    int32_t owner;  // state id, -1 free
    int32_t count;  // trie tokens allowed
} MaskSlot;

struct EmxGrammarMasker {
    const EmxTokenTrie *trie;
    const EmxGrammar *g;
    uint32_t *arena;  // interned keys
    size_t arena_n, arena_cap;
    uint32_t *key_off, *key_len, *key_hash;  // [n_states]
    int32_t **rows;                          // [n_states]: NULL until first used
    int16_t *slot_of;                        // [n_states]: mask slot or -1
    uint32_t n_states, cap_states;
    int32_t *table;  // open addressing over state ids (-1 empty)
    uint32_t table_cap;
    MaskSlot slots[MASK_SLOTS];
    uint32_t next_slot;
    int32_t *walk;  // [max_depth + 1]: the state at each depth of the walk
    GramSet tmp;
    uint64_t spread[256];  // byte b -> 8 bytes, byte k = bit k of b
    EmxGrammarMaskStats stats;
};

// --------------------------------------------------------------------------------------------
// The trie

typedef struct {
    const uint8_t *b;
    uint32_t len;
    int32_t id;
} Piece;

static int cmp_piece(const void *x, const void *y) {
    const Piece *a = x, *b = y;
    uint32_t n = a->len < b->len ? a->len : b->len;
    int c = memcmp(a->b, b->b, n);
    if (c) return c;
    if (a->len != b->len) return a->len < b->len ? -1 : 1;
    return a->id < b->id ? -1 : 1;
}

// Nodes from pieces sorted by bytes: each piece shares its longest common prefix with the one
// before, so the path to it is the previous path cut to that prefix, then new nodes.
static int trie_fill(EmxTokenTrie *t, const Piece *p, uint32_t n, size_t total_bytes) {
    t->nodes = malloc((total_bytes + 1) * sizeof *t->nodes);
    t->tok_start = malloc((total_bytes + 2) * sizeof *t->tok_start);
    t->tokens = malloc((n + 1) * sizeof *t->tokens);
    uint32_t *path = malloc((t->max_depth + 1) * sizeof *path);
    if (!t->nodes || !t->tok_start || !t->tokens || !path) {
        free(path);
        return -1;
    }
    uint32_t depth = 0, n_tok = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t lcp = 0;
        if (i) {
            uint32_t m = p[i].len < p[i - 1].len ? p[i].len : p[i - 1].len;
            while (lcp < m && p[i].b[lcp] == p[i - 1].b[lcp]) lcp++;
        }
        for (; depth > lcp; depth--) t->nodes[path[depth - 1]].end = t->n_nodes;
        for (; depth < p[i].len; depth++) {
            uint32_t k = t->n_nodes++;
            t->nodes[k] = (TrieNode){0, (uint16_t)(depth + 1), p[i].b[depth]};
            t->tok_start[k] = n_tok;
            path[depth] = k;
        }
        t->tokens[n_tok++] = p[i].id;  // the node at path[len-1]: the last one made or kept
    }
    for (; depth > 0; depth--) t->nodes[path[depth - 1]].end = t->n_nodes;
    t->tok_start[t->n_nodes] = n_tok;
    free(path);
    return 0;
}

EmxTokenTrie *emx_token_trie_new(const EmxTokenizer *tk, char *err, size_t errlen) {
    int n_vocab = emx_tokenizer_n_vocab(tk);
    EmxTokenTrie *t = calloc(1, sizeof *t);
    Piece *p = malloc((n_vocab ? (size_t)n_vocab : 1) * sizeof *p);
    if (t) t->stops = malloc((n_vocab ? (size_t)n_vocab : 1) * sizeof *t->stops);
    if (!t || !p || !t->stops) goto oom;
    t->n_vocab = n_vocab;
    uint32_t n = 0;
    size_t total = 0;
    for (int id = 0; id < n_vocab; id++) {
        size_t len = 0;
        const char *b = emx_token_bytes_ref(tk, id, &len);
        if (emx_is_stop(tk, id)) t->stops[t->n_stops++] = id;
        else if (b && len > 0 && len <= 0xFFFF && !emx_is_control(tk, id)) {
            p[n++] = (Piece){(const uint8_t *)b, (uint32_t)len, id};
            total += len;
            if (len > t->max_depth) t->max_depth = (uint16_t)len;
        }
    }
    qsort(p, n, sizeof *p, cmp_piece);
    if (trie_fill(t, p, n, total)) goto oom;
    free(p);
    return t;
oom:
    free(p);
    emx_token_trie_free(t);
    emx_seterr(err, errlen, "token trie: out of memory");
    return NULL;
}

void emx_token_trie_free(EmxTokenTrie *t) {
    if (!t) return;
    free(t->nodes);
    free(t->tok_start);
    free(t->tokens);
    free(t->stops);
    free(t);
}

int emx_token_trie_n_vocab(const EmxTokenTrie *t) { return t->n_vocab; }

// --------------------------------------------------------------------------------------------
// The automaton

static uint32_t hash_words(const uint32_t *w, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    for (size_t i = 0; i < n; i++) h = (h ^ w[i]) * 0xFF51AFD7ED558CCDull, h ^= h >> 29;
    return (uint32_t)(h ^ (h >> 32));
}

// Drops every state, row and cached mask (the trie and the grammar stay).
static void reset_automaton(EmxGrammarMasker *m) {
    for (uint32_t s = 0; s < m->n_states; s++) free(m->rows[s]);
    m->n_states = 0;
    m->arena_n = 0;
    for (uint32_t i = 0; i < m->table_cap; i++) m->table[i] = -1;
    for (int i = 0; i < MASK_SLOTS; i++) m->slots[i].owner = -1;
    m->stats.resets++;
}

static int grow_states(EmxGrammarMasker *m) {
    uint32_t c = m->cap_states ? m->cap_states * 2 : 256;
    uint32_t *o = realloc(m->key_off, c * sizeof *o);
    if (o) m->key_off = o;
    uint32_t *l = realloc(m->key_len, c * sizeof *l);
    if (l) m->key_len = l;
    uint32_t *h = realloc(m->key_hash, c * sizeof *h);
    if (h) m->key_hash = h;
    int32_t **r = realloc(m->rows, c * sizeof *r);
    if (r) m->rows = r;
    int16_t *s = realloc(m->slot_of, c * sizeof *s);
    if (s) m->slot_of = s;
    if (!o || !l || !h || !r || !s) return -1;
    m->cap_states = c;
    return 0;
}

static int grow_table(EmxGrammarMasker *m) {
    uint32_t c = m->table_cap ? m->table_cap * 2 : 1024;
    int32_t *t = malloc(c * sizeof *t);
    if (!t) return -1;
    for (uint32_t i = 0; i < c; i++) t[i] = -1;
    for (uint32_t s = 0; s < m->n_states; s++) {
        uint32_t i = m->key_hash[s] & (c - 1);
        while (t[i] >= 0) i = (i + 1) & (c - 1);
        t[i] = (int32_t)s;
    }
    free(m->table);
    m->table = t, m->table_cap = c;
    return 0;
}

// The id of the state with key words (w0, w1, w[0..n)); a new one if unseen. -1: out of memory.
static int32_t intern_key(EmxGrammarMasker *m, uint32_t w0, uint32_t w1, const uint32_t *w, size_t n) {
    size_t len = n + 2;
    if (m->arena_n + len > m->arena_cap) {
        size_t c = m->arena_cap ? m->arena_cap : 4096;
        while (c < m->arena_n + len) c *= 2;
        uint32_t *a = realloc(m->arena, c * sizeof *a);
        if (!a) return -1;
        m->arena = a, m->arena_cap = c;
    }
    uint32_t *key = m->arena + m->arena_n;  // written in place, kept only if new
    key[0] = w0, key[1] = w1;
    memcpy(key + 2, w, n * sizeof *w);
    uint32_t h = hash_words(key, len);
    if ((m->n_states + 1) * 2 > m->table_cap && grow_table(m)) return -1;
    uint32_t i = h & (m->table_cap - 1);
    for (; m->table[i] >= 0; i = (i + 1) & (m->table_cap - 1)) {
        uint32_t s = (uint32_t)m->table[i];
        if (m->key_hash[s] == h && m->key_len[s] == len && !memcmp(m->arena + m->key_off[s], key, len * sizeof *key))
            return (int32_t)s;
    }
    if (m->n_states == m->cap_states && grow_states(m)) return -1;
    uint32_t s = m->n_states++;
    m->key_off[s] = (uint32_t)m->arena_n, m->key_len[s] = (uint32_t)len, m->key_hash[s] = h;
    m->rows[s] = NULL;
    m->slot_of[s] = -1;
    m->arena_n += len;
    m->table[i] = (int32_t)s;
    m->stats.dfa_states = m->n_states;
    return (int32_t)s;
}

// Key word 1: a raw state holds n | need << 8 (its partial bytes in word 0); a folded partial
// character (FOLDED) holds the continuation bytes still to come, and in bits 8-15 the lead byte
// when the next byte is the second (E0, ED, F0 and F4 narrow it); its words are then the set the
// character leads to, the same for every completion (gram_set_uniform). Inside a JSON string
// this makes a 3-byte character 2 states instead of one per prefix.
enum { FOLDED = 1u << 16 };

static int32_t intern_key(EmxGrammarMasker *m, uint32_t w0, uint32_t w1, const uint32_t *w, size_t n);

static int32_t folded_transition(EmxGrammarMasker *m, uint32_t s, uint8_t byte) {
    const uint32_t *key = m->arena + m->key_off[s];
    uint32_t remaining = key[1] & 0xFF, lead = (key[1] >> 8) & 0xFF;
    uint8_t lo = lead == 0xE0 ? 0xA0 : lead == 0xF0 ? 0x90 : 0x80, hi = lead == 0xED ? 0x9F : lead == 0xF4 ? 0x8F : 0xBF;
    if (byte < lo || byte > hi) return REJECT;
    size_t n = m->key_len[s] - 2;
    if (m->tmp.cap < n && gram_set_reserve(&m->tmp, n)) return -3;
    memcpy(m->tmp.w, key + 2, n * sizeof *key);  // intern may move the arena
    int32_t id = remaining == 1 ? intern_key(m, 0, 0, m->tmp.w, n) : intern_key(m, 0, FOLDED | (remaining - 1), m->tmp.w, n);
    return id < 0 ? -3 : id;
}

// The state after `byte` from state s: REJECT, a state id, or -3 (out of memory).
static int32_t compute_transition(EmxGrammarMasker *m, uint32_t s, uint8_t byte) {
    const uint32_t *key = m->arena + m->key_off[s];
    if (key[1] & FOLDED) return folded_transition(m, s, byte);
    size_t n = m->key_len[s] - 2;
    GramUtf8 pend;
    memcpy(pend.b, key, 4);
    pend.n = key[1] & 0xFF, pend.need = (uint8_t)(key[1] >> 8);
    int advanced = 0;
    if (gram_step_byte(m->g, key + 2, n, &pend, byte, &m->tmp, &advanced) != 0) return REJECT;
    if (!advanced) {
        uint32_t lo, hi;
        gram_utf8_range(&pend, &lo, &hi);
        if (gram_set_uniform(m->g, key + 2, n, lo, hi)) {  // fold: the set after any completion
            if (gram_set_advance(m->g, key + 2, n, lo, &m->tmp)) return -3;
            int32_t id = intern_key(m, 0, FOLDED | (uint32_t)(pend.need - pend.n) | (pend.n == 1 ? (uint32_t)pend.b[0] << 8 : 0),
                                    m->tmp.w, m->tmp.n);
            return id < 0 ? -3 : id;
        }
        if (m->tmp.cap < n && gram_set_reserve(&m->tmp, n)) return -3;
        memcpy(m->tmp.w, key + 2, n * sizeof *key);  // intern may move the arena
        m->tmp.n = n;
    }
    uint32_t w0;
    memcpy(&w0, pend.b, 4);
    int32_t id = intern_key(m, w0, pend.n | (uint32_t)pend.need << 8, m->tmp.w, m->tmp.n);
    return id < 0 ? -3 : id;
}

static inline int32_t transition(EmxGrammarMasker *m, uint32_t s, uint8_t byte) {
    int32_t *row = m->rows[s];
    if (row && row[byte] != UNKNOWN) return row[byte];
    if (!row) {
        if (!(row = malloc(256 * sizeof *row))) return -3;
        for (int i = 0; i < 256; i++) row[i] = UNKNOWN;
        m->rows[s] = row;
    }
    int32_t next = compute_transition(m, s, byte);
    if (next == -3) return -3;
    m->rows[s][byte] = next;  // m->rows may have moved in intern
    return next;
}

// --------------------------------------------------------------------------------------------
// The mask

EmxGrammarMasker *emx_grammar_masker_new(const EmxTokenTrie *trie, const EmxGrammar *g, char *err,
                                         size_t errlen) {
    EmxGrammarMasker *m = calloc(1, sizeof *m);
    if (!m) goto oom;
    m->trie = trie, m->g = g;
    size_t words = ((size_t)trie->n_vocab + 63) / 64;
    for (int b = 0; b < 256; b++)
        for (int k = 0; k < 8; k++) m->spread[b] |= (uint64_t)((b >> k) & 1) << (8 * k);
    for (int i = 0; i < MASK_SLOTS; i++) m->slots[i].owner = -1;
    for (int i = 0; i < MASK_SLOTS; i++)
        if (!(m->slots[i].bits = malloc((words ? words : 1) * sizeof(uint64_t)))) goto oom;
    if (!(m->walk = malloc(((size_t)trie->max_depth + 1) * sizeof *m->walk)) || grow_table(m)) goto oom;
    return m;
oom:
    emx_grammar_masker_free(m);
    emx_seterr(err, errlen, "grammar mask: out of memory");
    return NULL;
}

void emx_grammar_masker_free(EmxGrammarMasker *m) {
    if (!m) return;
    for (uint32_t s = 0; s < m->n_states; s++) free(m->rows[s]);
    for (int i = 0; i < MASK_SLOTS; i++) free(m->slots[i].bits);
    free(m->arena);
    free(m->key_off);
    free(m->key_len);
    free(m->key_hash);
    free(m->rows);
    free(m->slot_of);
    free(m->table);
    free(m->walk);
    gram_set_free(&m->tmp);
    free(m);
}

void emx_grammar_masker_stats(const EmxGrammarMasker *m, EmxGrammarMaskStats *out) { *out = m->stats; }

// The trie walk from state `root` into bits (cleared first). Returns the tokens allowed, or -1.
static int32_t walk(EmxGrammarMasker *m, int32_t root, uint64_t *bits) {
    const EmxTokenTrie *t = m->trie;
    memset(bits, 0, ((size_t)t->n_vocab + 63) / 64 * sizeof *bits);
    int32_t count = 0, *st = m->walk;
    st[0] = root;
    uint64_t visited = 0;
    for (uint32_t i = 0; i < t->n_nodes;) {
        TrieNode nd = t->nodes[i];
        int32_t next = transition(m, (uint32_t)st[nd.depth - 1], nd.byte);
        visited++;
        if (next == -3) return -1;
        if (next < 0) {  // rejected: none of the tokens under this prefix
            i = nd.end;
            continue;
        }
        st[nd.depth] = next;
        for (uint32_t k = t->tok_start[i]; k < t->tok_start[i + 1]; k++) {
            uint32_t id = (uint32_t)t->tokens[k];
            bits[id >> 6] |= 1ull << (id & 63);
            count++;
        }
        i++;
    }
    m->stats.trie_nodes += visited;
    return count;
}

// bits -> one byte per token, 8 at a time through the masker's table (bit k -> byte k).
static void spread_bits(const uint64_t *spread, const uint64_t *bits, int n_vocab, uint8_t *allowed) {
    int i = 0;
    for (; i + 8 <= n_vocab; i += 8) memcpy(allowed + i, &spread[(bits[i >> 6] >> (i & 63)) & 0xFF], 8);
    for (; i < n_vocab; i++) allowed[i] = (uint8_t)((bits[i >> 6] >> (i & 63)) & 1);
}

int emx_grammar_mask(EmxGrammarMasker *m, const EmxGrammarState *s, uint8_t *allowed) {
    const uint32_t *w;
    size_t n;
    GramUtf8 pend;
    gram_state_view(s, &w, &n, &pend);
    m->stats.masks++;
    if (m->n_states > MAX_STATES || m->arena_n > MAX_ARENA_WORDS) reset_automaton(m);
    uint32_t w0;
    memcpy(&w0, pend.b, 4);
    int32_t root = intern_key(m, w0, pend.n | (uint32_t)pend.need << 8, w, n);
    if (root < 0) return -1;
    int16_t slot = m->slot_of[root];
    if (slot >= 0) {
        m->stats.cache_hits++;
    } else {
        slot = (int16_t)(m->next_slot++ % MASK_SLOTS);
        MaskSlot *ms = &m->slots[slot];
        if (ms->owner >= 0) m->slot_of[ms->owner] = -1;
        ms->owner = -1;
        int32_t count = walk(m, root, ms->bits);
        if (count < 0) return -1;
        ms->owner = root, ms->count = count;
        m->slot_of[root] = slot;
    }
    const MaskSlot *ms = &m->slots[slot];
    spread_bits(m->spread, ms->bits, m->trie->n_vocab, allowed);
    int count = ms->count;
    if (emx_grammar_done(s)) {
        for (uint32_t i = 0; i < m->trie->n_stops; i++)
            if (!allowed[m->trie->stops[i]]) allowed[m->trie->stops[i]] = 1, count++;
    }
    return count;
}
