// test_api.c — the public C API (include/entropix.h) against the independent references of
// ../shared/testdata: forward logits (numpy's float64 forward of stories260K and of the tiny
// Qwen3, within the testdata README's tolerances for an f32 runtime, as tests/test_forward.c),
// attention scores (shape, stride, and layer 0's values against a double recomputation from the
// weights), the step metrics (against the plain definitions computed here), errors (a status and
// a message naming the problem), structs whose size is too small (refused before anything runs),
// two models in one process. Generation: test_api_generate.c.
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "include/entropix.h"
#include "runtime/model.h"
#include "api_test_util.h"
#include "test_ref_util.h"
#include "test_util.h"

static entropix_state *new_state(entropix_model *m, int ctx) {
    entropix_state_params sp;
    entropix_state_params_init(&sp);
    sp.ctx = ctx;
    entropix_state *s = NULL;
    cr_assert_eq(entropix_state_new(m, &sp, &s), ENTROPIX_OK, "%s", entropix_error_last());
    return s;
}

Test(api, version) {
    char want[64];
    snprintf(want, sizeof want, "%d.%d.%d", ENTROPIX_VERSION_MAJOR, ENTROPIX_VERSION_MINOR, ENTROPIX_VERSION_PATCH);
    cr_assert_str_eq(entropix_version(), want);
    cr_assert_str_eq(entropix_status_name(ENTROPIX_ERR_FILE), "file");
}

// stories260K: the five prompts' step-0 logits against numpy's (1e-4), then 20 greedy steps of
// one token each, their logits against numpy's top-10 and the greedy ids against numpy's.
Test(api, forward_stories260K_vs_numpy, .timeout = 120) {
    entropix_model *m = open_api("stories260K.f32.bin", 2);
    entropix_state *s = new_state(m, 256);
    cJSON *g = ref_load_shared_json("testdata/stories260K/golden.json");
    double worst = 0;
    int n_prompts = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItem(g, "prompts")) {
        int n, n_greedy;
        int *ids = ref_json_ints(cJSON_GetObjectItem(p, "prompt_ids"), &n);
        int *greedy = ref_json_ints(cJSON_GetObjectItem(p, "greedy_ids_numpy"), &n_greedy);
        const cJSON *ref0 = cJSON_GetObjectItem(p, "step0_logits_numpy"), *top10 = cJSON_GetObjectItem(p, "top10_per_step_numpy");
        entropix_step st = {.size = sizeof st};
        cr_assert_eq(entropix_forward(s, ids, n, 0, &st), ENTROPIX_OK, "%s", entropix_error_last());
        cr_assert_eq(st.n_vocab, 512);
        cr_assert_eq(st.pos, n - 1);
        for (int v = 0; v < st.n_vocab; v++) {
            double d = fabs(st.logits[v] - cJSON_GetArrayItem(ref0, v)->valuedouble);
            worst = fmax(worst, d);
            cr_assert(d <= 1e-4, "prompt %d logit %d off by %g", n_prompts, v, d);
        }
        for (int step = 0; step < 20; step++) {
            const cJSON *e;
            cJSON_ArrayForEach(e, cJSON_GetArrayItem(top10, step)) {
                const int id = cJSON_GetArrayItem(e, 0)->valueint;
                double d = fabs(st.logits[id] - cJSON_GetArrayItem(e, 1)->valuedouble);
                worst = fmax(worst, d);
                cr_assert(d <= 1e-4, "prompt %d step %d logit %d off by %g", n_prompts, step, id, d);
            }
            int tok = ref_argmax(st.logits, st.n_vocab);
            cr_assert_eq(tok, greedy[step], "prompt %d step %d: %d, numpy %d", n_prompts, step, tok, greedy[step]);
            cr_assert_eq(entropix_forward(s, &tok, 1, n + step, &st), ENTROPIX_OK, "%s", entropix_error_last());
        }
        free(ids);
        free(greedy);
        n_prompts++;
    }
    cr_assert_eq(n_prompts, 5);
    fprintf(stderr, "api stories260K: max |dlogit| vs numpy %.3g over 5 prompts x 21 steps\n", worst);
    cJSON_Delete(g);
    entropix_state_free(s);
    entropix_model_close(m);
}

// qwen3-tiny f32: every prompt's step-0 logits against numpy's and llama.cpp's, by
// entropix_forward_all too (its last row), within 2e-4 (<= 32 tokens) or 1e-3.
Test(api, forward_qwen3_tiny_vs_numpy, .timeout = 300) {
    entropix_model *m = open_api("qwen3-tiny.f32.bin", 2);
    entropix_state *s = new_state(m, 1024);
    cJSON *ref = ref_load_shared_json("testdata/tiny/qwen3-tiny/reference.json");
    const cJSON *prompts = cJSON_GetObjectItem(ref, "prompts");
    const int n_prompts = cJSON_GetArraySize(prompts);
    entropix_model_info info = {.size = sizeof info};
    cr_assert_eq(entropix_model_get_info(m, &info), ENTROPIX_OK);
    const int vocab = info.vocab_size;
    float *numpy0 = ref_read_shared_f32("testdata/tiny/qwen3-tiny/logits_step0.numpy.f32", (size_t)n_prompts * vocab);
    float *llama0 = ref_read_shared_f32("testdata/tiny/qwen3-tiny/logits_step0.llamacpp.f32", (size_t)n_prompts * vocab);
    for (int pi = 0; pi < n_prompts; pi++) {
        int n;
        int *ids = ref_json_ints(cJSON_GetObjectItem(cJSON_GetArrayItem(prompts, pi), "ids"), &n);
        const double tol = n <= 32 ? 2e-4 : 1e-3;
        entropix_step st = {.size = sizeof st};
        cr_assert_eq(entropix_forward(s, ids, n, 0, &st), ENTROPIX_OK, "%s", entropix_error_last());
        const double d_np = ref_max_abs_diff(st.logits, numpy0 + (size_t)pi * vocab, vocab);
        const double d_lc = ref_max_abs_diff(st.logits, llama0 + (size_t)pi * vocab, vocab);
        cr_assert(d_np <= tol && d_lc <= tol, "prompt %d: numpy %g llama.cpp %g (tol %g)", pi, d_np, d_lc, tol);
        if (n <= 64) {  // every row: the last is the step-0 row again
            float *all = malloc((size_t)n * vocab * sizeof *all);
            cr_assert_eq(entropix_forward_all(s, ids, n, 0, all), ENTROPIX_OK, "%s", entropix_error_last());
            const double d_all = ref_max_abs_diff(all + (size_t)(n - 1) * vocab, numpy0 + (size_t)pi * vocab, vocab);
            cr_assert(d_all <= tol, "prompt %d forward_all: %g", pi, d_all);
            free(all);
        }
        fprintf(stderr, "api qwen3-tiny prompt %d (%d ids): max |dlogit| numpy %.2g llama.cpp %.2g\n", pi, n, d_np, d_lc);
        free(ids);
    }
    free(numpy0);
    free(llama0);
    cJSON_Delete(ref);
    entropix_state_free(s);
    entropix_model_close(m);
}

// Layer 0's query or key vector of one head for a token at pos, recomputed in double from the
// f32 weights: RMSNorm, the head's rows, (QK-norm), RoPE.
static void head_vec_layer0(const EmxModel *m, const EmxTensor *w, const EmxTensor *hnorm, int head, int token, int pos,
                            double *out) {
    const EmxConfig *c = &m->cfg;
    const int dim = (int)c->dim, hd = (int)c->head_dim;
    cr_assert_eq(w->dtype, EMX_F32);
    const float *x = (const float *)m->tok_embeddings.data + (size_t)token * dim, *an = m->layers[0].attn_norm.data;
    double ss = 0;
    for (int i = 0; i < dim; i++) ss += (double)x[i] * x[i];
    const double inv = 1.0 / sqrt(ss / dim + c->norm_eps);
    for (int r = 0; r < hd; r++) {
        const float *row = (const float *)w->data + (size_t)(head * hd + r) * dim;
        double a = 0;
        for (int i = 0; i < dim; i++) a += (double)row[i] * (x[i] * inv * an[i]);
        out[r] = a;
    }
    if (c->qk_norm) {
        double s2 = 0;
        for (int r = 0; r < hd; r++) s2 += out[r] * out[r];
        const double iv = 1.0 / sqrt(s2 / hd + c->norm_eps);
        for (int r = 0; r < hd; r++) out[r] = out[r] * iv * ((const float *)hnorm->data)[r];
    }
    for (int i = 0; i < hd / 2; i++) {
        const double a = pos * pow(c->rope_theta, -2.0 * i / hd);
        const int ia = c->rope_style == EMX_ROPE_INTERLEAVED ? 2 * i : i;
        const int ib = c->rope_style == EMX_ROPE_INTERLEAVED ? 2 * i + 1 : i + hd / 2;
        const double x0 = out[ia], x1 = out[ib];
        out[ia] = x0 * cos(a) - x1 * sin(a);
        out[ib] = x0 * sin(a) + x1 * cos(a);
    }
}

// The attention scores of every head of layer 0 after a prompt, against the recomputation
// (1e-4 relative to 1 + |score|, as tests/test_forward.c), and the shape of every layer's.
Test(api, attention_scores_vs_recomputation, .timeout = 120) {
    char path[512];
    test_build_path(path, sizeof path, "models/qwen3-tiny.f32.bin");
    entropix_model *am = open_api("qwen3-tiny.f32.bin", 2);
    EmxModel m;
    char err[512];
    cr_assert_eq(emx_model_open(&m, path, err, sizeof err), 0, "%s", err);
    const int ctx = 64;
    entropix_state *s = new_state(am, ctx);
    int n = 0;
    int *ids = NULL;
    cr_assert_eq(entropix_prompt_tokens(am, "The capital of France is Paris, and", 35, 0, NULL, &ids, &n), ENTROPIX_OK);
    entropix_step st = {.size = sizeof st};
    cr_assert_eq(entropix_forward(s, ids, n, 0, &st), ENTROPIX_OK, "%s", entropix_error_last());
    const EmxConfig *c = &m.cfg;
    for (int layer = 0; layer < (int)c->n_layers; layer++) {
        entropix_attention a = {.size = sizeof a};
        cr_assert_eq(entropix_attention_scores(s, layer, &a), ENTROPIX_OK, "%s", entropix_error_last());
        cr_assert_eq(a.n_heads, (int)c->n_heads);
        cr_assert_eq(a.n_keys, n);
        cr_assert_eq(a.row_stride, ctx);
    }
    entropix_attention a = {.size = sizeof a};
    cr_assert_eq(entropix_attention_scores(s, 0, &a), ENTROPIX_OK);
    const int hd = (int)c->head_dim, group = (int)(c->n_heads / c->n_kv_heads);
    double *q = malloc((size_t)hd * sizeof *q), *k = malloc((size_t)hd * sizeof *k), worst = 0;
    for (int h = 0; h < a.n_heads; h++) {
        head_vec_layer0(&m, &m.layers[0].wq, &m.layers[0].q_norm, h, ids[n - 1], n - 1, q);
        for (int t = 0; t < n; t++) {
            head_vec_layer0(&m, &m.layers[0].wk, &m.layers[0].k_norm, h / group, ids[t], t, k);
            double ref = 0;
            for (int d = 0; d < hd; d++) ref += q[d] * k[d];
            ref /= sqrt((double)hd);
            const double got = a.scores[(size_t)h * a.row_stride + t];
            worst = fmax(worst, fabs(got - ref));
            cr_assert(fabs(got - ref) <= 1e-4 * (1 + fabs(ref)), "head %d key %d: %.7g vs %.7g", h, t, got, ref);
        }
    }
    fprintf(stderr, "api attention scores, qwen3-tiny layer 0, %d heads x %d keys: max |d| %.3g\n", a.n_heads, n, worst);
    free(q);
    free(k);
    entropix_free(ids);
    entropix_state_free(s);
    emx_model_close(&m);
    entropix_model_close(am);
}

// Entropy and varentropy in bits of softmax(row), the plain definitions in double.
static void plain_entropy(const float *row, int n, double *h, double *v) {
    double mx = -INFINITY, z = 0, e = 0, e2 = 0;
    for (int i = 0; i < n; i++) mx = fmax(mx, row[i]);
    for (int i = 0; i < n; i++) z += exp(row[i] - mx);
    for (int i = 0; i < n; i++) {
        const double p = exp(row[i] - mx) / z, s = -log2(p);
        e += p * s;
    }
    for (int i = 0; i < n; i++) {
        const double p = exp(row[i] - mx) / z, s = -log2(p);
        e2 += p * (s - e) * (s - e);
    }
    *h = e, *v = e2;
}

// The step metrics: the logits' entropy and varentropy, and the last layer's mean head entropy
// and the variance across heads of it, against the definitions applied to the API's own rows.
Test(api, metrics_vs_definitions, .timeout = 120) {
    entropix_model *m = open_api("stories260K.f32.bin", 1);
    entropix_state *s = new_state(m, 64);
    const int ids[] = {1, 410, 469, 347};
    entropix_step st = {.size = sizeof st};
    cr_assert_eq(entropix_forward(s, ids, 4, 0, &st), ENTROPIX_OK);
    entropix_metrics mt = {.size = sizeof mt};
    cr_assert_eq(entropix_state_metrics(s, ENTROPIX_ATTN_LAYER_LAST, &mt), ENTROPIX_OK, "%s", entropix_error_last());
    double h, v;
    plain_entropy(st.logits, st.n_vocab, &h, &v);
    cr_assert(fabs(mt.logits_entropy - h) <= 1e-9 * (1 + h), "entropy %.12g vs %.12g", mt.logits_entropy, h);
    cr_assert(fabs(mt.logits_varentropy - v) <= 1e-8 * (1 + v), "varentropy %.12g vs %.12g", mt.logits_varentropy, v);
    entropix_model_info info = {.size = sizeof info};
    entropix_model_get_info(m, &info);
    entropix_attention a = {.size = sizeof a};
    cr_assert_eq(entropix_attention_scores(s, info.n_layers - 1, &a), ENTROPIX_OK);
    double hs[64], mean = 0, var = 0;
    for (int hh = 0; hh < a.n_heads; hh++) {
        double dummy;
        plain_entropy(a.scores + (size_t)hh * a.row_stride, a.n_keys, &hs[hh], &dummy);
        mean += hs[hh] / a.n_heads;
    }
    for (int hh = 0; hh < a.n_heads; hh++) var += (hs[hh] - mean) * (hs[hh] - mean) / a.n_heads;
    cr_assert(fabs(mt.attn_entropy - mean) <= 1e-9 * (1 + mean), "attn entropy %.12g vs %.12g", mt.attn_entropy, mean);
    cr_assert(fabs(mt.attn_varentropy - var) <= 1e-9 * (1 + var), "attn varentropy %.12g vs %.12g", mt.attn_varentropy, var);
    entropix_metrics lm = {.size = sizeof lm};
    cr_assert_eq(entropix_logits_metrics(st.logits, st.n_vocab, &lm), ENTROPIX_OK);
    cr_assert(fabs(lm.logits_entropy - h) <= 1e-9 * (1 + h));
    cr_assert_eq(lm.attn_entropy, 0.0);
    fprintf(stderr, "api metrics: H %.6f bits V %.6f bits^2, attention H %.6f var %.6f\n", h, v, mean, var);
    entropix_state_free(s);
    entropix_model_close(m);
}

// A status and a message that names the problem; nothing printed, no exit.
Test(api, errors_name_the_problem, .timeout = 60) {
    entropix_model *m = NULL;
    cr_assert_eq(entropix_model_open("/nonexistent/model.bin", NULL, &m), ENTROPIX_ERR_FILE);
    cr_assert_null(m);
    cr_assert(strstr(entropix_error_last(), "/nonexistent/model.bin"), "%s", entropix_error_last());
    entropix_model_params mp;
    entropix_model_params_init(&mp);
    mp.device = "tpu:0";
    char path[512];
    test_build_path(path, sizeof path, "models/stories260K.f32.bin");
    cr_assert_eq(entropix_model_open(path, &mp, &m), ENTROPIX_ERR_DEVICE);
    cr_assert(strstr(entropix_error_last(), "tpu:0"), "%s", entropix_error_last());
    mp.device = "cuda:0";  // this suite's build: CPU-only, or no GPU seen
    if (entropix_model_open(path, &mp, &m) == ENTROPIX_OK) {
        entropix_model_close(m);  // a machine with a GPU: nothing to check here
    } else {
        cr_assert(strstr(entropix_error_last(), "cuda:0"), "%s", entropix_error_last());
    }
    m = open_api("stories260K.f32.bin", 1);
    entropix_state *s = NULL;
    entropix_state_params sp;
    entropix_state_params_init(&sp);
    sp.ctx = 100000;
    cr_assert_eq(entropix_state_new(m, &sp, &s), ENTROPIX_ERR_ARGUMENT);
    cr_assert(strstr(entropix_error_last(), "100000"), "%s", entropix_error_last());
    sp.ctx = 16, sp.cache_type = "f8";
    cr_assert_eq(entropix_state_new(m, &sp, &s), ENTROPIX_ERR_ARGUMENT);
    cr_assert(strstr(entropix_error_last(), "f8"), "%s", entropix_error_last());
    s = new_state(m, 16);
    entropix_step st = {.size = sizeof st};
    const int bad[] = {1, 512};
    cr_assert_eq(entropix_forward(s, bad, 2, 0, &st), ENTROPIX_ERR_ARGUMENT);
    cr_assert(strstr(entropix_error_last(), "id 512"), "%s", entropix_error_last());
    const int neg = -3;
    cr_assert_eq(entropix_forward(s, &neg, 1, 0, &st), ENTROPIX_ERR_ARGUMENT);
    cr_assert(strstr(entropix_error_last(), "-3"), "%s", entropix_error_last());
    const int one = 1;
    cr_assert_eq(entropix_forward(s, &one, 1, 16, &st), ENTROPIX_ERR_ARGUMENT);
    cr_assert(strstr(entropix_error_last(), "context of 16"), "%s", entropix_error_last());
    entropix_attention a = {.size = sizeof a};
    cr_assert_eq(entropix_attention_scores(s, 0, &a), ENTROPIX_ERR_ARGUMENT);  // no forward yet
    cr_assert(strstr(entropix_error_last(), "no forward"), "%s", entropix_error_last());
    cr_assert_eq(entropix_forward(s, &one, 1, 0, &st), ENTROPIX_OK);
    cr_assert_eq(entropix_attention_scores(s, 5, &a), ENTROPIX_ERR_ARGUMENT);  // 5 layers: 0..4
    cr_assert(strstr(entropix_error_last(), "layer 5"), "%s", entropix_error_last());
    entropix_sampler_params pp;
    entropix_sampler_params_init(&pp, ENTROPIX_SAMPLER_ENTROPIX);
    pp.profile = "/nonexistent/x.profile";
    entropix_sampler *smp = NULL;
    cr_assert_eq(entropix_sampler_new(&pp, &smp), ENTROPIX_ERR_FILE);
    cr_assert(strstr(entropix_error_last(), "/nonexistent/x.profile"), "%s", entropix_error_last());
    // The combined sampler's values in ./run's ranges; out of them, the value named.
    const struct { int top_k; float top_p, min_p; const char *needle; } out_of_range[] = {
        {-5, 0.9f, 0.05f, "top_k -5"}, {40, 2.0f, 0.05f, "top_p 2"}, {40, 0.9f, -1.0f, "min_p -1"}};
    for (int i = 0; i < 3; i++) {
        entropix_sampler_params_init(&pp, ENTROPIX_SAMPLER_COMBINED);
        pp.top_k = out_of_range[i].top_k, pp.top_p = out_of_range[i].top_p, pp.min_p = out_of_range[i].min_p;
        cr_expect_eq(entropix_sampler_new(&pp, &smp), ENTROPIX_ERR_ARGUMENT, "%s", out_of_range[i].needle);
        cr_expect(strstr(entropix_error_last(), out_of_range[i].needle), "%s", entropix_error_last());
    }
    int ids[4];
    size_t n_ids = 0;
    cr_assert_eq(entropix_tokenize(entropix_model_tokenizer(m), "Once upon a time", 16, ENTROPIX_TOKENIZE_BOS, ids, 2, &n_ids),
                 ENTROPIX_ERR_BUFFER);
    cr_assert_gt(n_ids, 2);
    entropix_state_free(s);
    entropix_model_close(m);
}

// A call refused for a struct's size: ENTROPIX_ERR_ARGUMENT, the struct and the size in the message.
static void expect_size_refused(int rc, const char *type, size_t size) {
    cr_assert_eq(rc, ENTROPIX_ERR_ARGUMENT, "%s of size %zu: status %d (%s)", type, size, rc, entropix_error_last());
    char want[128];
    snprintf(want, sizeof want, "size %zu is too small for %s", size, type);
    cr_assert(strstr(entropix_error_last(), want), "%s", entropix_error_last());
}

static int count_tokens(void *user, const entropix_token *t) {
    (void)t;
    ++*(int *)user;
    return 0;
}

// A result struct whose size holds no field (0: the caller never set it) is refused before
// anything runs, rather than answered with ENTROPIX_OK and nothing written; an older, shorter
// size gets the fields it holds and no more.
Test(api, result_struct_size_too_small, .timeout = 60) {
    entropix_model *m = open_api("stories260K.f32.bin", 1);
    entropix_model_info info = {.size = 0, .vocab_size = -7};
    expect_size_refused(entropix_model_get_info(m, &info), "entropix_model_info", 0);
    cr_assert_eq(info.vocab_size, -7);
    info = (entropix_model_info){.size = offsetof(entropix_model_info, dim), .dim = -7};
    cr_assert_eq(entropix_model_get_info(m, &info), ENTROPIX_OK, "%s", entropix_error_last());
    cr_assert_eq(info.vocab_size, 512);
    cr_assert_eq(info.dim, -7);  // past the caller's size: untouched
    entropix_state *s = new_state(m, 16);
    const int one = 1;
    entropix_step st = {0};
    expect_size_refused(entropix_forward(s, &one, 1, 0, &st), "entropix_step", 0);
    cr_assert_null(st.logits);
    st.size = sizeof st.size;  // the size field alone holds no result either
    expect_size_refused(entropix_forward(s, &one, 1, 0, &st), "entropix_step", sizeof st.size);
    entropix_metrics mt = {.size = sizeof mt};  // the refused forwards did not run:
    cr_assert_eq(entropix_state_metrics(s, ENTROPIX_ATTN_LAYER_LAST, &mt), ENTROPIX_ERR_ARGUMENT);
    cr_assert(strstr(entropix_error_last(), "no forward"), "%s", entropix_error_last());
    st.size = sizeof st;
    cr_assert_eq(entropix_forward(s, &one, 1, 0, &st), ENTROPIX_OK, "%s", entropix_error_last());
    entropix_attention a = {0};
    expect_size_refused(entropix_attention_scores(s, 0, &a), "entropix_attention", 0);
    cr_assert_null(a.scores);
    mt = (entropix_metrics){0};
    expect_size_refused(entropix_state_metrics(s, ENTROPIX_ATTN_LAYER_LAST, &mt), "entropix_metrics", 0);
    expect_size_refused(entropix_logits_metrics(st.logits, st.n_vocab, &mt), "entropix_metrics", 0);
    entropix_sampler_params sp;
    entropix_sampler_params_init(&sp, ENTROPIX_SAMPLER_GREEDY);
    entropix_sampler *smp = NULL;
    cr_assert_eq(entropix_sampler_new(&sp, &smp), ENTROPIX_OK, "%s", entropix_error_last());
    int n_tokens = 0;
    entropix_generate_params gp;
    entropix_generate_params_init(&gp);
    gp.max_tokens = 4, gp.on_token = count_tokens, gp.user = &n_tokens;
    entropix_generate_result res = {0};
    expect_size_refused(entropix_generate(s, smp, &one, 1, &gp, &res), "entropix_generate_result", 0);
    entropix_agents_params ap;
    entropix_agents_params_init(&ap);
    ap.n_agents = 2, ap.threads = 1, ap.ctx = 16;
    expect_size_refused(entropix_generate_agents(m, &ap, &one, 1, &gp, &res), "entropix_generate_result", 0);
    cr_assert_eq(n_tokens, 0);  // neither generation ran
    entropix_generation *g = NULL;
    cr_assert_eq(entropix_generation_begin(s, smp, &one, 1, &gp, &g), ENTROPIX_OK, "%s", entropix_error_last());
    const entropix_token *t = NULL;
    cr_assert_eq(entropix_generation_next(g, &t), ENTROPIX_OK, "%s", entropix_error_last());
    expect_size_refused(entropix_generation_result(g, &res), "entropix_generate_result", 0);
    cr_assert_eq(res.n_prompt, 0);
    entropix_generation_end(g);
    entropix_sampler_free(smp);
    entropix_state_free(s);
    entropix_model_close(m);
}

// A parameter struct short of its first version's fields, through the same check and message.
Test(api, param_struct_size_too_small, .timeout = 60) {
    entropix_model *m = open_api("qwen3-tiny.f32.bin", 1);  // a chat template: entropix_chat_render reads its params
    char path[512];
    test_build_path(path, sizeof path, "models/qwen3-tiny.f32.bin");
    entropix_model *m2 = NULL;
    entropix_model_params mp = {0};
    expect_size_refused(entropix_model_open(path, &mp, &m2), "entropix_model_params", 0);
    cr_assert_null(m2);
    entropix_state_params stp = {0};
    entropix_state *s = NULL;
    expect_size_refused(entropix_state_new(m, &stp, &s), "entropix_state_params", 0);
    cr_assert_null(s);
    entropix_sampler_params sp = {0};
    entropix_sampler *smp = NULL;
    expect_size_refused(entropix_sampler_new(&sp, &smp), "entropix_sampler_params", 0);
    cr_assert_null(smp);
    s = new_state(m, 16);
    entropix_sampler_params_init(&sp, ENTROPIX_SAMPLER_GREEDY);
    cr_assert_eq(entropix_sampler_new(&sp, &smp), ENTROPIX_OK, "%s", entropix_error_last());
    const int one = 1;
    entropix_generate_params gp = {0};
    expect_size_refused(entropix_generate(s, smp, &one, 1, &gp, NULL), "entropix_generate_params", 0);
    entropix_generation *g = NULL;
    expect_size_refused(entropix_generation_begin(s, smp, &one, 1, &gp, &g), "entropix_generate_params", 0);
    cr_assert_null(g);
    entropix_agents_params ap = {0};
    entropix_generate_params_init(&gp);
    expect_size_refused(entropix_generate_agents(m, &ap, &one, 1, &gp, NULL), "entropix_agents_params", 0);
    entropix_message msgs[] = {{"user", "Hi"}};
    entropix_chat_params cp = {0};
    char *text = NULL;
    expect_size_refused(entropix_chat_render(m, msgs, 1, &cp, &text), "entropix_chat_params", 0);
    cr_assert_null(text);
    int *ids = NULL, n_ids = 0;
    expect_size_refused(entropix_chat_tokens(m, msgs, 1, &cp, &ids, &n_ids), "entropix_chat_params", 0);
    cr_assert_null(ids);
    entropix_sampler_free(smp);
    entropix_state_free(s);
    entropix_model_close(m);
}

// Two models open at once, their states interleaved: each gives its own reference's logits.
Test(api, two_models_at_once, .timeout = 120) {
    entropix_model *a = open_api("stories260K.f32.bin", 1), *b = open_api("qwen3-tiny.f32.bin", 1);
    entropix_state *sa = new_state(a, 64), *sb = new_state(b, 64);
    cJSON *g = ref_load_shared_json("testdata/stories260K/golden.json");
    cJSON *ref = ref_load_shared_json("testdata/tiny/qwen3-tiny/reference.json");
    const cJSON *pa = cJSON_GetArrayItem(cJSON_GetObjectItem(g, "prompts"), 0);
    int na, nb;
    int *ida = ref_json_ints(cJSON_GetObjectItem(pa, "prompt_ids"), &na);
    int *idb = ref_json_ints(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(ref, "prompts"), 0), "ids"), &nb);
    entropix_model_info ib = {.size = sizeof ib};
    entropix_model_get_info(b, &ib);
    const int n_prompts = cJSON_GetArraySize(cJSON_GetObjectItem(ref, "prompts"));
    float *numpy0 = ref_read_shared_f32("testdata/tiny/qwen3-tiny/logits_step0.numpy.f32", (size_t)n_prompts * ib.vocab_size);
    entropix_step st_a = {.size = sizeof st_a}, st_b = {.size = sizeof st_b};
    for (int i = 0; i < na - 1; i++) cr_assert_eq(entropix_forward(sa, &ida[i], 1, i, &st_a), ENTROPIX_OK);
    cr_assert_eq(entropix_forward(sb, idb, nb, 0, &st_b), ENTROPIX_OK);
    cr_assert_eq(entropix_forward(sa, &ida[na - 1], 1, na - 1, &st_a), ENTROPIX_OK);
    const cJSON *ref0 = cJSON_GetObjectItem(pa, "step0_logits_numpy");
    for (int v = 0; v < st_a.n_vocab; v++)
        cr_assert(fabs(st_a.logits[v] - cJSON_GetArrayItem(ref0, v)->valuedouble) <= 1e-4, "stories logit %d", v);
    const double d = ref_max_abs_diff(st_b.logits, numpy0, ib.vocab_size);  // still valid: b's own memory
    cr_assert(d <= 2e-4, "qwen3-tiny step 0 off by %g", d);
    free(ida);
    free(idb);
    free(numpy0);
    cJSON_Delete(g);
    cJSON_Delete(ref);
    entropix_state_free(sa);
    entropix_state_free(sb);
    entropix_model_close(a);
    entropix_model_close(b);
}
