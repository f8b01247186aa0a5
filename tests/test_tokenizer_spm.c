// test_tokenizer_spm.c — the SentencePiece-style tokenizer on stories260K's tok512.bin
// (llama2.c format) and on llama.cpp's GGUF of the same vocabulary, against
// testdata/stories260K/golden.json: llama2.c encode ids, llama.cpp ids, run.c decode bytes.
#include <unistd.h>

#include "test_tokenizer_util.h"

static cJSON *load_golden(void) {
    char path[1024];
    size_t n = 0;
    char *s = test_read_file(test_shared_path(path, sizeof path, "testdata/stories260K/golden.json"), &n);
    cr_assert(s, "cannot read %s", path);
    cJSON *j = cJSON_ParseWithLength(s, n);
    free(s);
    cr_assert(j, "golden.json does not parse");
    return j;
}

static void tok512(TestTok *t) {
    char path[1024], err[512] = "";
    test_shared_path(path, sizeof path, "testdata/stories260K/tok512.bin");
    cr_assert_eq(tokdata_from_llama2c(path, 512, &t->data, err, sizeof err), 0, "%s", err);
    testtok_make(t);
}

static int ids_equal(const int *a, size_t na, const cJSON *arr) {
    if ((size_t)cJSON_GetArraySize(arr) != na) return 0;
    for (size_t i = 0; i < na; i++)
        if (cJSON_GetArrayItem(arr, (int)i)->valueint != a[i]) return 0;
    return 1;
}

static void print_ids(const char *what, const int *a, size_t n) {
    fprintf(stderr, "%s:", what);
    for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", a[i]);
    fprintf(stderr, "\n");
}

// ids_with_bos (llama2.c), llamacpp_ids_no_bos, and run.c's decode of ids_with_bos.
static void check_tok512_cases(const EmxTokenizer *tk, int check_runc_ids) {
    cJSON *g = load_golden();
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(g, "tok512_checks"), "cases");
    int n = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cases) {
        const char *text = cJSON_GetObjectItemCaseSensitive(c, "text")->valuestring;
        int *ids;
        size_t nid = 0;
        char err[256];
        if (check_runc_ids) {
            cr_assert_eq(emx_encode(tk, text, strlen(text), EMX_ENC_BOS, &ids, &nid, err, sizeof err), 0);
            int ok = ids_equal(ids, nid, cJSON_GetObjectItemCaseSensitive(c, "ids_with_bos"));
            if (!ok) print_ids(text, ids, nid);
            cr_expect(ok, "llama2.c encode of \"%s\" differs", text);
            free(ids);
        }
        cr_assert_eq(emx_encode(tk, text, strlen(text), 0, &ids, &nid, err, sizeof err), 0);
        int ok = ids_equal(ids, nid, cJSON_GetObjectItemCaseSensitive(c, "llamacpp_ids_no_bos"));
        if (!ok) print_ids(text, ids, nid);
        cr_expect(ok, "llama.cpp encode (no BOS) of \"%s\" differs", text);
        free(ids);
        // run.c decode: BOS not printed, the space after it dropped, <0xNN> as raw bytes.
        const cJSON *wb = cJSON_GetObjectItemCaseSensitive(c, "ids_with_bos");
        int wids[256];
        size_t nw = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, wb) wids[nw++] = e->valueint;
        size_t len = 0;
        char *out = decode_stream(tk, wids, nw, 1, &len);
        const char *hex = cJSON_GetObjectItemCaseSensitive(c, "decoded_bytes_hex")->valuestring;
        char got[1024];
        for (size_t i = 0; i < len && i < 500; i++) sprintf(got + 2 * i, "%02x", (uint8_t)out[i]);
        got[2 * (len < 500 ? len : 500)] = 0;
        cr_expect_str_eq(got, hex, "decode of \"%s\"", text);
        free(out);
        n++;
    }
    cr_expect_eq(n, 12);
    cJSON_Delete(g);
}

Test(tokenizer_spm, tok512_llama2c) {
    TestTok t;
    tok512(&t);
    cr_expect_eq(t.data.kind, EMX_TOK_SPM);
    cr_expect_eq(emx_tokenizer_bos(t.tk), 1);
    cr_expect(emx_is_stop(t.tk, 2) && emx_is_stop(t.tk, 1), "run.c stops on BOS");
    check_tok512_cases(t.tk, 1);
    testtok_free(&t);
}

Test(tokenizer_spm, tok512_gguf) {
    TestTok t;
    testtok_gguf(&t, "testdata/stories260K/stories260K.gguf");
    cr_expect_eq(t.data.kind, EMX_TOK_SPM);
    check_tok512_cases(t.tk, 1);
    testtok_free(&t);
}

// The five generation prompts: prompt_ids (llama2.c, with BOS) and the run.c echo of them.
Test(tokenizer_spm, stories_prompts) {
    TestTok t;
    tok512(&t);
    cJSON *g = load_golden();
    const cJSON *p;
    int n = 0;
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(g, "prompts")) {
        const char *text = cJSON_GetObjectItemCaseSensitive(p, "prompt")->valuestring;
        int *ids;
        size_t nid = 0;
        char err[256];
        cr_assert_eq(emx_encode(t.tk, text, strlen(text), EMX_ENC_BOS, &ids, &nid, err, sizeof err), 0);
        int ok = ids_equal(ids, nid, cJSON_GetObjectItemCaseSensitive(p, "prompt_ids"));
        if (!ok) print_ids(text, ids, nid);
        cr_expect(ok, "prompt \"%s\"", text);
        // run.c echoes the prompt pieces: its stdout starts with the prompt text.
        size_t len = 0;
        char *out = decode_stream(t.tk, ids, nid, 1, &len);
        cr_expect(len == strlen(text) && memcmp(out, text, len) == 0, "echo of \"%s\" is \"%s\"", text, out);
        free(out);
        free(ids);
        n++;
    }
    cr_expect_eq(n, 5);
    // "Zoo": BOS, the dummy-prefix space piece, then pieces (testdata README).
    int *ids;
    size_t nid = 0;
    char err[256];
    cr_assert_eq(emx_encode(t.tk, "Zoo", 3, EMX_ENC_BOS, &ids, &nid, err, sizeof err), 0);
    cr_expect(nid == 4 && ids[0] == 1 && ids[1] == 410 && ids[2] == 469 && ids[3] == 347);
    free(ids);
    cJSON_Delete(g);
    testtok_free(&t);
}

// The 200-token unconditional generation decodes to expected.txt (run.c's stdout).
Test(tokenizer_spm, unconditional_text) {
    TestTok t;
    tok512(&t);
    cJSON *g = load_golden();
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(g, "unconditional_200");
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(u, "greedy_ids_numpy");
    cr_assert(cJSON_IsArray(ids));
    int v[256 + 1];
    size_t n = 0;
    v[n++] = 1;  // generation starts after BOS
    const cJSON *e;
    cJSON_ArrayForEach(e, ids) if (n < 257) v[n++] = e->valueint;
    char path[1024];
    size_t elen = 0, len = 0;
    char *want = test_read_file(test_shared_path(path, sizeof path, "testdata/stories260K/expected.txt"), &elen);
    cr_assert(want);
    char *got = decode_stream(t.tk, v, n, 1, &len);
    cr_expect(len == elen && memcmp(got, want, len) == 0, "got \"%s\"\nwant \"%s\"", got, want);
    free(got);
    free(want);
    cJSON_Delete(g);
    testtok_free(&t);
}

Test(tokenizer_spm, bad_tokenizer_bin) {
    char dir[] = "/tmp/emx_tok512_XXXXXX";
    cr_assert(mkdtemp(dir));
    char path[1200], src[1024], err[512] = "";
    snprintf(path, sizeof path, "%s/tok.bin", dir);
    size_t n = 0;
    char *bytes = test_read_file(test_shared_path(src, sizeof src, "testdata/stories260K/tok512.bin"), &n);
    cr_assert(bytes);
    FILE *f = fopen(path, "wb");
    fwrite(bytes, 1, n - 10, f);  // truncated
    fclose(f);
    TokenizerData d;
    cr_expect_eq(tokdata_from_llama2c(path, 512, &d, err, sizeof err), -1);
    cr_expect(strstr(err, "truncated") != NULL, "%s", err);
    cr_expect_eq(tokdata_from_llama2c("/nonexistent/tok.bin", 512, &d, err, sizeof err), -1);
    cr_expect(strstr(err, "/nonexistent/tok.bin") != NULL, "%s", err);
    int32_t bad_len[3] = {7, 0, 1000};  // max 7, score 0, length 1000
    f = fopen(path, "wb");
    fwrite(bad_len, 4, 3, f);
    fclose(f);
    cr_expect_eq(tokdata_from_llama2c(path, 512, &d, err, sizeof err), -1);
    cr_expect(strstr(err, "length") != NULL, "%s", err);
    remove(path);
    rmdir(dir);
    free(bytes);
}
