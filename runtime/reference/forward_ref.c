// forward_ref.c — the reference forward pass: what the model computes, in plain C.
//
// Read this before the fast backends. It computes the same function as runtime/cpu/forward_cpu.c
// and runtime/cuda/forward_cuda.c, but for one token at a time, in f32, with plain loops over
// f32 copies of the weights, so that every line is the math. The fast paths are tested against
// it (tests/test_forward_ref.c) and it against independent references (../shared/testdata).
//
// Sizes (EmxConfig, base/model_format.h): dim, hidden_dim, n_layers, n_heads query heads and
// n_kv_heads key/value heads of head_dim each (q_dim = n_heads*head_dim, kv_dim =
// n_kv_heads*head_dim; head_dim need not be dim/n_heads: Qwen3), vocab. Weight matrices are
// [out, in] row-major, so W x is out[i] = sum_j W[i][j] x[j].
//
// ref_forward(token, pos), in the order the code does it:
//   x = tok_embeddings[token]                               x [dim]
//   for each layer l:
//     h = rmsnorm(x) * attn_norm                            h [dim]; rmsnorm(x) = x / sqrt(mean(x²) + eps)
//     q = Wq h, k = Wk h, v = Wv h                          q [n_heads][head_dim], k, v [n_kv_heads][head_dim]
//     Qwen3 only: q, k = rmsnorm(each head) * q_norm, k_norm    per head, over head_dim
//     q, k = rope(q, k, pos)                                rotate pairs of dims by pos * freq_i
//     key_cache[l][pos] = k, value_cache[l][pos] = v        cache [ctx][kv_dim] per layer
//     for each query head hq (kv head g = hq / (n_heads / n_kv_heads): GQA shares a kv head):
//       score[t] = q[hq] · key_cache[l][t][g] / sqrt(head_dim)   t = 0..pos   [pos+1]
//       p = softmax(score)                                  (the scores are kept for the metrics)
//       a[hq] = sum_t p[t] value_cache[l][t][g]             a [n_heads][head_dim]
//     x += Wo a                                             Wo [dim, q_dim]
//     h = rmsnorm(x) * ffn_norm
//     x += W_down (silu(W_gate h) * W_up h)                 gate, up [hidden_dim]; silu(z) = z / (1 + e^-z)
//   logits = W_out (rmsnorm(x) * norm)                      [vocab]; W_out = tok_embeddings when tied
//
// Where the architectures differ, all of it read from the config, none of it from the name:
//   Llama 2 (stories260K)  interleaved RoPE pairs (llama2.c/Meta layout), theta 10000, GQA, tied
//   Llama 3.x              rope pairs (i, i + head_dim/2) (HF layout), theta 500000, "llama3"
//                          RoPE scaling as per-frequency divisors (rope_freq_factors), tied
//                          (1B, 3B) or untied (8B) classifier
//   SmolLM2                Llama layout, theta 100000, tied
//   Qwen3                  per-head q/k RMSNorm before RoPE, head_dim independent of dim,
//                          theta 1e6
//   Qwen2 (2.5)            Llama layout plus biases on q, k, v (ext.qkv_bias)
//   Gemma 3                embedding times sqrt(dim) (ext.embed_scale); q/k norms; scores
//                          q·k * query_pre_attn_scalar^-0.5 (ext.attn_scale); a norm on each
//                          block's output before its residual add (ext.sandwich_norms: four
//                          norms a layer; every Gemma norm weight stored as 1 + w); GeGLU
//                          (ext.ffn_act); local layers attend over a sliding window of keys
//                          with their own RoPE base, global layers over every key, their
//                          RoPE optionally slowed by a linear factor (ext.rope_linear_global)
// A local layer (emx_layer_is_local) at position p sees keys max(0, p - window + 1) .. p
// (HF's sliding-window mask: kv_idx > q_idx - sliding_window); its scores of the keys before
// them are -inf.
#include "runtime/reference/forward_ref.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "base/errmsg.h"

typedef struct {
    float *attn_norm;        // [dim]
    float *wq;               // [q_dim, dim]
    float *wk, *wv;          // [kv_dim, dim]
    float *wo;               // [dim, q_dim]
    float *q_norm, *k_norm;  // [head_dim] (Qwen3), else NULL
    float *ffn_norm;         // [dim]
    float *w_gate, *w_up;    // [hidden_dim, dim]
    float *w_down;           // [dim, hidden_dim]
    float *bq, *bk, *bv;     // [q_dim], [kv_dim], [kv_dim] (ext.qkv_bias), else NULL
    float *post_attn_norm, *post_ffn_norm;  // [dim] (ext.sandwich_norms), else NULL
} RefLayer;

struct RefModel {
    EmxConfig cfg;
    EmxConfigExt ext;
    float *tok_embeddings;  // [vocab, dim]
    float *norm;            // [dim]
    float *output;          // [vocab, dim]; == tok_embeddings when cfg.tied_output (not a copy)
    double *inv_freq;       // [head_dim/2] RoPE frequency of each pair (global layers)
    double *inv_freq_local; // [head_dim/2] the local layers' (ext.sliding_window), else == inv_freq
    RefLayer *layers;       // [n_layers]
};

struct RefState {
    const RefModel *m;
    int ctx;
    int last_pos;
    float *x, *h;           // [dim] residual stream, normed input of a matmul
    float *q, *att;         // [q_dim] queries, attention output (heads concatenated)
    float *k, *v;           // [kv_dim] this position's keys and values (before they are cached)
    float *gate, *up;       // [hidden_dim]
    float *probs;           // [ctx] softmax of one head's scores
    float *scores;          // [n_layers][n_heads][ctx] pre-softmax scores of the latest position
    float *key_cache;       // [n_layers][ctx][kv_dim]
    float *value_cache;     // [n_layers][ctx][kv_dim]
    float *logits;          // [vocab]
};

// ---------------------------------------------------------------------------------------------
// Loading: every tensor to f32

// A [rows, cols] f32 copy of t, every row dequantised by base/dtype.c (the same definition of
// q8/q4/q4_1/q4_1f/bf16/f16 the converter wrote with). NULL if out of memory or t is absent.
static float *dequantize(const EmxTensor *t, size_t *bytes) {
    if (!t->data) return NULL;
    float *out = malloc(t->rows * t->cols * sizeof(float));
    if (!out) return NULL;
    for (uint64_t r = 0; r < t->rows; r++) emx_dequantize_row(t->dtype, t->data, t->rows, t->cols, r, out + r * t->cols);
    *bytes += t->rows * t->cols * sizeof(float);
    return out;
}

RefModel *ref_model_new(const EmxModel *em, char *err, size_t errlen) {
    const EmxConfig *c = &em->cfg;
    if (c->n_kv_heads == 0 || c->n_heads % c->n_kv_heads != 0 || c->head_dim == 0 || c->head_dim % 2) {
        emx_seterr(err, errlen, "reference: unsupported heads (n_heads %u, n_kv_heads %u, head_dim %u)", c->n_heads,
                   c->n_kv_heads, c->head_dim);
        return NULL;
    }
    RefModel *m = calloc(1, sizeof(*m));
    if (m) m->layers = calloc(c->n_layers, sizeof(RefLayer));
    if (m) m->inv_freq = malloc(c->head_dim / 2 * sizeof(double));
    if (m) m->inv_freq_local = malloc(c->head_dim / 2 * sizeof(double));
    if (!m || !m->layers || !m->inv_freq || !m->inv_freq_local) {
        ref_model_free(m);
        emx_seterr(err, errlen, "reference: out of memory");
        return NULL;
    }
    m->cfg = *c;
    m->ext = em->ext;
    size_t bytes = 0;
    int ok = (m->tok_embeddings = dequantize(&em->tok_embeddings, &bytes)) && (m->norm = dequantize(&em->norm, &bytes));
    // Tied: the classifier is the embedding matrix itself (logit of token t = e_t · x).
    m->output = c->tied_output ? m->tok_embeddings : dequantize(&em->output, &bytes);
    ok = ok && m->output;
    for (uint32_t l = 0; ok && l < c->n_layers; l++) {
        const EmxLayer *E = &em->layers[l];
        RefLayer *L = &m->layers[l];
        ok = (L->attn_norm = dequantize(&E->attn_norm, &bytes)) && (L->wq = dequantize(&E->wq, &bytes)) &&
             (L->wk = dequantize(&E->wk, &bytes)) && (L->wv = dequantize(&E->wv, &bytes)) &&
             (L->wo = dequantize(&E->wo, &bytes)) && (L->ffn_norm = dequantize(&E->ffn_norm, &bytes)) &&
             (L->w_gate = dequantize(&E->w_gate, &bytes)) && (L->w_up = dequantize(&E->w_up, &bytes)) &&
             (L->w_down = dequantize(&E->w_down, &bytes));
        if (ok && c->qk_norm)
            ok = (L->q_norm = dequantize(&E->q_norm, &bytes)) && (L->k_norm = dequantize(&E->k_norm, &bytes));
        if (ok && em->ext.qkv_bias)
            ok = (L->bq = dequantize(&E->bq, &bytes)) && (L->bk = dequantize(&E->bk, &bytes)) &&
                 (L->bv = dequantize(&E->bv, &bytes));
        if (ok && em->ext.sandwich_norms)
            ok = (L->post_attn_norm = dequantize(&E->post_attn_norm, &bytes)) &&
                 (L->post_ffn_norm = dequantize(&E->post_ffn_norm, &bytes));
    }
    if (!ok) {
        emx_seterr(err, errlen, "reference: out of memory (%zu MiB of f32 weights so far)", bytes >> 20);
        ref_model_free(m);
        return NULL;
    }
    // RoPE frequencies: pair i of a head turns by pos * theta^(-2i/head_dim) radians. Llama 3.x's
    // "llama3" scaling slows the low frequencies down for long contexts: the converter stores it
    // as one divisor per pair (GGUF's rope_freqs; 1 for the high frequencies, up to the scaling
    // factor for the low ones). In double, as the HF reference computes inv_freq.
    const float *factors = c->rope_freq_factors ? (const float *)em->rope_freq_factors.data : NULL;
    // Gemma 3: the local layers turn with their own base (rope_theta_local, unscaled), the global
    // ones by theta^(-2i/hd) / factor (HF's "linear" scaling divides inv_freq by the factor).
    const double local_theta = m->ext.rope_theta_local > 0 ? m->ext.rope_theta_local : c->rope_theta;
    for (uint32_t i = 0; i < c->head_dim / 2; i++) {
        m->inv_freq[i] = pow(c->rope_theta, -2.0 * i / c->head_dim) / (factors ? factors[i] : 1.0) /
                         m->ext.rope_linear_global;
        m->inv_freq_local[i] = m->ext.sliding_window ? pow(local_theta, -2.0 * i / c->head_dim) : m->inv_freq[i];
    }
    return m;
}

void ref_model_free(RefModel *m) {
    if (!m) return;
    if (m->output != m->tok_embeddings) free(m->output);
    free(m->tok_embeddings);
    free(m->norm);
    for (uint32_t l = 0; m->layers && l < m->cfg.n_layers; l++) {
        RefLayer *L = &m->layers[l];
        float *all[] = {L->attn_norm, L->wq, L->wk, L->wv, L->wo, L->q_norm, L->k_norm, L->ffn_norm, L->w_gate,
                        L->w_up, L->w_down, L->bq, L->bk, L->bv, L->post_attn_norm, L->post_ffn_norm};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
    }
    free(m->layers);
    free(m->inv_freq);
    free(m->inv_freq_local);
    free(m);
}

const EmxConfig *ref_model_config(const RefModel *m) { return &m->cfg; }

RefState *ref_state_new(const RefModel *m, int ctx, char *err, size_t errlen) {
    const EmxConfig *c = &m->cfg;
    if (ctx < 1 || (uint32_t)ctx > c->max_seq_len) {
        emx_seterr(err, errlen, "reference: ctx %d outside 1..max_seq_len %u", ctx, c->max_seq_len);
        return NULL;
    }
    RefState *s = calloc(1, sizeof(*s));
    if (!s) {
        emx_seterr(err, errlen, "reference: out of memory");
        return NULL;
    }
    const size_t dim = c->dim, q_dim = (size_t)c->n_heads * c->head_dim, kv_dim = (size_t)c->n_kv_heads * c->head_dim;
    const size_t kv = (size_t)c->n_layers * ctx * kv_dim;
    s->m = m;
    s->ctx = ctx;
    s->last_pos = -1;
    s->x = malloc(dim * sizeof(float));
    s->h = malloc(dim * sizeof(float));
    s->q = malloc(q_dim * sizeof(float));
    s->att = malloc(q_dim * sizeof(float));
    s->k = malloc(kv_dim * sizeof(float));
    s->v = malloc(kv_dim * sizeof(float));
    s->gate = malloc(c->hidden_dim * sizeof(float));
    s->up = malloc(c->hidden_dim * sizeof(float));
    s->probs = malloc((size_t)ctx * sizeof(float));
    s->scores = calloc((size_t)c->n_layers * c->n_heads * ctx, sizeof(float));
    s->key_cache = calloc(kv, sizeof(float));
    s->value_cache = calloc(kv, sizeof(float));
    s->logits = malloc(c->vocab_size * sizeof(float));
    if (!s->x || !s->h || !s->q || !s->att || !s->k || !s->v || !s->gate || !s->up || !s->probs || !s->scores ||
        !s->key_cache || !s->value_cache || !s->logits) {
        emx_seterr(err, errlen, "reference: out of memory (ctx %d: KV cache %zu MiB)", ctx, 2 * kv * sizeof(float) >> 20);
        ref_state_free(s);
        return NULL;
    }
    return s;
}

void ref_state_free(RefState *s) {
    if (!s) return;
    float *all[] = {s->x, s->h, s->q, s->att, s->k, s->v, s->gate, s->up, s->probs, s->scores, s->key_cache, s->value_cache, s->logits};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
    free(s);
}

// ---------------------------------------------------------------------------------------------
// The operations

// out = x / sqrt(mean(x²) + eps) * w; out may be x.
static void rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    float ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    const float inv = 1.0f / sqrtf(ss / n + eps);
    for (int i = 0; i < n; i++) out[i] = x[i] * inv * w[i];
}

// out [rows] = W [rows, cols] x [cols]. Rows are independent: threads share them out when the
// matrix is big enough to pay for starting them (the classifier, a real model's layers).
static void matmul(float *out, const float *W, const float *x, int rows, int cols) {
#pragma omp parallel for if ((size_t)rows * cols >= 1u << 18)
    for (int i = 0; i < rows; i++) {
        const float *w = W + (size_t)i * cols;
        float sum = 0;
        for (int j = 0; j < cols; j++) sum += w[j] * x[j];
        out[i] = sum;
    }
}

// Rotates each pair of dims of each head of v [n_heads][hd] by the angle pos * inv_freq[i].
// Which dims make pair i is the checkpoint's convention: the same model converted from a
// llama2.c/Meta or GGUF "llama" file has its q/k rows in interleaved order (2i, 2i+1), from an HF
// checkpoint in rotate-half order (i, i + hd/2); the file says which (rope_style).
static void rope(float *v, int n_heads, int hd, int style, const double *inv_freq, int pos) {
    for (int i = 0; i < hd / 2; i++) {
        // the angle in double: pos * freq in f32 is off by ~pos * 6e-8 rad, visible in the
        // logits at a few hundred positions
        const double angle = pos * inv_freq[i];
        const float c = (float)cos(angle), s = (float)sin(angle);
        const int a = style == EMX_ROPE_INTERLEAVED ? 2 * i : i;
        const int b = style == EMX_ROPE_INTERLEAVED ? 2 * i + 1 : i + hd / 2;
        for (int h = 0; h < n_heads; h++) {
            float *hv = v + (size_t)h * hd;
            const float x0 = hv[a], x1 = hv[b];
            hv[a] = x0 * c - x1 * s;
            hv[b] = x0 * s + x1 * c;
        }
    }
}

static void softmax(float *x, int n) {
    float max = x[0], sum = 0;
    for (int i = 1; i < n; i++) max = x[i] > max ? x[i] : max;  // subtracted: exp cannot overflow
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    for (int i = 0; i < n; i++) x[i] /= sum;
}

// The attention of layer l at position pos: s->q against the cached keys 0..pos, into s->att.
static void attention(RefState *s, int l, int pos) {
    const EmxConfig *c = &s->m->cfg;
    const int hd = (int)c->head_dim, kv_dim = (int)(c->n_kv_heads * c->head_dim);
    const int group = (int)(c->n_heads / c->n_kv_heads);  // query heads per kv head (GQA; 1 = MHA)
    const float *kc = s->key_cache + (size_t)l * s->ctx * kv_dim;
    const float *vc = s->value_cache + (size_t)l * s->ctx * kv_dim;
    // the keys this layer sees: all of them, or a local layer's window ending at pos
    const int first = emx_layer_is_local(&s->m->ext, (uint32_t)l) && pos >= (int)s->m->ext.sliding_window
                          ? pos - (int)s->m->ext.sliding_window + 1 : 0;
    const float scale = s->m->ext.attn_scale;  // 0: divide by sqrt(head_dim)
    for (int hq = 0; hq < (int)c->n_heads; hq++) {
        const int g = hq / group;  // consecutive query heads share a kv head (HF repeat_kv)
        const float *q = s->q + (size_t)hq * hd;
        float *score = s->scores + ((size_t)l * c->n_heads + hq) * s->ctx;
        for (int t = 0; t < first; t++) score[t] = -INFINITY;  // outside the window: no probability
        for (int t = first; t <= pos; t++) {  // causal: keys up to and including this position
            const float *k = kc + (size_t)t * kv_dim + (size_t)g * hd;
            float dot = 0;
            for (int d = 0; d < hd; d++) dot += q[d] * k[d];
            score[t] = scale > 0 ? dot * scale : dot / sqrtf((float)hd);
        }
        const int n = pos + 1 - first;
        memcpy(s->probs, score + first, (size_t)n * sizeof(float));
        softmax(s->probs, n);
        float *a = s->att + (size_t)hq * hd;
        memset(a, 0, (size_t)hd * sizeof(float));
        for (int t = first; t <= pos; t++) {
            const float *v = vc + (size_t)t * kv_dim + (size_t)g * hd;
            for (int d = 0; d < hd; d++) a[d] += s->probs[t - first] * v[d];
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The forward pass

// One layer of the pre-norm decoder on s->x at position pos.
static void layer(RefState *s, int l, int pos) {
    const EmxConfig *c = &s->m->cfg;
    const RefLayer *L = &s->m->layers[l];
    const int dim = (int)c->dim, hid = (int)c->hidden_dim, hd = (int)c->head_dim;
    const int q_dim = (int)c->n_heads * hd, kv_dim = (int)c->n_kv_heads * hd;

    // attention block: x += Wo attention(rope(Wq h), rope(Wk h), Wv h), h = rmsnorm(x)
    rmsnorm(s->h, s->x, L->attn_norm, dim, c->norm_eps);
    matmul(s->q, L->wq, s->h, q_dim, dim);
    matmul(s->k, L->wk, s->h, kv_dim, dim);
    matmul(s->v, L->wv, s->h, kv_dim, dim);
    if (L->bq) {  // Qwen2: q, k, v biases, before the q/k norms and RoPE
        for (int i = 0; i < q_dim; i++) s->q[i] += L->bq[i];
        for (int i = 0; i < kv_dim; i++) s->k[i] += L->bk[i], s->v[i] += L->bv[i];
    }
    if (c->qk_norm) {  // Qwen3: each head of q and k normalised on its own, before RoPE
        for (int h = 0; h < (int)c->n_heads; h++) rmsnorm(s->q + h * hd, s->q + h * hd, L->q_norm, hd, c->norm_eps);
        for (int h = 0; h < (int)c->n_kv_heads; h++) rmsnorm(s->k + h * hd, s->k + h * hd, L->k_norm, hd, c->norm_eps);
    }
    const double *inv_freq = emx_layer_is_local(&s->m->ext, (uint32_t)l) ? s->m->inv_freq_local : s->m->inv_freq;
    rope(s->q, (int)c->n_heads, hd, (int)c->rope_style, inv_freq, pos);
    rope(s->k, (int)c->n_kv_heads, hd, (int)c->rope_style, inv_freq, pos);
    // keys are cached after RoPE: a cached key never changes once its position is written
    memcpy(s->key_cache + ((size_t)l * s->ctx + pos) * kv_dim, s->k, (size_t)kv_dim * sizeof(float));
    memcpy(s->value_cache + ((size_t)l * s->ctx + pos) * kv_dim, s->v, (size_t)kv_dim * sizeof(float));
    attention(s, l, pos);
    matmul(s->h, L->wo, s->att, dim, q_dim);
    if (L->post_attn_norm) rmsnorm(s->h, s->h, L->post_attn_norm, dim, c->norm_eps);  // Gemma: sandwich
    for (int i = 0; i < dim; i++) s->x[i] += s->h[i];

    // feed-forward block (SwiGLU): x += W_down (silu(W_gate h) * W_up h), h = rmsnorm(x); GeGLU
    // (Gemma): gelu_tanh(z) = 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z³))) in place of silu
    rmsnorm(s->h, s->x, L->ffn_norm, dim, c->norm_eps);
    matmul(s->gate, L->w_gate, s->h, hid, dim);
    matmul(s->up, L->w_up, s->h, hid, dim);
    if (s->m->ext.ffn_act == EMX_ACT_GELU_TANH)
        for (int i = 0; i < hid; i++) {
            const float z = s->gate[i];
            s->gate[i] = 0.5f * z * (1.0f + tanhf(0.7978845608028654f * (z + 0.044715f * z * z * z))) * s->up[i];
        }
    else
        for (int i = 0; i < hid; i++) s->gate[i] = s->gate[i] / (1.0f + expf(-s->gate[i])) * s->up[i];
    matmul(s->h, L->w_down, s->gate, dim, hid);
    if (L->post_ffn_norm) rmsnorm(s->h, s->h, L->post_ffn_norm, dim, c->norm_eps);
    for (int i = 0; i < dim; i++) s->x[i] += s->h[i];
}

const float *ref_forward(RefState *s, int token, int pos) {
    const EmxConfig *c = &s->m->cfg;
    if (token < 0 || (uint32_t)token >= c->vocab_size || pos < 0 || pos >= s->ctx) return NULL;
    const int dim = (int)c->dim;
    memcpy(s->x, s->m->tok_embeddings + (size_t)token * dim, (size_t)dim * sizeof(float));
    if (s->m->ext.embed_scale != 1.0f)  // Gemma: times sqrt(dim), a float32 (HF's embed_scale)
        for (int i = 0; i < dim; i++) s->x[i] *= s->m->ext.embed_scale;
    for (int l = 0; l < (int)c->n_layers; l++) layer(s, l, pos);
    rmsnorm(s->x, s->x, s->m->norm, dim, c->norm_eps);
    matmul(s->logits, s->m->output, s->x, (int)c->vocab_size, dim);
    s->last_pos = pos;
    return s->logits;
}

const float *ref_attention_scores(const RefState *s, int *last_pos) {
    if (last_pos) *last_pos = s->last_pos;
    return s->scores;
}
