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

static CpuState *row_state(const RowLayout *rows, int i) { return (CpuState *)rows->states[i]; }

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
    s->key_cache = calloc(1, z.kv_cache);
    s->value_cache = calloc(1, z.kv_cache);
    if (s->kv_type == EMX_KV_F16) s->kv_tmp = malloc(z.kv_tmp);
    s->att_scores = calloc(1, z.att_scores);
    s->logits = malloc(z.logits);
    if (!s->x || !s->xb || !s->q || !s->att || !s->hb || !s->hb2 || !s->xq || !s->xd || !s->xs || !s->rope_cos ||
        !s->rope_sin || !s->inv_freq || !s->att_tmp || !s->key_cache || !s->value_cache ||
        !s->att_scores || !s->logits || (s->kv_type == EMX_KV_F16 && !s->kv_tmp) ||
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

// The keys of spans[0..n_spans) without their first `skip` ones, into out; returns the spans left.
static int spans_skip(const EmxKeySpan *spans, int n_spans, int skip, EmxKeySpan *out) {
    int n = 0;
    for (int i = 0; i < n_spans; i++) {
        EmxKeySpan sp = spans[i];
        if (skip >= sp.n) {
            skip -= sp.n;
            continue;
        }
        const size_t by = (size_t)skip * sp.stride;
        if (sp.k) sp.k += by, sp.v += by;
        else sp.k16 += by, sp.v16 += by;
        sp.n -= skip, skip = 0;
        out[n++] = sp;
    }
    return n;
}

// A local layer's queries, when one of them sees more than `window` keys: each alone over its
// last `window` keys (scores of the keys before them -inf: they take no probability). Returns 0
// when every query sees at most `window` keys (nothing done: the shared pass is exact).
static int window_attention(const EmxAttnQuery *qs, int m, const EmxKeySpan *spans, int n_spans, int hd, float scale,
                            int window) {
    int over = 0;
    for (int j = 0; j < m && window; j++) over |= qs[j].n_keys > window;
    if (!over) return 0;
    for (int j = 0; j < m; j++) {
        const int first = qs[j].n_keys > window ? qs[j].n_keys - window : 0;
        EmxKeySpan shifted[2];
        const int ns = spans_skip(spans, n_spans, first, shifted);
        EmxAttnQuery q = qs[j];
        for (int t = 0; t < first; t++) q.scores[t] = -INFINITY;
        q.scores += first, q.probs += first, q.n_keys -= first;
        emx_attention_group_spans(&q, 1, shifted, ns, hd, scale);
    }
    return 1;
}

static void attention(CpuState *s, int layer, int n, int pos, const RowLayout *rows, int record_last) {
    const EmxConfig *c = &s->m->cfg;
    const int hd = (int)c->head_dim, n_heads = (int)c->n_heads, n_kv = (int)c->n_kv_heads, ctx = s->ctx;
    const int group = n_heads / n_kv;  // query heads per kv head
    const float scale = s->m->ext.attn_scale > 0 ? s->m->ext.attn_scale : 1.0f / sqrtf((float)hd);
    // a local layer's query sees at most the last `window` of its keys (0: all of them)
    const int window = emx_layer_is_local(&s->m->ext, (uint32_t)layer) ? (int)s->m->ext.sliding_window : 0;
    const size_t layer0 = cache_at(s, layer, 0);  // the layer's first cache element
    // The queries of kv head kvh, u = row * group + head in the group, go by tasks of `per`
    // consecutive ones that share one pass over the keys (read from memory once, not once per
    // query). A prefill with enough tasks: 32 queries, several rows (Qwen3: 16 rows x 2 heads),
    // each seeing its own keys (row i: pos + i + 1): every task reads its keys again, so fewer
    // tasks pay (pp512 -t 2, Qwen3 with unpadded cache rows: 8 queries a task 321-330 tok/s, 32
    // queries 337-362). Branches (every row its own tail): the group's heads of one row. Few
    // tasks (decode): one query each, to balance the threads. Each query's bits are those of the
    // query alone with its own keys (emx_attention_group_spans), so the tasks change no result.
    // Tasks go kv head by kv head, so that a thread's next task reads the same keys and values,
    // from L2 where they fit.
    const int n_q = n * group;  // queries per kv head
    const int own_keys = rows->is_branches || rows->states;  // every row its own keys: a task per row at most
    const int by_rows = !own_keys && n_kv * ((n_q + PASS - 1) / PASS) >= 4 * s->n_threads;
    const int per = by_rows ? PASS : n * n_kv >= 4 * s->n_threads ? group : 1;
    const int chunks = (n_q + per - 1) / per, tasks = n_kv * chunks;
    int keys = rows->is_branches ? rows->prefix + rows->step + 1 : pos + n;  // most keys of a row
    if (rows->states) {
        keys = 0;
        for (int i = 0; i < n; i++) keys = rows->at[i] + 1 > keys ? rows->at[i] + 1 : keys;
    }
    // multiply-adds of q·k and p·v; at short contexts a parallel region costs more than it saves
    const int64_t work = (int64_t)n * n_heads * keys * hd * 2;
#pragma omp parallel for num_threads(s->n_threads) schedule(dynamic, 1) if (work > 32768)
    for (int task = 0; task < tasks; task++) {
        const int kvh = task / chunks, u0 = task % chunks * per, u1 = u0 + per < n_q ? u0 + per : n_q;
        float *tmp = s->att_tmp + (size_t)omp_get_thread_num() * PASS * ctx;
        // the keys of the task's last row (the most); the rows before see fewer of them
        const int last_row = (u1 - 1) / group;
        EmxKeySpan spans[2] = {emx_key_span(s->key_cache, s->value_cache, s->kv_type, layer0 + (size_t)kvh * hd,
                                            (size_t)s->kv_row, pos + last_row + 1)};
        int n_spans = 1;
        if (rows->is_branches) {  // the shared prefix, then the branch's own rows 0..step (one row per task)
            const size_t tail_row = (size_t)s->br_max * s->kv_dim;  // one step of every branch
            const size_t first =
                (size_t)layer * s->br_tail * tail_row + (size_t)last_row * s->kv_dim + (size_t)kvh * hd;
            spans[0].n = rows->prefix;
            spans[1] = emx_key_span(s->br_key, s->br_value, s->kv_type, first, tail_row, rows->step + 1);
            n_spans = 2;
        } else if (rows->states) {  // the row's own state's cache (one row per task)
            const CpuState *r = row_state(rows, last_row);
            const size_t first = cache_at(r, layer, 0) + (size_t)kvh * hd;
            spans[0] = emx_key_span(r->key_cache, r->value_cache, r->kv_type, first, (size_t)r->kv_row, rows->at[last_row] + 1);
        }
        for (int v0 = u0; v0 < u1; v0 += PASS) {
            EmxAttnQuery qs[PASS];
            const int m = u1 - v0 < PASS ? u1 - v0 : PASS;
            for (int j = 0; j < m; j++) {
                const int i = (v0 + j) / group, h = kvh * group + (v0 + j) % group;
                float *probs = tmp + (size_t)j * ctx;
                // the last row's scores go straight into the persistent buffer the samplers read;
                // with several states, every row's into its own state's
                float *scores = record_last && i == n - 1 ? s->att_scores + ((size_t)layer * n_heads + h) * ctx : probs;
                int n_keys = rows->is_branches ? rows->prefix + rows->step + 1 : pos + i + 1;
                if (rows->states) {
                    CpuState *r = row_state(rows, i);
                    scores = r->att_scores + ((size_t)layer * n_heads + h) * r->ctx;
                    n_keys = rows->at[i] + 1;
                }
                qs[j] = (EmxAttnQuery){s->q + (size_t)i * s->q_dim + (size_t)h * hd,
                                       s->att + (size_t)i * s->q_dim + (size_t)h * hd, scores, probs, n_keys};
            }
            if (window_attention(qs, m, spans, n_spans, hd, scale, window)) continue;
            emx_attention_group_spans(qs, m, spans, n_spans, hd, scale);
        }
    }
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

// Runs tokens[0..n) (n <= batch_cap) through every layer, row i at position pos + i (a
// sequence), every row at pos = prefix + step (branches) or row i at rows->at[i] of its own
// state (several states; pos unused), see RowLayout; leaves the final hidden states (before
// the last norm) in s->x. record_last: write the last row's scores (several states: every row's).
void cpu_run_layers(CpuState *s, const int *tokens, int n, int pos, const RowLayout *rows, int record_last) {
    const EmxModel *m = s->m;
    const EmxConfig *c = &m->cfg;
    const int dim = (int)c->dim, hd = (int)c->head_dim, half = hd / 2;
    const int q_dim = s->q_dim, kv_dim = s->kv_dim;

#pragma omp parallel for num_threads(s->n_threads) if (n >= ROWS_PARALLEL_MIN)
    for (int i = 0; i < n; i++) {
        const EmxTensor *e = &m->tok_embeddings;
        emx_dequantize_row(e->dtype, e->data, e->rows, e->cols, (uint64_t)tokens[i], s->x + (size_t)i * dim);
        if (m->ext.embed_scale != 1.0f)  // Gemma: times sqrt(dim) as a float32, as HF
            for (int j = 0; j < dim; j++) s->x[(size_t)i * dim + j] *= m->ext.embed_scale;
        const int at = rows->states ? rows->at[i] : rows->is_branches ? pos : pos + i;
        emx_rope_angles(s->rope_cos + (size_t)i * half, s->rope_sin + (size_t)i * half, s->inv_freq, half, at);
        if (s->inv_freq_local)
            emx_rope_angles(s->rope_cos_local + (size_t)i * half, s->rope_sin_local + (size_t)i * half,
                            s->inv_freq_local, half, at);
    }
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
        float *kc = kdst, *vc = vdst;
        size_t kc_row = dst_row;
        if (rows->states) {
            kc = s->mx_kv;
            vc = s->mx_kv + (size_t)s->mx_rows * kv_dim;
            kc_row = (size_t)kv_dim;
        } else if (s->kv_type == EMX_KV_F16) {
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
            if (s->kv_type == EMX_KV_F16 && !rows->states) {  // the finished row into the f16 cache or tail
                emx_kv_store((uint16_t *)kdst + i * dst_row, EMX_KV_F16, ki, kv_dim);
                emx_kv_store((uint16_t *)vdst + i * dst_row, EMX_KV_F16, vc + (size_t)i * kc_row, kv_dim);
            }
        }
        for (int i = 0; rows->states && i < n; i++) {  // each row's k, v into its own state's cache
            CpuState *r = row_state(rows, i);
            const size_t to = cache_at(r, l, rows->at[i]);
            emx_kv_store(kv_at(r, r->key_cache, to), r->kv_type, kc + (size_t)i * kv_dim, kv_dim);
            emx_kv_store(kv_at(r, r->value_cache, to), r->kv_type, vc + (size_t)i * kv_dim, kv_dim);
        }

        attention(s, l, n, pos, rows, record_last);
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
    s->nonfinite_at = NONFINITE_NONE;
    for (int done = 0; done < n;) {
        int chunk = n - done < s->batch_cap ? n - done : s->batch_cap;
        cpu_run_layers(s, tokens + done, chunk, pos + done, &SEQUENCE, done + chunk == n);
        done += chunk;
        if (done == n) cpu_classify(s, chunk - 1, 1, s->logits);  // only the last position's logits
    }
    s->last_pos = pos + n - 1;
    return s->logits;
}

static int cpu_forward_all_logits(EmxState *st, const int *tokens, int n, int pos, float *logits) {
    CpuState *s = (CpuState *)st;
    if (check_call(s, tokens, n, pos)) return s->why = BAD_CALL, -1;
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
        logits[i] = r->logits;
    }
    return 0;
}

static void cpu_state_kv_cache(EmxState *st, float **key, float **value, int *kv_dim) {
    CpuState *s = (CpuState *)st;
    float *k = s->key_cache, *v = s->value_cache;
    // An f16 or padded cache: f32 copies in rows of kv_dim, owned by the state, refilled on every
    // call (NULL out of memory)
    if (s->kv_type == EMX_KV_F16 || s->kv_row != s->kv_dim) {
        const size_t n = (size_t)s->m->cfg.n_layers * s->ctx * s->kv_dim;
        if (!s->kv_f32) s->kv_f32 = malloc(2 * n * sizeof(float));
        k = v = NULL;
        if (s->kv_f32) {
            cpu_kv_rows_copy(s, 0, s->ctx, s->kv_f32, 0);  // keys [n_layers][ctx][kv_dim], then values
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
    const size_t kv = (size_t)s->kv_dim, row = (size_t)n * kv;
    const int layers = (int)s->m->cfg.n_layers;
    for (int l = 0; l < layers; l++)
        for (int j = 0; j < n; j++) {  // the cache's rows are kv_row apart, the buffer's kv_dim
            void *k = kv_at(s, s->key_cache, cache_at(s, l, pos + j));
            void *v = kv_at(s, s->value_cache, cache_at(s, l, pos + j));
            float *bk = buf + l * row + j * kv, *bv = buf + (layers + l) * row + j * kv;
            if (to_cache) {
                emx_kv_store(k, s->kv_type, bk, kv);
                emx_kv_store(v, s->kv_type, bv, kv);
            } else {
                emx_kv_load(bk, k, s->kv_type, kv);
                emx_kv_load(bv, v, s->kv_type, kv);
            }
        }
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
    *info = (EmxStateInfo){.device = "cpu", .vocab = (int)s->m->cfg.vocab_size,
                           .cache_type = s->kv_type};
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
