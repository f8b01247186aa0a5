// grammar_state.c — the matcher: stack sets (grammar_internal.h) advanced by a code point, bytes
// fed through a partial-UTF-8 holder, and the EmxGrammarState API of grammar.h.
//
// Advancing: each stack whose top class holds the code point moves past it; then the new top is
// expanded until it is a GE_CHAR again: the end of an alternative pops back to the position
// after the rule reference that entered it; a rule reference is replaced by each of the rule's
// alternatives (pushing the position after the reference unless the reference ended its own
// alternative: a tail call, so `x ::= "a" x |` runs in constant depth). The parser refused
// left recursion, so the expansion ends; the limits bound what an ambiguous grammar can make.
#include <stdlib.h>
#include <string.h>

#include "sampler/grammar_internal.h"

enum {
    MAX_RAW_STACKS = 8 * EMX_GRAMMAR_MAX_STACKS,  // before deduplication
    MAX_EXPAND_LEVEL = 4 * EMX_GRAMMAR_MAX_DEPTH, // nested expansions without input
};

struct EmxGrammarState {
    const EmxGrammar *g;
    GramSet set;
    GramUtf8 pend;
};

void gram_set_free(GramSet *s) {
    free(s->w);
    *s = (GramSet){0};
}

int gram_set_reserve(GramSet *s, size_t words) {
    if (words <= s->cap) return 0;
    uint32_t *w = realloc(s->w, words * sizeof *w);
    if (!w) return -1;
    s->w = w, s->cap = words;
    return 0;
}

static void add_stack(GramSet *out, const uint32_t *stk, size_t depth) {
    if (out->overflow) return;
    if (out->n_stacks + 1 > MAX_RAW_STACKS) {
        out->overflow = 1;
        return;
    }
    if (out->n + depth + 1 > out->cap) {
        size_t c = out->cap ? out->cap * 2 : 64;
        while (c < out->n + depth + 1) c *= 2;
        uint32_t *w = realloc(out->w, c * sizeof *w);
        if (!w) {
            out->overflow = 1;
            return;
        }
        out->w = w, out->cap = c;
    }
    out->w[out->n++] = (uint32_t)depth;
    memcpy(out->w + out->n, stk, depth * sizeof *stk);
    out->n += depth;
    out->n_stacks++;
}

// work[0..depth) is a stack whose top may not be a GE_CHAR yet: adds its expansions to out.
// Leaves work[0..depth) as it found it.
static void expand(const EmxGrammar *g, uint32_t *work, size_t depth, GramSet *out, int level) {
    if (out->overflow) return;
    if (level > MAX_EXPAND_LEVEL) {
        out->overflow = 1;
        return;
    }
    if (depth == 0) {
        add_stack(out, work, 0);
        return;
    }
    uint32_t pos = work[depth - 1];
    GramElem e = g->elems[pos];
    if (e.type == GE_CHAR) {
        add_stack(out, work, depth);
        return;
    }
    if (e.type == GE_END || e.type == GE_ALT) {  // the alternative is complete: return
        expand(g, work, depth - 1, out, level + 1);
        return;
    }
    size_t base = depth - 1;
    uint32_t after = g->elems[pos + 1].type;
    if (after != GE_END && after != GE_ALT) work[base++] = pos + 1;
    if (base >= EMX_GRAMMAR_MAX_DEPTH) {
        out->overflow = 1;
    } else {
        for (uint32_t a = g->rule_start[e.value];; a++) {
            work[base] = a;
            expand(g, work, base + 1, out, level + 1);
            while (g->elems[a].type != GE_ALT && g->elems[a].type != GE_END) a++;
            if (g->elems[a].type == GE_END) break;
        }
    }
    work[depth - 1] = pos;
}

static int cmp_stacks(const uint32_t *w, uint32_t a, uint32_t b) {
    if (w[a] != w[b]) return w[a] < w[b] ? -1 : 1;
    for (uint32_t i = 1; i <= w[a]; i++)
        if (w[a + i] != w[b + i]) return w[a + i] < w[b + i] ? -1 : 1;
    return 0;
}

// Merge sort of stack offsets (no qsort: the comparison needs the buffer).
static void sort_offsets(const uint32_t *w, uint32_t *off, uint32_t *tmp, size_t n) {
    if (n < 2) return;
    size_t h = n / 2;
    sort_offsets(w, off, tmp, h);
    sort_offsets(w, off + h, tmp, n - h);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) tmp[k++] = cmp_stacks(w, off[j], off[i]) < 0 ? off[j++] : off[i++];
    while (i < h) tmp[k++] = off[i++];
    while (j < n) tmp[k++] = off[j++];
    memcpy(off, tmp, n * sizeof *off);
}

// Sorts and deduplicates out's stacks (the canonical form). -2 on a limit / no memory.
static int canonicalize(GramSet *out) {
    if (out->overflow) return -2;
    if (out->n_stacks < 2) return 0;
    uint32_t n = out->n_stacks, *off = malloc(2 * n * sizeof *off), *w = malloc(out->n * sizeof *w);
    if (!off || !w) {
        free(off);
        free(w);
        return -2;
    }
    for (uint32_t i = 0, o = 0; i < n; i++, o += out->w[o] + 1) off[i] = o;
    sort_offsets(out->w, off, off + n, n);
    size_t m = 0;
    uint32_t kept = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (i && cmp_stacks(out->w, off[i], off[i - 1]) == 0) continue;
        memcpy(w + m, out->w + off[i], (out->w[off[i]] + 1) * sizeof *w);
        m += out->w[off[i]] + 1;
        kept++;
    }
    free(off);
    free(out->w);
    out->w = w, out->n = m, out->cap = m, out->n_stacks = kept;
    return kept > EMX_GRAMMAR_MAX_STACKS ? -2 : 0;
}

int gram_set_start(const EmxGrammar *g, GramSet *out) {
    out->n = 0, out->n_stacks = 0, out->overflow = 0;
    uint32_t work[EMX_GRAMMAR_MAX_DEPTH + 2];
    for (uint32_t a = g->rule_start[g->root];; a++) {
        work[0] = a;
        expand(g, work, 1, out, 0);
        while (g->elems[a].type != GE_ALT && g->elems[a].type != GE_END) a++;
        if (g->elems[a].type == GE_END) break;
    }
    return canonicalize(out);
}

static int class_has(const EmxGrammar *g, uint32_t c, uint32_t lo, uint32_t hi) {
    const uint32_t *r = g->ranges;
    uint32_t a = g->class_start[c], b = g->class_start[c + 1];  // first range whose hi >= lo
    while (a < b) {
        uint32_t mid = a + (b - a) / 2;
        if (r[2 * mid + 1] < lo) a = mid + 1;
        else b = mid;
    }
    return a < g->class_start[c + 1] && r[2 * a] <= hi;
}

// 1 when some code point of [lo, hi] is outside class c.
static int class_has_gap(const EmxGrammar *g, uint32_t c, uint32_t lo, uint32_t hi) {
    const uint32_t *r = g->ranges;
    for (uint32_t i = g->class_start[c]; i < g->class_start[c + 1]; i++) {  // ranges are sorted, disjoint
        if (r[2 * i + 1] < lo) continue;
        if (r[2 * i] > lo) return 1;  // lo itself (or the part after the last range) is missing
        if (r[2 * i + 1] >= hi) return 0;
        lo = r[2 * i + 1] + 1;
    }
    return 1;
}

int gram_set_advance(const EmxGrammar *g, const uint32_t *in, size_t n, uint32_t cp, GramSet *out) {
    out->n = 0, out->n_stacks = 0, out->overflow = 0;
    uint32_t work[EMX_GRAMMAR_MAX_DEPTH + 2];
    for (size_t o = 0; o < n; o += in[o] + 1) {
        uint32_t depth = in[o];
        if (depth == 0) continue;
        uint32_t top = in[o + depth];
        if (!class_has(g, g->elems[top].value, cp, cp)) continue;
        memcpy(work, in + o + 1, depth * sizeof *work);
        work[depth - 1] = top + 1;
        expand(g, work, depth, out, 0);
    }
    return canonicalize(out);
}

int gram_set_may_match(const EmxGrammar *g, const uint32_t *in, size_t n, uint32_t lo, uint32_t hi) {
    for (size_t o = 0; o < n; o += in[o] + 1)
        if (in[o] && class_has(g, g->elems[in[o + in[o]]].value, lo, hi)) return 1;
    return 0;
}

int gram_set_has_empty(const uint32_t *in, size_t n) { return n > 0 && in[0] == 0; }

int gram_set_uniform(const EmxGrammar *g, const uint32_t *in, size_t n, uint32_t lo, uint32_t hi) {
    for (size_t o = 0; o < n; o += in[o] + 1) {
        if (!in[o]) continue;
        uint32_t c = g->elems[in[o + in[o]]].value;
        if (class_has(g, c, lo, hi) && class_has_gap(g, c, lo, hi)) return 0;
    }
    return 1;
}

void gram_utf8_range(const GramUtf8 *u, uint32_t *lo, uint32_t *hi) {
    static const uint32_t min_of[5] = {0, 0, 0x80, 0x800, 0x10000};
    uint32_t l = u->b[0] & (u->need == 1 ? 0x7Fu : 0x7Fu >> u->need), h = l;
    for (int i = 1; i < u->need; i++) {
        l = (l << 6) | (i < u->n ? (u->b[i] & 0x3Fu) : 0);
        h = (h << 6) | (i < u->n ? (u->b[i] & 0x3Fu) : 0x3F);
    }
    *lo = l < min_of[u->need] ? min_of[u->need] : l;
    *hi = h > 0x10FFFF ? 0x10FFFF : h;
}

int gram_step_byte(const EmxGrammar *g, const uint32_t *in, size_t n, GramUtf8 *pend, uint8_t byte,
                   GramSet *out, int *advanced) {
    *advanced = 0;
    GramUtf8 u = *pend;
    if (u.n == 0) {
        if (byte < 0x80) {
            u.need = 1;
        } else {
            u.need = byte >= 0xC2 && byte <= 0xDF ? 2 : byte >= 0xE0 && byte <= 0xEF ? 3 : byte >= 0xF0 && byte <= 0xF4 ? 4 : 0;
            if (!u.need) return -1;
        }
    } else {
        uint8_t lo = 0x80, hi = 0xBF, lead = u.b[0];  // the second byte's limits (no overlongs, surrogates)
        if (u.n == 1) {
            if (lead == 0xE0) lo = 0xA0;
            else if (lead == 0xED) hi = 0x9F;
            else if (lead == 0xF0) lo = 0x90;
            else if (lead == 0xF4) hi = 0x8F;
        }
        if (byte < lo || byte > hi) return -1;
    }
    u.b[u.n++] = byte;
    if (u.n < u.need) {
        uint32_t lo, hi;
        gram_utf8_range(&u, &lo, &hi);
        if (!gram_set_may_match(g, in, n, lo, hi)) return -1;
        *pend = u;
        return 0;
    }
    uint32_t lo, hi;
    gram_utf8_range(&u, &lo, &hi);
    if (gram_set_advance(g, in, n, lo, out)) return -2;
    if (out->n_stacks == 0) return -1;
    *advanced = 1;
    *pend = (GramUtf8){0};
    return 0;
}

EmxGrammarState *emx_grammar_state_new(const EmxGrammar *g) {
    EmxGrammarState *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->g = g;
    if (gram_set_start(g, &s->set)) {
        emx_grammar_state_free(s);
        return NULL;
    }
    return s;
}

EmxGrammarState *emx_grammar_state_clone(const EmxGrammarState *s) {
    EmxGrammarState *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    *c = *s;
    c->set.w = malloc((s->set.n ? s->set.n : 1) * sizeof *c->set.w);
    if (!c->set.w) {
        free(c);
        return NULL;
    }
    memcpy(c->set.w, s->set.w, s->set.n * sizeof *c->set.w);
    c->set.cap = s->set.n;
    return c;
}

void emx_grammar_state_free(EmxGrammarState *s) {
    if (!s) return;
    gram_set_free(&s->set);
    free(s);
}

int emx_grammar_accept(EmxGrammarState *s, const char *bytes, size_t n) {
    GramSet a = {0}, b = {0};
    const GramSet *cur = &s->set;
    GramUtf8 pend = s->pend;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        GramSet *out = cur == &a ? &b : &a;
        int advanced;
        rc = gram_step_byte(s->g, cur->w, cur->n, &pend, (uint8_t)bytes[i], out, &advanced);
        if (rc == 0 && advanced) cur = out;
    }
    if (rc == 0) {
        if (cur != &s->set) {
            gram_set_free(&s->set);
            s->set = *cur;
            *(cur == &a ? &a : &b) = (GramSet){0};
        }
        s->pend = pend;
    }
    gram_set_free(&a);
    gram_set_free(&b);
    return rc;
}

int emx_grammar_done(const EmxGrammarState *s) { return s->pend.n == 0 && gram_set_has_empty(s->set.w, s->set.n); }

int emx_grammar_finished(const EmxGrammarState *s) { return emx_grammar_done(s) && s->set.n_stacks == 1; }

int emx_grammar_accept_token(EmxGrammarState *s, const EmxTokenizer *tk, int id) {
    size_t len = 0;
    const char *bytes = emx_token_bytes_ref(tk, id, &len);
    if (!bytes) return -1;
    if (emx_is_stop(tk, id)) return emx_grammar_done(s) ? 0 : -1;
    if (emx_is_control(tk, id) || len == 0) return -1;
    return emx_grammar_accept(s, bytes, len);
}

void gram_state_view(const EmxGrammarState *s, const uint32_t **w, size_t *n, GramUtf8 *pend) {
    *w = s->set.w;
    *n = s->set.n;
    *pend = s->pend;
}
