// test_convert.c — the converter against independent decodings of its sources.
//
// The converted test models (build/models/, `make test-models`) are opened with
// emx_model_open and every tensor is compared with the source tensor decoded by the test
// (test_convert_util.h): llama2.c float32 read at offsets computed from its header, safetensors
// parsed with cJSON (BF16 -> f32 by shift, F16 by ldexp), GGUF F32/F16/BF16 data. f32 outputs must be
// bit-exact; bf16 must be the round-to-nearest-even of the source; q8 must be within half a
// quantisation step of the source in every 32-weight group, q4/q4_1 groups must leave no more
// squared error than plain llama.cpp-style quantisation (computed there) would (check_quant_row).
// The ggml block dequantiser is checked against gguf-py's (tools/gen_dequant_reference.py).
// The converter binary's error paths, crafted source layouts and SmolLM2's Q4_1 GGUF repacked
// bit-exact: test_convert_cli.c.
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/dtype.h"
#include "runtime/convert/ggml_dequant.h"
#include "runtime/convert/gguf.h"
#include "runtime/model.h"
#include "test_convert_util.h"
#include "test_util.h"

// ---------------------------------------------------------------------------------------------
// f32 conversions: bit-exact.

Test(convert, stories260K_llama2c_f32_bit_exact) {
    L2c src;
    l2c_load(&src);
    EmxModel m;
    open_model(&m, "models/stories260K.f32.bin");
    cr_assert_eq(m.cfg.dim, (uint32_t)src.dim);
    cr_assert_eq(m.cfg.max_seq_len, (uint32_t)src.seq);
    Compare c = {from_l2c, &src, NULL, 0};
    int n = for_each_tensor(&m, compare_tensor, &c);
    cr_assert_eq(n, 2 + 5 * 9);
    emx_model_close(&m);
    free(src.buf);
}

// llama.cpp's GGUF of stories260K holds the same floats (q/k already interleaved: no
// permutation) and a separate copy of the embeddings as output.
Test(convert, stories260K_gguf_f32_equals_llama2c) {
    L2c src;
    l2c_load(&src);
    EmxModel m;
    open_model(&m, "models/stories260K.gguf.f32.bin");
    cr_assert_eq(m.cfg.rope_style, EMX_ROPE_INTERLEAVED);
    cr_assert_eq(m.cfg.tied_output, 0);
    cr_assert_eq(m.cfg.n_kv_heads, 4);
    cr_assert_eq(m.tok.n_vocab, 512);
    Compare c = {from_l2c, &src, NULL, 0};
    cr_assert_eq(for_each_tensor(&m, compare_tensor, &c), 3 + 5 * 9);
    emx_model_close(&m);
    free(src.buf);
}

Test(convert, qwen3_tiny_hf_f32_bit_exact) {
    StFile st;
    st_load(&st, "testdata/tiny/qwen3-tiny/hf/model.safetensors");
    EmxModel m;
    open_model(&m, "models/qwen3-tiny.f32.bin");
    const EmxConfig *cf = &m.cfg;
    cr_assert_eq(cf->arch, EMX_ARCH_QWEN3);
    cr_assert_eq(cf->qk_norm, 1);
    cr_assert_eq(cf->head_dim, 32);
    cr_assert_eq(cf->n_heads, 4);
    cr_assert_eq(cf->n_kv_heads, 2);
    cr_assert_eq(cf->vocab_size, 151936);
    cr_assert_eq(cf->rope_style, EMX_ROPE_HALF);
    cr_assert_eq(cf->rope_freq_factors, 0);
    cr_assert_eq(cf->tied_output, 1);
    cr_assert_eq(cf->max_seq_len, 40960);
    cr_assert_float_eq(cf->rope_theta, 1e6f, 1e-3);
    cr_assert_float_eq(cf->norm_eps, 1e-6f, 1e-12);
    cr_assert_eq(cf->chat_template, EMX_CHAT_QWEN3);
    Compare c = {from_st, &st, NULL, 0};
    cr_assert_eq(for_each_tensor(&m, compare_tensor, &c), 2 + 3 * 11);
    emx_model_close(&m);
    st_free(&st);
}

// The divisors llama.cpp's converter stored for this config (testdata README, 3.2).
static const float llama3_tiny_factors[8] = {1, 1, 1, 1, 3.2922626f, 32, 32, 32};

Test(convert, llama3_tiny_hf_f32_bit_exact_and_rope_factors) {
    StFile st;
    st_load(&st, "testdata/tiny/llama3-tiny/hf/model.safetensors");
    EmxModel m;
    open_model(&m, "models/llama3-tiny.f32.bin");
    const EmxConfig *cf = &m.cfg;
    cr_assert_eq(cf->arch, EMX_ARCH_LLAMA);
    cr_assert_eq(cf->qk_norm, 0);
    cr_assert_eq(cf->head_dim, 16);
    cr_assert_eq(cf->rope_style, EMX_ROPE_HALF);
    cr_assert_eq(cf->rope_freq_factors, 1);
    cr_assert_eq(cf->chat_template, EMX_CHAT_LLAMA3);
    cr_assert_float_eq(cf->rope_theta, 500000.0f, 1e-3);
    Compare c = {from_st, &st, NULL, 0};
    cr_assert_eq(for_each_tensor(&m, compare_tensor, &c), 2 + 3 * 9);
    // HF's _compute_llama3_parameters, as divisors, against llama.cpp's converter's values.
    GGUFFile g;
    gguf_load(&g, "testdata/tiny/llama3-tiny/llama3-tiny.f16.gguf");
    SrcT gf = gguf_tensor(&g, "rope_freq_factors");
    cr_assert_eq(m.rope_freq_factors.rows, 8);
    const float *f = m.rope_freq_factors.data;
    for (int i = 0; i < 8; i++) {
        float want = src_elem(gf.dtype, gf.data, (uint64_t)i);
        cr_assert_float_eq(f[i], want, 2e-6f * want, "factor %d: %.9g vs GGUF %.9g", i, f[i], want);
        cr_assert_float_eq(f[i], llama3_tiny_factors[i], 2e-6f * want, "factor %d: %.9g", i, f[i]);
    }
    gguf_close(&g);
    emx_model_close(&m);
    st_free(&st);
}

// qwen3 GGUF: NEOX rope, q/k not permuted: every tensor equals the HF one.
Test(convert, qwen3_tiny_gguf_f32_equals_hf) {
    StFile st;
    st_load(&st, "testdata/tiny/qwen3-tiny/hf/model.safetensors");
    EmxModel m;
    open_model(&m, "models/qwen3-tiny.gguf.f32.bin");
    cr_assert_eq(m.cfg.rope_style, EMX_ROPE_HALF);
    cr_assert_eq(m.cfg.qk_norm, 1);
    cr_assert_eq(m.cfg.head_dim, 32);
    cr_assert_eq(m.cfg.chat_template, EMX_CHAT_QWEN3);
    Compare c = {from_st, &st, NULL, 0};
    cr_assert_eq(for_each_tensor(&m, compare_tensor, &c), 2 + 3 * 11);
    emx_model_close(&m);
    st_free(&st);
}

// llama GGUF: llama.cpp's converter permuted q/k rows of each head from rotate-half order into
// interleaved pairs: GGUF row h*hd + 2j + t holds HF row h*hd + t*hd/2 + j.
static uint64_t unpermute_qk(const EmxModel *m, const char *name, uint64_t r) {
    size_t n = strlen(name);
    if (n < 3 || (strcmp(name + n - 3, ".wq") && strcmp(name + n - 3, ".wk"))) return r;
    uint64_t hd = m->cfg.head_dim, h = r / hd, i = r % hd, j = i / 2, t = i % 2;
    return h * hd + t * (hd / 2) + j;
}

Test(convert, llama3_tiny_gguf_f32_is_hf_permuted) {
    StFile st;
    st_load(&st, "testdata/tiny/llama3-tiny/hf/model.safetensors");
    EmxModel m;
    open_model(&m, "models/llama3-tiny.gguf.f32.bin");
    cr_assert_eq(m.cfg.rope_style, EMX_ROPE_INTERLEAVED);
    cr_assert_eq(m.cfg.rope_freq_factors, 1);
    cr_assert_eq(m.cfg.chat_template, EMX_CHAT_LLAMA3);
    Compare c = {from_st, &st, unpermute_qk, 0};
    cr_assert_eq(for_each_tensor(&m, compare_tensor, &c), 2 + 3 * 9);
    const float *f = m.rope_freq_factors.data;
    for (int i = 0; i < 8; i++) cr_assert_float_eq(f[i], llama3_tiny_factors[i], 1e-6f * llama3_tiny_factors[i]);
    // Without the permutation the comparison must fail: wq differs from HF's q_proj row order.
    const EmxTensor *wq = &m.layers[0].wq;
    SrcT s = st_tensor(&st, "layers.0.wq");
    float row1[64];
    emx_dequantize_row(wq->dtype, wq->data, wq->rows, wq->cols, 1, row1);
    cr_assert_neq(row1[0], src_elem(s.dtype, s.data, 1 * 64), "GGUF q rows look unpermuted");
    emx_model_close(&m);
    st_free(&st);
}

// The GGUF copy of llama3-tiny, read as GGUF by the test, against our conversion of the HF
// files: both decodings of the same weights (independent writer: gguf-py).
Test(convert, llama3_tiny_gguf_source_matches_conversion) {
    GGUFFile g;
    gguf_load(&g, "testdata/tiny/llama3-tiny/llama3-tiny.f16.gguf");
    EmxModel m;
    open_model(&m, "models/llama3-tiny.gguf.f32.bin");
    Compare c = {from_gguf, &g, NULL, 0};
    cr_assert_eq(for_each_tensor(&m, compare_tensor, &c), 2 + 3 * 9);
    emx_model_close(&m);
    gguf_close(&g);
}

// ---------------------------------------------------------------------------------------------
// bf16 / q8 / q4.

static void check_lossy(const char *model_rel, const char *st_rel, uint32_t dtype, uint32_t emb_dtype) {
    StFile st;
    st_load(&st, st_rel);
    EmxModel m;
    open_model(&m, model_rel);
    cr_assert_eq(m.tok_embeddings.dtype, emb_dtype, "%s: embeddings are %s", model_rel,
                 emx_dtype_name(m.tok_embeddings.dtype));
    cr_assert_eq(m.layers[0].wq.dtype, dtype);
    cr_assert_eq(m.layers[m.cfg.n_layers - 1].w_down.dtype, dtype);
    cr_assert_eq(m.layers[0].attn_norm.dtype, EMX_F32);
    Compare c = {from_st, &st, NULL, 0};
    cr_assert_gt(for_each_tensor(&m, compare_tensor, &c), 10);
    emx_model_close(&m);
    st_free(&st);
}

Test(convert, qwen3_tiny_bf16_exact) { check_lossy("models/qwen3-tiny.bf16.bin", QWEN3_ST, EMX_BF16, EMX_BF16); }
Test(convert, llama3_tiny_bf16_rounds_to_nearest_even) {
    check_lossy("models/llama3-tiny.bf16.bin", LLAMA3_ST, EMX_BF16, EMX_BF16);
}
Test(convert, qwen3_tiny_q8_within_half_step) { check_lossy("models/qwen3-tiny.q8.bin", QWEN3_ST, EMX_Q8, EMX_Q8); }
Test(convert, llama3_tiny_q8_within_half_step) { check_lossy("models/llama3-tiny.q8.bin", LLAMA3_ST, EMX_Q8, EMX_Q8); }
// q4 files keep the embeddings at q8 by default (--keep-embeddings-q8).
Test(convert, qwen3_tiny_q4_within_step) { check_lossy("models/qwen3-tiny.q4.bin", QWEN3_ST, EMX_Q4, EMX_Q8); }
Test(convert, llama3_tiny_q4_within_step) { check_lossy("models/llama3-tiny.q4.bin", LLAMA3_ST, EMX_Q4, EMX_Q8); }
Test(convert, qwen3_tiny_q4_1_beats_plain) { check_lossy("models/qwen3-tiny.q4_1.bin", QWEN3_ST, EMX_Q4_1, EMX_Q8); }
Test(convert, llama3_tiny_q4_1_beats_plain) { check_lossy("models/llama3-tiny.q4_1.bin", LLAMA3_ST, EMX_Q4_1, EMX_Q8); }

// stories260K at q8: w_down has 172 columns (not a multiple of 32) and stays f32, bit-exact.
Test(convert, stories260K_q8_keeps_odd_width_f32) {
    L2c src;
    l2c_load(&src);
    EmxModel m;
    open_model(&m, "models/stories260K.q8.bin");
    cr_assert_eq(m.layers[0].w_down.dtype, EMX_F32);
    cr_assert_eq(m.layers[0].w_gate.dtype, EMX_Q8);
    cr_assert_eq(m.tok_embeddings.dtype, EMX_Q8);
    Compare c = {from_l2c, &src, NULL, 0};
    for_each_tensor(&m, compare_tensor, &c);
    emx_model_close(&m);
    free(src.buf);
}

// ---------------------------------------------------------------------------------------------
// GGUF block formats against gguf-py's dequantize().

static void check_dequant_file(const char *type_name) {
    char p[256];
    snprintf(p, sizeof p, "tests/data/dequant/%s.bin", type_name);
    size_t len;
    char *buf = test_read_file(p, &len);
    cr_assert_not_null(buf, "cannot read %s (run the tests from the repository root)", p);
    uint32_t h[4];
    memcpy(h, buf, sizeof h);
    uint32_t type = h[0], rows = h[1], cols = h[2], row_bytes = h[3];
    cr_assert_str_eq(ggml_type_name(type), type_name);
    cr_assert_eq(ggml_row_bytes(type, cols), row_bytes);
    cr_assert_eq(len, 16 + (size_t)rows * row_bytes + (size_t)rows * cols * 4);
    const uint8_t *raw = (const uint8_t *)buf + 16;
    const uint8_t *ref = raw + (size_t)rows * row_bytes;
    float *out = malloc((size_t)rows * cols * sizeof *out);
    // All rows at once, then each row alone (row offsets).
    cr_assert_eq(ggml_dequantize_rows(type, raw, cols, 0, rows, out), 0);
    for (uint32_t i = 0; i < rows * cols; i++) {
        float want;
        memcpy(&want, ref + 4 * i, 4);
        cr_assert_float_eq(out[i], want, 1e-6f * fmaxf(1.0f, fabsf(want)), "%s element %u: %.9g vs gguf-py %.9g",
                           type_name, i, out[i], want);
    }
    cr_assert_eq(ggml_dequantize_rows(type, raw, cols, rows - 1, 1, out), 0);
    float last;
    memcpy(&last, ref + 4 * ((size_t)(rows - 1) * cols + 5), 4);
    cr_assert_float_eq(out[5], last, 1e-6f * fmaxf(1.0f, fabsf(last)));
    free(out);
    free(buf);
}

Test(convert, dequant_q4_0) { check_dequant_file("Q4_0"); }
Test(convert, dequant_q4_1) { check_dequant_file("Q4_1"); }
Test(convert, dequant_q5_0) { check_dequant_file("Q5_0"); }
Test(convert, dequant_q5_1) { check_dequant_file("Q5_1"); }
Test(convert, dequant_q8_0) { check_dequant_file("Q8_0"); }
Test(convert, dequant_q4_k) { check_dequant_file("Q4_K"); }
Test(convert, dequant_q5_k) { check_dequant_file("Q5_K"); }
Test(convert, dequant_q6_k) { check_dequant_file("Q6_K"); }

// Rows of the real SmolLM2-135M-Instruct Q4_1 GGUF (Q8_0 embeddings, Q4_1 matrices).
Test(convert, dequant_smollm2_rows) {
    const char *path = getenv("EMX_SMOLLM2_GGUF");
    if (!path || !*path) path = "weights/download/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (access(path, R_OK) != 0) cr_skip_test("%s not present (weights/ fetch script, or set EMX_SMOLLM2_GGUF)", path);
    size_t len;
    char *buf = test_read_file("tests/data/dequant/smollm2_rows.bin", &len);
    cr_assert_not_null(buf);
    uint64_t file_bytes;
    uint32_t n;
    memcpy(&file_bytes, buf, 8);
    memcpy(&n, buf + 8, 4);
    GGUFFile g;
    char err[512];
    cr_assert_eq(gguf_open(&g, path, err, sizeof err), 0, "%s", err);
    if (g.map_size != file_bytes) {
        gguf_close(&g);
        free(buf);
        cr_skip_test("%s has %zu bytes, the reference was made from a %llu-byte file", path, g.map_size,
                     (unsigned long long)file_bytes);
    }
    size_t off = 12;
    int types_seen[64] = {0};
    for (uint32_t e = 0; e < n; e++) {
        char name[65] = {0};
        uint32_t h[3];
        memcpy(name, buf + off, 64);
        memcpy(h, buf + off + 64, 12);
        off += 76;
        const GGUFTensor *t = gguf_find_tensor(&g, name);
        cr_assert_not_null(t, "%s", name);
        cr_assert_eq(t->type, h[0]);
        cr_assert_eq(t->ne[0], h[2]);
        types_seen[h[0] & 63] = 1;
        float *out = malloc(h[2] * sizeof *out);
        cr_assert_eq(ggml_dequantize_rows(t->type, t->data, h[2], h[1], 1, out), 0);
        for (uint32_t j = 0; j < h[2]; j++) {
            float want;
            memcpy(&want, buf + off + 4 * j, 4);
            cr_assert_float_eq(out[j], want, 1e-6f * fmaxf(1.0f, fabsf(want)), "%s row %u col %u: %.9g vs %.9g", name,
                               h[1], j, out[j], want);
        }
        off += 4 * (size_t)h[2];
        free(out);
    }
    cr_assert(types_seen[GGML_Q8_0] && types_seen[GGML_Q4_1]);
    gguf_close(&g);
    free(buf);
}

// ---------------------------------------------------------------------------------------------
