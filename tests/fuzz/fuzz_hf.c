// fuzz_hf.c — the HuggingFace reader: config.json and the safetensors header
// (tools/convert/source_hf.c), then the rest of the conversion as tools/convert.c's main does
// it (linked in as emx_convert_main). Input: config.json NUL header NUL data: the harness writes
// model.safetensors as the format lays it out, u64 header length + header JSON + data, so the
// mutator edits the header as text (a length that disagrees with the file is one branch, the
// JSON behind it is most of the parser). Without a second NUL there is no model.safetensors.
// The directory also holds a fixed, valid byte-level tokenizer.json (266 tokens, made at
// start-up) so a good config and header get past the tokenizer.
// The converter must exit 0 or 1, and a reported success must leave a loadable model file.
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "runtime/model.h"
#include "tokenizer/tok_byte_level.h"
#include "tokenizer/tok_utf8.h"

int emx_convert_main(int argc, char **argv);

// 256 byte tokens in GPT-2's alphabet, 5 merges, 5 added tokens (the seeds' vocab_size 266).
static void write_tokenizer(void) {
    cJSON *root = cJSON_CreateObject(), *model = cJSON_AddObjectToObject(root, "model");
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab"), *merges = cJSON_AddArrayToObject(model, "merges");
    cJSON_AddStringToObject(model, "type", "BPE");
    for (int b = 0; b < 256; b++) {
        char s[8];
        s[tok_utf8_put(bytelevel_cp_of_byte((uint8_t)b), s)] = 0;
        cJSON_AddNumberToObject(vocab, s, b);
    }
    static const char *const m[][2] = {{"\xc4\xa0", "t"}, {"h", "e"}, {"\xc4\xa0t", "he"}, {"i", "n"}, {"\xc4\xa0", "a"}};
    for (int i = 0; i < 5; i++) {
        char s[16];
        snprintf(s, sizeof s, "%s%s", m[i][0], m[i][1]);
        cJSON_AddNumberToObject(vocab, s, 256 + i);
        cJSON *pair = cJSON_CreateArray();
        cJSON_AddItemToArray(pair, cJSON_CreateString(m[i][0]));
        cJSON_AddItemToArray(pair, cJSON_CreateString(m[i][1]));
        cJSON_AddItemToArray(merges, pair);
    }
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
    static const char *const special[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"};
    for (int i = 0; i < 5; i++) {
        cJSON *t = cJSON_CreateObject();
        cJSON_AddNumberToObject(t, "id", 261 + i);
        cJSON_AddStringToObject(t, "content", special[i]);
        cJSON_AddBoolToObject(t, "special", i < 3);
        cJSON_AddItemToArray(added, t);
    }
    cJSON *pre = cJSON_AddObjectToObject(root, "pre_tokenizer");
    cJSON_AddStringToObject(pre, "type", "ByteLevel");
    cJSON_AddBoolToObject(pre, "add_prefix_space", 0);
    cJSON_AddBoolToObject(pre, "use_regex", 1);
    char *text = cJSON_PrintUnformatted(root), path[160];
    fuzz_write("tokenizer.json", text, strlen(text), path, sizeof path);
    free(text);
    cJSON_Delete(root);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fuzz_quiet_stdout();
    write_tokenizer();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t pos = 0, cfg_len = 0, hdr_len = 0;
    const uint8_t *cfg = data, *hdr = NULL;
    char path[160], out[160];
    fuzz_next_part(data, size, &pos, &cfg, &cfg_len);
    fuzz_write("config.json", cfg, cfg_len, path, sizeof path);
    if (fuzz_next_part(data, size, &pos, &hdr, &hdr_len)) {
        size_t data_len = pos < size ? size - pos : 0;
        uint8_t *st = malloc(8 + hdr_len + data_len);
        if (!st) abort();
        uint64_t n = hdr_len;
        memcpy(st, &n, 8);  // little-endian, as the host
        memcpy(st + 8, hdr, hdr_len);
        memcpy(st + 8 + hdr_len, data + size - data_len, data_len);
        fuzz_write("model.safetensors", st, 8 + hdr_len + data_len, path, sizeof path);
        free(st);
    } else {
        fuzz_unlink("model.safetensors");
    }
    snprintf(out, sizeof out, "%s/out.bin", fuzz_dir());
    char a0[] = "convert", a3[] = "--dtype", a4[] = "q8";
    char *argv[] = {a0, (char *)fuzz_dir(), out, a3, a4, NULL};
    int rc = emx_convert_main(5, argv);
    if (rc == 0) {
        EmxModel m;
        char err[512];
        if (emx_model_open(&m, out, err, sizeof err) != 0) {
            fprintf(stderr, "fuzz_hf: convert succeeded but the loader says: %s\n", err);
            abort();
        }
        emx_model_close(&m);
    } else if (rc != 1) {
        fprintf(stderr, "fuzz_hf: convert exited %d (0 or 1 expected)\n", rc);
        abort();
    }
    fuzz_unlink("out.bin");
    return 0;
}
