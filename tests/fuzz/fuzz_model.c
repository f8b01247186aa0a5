// fuzz_model.c — the model-file loader (runtime/model.c: header, config, tensor directory,
// tokenizer section) and the runtime tokenizer built from what it loaded. Input: a model file.
// A file the loader accepts must also give a tokenizer that encodes and decodes without error.
// A file with an integrity record is also tried without it: every load checks the header,
// directory and tokenizer hashes, which a mutated seed fails, so without this the tokenizer
// built from a mutated section would be reached only by inputs that also cleared the record.
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/model_format.h"
#include "fuzz_util.h"
#include "runtime/model.h"
#include "tokenizer/tokenizer.h"

static void exercise_tokenizer(const EmxModel *m) {
    char err[512];
    EmxTokenizer *tk = emx_tokenizer_new(&m->tok, err, sizeof err);
    if (!tk) return;  // a one-line reason: what a loader may say of a bad tokenizer section
    static const char text[] = "Hello <|im_start|>w\xc3\xb6rld\n 12 \xe2\x96\x81<s>\xff";
    int *ids = NULL;
    size_t n = 0;
    if (emx_encode(tk, text, sizeof text - 1, EMX_ENC_BOS | EMX_ENC_SPECIAL, &ids, &n, err, sizeof err) == 0) {
        EmxDecoder d;
        emx_decoder_init(&d, tk, 0);
        size_t cap = emx_decoder_max_out(tk);
        char *out = malloc(cap);
        if (!out) abort();
        for (size_t i = 0; i < n; i++) emx_decoder_push(&d, ids[i], out, cap);
        emx_decoder_flush(&d, out, cap);
        free(out);
    }
    free(ids);
    for (int id = -1; id < 4; id++) emx_is_stop(tk, id), emx_is_control(tk, id);
    emx_tokenizer_free(tk);
}

static void load(const uint8_t *data, size_t size) {
    char path[160], err[512];
    fuzz_write("in.bin", data, size, path, sizeof path);
    EmxModel m;
    if (emx_model_open(&m, path, err, sizeof err) == 0) {
        (void)emx_model_weight_bytes_per_token(&m);
        exercise_tokenizer(&m);
        emx_model_close(&m);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    load(data, size);
    const size_t rec = offsetof(EmxFileHeader, config) + offsetof(EmxConfig, reserved);
    uint32_t magic = 0;
    if (size < sizeof(EmxFileHeader)) return 0;
    memcpy(&magic, data + rec, sizeof magic);
    if (magic != EMX_CHECK_MAGIC) return 0;
    uint8_t *bare = malloc(size);
    if (!bare) abort();
    memcpy(bare, data, size);
    memset(bare + rec, 0, EMX_CHECK_WORDS * sizeof(uint32_t));
    load(bare, size);
    free(bare);
    return 0;
}
