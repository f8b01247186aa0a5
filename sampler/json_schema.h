// json_schema.h — JSON Schema -> GBNF (grammar.h), the subset OpenAI's strict mode defines
// (docs/grammar.md "JSON Schema"): type object (properties in declared order, required,
// additionalProperties false), array (items, minItems, maxItems), string (enum, const,
// minLength, maxLength; pattern, an ECMA-262 subset, json_schema_pattern.h; format date, time,
// date-time, uuid, email, ipv4), number (minimum 0), integer (minimum, maximum,
// exclusiveMinimum, exclusiveMaximum: the exact range), boolean, null, type arrays, enum / const of any JSON
// value, anyOf, $ref to #/$defs/... or #/definitions/... (recursion allowed). Annotations
// (title, description, $schema, $id, $comment, default, examples) are ignored; any other
// keyword is refused, naming it and its JSON pointer. The output is a JSON value with bounded
// whitespace between tokens: `space ::= | " " | "\n" [ \t]{0,20}`.
#ifndef ENTROPIX_JSON_SCHEMA_H
#define ENTROPIX_JSON_SCHEMA_H

#include <stddef.h>

#include "sampler/grammar.h"

// The GBNF text of a schema (len bytes of JSON). 0 and *gbnf (malloc'd, NUL-terminated; the
// caller frees it), or -1 and a message "json schema: ..." (*gbnf NULL).
int emx_json_schema_to_gbnf(const char *schema, size_t len, char **gbnf, char *err, size_t errlen);
// emx_json_schema_to_gbnf, parsed: 0 and *out (emx_grammar_free), or -1 and a message.
int emx_grammar_from_json_schema(const char *schema, size_t len, EmxGrammar **out, char *err, size_t errlen);

#endif
