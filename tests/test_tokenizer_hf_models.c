// test_tokenizer_hf_models.c — the Gemma-3-format tokenizer (HF BPE with byte_fallback, merges
// by rank, no dummy prefix) and Qwen2.5's, built from the directories tools/make_tiny_hf.py
// writes (make test-models), against the ids HF `tokenizers` gives for the shared golden corpus
// and a few more texts (tests/data/hf/*.encode.jsonl, made by tools/make_hf_reference.py
// --tokenizers with tokenizers 0.23.3; AutoTokenizer of transformers 5.23 agrees on every line).
#include <sys/stat.h>
#include <unistd.h>

#include "test_tokenizer_util.h"
#include "tokenizer/chat_template.h"

// Builds the tokenizer of build/models/hf/<model>; skips when make test-models has not made it.
static void testtok_tiny_hf(TestTok *t, const char *model, uint32_t n_vocab) {
    char rel[256], path[1024], file[1100], err[512] = "";
    snprintf(rel, sizeof rel, "models/hf/%s", model);
    test_build_path(path, sizeof path, rel);
    snprintf(file, sizeof file, "%s/tokenizer.json", path);
    if (access(file, R_OK) != 0) cr_skip_test("%s missing (make test-models makes it)", file);
    cr_assert_eq(tokdata_from_hf_dir(path, n_vocab, &t->data, err, sizeof err), 0, "%s", err);
    testtok_make(t);
}

// Every line: our ids equal HF's, and our streaming decode equals HF's decode.
static void check_hf_lines(const EmxTokenizer *tk, const char *rel, int n_lines) {
    size_t flen = 0;
    char *file = test_read_file(rel, &flen);
    cr_assert(file, "cannot read %s", rel);
    int lines = 0, bad = 0, bad_round = 0;
    for (char *line = strtok(file, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *obj = cJSON_Parse(line);
        cr_assert(obj, "%s: line %d is not JSON", rel, lines + 1);
        size_t tlen = 0, dlen = 0, n_want = 0, n_got = 0, rlen = 0;
        char *text = json_str(line, "text", &tlen), *decoded = json_str(line, "decoded", &dlen);
        int *want = json_ids(obj, "ids", &n_want), *got = NULL;
        cr_assert(text && decoded && want, "%s: line %d lacks text/ids/decoded", rel, lines + 1);
        char err[256];
        cr_assert_eq(emx_encode(tk, text, tlen, EMX_ENC_SPECIAL, &got, &n_got, err, sizeof err), 0, "%s", err);
        if ((n_got != n_want || memcmp(got, want, n_got * sizeof *got) != 0) && bad++ < 6) {
            fprintf(stderr, "%s line %d \"%.50s\": want", rel, lines + 1, text);
            for (size_t i = 0; i < n_want && i < 20; i++) fprintf(stderr, " %d", want[i]);
            fprintf(stderr, "\n  got");
            for (size_t i = 0; i < n_got && i < 20; i++) fprintf(stderr, " %d", got[i]);
            fprintf(stderr, "\n");
        }
        char *round = decode_stream(tk, want, n_want, 0, &rlen);
        if ((rlen != dlen || memcmp(round, decoded, dlen) != 0) && bad_round++ < 4)
            fprintf(stderr, "%s line %d: decode \"%.50s\", HF \"%.50s\"\n", rel, lines + 1, round, decoded);
        free(round);
        free(got);
        free(want);
        free(text);
        free(decoded);
        cJSON_Delete(obj);
        lines++;
    }
    free(file);
    cr_expect_eq(lines, n_lines, "%s: %d lines", rel, lines);
    cr_expect_eq(bad, 0, "%s: %d of %d lines encode differently from HF", rel, bad, lines);
    cr_expect_eq(bad_round, 0, "%s: %d of %d lines decode differently from HF", rel, bad_round, lines);
}

Test(tokenizer_hf_models, gemma3_matches_hf_tokenizers) {
    TestTok t;
    testtok_tiny_hf(&t, "gemma3-tiny", 262144);
    const TokenizerData *d = &t.data;
    cr_expect_eq(d->kind, EMX_TOK_SPM);
    cr_expect_eq(d->flags & (EMX_TOKF_MERGE_BY_RANK | EMX_TOKF_ADD_BOS | EMX_TOKF_ADD_SPACE_PREFIX),
                 EMX_TOKF_MERGE_BY_RANK | EMX_TOKF_ADD_BOS, "merge by rank, BOS, no dummy prefix");
    cr_expect_eq(d->bos_id, 2);
    cr_expect_eq(d->eos_id, 1);
    cr_expect_eq(d->pad_id, 0);
    cr_expect_eq(d->unk_id, 3);
    int stops = 0;
    for (uint32_t i = 0; i < d->n_stop; i++) stops |= (d->stop_ids[i] == 1) | (d->stop_ids[i] == 106) << 1;
    cr_expect_eq(stops, 3, "<eos> and <end_of_turn> end generation");
    cr_expect_eq(emx_token_find(t.tk, "<start_of_turn>"), 105);
    cr_expect_eq(emx_token_find(t.tk, "<end_of_turn>"), 106);
    cr_expect_eq(emx_token_find(t.tk, "<start_of_image>"), 255999);
    cr_expect_eq(d->types[emx_token_find(t.tk, "<0x41>")], EMX_TOKT_BYTE);
    check_hf_lines(t.tk, "tests/data/hf/gemma3-tokenizer.encode.jsonl", 341);
    // BOS is prepended on request, and a following space is kept on decode (no Strip decoder).
    int *ids = NULL;
    size_t n = 0, len = 0;
    char err[256];
    cr_assert_eq(emx_encode(t.tk, " Hi", 3, EMX_ENC_BOS | EMX_ENC_SPECIAL, &ids, &n, err, sizeof err), 0, "%s", err);
    cr_assert_geq(n, 2);
    cr_expect_eq(ids[0], 2);
    char *text = decode_stream(t.tk, ids, n, 1, &len);
    cr_expect_str_eq(text, " Hi");
    free(text);
    free(ids);
    testtok_free(&t);
}

// As a model file stores it: the serialized section, viewed in place, encodes the same.
Test(tokenizer_hf_models, gemma3_section_roundtrip) {
    TestTok t;
    testtok_tiny_hf(&t, "gemma3-tiny", 262144);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cr_assert(f);
    uint64_t w = tokdata_write(&t.data, f);
    fclose(f);
    cr_assert(w > 0 && w == len);
    void *blob = malloc(len);  // 8-byte aligned, as a mapped file's section is
    memcpy(blob, buf, len);
    free(buf);
    TestTok back;
    char err[512] = "";
    cr_assert_eq(tokdata_view(blob, len, &back.data, err, sizeof err), 0, "%s", err);
    cr_expect_eq(back.data.flags, t.data.flags);
    cr_expect_eq(back.data.n_merges, t.data.n_merges);
    testtok_make(&back);
    check_hf_lines(back.tk, "tests/data/hf/gemma3-tokenizer.encode.jsonl", 341);
    testtok_free(&back);
    free(blob);
    testtok_free(&t);
}

Test(tokenizer_hf_models, qwen25_matches_hf_tokenizers) {
    TestTok t;
    testtok_tiny_hf(&t, "qwen2.5-tiny", 151936);
    cr_expect_eq(t.data.kind, EMX_TOK_BPE_BYTELEVEL);
    // Qwen2.5 has no <think>: the text is ordinary BPE there (Qwen3 adds 151665..151668).
    cr_expect_eq(emx_token_find(t.tk, "<think>"), -1);
    cr_expect_eq(emx_token_find(t.tk, "<|file_sep|>"), 151664);
    check_hf_lines(t.tk, "tests/data/hf/qwen2.5-tokenizer.encode.jsonl", 341);
    testtok_free(&t);
}

// A hand-made tokenizer.json in a temporary directory; returns the directory.
static const char *write_tok_dir(char *dir, size_t cap, const char *json) {
    snprintf(dir, cap, "/tmp/emx_tokhf_XXXXXX");
    cr_assert(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fputs(json, f);
    fclose(f);
    return dir;
}

static void remove_tok_dir(const char *dir) {
    char path[256];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    unlink(path);
    rmdir(dir);
}

#define BYTES_AB "\"<0x61>\": 5, \"<0x62>\": 6, \"<0x63>\": 7, \"<0x78>\": 8"
#define TOK_JSON(norm, pre, merges)                                                               \
    "{\"added_tokens\": [{\"id\": 0, \"content\": \"<unk>\", \"special\": true}],"                 \
    " \"normalizer\": " norm ", \"pre_tokenizer\": " pre ","                                       \
    " \"model\": {\"type\": \"BPE\", \"byte_fallback\": true, \"unk_token\": \"<unk>\","           \
    " \"vocab\": {\"<unk>\": 0, \"a\": 1, \"b\": 2, \"c\": 3, \"ab\": 4, " BYTES_AB ","             \
    " \"bc\": 9, \"\\u2581\": 10, \"\\u2581a\": 11}, \"merges\": " merges "}}"
#define GEMMA_NORM "{\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\\u2581\"}"

// Merges by rank, not by score or position: "abc" with "b c" ranked before "a b" is a + bc
// (by hand; a leftmost or score-0 rule would give ab + c). A character without a piece falls
// back to its UTF-8 bytes' <0xNN> pieces, and a space becomes "▁" and merges with what follows.
Test(tokenizer_hf_models, byte_fallback_merges_by_rank) {
    char dir[64];
    write_tok_dir(dir, sizeof dir, TOK_JSON(GEMMA_NORM, "null", "[\"b c\", \"a b\", \"\\u2581 a\"]"));
    TestTok t;
    char err[512] = "";
    cr_assert_eq(tokdata_from_hf_dir(dir, 0, &t.data, err, sizeof err), 0, "%s", err);
    testtok_make(&t);
    int *ids = NULL;
    size_t n = 0;
    cr_assert_eq(emx_encode(t.tk, "abc ax", 6, 0, &ids, &n, err, sizeof err), 0, "%s", err);
    int want[] = {1, 9, 11, 8};  // a, bc, ▁a, <0x78> (no piece "x")
    cr_assert_eq(n, 4);
    cr_expect_arr_eq(ids, want, sizeof want);
    free(ids);
    testtok_free(&t);
    remove_tok_dir(dir);
}

// Forms with other splitting or prefix rules are refused with the field named.
Test(tokenizer_hf_models, byte_fallback_other_forms_refused) {
    static const char *const bad[][2] = {
        {TOK_JSON("{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", \"prepend\": \"\\u2581\"}, " GEMMA_NORM "]}",
                  "null", "[]"), "normalizer"},
        {TOK_JSON(GEMMA_NORM, "{\"type\": \"Metaspace\", \"replacement\": \"\\u2581\"}", "[]"), "pre_tokenizer \"Metaspace\""},
        {TOK_JSON(GEMMA_NORM, "null", "[], \"ignore_merges\": true"), "ignore_merges"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        char dir[64], err[512] = "";
        TokenizerData d;
        write_tok_dir(dir, sizeof dir, bad[k][0]);
        cr_expect_eq(tokdata_from_hf_dir(dir, 0, &d, err, sizeof err), -1, "case %zu accepted", k);
        cr_expect(strstr(err, bad[k][1]) != NULL, "case %zu: \"%s\" does not name %s", k, err, bad[k][1]);
        remove_tok_dir(dir);
    }
}

// The chat prompt of tests/data/hf/<model>/reference.json: the system + user messages rendered by
// our family, then encoded, give the text and ids transformers gave (apply_chat_template, then
// the tokenizer without adding a second BOS).
static void check_chat_prompt(const char *model, uint32_t n_vocab, uint32_t family) {
    char rel[256];
    snprintf(rel, sizeof rel, "tests/data/hf/%s/reference.json", model);
    char *file = test_read_file(rel, NULL);
    cr_assert(file, "cannot read %s", rel);
    cJSON *ref = cJSON_Parse(file);
    free(file);
    const cJSON *p, *chat = NULL;
    cJSON_ArrayForEach(p, cJSON_GetObjectItem(ref, "prompts"))
        if (strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(p, "label")), "chat") == 0) chat = p;
    cr_assert(chat, "%s: no chat prompt", rel);
    const EmxChatMessage msgs[] = {{.role = "system", .content = "You answer in one sentence."},
                                   {.role = "user", .content = "What is 9.11 - 9.9?"}};
    char err[256];
    char *text = emx_chat_render(family, msgs, 2, NULL, err, sizeof err);
    cr_assert(text, "%s", err);
    cr_expect_str_eq(text, cJSON_GetStringValue(cJSON_GetObjectItem(chat, "text")));
    TestTok t;
    testtok_tiny_hf(&t, model, n_vocab);
    int *ids = NULL;
    size_t n = 0, n_want = 0;
    unsigned flags = EMX_ENC_SPECIAL | (emx_chat_template_adds_bos(family) ? 0 : EMX_ENC_BOS);
    cr_assert_eq(emx_encode(t.tk, text, strlen(text), flags, &ids, &n, err, sizeof err), 0, "%s", err);
    int *want = json_ids(chat, "ids", &n_want);
    cr_expect(n == n_want && memcmp(ids, want, n * sizeof *ids) == 0, "%s: chat prompt ids differ (%zu vs %zu)",
              model, n, n_want);
    free(want);
    free(ids);
    free(text);
    testtok_free(&t);
    cJSON_Delete(ref);
}

Test(tokenizer_hf_models, chat_prompts_match_transformers) {
    check_chat_prompt("gemma3-tiny", 262144, EMX_CHAT_GEMMA3);
    check_chat_prompt("qwen2.5-tiny", 151936, EMX_CHAT_QWEN25);
}
