// test_tokenizer_robust.c — bad and extreme input: invalid UTF-8 (replaced by U+FFFD per
// maximal subpart before tokenising, as Python's bytes.decode("utf-8", "replace") would),
// UTF-8-encoded surrogates, NULs, empty text, a 10 MB prompt and 100 KB words (must be
// near-linear), and the streaming decoder at odd boundaries.
#include <time.h>

#include "test_tokenizer_util.h"

static int *enc(const EmxTokenizer *tk, const char *s, size_t n, int flags, size_t *nid) {
    int *ids;
    char err[256];
    cr_assert_eq(emx_encode(tk, s, n, flags, &ids, nid, err, sizeof err), 0, "%s", err);
    cr_assert(ids);
    return ids;
}

static void expect_same(const EmxTokenizer *tk, const char *a, size_t na, const char *b, size_t nb) {
    size_t n1 = 0, n2 = 0;
    int *i1 = enc(tk, a, na, EMX_ENC_SPECIAL, &n1), *i2 = enc(tk, b, nb, EMX_ENC_SPECIAL, &n2);
    cr_expect(n1 == n2 && memcmp(i1, i2, n1 * sizeof *i1) == 0, "encodings differ (%zu vs %zu ids)", n1, n2);
    free(i1);
    free(i2);
}

// The CPU time of this test's process, not the wall clock: two busy processes beside the suite
// stretch wall time but not the time encode itself spends, so the "quadratic?" bounds below do
// not depend on the machine's load (Criterion runs each test in a process of its own).
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#define FFFD "\xEF\xBF\xBD"

Test(tokenizer_robust, invalid_utf8_is_replacement_char) {
    TestTok t;
    testtok_hf(&t, "testdata/tokenizers/llama3", 128256);
    // Python: b"a\xffb".decode("utf-8", "replace") == "a\ufffdb"
    expect_same(t.tk, "a\xff" "b", 3, "a" FFFD "b", 5);
    // Surrogate ED A0 80: three maximal subparts.
    expect_same(t.tk, "x\xed\xa0\x80y", 5, "x" FFFD FFFD FFFD "y", 11);
    // Truncated 3-byte sequence then ASCII: one U+FFFD. Overlong C0 80: two.
    expect_same(t.tk, "\xe4\xbd" "A", 3, FFFD "A", 4);
    expect_same(t.tk, "\xc0\x80", 2, FFFD FFFD, 6);
    // F4 90 80 80 (past U+10FFFF): four. Truncated tail at the end of the text: one.
    expect_same(t.tk, "\xf4\x90\x80\x80", 4, FFFD FFFD FFFD FFFD, 12);
    expect_same(t.tk, "end\xf0\x9f\x99", 6, "end" FFFD, 6);
    testtok_free(&t);
}

Test(tokenizer_robust, nul_and_empty) {
    TestTok t;
    testtok_hf(&t, "testdata/tokenizers/llama3", 128256);
    size_t n = 0;
    int *ids = enc(t.tk, "a\0b", 3, EMX_ENC_SPECIAL, &n);
    cr_expect_eq(n, 3, "NUL is a character like any other");
    size_t len = 0;
    char *back = decode_stream(t.tk, ids, n, 0, &len);
    cr_expect(len == 3 && memcmp(back, "a\0b", 3) == 0);
    free(back);
    free(ids);
    ids = enc(t.tk, "", 0, EMX_ENC_SPECIAL, &n);
    cr_expect_eq(n, 0);
    free(ids);
    ids = enc(t.tk, "", 0, EMX_ENC_SPECIAL | EMX_ENC_BOS, &n);
    cr_expect(n == 1 && ids[0] == 128000);
    free(ids);
    ids = enc(t.tk, NULL, 0, 0, &n);
    cr_expect_eq(n, 0);
    free(ids);
    // Out-of-range ids decode to nothing.
    char buf[8];
    cr_expect_eq(emx_token_bytes(t.tk, -1, buf, sizeof buf), 0);
    cr_expect_eq(emx_token_bytes(t.tk, 1 << 30, buf, sizeof buf), 0);
    EmxDecoder d;
    emx_decoder_init(&d, t.tk, 0);
    cr_expect_eq(emx_decoder_push(&d, 999999, buf, sizeof buf), 0);
    testtok_free(&t);
}

// Random bytes (mostly invalid UTF-8) encode, and decode back to their replaced form.
Test(tokenizer_robust, random_bytes_roundtrip) {
    TestTok t;
    testtok_hf(&t, "testdata/tokenizers/qwen3", 151936);
    uint64_t x = 88172645463325252ull;
    for (int rep = 0; rep < 200; rep++) {
        char s[64];
        size_t n = (size_t)(rep % 60) + 1;
        for (size_t i = 0; i < n; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            s[i] = (char)(rep % 3 == 0 ? (x & 0xff) : rep % 3 == 1 ? 0x80 + (x & 0x3f) : (uint8_t)" a\xc3\xe4\xf0\x9f\xbd"[x % 7]);
        }
        size_t nid = 0, len = 0;
        int *ids = enc(t.tk, s, n, EMX_ENC_SPECIAL, &nid);
        char *back = decode_stream(t.tk, ids, nid, 0, &len);
        // Decoding the ids must give valid UTF-8 that re-encodes to the same ids.
        size_t nid2 = 0;
        int *ids2 = enc(t.tk, back, len, EMX_ENC_SPECIAL, &nid2);
        cr_expect(nid == nid2 && memcmp(ids, ids2, nid * sizeof *ids) == 0, "rep %d", rep);
        free(ids);
        free(ids2);
        free(back);
    }
    testtok_free(&t);
}

static char *make_corpus(size_t n) {
    static const char *words[] = {"the ", "quick ", "brown ", "fox ", "jumps ", "over ", "lazy ",
                                  "dog", ". ", "\n", "Ünïcödé ", "日本語の", "テキスト ", "1234567 ",
                                  "  ", "\t", "don't ", "I'M ", "😀 ", "x_y = f(z);\n"};
    char *s = malloc(n + 64);
    size_t o = 0;
    uint64_t x = 12345;
    while (o < n) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        const char *w = words[x % 20];
        size_t l = strlen(w);
        memcpy(s + o, w, l);
        o += l;
    }
    s[n] = 0;
    // Cut at a character boundary.
    while (n && ((uint8_t)s[n] & 0xC0) == 0x80) s[--n] = 0;
    return s;
}

static void time_encode(const EmxTokenizer *tk, const char *what, const char *s, size_t n,
                        double limit_s) {
    double t0 = now();
    size_t nid = 0;
    int *ids = enc(tk, s, n, EMX_ENC_SPECIAL, &nid);
    double dt = now() - t0;
    fprintf(stderr, "%s: %zu bytes -> %zu ids in %.3f s of CPU (%.1f MB/s)\n", what, n, nid, dt, n / dt / 1e6);
    cr_expect_gt(nid, 0);
    cr_expect_lt(dt, limit_s, "%s took %.2f s of CPU: quadratic?", what, dt);
    // Decodes back (no NFC change in these texts).
    size_t len = 0;
    char *back = decode_stream(tk, ids, nid, 0, &len);
    cr_expect(len == n && memcmp(back, s, n) == 0, "%s does not round-trip", what);
    free(back);
    free(ids);
}

Test(tokenizer_robust, big_inputs_bpe, .timeout = 300) {
    TestTok t;
    testtok_hf(&t, "testdata/tokenizers/llama3", 128256);
    size_t n = 10u << 20;
    char *s = make_corpus(n);
    time_encode(t.tk, "llama3 10 MB prompt", s, strlen(s), 20);
    free(s);
    n = 100000;
    s = malloc(n + 1);
    for (size_t i = 0; i < n; i++) s[i] = "abcdefghij"[(i * 7 + i / 3) % 10];
    time_encode(t.tk, "llama3 100 KB word", s, n, 5);
    memset(s, 'a', n);
    time_encode(t.tk, "llama3 100 KB 'aaaa'", s, n, 5);
    memset(s, ' ', n);
    time_encode(t.tk, "llama3 100 KB spaces", s, n, 5);
    memset(s, '7', n);
    time_encode(t.tk, "llama3 100 KB digits", s, n, 5);
    for (size_t i = 0; i < n; i++) s[i] = "!@#$%^&*()"[i % 10];
    time_encode(t.tk, "llama3 100 KB punctuation", s, n, 5);
    free(s);
    // 10.5 MB of one whitespace character: the split regex backtracks over the whole run in
    // one match attempt, past PCRE2's default match limit (10M); VT has no merges, so this
    // checks the regex and not the BPE.
    n = 10500000;
    s = malloc(n);
    memset(s, '\v', n);
    time_encode(t.tk, "llama3 10.5 MB of VT", s, n, 20);
    free(s);
    testtok_free(&t);
}

Test(tokenizer_robust, big_inputs_qwen_spm, .timeout = 300) {
    TestTok t;
    testtok_hf(&t, "testdata/tokenizers/qwen3", 151936);
    size_t n = 10u << 20;
    char *s = make_corpus(n);
    time_encode(t.tk, "qwen3 10 MB prompt", s, strlen(s), 20);
    testtok_free(&t);
    char path[1024], err[512] = "";
    test_shared_path(path, sizeof path, "testdata/stories260K/tok512.bin");
    cr_assert_eq(tokdata_from_llama2c(path, 512, &t.data, err, sizeof err), 0, "%s", err);
    testtok_make(&t);
    // SPM over one long text (no pre-splitting): the heap keeps it O(n log n).
    size_t m = 1u << 20;
    for (size_t i = 0; i < m; i++) s[i] = "Lily and Tom went to the park. "[i % 31];
    size_t nid = 0;
    double t0 = now();
    int *ids = enc(t.tk, s, m, 0, &nid);
    double dt = now() - t0;
    fprintf(stderr, "tok512 1 MB prompt: %zu ids in %.3f s of CPU\n", nid, dt);
    cr_expect_lt(dt, 10);
    size_t len = 0;
    char *back = decode_stream(t.tk, ids, nid, 0, &len);
    // Decoding without BOS keeps the dummy-prefix space.
    cr_expect(len == m + 1 && back[0] == ' ' && memcmp(back + 1, s, m) == 0);
    free(back);
    free(ids);
    free(s);
    testtok_free(&t);
}

// Streaming decoder: a character split over tokens appears once it is complete; a small cap
// truncates without overflowing.
Test(tokenizer_robust, decoder_boundaries) {
    TestTok t;
    testtok_hf(&t, "testdata/tokenizers/qwen3", 151936);
    const EmxTokenizer *tk = t.tk;
    // Single-byte tokens for E4 BD A0 ("你") and 0x41.
    int e4 = -1, bd = -1, a0 = -1, A = -1;
    for (int id = 0; id < 300; id++) {
        char b[8];
        size_t l = emx_token_bytes(tk, id, b, sizeof b);
        if (l != 1) continue;
        uint8_t c = (uint8_t)b[0];
        if (c == 0xE4) e4 = id;
        if (c == 0xBD) bd = id;
        if (c == 0xA0) a0 = id;
        if (c == 'A') A = id;
    }
    cr_assert(e4 >= 0 && bd >= 0 && a0 >= 0 && A >= 0);
    EmxDecoder d;
    char out[256];
    emx_decoder_init(&d, tk, 0);
    cr_expect_eq(emx_decoder_push(&d, e4, out, sizeof out), 0);
    cr_expect_eq(emx_decoder_push(&d, bd, out, sizeof out), 0);
    size_t n = emx_decoder_push(&d, a0, out, sizeof out);
    cr_expect(n == 3 && memcmp(out, "你", 3) == 0);
    // E4 BD then 'A': U+FFFD then A.
    emx_decoder_push(&d, e4, out, sizeof out);
    emx_decoder_push(&d, bd, out, sizeof out);
    n = emx_decoder_push(&d, A, out, sizeof out);
    cr_expect(n == 4 && memcmp(out, FFFD "A", 4) == 0);
    // Unfinished at the end: flush gives one U+FFFD.
    emx_decoder_push(&d, e4, out, sizeof out);
    n = emx_decoder_flush(&d, out, sizeof out);
    cr_expect(n == 3 && memcmp(out, FFFD, 3) == 0);
    cr_expect_eq(emx_decoder_flush(&d, out, sizeof out), 0);
    // Tiny cap: truncated, never overflowed (guard bytes intact).
    int hello = emx_token_find(tk, "Hello");
    cr_assert_geq(hello, 0);
    memset(out, '#', sizeof out);
    n = emx_decoder_push(&d, hello, out, 2);
    cr_expect_eq(n, 2);
    cr_expect_eq(out[2], '#');
    testtok_free(&t);
}

// ---------------------------------------------------------------------------------------------
// The NFC shortcut (only stretches around characters NFC could change go through utf8proc)
// against utf8proc's NFC of the whole text.

#include <utf8proc.h>

#include "tokenizer/tokenizer_internal.h"

static char *full_nfc(const char *s, size_t n, size_t *m) {
    utf8proc_uint8_t *o = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &o,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    cr_assert_geq(r, 0);
    *m = (size_t)r;
    return (char *)o;
}

static int shortcut_equals_full(const EmxTokenizer *tk, const char *s, size_t n) {
    char *a = NULL;
    size_t na = 0, nb = 0;
    cr_assert_eq(tok_nfc_normalize(tk, s, n, &a, &na), 0);
    char *b = full_nfc(s, n, &nb);
    int same = a ? (na == nb && memcmp(a, b, nb) == 0) : (n == nb && memcmp(s, b, nb) == 0);
    free(a);
    free(b);
    return same;
}

Test(tokenizer_robust, nfc_shortcut_matches_utf8proc, .timeout = 300) {
    TestTok t;
    testtok_hf(&t, "testdata/tokenizers/qwen3", 151936);
    static const uint32_t pool[] = {'a', 'e', 'A', ' ', 0xE9, 0x212B, 0xC5, 0x301, 0x323, 0x308,
                                    0x30A, 0x1100, 0x1161, 0x11A8, 0xAC00, 0xAC01, 0x9C7, 0x9BE,
                                    0x9D7, 0xF42, 0xFB7, 0xF43, 0x344, 0x2126, 0x3099, 0x304B,
                                    0x1D15E, 0x1F600, 0xFB01, 0x1E0A, 0x0CC6, 0x0CC2, 0x0CD5};
    size_t np = sizeof pool / sizeof pool[0];
    uint64_t x = 99;
    int bad = 0;
    for (int rep = 0; rep < 20000; rep++) {
        char s[64];
        size_t n = 0, len = 1 + (size_t)rep % 12;
        for (size_t k = 0; k < len; k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            n += (size_t)utf8proc_encode_char((utf8proc_int32_t)pool[x % np], (utf8proc_uint8_t *)s + n);
        }
        if (!shortcut_equals_full(t.tk, s, n) && bad++ < 5) fprintf(stderr, "NFC shortcut differs on rep %d\n", rep);
    }
    cr_expect_eq(bad, 0);
    // Every code point after a few starters it could fuse with, and before a combining mark.
    static const char *const pre[] = {"e", "\xE1\x84\x80", "\xEA\xB0\x80", "\xE0\xA7\x87", "A\xCC\x8A"};
    bad = 0;
    for (uint32_t cp = 0xA0; cp < 0x110000; cp++) {
        if (cp >= 0xD800 && cp < 0xE000) continue;
        if (cp == 0x40000) cp = 0xE0000;  // planes 4-13 are unassigned
        for (int p = 0; p < 5; p++) {
            char s[32];
            size_t n = strlen(pre[p]);
            memcpy(s, pre[p], n);
            n += (size_t)utf8proc_encode_char((utf8proc_int32_t)cp, (utf8proc_uint8_t *)s + n);
            memcpy(s + n, "\xCC\x81", 2);  // U+0301
            if (!shortcut_equals_full(t.tk, s, n) || !shortcut_equals_full(t.tk, s, n + 2)) {
                if (bad++ < 5) fprintf(stderr, "NFC shortcut differs after prefix %d at U+%04X\n", p, cp);
            }
        }
    }
    cr_expect_eq(bad, 0);
    testtok_free(&t);
}

// A byte-level vocabulary without a token for byte 0x16 (as SmolLM2's): made from Llama 3's by
// marking that byte's token unused. The byte is left out of the ids, as HF tokenizers does, and
// emx_encode_ex says which byte and where.
Test(tokenizer_robust, byte_without_token_is_reported) {
    TestTok t;
    testtok_hf(&t, "testdata/tokenizers/llama3", 128256);
    int id16 = emx_token_find(t.tk, "\xC4\x96");  // U+0116: 0x16 in the GPT-2 byte alphabet
    cr_assert_geq(id16, 0);
    uint8_t *types = malloc(t.data.n_vocab);
    memcpy(types, t.data.types, t.data.n_vocab);
    types[id16] = EMX_TOKT_UNUSED;
    TokenizerData d = t.data;
    d.types = types;
    char err[256] = "";
    EmxTokenizer *tk = emx_tokenizer_new(&d, err, sizeof err);
    cr_assert(tk, "%s", err);
    int *ids, *want;
    size_t n, nw;
    EmxEncodeDrops drops;
    // A lone 0x16 (a one-byte word), then the same byte inside longer words, the first of which
    // is the first word of the text (no id pushed yet when it is merged).
    cr_assert_eq(emx_encode_ex(tk, "Hello\x16 world", 12, 0, &ids, &n, &drops, err, sizeof err), 0, "%s", err);
    want = enc(t.tk, "Hello world", 11, 0, &nw);
    cr_expect(n == nw && memcmp(ids, want, n * sizeof *ids) == 0, "the byte is left out, nothing else");
    cr_expect_eq(drops.n_dropped, 1);
    cr_expect_eq(drops.first_byte, 0x16);
    cr_expect_eq(drops.first_offset, 5);
    free(ids);
    free(want);
    cr_assert_eq(emx_encode_ex(tk, "\x16\x16!!\t\x16\x16!!", 9, 0, &ids, &n, &drops, err, sizeof err), 0);
    cr_expect_eq(drops.n_dropped, 4, "a word seen twice is noted twice (no cached result)");
    cr_expect_eq(drops.first_offset, 0);
    free(ids);
    // Nothing but such bytes: no id at all (UBSan: no offset applied to the empty id vector).
    cr_assert_eq(emx_encode_ex(tk, "\x16\x16", 2, 0, &ids, &n, &drops, err, sizeof err), 0);
    cr_expect(n == 0 && drops.n_dropped == 2 && drops.first_offset == 0);
    free(ids);
    // A text without such bytes reports none; emx_encode (no report) gives the same ids.
    cr_assert_eq(emx_encode_ex(tk, "Hello world", 11, 0, &ids, &n, &drops, err, sizeof err), 0);
    cr_expect_eq(drops.n_dropped, 0);
    free(ids);
    emx_tokenizer_free(tk);
    free(types);
    testtok_free(&t);
}
