// tok_byte_level.c — see tok_byte_level.h.
#include "tokenizer/tok_byte_level.h"

#include "tokenizer/tok_utf8.h"

static int printable(int b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174; }

uint32_t bytelevel_cp_of_byte(uint8_t b) {
    if (printable(b)) return b;
    // The n-th non-printable byte (in byte order) is spelled 256 + n.
    uint32_t n = 0;
    for (int i = 0; i < b; i++) n += !printable(i);
    return 256 + n;
}

int bytelevel_byte_of_cp(uint32_t cp) {
    if (cp < 256) return printable((int)cp) ? (int)cp : -1;
    if (cp >= 256 + 68) return -1;
    // The (cp - 256)-th non-printable byte: 0..32, then 127..160, then 173.
    uint32_t n = cp - 256;
    if (n <= 32) return (int)n;
    if (n <= 32 + 34) return (int)(127 + n - 33);
    return 173;
}

int bytelevel_unspell(const char *s, size_t len, char *out) {
    const uint8_t *p = (const uint8_t *)s;
    size_t i = 0;
    int o = 0;
    while (i < len) {
        uint32_t cp;
        int r = tok_utf8_next(p + i, len - i, &cp);
        if (r <= 0) return -1;
        int b = bytelevel_byte_of_cp(cp);
        if (b < 0) return -1;
        out[o++] = (char)b;
        i += (size_t)r;
    }
    return o;
}
