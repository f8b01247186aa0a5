// json_schema_format.c — string formats and integer ranges as GBNF (json_schema_format.h).
#include <stdio.h>
#include <string.h>

#include "sampler/json_schema_format.h"

static const char *const NAMES[EMX_FORMAT_COUNT] = {"date", "time", "date-time", "uuid", "email", "ipv4"};
static const char *const RULES[EMX_FORMAT_COUNT] = {"format-date", "format-time", "format-date-time",
                                                    "format-uuid", "format-email", "format-ipv4"};

// Each rule is the characters between the quotes (none of them needs a JSON escape).
static const char DATE[] =
    "format-date ::= format-year \"-\" ( ( \"0\" [13578] | \"1\" [02] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] )"
    " | ( \"0\" [469] | \"11\" ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"30\" )"
    " | \"02-\" ( \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8] ) ) | format-leap-year \"-02-29\"\n"
    // 0001-9999
    "format-year ::= [1-9] [0-9]{3} | \"0\" ( [1-9] [0-9]{2} | \"0\" ( [1-9] [0-9] | \"0\" [1-9] ) )\n"
    // divisible by 4, not by 100 unless by 400 (0000 is not a year here)
    "format-leap-year ::= [0-9] [0-9] ( \"0\" [48] | [2468] [048] | [13579] [26] )"
    " | ( \"0\" [48] | [2468] [048] | [13579] [26] ) \"00\"\n";
static const char TIME[] =
    "format-time ::= ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,9} )?"
    " ( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )\n";
static const char DATE_TIME[] = "format-date-time ::= format-date \"T\" format-time\n";
static const char UUID[] =
    "format-uuid ::= [0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12}\n";
static const char EMAIL[] =
    // a local part of at most 4 atoms of at most 15 characters (under RFC 5321's 64), labels of at
    // most 63: bounded, so that a model cannot write a local part forever
    "format-email ::= format-atom ( \".\" format-atom ){0,3} \"@\" format-label ( \".\" format-label )+\n"
    "format-atom ::= [A-Za-z0-9!#$%&'*+=?^_`{|}~-]{1,15}\n"
    "format-label ::= [A-Za-z0-9] ( [A-Za-z0-9-]{0,61} [A-Za-z0-9] )?\n";
static const char IPV4[] =
    "format-ipv4 ::= format-octet \".\" format-octet \".\" format-octet \".\" format-octet\n"
    "format-octet ::= \"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9] [0-9] | [0-9]\n";

int emx_format_index(const char *name) {
    for (int i = 0; i < EMX_FORMAT_COUNT; i++)
        if (!strcmp(NAMES[i], name)) return i;
    return -1;
}

const char *emx_format_rule_name(int format) { return RULES[format]; }

void emx_format_put_rules(EmxText *out, unsigned used) {
    if (used & (1u << EMX_FORMAT_DATE_TIME)) used |= 1u << EMX_FORMAT_DATE | 1u << EMX_FORMAT_TIME;
    const char *const text[EMX_FORMAT_COUNT] = {DATE, TIME, DATE_TIME, UUID, EMAIL, IPV4};
    for (int i = 0; i < EMX_FORMAT_COUNT; i++)
        if (used & (1u << i)) emx_text_put(out, "%s", text[i]);
}

// ---------------------------------------------------------------------------------------------
// Integer ranges

// The n-digit strings from lo to hi (both n digits, lo <= hi), one GBNF symbol or a sequence.
static void digits_range(EmxText *b, const char *lo, const char *hi, int n) {
    if (n == 0) return;
    if (lo[0] == hi[0]) {
        emx_text_put(b, "\"%c\"", lo[0]);
        if (n > 1) emx_text_put(b, " "), digits_range(b, lo + 1, hi + 1, n - 1);
        return;
    }
    int lo_zeros = 1, hi_nines = 1;
    for (int i = 1; i < n; i++) lo_zeros &= lo[i] == '0', hi_nines &= hi[i] == '9';
    char l = lo[0], h = hi[0], nines[20], zeros[20];
    memset(nines, '9', sizeof nines), memset(zeros, '0', sizeof zeros);
    const char *sep = "";
    emx_text_put(b, "( ");
    if (!lo_zeros) {  // lo's first digit with the rest from lo's rest up
        emx_text_put(b, "\"%c\" ", l);
        digits_range(b, lo + 1, nines, n - 1);
        l++, sep = " | ";
    }
    if (!hi_nines) h--;
    if (l <= h) {  // the first digits in between, with any rest
        emx_text_put(b, "%s[%c-%c]", sep, l, h);
        if (n > 1) emx_text_put(b, " [0-9]{%d}", n - 1);
        sep = " | ";
    }
    if (!hi_nines) {  // hi's first digit with the rest up to hi's rest
        emx_text_put(b, "%s\"%c\" ", sep, hi[0]);
        digits_range(b, zeros, hi + 1, n - 1);
    }
    emx_text_put(b, " )");
}

static int n_digits(int64_t v) {
    int n = 1;
    while (v >= 10) v /= 10, n++;
    return n;
}

// v's len decimal digits into s (zero-padded, NUL-terminated).
static void put_digits(char *s, int64_t v, int len) {
    s[len] = 0;
    for (int i = len - 1; i >= 0; i--, v /= 10) s[i] = (char)('0' + v % 10);
}

// The naturals from a to b (0 <= a <= b), without leading zeros, as alternatives into b.
static void naturals(EmxText *out, int64_t a, int64_t b, const char **sep) {
    int64_t p = 1;  // 10^(L-1)
    for (int len = 1; len <= n_digits(b); len++, p *= 10) {
        int64_t lo = len == 1 ? 0 : p, hi = p * 10 - 1;
        if (lo < a) lo = a;
        if (hi > b) hi = b;
        if (lo > hi) continue;
        char ls[20], hs[20];
        put_digits(ls, lo, len), put_digits(hs, hi, len);
        emx_text_put(out, "%s", *sep);
        digits_range(out, ls, hs, len);
        *sep = " | ";
    }
}

void emx_int_range_gbnf(EmxText *out, int has_lo, int64_t lo, int has_hi, int64_t hi) {
    const int64_t cap = 9999999999999999LL;  // 16 digits, as `integral`
    if (!has_lo) lo = -cap;
    if (!has_hi) hi = cap;
    const char *sep = "";
    emx_text_put(out, "( ");
    if (lo < 0) {  // "-" and the magnitudes from max(1, -hi) to -lo
        emx_text_put(out, "\"-\" ( ");
        const char *s2 = "";
        naturals(out, hi < 0 ? -hi : 1, -lo, &s2);
        emx_text_put(out, " )");
        sep = " | ";
    }
    if (hi >= 0) naturals(out, lo > 0 ? lo : 0, hi, &sep);
    emx_text_put(out, " )");
}
