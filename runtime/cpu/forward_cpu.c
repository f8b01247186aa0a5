// forward_cpu.c — the CPU forward pass (reference backend) of forward.h.
//
// A pre-norm decoder (Llama 2/3, SmolLM2, Qwen2/3, Gemma 3), per layer:
//   h = RMSNorm(x) * attn_norm;  q, k, v = Wq h, Wk h, Wv h;  (Qwen2: + bq, bk, bv)
//   (Qwen3, Gemma 3: RMSNorm per q/k head);  RoPE(q, k);  k, v -> KV cache
//   a = softmax(q·k * scale) v  per head, over every key or a local layer's window;  o = Wo a
//   (Gemma 3: o = RMSNorm(o) * post_attn_norm);  x += o
//   h = RMSNorm(x) * ffn_norm;  f = W_down (act(W_gate h) * W_up h), act silu or gelu_tanh
//   (Gemma 3: f = RMSNorm(f) * post_ffn_norm);  x += f
// then logits = W_out RMSNorm(x) * norm (the embedding row times ext.embed_scale going in).
// The reference (runtime/reference/forward_ref.c) says each step in plain loops.
//
// A call runs n tokens as one batch: every matrix is read once for all n rows (matrix × matrix
// during prefill, matrix × vector when decoding). Batches longer than the state's batch
// capacity are run in consecutive chunks of that size, which bounds the scratch memory.
//
// The same pass serves two other layouts of rows (RowLayout, forward_cpu_state.h): several
// states' tokens in one step (emx_forward_multi, below), and the agent pool's lookahead branches,
// whose entries (runtime/pool/pool_backend.h) are forward_cpu_branches.c.
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cpu/cpu_matmul.h"
#include "runtime/cpu/cpu_ops.h"
#include "runtime/cpu/cpu_state_size.h"
#include "base/dtype.h"
#include "base/errmsg.h"
#include "runtime/cpu/cpu_state_size.h"
#include "runtime/cpu/forward_cpu_state.h"
#include "runtime/forward_common.h"


// 1 when x[0..n) holds a NaN or an Inf (exponent all ones). Integer ops: the compiler
// vectorises the OR, so the check per layer costs about a copy of the residual stream.
static int any_nonfinite(const float *x, size_t n) {
    uint32_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, x + i, 4);
        bad |= (u & 0x7f800000u) == 0x7f800000u;
    }
    return bad != 0;
}

// Records `at` as where the values first stopped being finite, if x[0..n) did and no earlier
// stage of this call was already recorded.
static void note_nonfinite(CpuState *s, int at, const float *x, size_t n) {
    if (s->nonfinite_at == NONFINITE_NONE && any_nonfinite(x, n)) s->nonfinite_at = at;
}

static int resolve_threads(int n) { return n > 0 ? n : omp_get_num_procs(); }

// Records, for a pass over rows x [n][width], where values first stopped being finite: in the
// state of each row when the rows belong to several states, else in s.
static void note_rows(CpuState *s, const RowLayout *rows, int at, const float *x, int n, size_t width) {
    if (!rows->states) {
        note_nonfinite(s, at, x, (size_t)n * width);
        return;
    }
    for (int i = 0; i < n; i++) note_nonfinite(row_state(rows, i), at, x + (size_t)i * width, width);
}

static const EmxBackend CPU_BACKEND;
static void cpu_state_free(EmxState *st);

EmxState *emx_cpu_state_new(const EmxModel *m, const EmxStateOptions *opt, char *err, size_t errlen) {
    const EmxConfig *c = &m->cfg;
    const int ctx = emx_state_resolve_ctx(m, opt, err, errlen);
    if (ctx < 0) return NULL;
    CpuState *s = calloc(1, sizeof(*s));
    if (!s) {
        emx_seterr(err, errlen, "state: out of memory");
        return NULL;
    }
    s->m = m;
    s->ctx = ctx;
    s->n_threads = resolve_threads(opt ? opt->n_threads : 0);
    s->max_threads = s->n_threads;
    s->last_pos = -1;
    s->nonfinite_at = NONFINITE_NONE;
    s->kv_type = emx_kv_type_resolve(opt ? opt->cache_type : EMX_KV_AUTO, m, 0);
    EmxCpuStateSizes z;  // every size below, and the memory checks' figure (cpu_state_size.h)
    emx_cpu_state_sizes(c, ctx, s->n_threads, s->kv_type, &z);
    s->batch_cap = z.batch_cap;
    s->q_dim = z.q_dim;
    s->kv_dim = z.kv_dim;
    s->kv_row = z.kv_row;  // padded where a row of an even number of cache lines would alias
    s->esz = z.esz;
    s->x = malloc(z.x);
    s->xb = malloc(z.x);
    s->q = malloc(z.q);
    s->att = malloc(z.q);
    s->hb = malloc(z.hb);
    s->hb2 = malloc(z.hb);
    s->xq = malloc(z.xq);
    s->xd = malloc(z.xd);
    s->xs = malloc(z.xd);
    s->rope_cos = malloc(z.rope);
    s->rope_sin = malloc(z.rope);
    s->inv_freq = malloc(z.inv_freq);
    const int windowed = m->ext.sliding_window > 0;
    if (windowed) {
        s->inv_freq_local = malloc(z.inv_freq);
        s->rope_cos_local = malloc(z.rope);
        s->rope_sin_local = malloc(z.rope);
    }
    s->att_tmp = malloc(z.att_tmp);
    // each layer's rows: ctx, or a local layer's ring (runtime/kv_ring.h)
    s->layers = malloc(c->n_layers * sizeof *s->layers);
    const size_t kv_elems =
        s->layers ? (size_t)emx_kv_layout(&m->ext, c->n_layers, ctx, EMX_CPU_MAX_BATCH, s->layers, &s->ring) * s->kv_row
                  : 0;
    z.kv_cache = kv_elems * z.esz;
    s->key_cache = calloc(1, z.kv_cache ? z.kv_cache : 1);
    s->value_cache = calloc(1, z.kv_cache ? z.kv_cache : 1);
    // an f16 cache's rows are rounded from f32 scratch; a ring's written row by row from it
    if (s->kv_type == EMX_KV_F16 || s->ring.rows) s->kv_tmp = malloc(z.kv_tmp);
    s->att_scores = calloc(1, z.att_scores);
    s->logits = malloc(z.logits);
    if (!s->x || !s->xb || !s->q || !s->att || !s->hb || !s->hb2 || !s->xq || !s->xd || !s->xs || !s->rope_cos ||
        !s->rope_sin || !s->inv_freq || !s->att_tmp || !s->key_cache || !s->value_cache ||
        !s->att_scores || !s->logits || ((s->kv_type == EMX_KV_F16 || s->ring.rows) && !s->kv_tmp) || !s->layers ||
        (windowed && (!s->inv_freq_local || !s->rope_cos_local || !s->rope_sin_local))) {
        emx_seterr(err, errlen, "state: out of memory (ctx %d: %s KV cache %zu MiB)", ctx, emx_kv_type_name(s->kv_type),
                 2 * z.kv_cache >> 20);
        cpu_state_free(&s->base);
        return NULL;
    }
    s->base.backend = &CPU_BACKEND;
    emx_rope_inv_freq(s->inv_freq, (int)c->head_dim, c->rope_theta,
                      c->rope_freq_factors ? (const float *)m->rope_freq_factors.data : NULL);
    // linear scaling of the global layers (Gemma 3 4B+): every frequency divided by the factor
    for (uint32_t i = 0; i < c->head_dim / 2; i++) s->inv_freq[i] /= m->ext.rope_linear_global;
    if (windowed)  // the local layers: their own base, unscaled
        emx_rope_inv_freq(s->inv_freq_local, (int)c->head_dim,
                          m->ext.rope_theta_local > 0 ? m->ext.rope_theta_local : c->rope_theta, NULL);
    return &s->base;
}

static void cpu_state_free(EmxState *st) {
    CpuState *s = (CpuState *)st;
    if (!s) return;
    free(s->x);
    free(s->xb);
    free(s->q);
    free(s->att);
    free(s->hb);
    free(s->hb2);
    free(s->xq);
    free(s->xd);
    free(s->xs);
    free(s->rope_cos);
    free(s->rope_sin);
    free(s->inv_freq);
    free(s->inv_freq_local);
    free(s->rope_cos_local);
    free(s->rope_sin_local);
    free(s->att_tmp);
    free(s->key_cache);
    free(s->value_cache);
    free(s->kv_tmp);
    free(s->layers);
    free(s->kv_f32);
    free(s->att_scores);
    free(s->logits);
    free(s->br_key);
    free(s->br_value);
    free(s->mx_kv);
    free(s->mx_logits);
    free(s);
}

static int cpu_state_ctx(const EmxState *st) {
    const CpuState *s = (const CpuState *)st;
    return s->ctx;
}

static void cpu_forward_set_threads(EmxState *st, int n_threads) {
    CpuState *s = (CpuState *)st;
    // att_tmp has one row per thread of the count given at creation: never use more
    int n = resolve_threads(n_threads);
    s->n_threads = n < s->max_threads ? n : s->max_threads;
}

// The per-row work of a batch (norms, RoPE, residual adds, SwiGLU, quantisation) is split among
// the threads from this many rows on: in a prefill, work left on one thread is time the other
// threads spend waiting; for one row (decode) a fork/join would cost more than the row.
#define ROWS_PARALLEL_MIN 4

// Matmuls of the rows x [n][cols] by one or more matrices of the same input width (q/k/v,
// gate/up) in one parallel region. x is quantised to int8 once if any of them reads int8.

static void matmul(CpuState *s, const EmxMatmulJob *jobs, int n_jobs, const float *x, int n) {
    int quantise = 0;
    for (int j = 0; j < n_jobs; j++) quantise |= emx_dtype_wants_q8_acts(jobs[j].w->dtype);
    if (quantise) {
        const size_t cols = jobs[0].w->cols, ng = cols / 32;
#pragma omp parallel for num_threads(s->n_threads) if (n >= ROWS_PARALLEL_MIN)
        for (int i = 0; i < n; i++)
            emx_quantize_acts(x + i * cols, (int)cols, s->xq + i * cols, s->xd + i * ng, s->xs + i * ng);
    }
    EmxActs a = {.x = x, .xq = s->xq, .xd = s->xd, .xs = s->xs, .n = n};
    emx_matmul_multi(jobs, n_jobs, &a, s->n_threads);
}

static void matmul1(CpuState *s, float *out, const EmxTensor *w, const float *x, int n) {
    EmxMatmulJob job = {out, w, 0};
    matmul(s, &job, 1, x, n);
}

// The feed-forward block of rows xb [n][dim] (already normed): x += W_down act(W_gate xb) * (W_up xb),
// act silu (SwiGLU) or gelu_tanh (GeGLU); Gemma normalises the block's output first.
static void ffn_block(CpuState *s, const EmxLayer *L, int n) {
    const EmxModel *m = s->m;
    const EmxConfig *c = &m->cfg;
    const int dim = (int)c->dim, hid = (int)c->hidden_dim;
    const EmxMatmulJob gate_up[2] = {{s->hb, &L->w_gate, 0}, {s->hb2, &L->w_up, 0}};
    matmul(s, gate_up, 2, s->xb, n);
#pragma omp parallel for num_threads(s->n_threads) if (n >= ROWS_PARALLEL_MIN)
    for (int i = 0; i < n; i++) {
        if (m->ext.ffn_act == EMX_ACT_GELU_TANH) emx_geglu(s->hb + (size_t)i * hid, s->hb2 + (size_t)i * hid, hid);
        else emx_swiglu(s->hb + (size_t)i * hid, s->hb2 + (size_t)i * hid, hid);
    }
    matmul1(s, s->xb, &L->w_down, s->hb, n);
#pragma omp parallel for num_threads(s->n_threads) if (n >= ROWS_PARALLEL_MIN)
    for (int i = 0; i < n; i++) {
        float *xi = s->x + (size_t)i * dim, *xbi = s->xb + (size_t)i * dim;
        if (L->post_ffn_norm.data) emx_rmsnorm(xbi, xbi, L->post_ffn_norm.data, dim, c->norm_eps);
        for (int j = 0; j < dim; j++) xi[j] += xbi[j];
    }
}

// The embedding rows of tokens[0..n) into s->x (times ext.embed_scale: Gemma's sqrt(dim) as a
// float32, as HF), and each row's RoPE angles (a sliding-window model: the local layers' too).
static void embed_rows(CpuState *s, const int *tokens, int n, int pos, const RowLayout *rows) {
    const EmxModel *m = s->m;
    const int dim = (int)m->cfg.dim, half = (int)m->cfg.head_dim / 2;
#pragma omp parallel for num_threads(s->n_threads) if (n >= ROWS_PARALLEL_MIN)
    for (int i = 0; i < n; i++) {
        const EmxTensor *e = &m->tok_embeddings;
        emx_dequantize_row(e->dtype, e->data, e->rows, e->cols, (uint64_t)tokens[i], s->x + (size_t)i * dim);
        if (m->ext.embed_scale != 1.0f)
            for (int j = 0; j < dim; j++) s->x[(size_t)i * dim + j] *= m->ext.embed_scale;
        const int at = rows->states ? rows->at[i] : rows->is_branches ? pos : pos + i;
        emx_rope_angles(s->rope_cos + (size_t)i * half, s->rope_sin + (size_t)i * half, s->inv_freq, half, at);
        if (s->inv_freq_local)
            emx_rope_angles(s->rope_cos_local + (size_t)i * half, s->rope_sin_local + (size_t)i * half,
                            s->inv_freq_local, half, at);
    }
}

// Runs tokens[0..n) (n <= batch_cap) through every layer, row i at position pos + i (a
// sequence), every row at pos = prefix + step (branches) or row i at rows->at[i] of its own
// state (several states; pos unused), see RowLayout; leaves the final hidden states (before
// the last norm) in s->x. record_last: write the last row's scores (several states: every row's).
void cpu_run_layers(CpuState *s, const int *tokens, int n, int pos, const RowLayout *rows, int record_last) {
    const EmxModel *m = s->m;
    const EmxConfig *c = &m->cfg;
    const int dim = (int)c->dim, hd = (int)c->head_dim, half = hd / 2;
    const int q_dim = s->q_dim, kv_dim = s->kv_dim;

    embed_rows(s, tokens, n, pos, rows);
    note_rows(s, rows, NONFINITE_EMBEDDING, s->x, n, dim);

    for (int l = 0; l < (int)c->n_layers; l++) {
        const EmxLayer *L = &m->layers[l];
        const int local = emx_layer_is_local(&m->ext, (uint32_t)l);
        const float *rope_cos = local ? s->rope_cos_local : s->rope_cos, *rope_sin = local ? s->rope_sin_local : s->rope_sin;
        // where k and v go: rows pos..pos+n-1 of the cache (dst_row elements apart), or rows
        // 0..n-1 of the branches' tails at this step (contiguous)
        const size_t first = rows->is_branches ? ((size_t)l * s->br_tail + rows->step) * s->br_max * kv_dim
                                               : cache_at(s, l, pos);
        const size_t dst_row = rows->is_branches ? (size_t)kv_dim : (size_t)s->kv_row;
        void *kdst = kv_at(s, rows->is_branches ? s->br_key : s->key_cache, first);
        void *vdst = kv_at(s, rows->is_branches ? s->br_value : s->value_cache, first);
        // k and v are made in f32: straight in f32 rows (kv_row apart, as the matmul writes them);
        // else in scratch, then rounded into the f16 rows (below), or, several states, copied to
        // their own states' caches (below)
        // a local layer's ring: rows pos..pos+n-1 may wrap past its end, so they go through scratch too
        const int ring = !rows->is_branches && !rows->states && layer_is_ring(s, l);
        float *kc = kdst, *vc = vdst;
        size_t kc_row = dst_row;
        if (rows->states) {
            kc = s->mx_kv;
            vc = s->mx_kv + (size_t)s->mx_rows * kv_dim;
            kc_row = (size_t)kv_dim;
        } else if (s->kv_type == EMX_KV_F16 || ring) {
            kc = s->kv_tmp;
            vc = s->kv_tmp + (size_t)s->batch_cap * kv_dim;
            kc_row = (size_t)kv_dim;
        }

#pragma omp parallel for num_threads(s->n_threads) if (n >= ROWS_PARALLEL_MIN)
        for (int i = 0; i < n; i++)
            emx_rmsnorm(s->xb + (size_t)i * dim, s->x + (size_t)i * dim, L->attn_norm.data, dim, c->norm_eps);
        // q, k, v in one pass over one quantised copy of xb; k and v land in the cache directly
        const EmxMatmulJob qkv[3] = {{s->q, &L->wq, 0}, {kc, &L->wk, kc_row}, {vc, &L->wv, kc_row}};
        matmul(s, qkv, 3, s->xb, n);

#pragma omp parallel for num_threads(s->n_threads) if (n >= ROWS_PARALLEL_MIN)
        for (int i = 0; i < n; i++) {
            float *qi = s->q + (size_t)i * q_dim, *ki = kc + (size_t)i * kc_row;
            if (L->bq.data) {  // Qwen2: the q, k, v biases, before everything else
                const float *bq = L->bq.data, *bk = L->bk.data, *bv = L->bv.data;
                float *vi = vc + (size_t)i * kc_row;
                for (int j = 0; j < q_dim; j++) qi[j] += bq[j];
                for (int j = 0; j < kv_dim; j++) ki[j] += bk[j], vi[j] += bv[j];
            }
            if (c->qk_norm) {
                for (int h = 0; h < (int)c->n_heads; h++)
                    emx_rmsnorm(qi + h * hd, qi + h * hd, L->q_norm.data, hd, c->norm_eps);
                for (int h = 0; h < (int)c->n_kv_heads; h++)
                    emx_rmsnorm(ki + h * hd, ki + h * hd, L->k_norm.data, hd, c->norm_eps);
            }
            const float *cs = rope_cos + (size_t)i * half, *sn = rope_sin + (size_t)i * half;
            emx_rope(qi, (int)c->n_heads, hd, (int)c->rope_style, cs, sn);
            emx_rope(ki, (int)c->n_kv_heads, hd, (int)c->rope_style, cs, sn);
            if ((s->kv_type == EMX_KV_F16 || ring) && !rows->states) {  // the finished row into the cache or tail
                void *kd = ring ? kv_at(s, s->key_cache, cache_at(s, l, pos + i)) : kv_at(s, kdst, i * dst_row);
                void *vd = ring ? kv_at(s, s->value_cache, cache_at(s, l, pos + i)) : kv_at(s, vdst, i * dst_row);
                emx_kv_store(kd, s->kv_type, ki, kv_dim);
                emx_kv_store(vd, s->kv_type, vc + (size_t)i * kc_row, kv_dim);
            }
        }
        for (int i = 0; rows->states && i < n; i++) {  // each row's k, v into its own state's cache
            CpuState *r = row_state(rows, i);
            const size_t to = cache_at(r, l, rows->at[i]);
            emx_kv_store(kv_at(r, r->key_cache, to), r->kv_type, kc + (size_t)i * kv_dim, kv_dim);
            emx_kv_store(kv_at(r, r->value_cache, to), r->kv_type, vc + (size_t)i * kv_dim, kv_dim);
        }

        cpu_attention(s, l, n, pos, rows, record_last);
        matmul1(s, s->xb, &L->wo, s->att, n);
        // (Gemma: the block's output normed) residual, then the FFN's norm, row by row
#pragma omp parallel for num_threads(s->n_threads) if (n >= ROWS_PARALLEL_MIN)
        for (int i = 0; i < n; i++) {
            float *xi = s->x + (size_t)i * dim, *xbi = s->xb + (size_t)i * dim;
            if (L->post_attn_norm.data) emx_rmsnorm(xbi, xbi, L->post_attn_norm.data, dim, c->norm_eps);
            for (int j = 0; j < dim; j++) xi[j] += xbi[j];
            emx_rmsnorm(xbi, xi, L->ffn_norm.data, dim, c->norm_eps);
        }
        ffn_block(s, L, n);
        note_rows(s, rows, l, s->x, n, dim);
    }
}

static const RowLayout SEQUENCE = {0, 0, 0, NULL, NULL};

static int check_call(const CpuState *s, const int *tokens, int n, int pos) {
    if (n < 1 || pos < 0 || pos > s->ctx - n) return -1;
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= s->m->cfg.vocab_size) return -1;
    return 0;
}

// Final norm and classifier of rows [first, first + n) of s->x into out [n][vocab].
void cpu_classify(CpuState *s, int first, int n, float *out) {
    const EmxConfig *c = &s->m->cfg;
    const int dim = (int)c->dim;
    for (int i = 0; i < n; i++)
        emx_rmsnorm(s->xb + (size_t)i * dim, s->x + (size_t)(first + i) * dim, s->m->norm.data, dim, c->norm_eps);
    matmul1(s, out, &s->m->output, s->xb, n);
    note_nonfinite(s, (int)c->n_layers, out, (size_t)n * c->vocab_size);
}

static const char *const BAD_CALL = "a token id out of range, or positions past the context";

static const float *cpu_forward(EmxState *st, const int *tokens, int n, int pos) {
    CpuState *s = (CpuState *)st;
    if (check_call(s, tokens, n, pos)) return s->why = BAD_CALL, NULL;
    if ((s->why = emx_kv_ring_refusal(&s->ring, pos))) return NULL;
    s->nonfinite_at = NONFINITE_NONE;
    for (int done = 0; done < n;) {
        int chunk = n - done < s->batch_cap ? n - done : s->batch_cap;
        cpu_run_layers(s, tokens + done, chunk, pos + done, &SEQUENCE, done + chunk == n);
        done += chunk;
        if (done == n) cpu_classify(s, chunk - 1, 1, s->logits);  // only the last position's logits
    }
    s->last_pos = pos + n - 1;
    emx_kv_ring_wrote(&s->ring, s->last_pos);
    return s->logits;
}

static int cpu_forward_all_logits(EmxState *st, const int *tokens, int n, int pos, float *logits) {
    CpuState *s = (CpuState *)st;
    if (check_call(s, tokens, n, pos)) return s->why = BAD_CALL, -1;
    if ((s->why = emx_kv_ring_refusal(&s->ring, pos))) return -1;
    s->nonfinite_at = NONFINITE_NONE;
    const size_t vocab = s->m->cfg.vocab_size;
    for (int done = 0; done < n;) {
        int chunk = n - done < s->batch_cap ? n - done : s->batch_cap;
        cpu_run_layers(s, tokens + done, chunk, pos + done, &SEQUENCE, done + chunk == n);
        cpu_classify(s, 0, chunk, logits + (size_t)done * vocab);
        done += chunk;
    }
    memcpy(s->logits, logits + (size_t)(n - 1) * vocab, vocab * sizeof(float));
    s->last_pos = pos + n - 1;
    emx_kv_ring_wrote(&s->ring, s->last_pos);
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Several states in one pass (emx_forward_multi)

// Grows s's multi-state scratch to n rows (grow only). Returns 0, or -1 out of memory.
static int multi_reserve(CpuState *s, int n) {
    if (n <= s->mx_rows) return 0;
    float *kv = malloc(2 * (size_t)n * s->kv_dim * sizeof(float));
    float *lg = malloc((size_t)n * s->m->cfg.vocab_size * sizeof(float));
    if (!kv || !lg) return free(kv), free(lg), -1;
    free(s->mx_kv);
    free(s->mx_logits);
    s->mx_kv = kv, s->mx_logits = lg, s->mx_rows = n;
    return 0;
}

// Why states[0..n) cannot run as one pass led by s; NULL when they can.
static const char *multi_refusal(CpuState *s, EmxState *const *states, const int *tokens, const int *pos, int n) {
    if (n > s->batch_cap) return "forward_multi: more rows than the first state's batch capacity";
    for (int i = 0; i < n; i++) {
        CpuState *r = (CpuState *)states[i];
        if (r->base.backend != &CPU_BACKEND || r->m != s->m) return "forward_multi: states of different models";
        for (int j = 0; j < i; j++)
            if (states[j] == states[i]) return "forward_multi: a state given twice";
        if (check_call(r, &tokens[i], 1, pos[i]) || pos[i] >= s->ctx) return BAD_CALL;
        const char *ring = emx_kv_ring_refusal(&r->ring, pos[i]);
        if (ring) return ring;
    }
    return NULL;
}

static int cpu_forward_multi(EmxState *const *states, const int *tokens, const int *pos, int n, const float **logits) {
    CpuState *s = (CpuState *)states[0];
    const char *why = multi_refusal(s, states, tokens, pos, n);
    if (!why && multi_reserve(s, n)) why = "forward_multi: out of memory";
    if (why) return s->why = why, -1;
    for (int i = 0; i < n; i++) ((CpuState *)states[i])->nonfinite_at = NONFINITE_NONE;
    const RowLayout rows = {0, 0, 0, states, pos};
    cpu_run_layers(s, tokens, n, 0, &rows, 1);
    // the final norm and classifier of every row at once, then each row's logits to its state
    const EmxConfig *c = &s->m->cfg;
    const size_t dim = c->dim, vocab = c->vocab_size;
    for (int i = 0; i < n; i++) emx_rmsnorm(s->xb + i * dim, s->x + i * dim, s->m->norm.data, (int)dim, c->norm_eps);
    matmul1(s, s->mx_logits, &s->m->output, s->xb, n);
    note_rows(s, &rows, (int)c->n_layers, s->mx_logits, n, vocab);
    for (int i = 0; i < n; i++) {
        CpuState *r = (CpuState *)states[i];
        memcpy(r->logits, s->mx_logits + i * vocab, vocab * sizeof(float));
        r->last_pos = pos[i];
        emx_kv_ring_wrote(&r->ring, pos[i]);
        logits[i] = r->logits;
    }
    return 0;
}

static void cpu_state_kv_cache(EmxState *st, float **key, float **value, int *kv_dim) {
    CpuState *s = (CpuState *)st;
    float *k = s->key_cache, *v = s->value_cache;
    // An f16 or padded cache: f32 copies in rows of kv_dim, owned by the state, refilled on every
    // call (NULL out of memory)
    if (s->kv_type == EMX_KV_F16 || s->kv_row != s->kv_dim || s->ring.rows) {
        const size_t n = (size_t)s->m->cfg.n_layers * s->ctx * s->kv_dim;
        if (!s->kv_f32) s->kv_f32 = malloc(2 * n * sizeof(float));
        k = v = NULL;
        if (s->kv_f32) {
            cpu_kv_rows_copy(s, 0, s->ctx, s->kv_f32, KV_ROWS_READ_HELD);  // keys [n_layers][ctx][kv_dim], then values
            k = s->kv_f32, v = s->kv_f32 + n;
        }
    }
    if (key) *key = k;
    if (value) *value = v;
    if (kv_dim) *kv_dim = s->kv_dim;
}

static const float *cpu_attention_scores(const EmxState *st, int *last_pos) {
    const CpuState *s = (const CpuState *)st;
    if (last_pos) *last_pos = s->last_pos;
    return s->att_scores;
}

// buf: keys then values, each [n_layers][n][kv_dim] f32 whatever the cache's type (an f16
// cache's rows widened when read, rounded when written), so rows travel between any states.
int cpu_kv_rows_copy(CpuState *s, int pos, int n, float *buf, int to_cache) {
    if (pos < 0 || n < 0 || pos + n > s->ctx) return -1;
    // a local layer's ring holds its last ring.rows positions only: reading older ones is refused
    // (KV_ROWS_READ_HELD: read as zeros), writing more than it holds keeps the last of them
    const char *gone = to_cache == KV_ROWS_READ ? emx_kv_ring_read_refusal(&s->ring, pos, n) : NULL;
    if (gone) return s->why = gone, -1;
    const size_t kv = (size_t)s->kv_dim, row = (size_t)n * kv;
    const int layers = (int)s->m->cfg.n_layers;
    for (int l = 0; l < layers; l++)
        for (int j = 0; j < n; j++) {  // the cache's rows are kv_row apart, the buffer's kv_dim
            void *k = kv_at(s, s->key_cache, cache_at(s, l, pos + j));
            void *v = kv_at(s, s->value_cache, cache_at(s, l, pos + j));
            float *bk = buf + l * row + j * kv, *bv = buf + (layers + l) * row + j * kv;
            if (to_cache == KV_ROWS_READ_HELD && layer_is_ring(s, l) && !emx_kv_ring_has(&s->ring, pos + j)) {
                memset(bk, 0, kv * sizeof *bk);
                memset(bv, 0, kv * sizeof *bv);
            } else if (to_cache == KV_ROWS_WRITE) {
                emx_kv_store(k, s->kv_type, bk, kv);
                emx_kv_store(v, s->kv_type, bv, kv);
            } else {
                emx_kv_load(bk, k, s->kv_type, kv);
                emx_kv_load(bv, v, s->kv_type, kv);
            }
        }
    if (to_cache == KV_ROWS_WRITE && n) emx_kv_ring_wrote(&s->ring, pos + n - 1);
    return 0;
}

static const char *cpu_error(const EmxState *st) {
    const CpuState *s = (const CpuState *)st;
    return s->why ? s->why : BAD_CALL;
}

static const char *cpu_nonfinite(const EmxState *st) {
    CpuState *s = (CpuState *)st;  // the description is rebuilt in the state's own buffer
    int at = s->nonfinite_at;
    if (at == NONFINITE_NONE) return NULL;
    if (at == NONFINITE_EMBEDDING) return "the embedding";
    if (at >= (int)s->m->cfg.n_layers) return "the classifier";
    snprintf(s->nonfinite_desc, sizeof s->nonfinite_desc, "layer %d's output", at);
    return s->nonfinite_desc;
}

static void cpu_info(const EmxState *st, EmxStateInfo *info) {
    const CpuState *s = (const CpuState *)st;
    *info = (EmxStateInfo){.device = "cpu", .vocab = (int)s->m->cfg.vocab_size, .cache_type = s->kv_type,
                           .kv_cache_bytes = emx_cpu_kv_cache_bytes(s->m, s->ctx, s->kv_type),
                           .kv_ring_rows = s->ring.rows};
    snprintf(info->device_desc, sizeof info->device_desc, "%s", emx_cpu_simd_name());
}

static const EmxBackend CPU_BACKEND = {
    .name = "cpu",
    .free = cpu_state_free,
    .ctx = cpu_state_ctx,
    .set_threads = cpu_forward_set_threads,
    .error = cpu_error,
    .info = cpu_info,
    .nonfinite = cpu_nonfinite,
    .forward = cpu_forward,
    .forward_multi = cpu_forward_multi,
    .forward_all_logits = cpu_forward_all_logits,
    .attention_scores = cpu_attention_scores,
    .kv_cache = cpu_state_kv_cache,
    .pool = &emx_cpu_pool_backend,
};
