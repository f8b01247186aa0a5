// json_schema_pattern.c — JSON Schema `pattern` (ECMA-262 regex subset) -> GBNF over the
// JSON-encoded characters of a string (json_schema_pattern.h).
//
// A recursive descent over the pattern writes the GBNF as it goes: an alternation becomes
// `a | b`, a group `( ... )`, a quantifier the same quantifier in GBNF. Every character class
// (a literal, an escape, `.`, [...]) is first a set of code points, then the JSON encodings of
// its members: the printable ones raw in one GBNF class, `"`, `\` and the control characters
// as escape sequences. JSON text splits into encoded characters in one way only, and every
// piece of the output is a sequence of whole encoded characters, so the GBNF accepts exactly
// the encodings (in the forms above) of the strings the regex matches.
//
// Where ECMA-262 and Python's re (which jsonschema validates with) read a construct
// differently, the translation keeps to what both accept, or refuses it: \s leaves out U+FEFF
// (ECMA-262 only) and \S also leaves out U+001C-U+001F and U+0085 (Python's whitespace); a
// class starting with ']' and a '{' that is not a quantifier are refused.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/errmsg.h"
#include "sampler/json_schema_pattern.h"

enum { MAX_RANGES = 512, MAX_GROUP_DEPTH = 100, MAX_COUNT = 100000, MAX_PATTERN = 10000 };
#define CP_MAX 0x10FFFFu
#define NO_CP UINT32_MAX

typedef struct {
    uint32_t lo, hi;
} CpRange;

typedef struct {
    CpRange r[MAX_RANGES];
    int n, over;
} CpSet;

typedef struct {
    const unsigned char *p;
    size_t pos, len;
    const char *any;  // the rule of one encoded character
    char *err;
    size_t errlen;
    int depth;
} Rx;

static const CpRange DIGIT[] = {{'0', '9'}};
static const CpRange WORD[] = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
// ECMA-262's white space and line terminators that Python's \s also matches
static const CpRange SPACE[] = {{9, 13},           {' ', ' '},           {0xA0, 0xA0},     {0x1680, 0x1680},
                                {0x2000, 0x200A},  {0x2028, 0x2029},     {0x202F, 0x202F}, {0x205F, 0x205F},
                                {0x3000, 0x3000}};
// what either reads as white space: \S is the rest
static const CpRange SPACE_EITHER[] = {{9, 13},          {0x1C, ' '},       {0x85, 0x85},     {0xA0, 0xA0},
                                       {0x1680, 0x1680}, {0x2000, 0x200A},  {0x2028, 0x2029}, {0x202F, 0x202F},
                                       {0x205F, 0x205F}, {0x3000, 0x3000},  {0xFEFF, 0xFEFF}};
// `.`: anything but the line terminators
static const CpRange LINE_TERMINATORS[] = {{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}};
// the characters JSON writes raw (the rest are escaped)
static const CpRange RAW[] = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x7E}, {0x80, 0xD7FF}, {0xE000, CP_MAX}};

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

// ---------------------------------------------------------------------------------------------
// Sets of code points

static void set_add(CpSet *s, uint32_t lo, uint32_t hi) {
    if (s->n == MAX_RANGES) {
        s->over = 1;
        return;
    }
    s->r[s->n++] = (CpRange){lo, hi};
}

static int cmp_range(const void *a, const void *b) {
    uint32_t x = ((const CpRange *)a)->lo, y = ((const CpRange *)b)->lo;
    return x < y ? -1 : x > y;
}

// Sorted, overlapping and adjacent ranges merged.
static void set_norm(CpSet *s) {
    if (s->n < 2) return;
    qsort(s->r, (size_t)s->n, sizeof s->r[0], cmp_range);
    int o = 0;
    for (int i = 1; i < s->n; i++) {
        if (s->r[i].lo <= s->r[o].hi + 1) {
            if (s->r[i].hi > s->r[o].hi) s->r[o].hi = s->r[i].hi;
        } else {
            s->r[++o] = s->r[i];
        }
    }
    s->n = o + 1;
}

// The complement in [0, CP_MAX], without the surrogates (no UTF-8 encodes them).
static void set_negate(CpSet *s) {
    set_norm(s);
    CpSet t = {.n = 0};
    uint32_t next = 0;
    for (int i = 0; i < s->n; i++) {
        if (s->r[i].lo > next) set_add(&t, next, s->r[i].lo - 1);
        next = s->r[i].hi + 1;
    }
    if (next <= CP_MAX) set_add(&t, next, CP_MAX);
    t.over |= s->over;
    *s = t;
}

// s ∩ [lo, hi] appended to out (s normalized).
static void set_clip(const CpSet *s, uint32_t lo, uint32_t hi, CpSet *out) {
    for (int i = 0; i < s->n; i++) {
        uint32_t a = s->r[i].lo > lo ? s->r[i].lo : lo, b = s->r[i].hi < hi ? s->r[i].hi : hi;
        if (a <= b) set_add(out, a, b);
    }
}

static void set_drop_surrogates(CpSet *s) {
    set_norm(s);
    CpSet t = {.over = s->over};
    set_clip(s, 0, 0xD7FF, &t);
    set_clip(s, 0xE000, CP_MAX, &t);
    *s = t;
}

static int set_has(const CpSet *s, uint32_t c) {
    for (int i = 0; i < s->n; i++)
        if (s->r[i].lo <= c && c <= s->r[i].hi) return 1;
    return 0;
}

// A table's ranges, or their complement, added to s.
static void set_add_table(CpSet *s, const CpRange *t, int n, int negate) {
    CpSet *u = calloc(1, sizeof *u);
    if (!u) {
        s->over = 1;
        return;
    }
    for (int i = 0; i < n; i++) set_add(u, t[i].lo, t[i].hi);
    if (negate) set_negate(u);
    for (int i = 0; i < u->n; i++) set_add(s, u->r[i].lo, u->r[i].hi);
    free(u);
}

// ---------------------------------------------------------------------------------------------
// GBNF of a set: the JSON encodings of its members

static void put_cp(EmxText *b, uint32_t c) {
    if ((c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')) emx_text_put(b, "%c", (char)c);
    else if (c <= 0xFF) emx_text_put(b, "\\x%02X", (unsigned)c);
    else if (c <= 0xFFFF) emx_text_put(b, "\\u%04X", (unsigned)c);
    else emx_text_put(b, "\\U%08X", (unsigned)c);
}

static void put_alt(EmxText *b, int *parts) { emx_text_put(b, "%s", (*parts)++ ? " | " : ""); }

// The control characters of s (and DEL) as \u00XX escapes, both cases of the hex digits, and
// as their short escapes.
static int put_controls(EmxText *b, const CpSet *s, int *parts) {
    int seq = 0;
    static const char SHORT[][2] = {{'\b', 'b'}, {'\t', 't'}, {'\n', 'n'}, {'\f', 'f'}, {'\r', 'r'}};
    for (int i = 0; i < N_OF(SHORT); i++)
        if (set_has(s, (uint32_t)SHORT[i][0])) put_alt(b, parts), emx_text_put(b, "\"\\\\%c\"", SHORT[i][1]);
    for (unsigned hi = 0; hi < 8; hi++) {
        char cls[40];
        size_t o = 0;
        for (unsigned lo = 0; lo < 16; lo++) {
            uint32_t c = hi * 16 + lo;
            if ((hi > 1 && c != 0x7F) || !set_has(s, c)) continue;
            if (lo < 10) cls[o++] = (char)('0' + lo);
            else cls[o++] = (char)('a' + lo - 10), cls[o++] = (char)('A' + lo - 10);
        }
        cls[o] = 0;
        if (o) put_alt(b, parts), emx_text_put(b, "\"\\\\u00%u\" [%s]", hi, cls), seq = 1;
    }
    return seq;
}

// One GBNF symbol (parenthesized when it has alternatives). Returns the number of alternatives.
static int put_set(EmxText *b, const CpSet *s) {
    CpSet *raw = calloc(1, sizeof *raw);
    if (!raw) {
        b->oom = 1;
        return 1;
    }
    for (int i = 0; i < N_OF(RAW); i++) set_clip(s, RAW[i].lo, RAW[i].hi, raw);
    EmxText t = {0};
    int parts = 0;
    if (raw->n == 1 && raw->r[0].lo == raw->r[0].hi) {
        put_alt(&t, &parts);
        if (raw->r[0].lo < 0x80) emx_text_put(&t, "\"%c\"", (char)raw->r[0].lo);  // never " or \ (not raw)
        else emx_text_put(&t, "["), put_cp(&t, raw->r[0].lo), emx_text_put(&t, "]");
    } else if (raw->n) {
        put_alt(&t, &parts);
        emx_text_put(&t, "[");
        for (int i = 0; i < raw->n; i++) {
            put_cp(&t, raw->r[i].lo);
            if (raw->r[i].hi != raw->r[i].lo) emx_text_put(&t, "-"), put_cp(&t, raw->r[i].hi);
        }
        emx_text_put(&t, "]");
    }
    free(raw);
    if (set_has(s, '"')) put_alt(&t, &parts), emx_text_put(&t, "\"\\\\\\\"\"");
    if (set_has(s, '\\')) put_alt(&t, &parts), emx_text_put(&t, "\"\\\\\\\\\"");
    if (set_has(s, '/')) put_alt(&t, &parts), emx_text_put(&t, "\"\\\\/\"");
    int seq = put_controls(&t, s, &parts);
    if (parts > 1 || seq) emx_text_put(b, "( %s )", emx_text_str(&t));
    else emx_text_put(b, "%s", emx_text_str(&t));
    if (t.oom) b->oom = 1;
    free(t.s);
    return parts;
}

// ---------------------------------------------------------------------------------------------
// The parser

// "<what> at offset N<tail>" (the offset in characters).
static int rx_fail(Rx *x, size_t at, const char *what, const char *tail) {
    size_t chars = 0;
    for (size_t i = 0; i < at && i < x->len; i++) chars += (x->p[i] & 0xC0) != 0x80;
    return emx_seterr(x->err, x->errlen, "%s at offset %zu%s", what, chars, tail);
}

static const char UNSUP[] = " is not supported";

static int peek(const Rx *x) { return x->pos < x->len ? x->p[x->pos] : -1; }
static int peek_at(const Rx *x, size_t k) { return x->pos + k < x->len ? x->p[x->pos + k] : -1; }

static int rx_utf8(Rx *x, uint32_t *cp) {
    const unsigned char *s = x->p + x->pos;
    size_t left = x->len - x->pos;
    unsigned c = s[0];
    size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    uint32_t v = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
    if (!n || n > left) return rx_fail(x, x->pos, "invalid UTF-8", "");
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return rx_fail(x, x->pos, "invalid UTF-8", "");
        v = v << 6 | (s[i] & 0x3F);
    }
    static const uint32_t MIN[] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < MIN[n] || v > CP_MAX || (v >= 0xD800 && v <= 0xDFFF)) return rx_fail(x, x->pos, "invalid UTF-8", "");
    x->pos += n;
    *cp = v;
    return 0;
}

static int hex_digits(Rx *x, int n, uint32_t *v) {
    *v = 0;
    for (int i = 0; i < n; i++) {
        int c = peek_at(x, (size_t)i);
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        *v = *v << 4 | (uint32_t)d;
    }
    x->pos += (size_t)n;
    return 0;
}

// The escape after a backslash at `at` (x->pos past the backslash): *cp, or NO_CP and a class
// escape's ranges added to cls. in_class: 0 outside a class, 1 in [...], -1 in [^...] (where
// \s adds what either reading calls white space and \S the complement of what both do, so that
// after the negation the class again holds only what both readings allow).
static int rx_escape(Rx *x, size_t at, int in_class, uint32_t *cp, CpSet *cls) {
    int c = peek(x);
    *cp = NO_CP;
    if (c < 0) return rx_fail(x, at, "a trailing backslash", "");
    const char *class_esc = strchr("dDwWsS", c);
    if (class_esc) {
        x->pos++;
        int neg = c < 'a';
        if (c == 'd' || c == 'D') set_add_table(cls, DIGIT, N_OF(DIGIT), neg);
        else if (c == 'w' || c == 'W') set_add_table(cls, WORD, N_OF(WORD), neg);
        else if (c == 's' && in_class >= 0) set_add_table(cls, SPACE, N_OF(SPACE), 0);
        else if (c == 's') set_add_table(cls, SPACE_EITHER, N_OF(SPACE_EITHER), 0);
        else if (in_class >= 0) set_add_table(cls, SPACE_EITHER, N_OF(SPACE_EITHER), 1);
        else set_add_table(cls, SPACE, N_OF(SPACE), 1);
        return 0;
    }
    static const char SIMPLE[] = "t\tn\nr\rf\fv\v";
    for (int i = 0; SIMPLE[i]; i += 2)
        if (c == SIMPLE[i]) return x->pos++, *cp = (uint32_t)SIMPLE[i + 1], 0;
    if (c == 'b' && in_class) return x->pos++, *cp = '\b', 0;
    if (c == 'b' || c == 'B') return rx_fail(x, at, c == 'b' ? "a word boundary '\\b'" : "a word boundary '\\B'", UNSUP);
    if (c == '0' && !(peek_at(x, 1) >= '0' && peek_at(x, 1) <= '9')) return x->pos++, *cp = 0, 0;
    if (c >= '0' && c <= '9') return rx_fail(x, at, "a backreference or octal escape", UNSUP);
    if (c == 'x' || c == 'u') {
        x->pos++;
        if (c == 'u' && peek(x) == '{') return rx_fail(x, at, "a code point escape '\\u{...}'", UNSUP);
        if (hex_digits(x, c == 'x' ? 2 : 4, cp)) return rx_fail(x, at, c == 'x' ? "an incomplete '\\x' escape" : "an incomplete '\\u' escape", "");
        if (*cp >= 0xD800 && *cp <= 0xDFFF) return rx_fail(x, at, "a surrogate escape", UNSUP);
        return 0;
    }
    if (c == 'c') return rx_fail(x, at, "a control escape '\\c'", UNSUP);
    if (c == 'p' || c == 'P') return rx_fail(x, at, "a Unicode property escape", UNSUP);
    if (c == 'k') return rx_fail(x, at, "a named backreference '\\k'", UNSUP);
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
        char what[40];
        snprintf(what, sizeof what, "an unknown escape '\\%c'", c);
        return rx_fail(x, at, what, UNSUP);
    }
    return rx_utf8(x, cp);  // an escaped punctuation or other character: itself
}

// One character or class escape: *cp, or NO_CP and ranges added to cls.
static int rx_char(Rx *x, int in_class, uint32_t *cp, CpSet *cls) {
    if (peek(x) == '\\') {
        size_t at = x->pos++;
        return rx_escape(x, at, in_class, cp, cls);
    }
    return rx_utf8(x, cp);
}

// [...] at x->pos into s.
static int rx_class(Rx *x, CpSet *s) {
    size_t at = x->pos++;
    int neg = peek(x) == '^';
    x->pos += (size_t)neg;
    if (peek(x) == ']') return rx_fail(x, at, "a character class starting with ']' ('[]' or '[^]')", UNSUP);
    for (;;) {
        if (peek(x) < 0) return rx_fail(x, at, "an unterminated character class", "");
        if (peek(x) == ']') break;
        size_t a = x->pos;
        uint32_t lo, hi;
        if (rx_char(x, neg ? -1 : 1, &lo, s)) return -1;
        if (peek(x) == '-' && peek_at(x, 1) >= 0 && peek_at(x, 1) != ']') {
            x->pos++;
            if (rx_char(x, neg ? -1 : 1, &hi, s)) return -1;
            if (lo == NO_CP || hi == NO_CP) return rx_fail(x, a, "a range bounded by a class escape", UNSUP);
            if (hi < lo) return rx_fail(x, a, "a range out of order", "");
            set_add(s, lo, hi);
        } else if (lo != NO_CP) {
            set_add(s, lo, lo);
        }
    }
    x->pos++;
    if (neg) set_negate(s);
    set_drop_surrogates(s);
    if (s->over) return rx_fail(x, at, "a character class of over 512 ranges", UNSUP);
    if (!s->n) return rx_fail(x, at, "a character class that matches no character", UNSUP);
    return 0;
}

static int is_digit(int c) { return c >= '0' && c <= '9'; }

// A count of {n,m}: -1 when there are no digits.
static long rx_count(Rx *x) {
    if (!is_digit(peek(x))) return -1;
    long v = 0;
    while (is_digit(peek(x))) {
        v = v * 10 + (peek(x) - '0');
        if (v > MAX_COUNT) v = MAX_COUNT + 1;
        x->pos++;
    }
    return v;
}

// {n}, {n,} or {n,m} at x->pos: 1 and *m, *n (-1: unbounded); 0 (x->pos unchanged) otherwise.
static int rx_brace(Rx *x, long *m, long *n) {
    size_t at = x->pos++;
    long a = rx_count(x), b = a;
    if (a >= 0 && peek(x) == ',') {
        x->pos++;
        b = peek(x) == '}' ? -1 : rx_count(x);
        if (b < 0 && peek(x) != '}') a = -1;
    }
    if (a < 0 || peek(x) != '}') {
        x->pos = at;
        return 0;
    }
    x->pos++;
    *m = a, *n = b;
    return 1;
}

// A quantifier at x->pos: 1 and its bounds (*n -1: unbounded), 0 when none, -1 on error.
static int rx_quant(Rx *x, long *m, long *n) {
    size_t at = x->pos;
    int c = peek(x);
    if (c == '*') *m = 0, *n = -1, x->pos++;
    else if (c == '+') *m = 1, *n = -1, x->pos++;
    else if (c == '?') *m = 0, *n = 1, x->pos++;
    else if (c != '{') return 0;
    else if (!rx_brace(x, m, n)) return rx_fail(x, at, "a '{' that is not a quantifier (write '\\{')", UNSUP);
    if (*m > MAX_COUNT || *n > MAX_COUNT) return rx_fail(x, at, "a repetition count over 100000", UNSUP);
    if (*n >= 0 && *n < *m) return rx_fail(x, at, "a quantifier {n,m} with m below n", "");
    long m2, n2;
    if (peek(x) == '?') return rx_fail(x, at, "a lazy quantifier", UNSUP);
    if (peek(x) == '*' || peek(x) == '+' || (peek(x) == '{' && rx_brace(x, &m2, &n2)))
        return rx_fail(x, x->pos, "a quantifier after a quantifier", UNSUP);
    return 1;
}

static int rx_alt(Rx *x, EmxText *b, int top, int *nullable);

// (...) or (?:...) at x->pos into a: its alternatives in parentheses.
static int rx_group(Rx *x, EmxText *a, int *nullable) {
    size_t at = x->pos++;
    if (peek(x) == '?') {
        int c = peek_at(x, 1), d = peek_at(x, 2);
        if (c == '=' || c == '!') return rx_fail(x, at, c == '=' ? "a lookahead '(?='" : "a lookahead '(?!'", UNSUP);
        if (c == '<' && (d == '=' || d == '!')) return rx_fail(x, at, "a lookbehind", UNSUP);
        if (c == '<' || c == 'P') return rx_fail(x, at, "a named group", UNSUP);
        if (c != ':') return rx_fail(x, at, "a group modifier or flag '(?'", UNSUP);
        x->pos += 2;
    }
    if (++x->depth > MAX_GROUP_DEPTH) return rx_fail(x, at, "groups nested over 100 deep", UNSUP);
    emx_text_put(a, "(");
    if (rx_alt(x, a, 0, nullable)) return -1;
    emx_text_put(a, " )");
    if (peek(x) != ')') return rx_fail(x, at, "an unclosed '('", "");
    x->pos++;
    x->depth--;
    return 0;
}

// The GBNF suffix of a quantifier {m,n} (n -1: unbounded).
static void put_quant(EmxText *b, long m, long n) {
    if (n < 0 && m <= 1) emx_text_put(b, m == 0 ? "*" : "+");
    else if (n < 0) emx_text_put(b, "{%ld,}", m);
    else if (m == 0 && n == 1) emx_text_put(b, "?");
    else if (m == n) emx_text_put(b, "{%ld}", m);
    else emx_text_put(b, "{%ld,%ld}", m, n);
}

// One atom (one GBNF symbol) into a; *nullable: it can match "".
static int rx_atom(Rx *x, EmxText *a, int *nullable) {
    size_t at = x->pos;
    int c = peek(x), rc = 0;
    *nullable = 0;
    if (c == '(') return rx_group(x, a, nullable);
    if (c == '*' || c == '+' || c == '?' || c == '{') {
        long m, n;
        if (c == '{' && !rx_brace(x, &m, &n)) return rx_fail(x, at, "a '{' that is not a quantifier (write '\\{')", UNSUP);
        return rx_fail(x, at, "a quantifier with nothing to repeat", "");
    }
    CpSet *s = calloc(1, sizeof *s);
    if (!s) return emx_seterr(x->err, x->errlen, "out of memory");
    if (c == '[') {
        rc = rx_class(x, s);
    } else if (c == '.') {
        x->pos++;
        set_add_table(s, LINE_TERMINATORS, N_OF(LINE_TERMINATORS), 1);
    } else {
        uint32_t cp;
        rc = rx_char(x, 0, &cp, s);
        if (rc == 0 && cp != NO_CP) set_add(s, cp, cp);
    }
    if (rc == 0) {
        set_drop_surrogates(s);
        if (s->over) rc = rx_fail(x, at, "a character class of over 512 ranges", UNSUP);
        else put_set(a, s);
    }
    free(s);
    return rc;
}

// One atom and its quantifier into b (a space before it); *nullable: it can match "".
static int rx_term(Rx *x, EmxText *b, int *nullable) {
    size_t at = x->pos;
    EmxText a = {0};
    long m = 1, n = 1;
    int q = 0, rc = rx_atom(x, &a, nullable);
    if (rc == 0 && (q = rx_quant(x, &m, &n)) < 0) rc = -1;
    if (rc == 0 && q && *nullable && n < 0)
        rc = rx_fail(x, at, "an unbounded repetition of something that can match the empty string", UNSUP);
    if (rc == 0 && !(m == 0 && n == 0)) {
        emx_text_put(b, " %s", emx_text_str(&a));
        if (q) put_quant(b, m, n);
    }
    if (m == 0) *nullable = 1;
    if (a.oom) b->oom = 1;
    free(a.s);
    return rc;
}

// One alternative (a sequence of terms) into b. At the top level, ^ and $ may open and close
// it, and without them any characters may come before and after.
static int rx_seq(Rx *x, EmxText *b, int top, int *nullable) {
    int start = 0, end = 0, terms = 0, rc = 0;
    *nullable = 1;
    if (top && peek(x) == '^') start = 1, x->pos++;
    EmxText t = {0};
    while (rc == 0 && peek(x) >= 0 && peek(x) != '|' && peek(x) != ')') {
        int c = peek(x), tn;
        if (c == '$' && top && (peek_at(x, 1) < 0 || peek_at(x, 1) == '|')) {
            end = 1, x->pos++;
            break;
        }
        if (c == '^') rc = rx_fail(x, x->pos, "a '^' not at the start of the pattern or of a top-level alternative", UNSUP);
        else if (c == '$') rc = rx_fail(x, x->pos, "a '$' not at the end of the pattern or of a top-level alternative", UNSUP);
        else if ((rc = rx_term(x, &t, &tn)) == 0) *nullable &= tn, terms++;
    }
    if (rc == 0 && top && !terms) {
        if (!(start && end)) emx_text_put(b, " %s*", x->any);
    } else if (rc == 0) {
        if (top && !start) emx_text_put(b, " %s*", x->any);
        emx_text_put(b, "%s", emx_text_str(&t));
        if (top && !end) emx_text_put(b, " %s*", x->any);
    }
    if (t.oom) b->oom = 1;
    free(t.s);
    return rc;
}

// Alternatives separated by |, into b.
static int rx_alt(Rx *x, EmxText *b, int top, int *nullable) {
    *nullable = 0;
    for (;;) {
        int sn;
        if (rx_seq(x, b, top, &sn)) return -1;
        *nullable |= sn;
        if (peek(x) != '|') return 0;
        x->pos++;
        emx_text_put(b, " |");
    }
}

int emx_pattern_to_gbnf(const char *pattern, const char *any_char, EmxText *out, char *err, size_t errlen) {
    Rx x = {.p = (const unsigned char *)pattern, .len = strlen(pattern), .any = any_char, .err = err, .errlen = errlen};
    if (x.len > MAX_PATTERN) return emx_seterr(err, errlen, "a pattern over %d bytes is not supported", MAX_PATTERN);
    EmxText b = {0};
    int nullable, rc = rx_alt(&x, &b, 1, &nullable);
    if (rc == 0 && peek(&x) == ')') rc = rx_fail(&x, x.pos, "an unmatched ')'", "");
    if (rc == 0 && b.oom) rc = emx_seterr(err, errlen, "out of memory");
    if (rc == 0) emx_text_put(out, "(%s )", emx_text_str(&b));
    free(b.s);
    return rc;
}
