// model_verify.c — integrity record of a model file (model_verify.h).
#include "runtime/model_verify.h"

#include <stdio.h>
#include <string.h>


uint64_t emx_hash64(const void *p, size_t n, uint64_t h) {
    const uint8_t *b = p;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);  // little-endian hosts only, as the whole file format
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 32;
    }
    if (i < n) {
        uint64_t w = 0;
        memcpy(&w, b + i, n - i);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 32;
    }
    return h;
}

static void put64(uint32_t *r, uint64_t v) {
    r[0] = (uint32_t)v;
    r[1] = (uint32_t)(v >> 32);
}

static uint64_t get64(const uint32_t *r) { return (uint64_t)r[0] | (uint64_t)r[1] << 32; }

// The record's hashes of the image into hdr: the header and directory's and the tokenizer
// section's, and with `data` the tensor data's (the costly one: every byte of the weights).
static int record(const uint8_t *base, uint64_t size, EmxFileHeader *hdr, int data) {
    EmxFileHeader h;
    memcpy(&h, base, sizeof h);
    uint64_t dir_end = h.tensor_dir_offset + (uint64_t)h.n_tensors * sizeof(EmxTensorEntry);
    if (size < sizeof h || h.tokenizer_offset > size || h.tokenizer_bytes > size - h.tokenizer_offset ||
        h.tensor_dir_offset > size || dir_end > size || dir_end < h.tensor_dir_offset)
        return -1;
    memset(h.config.reserved, 0, EMX_CHECK_WORDS * sizeof h.config.reserved[0]);
    h.config.reserved[0] = EMX_CHECK_MAGIC;
    uint64_t hh = emx_hash64(&h, sizeof h, EMX_HASH64_SEED);
    // version 2: its EmxConfigExt, between the header and the tokenizer section, is hashed with it
    if (h.header_bytes > sizeof h && h.header_bytes <= size) hh = emx_hash64(base + sizeof h, h.header_bytes - sizeof h, hh);
    hh = emx_hash64(base + h.tensor_dir_offset, dir_end - h.tensor_dir_offset, hh);
    put64(&h.config.reserved[1], hh);
    put64(&h.config.reserved[3], emx_hash64(base + h.tokenizer_offset, h.tokenizer_bytes, EMX_HASH64_SEED));
    if (data) put64(&h.config.reserved[5], emx_hash64(base + dir_end, size - dir_end, EMX_HASH64_SEED));
    memcpy(hdr->config.reserved, h.config.reserved, (data ? EMX_CHECK_WORDS : 5) * sizeof h.config.reserved[0]);
    return 0;
}

int emx_check_record(const uint8_t *base, uint64_t size, EmxFileHeader *hdr) { return record(base, size, hdr, 1); }

int emx_verify_image(const uint8_t *base, uint64_t size, int data, const char *path, char *msg, size_t msglen) {
    EmxFileHeader h, want;
    memcpy(&h, base, sizeof h);
    if (h.config.reserved[0] != EMX_CHECK_MAGIC) {
        // A file without a record has all its record words zero; non-zero words under another
        // magic are a record whose magic was damaged, which must not switch the check off.
        for (unsigned i = 0; i < EMX_CHECK_WORDS; i++)
            if (h.config.reserved[i]) {
                snprintf(msg, msglen, "%s: the integrity record is damaged (config.reserved[0] = 0x%08x, not \"CKS1\", "
                         "and config.reserved[%u] = 0x%08x is not zero): the file is corrupted", path,
                         h.config.reserved[0], i, h.config.reserved[i]);
                return -1;
            }
        snprintf(msg, msglen, "%s: no checksum recorded (written before convert recorded one); structure ok", path);
        return 1;
    }
    want = h;
    if (record(base, size, &want, data)) {  // cannot happen after the loader's checks
        snprintf(msg, msglen, "%s: sections outside the file", path);
        return -1;
    }
    static const char *const section[] = {"header and tensor directory", "tokenizer section", "tensor data"};
    for (int i = 0; i < (data ? 3 : 2); i++) {
        uint64_t got = get64(&want.config.reserved[1 + 2 * i]), rec = get64(&h.config.reserved[1 + 2 * i]);
        if (got != rec) {
            snprintf(msg, msglen, "%s: checksum mismatch in the %s (recorded %016llx, computed %016llx): the file is "
                     "corrupted", path, section[i], (unsigned long long)rec, (unsigned long long)got);
            return -1;
        }
    }
    snprintf(msg, msglen, "checksum %016llx", (unsigned long long)(get64(&h.config.reserved[1]) ^
                                                              get64(&h.config.reserved[3]) ^
                                                              get64(&h.config.reserved[5])));
    return 0;
}
