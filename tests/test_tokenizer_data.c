// test_tokenizer_data.c — the tokenizer section of the model file: write -> view gives the
// same tokenizer (same encodings as the one built directly), and tokdata_view rejects
// corrupted sections with a one-line reason instead of crashing.
#include <unistd.h>

#include "test_tokenizer_util.h"

// Serialized bytes of d in a heap buffer (malloc is 8-byte aligned).
static uint8_t *serialize(const TokenizerData *d, size_t *n) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cr_assert(f);
    uint64_t w = tokdata_write(d, f);
    fclose(f);
    cr_assert_gt(w, 0);
    cr_assert_eq(w, len);
    uint8_t *out = malloc(len);
    memcpy(out, buf, len);
    free(buf);
    *n = len;
    return out;
}

static void check_same_encodings(const EmxTokenizer *a, const EmxTokenizer *b) {
    char path[1024];
    size_t flen = 0;
    char *file = test_read_file(test_shared_path(path, sizeof path, "testdata/tokenizers/golden/qwen3.encode.jsonl"), &flen);
    cr_assert(file);
    int lines = 0;
    for (char *line = strtok(file, "\n"); line; line = strtok(NULL, "\n")) {
        size_t tlen = 0, na = 0, nb = 0;
        char *text = json_str(line, "text", &tlen);
        int *ia, *ib;
        char err[256];
        cr_assert_eq(emx_encode(a, text, tlen, EMX_ENC_SPECIAL | EMX_ENC_BOS, &ia, &na, err, sizeof err), 0);
        cr_assert_eq(emx_encode(b, text, tlen, EMX_ENC_SPECIAL | EMX_ENC_BOS, &ib, &nb, err, sizeof err), 0);
        cr_expect(na == nb && memcmp(ia, ib, na * sizeof *ia) == 0, "line %d differs after write/view", lines + 1);
        free(ia);
        free(ib);
        free(text);
        lines++;
    }
    free(file);
    cr_expect_eq(lines, 328);
}

static void roundtrip(TestTok *orig) {
    size_t n = 0;
    uint8_t *blob = serialize(&orig->data, &n);
    TestTok back;
    char err[512] = "";
    cr_assert_eq(tokdata_view(blob, n, &back.data, err, sizeof err), 0, "%s", err);
    const TokenizerData *a = &orig->data, *b = &back.data;
    cr_expect_eq(a->kind, b->kind);
    cr_expect_eq(a->pre, b->pre);
    cr_expect_eq(a->flags, b->flags);
    cr_expect_eq(a->n_vocab, b->n_vocab);
    cr_expect_eq(a->n_merges, b->n_merges);
    cr_expect_eq(a->n_stop, b->n_stop);
    cr_expect_eq(a->bos_id, b->bos_id);
    cr_expect_eq(a->eos_id, b->eos_id);
    cr_expect_eq(a->max_piece_len, b->max_piece_len);
    cr_expect_eq(memcmp(a->stop_ids, b->stop_ids, a->n_stop * sizeof(int32_t)), 0);
    cr_expect_eq(memcmp(a->piece_offsets, b->piece_offsets, (a->n_vocab + 1) * 4u), 0);
    cr_expect_eq(memcmp(a->piece_bytes, b->piece_bytes, a->piece_offsets[a->n_vocab]), 0);
    cr_expect_eq(memcmp(a->scores, b->scores, a->n_vocab * 4u), 0);
    cr_expect_eq(memcmp(a->types, b->types, a->n_vocab), 0);
    cr_expect_eq(memcmp(a->merges, b->merges, a->n_merges * 8u), 0);
    cr_expect_null(b->owned, "a view owns nothing");
    testtok_make(&back);
    check_same_encodings(orig->tk, back.tk);
    testtok_free(&back);  // tokdata_free of a view is a no-op
    free(blob);
}

Test(tokenizer_data, roundtrip_qwen3) {
    TestTok t;
    testtok_hf(&t, "testdata/tokenizers/qwen3", 151936);
    roundtrip(&t);
    testtok_free(&t);
}

Test(tokenizer_data, roundtrip_llama3_gguf) {
    TestTok t;
    testtok_gguf(&t, "testdata/tiny/llama3-tiny/llama3-tiny.f16.gguf");
    roundtrip(&t);
    testtok_free(&t);
}

Test(tokenizer_data, roundtrip_tok512) {
    TestTok t;
    char path[1024], err[512] = "";
    test_shared_path(path, sizeof path, "testdata/stories260K/tok512.bin");
    cr_assert_eq(tokdata_from_llama2c(path, 512, &t.data, err, sizeof err), 0, "%s", err);
    testtok_make(&t);
    roundtrip(&t);
    testtok_free(&t);
}

// Corrupts a copy of the tok512 section with `edit` and expects a rejection naming `what`.
static void expect_reject(const uint8_t *blob, size_t n, size_t at, const void *val, size_t vlen,
                          size_t view_len, const char *what) {
    uint8_t *c = malloc(n + 8);
    memcpy(c, blob, n);
    if (val) memcpy(c + at, val, vlen);
    TokenizerData d;
    char err[512] = "";
    int rc = tokdata_view(c, view_len, &d, err, sizeof err);
    cr_expect_eq(rc, -1, "corruption \"%s\" was accepted", what);
    cr_expect(strstr(err, what) != NULL, "error \"%s\" does not mention \"%s\"", err, what);
    cr_expect(strchr(err, '\n') == NULL, "one-line error");
    free(c);
}

Test(tokenizer_data, rejects_corruption) {
    TokenizerData d;
    char path[1024], err[512] = "";
    test_shared_path(path, sizeof path, "testdata/stories260K/tok512.bin");
    cr_assert_eq(tokdata_from_llama2c(path, 512, &d, err, sizeof err), 0, "%s", err);
    size_t n = 0;
    uint8_t *blob = serialize(&d, &n);
    TokenizerData v;
    cr_assert_eq(tokdata_view(blob, n, &v, err, sizeof err), 0, "%s", err);
    // Header layout: magic 8, u32 kind pre flags n_vocab n_merges n_stop max_piece_len reserved
    // (8..40), i32 bos eos pad unk (40..56), stop ids (56..88), piece_offsets at 88.
    const uint32_t big = 0x7fffffff, bad_kind = 9, bad_flags = 0x100, many_stop = 99;
    const int32_t bad_bos = 600;
    expect_reject(blob, n, 0, "EMXTOK02", 8, n, "magic");
    expect_reject(blob, n, 0, NULL, 0, 40, "header");
    expect_reject(blob, n, 0, NULL, 0, n - 1, "truncated");
    expect_reject(blob, n, 0, NULL, 0, 1000, "truncated");
    expect_reject(blob, n, 8, &bad_kind, 4, n, "kind");
    expect_reject(blob, n, 16, &bad_flags, 4, n, "flags");
    expect_reject(blob, n, 20, &big, 4, n, "n_vocab");
    expect_reject(blob, n, 28, &many_stop, 4, n, "n_stop");
    expect_reject(blob, n, 40, &bad_bos, 4, n, "bos_id");
    expect_reject(blob, n, 88 + 17 * 4, &big, 4, n, "piece_offsets[17]");
    expect_reject(blob, n, 88 + 512 * 4, &big, 4, n, "piece_offsets[512]");
    uint32_t back = 0;  // offsets must not go backwards
    expect_reject(blob, n, 88 + 300 * 4, &back, 4, n, "piece_offsets[300]");
    uint32_t tiny_max = 1;
    expect_reject(blob, n, 32, &tiny_max, 4, n, "max_piece_len");
    // types[] of the last token, then a token type out of range.
    size_t types_at = (size_t)((const uint8_t *)v.types - blob);
    uint8_t bad_type = 77;
    expect_reject(blob, n, types_at + 5, &bad_type, 1, n, "types[5]");
    // Unaligned blob.
    uint8_t *un = malloc(n + 1);
    memcpy(un + 1, blob, n);
    cr_expect_eq(tokdata_view(un + 1, n, &v, err, sizeof err), -1);
    cr_expect(strstr(err, "aligned") != NULL, "%s", err);
    free(un);
    free(blob);
    tokdata_free(&d);
}

Test(tokenizer_data, rejects_bad_merge_id) {
    TestTok t;
    testtok_gguf(&t, "testdata/tiny/llama3-tiny/llama3-tiny.f16.gguf");
    size_t n = 0;
    uint8_t *blob = serialize(&t.data, &n);
    size_t merges_at = (size_t)((const uint8_t *)t.data.merges - (const uint8_t *)t.data.owned);
    int32_t bad = 200000;
    expect_reject(blob, n, merges_at + 8 * 1000 + 4, &bad, 4, n, "merges[1000][1]");
    free(blob);
    testtok_free(&t);
}

Test(tokenizer_data, builder_errors) {
    TokenizerData d;
    char err[512] = "";
    cr_expect_eq(tokdata_from_hf_dir("/nonexistent_dir", 0, &d, err, sizeof err), -1);
    cr_expect(strstr(err, "/nonexistent_dir/tokenizer.json") != NULL, "%s", err);
    // n_vocab smaller than the tokenizer.
    char path[1024];
    test_shared_path(path, sizeof path, "testdata/tokenizers/llama3");
    cr_expect_eq(tokdata_from_hf_dir(path, 1000, &d, err, sizeof err), -1);
    cr_expect(strstr(err, "n_vocab") != NULL, "%s", err);
    // An unsupported tokenizer type names the field and its value.
    char dir[] = "/tmp/emx_tokhf_XXXXXX";
    cr_assert(mkdtemp(dir));
    char f[1200];
    snprintf(f, sizeof f, "%s/tokenizer.json", dir);
    FILE *fp = fopen(f, "w");
    fputs("{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": 0}}}", fp);
    fclose(fp);
    cr_expect_eq(tokdata_from_hf_dir(dir, 0, &d, err, sizeof err), -1);
    cr_expect(strstr(err, "model.type") && strstr(err, "WordPiece"), "%s", err);
    fp = fopen(f, "w");
    fputs("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [", fp);
    fclose(fp);
    cr_expect_eq(tokdata_from_hf_dir(dir, 0, &d, err, sizeof err), -1);
    cr_expect(strstr(err, "invalid JSON") != NULL, "%s", err);
    fp = fopen(f, "w");
    fputs("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]},"
          " \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false}}", fp);
    fclose(fp);
    cr_expect_eq(tokdata_from_hf_dir(dir, 0, &d, err, sizeof err), -1);
    cr_expect(strstr(err, "merges[0]") != NULL, "%s", err);
    remove(f);
    rmdir(dir);
}

// Pre-tokeniser detection from tokenizer.json shapes we have no full reference file for
// (GPT-2 ByteLevel with regex, SmolLM's Digits + ByteLevel), and one-line errors for the rest.
static int build_from_json(const char *json, TokenizerData *d, char *err, size_t errlen) {
    char dir[] = "/tmp/emx_tokpre_XXXXXX";
    cr_assert(mkdtemp(dir));
    char f[1200];
    snprintf(f, sizeof f, "%s/tokenizer.json", dir);
    FILE *fp = fopen(f, "w");
    fputs(json, fp);
    fclose(fp);
    int rc = tokdata_from_hf_dir(dir, 0, d, err, errlen);
    remove(f);
    rmdir(dir);
    return rc;
}

Test(tokenizer_data, pre_tokenizer_detection) {
    const char *model = "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, \"merges\": [\"a b\"]}";
    char json[2048], err[512] = "";
    TokenizerData d;
    snprintf(json, sizeof json, "{%s, \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true},"
             " \"added_tokens\": [{\"id\": 3, \"content\": \"<|endoftext|>\", \"special\": true}]}", model);
    cr_assert_eq(build_from_json(json, &d, err, sizeof err), 0, "%s", err);
    cr_expect_eq(d.pre, EMX_PRE_GPT2);
    cr_expect_eq(d.n_vocab, 4);
    cr_expect_eq(d.n_merges, 1);
    cr_expect_eq(d.types[3], EMX_TOKT_CONTROL);
    cr_expect(d.n_stop == 1 && d.stop_ids[0] == 3, "<|endoftext|> ends generation");
    tokdata_free(&d);
    snprintf(json, sizeof json, "{%s, \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": ["
             "{\"type\": \"Digits\", \"individual_digits\": true},"
             "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true}]}}", model);
    cr_assert_eq(build_from_json(json, &d, err, sizeof err), 0, "%s", err);
    cr_expect_eq(d.pre, EMX_PRE_SMOLLM);
    tokdata_free(&d);
    snprintf(json, sizeof json, "{%s, \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": ["
             "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\s+\"}, \"behavior\": \"Isolated\"},"
             "{\"type\": \"ByteLevel\", \"use_regex\": false}]}}", model);
    cr_expect_eq(build_from_json(json, &d, err, sizeof err), -1);
    cr_expect(strstr(err, "regex") != NULL, "%s", err);
    snprintf(json, sizeof json, "{%s, \"normalizer\": {\"type\": \"Lowercase\"}, \"pre_tokenizer\": {\"type\": \"ByteLevel\"}}", model);
    cr_expect_eq(build_from_json(json, &d, err, sizeof err), -1);
    cr_expect(strstr(err, "normalizer.type") && strstr(err, "Lowercase"), "%s", err);
    snprintf(json, sizeof json, "{%s, \"pre_tokenizer\": {\"type\": \"Metaspace\"}}", model);
    cr_expect_eq(build_from_json(json, &d, err, sizeof err), -1);
    cr_expect(strstr(err, "pre_tokenizer.type") && strstr(err, "Metaspace"), "%s", err);
}
