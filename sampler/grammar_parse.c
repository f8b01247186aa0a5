// grammar_parse.c — GBNF text -> EmxGrammar (grammar_internal.h): rules `name ::= body`,
// alternatives `|`, sequences, "literals" with escapes, [classes] and [^negated], `.`, ( groups ),
// repetitions * + ? {m} {m,} {m,n}, # comments; a rule's body runs on across lines until the
// next `name ::=`. Groups and repetitions become generated rules ("name-N"). After the parse:
// every referenced rule defined, `root` present, no left recursion (which the matcher's
// expansion would never finish).
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "base/errmsg.h"
#include "sampler/grammar_internal.h"

enum {
    MAX_ELEMS = 1 << 22,     // elements of a compiled grammar (repetitions are expanded)
    MAX_REPEAT = 100000,     // the largest m or n of {m,n}
    MAX_NESTING = 200,       // nested groups (the parser recurses on them)
};

typedef struct {
    GramElem *v;
    size_t n, cap;
} ElemVec;

typedef struct {
    const char *src;
    size_t len, pos;
    char *err;
    size_t errlen;
    int failed, nesting;
    char **names;      // [n_rules] (generated rules too)
    ElemVec *bodies;   // [n_rules]
    size_t *ref_at;    // [n_rules]: where the rule was first referenced (SIZE_MAX: not yet)
    uint8_t *defined;  // [n_rules]
    uint32_t n_rules, cap_rules;
    size_t total_elems;
    uint32_t *ranges;  // lo, hi pairs
    size_t n_ranges, cap_ranges;
    uint32_t *class_start;
    uint32_t n_classes;
    size_t cap_classes;
} Parser;

__attribute__((format(printf, 3, 4))) static int fail(Parser *p, size_t at, const char *fmt, ...) {
    if (p->failed) return -1;
    p->failed = 1;
    int line = 1, col = 1;
    for (size_t i = 0; i < at && i < p->len; i++) {
        if (p->src[i] == '\n') line++, col = 1;
        else col++;
    }
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    emx_vseterr(what, sizeof what, fmt, ap);
    va_end(ap);
    return emx_seterr(p->err, p->errlen, "grammar: %d:%d: %s", line, col, what);
}

static int grow(void **v, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *n = realloc(*v, c * elem);
    if (!n) return -1;
    *v = n;
    *cap = c;
    return 0;
}

static int push_elem(Parser *p, uint32_t rule, uint32_t type, uint32_t value) {
    ElemVec *b = &p->bodies[rule];
    if (++p->total_elems > MAX_ELEMS) return fail(p, p->pos, "grammar too large (over %d elements once repetitions are expanded)", MAX_ELEMS);
    if (grow((void **)&b->v, &b->cap, b->n + 1, sizeof *b->v)) return fail(p, p->pos, "out of memory");
    b->v[b->n++] = (GramElem){type, value};
    return 0;
}

// A new rule (name copied); its index, or -1.
static int64_t add_rule(Parser *p, const char *name, size_t nlen) {
    if (p->n_rules == p->cap_rules) {
        uint32_t c = p->cap_rules ? p->cap_rules * 2 : 32;
        char **nm = realloc(p->names, c * sizeof *nm);
        if (nm) p->names = nm;
        ElemVec *bo = realloc(p->bodies, c * sizeof *bo);
        if (bo) p->bodies = bo;
        size_t *ra = realloc(p->ref_at, c * sizeof *ra);
        if (ra) p->ref_at = ra;
        uint8_t *de = realloc(p->defined, c);
        if (de) p->defined = de;
        if (!nm || !bo || !ra || !de) return fail(p, p->pos, "out of memory");
        p->cap_rules = c;
    }
    char *copy = malloc(nlen + 1);
    if (!copy) return fail(p, p->pos, "out of memory");
    memcpy(copy, name, nlen);
    copy[nlen] = 0;
    uint32_t r = p->n_rules++;
    p->names[r] = copy;
    p->bodies[r] = (ElemVec){0};
    p->ref_at[r] = SIZE_MAX;
    p->defined[r] = 0;
    return r;
}

static int64_t find_or_add_rule(Parser *p, const char *name, size_t nlen) {
    for (uint32_t r = 0; r < p->n_rules; r++)
        if (strlen(p->names[r]) == nlen && memcmp(p->names[r], name, nlen) == 0) return r;
    return add_rule(p, name, nlen);
}

// A generated rule for a group or repetition inside `parent`: "parent-N".
static int64_t add_generated(Parser *p, uint32_t parent) {
    char name[160];
    int n = snprintf(name, sizeof name, "%.120s-%u", p->names[parent], p->n_rules);
    int64_t r = add_rule(p, name, (size_t)n);
    if (r >= 0) p->defined[r] = 1, p->ref_at[r] = p->pos;  // errors about it point here
    return r;
}

static int is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

static void skip_ws(Parser *p) {
    while (p->pos < p->len) {
        char c = p->src[p->pos];
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n') p->pos++;
        else if (c == '#')
            while (p->pos < p->len && p->src[p->pos] != '\n') p->pos++;
        else break;
    }
}

// Whether the text at pos (after blanks) starts a new rule: `name ::=`.
static int at_rule_start(Parser *p) {
    size_t i = p->pos;
    while (i < p->len && is_name_char(p->src[i])) i++;
    if (i == p->pos) return 0;
    while (i < p->len && (p->src[i] == ' ' || p->src[i] == '\t')) i++;
    return i + 3 <= p->len && memcmp(p->src + i, "::=", 3) == 0;
}

static int hex_digits(Parser *p, int n, uint32_t *cp) {
    uint32_t v = 0;
    for (int i = 0; i < n; i++) {
        char c = p->pos < p->len ? p->src[p->pos] : 0;
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return fail(p, p->pos, "expected %d hex digits in an escape", n);
        v = v * 16 + (uint32_t)d;
        p->pos++;
    }
    if (v > 0x10FFFF) return fail(p, p->pos, "escape \\U%08x is past U+10FFFF", v);
    *cp = v;
    return 0;
}

// One character of a literal or class (escapes decoded, UTF-8 decoded) into *cp.
static int parse_char(Parser *p, uint32_t *cp) {
    size_t at = p->pos;
    const unsigned char *s = (const unsigned char *)p->src;
    unsigned c = s[p->pos++];
    if (c == '\\') {
        if (p->pos >= p->len) return fail(p, at, "escape at the end of the input");
        char e = p->src[p->pos++];
        switch (e) {
        case 'n': *cp = '\n'; return 0;
        case 't': *cp = '\t'; return 0;
        case 'r': *cp = '\r'; return 0;
        case '\\': case '"': case '\'': case '[': case ']': case '-': case '/': case '^': *cp = (uint32_t)e; return 0;
        case 'x': return hex_digits(p, 2, cp);
        case 'u': return hex_digits(p, 4, cp);
        case 'U': return hex_digits(p, 8, cp);
        default: return fail(p, at, "unknown escape '\\%c'", e >= 0x20 && e < 0x7f ? e : '?');
        }
    }
    int need = c < 0x80 ? 0 : c >= 0xC2 && c <= 0xDF ? 1 : c >= 0xE0 && c <= 0xEF ? 2 : c >= 0xF0 && c <= 0xF4 ? 3 : -1;
    if (need < 0) return fail(p, at, "invalid UTF-8");
    uint32_t v = need == 0 ? c : c & (0x3F >> need);
    for (int i = 0; i < need; i++) {
        if (p->pos >= p->len || (s[p->pos] & 0xC0) != 0x80) return fail(p, at, "invalid UTF-8");
        v = (v << 6) | (s[p->pos++] & 0x3F);
    }
    static const uint32_t min_of[4] = {0, 0x80, 0x800, 0x10000};
    if (v < min_of[need] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return fail(p, at, "invalid UTF-8");
    *cp = v;
    return 0;
}

static int cmp_range(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : 0;
}

// Ranges (pairs, n of them, sorted here) -> a new class (merged; complemented if negated).
static int64_t add_class(Parser *p, uint32_t *r, size_t n, int negated, size_t at) {
    if (n) qsort(r, n, 2 * sizeof *r, cmp_range);  // [^] has none (r may be NULL)
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m && r[2 * i] <= r[2 * (m - 1) + 1] + 1) {
            if (r[2 * i + 1] > r[2 * (m - 1) + 1]) r[2 * (m - 1) + 1] = r[2 * i + 1];
        } else {
            r[2 * m] = r[2 * i], r[2 * m + 1] = r[2 * i + 1];
            m++;
        }
    }
    if (grow((void **)&p->ranges, &p->cap_ranges, 2 * (p->n_ranges + m + 1), sizeof *p->ranges) ||
        grow((void **)&p->class_start, &p->cap_classes, p->n_classes + 2, sizeof *p->class_start))
        return fail(p, at, "out of memory");
    size_t before = p->n_ranges;
    if (!negated) {
        for (size_t i = 0; i < 2 * m; i++) p->ranges[2 * p->n_ranges + i] = r[i];
        p->n_ranges += m;
    } else {
        uint32_t next = 0;  // first code point not yet covered
        for (size_t i = 0; i < m; i++) {
            if (r[2 * i] > next) {
                p->ranges[2 * p->n_ranges] = next, p->ranges[2 * p->n_ranges + 1] = r[2 * i] - 1;
                p->n_ranges++;
            }
            next = r[2 * i + 1] + 1;
        }
        if (next <= 0x10FFFF) {
            p->ranges[2 * p->n_ranges] = next, p->ranges[2 * p->n_ranges + 1] = 0x10FFFF;
            p->n_ranges++;
        }
    }
    if (p->n_ranges == before) return fail(p, at, "character class matches nothing");
    if (p->n_classes == 0) p->class_start[0] = 0;
    p->class_start[++p->n_classes] = (uint32_t)p->n_ranges;
    return p->n_classes - 1;
}

static int parse_class(Parser *p, uint32_t rule) {
    size_t at = p->pos++;
    int negated = p->pos < p->len && p->src[p->pos] == '^';
    if (negated) p->pos++;
    uint32_t *r = NULL;
    size_t n = 0, cap = 0;
    while (p->pos < p->len && p->src[p->pos] != ']') {
        uint32_t lo, hi;
        if (parse_char(p, &lo)) goto fail;
        hi = lo;
        if (p->pos + 1 < p->len && p->src[p->pos] == '-' && p->src[p->pos + 1] != ']') {
            p->pos++;
            if (parse_char(p, &hi)) goto fail;
            if (hi < lo) {
                fail(p, at, "range U+%04X-U+%04X is reversed", lo, hi);
                goto fail;
            }
        }
        if (grow((void **)&r, &cap, 2 * (n + 1), sizeof *r)) {
            fail(p, at, "out of memory");
            goto fail;
        }
        r[2 * n] = lo, r[2 * n + 1] = hi;
        n++;
    }
    if (p->pos >= p->len) {
        fail(p, at, "unterminated character class");
        goto fail;
    }
    p->pos++;
    if (n == 0 && !negated) {
        fail(p, at, "empty character class");
        goto fail;
    }
    int64_t c = add_class(p, r, n, negated, at);
    free(r);
    return c < 0 ? -1 : push_elem(p, rule, GE_CHAR, (uint32_t)c);
fail:
    free(r);
    return -1;
}

static int parse_literal(Parser *p, uint32_t rule) {
    size_t at = p->pos++;
    while (p->pos < p->len && p->src[p->pos] != '"') {
        if (p->src[p->pos] == '\n') break;
        uint32_t cp, pair[2];
        if (parse_char(p, &cp)) return -1;
        pair[0] = pair[1] = cp;
        int64_t c = add_class(p, pair, 1, 0, at);
        if (c < 0 || push_elem(p, rule, GE_CHAR, (uint32_t)c)) return -1;
    }
    if (p->pos >= p->len || p->src[p->pos] != '"') return fail(p, at, "unterminated string");
    p->pos++;
    return 0;
}

static int parse_alternates(Parser *p, uint32_t rule);

// Moves elems [from, end) of `rule` into a generated rule (one alternative) and leaves a
// reference to it; the index of that rule in *out.
static int wrap_symbol(Parser *p, uint32_t rule, size_t from, uint32_t *out) {
    int64_t g = add_generated(p, rule);
    if (g < 0) return -1;
    ElemVec *b = &p->bodies[rule];
    for (size_t i = from; i < b->n; i++) {
        GramElem e = p->bodies[rule].v[i];
        if (push_elem(p, (uint32_t)g, e.type, e.value)) return -1;
        b = &p->bodies[rule];
    }
    p->total_elems -= b->n - from;
    b->n = from;
    *out = (uint32_t)g;
    if (push_elem(p, (uint32_t)g, GE_END, 0)) return -1;
    return push_elem(p, rule, GE_RULE, (uint32_t)g);
}

// A repetition of `x` (one element): x* as S ::= x S |, x? as S ::= x |; n_opt nested
// optionals O_k ::= x O_(k-1) | for {m,n}. Returns the rule index.
static int64_t repeat_rule(Parser *p, uint32_t parent, GramElem x, int star, uint32_t n_opt) {
    int64_t prev = -1;
    for (uint32_t k = 0; k < (star ? 1 : n_opt); k++) {
        int64_t s = add_generated(p, parent);
        if (s < 0 || push_elem(p, (uint32_t)s, x.type, x.value)) return -1;
        if (star && push_elem(p, (uint32_t)s, GE_RULE, (uint32_t)s)) return -1;
        if (!star && prev >= 0 && push_elem(p, (uint32_t)s, GE_RULE, (uint32_t)prev)) return -1;
        if (push_elem(p, (uint32_t)s, GE_ALT, 0) || push_elem(p, (uint32_t)s, GE_END, 0)) return -1;
        prev = s;
    }
    return prev;
}

static int parse_count(Parser *p, uint32_t *v) {
    size_t at = p->pos;
    uint64_t x = 0;
    while (p->pos < p->len && p->src[p->pos] >= '0' && p->src[p->pos] <= '9') {
        x = x * 10 + (uint64_t)(p->src[p->pos++] - '0');
        if (x > MAX_REPEAT) return fail(p, at, "repetition count over %d", MAX_REPEAT);
    }
    if (p->pos == at) return fail(p, at, "expected a number in {m,n}");
    *v = (uint32_t)x;
    return 0;
}

// After a symbol (elems [sym, end) of rule): applies a following * + ? or {m,n}.
static int parse_repetition(Parser *p, uint32_t rule, size_t sym) {
    char op = p->pos < p->len ? p->src[p->pos] : 0;
    if (op != '*' && op != '+' && op != '?' && op != '{') return 0;
    size_t at = p->pos++;
    uint32_t m = 0, n = 0;
    int unbounded = 0;
    if (op == '*') unbounded = 1;
    else if (op == '+') m = 1, unbounded = 1;
    else if (op == '?') n = 1;
    else {
        if (parse_count(p, &m)) return -1;
        n = m;
        if (p->pos < p->len && p->src[p->pos] == ',') {
            p->pos++;
            if (p->pos < p->len && p->src[p->pos] == '}') unbounded = 1;
            else if (parse_count(p, &n)) return -1;
        }
        if (p->pos >= p->len || p->src[p->pos] != '}') return fail(p, at, "expected '}' to end {m,n}");
        p->pos++;
        if (!unbounded && n < m) return fail(p, at, "{%u,%u}: the maximum is below the minimum", m, n);
    }
    if (p->bodies[rule].n == sym) return fail(p, at, "'%c' follows nothing", op);
    if (p->bodies[rule].n - sym > 1) {
        uint32_t g;
        if (wrap_symbol(p, rule, sym, &g)) return -1;
    }
    GramElem x = p->bodies[rule].v[sym];
    p->bodies[rule].n = sym;
    p->total_elems--;
    for (uint32_t i = 0; i < m; i++)
        if (push_elem(p, rule, x.type, x.value)) return -1;
    if (unbounded || n > m) {
        int64_t r = repeat_rule(p, rule, x, unbounded, n - m);
        if (r < 0 || push_elem(p, rule, GE_RULE, (uint32_t)r)) return -1;
    }
    return 0;
}

static int parse_sequence(Parser *p, uint32_t rule) {
    for (;;) {
        skip_ws(p);
        if (p->pos >= p->len) return 0;
        char c = p->src[p->pos];
        if (c == '|' || c == ')' || at_rule_start(p)) return 0;
        size_t sym = p->bodies[rule].n, at = p->pos;
        if (c == '"') {
            if (parse_literal(p, rule)) return -1;
        } else if (c == '[') {
            if (parse_class(p, rule)) return -1;
        } else if (c == '.') {
            p->pos++;
            uint32_t any[2] = {0, 0x10FFFF};
            int64_t k = add_class(p, any, 1, 0, at);
            if (k < 0 || push_elem(p, rule, GE_CHAR, (uint32_t)k)) return -1;
        } else if (c == '(') {
            if (++p->nesting > MAX_NESTING) return fail(p, at, "groups nested over %d deep", MAX_NESTING);
            p->pos++;
            int64_t g = add_generated(p, rule);
            if (g < 0 || parse_alternates(p, (uint32_t)g)) return -1;
            if (p->pos >= p->len || p->src[p->pos] != ')') return fail(p, at, "unclosed '('");
            p->pos++;
            p->nesting--;
            if (push_elem(p, rule, GE_RULE, (uint32_t)g)) return -1;
        } else if (is_name_char(c)) {
            size_t s = p->pos;
            while (p->pos < p->len && is_name_char(p->src[p->pos])) p->pos++;
            int64_t r = find_or_add_rule(p, p->src + s, p->pos - s);
            if (r < 0) return -1;
            if (p->ref_at[r] == SIZE_MAX) p->ref_at[r] = s;
            if (push_elem(p, rule, GE_RULE, (uint32_t)r)) return -1;
        } else {
            return fail(p, at, "unexpected '%c'", c >= 0x20 && c < 0x7f ? c : '?');
        }
        if (parse_repetition(p, rule, sym)) return -1;
    }
}

static int parse_alternates(Parser *p, uint32_t rule) {
    if (parse_sequence(p, rule)) return -1;
    while (p->pos < p->len && p->src[p->pos] == '|') {
        p->pos++;
        if (push_elem(p, rule, GE_ALT, 0) || parse_sequence(p, rule)) return -1;
    }
    return push_elem(p, rule, GE_END, 0);
}


// Left recursion: a rule that reaches itself through leftmost symbols, each of which may be
// empty before it, would make the matcher's expansion endless. Refused, naming one such rule.
// An iterative depth-first search (chains of generated rules can be 100,000 deep).
static int check_left_recursion(Parser *p) {
    uint32_t n = p->n_rules;
    uint8_t *nullable = calloc(n ? n : 1, 1), *color = calloc(n ? n : 1, 1);
    struct Frame { uint32_t rule; size_t i; int blocked; } *st = malloc((n ? n : 1) * sizeof *st);
    int rc = 0;
    if (!nullable || !color || !st) {
        rc = fail(p, 0, "out of memory");
        goto done;
    }
    for (int changed = 1; changed;) {
        changed = 0;
        for (uint32_t r = 0; r < n; r++) {
            if (nullable[r]) continue;
            int ok = 1;  // the current alternative so far can be empty
            for (size_t i = 0; i < p->bodies[r].n && !nullable[r]; i++) {
                GramElem e = p->bodies[r].v[i];
                if (e.type == GE_ALT || e.type == GE_END) {
                    if (ok) nullable[r] = 1, changed = 1;
                    ok = 1;
                } else if (e.type == GE_CHAR || !nullable[e.value]) {
                    ok = 0;
                }
            }
        }
    }
    for (uint32_t start = 0; start < n && rc == 0; start++) {
        if (color[start]) continue;
        size_t depth = 0;
        st[depth++] = (struct Frame){start, 0, 0};
        color[start] = 1;
        while (depth && rc == 0) {
            struct Frame *f = &st[depth - 1];
            if (f->i >= p->bodies[f->rule].n) {
                color[f->rule] = 2;
                depth--;
                continue;
            }
            GramElem e = p->bodies[f->rule].v[f->i++];
            if (e.type == GE_ALT || e.type == GE_END) {
                f->blocked = 0;
            } else if (!f->blocked && e.type == GE_CHAR) {
                f->blocked = 1;
            } else if (!f->blocked) {
                if (!nullable[e.value]) f->blocked = 1;
                if (color[e.value] == 1)
                    rc = fail(p, p->ref_at[e.value] == SIZE_MAX ? 0 : p->ref_at[e.value],
                              "rule '%s' is left-recursive (it can reach itself without consuming input)",
                              p->names[e.value]);
                else if (color[e.value] == 0) {
                    color[e.value] = 1;
                    st[depth++] = (struct Frame){e.value, 0, 0};
                }
            }
        }
    }
done:
    free(nullable);
    free(color);
    free(st);
    return rc;
}

static int parse_rules(Parser *p) {
    skip_ws(p);
    while (p->pos < p->len) {
        size_t at = p->pos;
        while (p->pos < p->len && is_name_char(p->src[p->pos])) p->pos++;
        if (p->pos == at) return fail(p, at, "expected a rule name");
        size_t nlen = p->pos - at;
        while (p->pos < p->len && (p->src[p->pos] == ' ' || p->src[p->pos] == '\t')) p->pos++;
        if (p->pos + 3 > p->len || memcmp(p->src + p->pos, "::=", 3) != 0)
            return fail(p, p->pos, "expected '::=' after rule name '%.*s'", (int)(nlen > 60 ? 60 : nlen), p->src + at);
        p->pos += 3;
        int64_t r = find_or_add_rule(p, p->src + at, nlen);
        if (r < 0) return -1;
        if (p->defined[r]) return fail(p, at, "rule '%s' is defined twice", p->names[r]);
        p->defined[r] = 1;
        p->ref_at[r] = at;  // from now on only the left-recursion check reads it: point at the definition
        if (parse_alternates(p, (uint32_t)r)) return -1;
        if (p->pos < p->len && p->src[p->pos] == ')') return fail(p, p->pos, "unmatched ')'");
        skip_ws(p);
    }
    return 0;
}

// The parsed rules, checked, into one flat grammar.
static EmxGrammar *build(Parser *p) {
    int64_t root = -1;
    for (uint32_t r = 0; r < p->n_rules; r++) {
        if (!p->defined[r]) {
            fail(p, p->ref_at[r], "undefined rule '%s'", p->names[r]);
            return NULL;
        }
        if (strcmp(p->names[r], "root") == 0) root = r;
    }
    if (root < 0) {
        fail(p, 0, "no rule named 'root'");
        return NULL;
    }
    if (check_left_recursion(p)) return NULL;
    EmxGrammar *g = calloc(1, sizeof *g);
    if (!g || !(g->elems = malloc((p->total_elems ? p->total_elems : 1) * sizeof *g->elems)) ||
        !(g->rule_start = malloc(p->n_rules * sizeof *g->rule_start))) {
        emx_grammar_free(g);
        fail(p, 0, "out of memory");
        return NULL;
    }
    for (uint32_t r = 0; r < p->n_rules; r++) {
        g->rule_start[r] = g->n_elems;
        memcpy(g->elems + g->n_elems, p->bodies[r].v, p->bodies[r].n * sizeof *g->elems);
        g->n_elems += (uint32_t)p->bodies[r].n;
    }
    g->n_rules = p->n_rules;
    g->root = (uint32_t)root;
    g->n_classes = p->n_classes;
    g->class_start = p->class_start, p->class_start = NULL;
    g->ranges = p->ranges, p->ranges = NULL;
    return g;
}

int emx_grammar_parse(const char *gbnf, size_t len, EmxGrammar **out, char *err, size_t errlen) {
    *out = NULL;
    Parser p = {.src = gbnf ? gbnf : "", .len = gbnf ? len : 0, .err = err, .errlen = errlen};
    if (parse_rules(&p) == 0) *out = build(&p);
    for (uint32_t r = 0; r < p.n_rules; r++) {
        free(p.names[r]);
        free(p.bodies[r].v);
    }
    free(p.names);
    free(p.bodies);
    free(p.ref_at);
    free(p.defined);
    free(p.ranges);
    free(p.class_start);
    return *out ? 0 : -1;
}

void emx_grammar_free(EmxGrammar *g) {
    if (!g) return;
    free(g->elems);
    free(g->rule_start);
    free(g->class_start);
    free(g->ranges);
    free(g);
}
