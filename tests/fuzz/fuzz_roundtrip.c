// fuzz_roundtrip.c — decode(encode(x)) == x with real vocabularies: Qwen3's byte-level BPE (the
// qwen3-tiny test model) and llama2.c's SentencePiece one (stories260K), both read from the
// model files in $FUZZ_MODELS (default build/models).
//
// Input: byte 0 picks the tokenizer (bit 0: 0 Qwen3, 1 stories260K), bit 1 asks for BOS, bit 2
// for special-token matching; the rest is the text x. Every input is encoded and decoded; the
// round trip is asserted for valid UTF-8 x whose bytes all have a token (a byte without one is
// dropped by design, as the reference tokenizers do), comparing
//   byte-level BPE: NFC(decode) == NFC(x) when the tokenizer normalises (it encodes NFC(x);
//                   NFC of either side compares canonical equivalents), else decode == x;
//                   a BOS asked for is decoded as its text in front.
//   SentencePiece:  only without special-token matching (each stretch after a special token
//                   gets its own dummy-prefix space): decode == " " + x for a non-empty x, and
//                   "<s>" + x with BOS (the decoder drops the space after BOS, as llama2.c).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "fuzz_util.h"
#include "runtime/model.h"
#include "tokenizer/tok_byte_level.h"
#include "tokenizer/tok_utf8.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    EmxModel m;
    EmxTokenizer *tk;
    uint8_t has_byte[256];  // 1: the byte has a token (so it is never dropped)
} Vocab;

static Vocab vocabs[2];

static void load(Vocab *v, const char *dir, const char *file) {
    char path[4096], err[512];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    if (emx_model_open(&v->m, path, err, sizeof err) != 0 || !(v->tk = emx_tokenizer_new(&v->m.tok, err, sizeof err))) {
        fprintf(stderr, "fuzz_roundtrip: %s (set FUZZ_MODELS to the folder of the test models)\n", err);
        exit(1);
    }
    for (int b = 0; b < 256; b++) {
        char piece[16];
        if (v->m.tok.kind == EMX_TOK_BPE_BYTELEVEL) {
            int n = tok_utf8_put(bytelevel_cp_of_byte((uint8_t)b), piece);
            piece[n] = 0;
        } else {
            snprintf(piece, sizeof piece, "<0x%02X>", b);
        }
        v->has_byte[b] = emx_token_find(v->tk, piece) >= 0;
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *dir = getenv("FUZZ_MODELS");
    if (!dir) dir = "build/models";
    load(&vocabs[0], dir, "qwen3-tiny.f32.bin");
    load(&vocabs[1], dir, "stories260K.f32.bin");
    return 0;
}

static int checkable(const Vocab *v, const uint8_t *x, size_t n) {
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int r = tok_utf8_next(x + i, n - i, &cp);
        if (r <= 0) return 0;
        i += (size_t)r;
    }
    for (size_t i = 0; i < n; i++)
        if (!v->has_byte[x[i]]) return 0;
    return 1;
}

static char *nfc(const char *s, size_t n, size_t *out_n) {
    utf8proc_uint8_t *r = NULL;
    utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &r,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (m < 0) abort();  // valid UTF-8 was checked
    *out_n = (size_t)m;
    return (char *)r;
}

static void fail(const char *why, const char *x, size_t xn, const char *y, size_t yn) {
    fprintf(stderr, "fuzz_roundtrip: %s\n  in : ", why);
    for (size_t i = 0; i < xn; i++) fprintf(stderr, "%02x", (uint8_t)x[i]);
    fprintf(stderr, "\n  out: ");
    for (size_t i = 0; i < yn; i++) fprintf(stderr, "%02x", (uint8_t)y[i]);
    fprintf(stderr, "\n");
    abort();
}

static void compare(const Vocab *v, int flags, const char *x, size_t xn, const char *y, size_t yn) {
    const TokenizerData *t = &v->m.tok;
    int bos = (flags & EMX_ENC_BOS) && (t->flags & EMX_TOKF_ADD_BOS) && t->bos_id >= 0;
    size_t bos_len = 0;
    const char *bos_text = bos ? emx_token_bytes_ref(v->tk, t->bos_id, &bos_len) : NULL;
    // Expected: [BOS text] [" " (SPM dummy prefix, not after BOS)] x.
    size_t en = 0;
    char *e = malloc(bos_len + 1 + xn + 1);
    if (!e) abort();
    if (bos && !(xn >= bos_len && memcmp(x, bos_text, bos_len) == 0 && (flags & EMX_ENC_SPECIAL)))
        memcpy(e, bos_text, bos_len), en = bos_len;
    if (t->kind == EMX_TOK_SPM && (t->flags & EMX_TOKF_ADD_SPACE_PREFIX) && xn && !bos) e[en++] = ' ';
    memcpy(e + en, x, xn), en += xn;
    if (t->kind == EMX_TOK_BPE_BYTELEVEL && (t->flags & EMX_TOKF_NFC)) {
        size_t an, bn;
        char *a = nfc(e, en, &an), *b = nfc(y, yn, &bn);
        if (an != bn || memcmp(a, b, an) != 0) fail("NFC(decode(encode(x))) != NFC(x)", x, xn, y, yn);
        free(a), free(b);
    } else if (en != yn || memcmp(e, y, en) != 0) {
        fail("decode(encode(x)) != x", x, xn, y, yn);
    }
    free(e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const Vocab *v = &vocabs[data[0] & 1];
    int flags = ((data[0] & 2) ? EMX_ENC_BOS : 0) | ((data[0] & 4) ? EMX_ENC_SPECIAL : 0);
    const char *x = (const char *)data + 1;
    size_t xn = size - 1;
    int *ids = NULL;
    size_t n = 0;
    char err[512];
    if (emx_encode(v->tk, x, xn, flags, &ids, &n, err, sizeof err) != 0) {
        fprintf(stderr, "fuzz_roundtrip: encode failed: %s\n", err);
        abort();
    }
    EmxDecoder d;
    emx_decoder_init(&d, v->tk, 0);
    size_t step = emx_decoder_max_out(v->tk), yn = 0;
    char *y = malloc(step * (n + 1) + 1);
    if (!y) abort();
    for (size_t i = 0; i < n; i++) yn += emx_decoder_push(&d, ids[i], y + yn, step);
    yn += emx_decoder_flush(&d, y + yn, step);
    free(ids);
    int spm_special = v->m.tok.kind == EMX_TOK_SPM && (flags & EMX_ENC_SPECIAL);
    if (!spm_special && checkable(v, data + 1, xn)) compare(v, flags, x, xn, y, yn);
    free(y);
    return 0;
}
