// tok_utf8.c — see tok_utf8.h.
#include "tokenizer/tok_utf8.h"

#include <stdlib.h>
#include <string.h>

int tok_utf8_next(const uint8_t *s, size_t n, uint32_t *cp) {
    uint8_t c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    int need;           // continuation bytes after the lead
    uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the FIRST continuation byte
    uint32_t v;
    if (c >= 0xC2 && c <= 0xDF) need = 1, v = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 2, v = c & 0x0F;
        if (c == 0xE0) lo = 0xA0;        // no overlongs
        if (c == 0xED) hi = 0x9F;        // no surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3, v = c & 0x07;
        if (c == 0xF0) lo = 0x90;        // no overlongs
        if (c == 0xF4) hi = 0x8F;        // nothing past U+10FFFF
    } else {
        return -1;                       // 80..C1, F5..FF can never start a character
    }
    for (int i = 1; i <= need; i++) {
        if ((size_t)i >= n) return 0;    // valid so far, ran out of bytes
        uint8_t b = s[i];
        uint8_t l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
        if (b < l || b > h) return -i;   // lead + the i-1 good continuations = one subpart
        v = (v << 6) | (b & 0x3F);
    }
    *cp = v;
    return need + 1;
}

int tok_utf8_put(uint32_t cp, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

char *tok_utf8_sanitize(const char *s, size_t n, size_t *out_len) {
    // Worst case: every byte becomes a 3-byte U+FFFD.
    if (n > (SIZE_MAX - 1) / 3) return NULL;
    char *out = malloc(3 * n + 1);
    if (!out) return NULL;
    const uint8_t *p = (const uint8_t *)s;
    size_t i = 0, o = 0;
    while (i < n) {
        // Fast path for ASCII runs.
        if (p[i] < 0x80) {
            out[o++] = (char)p[i++];
            continue;
        }
        uint32_t cp;
        int r = tok_utf8_next(p + i, n - i, &cp);
        if (r > 0) {
            memcpy(out + o, p + i, (size_t)r);
            o += (size_t)r, i += (size_t)r;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i += r < 0 ? (size_t)-r : n - i;  // an incomplete tail is one subpart
        }
    }
    out[o] = 0;
    *out_len = o;
    return out;
}
