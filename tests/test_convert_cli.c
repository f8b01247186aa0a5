// test_convert_cli.c — the converter binary: errors are one line, a non-zero exit and no output
// (or .tmp) file left behind; --chat-template; and source layouts crafted from the test data
// (llama2.c's v1 export, sharded safetensors), whose conversion must equal the source bit for bit
// (the decoders and comparisons of test_convert_util.h); SmolLM2's Q4_1 GGUF converted to q4_1
// must be bit-exact (blocks repacked).
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/model.h"
#include "runtime/convert/ggml_dequant.h"
#include "runtime/convert/gguf.h"
#include "test_convert_util.h"
#include "test_util.h"

// ---------------------------------------------------------------------------------------------
// The converter binary: errors are one line, a non-zero exit, and no file left behind.

typedef struct {
    char dir[64];
    char out[128];
    char err[2048];
    int status;
} Run;

static void run_setup(Run *r) {
    snprintf(r->dir, sizeof r->dir, "/tmp/emx-test-convert-XXXXXX");
    cr_assert_not_null(mkdtemp(r->dir));
    snprintf(r->out, sizeof r->out, "%s/out.bin", r->dir);
}

static void run_cleanup(Run *r) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", r->dir);
    cr_assert_eq(system(cmd), 0);
}

// Runs `convert <args> <r->out>`-style command line built by the caller; captures stderr.
static void run_convert(Run *r, const char *args) {
    char conv[512], cmd[4096], errp[160];
    test_build_path(conv, sizeof conv, "tools/convert");
    cr_assert_eq(access(conv, X_OK), 0, "no converter binary at %s", conv);
    snprintf(errp, sizeof errp, "%s/stderr.txt", r->dir);
    snprintf(cmd, sizeof cmd, "'%s' %s >/dev/null 2>'%s'", conv, args, errp);
    int st = system(cmd);
    cr_assert(WIFEXITED(st), "converter did not exit normally (%d)", st);
    r->status = WEXITSTATUS(st);
    size_t n = 0;
    char *e = test_read_file(errp, &n);
    snprintf(r->err, sizeof r->err, "%s", e ? e : "");
    free(e);
    unlink(errp);
}

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s", path);
    cr_assert_eq(fwrite(p, 1, n, f), n);
    fclose(f);
}

// The run failed with one line containing `needle`, and left neither out nor out.tmp.
static void expect_clean_failure(const Run *r, const char *needle) {
    cr_assert_neq(r->status, 0, "converter succeeded; expected \"%s\"", needle);
    size_t n = strlen(r->err);
    cr_assert(n > 0 && r->err[n - 1] == '\n' && strchr(r->err, '\n') == r->err + n - 1,
              "stderr is not exactly one line: \"%s\"", r->err);
    cr_assert_not_null(strstr(r->err, needle), "message lacks \"%s\": %s", needle, r->err);
    char tmp[160];
    snprintf(tmp, sizeof tmp, "%s.tmp", r->out);
    cr_assert_neq(access(r->out, F_OK), 0, "output file left behind");
    cr_assert_neq(access(tmp, F_OK), 0, ".tmp file left behind");
}

// A safetensors file with one tensor.
static void write_safetensors(const char *path, const char *name, const char *dtype, int rows, int cols, size_t nbytes) {
    char hdr[512];
    int n = snprintf(hdr, sizeof hdr, "{\"%s\":{\"dtype\":\"%s\",\"shape\":[%d,%d],\"data_offsets\":[0,%zu]}}", name,
                     dtype, rows, cols, nbytes);
    while (n % 8) hdr[n++] = ' ';
    uint64_t len = (uint64_t)n;
    size_t total = 8 + (size_t)n + nbytes;
    char *buf = calloc(1, total);
    memcpy(buf, &len, 8);
    memcpy(buf + 8, hdr, (size_t)n);
    write_bytes(path, buf, total);
    free(buf);
}

static void copy_config(const char *dir, const char *shared_rel) {
    char p[512], q[256];
    size_t n = 0;
    test_shared_path(p, sizeof p, shared_rel);
    char *text = test_read_file(p, &n);
    cr_assert_not_null(text, "%s", p);
    snprintf(q, sizeof q, "%s/config.json", dir);
    write_bytes(q, text, n);
    free(text);
}

Test(convert, error_unsupported_safetensors_dtype) {
    Run r;
    run_setup(&r);
    char p[256], args[512];
    copy_config(r.dir, "testdata/tiny/llama3-tiny/hf/config.json");
    snprintf(p, sizeof p, "%s/model.safetensors", r.dir);
    write_safetensors(p, "model.embed_tokens.weight", "I8", 4, 4, 16);
    snprintf(args, sizeof args, "'%s' '%s' --dtype f32", r.dir, r.out);
    run_convert(&r, args);
    expect_clean_failure(&r, "dtype I8");
    cr_assert_not_null(strstr(r.err, "model.embed_tokens.weight"), "%s", r.err);
    run_cleanup(&r);
}

Test(convert, error_unsupported_architecture) {
    Run r;
    run_setup(&r);
    char p[256], args[512];
    snprintf(p, sizeof p, "%s/config.json", r.dir);
    const char *cfg = "{\"architectures\": [\"GPT2LMHeadModel\"], \"model_type\": \"gpt2\"}";
    write_bytes(p, cfg, strlen(cfg));
    snprintf(args, sizeof args, "'%s' '%s'", r.dir, r.out);
    run_convert(&r, args);
    expect_clean_failure(&r, "GPT2LMHeadModel");
    run_cleanup(&r);
}

Test(convert, error_unsupported_gguf_architecture) {
    Run r;
    run_setup(&r);
    char p[256], args[512];
    // GGUF v3, 0 tensors, 1 key: general.architecture = "gpt2".
    uint8_t g[128];
    size_t n = 0;
    uint32_t v3 = 3, tstr = GGUF_STRING;
    uint64_t zero = 0, one = 1, klen = 20, vlen = 4;
    memcpy(g + n, "GGUF", 4), n += 4;
    memcpy(g + n, &v3, 4), n += 4;
    memcpy(g + n, &zero, 8), n += 8;
    memcpy(g + n, &one, 8), n += 8;
    memcpy(g + n, &klen, 8), n += 8;
    memcpy(g + n, "general.architecture", 20), n += 20;
    memcpy(g + n, &tstr, 4), n += 4;
    memcpy(g + n, &vlen, 8), n += 8;
    memcpy(g + n, "gpt2", 4), n += 4;
    snprintf(p, sizeof p, "%s/m.gguf", r.dir);
    write_bytes(p, g, n);
    snprintf(args, sizeof args, "'%s' '%s'", p, r.out);
    run_convert(&r, args);
    expect_clean_failure(&r, "\"gpt2\"");
    run_cleanup(&r);
}

Test(convert, error_missing_tensor) {
    Run r;
    run_setup(&r);
    char p[256], args[512], src[512], real[4096];
    copy_config(r.dir, "testdata/tiny/llama3-tiny/hf/config.json");
    snprintf(p, sizeof p, "%s/model.safetensors", r.dir);
    write_safetensors(p, "model.norm.weight", "F32", 64, 1, 64 * 4);  // [64, 1]: stored 2-D, but only this one
    // The tokenizer files of llama3 (the converter reads them before checking tensors).
    const char *files[] = {"tokenizer.json", "tokenizer_config.json"};
    for (int i = 0; i < 2; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "testdata/tokenizers/llama3/%s", files[i]);
        test_shared_path(src, sizeof src, rel);
        cr_assert_not_null(realpath(src, real), "%s", src);
        snprintf(p, sizeof p, "%s/%s", r.dir, files[i]);
        cr_assert_eq(symlink(real, p), 0);
    }
    snprintf(args, sizeof args, "'%s' '%s'", r.dir, r.out);
    run_convert(&r, args);
    expect_clean_failure(&r, "tok_embeddings");
    cr_assert_not_null(strstr(r.err, "missing"), "%s", r.err);
    run_cleanup(&r);
}

Test(convert, error_truncated_sources) {
    Run r;
    run_setup(&r);
    char p[256], args[1024], tok[512];
    L2c src;
    l2c_load(&src);
    snprintf(p, sizeof p, "%s/s.bin", r.dir);
    write_bytes(p, src.buf, src.len - 1000);
    test_shared_path(tok, sizeof tok, "testdata/stories260K/tok512.bin");
    snprintf(args, sizeof args, "'%s' '%s' --tokenizer '%s'", p, r.out, tok);
    run_convert(&r, args);
    expect_clean_failure(&r, "truncated");
    // A safetensors whose data ends early.
    copy_config(r.dir, "testdata/tiny/llama3-tiny/hf/config.json");
    snprintf(p, sizeof p, "%s/model.safetensors", r.dir);
    write_safetensors(p, "model.embed_tokens.weight", "F16", 128256, 64, 1000);
    snprintf(args, sizeof args, "'%s' '%s'", r.dir, r.out);
    run_convert(&r, args);
    expect_clean_failure(&r, "model.embed_tokens.weight");
    free(src.buf);
    run_cleanup(&r);
}

// A NaN weight is found while writing: the half-written .tmp must be removed.
Test(convert, error_while_writing_leaves_nothing) {
    Run r;
    run_setup(&r);
    char p[256], args[1024], tok[512];
    L2c src;
    l2c_load(&src);
    SrcT wq = l2c_tensor(&src, "layers.3.wq");
    float nan = NAN;
    memcpy((char *)wq.data + 4 * 70, &nan, 4);
    snprintf(p, sizeof p, "%s/s.bin", r.dir);
    write_bytes(p, src.buf, src.len);
    test_shared_path(tok, sizeof tok, "testdata/stories260K/tok512.bin");
    snprintf(args, sizeof args, "'%s' '%s' --tokenizer '%s' --dtype q8", p, r.out, tok);
    run_convert(&r, args);
    expect_clean_failure(&r, "layers.3.wq");
    free(src.buf);
    run_cleanup(&r);
}

Test(convert, error_bad_options) {
    Run r;
    run_setup(&r);
    char args[2048], bin[512];
    test_shared_path(bin, sizeof bin, "testdata/stories260K/stories260K.bin");
    snprintf(args, sizeof args, "'%s' '%s' --dtype q3", bin, r.out);
    run_convert(&r, args);
    expect_clean_failure(&r, "q3");
    snprintf(args, sizeof args, "'%s' '%s'", bin, r.out);  // llama2.c without --tokenizer
    run_convert(&r, args);
    expect_clean_failure(&r, "--tokenizer");
    run_cleanup(&r);
}

Test(convert, chat_template_override) {
    Run r;
    run_setup(&r);
    char args[2048], bin[512], tok[512];
    test_shared_path(bin, sizeof bin, "testdata/stories260K/stories260K.bin");
    test_shared_path(tok, sizeof tok, "testdata/stories260K/tok512.bin");
    snprintf(args, sizeof args, "'%s' '%s' --tokenizer '%s' --dtype f32 --chat-template chatml", bin, r.out, tok);
    run_convert(&r, args);
    cr_assert_eq(r.status, 0, "%s", r.err);
    EmxModel m;
    char err[512];
    cr_assert_eq(emx_model_open(&m, r.out, err, sizeof err), 0, "%s", err);
    cr_assert_eq(m.cfg.chat_template, EMX_CHAT_CHATML);
    emx_model_close(&m);
    snprintf(args, sizeof args, "'%s' '%s' --tokenizer '%s' --chat-template jinja", bin, r.out, tok);
    run_convert(&r, args);
    cr_assert_neq(r.status, 0);
    run_cleanup(&r);
}

// ---------------------------------------------------------------------------------------------
// Other source layouts, crafted from the test data.

static void append_l2c(char *buf, size_t *n, const L2c *src, const char *name) {
    SrcT t = l2c_tensor(src, name);
    memcpy(buf + *n, t.data, t.rows * t.cols * 4);
    *n += t.rows * t.cols * 4;
}

// llama2.c's "ak42" version 1 export: 256-byte header, then all norms, the embedding and the
// matrices grouped by kind. Built from the v0 file's tensors; the conversion must hold them
// bit for bit.
Test(convert, llama2c_v1_export) {
    Run r;
    run_setup(&r);
    L2c src;
    l2c_load(&src);
    char *buf = calloc(1, src.len + 256);
    uint32_t magic = 0x616b3432;
    int32_t version = 1, hdr[7] = {src.dim, src.hidden, src.layers, src.heads, src.kv_heads, src.vocab, src.seq};
    memcpy(buf, &magic, 4);
    memcpy(buf + 4, &version, 4);
    memcpy(buf + 8, hdr, sizeof hdr);
    buf[36] = 1;  // shared classifier
    size_t n = 256;
    char name[64];
    const char *groups[2][4] = {{"attn_norm", "ffn_norm", NULL, NULL}, {"wq", "wk", "wv", "wo"}};
    for (int k = 0; groups[0][k]; k++)
        for (int l = 0; l < src.layers; l++) snprintf(name, sizeof name, "layers.%d.%s", l, groups[0][k]), append_l2c(buf, &n, &src, name);
    append_l2c(buf, &n, &src, "norm");
    append_l2c(buf, &n, &src, "tok_embeddings");
    for (int k = 0; k < 4; k++)
        for (int l = 0; l < src.layers; l++) snprintf(name, sizeof name, "layers.%d.%s", l, groups[1][k]), append_l2c(buf, &n, &src, name);
    const char *ffn[3] = {"w_gate", "w_down", "w_up"};  // llama2.c w1, w2, w3
    for (int k = 0; k < 3; k++)
        for (int l = 0; l < src.layers; l++) snprintf(name, sizeof name, "layers.%d.%s", l, ffn[k]), append_l2c(buf, &n, &src, name);
    char p[256], tok[512], args[2048];
    snprintf(p, sizeof p, "%s/v1.bin", r.dir);
    write_bytes(p, buf, n);
    free(buf);
    test_shared_path(tok, sizeof tok, "testdata/stories260K/tok512.bin");
    snprintf(args, sizeof args, "'%s' '%s' --tokenizer '%s' --dtype f32", p, r.out, tok);
    run_convert(&r, args);
    cr_assert_eq(r.status, 0, "%s", r.err);
    EmxModel m;
    char err[512];
    cr_assert_eq(emx_model_open(&m, r.out, err, sizeof err), 0, "%s", err);
    cr_assert_eq(m.cfg.tied_output, 1);
    Compare c = {from_l2c, &src, NULL, 0};
    cr_assert_eq(for_each_tensor(&m, compare_tensor, &c), 2 + 5 * 9);
    emx_model_close(&m);
    free(src.buf);
    run_cleanup(&r);
}

// A HuggingFace directory whose weights are split over two shards listed in
// model.safetensors.index.json (llama3-tiny's tensors, split in file order).
Test(convert, hf_sharded_safetensors) {
    Run r;
    run_setup(&r);
    StFile st;
    st_load(&st, LLAMA3_ST);
    copy_config(r.dir, "testdata/tiny/llama3-tiny/hf/config.json");
    const char *files[] = {"tokenizer.json", "tokenizer_config.json"};
    char p[512], src[512], real[4096];
    for (int i = 0; i < 2; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "testdata/tokenizers/llama3/%s", files[i]);
        test_shared_path(src, sizeof src, rel);
        cr_assert_not_null(realpath(src, real), "%s", src);
        snprintf(p, sizeof p, "%s/%s", r.dir, files[i]);
        cr_assert_eq(symlink(real, p), 0);
    }
    int total = cJSON_GetArraySize(st.hdr), idx = 0;
    cJSON *shard_hdr[2] = {cJSON_CreateObject(), cJSON_CreateObject()}, *map = cJSON_CreateObject();
    uint64_t shard_len[2] = {0, 0};
    const cJSON *e;
    // First pass: headers with offsets rebased inside each shard.
    cJSON_ArrayForEach(e, st.hdr) {
        if (!strcmp(e->string, "__metadata__")) continue;
        int k = idx++ < total / 2 ? 0 : 1;
        const cJSON *offs = cJSON_GetObjectItem(e, "data_offsets");
        uint64_t b0 = (uint64_t)cJSON_GetArrayItem(offs, 0)->valuedouble, b1 = (uint64_t)cJSON_GetArrayItem(offs, 1)->valuedouble;
        cJSON *t = cJSON_Duplicate(e, 1);
        cJSON *no = cJSON_CreateArray();
        cJSON_AddItemToArray(no, cJSON_CreateNumber((double)shard_len[k]));
        cJSON_AddItemToArray(no, cJSON_CreateNumber((double)(shard_len[k] + b1 - b0)));
        cJSON_ReplaceItemInObject(t, "data_offsets", no);
        cJSON_AddItemToObject(shard_hdr[k], e->string, t);
        cJSON_AddStringToObject(map, e->string, k ? "model-00002-of-00002.safetensors" : "model-00001-of-00002.safetensors");
        shard_len[k] += b1 - b0;
    }
    // Second pass: each shard's header then its tensors' bytes in the same order.
    for (int k = 0; k < 2; k++) {
        char *h = cJSON_PrintUnformatted(shard_hdr[k]);
        uint64_t hl = strlen(h);
        snprintf(p, sizeof p, "%s/model-0000%d-of-00002.safetensors", r.dir, k + 1);
        FILE *f = fopen(p, "wb");
        cr_assert_not_null(f);
        fwrite(&hl, 8, 1, f);
        fwrite(h, 1, hl, f);
        const cJSON *t;
        cJSON_ArrayForEach(t, shard_hdr[k]) {
            const cJSON *orig = cJSON_GetObjectItemCaseSensitive(st.hdr, t->string);
            const cJSON *offs = cJSON_GetObjectItem(orig, "data_offsets");
            uint64_t b0 = (uint64_t)cJSON_GetArrayItem(offs, 0)->valuedouble, b1 = (uint64_t)cJSON_GetArrayItem(offs, 1)->valuedouble;
            cr_assert_eq(fwrite(st.data + b0, 1, b1 - b0, f), b1 - b0);
        }
        fclose(f);
        free(h);
        cJSON_Delete(shard_hdr[k]);
    }
    cJSON *index = cJSON_CreateObject();
    cJSON_AddItemToObject(index, "weight_map", map);
    char *text = cJSON_Print(index);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", r.dir);
    write_bytes(p, text, strlen(text));
    free(text);
    cJSON_Delete(index);

    char args[2048];
    snprintf(args, sizeof args, "'%s' '%s' --dtype f32", r.dir, r.out);
    run_convert(&r, args);
    cr_assert_eq(r.status, 0, "%s", r.err);
    EmxModel m;
    char err[512];
    cr_assert_eq(emx_model_open(&m, r.out, err, sizeof err), 0, "%s", err);
    Compare c = {from_st, &st, NULL, 0};
    cr_assert_eq(for_each_tensor(&m, compare_tensor, &c), 2 + 3 * 9);
    emx_model_close(&m);
    st_free(&st);
    run_cleanup(&r);
}

// ---------------------------------------------------------------------------------------------
// llama.cpp Q4_1 -> q4_1: the blocks are copied, so every weight is bit-exact against the GGUF's
// own dequantised values (ggml_dequantize_rows, checked against gguf-py in test_convert.c).

#define SMOLLM2_Q4_1 "weights/download/SmolLM2-135M-Instruct.Q4_1.gguf"

Test(convert, smollm2_q4_1_gguf_repacks_bit_exact, .timeout = 300) {
    if (access(SMOLLM2_Q4_1, R_OK) != 0) cr_skip_test("%s absent (weights/get-default.sh downloads it)", SMOLLM2_Q4_1);
    Run r;
    run_setup(&r);
    char args[512];
    snprintf(args, sizeof args, "'%s' '%s' --dtype q4_1", SMOLLM2_Q4_1, r.out);
    run_convert(&r, args);
    cr_assert_eq(r.status, 0, "convert failed: %s", r.err);
    GGUFFile g;
    char err[512];
    cr_assert_eq(gguf_open(&g, SMOLLM2_Q4_1, err, sizeof err), 0, "%s", err);
    EmxModel m;
    cr_assert_eq(emx_model_open(&m, r.out, err, sizeof err), 0, "%s", err);
    int n_q4_1 = 0;
    for (uint32_t l = 0; l < m.cfg.n_layers; l++)
        for (size_t i = 0; i < sizeof layer_suffixes / sizeof layer_suffixes[0]; i++) {
            char ours[64], gname[128];
            snprintf(ours, sizeof ours, "layers.%u.%s", l, layer_suffixes[i]);
            const EmxTensor *t = model_tensor(&m, ours);
            if (!t->data) continue;  // q_norm/k_norm: not in a llama model
            gguf_name(ours, gname, sizeof gname);
            const GGUFTensor *gt = gguf_find_tensor(&g, gname);
            cr_assert_not_null(gt, "GGUF has no %s", gname);
            if (gt->type != GGML_Q4_1) continue;
            cr_assert_eq(t->dtype, EMX_Q4_1, "%s: %s, expected q4_1", ours, emx_dtype_name(t->dtype));
            cr_assert(gt->n_dims == 2 && gt->ne[0] == t->cols && gt->ne[1] == t->rows, "%s: shape", ours);
            float *got = malloc(t->cols * sizeof *got), *want = malloc(t->cols * sizeof *want);
            for (uint64_t row = 0; row < t->rows; row++) {
                emx_dequantize_row(t->dtype, t->data, t->rows, t->cols, row, got);
                cr_assert_eq(ggml_dequantize_rows(GGML_Q4_1, gt->data, t->cols, row, 1, want), 0);
                for (uint64_t j = 0; j < t->cols; j++)
                    if (memcmp(&got[j], &want[j], 4) != 0)
                        cr_assert_fail("%s[%llu, %llu] = %.9g, GGUF %.9g: not bit-exact", ours, (unsigned long long)row,
                                       (unsigned long long)j, got[j], want[j]);
            }
            free(got);
            free(want);
            n_q4_1++;
        }
    cr_assert_eq(n_q4_1, 7 * (int)m.cfg.n_layers, "%d Q4_1 matrices checked", n_q4_1);
    emx_model_close(&m);
    gguf_close(&g);
    run_cleanup(&r);
}
