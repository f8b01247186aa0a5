// json_schema_format.h — the GBNF of JSON Schema string formats and of integer ranges
// (json_schema.c; docs/grammar.md "JSON Schema").
#ifndef ENTROPIX_JSON_SCHEMA_FORMAT_H
#define ENTROPIX_JSON_SCHEMA_FORMAT_H

#include <stdint.h>

#include "sampler/gbnf_text.h"

// The formats, each a GBNF rule of the text between a string's quotes: date, time and
// date-time of RFC 3339 (calendar dates exact, leap years included; no leap second, years
// 0001-9999, upper-case T and Z), uuid (8-4-4-4-12 hex digits), email (a dot-atom local part of
// at most 4 atoms of 1-15 characters, @, a domain of two labels or more of 1-63 letters, digits
// and inner hyphens), ipv4 (dotted decimal, no leading zeros).
enum { EMX_FORMAT_DATE, EMX_FORMAT_TIME, EMX_FORMAT_DATE_TIME, EMX_FORMAT_UUID, EMX_FORMAT_EMAIL, EMX_FORMAT_IPV4,
       EMX_FORMAT_COUNT };

// The format's index, or -1 when it is not one of the above.
int emx_format_index(const char *name);
// The rule's name ("format-date", ...), used in a string's grammar.
const char *emx_format_rule_name(int format);
// Appends the rules of the formats whose bits (1 << index) are set, and the rules they use.
void emx_format_put_rules(EmxText *out, unsigned used);

// The largest magnitude of an integer bound (2^53 - 1: every integer up to it is a double).
#define EMX_INT_BOUND_MAX 9007199254740991LL

// Appends a GBNF expression (one symbol, without `space`) of the JSON integers n with
// lo <= n <= hi (|lo|, |hi| <= EMX_INT_BOUND_MAX; has_lo / has_hi 0: that side unbounded,
// up to the 16 digits of the `integral` rule). No "-0" and no leading zero. lo <= hi.
void emx_int_range_gbnf(EmxText *out, int has_lo, int64_t lo, int has_hi, int64_t hi);

#endif
