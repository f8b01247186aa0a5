// tok_utf8.h — UTF-8 decoding with the Unicode "maximal subpart" rule for invalid input (the rule
// WHATWG TextDecoder and Python's errors="replace" use: one U+FFFD per maximal invalid subpart).
#ifndef ENTROPIX_TOK_UTF8_H
#define ENTROPIX_TOK_UTF8_H

#include <stddef.h>
#include <stdint.h>

// Looks at the sequence starting at s[0] (n >= 1 bytes available). Returns:
//   L > 0  a valid character of L bytes, *cp set;
//   -k     an invalid maximal subpart of k >= 1 bytes (replace by one U+FFFD, go on at s[k]);
//   0      a valid but incomplete prefix: all n bytes could start a character if more came.
int tok_utf8_next(const uint8_t *s, size_t n, uint32_t *cp);

// Bytes of code point cp in UTF-8 (cp < 0x110000), 1..4 written to out.
int tok_utf8_put(uint32_t cp, char *out);

// Copy of s[0..n) with every invalid subpart (and an incomplete tail) replaced by U+FFFD;
// malloc'd, NUL-terminated, *out_len set. NULL on out of memory.
char *tok_utf8_sanitize(const char *s, size_t n, size_t *out_len);

#endif
