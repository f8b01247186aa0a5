// json_schema_pattern.h — a JSON Schema `pattern` (an ECMA-262 regular expression) as a GBNF
// expression over the text between a JSON string's quotes (docs/grammar.md "JSON Schema").
//
// The regex matches the decoded string, so each character it allows is written as JSON writes
// it: `"` as \", `\` as \\, a control character as its short escape (\n) or \u00XX, DEL as
// \u007F, `/` raw or as \/. The pattern is unanchored (a match anywhere, as re.search): a
// top-level alternative without ^ may be preceded, one without $ followed, by any characters
// (the rule `char` of json_schema.c). The subset: literals; escapes \d \w \s \D \W \S, \t \n \r
// \f \v \0, \xHH, \uHHHH and escaped punctuation; `.`; classes [...] and [^...] with ranges;
// groups (...) and (?:...); alternation; quantifiers * + ? {n} {n,} {n,m}; ^ and $ at the start
// and end of the pattern or of a top-level alternative. Anything else is refused, naming it and
// its offset (in characters) in the pattern.
#ifndef ENTROPIX_JSON_SCHEMA_PATTERN_H
#define ENTROPIX_JSON_SCHEMA_PATTERN_H

#include <stddef.h>

#include "sampler/gbnf_text.h"

// Appends the expression for pattern (NUL-terminated UTF-8) to out: 0, or -1 and a message
// such as "a lookahead '(?=' at offset 3 is not supported" (no prefix; the caller adds the
// schema's JSON pointer). any_char names the rule of one JSON-encoded character.
int emx_pattern_to_gbnf(const char *pattern, const char *any_char, EmxText *out, char *err, size_t errlen);

#endif
