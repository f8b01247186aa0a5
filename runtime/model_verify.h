// model_verify.h — the optional integrity record of a model file: three hashes convert writes
// into the header's reserved words (model_format.h EMX_CHECK_*), and the check that recomputes
// them, so that a corrupted file (a flipped bit, a bad copy) is told apart from a bad model.
#ifndef ENTROPIX_MODEL_VERIFY_H
#define ENTROPIX_MODEL_VERIFY_H

#include <stddef.h>
#include <stdint.h>

#include "base/model_format.h"

#define EMX_HASH64_SEED 0xcbf29ce484222325ull

// FNV-1a-style 64-bit hash, continued from h (start with EMX_HASH64_SEED): for each 64-bit
// little-endian word w of the bytes, h = (h ^ w) * 0x100000001b3, then h ^= h >> 32; the bytes
// after the last whole word are zero-padded into one final word. Each step is a bijection of
// h, so a change to any one word always changes the result. Not a cryptographic hash.
uint64_t emx_hash64(const void *p, size_t n, uint64_t h);

// The three hashes of a complete file image (`base`, `size` bytes: header, tokenizer section,
// directory, data, as model_format.h lays them out and as the header says; the header's own
// record words are taken as zero). Fills hdr->config.reserved[0..6] with the record.
// Returns -1 if the header's offsets do not fit `size` (the caller validates first).
int emx_check_record(const uint8_t *base, uint64_t size, EmxFileHeader *hdr);

// Checks an image (the file's bytes as loaded) against its record: the header and directory's
// hash and the tokenizer section's always, the tensor data's with `data` (every weight read:
// about as long as loading the file; docs/model-format.md has the measurement). Returns 0 when
// they match ("checksum <hex>" in msg), 1 when the file has no record (all seven record words
// zero; msg says so), -1 with a one-line reason naming path and the first section that differs,
// or the damaged record (a word set under a reserved[0] that is not the magic).
int emx_verify_image(const uint8_t *base, uint64_t size, int data, const char *path, char *msg, size_t msglen);

// emx_model_verify (runtime/model.h) checks a file on disk: it opens it as the runtime does, then
// calls emx_verify_image on the mapped bytes.

#endif
