// test_arch.c — Qwen2 (q/k/v biases) and Gemma 3 (sandwich norms, GeGLU, embedding and attention
// scales, sliding-window local layers with their own RoPE base): the model file's version-2
// fields as convert writes them from config.json, its refusals, version-1 files still read; the
// reference forward against HuggingFace transformers (tests/data/hf/<model>/reference.json,
// tools/make_hf_reference.py: float64 top-20 logits, greedy ids); the fast CPU path against the
// reference over 63-64 positions that cross gemma3-tiny's window of 8 (decode, one prefill, a
// prefill in chunks of 5); the attention metrics of a local layer over the keys its query saw,
// against a direct computation here; the local layers' ring of KV rows.
//
// Models: build/models/{qwen2.5,gemma3}-tiny.*.bin (tests/models.mk, from the directories
// tools/make_tiny_hf.py makes).
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/cpu/cpu_state_size.h"
#include "runtime/entropix_sampler.h"
#include "runtime/forward.h"
#include "runtime/model.h"
#include "runtime/pool/pool_forward.h"
#include "runtime/reference/forward_ref.h"
#include "run_util.h"
#include "test_ref_util.h"
#include "test_util.h"

static void open_model(const char *name, EmxModel *m) {
    char path[512], rel[256], err[512];
    snprintf(rel, sizeof rel, "models/%s", name);
    test_build_path(path, sizeof path, rel);
    cr_assert(access(path, R_OK) == 0, "%s missing (make test-models converts it)", path);
    cr_assert(emx_model_open(m, path, err, sizeof err) == 0, "%s", err);
}

// ---------------------------------------------------------------------------------------------
// The file: version 2's fields from config.json, version 1 kept

Test(arch, gemma3_fields_from_config) {
    EmxModel m;
    open_model("gemma3-tiny.f32.bin", &m);
    const EmxConfigExt *e = &m.ext;
    // make_tiny_hf.py's gemma3-tiny: hidden 64, query_pre_attn_scalar 48, sliding_window 8,
    // layer_types 5 x sliding + full, rope_local_base_freq 10000, rope_theta 1e6, tied
    cr_assert_eq(m.version, 2);
    cr_assert_eq(m.cfg.arch, EMX_ARCH_GEMMA3);
    cr_assert(m.cfg.qk_norm && m.cfg.tied_output && e->sandwich_norms && !e->qkv_bias);
    cr_assert_eq(e->ffn_act, EMX_ACT_GELU_TANH);
    cr_assert_eq(e->embed_scale, 8.0f);                          // float32(64 ** 0.5)
    cr_assert_eq(e->attn_scale, 0.144337567297406f);             // 48 ** -0.5 rounded to float32
    cr_assert_eq(e->sliding_window, 8);
    for (uint32_t l = 0; l < 6; l++) cr_assert_eq(emx_layer_is_local(e, l), l < 5, "layer %u", l);
    cr_assert_eq(e->rope_theta_local, 10000.0f);
    cr_assert_eq(m.cfg.rope_theta, 1e6f);
    cr_assert_eq(e->rope_linear_global, 1.0f);
    cr_assert(m.layers[0].post_attn_norm.data && m.layers[5].post_ffn_norm.data && !m.layers[0].bq.data);
    emx_model_close(&m);
}

Test(arch, qwen2_fields_from_config) {
    EmxModel m;
    open_model("qwen2.5-tiny.q8.bin", &m);
    cr_assert_eq(m.version, 2);
    cr_assert_eq(m.cfg.arch, EMX_ARCH_QWEN2);
    cr_assert(m.ext.qkv_bias && !m.ext.sandwich_norms && !m.ext.sliding_window && !m.cfg.qk_norm);
    cr_assert(m.layers[2].bq.data && m.layers[2].bq.dtype == EMX_F32 && m.layers[2].bk.rows == 2 * 16);
    cr_assert_eq(m.ext.embed_scale, 1.0f);
    emx_model_close(&m);
}

// Every older file is still version 1 with a 160-byte header, and loads with the defaults.
Test(arch, version1_files_still_load) {
    EmxModel m;
    open_model("qwen3-tiny.f32.bin", &m);
    cr_assert_eq(m.version, 1);
    uint32_t header_bytes;
    memcpy(&header_bytes, (const char *)m.map + 12, 4);
    cr_assert_eq(header_bytes, 160);
    const EmxConfigExt d = emx_config_ext_default();
    cr_assert(memcmp(&m.ext, &d, sizeof d) == 0);
    emx_model_close(&m);
}

// The loader's checks of version 2's fields: gemma3-tiny.q8.bin with one field changed is refused
// in one line naming it (the fields are checked before the header's checksum).
static void expect_ext_refused(size_t off, uint32_t value, const char *needle) {
    char src[512], err[512], path[] = "/tmp/emx-test-arch-ext-XXXXXX";
    test_build_path(src, sizeof src, "models/gemma3-tiny.q8.bin");
    size_t len;
    char *bytes = test_read_file(src, &len);
    cr_assert(bytes && len > EMX_HEADER_V2_BYTES);
    memcpy(bytes + off, &value, 4);
    const int fd = mkstemp(path);
    cr_assert(fd >= 0 && write(fd, bytes, len) == (ssize_t)len && close(fd) == 0);
    EmxModel m;
    cr_expect_neq(emx_model_open(&m, path, err, sizeof err), 0, "%s loaded", needle);
    cr_expect(strstr(err, needle) && !strchr(err, '\n'), "want \"%s\": %s", needle, err);
    unlink(path);
    free(bytes);
}

Test(arch, loader_checks_version2_fields) {
    const size_t ext = 160;
    const float half = 0.5f;
    uint32_t half_u;
    memcpy(&half_u, &half, 4);
    expect_ext_refused(ext + offsetof(EmxConfigExt, ffn_act), 2, "config.ffn_act = 2 is not known");
    expect_ext_refused(ext + offsetof(EmxConfigExt, sandwich_norms), 3, "config.sandwich_norms = 3 is not 0 or 1");
    expect_ext_refused(ext + offsetof(EmxConfigExt, sliding_window), 40000, "config.sliding_window = 40000 exceeds max_seq_len");
    expect_ext_refused(ext + offsetof(EmxConfigExt, local_layers), 0x7f, "config.local_layers marks layer 6, past n_layers = 6");
    expect_ext_refused(ext + offsetof(EmxConfigExt, rope_linear_global), half_u, "config.rope_linear_global = 0.5 is not a number >= 1");
    expect_ext_refused(ext + offsetof(EmxConfigExt, embed_scale), 0, "config.embed_scale = 0 is not a positive number");
    expect_ext_refused(ext + offsetof(EmxConfigExt, reserved) + 4, 1, "config.ext.reserved[1] = 1 is not zero");
    expect_ext_refused(ext + offsetof(EmxConfigExt, qkv_bias), 1, "tensor layers.0.bq: missing");
    expect_ext_refused(12, 160, "header_bytes = 160, expected 352 for version 2");
}

// A copy of build/models/hf/<model>'s directory with config.json changed by `edit`, converted;
// returns the run.
static RunResult convert_model_edited(const char *model, void (*edit)(cJSON *), char *dir) {
    char src[512], path[1024], conv[512], tok[512], rel[128];
    snprintf(rel, sizeof rel, "models/hf/%s", model);
    test_build_path(src, sizeof src, rel);
    strcpy(dir, "/tmp/emx-test-arch-XXXXXX");
    cr_assert(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/config.json", src);
    cJSON *cfg = ref_load_json(path);
    edit(cfg);
    char *text = cJSON_Print(cfg);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    cr_assert(f && fputs(text, f) >= 0 && fclose(f) == 0);
    free(text);
    cJSON_Delete(cfg);
    char real[1024];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    snprintf(real, sizeof real, "%s/model.safetensors", src);
    cr_assert(realpath(real, conv) && symlink(conv, path) == 0);
    snprintf(path, sizeof path, "%s/out.bin", dir);
    const char *args[] = {dir, path, "--dtype", "f32", "--tokenizer", test_shared_path(tok, sizeof tok, "testdata/tokenizers/qwen3"), NULL};
    return run_prog(test_build_path(conv, sizeof conv, "tools/convert"), args);
}

static RunResult convert_edited(void (*edit)(cJSON *), char *dir) { return convert_model_edited("gemma3-tiny", edit, dir); }

static void cleanup(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert(system(cmd) == 0);
}

static void set(cJSON *cfg, const char *key, cJSON *v) {
    if (cJSON_GetObjectItem(cfg, key)) cJSON_ReplaceItemInObject(cfg, key, v);
    else cJSON_AddItemToObject(cfg, key, v);
}
static void softcap(cJSON *c) { set(c, "final_logit_softcapping", cJSON_CreateNumber(30)); }
static void attn_softcap(cJSON *c) { set(c, "attn_logit_softcapping", cJSON_CreateNumber(50)); }
static void yarn(cJSON *c) { set(c, "rope_scaling", cJSON_Parse("{\"rope_type\": \"yarn\", \"factor\": 8}")); }
static void chunked(cJSON *c) {
    set(c, "layer_types", cJSON_Parse("[\"sliding_attention\", \"chunked_attention\", \"sliding_attention\", "
                                      "\"sliding_attention\", \"sliding_attention\", \"full_attention\"]"));
}
static void gelu_exact(cJSON *c) { set(c, "hidden_activation", cJSON_CreateString("gelu")); }
static void bidirectional(cJSON *c) { set(c, "use_bidirectional_attention", cJSON_CreateTrue()); }

Test(arch, convert_refuses_what_it_cannot_compute, .timeout = 60) {
    const struct { void (*edit)(cJSON *); const char *needle; } cases[] = {
        {softcap, "final_logit_softcapping is set (30)"},
        {attn_softcap, "attn_logit_softcapping is set (50)"},
        {yarn, "rope_scaling type \"yarn\" of the global layers is not supported"},
        {chunked, "layer_types[1] = \"chunked_attention\" is not supported"},
        {gelu_exact, "hidden_act = \"gelu\" is not supported (gelu_pytorch_tanh)"},
        {bidirectional, "use_bidirectional_attention = true is not supported"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dir[64], out[128];
        RunResult r = convert_edited(cases[i].edit, dir);
        cr_expect_neq(r.code, 0, "case %zu converted", i);
        cr_expect(strstr(r.err, cases[i].needle) && count_lines(r.err) == 1, "case %zu: %s", i, r.err);
        snprintf(out, sizeof out, "%s/out.bin", dir);
        cr_expect(access(out, F_OK) != 0, "case %zu left an output", i);
        run_free(&r);
        cleanup(dir);
    }
}

// Gemma 3 4B and larger: the global layers' RoPE slowed by a linear factor (transformers 4's
// rope_scaling; 5's rope_parameters.full_attention say the same).
static void linear8(cJSON *c) { set(c, "rope_scaling", cJSON_Parse("{\"rope_type\": \"linear\", \"factor\": 8.0}")); }
static void linear4_v5(cJSON *c) {
    cJSON_DeleteItemFromObject(c, "rope_theta");
    cJSON_DeleteItemFromObject(c, "rope_local_base_freq");
    set(c, "rope_parameters", cJSON_Parse("{\"full_attention\": {\"rope_type\": \"linear\", \"factor\": 4.0, "
                                          "\"rope_theta\": 500000.0}, \"sliding_attention\": {\"rope_type\": "
                                          "\"default\", \"rope_theta\": 20000.0}}"));
}

Test(arch, convert_reads_linear_rope_scaling, .timeout = 60) {
    const struct { void (*edit)(cJSON *); float factor, theta, local; } cases[] = {
        {linear8, 8.0f, 1e6f, 1e4f}, {linear4_v5, 4.0f, 5e5f, 2e4f}};
    for (int i = 0; i < 2; i++) {
        char dir[64], out[128], err[512];
        RunResult r = convert_edited(cases[i].edit, dir);
        cr_assert_eq(r.code, 0, "%s", r.err);
        snprintf(out, sizeof out, "%s/out.bin", dir);
        EmxModel m;
        cr_assert(emx_model_open(&m, out, err, sizeof err) == 0, "%s", err);
        cr_expect_eq(m.ext.rope_linear_global, cases[i].factor);
        cr_expect_eq(m.cfg.rope_theta, cases[i].theta);
        cr_expect_eq(m.ext.rope_theta_local, cases[i].local);
        emx_model_close(&m);
        run_free(&r);
        cleanup(dir);
    }
}

// Qwen2 and Qwen3 configs (transformers' Qwen2Config.__post_init__): the window only with
// use_sliding_window true (default false), on layers max_window_layers.. (default 28); layer_types,
// when present, says it itself. qwen2.5-tiny has 3 layers.
static void qwen_window(cJSON *c, int use, double mwl) {
    set(c, "sliding_window", cJSON_CreateNumber(8));
    if (use >= 0) set(c, "use_sliding_window", cJSON_CreateBool(use));
    else cJSON_DeleteItemFromObject(c, "use_sliding_window");
    if (mwl >= 0) set(c, "max_window_layers", cJSON_CreateNumber(mwl));
    else cJSON_DeleteItemFromObject(c, "max_window_layers");
}
static void qwen_use_from_1(cJSON *c) { qwen_window(c, 1, 1); }
static void qwen_use_from_0(cJSON *c) { qwen_window(c, 1, 0); }
static void qwen_use_default_28(cJSON *c) { qwen_window(c, 1, -1); }
static void qwen_no_use_key(cJSON *c) { qwen_window(c, -1, 1); }
static void qwen_use_false(cJSON *c) { qwen_window(c, 0, 0); }
static void qwen_layer_types(cJSON *c) {
    qwen_window(c, 1, 2);
    set(c, "layer_types", cJSON_Parse("[\"sliding_attention\", \"full_attention\", \"sliding_attention\"]"));
}

Test(arch, convert_reads_qwen_sliding_window, .timeout = 60) {
    const struct { void (*edit)(cJSON *); uint32_t window, local; } cases[] = {
        {qwen_use_from_1, 8, 0x6},    {qwen_use_from_0, 8, 0x7},   {qwen_use_default_28, 0, 0},
        {qwen_no_use_key, 0, 0},      {qwen_use_false, 0, 0},      {qwen_layer_types, 8, 0x5},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dir[64], out[128], err[512];
        RunResult r = convert_model_edited("qwen2.5-tiny", cases[i].edit, dir);
        cr_assert_eq(r.code, 0, "case %zu: %s", i, r.err);
        snprintf(out, sizeof out, "%s/out.bin", dir);
        EmxModel m;
        cr_assert(emx_model_open(&m, out, err, sizeof err) == 0, "%s", err);
        cr_expect_eq(m.ext.sliding_window, cases[i].window, "case %zu: window %u", i, m.ext.sliding_window);
        cr_expect_eq(m.ext.local_layers[0], cases[i].local, "case %zu: local layers 0x%x", i, m.ext.local_layers[0]);
        emx_model_close(&m);
        run_free(&r);
        cleanup(dir);
    }
}

// ---------------------------------------------------------------------------------------------
// The reference against HF transformers (float32)

// Prompts "dog" (6 / 12 ids) and "chat" (32 / 31 ids, the model's chat template), then 32
// greedy steps: each step's top-20 logits within 2e-4 of HF's float64 (the tolerance of the
// qwen3-tiny references; HF's own float32 is within 4.9e-5 of it), every greedy id equal.
static const int PROMPTS[] = {1, 3};

static void ref_vs_hf(const char *model_file, const char *ref_name) {
    EmxModel m;
    open_model(model_file, &m);
    char err[512], rel[128];
    RefModel *rm = ref_model_new(&m, err, sizeof err);
    cr_assert(rm, "%s", err);
    snprintf(rel, sizeof rel, "tests/data/hf/%s/reference.json", ref_name);
    cJSON *ref = ref_load_json(rel);
    for (size_t pi = 0; pi < sizeof PROMPTS / sizeof PROMPTS[0]; pi++) {
        const cJSON *p = cJSON_GetArrayItem(cJSON_GetObjectItem(ref, "prompts"), PROMPTS[pi]);
        RefState *s = ref_state_new(rm, 64, err, sizeof err);
        cr_assert(s, "%s", err);
        int n, n_greedy;
        int *ids = ref_json_ints(cJSON_GetObjectItem(p, "ids"), &n);
        int *greedy = ref_json_ints(cJSON_GetObjectItem(p, "greedy_f64"), &n_greedy);
        const cJSON *steps = cJSON_GetObjectItem(p, "steps");
        const float *logits = NULL;
        for (int i = 0; i < n; i++) logits = ref_forward(s, ids[i], i);
        double worst = 0;
        for (int step = 0; step < n_greedy; step++) {
            const cJSON *e;
            cJSON_ArrayForEach(e, cJSON_GetObjectItem(cJSON_GetArrayItem(steps, step), "top20_f64")) {
                const int id = cJSON_GetArrayItem(e, 0)->valueint;
                const double want = cJSON_GetArrayItem(e, 1)->valuedouble, d = fabs(logits[id] - want);
                worst = fmax(worst, d);
                cr_assert(d <= 2e-4, "%s prompt %d step %d: logit[%d] = %.7g, HF %.7g", model_file, PROMPTS[pi], step,
                          id, logits[id], want);
            }
            const int tok = ref_argmax(logits, (int)m.cfg.vocab_size);
            cr_assert_eq(tok, greedy[step], "%s prompt %d step %d: %d vs HF %d", model_file, PROMPTS[pi], step, tok,
                         greedy[step]);
            logits = ref_forward(s, tok, n + step);
        }
        fprintf(stderr, "reference %s vs HF prompt %d (%d ids): top-20 x %d steps max|d| %.2g, greedy %d/%d\n",
                model_file, PROMPTS[pi], n, n_greedy, worst, n_greedy, n_greedy);
        free(ids);
        free(greedy);
        ref_state_free(s);
    }
    cJSON_Delete(ref);
    ref_model_free(rm);
    emx_model_close(&m);
}

Test(arch, reference_qwen25_vs_hf, .timeout = 120) { ref_vs_hf("qwen2.5-tiny.f32.bin", "qwen2.5-tiny"); }
Test(arch, reference_gemma3_vs_hf, .timeout = 120) { ref_vs_hf("gemma3-tiny.f32.bin", "gemma3-tiny"); }

// ---------------------------------------------------------------------------------------------
// The fast CPU path against the reference, across the window

// The "chat" prompt's ids and HF's 32 greedy ids: 64 (qwen2.5-tiny) or 63 (gemma3-tiny)
// positions; gemma3-tiny's window is 8.
static int *sequence(const char *ref_name, int *n) {
    char rel[128];
    snprintf(rel, sizeof rel, "tests/data/hf/%s/reference.json", ref_name);
    cJSON *ref = ref_load_json(rel);
    const cJSON *p = cJSON_GetArrayItem(cJSON_GetObjectItem(ref, "prompts"), 3);
    int n_ids, n_greedy;
    int *ids = ref_json_ints(cJSON_GetObjectItem(p, "ids"), &n_ids);
    int *greedy = ref_json_ints(cJSON_GetObjectItem(p, "greedy_f64"), &n_greedy);
    cr_assert(n_ids + n_greedy <= 64);
    ids = realloc(ids, (size_t)(n_ids + n_greedy) * sizeof(int));
    cr_assert(ids);
    memcpy(ids + n_ids, greedy, (size_t)n_greedy * sizeof(int));
    free(greedy);
    cJSON_Delete(ref);
    *n = n_ids + n_greedy;
    return ids;
}

#define CTX 64

// Scores of position pos, fast vs reference ([n_layers][n_heads][CTX]): a key outside a local
// layer's window is -inf in both; the others within tol. Returns the worst difference.
static double compare_scores(const EmxModel *m, const float *fast, const float *ref, int pos, double tol) {
    double worst = 0;
    for (uint32_t l = 0; l < m->cfg.n_layers; l++)
        for (uint32_t h = 0; h < m->cfg.n_heads; h++)
            for (int k = 0; k <= pos; k++) {
                const size_t i = ((size_t)l * m->cfg.n_heads + h) * CTX + k;
                const int hidden = emx_layer_is_local(&m->ext, l) && k <= pos - (int)m->ext.sliding_window;
                cr_assert_eq(isinf(ref[i]) && ref[i] < 0, hidden, "reference: layer %u key %d at %d", l, k, pos);
                if (hidden) {
                    cr_assert(isinf(fast[i]) && fast[i] < 0, "layer %u key %d at %d: %g, not -inf", l, k, pos, fast[i]);
                    continue;
                }
                worst = fmax(worst, fabs((double)fast[i] - ref[i]));
            }
    cr_assert(worst <= tol, "position %d: scores differ by %g (tol %g)", pos, worst, tol);
    return worst;
}

static double max_diff(const float *a, const float *b, int n) {
    double d = 0;
    for (int i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

// Decode token by token, one prefill, and a prefill in chunks of 5 (rows whose windows reach
// back into the previous chunk): logits within tol_logit, scores within tol_score.
static void cpu_vs_ref(const char *model_file, const char *ref_name, double tol_logit, double tol_score) {
    EmxModel m;
    open_model(model_file, &m);
    char err[512];
    RefModel *rm = ref_model_new(&m, err, sizeof err);
    cr_assert(rm, "%s", err);
    RefState *r = ref_state_new(rm, CTX, err, sizeof err);
    EmxStateOptions opt = {.n_threads = 2, .ctx = CTX};
    EmxState *s = emx_state_new(&m, &opt, err, sizeof err);
    cr_assert(r && s, "%s", err);
    int n;
    int *toks = sequence(ref_name, &n);
    const int vocab = (int)m.cfg.vocab_size;
    float *want = malloc((size_t)n * vocab * sizeof(float)), *got = malloc((size_t)n * vocab * sizeof(float));
    cr_assert(want && got);
    double dec_logit = 0, dec_score = 0, pre_logit = 0, pre_score, chunk_logit;
    for (int pos = 0; pos < n; pos++) {
        const float *rl = ref_forward(r, toks[pos], pos), *fl = emx_forward(s, &toks[pos], 1, pos);
        cr_assert(rl && fl);
        memcpy(want + (size_t)pos * vocab, rl, (size_t)vocab * sizeof(float));
        dec_logit = fmax(dec_logit, max_diff(fl, rl, vocab));
        dec_score = fmax(dec_score, compare_scores(&m, emx_attention_scores(s, NULL), ref_attention_scores(r, NULL), pos, tol_score));
    }
    cr_assert(emx_forward_all_logits(s, toks, n, 0, got) == 0);
    for (int pos = 0; pos < n; pos++) pre_logit = fmax(pre_logit, max_diff(got + (size_t)pos * vocab, want + (size_t)pos * vocab, vocab));
    pre_score = compare_scores(&m, emx_attention_scores(s, NULL), ref_attention_scores(r, NULL), n - 1, tol_score);
    const float *last = NULL;
    for (int pos = 0; pos < n; pos += 5) last = emx_forward(s, toks + pos, n - pos < 5 ? n - pos : 5, pos);
    cr_assert(last);
    chunk_logit = max_diff(last, want + (size_t)(n - 1) * vocab, vocab);
    fprintf(stderr, "cpu vs reference %-22s %d positions: max|dlogit| decode %.3g prefill %.3g chunks of 5 %.3g; "
            "max|dscore| decode %.3g prefill %.3g\n", model_file, n, dec_logit, pre_logit, chunk_logit, dec_score, pre_score);
    cr_assert(dec_logit <= tol_logit && pre_logit <= tol_logit && chunk_logit <= tol_logit,
              "%s: logits differ by %g (decode), %g (prefill), %g (chunks) (tol %g)", model_file, dec_logit, pre_logit,
              chunk_logit, tol_logit);
    free(want);
    free(got);
    free(toks);
    emx_state_free(s);
    ref_state_free(r);
    ref_model_free(rm);
    emx_model_close(&m);
}

// The tolerances of tests/test_forward_ref.c: f32 and bf16 weights 5e-4 on logits, 2e-4 on
// scores; q8 and q4 3.5 and 1.0 (the fast path's int8 activations on random weights).
Test(arch, cpu_qwen25_f32, .timeout = 120) { cpu_vs_ref("qwen2.5-tiny.f32.bin", "qwen2.5-tiny", 5e-4, 2e-4); }
Test(arch, cpu_qwen25_bf16, .timeout = 120) { cpu_vs_ref("qwen2.5-tiny.bf16.bin", "qwen2.5-tiny", 5e-4, 2e-4); }
Test(arch, cpu_qwen25_q8, .timeout = 120) { cpu_vs_ref("qwen2.5-tiny.q8.bin", "qwen2.5-tiny", 3.5, 1.0); }
Test(arch, cpu_qwen25_q4, .timeout = 120) { cpu_vs_ref("qwen2.5-tiny.q4.bin", "qwen2.5-tiny", 3.5, 1.0); }
Test(arch, cpu_gemma3_f32, .timeout = 120) { cpu_vs_ref("gemma3-tiny.f32.bin", "gemma3-tiny", 5e-4, 2e-4); }
Test(arch, cpu_gemma3_bf16, .timeout = 120) { cpu_vs_ref("gemma3-tiny.bf16.bin", "gemma3-tiny", 5e-4, 2e-4); }
Test(arch, cpu_gemma3_q8, .timeout = 120) { cpu_vs_ref("gemma3-tiny.q8.bin", "gemma3-tiny", 3.5, 1.0); }
Test(arch, cpu_gemma3_q4, .timeout = 120) { cpu_vs_ref("gemma3-tiny.q4.bin", "gemma3-tiny", 3.5, 1.0); }

// ---------------------------------------------------------------------------------------------
// The attention metrics of a local layer: over the keys its query saw

// Entropy (bits, mean over heads), agreement and interaction strength of one layer's rows
// S[h][k0..pos], computed here in double from their definitions (docs/entropix.md).
static void direct_metrics(const float *layer_scores, int n_heads, int k0, int pos, double *ent, double *agr, double *is) {
    const int n = pos + 1 - k0;
    double *a = calloc((size_t)n_heads * n, sizeof(double)), *mean = calloc((size_t)n, sizeof(double));
    cr_assert(a && mean);
    *ent = *agr = *is = 0;
    for (int h = 0; h < n_heads; h++) {
        const float *sc = layer_scores + (size_t)h * CTX + k0;
        double mx = -INFINITY, z = 0;
        for (int k = 0; k < n; k++) mx = fmax(mx, sc[k]);
        for (int k = 0; k < n; k++) z += exp(sc[k] - mx);
        for (int k = 0; k < n; k++) {
            const double p = exp(sc[k] - mx) / z;
            a[h * n + k] = p;
            mean[k] += p / n_heads;
            if (p > 0) *ent -= p * log2(p) / n_heads;
            *is += fabs(sc[k]) / ((double)n_heads * n);
        }
    }
    for (int h = 0; h < n_heads; h++)
        for (int k = 0; k < n; k++) *agr += fabs(a[h * n + k] - mean[k]) / ((double)n_heads * n);
    free(a);
    free(mean);
}

Test(arch, metrics_of_a_local_layer_are_over_its_window, .timeout = 60) {
    EmxModel m;
    open_model("gemma3-tiny.f32.bin", &m);
    char err[512];
    EmxStateOptions opt = {.n_threads = 1, .ctx = CTX};
    EmxState *s = emx_state_new(&m, &opt, err, sizeof err);
    cr_assert(s, "%s", err);
    int n;
    int *toks = sequence("gemma3-tiny", &n);
    const int pos = 19, nh = (int)m.cfg.n_heads, nl = (int)m.cfg.n_layers;
    const float *logits = emx_forward(s, toks, pos + 1, 0);
    cr_assert(logits);
    const float *scores = emx_attention_scores(s, NULL);
    double scratch[CTX];
    for (int layer = 0; layer < nl; layer++) {
        const int k0 = emx_layer_is_local(&m.ext, (uint32_t)layer) ? pos - 8 + 1 : 0;
        cr_assert_eq(emx_attention_first_key(s, layer, pos), k0, "layer %d", layer);
        EmxMetrics got;
        emx_step_metrics(s, logits, (int)m.cfg.vocab_size, nl, nh, CTX, layer, scratch, &got);
        double ent, agr, is;
        direct_metrics(scores + (size_t)layer * nh * CTX, nh, k0, pos, &ent, &agr, &is);
        cr_assert(isfinite(got.attn_entropy_bits) && isfinite(got.attn_agreement) && isfinite(got.attn_interaction_strength));
        cr_assert(fabs(got.attn_entropy_bits - ent) <= 1e-9 * fmax(1, ent), "layer %d entropy %.12g vs %.12g", layer,
                  got.attn_entropy_bits, ent);
        cr_assert(fabs(got.attn_agreement - agr) <= 1e-9, "layer %d agreement %.12g vs %.12g", layer, got.attn_agreement, agr);
        cr_assert(fabs(got.attn_interaction_strength - is) <= 1e-9 * fmax(1, is), "layer %d interaction %.12g vs %.12g",
                  layer, got.attn_interaction_strength, is);
    }
    free(toks);
    emx_state_free(s);
    emx_model_close(&m);
}

// ---------------------------------------------------------------------------------------------
// The local layers' ring of KV rows

// At ctx 1024 (prefill chunks of 256 rows) a local layer of gemma3-tiny (window 8) keeps
// 8 + 256 - 1 = 263 rows, the global layer 1024: the cache is (5 x 263 + 1024) / (6 x 1024) of
// one with every layer at full length.
Test(arch, ring_kv_cache_is_smaller) {
    EmxModel m;
    open_model("gemma3-tiny.f32.bin", &m);
    for (uint32_t l = 0; l < 6; l++) cr_assert_eq(emx_cpu_layer_rows(&m.ext, l, 1024), l < 5 ? 263 : 1024, "layer %u", l);
    cr_assert_eq(emx_cpu_layer_rows(&m.ext, 0, 200), 200, "a ring never exceeds the context");
    uint64_t full = 0;
    emx_cpu_state_bytes(&m.cfg, 1024, 1, EMX_KV_F32, &full);
    const uint64_t ring = emx_cpu_kv_cache_bytes(&m, 1024, EMX_KV_F32);
    cr_assert_eq(ring * 6 * 1024, full * (5 * 263 + 1024), "ring %llu, full %llu", (unsigned long long)ring,
                 (unsigned long long)full);
    fprintf(stderr, "gemma3-tiny KV cache at ctx 1024: %llu bytes with rings, %llu at full length\n",
            (unsigned long long)ring, (unsigned long long)full);
    emx_model_close(&m);
}

#define RING_CTX 512  // rings of 8 + 256 - 1 = 263 rows
#define RING_LEN 300  // past the ring: its rows wrap

// Logits of the fast path (calls of 10 positions, a 300-token prefill in chunks of 256 + 44, a
// rollback inside the ring) against the reference, whose cache holds every position, on a sequence longer than
// the ring; a rollback further back than the ring is refused in one line.
Test(arch, ring_cpu_equals_reference, .timeout = 120) {
    EmxModel m;
    open_model("gemma3-tiny.f32.bin", &m);
    char err[512];
    RefModel *rm = ref_model_new(&m, err, sizeof err);
    cr_assert(rm, "%s", err);
    RefState *r = ref_state_new(rm, RING_CTX, err, sizeof err);
    EmxStateOptions opt = {.n_threads = 2, .ctx = RING_CTX};
    EmxState *s = emx_state_new(&m, &opt, err, sizeof err), *p = emx_state_new(&m, &opt, err, sizeof err);
    cr_assert(r && s && p, "%s", err);
    int n;
    int *ids = sequence("gemma3-tiny", &n);
    int toks[RING_LEN];
    for (int i = 0; i < RING_LEN; i++) toks[i] = (ids[i % n] + i / n) % (int)m.cfg.vocab_size;  // each lap new
    const int vocab = (int)m.cfg.vocab_size;
    float *want_last = malloc((size_t)vocab * sizeof(float)), *at290 = malloc((size_t)vocab * sizeof(float));
    cr_assert(want_last && at290);
    // the fast path in calls of 10 positions (rows wrap inside a call at 263), each call's last
    // logits against the reference's (a classifier pass per call, not per position: 262k rows)
    double worst = 0;
    for (int pos = 0; pos < RING_LEN; pos++) {
        const float *rl = ref_forward(r, toks[pos], pos);
        cr_assert(rl);
        if (pos == 290) memcpy(at290, rl, (size_t)vocab * sizeof(float));
        if (pos == RING_LEN - 1) memcpy(want_last, rl, (size_t)vocab * sizeof(float));
        if (pos % 10 != 9) continue;
        const float *fl = emx_forward(s, &toks[pos - 9], 10, pos - 9);
        cr_assert(fl, "position %d: %s", pos, emx_state_error(s));
        worst = fmax(worst, max_diff(fl, rl, vocab));
    }
    cr_assert(worst <= 5e-4, "calls of 10: logits differ by %g", worst);
    const float *pl = emx_forward(p, toks, RING_LEN, 0);
    cr_assert(pl, "%s", emx_state_error(p));
    const double d_prefill = max_diff(pl, want_last, vocab);
    cr_assert(d_prefill <= 5e-4, "prefill: last logits differ by %g", d_prefill);
    // a rollback inside the ring: positions 290.. again
    const float *back = emx_forward(s, &toks[290], 1, 290);
    cr_assert(back, "%s", emx_state_error(s));
    const double d_back = max_diff(back, at290, vocab);
    cr_assert(d_back <= 5e-4, "rollback to 290: logits differ by %g", d_back);
    // further back than the ring holds: key 3 of position 10's window was overwritten
    cr_assert_null(emx_forward(s, &toks[10], 1, 10));
    cr_assert(strstr(emx_state_error(s), "no longer hold key 3") && !strchr(emx_state_error(s), '\n'), "%s",
              emx_state_error(s));
    fprintf(stderr, "ring (263 rows) vs reference over %d positions: calls of 10 %.3g, prefill %.3g, rollback %.3g\n",
            RING_LEN, worst, d_prefill, d_back);
    free(want_last);
    free(at290);
    free(ids);
    emx_state_free(s);
    emx_state_free(p);
    ref_state_free(r);
    ref_model_free(rm);
    emx_model_close(&m);
}

// The pool's passes over a ring: 3 lookahead branches of 4 steps after a 300-token prefix (its
// rows wrapped in a 263-row ring) equal, bitwise, each branch decoded alone after the same
// prefix (keys read as the ring's spans plus the branch's tail, or the ring alone); a committed
// branch continues as the sequence that decoded it; KV rows the ring still holds are read, older
// ones refused in one line.
Test(arch, ring_branches_equal_alone, .timeout = 120) {
    EmxModel m;
    open_model("gemma3-tiny.q8.bin", &m);
    char err[512];
    EmxStateOptions opt = {.n_threads = 2, .ctx = RING_CTX};
    EmxState *s = emx_state_new(&m, &opt, err, sizeof err), *a = emx_state_new(&m, &opt, err, sizeof err);
    cr_assert(s && a, "%s", err);
    enum { NB = 3, STEPS = 4 };
    cr_assert_eq(emx_state_branches_reserve(s, NB, STEPS, err, sizeof err), 0, "%s", err);
    int n;
    int *ids = sequence("gemma3-tiny", &n);
    int toks[RING_LEN];
    const int vocab = (int)m.cfg.vocab_size;
    for (int i = 0; i < RING_LEN; i++) toks[i] = (ids[i % n] + i / n) % vocab;
    cr_assert(emx_forward(s, toks, RING_LEN, 0) && emx_forward(a, toks, RING_LEN, 0));
    float *batched = malloc((size_t)STEPS * NB * vocab * sizeof(float));
    cr_assert(batched);
    for (int j = 0; j < STEPS; j++) {
        int bt[NB];
        for (int b = 0; b < NB; b++) bt[b] = (31 * b + 7 * j + 3) % vocab;
        cr_assert_eq(emx_forward_branches(s, bt, NB, RING_LEN, j, batched + (size_t)j * NB * vocab), 0);
    }
    for (int b = 0; b < NB; b++)
        for (int j = 0; j < STEPS; j++) {
            const int t = (31 * b + 7 * j + 3) % vocab;
            const float *lg = emx_forward(a, &t, 1, RING_LEN + j);  // j == 0: back to the prefix's end
            cr_assert(lg, "%s", emx_state_error(a));
            cr_expect(memcmp(lg, batched + ((size_t)j * NB + b) * vocab, (size_t)vocab * sizeof(float)) == 0,
                      "branch %d step %d: batched != alone", b, j);
        }
    // a (which decoded branch NB - 1 last) and s with that branch committed: the same next step
    cr_assert_eq(emx_branch_commit(s, NB - 1, STEPS, RING_LEN), 0);
    const int next = 5;
    const float *ls = emx_forward(s, &next, 1, RING_LEN + STEPS);
    cr_assert(ls, "%s", emx_state_error(s));
    float *keep = malloc((size_t)vocab * sizeof(float));
    cr_assert(keep);
    memcpy(keep, ls, (size_t)vocab * sizeof(float));
    const float *la = emx_forward(a, &next, 1, RING_LEN + STEPS);
    cr_assert(la);
    cr_expect(memcmp(keep, la, (size_t)vocab * sizeof(float)) == 0, "committed branch != decoded alone");
    void *rows = malloc(emx_state_kv_rows_bytes(s, 10));
    cr_assert(rows);
    cr_assert_eq(emx_state_kv_rows_read(s, RING_LEN - 5, 5, rows), 0);
    cr_assert_neq(emx_state_kv_rows_read(s, 0, 10, rows), 0);
    cr_assert(strstr(emx_state_error(s), "KV rows 0..9: the local layers' rings (263 rows) hold positions"), "%s",
              emx_state_error(s));
    free(rows);
    free(keep);
    free(batched);
    free(ids);
    emx_state_free(s);
    emx_state_free(a);
    emx_model_close(&m);
}
