// test_tokenizer.c — the tokenizers against independent references in ../shared/testdata:
// the HF golden encodings/decodings (made with the @lenml port of HF tokenizers), llama.cpp's
// own tokenizer test vectors, and llama2.c's tokenizer on stories260K; built from
// tokenizer.json, from GGUF metadata and from tokenizer.bin.
#include <time.h>
#include <utf8proc.h>

#include "test_tokenizer_util.h"

// ---------------------------------------------------------------------------------------------
// Golden encodings: every line's ids exactly, and decode(encode(t)) == NFC(t) / t.

static void check_golden_encode(const EmxTokenizer *tk, const char *rel) {
    char path[1024];
    size_t flen = 0;
    char *file = test_read_file(test_shared_path(path, sizeof path, rel), &flen);
    cr_assert(file, "cannot read %s", path);
    int lines = 0, bad = 0, bad_round = 0;
    for (char *line = strtok(file, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *obj = cJSON_Parse(line);
        cr_assert(obj, "%s: line %d is not JSON", rel, lines + 1);
        size_t tlen = 0, n_want = 0, n_got = 0, dlen = 0, rlen = 0;
        char *text = json_str(line, "text", &tlen);
        char *decoded = json_str(line, "decoded", &dlen);
        int *want = json_ids(obj, "ids", &n_want);
        cr_assert(text && want, "%s: line %d lacks text/ids", rel, lines + 1);
        int *got = NULL;
        char err[256];
        cr_assert_eq(emx_encode(tk, text, tlen, EMX_ENC_SPECIAL, &got, &n_got, err, sizeof err), 0,
                     "%s", err);
        if (n_got != n_want || memcmp(got, want, n_got * sizeof *got) != 0) {
            if (bad++ < 8) {
                fprintf(stderr, "%s line %d: text \"%.60s\": want", rel, lines + 1, text);
                for (size_t i = 0; i < n_want && i < 24; i++) fprintf(stderr, " %d", want[i]);
                fprintf(stderr, "\n   got");
                for (size_t i = 0; i < n_got && i < 24; i++) fprintf(stderr, " %d", got[i]);
                fprintf(stderr, "\n");
            }
        }
        // Round trip through the streaming decoder: "decoded" is given where the reference
        // decode differs from the text (Qwen's NFC).
        char *round = decode_stream(tk, got, n_got, 0, &rlen);
        const char *expect = decoded ? decoded : text;
        size_t elen = decoded ? dlen : tlen;
        if (rlen != elen || memcmp(round, expect, elen) != 0) {
            if (bad_round++ < 4)
                fprintf(stderr, "%s line %d: round trip \"%.60s\" -> \"%.60s\"\n", rel, lines + 1,
                        expect, round);
        }
        free(round);
        free(got);
        free(want);
        free(text);
        free(decoded);
        cJSON_Delete(obj);
        lines++;
    }
    free(file);
    cr_expect_eq(lines, 328, "%s: %d lines", rel, lines);
    cr_expect_eq(bad, 0, "%s: %d of %d lines encode differently", rel, bad, lines);
    cr_expect_eq(bad_round, 0, "%s: %d of %d lines do not round-trip", rel, bad_round, lines);
}

Test(tokenizer_golden, qwen3_hf_encode) {
    TestTok t;
    testtok_hf(&t, "testdata/tokenizers/qwen3", 151936);
    cr_expect_eq(t.data.n_vocab, 151936);
    cr_expect_eq(t.data.pre, EMX_PRE_QWEN2);
    cr_expect(t.data.flags & EMX_TOKF_NFC);
    cr_expect_not(t.data.flags & EMX_TOKF_ADD_BOS);
    check_golden_encode(t.tk, "testdata/tokenizers/golden/qwen3.encode.jsonl");
    testtok_free(&t);
}

Test(tokenizer_golden, llama3_hf_encode) {
    TestTok t;
    testtok_hf(&t, "testdata/tokenizers/llama3", 128256);
    cr_expect_eq(t.data.pre, EMX_PRE_LLAMA3);
    cr_expect(t.data.flags & EMX_TOKF_IGNORE_MERGES);
    cr_expect(t.data.flags & EMX_TOKF_ADD_BOS);
    cr_expect_eq(t.data.bos_id, 128000);
    check_golden_encode(t.tk, "testdata/tokenizers/golden/llama3.encode.jsonl");
    testtok_free(&t);
}

Test(tokenizer_golden, qwen3_gguf_encode) {
    TestTok t;
    testtok_gguf(&t, "testdata/tiny/qwen3-tiny/qwen3-tiny.bf16.gguf");
    cr_expect_eq(t.data.n_vocab, 151936);
    cr_expect(t.data.flags & EMX_TOKF_NFC, "pre qwen2 implies the NFC normalizer");
    check_golden_encode(t.tk, "testdata/tokenizers/golden/qwen3.encode.jsonl");
    testtok_free(&t);
}

Test(tokenizer_golden, llama3_gguf_encode) {
    TestTok t;
    testtok_gguf(&t, "testdata/tiny/llama3-tiny/llama3-tiny.f16.gguf");
    cr_expect_eq(t.data.n_vocab, 128256);
    cr_expect(t.data.flags & EMX_TOKF_IGNORE_MERGES);
    check_golden_encode(t.tk, "testdata/tokenizers/golden/llama3.encode.jsonl");
    testtok_free(&t);
}

// ---------------------------------------------------------------------------------------------
// Golden decodings: raw token bytes == bytes_hex, streamed text == text (U+FFFD rules).

static void check_golden_decode(const EmxTokenizer *tk, const char *rel, int want_lines) {
    char path[1024];
    size_t flen = 0;
    char *file = test_read_file(test_shared_path(path, sizeof path, rel), &flen);
    cr_assert(file, "cannot read %s", path);
    int lines = 0, bad_bytes = 0, bad_text = 0, bad_skip = 0;
    for (char *line = strtok(file, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *obj = cJSON_Parse(line);
        cr_assert(obj);
        size_t n = 0, tlen = 0, slen = 0;
        int *ids = json_ids(obj, "ids", &n);
        char *text = json_str(line, "text", &tlen);
        char *skip = json_str(line, "text_skip_special", &slen);
        const cJSON *hex = cJSON_GetObjectItemCaseSensitive(obj, "bytes_hex");
        cr_assert(ids && text && cJSON_IsString(hex));
        // Concatenated raw bytes, as hex.
        size_t hl = strlen(hex->valuestring), o = 0;
        char *raw = malloc(hl / 2 + 1), buf[1024];
        char *hexgot = malloc(2 * (hl / 2) + 64 * n + 1);
        for (size_t i = 0; i < n; i++) {
            size_t l = emx_token_bytes(tk, ids[i], buf, sizeof buf);
            for (size_t k = 0; k < l && k < sizeof buf; k++) o += (size_t)sprintf(hexgot + o, "%02x", (uint8_t)buf[k]);
        }
        hexgot[o] = 0;
        if (strcmp(hexgot, hex->valuestring) != 0 && bad_bytes++ < 4)
            fprintf(stderr, "%s line %d: bytes %s, want %s\n", rel, lines + 1, hexgot, hex->valuestring);
        size_t glen = 0;
        char *got = decode_stream(tk, ids, n, 0, &glen);
        if ((glen != tlen || memcmp(got, text, tlen) != 0) && bad_text++ < 4)
            fprintf(stderr, "%s line %d: text \"%s\", want \"%s\"\n", rel, lines + 1, got, text);
        free(got);
        got = decode_stream(tk, ids, n, 1, &glen);
        const char *ws = skip ? skip : text;
        size_t wl = skip ? slen : tlen;
        if ((glen != wl || memcmp(got, ws, wl) != 0) && bad_skip++ < 4)
            fprintf(stderr, "%s line %d: skip-special text \"%s\", want \"%s\"\n", rel, lines + 1, got, ws);
        free(got);
        free(raw);
        free(hexgot);
        free(ids);
        free(text);
        free(skip);
        cJSON_Delete(obj);
        lines++;
    }
    free(file);
    cr_expect_eq(lines, want_lines, "%s: %d lines", rel, lines);
    cr_expect_eq(bad_bytes, 0, "%s: %d lines with wrong token bytes", rel, bad_bytes);
    cr_expect_eq(bad_text, 0, "%s: %d lines decode to the wrong text", rel, bad_text);
    cr_expect_eq(bad_skip, 0, "%s: %d lines wrong with skip_special", rel, bad_skip);
}

Test(tokenizer_golden, qwen3_decode) {
    TestTok t;
    testtok_hf(&t, "testdata/tokenizers/qwen3", 151936);
    check_golden_decode(t.tk, "testdata/tokenizers/golden/qwen3.decode.jsonl", 353);
    testtok_free(&t);
}

Test(tokenizer_golden, llama3_decode) {
    TestTok t;
    testtok_hf(&t, "testdata/tokenizers/llama3", 128256);
    check_golden_decode(t.tk, "testdata/tokenizers/golden/llama3.decode.jsonl", 343);
    testtok_free(&t);
}

// ---------------------------------------------------------------------------------------------
// llama.cpp's tokenizer test vectors (made by its maintainers with HF tokenizers): 46/46.

static void check_llamacpp_vectors(const EmxTokenizer *tk, const char *name) {
    char path[1024], rel[256];
    snprintf(rel, sizeof rel, "testdata/tokenizers/llamacpp-vectors/%s.inp", name);
    size_t ilen = 0, olen = 0;
    char *inp = test_read_file(test_shared_path(path, sizeof path, rel), &ilen);
    snprintf(rel, sizeof rel, "testdata/tokenizers/llamacpp-vectors/%s.out", name);
    char *outs = test_read_file(test_shared_path(path, sizeof path, rel), &olen);
    cr_assert(inp && outs, "cannot read the %s vectors", name);
    const char *sep = "\n__ggml_vocab_test__\n";
    char *text = inp, *line = outs;
    int n = 0, good = 0;
    for (char *end; (end = strstr(text, sep)) != NULL; text = end + strlen(sep)) {
        char *eol = strchr(line, '\n');
        cr_assert(eol, "%s.out has fewer lines than texts", name);
        *eol = 0;
        int want[512];
        size_t nw = 0;
        for (char *p = line, *q; nw < 512; p = q) {
            long v = strtol(p, &q, 10);
            if (q == p) break;
            want[nw++] = (int)v;
        }
        int *got;
        size_t ng = 0;
        char err[256];
        cr_assert_eq(emx_encode(tk, text, (size_t)(end - text), EMX_ENC_SPECIAL, &got, &ng, err, sizeof err), 0);
        if (ng == nw && memcmp(got, want, ng * sizeof *got) == 0) good++;
        else fprintf(stderr, "%s text %d \"%.*s\" differs\n", name, n + 1, (int)(end - text), text);
        free(got);
        n++;
        line = eol + 1;
    }
    free(inp);
    free(outs);
    cr_expect_eq(n, 46);
    cr_expect_eq(good, n, "%s: %d/%d", name, good, n);
}

Test(tokenizer_golden, llamacpp_vectors_qwen2) {
    TestTok t;
    testtok_hf(&t, "testdata/tokenizers/qwen3", 0);
    check_llamacpp_vectors(t.tk, "ggml-vocab-qwen2.gguf");
    testtok_free(&t);
}

Test(tokenizer_golden, llamacpp_vectors_llama_bpe) {
    TestTok t;
    testtok_hf(&t, "testdata/tokenizers/llama3", 0);
    check_llamacpp_vectors(t.tk, "ggml-vocab-llama-bpe.gguf");
    testtok_free(&t);
}

// ---------------------------------------------------------------------------------------------
// Special ids, stop ids, BOS, lookups.

Test(tokenizer_golden, llama3_bos_and_stops) {
    TestTok t;
    testtok_hf(&t, "testdata/tiny/llama3-tiny/hf", 128256);
    const EmxTokenizer *tk = t.tk;
    cr_expect_eq(emx_tokenizer_bos(tk), 128000);
    // config.json eos_token_id = [128001, 128008, 128009]; tokenizer_config eos <|eot_id|>.
    cr_expect_eq(t.data.eos_id, 128009);
    cr_expect(emx_is_stop(tk, 128001) && emx_is_stop(tk, 128008) && emx_is_stop(tk, 128009));
    cr_expect_not(emx_is_stop(tk, 128000));
    cr_expect(emx_is_control(tk, 128006));
    cr_expect_not(emx_is_control(tk, 9906));
    cr_expect_eq(emx_token_find(tk, "<|start_header_id|>"), 128006);
    cr_expect_eq(emx_token_find(tk, "Hello"), 9906);
    // add_special_tokens=true is [128000] + ids for every line (README 1.4).
    int *ids;
    size_t n = 0;
    char err[256];
    cr_assert_eq(emx_encode(tk, "Hello world", 11, EMX_ENC_BOS | EMX_ENC_SPECIAL, &ids, &n, err, sizeof err), 0);
    cr_expect_eq(n, 3);
    cr_expect(n == 3 && ids[0] == 128000 && ids[1] == 9906 && ids[2] == 1917);
    free(ids);
    testtok_free(&t);
}

Test(tokenizer_golden, qwen3_specials_and_stops) {
    TestTok t;
    testtok_hf(&t, "testdata/tiny/qwen3-tiny/hf", 151936);
    const EmxTokenizer *tk = t.tk;
    cr_expect_eq(t.data.eos_id, 151645);
    cr_expect(emx_is_stop(tk, 151645) && emx_is_stop(tk, 151643));
    cr_expect_not(emx_is_stop(tk, 151644));
    cr_expect_eq(emx_token_find(tk, "<|im_start|>"), 151644);
    cr_expect_eq(emx_token_find(tk, "<think>"), 151667);
    cr_expect_not(emx_is_control(tk, 151667), "<think> is text (special = false)");
    cr_expect(emx_is_control(tk, 151644));
    cr_expect(emx_is_control(tk, 151900), "padding rows are never printed");
    cr_expect_eq(emx_token_bytes(tk, 151900, NULL, 0), 0);
    // No BOS for Qwen even when asked.
    int *ids;
    size_t n = 0;
    char err[256];
    cr_assert_eq(emx_encode(tk, "<|im_start|>user", 16, EMX_ENC_BOS | EMX_ENC_SPECIAL, &ids, &n, err, sizeof err), 0);
    cr_expect(n == 2 && ids[0] == 151644 && ids[1] == 872, "n = %zu", n);
    free(ids);
    // Without EMX_ENC_SPECIAL the same text is plain text.
    cr_assert_eq(emx_encode(tk, "<|im_start|>", 12, 0, &ids, &n, err, sizeof err), 0);
    cr_expect_gt(n, 1);
    for (size_t i = 0; i < n; i++) cr_expect_neq(ids[i], 151644);
    free(ids);
    testtok_free(&t);
}

// ---------------------------------------------------------------------------------------------
// SmolLM2 (pre "smollm"): HF encodings prepared by another part of the project.

Test(tokenizer_golden, smollm2_gguf_encode) {
    char gguf[1024], jsonl[1024];
    snprintf(gguf, sizeof gguf, "weights/download/SmolLM2-135M-Instruct.Q4_1.gguf");
    const char *cands[] = {"tests/data/smollm2/smollm2.encode.jsonl", "tests/data/smollm2.encode.jsonl"};
    const char *found = NULL;
    for (int i = 0; i < 2 && !found; i++) {
        FILE *f = fopen(cands[i], "rb");
        if (f) fclose(f), found = cands[i];
    }
    FILE *g = fopen(gguf, "rb");
    if (!found || !g) {
        if (g) fclose(g);
        cr_skip_test("needs %s and tests/data/smollm2/smollm2.encode.jsonl (run make weights)", gguf);
    }
    fclose(g);
    snprintf(jsonl, sizeof jsonl, "%s", found);
    TestTok t;
    testtok_gguf_path(&t, gguf);
    cr_expect_eq(t.data.pre, EMX_PRE_SMOLLM);
    // check_golden_encode reads under EMX_SHARED; this file is in the repository.
    size_t flen = 0;
    char *file = test_read_file(jsonl, &flen);
    cr_assert(file);
    int lines = 0, bad = 0;
    for (char *line = strtok(file, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *obj = cJSON_Parse(line);
        cr_assert(obj);
        size_t tlen = 0, nw = 0, ng = 0;
        char *text = json_str(line, "text", &tlen);
        int *want = json_ids(obj, "ids", &nw), *got;
        char err[256];
        cr_assert_eq(emx_encode(t.tk, text, tlen, EMX_ENC_SPECIAL, &got, &ng, err, sizeof err), 0);
        if ((ng != nw || memcmp(got, want, ng * sizeof *got) != 0) && bad++ < 8) {
            fprintf(stderr, "smollm2 line %d: \"%.60s\": want", lines + 1, text);
            for (size_t i = 0; i < nw && i < 24; i++) fprintf(stderr, " %d", want[i]);
            fprintf(stderr, "\n   got");
            for (size_t i = 0; i < ng && i < 24; i++) fprintf(stderr, " %d", got[i]);
            fprintf(stderr, "\n");
        }
        free(got);
        free(want);
        free(text);
        cJSON_Delete(obj);
        lines++;
    }
    free(file);
    cr_expect_gt(lines, 0);
    cr_expect_eq(bad, 0, "smollm2: %d of %d lines encode differently", bad, lines);
    testtok_free(&t);
}

// ---------------------------------------------------------------------------------------------
// The tiny models' reference prompts (chat templates included): Qwen3 ids without BOS;
// Llama 3 with 128000 prepended unless the text starts with <|begin_of_text|>.

static void check_reference_prompts(const EmxTokenizer *tk, const char *rel) {
    char path[1024];
    size_t n = 0;
    char *s = test_read_file(test_shared_path(path, sizeof path, rel), &n);
    cr_assert(s, "cannot read %s", path);
    cJSON *r = cJSON_ParseWithLength(s, n);
    free(s);
    cr_assert(r);
    const cJSON *p;
    int count = 0;
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(r, "prompts")) {
        const char *text = cJSON_GetObjectItemCaseSensitive(p, "text")->valuestring;
        size_t nw = 0, ng = 0;
        int *want = json_ids(p, "ids", &nw), *got;
        char err[256];
        cr_assert_eq(emx_encode(tk, text, strlen(text), EMX_ENC_BOS | EMX_ENC_SPECIAL, &got, &ng, err, sizeof err), 0);
        cr_expect(ng == nw && memcmp(got, want, ng * sizeof *got) == 0, "%s prompt %d (%zu ids, want %zu)", rel, count, ng, nw);
        free(got);
        free(want);
        count++;
    }
    cr_expect_eq(count, 6);
    cJSON_Delete(r);
}

Test(tokenizer_golden, tiny_reference_prompts_hf) {
    TestTok q, l;
    testtok_hf(&q, "testdata/tiny/qwen3-tiny/hf", 151936);
    check_reference_prompts(q.tk, "testdata/tiny/qwen3-tiny/reference.json");
    testtok_free(&q);
    testtok_hf(&l, "testdata/tiny/llama3-tiny/hf", 128256);
    check_reference_prompts(l.tk, "testdata/tiny/llama3-tiny/reference.json");
    testtok_free(&l);
}

Test(tokenizer_golden, tiny_reference_prompts_gguf) {
    TestTok q, l;
    testtok_gguf(&q, "testdata/tiny/qwen3-tiny/qwen3-tiny.bf16.gguf");
    check_reference_prompts(q.tk, "testdata/tiny/qwen3-tiny/reference.json");
    testtok_free(&q);
    testtok_gguf(&l, "testdata/tiny/llama3-tiny/llama3-tiny.f16.gguf");
    check_reference_prompts(l.tk, "testdata/tiny/llama3-tiny/reference.json");
    testtok_free(&l);
}
