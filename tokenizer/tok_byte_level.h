// tok_byte_level.h — GPT-2's byte <-> code point alphabet used by byte-level BPE vocabularies:
// printable bytes (33..126, 161..172, 174..255) stand for themselves, the other 68 bytes are
// spelled U+0100.. in byte order ("Ġ" = U+0120 = space, "Ċ" = U+010A = newline).
#ifndef ENTROPIX_TOK_BYTE_LEVEL_H
#define ENTROPIX_TOK_BYTE_LEVEL_H

#include <stddef.h>
#include <stdint.h>

// Code point that spells byte b.
uint32_t bytelevel_cp_of_byte(uint8_t b);
// Byte spelled by code point cp, or -1 if cp is not in the alphabet.
int bytelevel_byte_of_cp(uint32_t cp);
// Undoes the alphabet: writes the raw bytes of a spelled piece to out (at most len bytes).
// Returns the byte count, or -1 if the piece is not valid UTF-8 over the alphabet.
int bytelevel_unspell(const char *s, size_t len, char *out);

#endif
