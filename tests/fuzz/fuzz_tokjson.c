// fuzz_tokjson.c — tokenizer.json (tools/convert/tokenizer_build_hf.c), with the optional
// tokenizer_config.json and config.json beside it, then the runtime tokenizer built from the
// result. Input: tokenizer.json, NUL, tokenizer_config.json, NUL, config.json (a part that is
// absent is no file). A tokenizer the builder accepts must build and encode/decode a fixed text.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "fuzz_util.h"
#include "tokenizer/tokenizer.h"
#include "tools/convert/tokenizer_build.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *const names[] = {"tokenizer.json", "tokenizer_config.json", "config.json"};
    size_t pos = 0, len;
    const uint8_t *part;
    char path[160];
    for (int i = 0; i < 3; i++) {
        if (fuzz_next_part(data, size, &pos, &part, &len)) fuzz_write(names[i], part, len, path, sizeof path);
        else fuzz_unlink(names[i]);
    }
    TokenizerData td;
    char err[512];
    if (tokdata_from_hf_dir(fuzz_dir(), 0, &td, err, sizeof err) == 0) {
        EmxTokenizer *tk = emx_tokenizer_new(&td, err, sizeof err);
        if (!tk) {
            fprintf(stderr, "fuzz_tokjson: the builder's TokenizerData does not make a tokenizer: %s\n", err);
            abort();
        }
        static const char text[] = "Hello <|im_start|>w\xc3\xb6rld's 123\n\n \xe4\xbd\xa0\xff";
        int *ids = NULL;
        size_t n = 0;
        if (emx_encode(tk, text, sizeof text - 1, EMX_ENC_BOS | EMX_ENC_SPECIAL, &ids, &n, err, sizeof err) != 0) {
            fprintf(stderr, "fuzz_tokjson: encode failed: %s\n", err);
            abort();
        }
        EmxDecoder d;
        emx_decoder_init(&d, tk, 1);
        size_t cap = emx_decoder_max_out(tk);
        char *out = malloc(cap);
        if (!out) abort();
        for (size_t i = 0; i < n; i++) emx_decoder_push(&d, ids[i], out, cap);
        emx_decoder_flush(&d, out, cap);
        free(out);
        free(ids);
        emx_tokenizer_free(tk);
    }
    tokdata_free(&td);
    return 0;
}
