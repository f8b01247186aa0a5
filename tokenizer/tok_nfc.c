// tok_nfc.c — NFC quick check, so that Qwen-style tokenizers (normalizer NFC) only pay for
// utf8proc's normalisation when a text could change.
//
// A code point is "safe" when NFC leaves it unchanged wherever it stands: combining class 0
// (nothing to reorder), not the second character of any canonical composition (it cannot fuse
// with what precedes it), and NFC of the character alone is itself (no singleton or excluded
// decomposition). A string of safe characters is its own NFC — Unicode's NFC_Quick_Check=Yes
// reasoning (UAX #15), made stricter by also requiring combining class 0.
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer/tok_utf8.h"
#include "tokenizer/tokenizer_internal.h"

static int is_second(uint32_t cp, const utf8proc_property_t *p) {
    // Hangul V and T jamo compose algorithmically (utf8proc has no table entry for them);
    // utf8proc also takes U+11A7 (TBase itself) as a T jamo, so we do too.
    if ((cp >= 0x1161 && cp <= 0x1175) || (cp >= 0x11A7 && cp <= 0x11C2)) return 1;
    // utf8proc marks characters that can be the second of a composition pair with
    // comb_index >= 0x8000 (0xFFFF = takes part in no composition).
    return p->comb_index != UINT16_MAX && p->comb_index >= 0x8000;
}

static int has_canonical_decomposition(const utf8proc_property_t *p) {
    return p->decomp_seqindex != UINT16_MAX && p->decomp_type == 0;
}

static int nfc_of_char_is_itself(uint32_t cp) {
    char buf[4];
    int l = tok_utf8_put(cp, buf);
    utf8proc_uint8_t *out = NULL;
    utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t *)buf, l, &out,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    int same = m == l && memcmp(out, buf, (size_t)l) == 0;
    free(out);
    return same;
}

int tok_nfc_init(EmxTokenizer *tk) {
    tk->nfc_safe = calloc(0x10000 / 8, 1);
    if (!tk->nfc_safe) return -1;
    for (uint32_t cp = 0; cp < 0x10000; cp++) {
        if (cp >= 0xD800 && cp < 0xE000) continue;  // never in valid UTF-8
        const utf8proc_property_t *p = utf8proc_get_property((utf8proc_int32_t)cp);
        int safe = p->combining_class == 0 && !is_second(cp, p) &&
                   (!has_canonical_decomposition(p) || nfc_of_char_is_itself(cp));
        if (safe) tk->nfc_safe[cp >> 3] |= (uint8_t)(1u << (cp & 7));
    }
    return 0;
}

static int cp_is_safe(const EmxTokenizer *tk, uint32_t cp) {
    if (cp < 0x80) return 1;
    if (cp < 0x10000) return (tk->nfc_safe[cp >> 3] >> (cp & 7)) & 1;
    // Astral: emoji, CJK extensions... — safe unless a mark, a second, or decomposable.
    const utf8proc_property_t *p = utf8proc_get_property((utf8proc_int32_t)cp);
    return p->combining_class == 0 && !is_second(cp, p) && !has_canonical_decomposition(p);
}

// Only the stretches around unsafe characters go through utf8proc: each maximal run of
// unsafe characters together with the safe character before it (the starter they may fuse
// with). A safe character blocks composition and reordering across it, so normalising the
// pieces separately equals normalising the whole.
int tok_nfc_normalize(const EmxTokenizer *tk, const char *text, size_t n, char **out,
                      size_t *out_len) {
    const uint8_t *s = (const uint8_t *)text;
    *out = NULL;
    *out_len = 0;
    char *buf = NULL;
    size_t o = 0, cap = 0;
    size_t copied = 0;        // text[0..copied) is already in buf
    size_t last_safe = 0;     // start of the last safe character seen
    int have_safe = 0;
    for (size_t i = 0; i < n;) {
        if (s[i] < 0x80) {
            last_safe = i++, have_safe = 1;
            continue;
        }
        uint32_t cp;
        int l = tok_utf8_next(s + i, n - i, &cp);
        if (l <= 0) l = 1, cp = 0xFFFD;  // cannot happen on sanitised text
        if (cp_is_safe(tk, cp)) {
            last_safe = i, have_safe = 1;
            i += (size_t)l;
            continue;
        }
        // Unsafe run [i, j), normalised together with the safe character before it.
        size_t j = i + (size_t)l;
        while (j < n) {
            uint32_t c2;
            int l2 = tok_utf8_next(s + j, n - j, &c2);
            if (l2 <= 0 || cp_is_safe(tk, c2)) break;
            j += (size_t)l2;
        }
        size_t start = have_safe && last_safe >= copied ? last_safe : i;
        if (start < copied) start = copied;
        if (!buf) {
            cap = n + 64;
            buf = malloc(cap);
            if (!buf) return -1;
        }
        utf8proc_uint8_t *nfc = NULL;
        utf8proc_ssize_t m = utf8proc_map(s + start, (utf8proc_ssize_t)(j - start), &nfc,
                                          UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        if (m < 0) {
            free(buf);
            return -1;
        }
        size_t need = o + (start - copied) + (size_t)m + (n - j) + 1;
        if (need > cap) {
            cap = need * 2;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(nfc);
                free(buf);
                return -1;
            }
            buf = nb;
        }
        memcpy(buf + o, s + copied, start - copied);
        o += start - copied;
        memcpy(buf + o, nfc, (size_t)m);
        o += (size_t)m;
        free(nfc);
        copied = j;
        have_safe = 0;
        i = j;
    }
    if (!buf) return 0;  // nothing to change
    memcpy(buf + o, s + copied, n - copied);
    o += n - copied;
    *out = buf;
    *out_len = o;
    return 0;
}
