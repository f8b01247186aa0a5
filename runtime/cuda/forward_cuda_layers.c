// forward_cuda_layers.c — the CUDA backend's layers (forward_cuda.c has the header comment): the
// matvecs (or, for long prompts, GEMMs), RoPE with the KV-cache write, attention and the
// feed-forward block of one chunk of rows through every layer, and the classifier. Where the rows
// sit (a sequence, branches, several states) is forward_cuda_pass.h's Rows.
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "base/errmsg.h"
#include "kernels/attention_decode.h"
#include "kernels/embedding.h"
#include "kernels/geglu.h"
#include "kernels/logits_metrics.h"
#include "kernels/matvec_fused.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "runtime/cpu/cpu_matmul.h"
#include "runtime/cpu/cpu_ops.h"
#include "runtime/cuda/forward_cuda_pass.h"
#include "runtime/cuda/forward_cuda_state.h"

// Whether W's matvec reads its input as int8 groups (xq, xd, xsum): the fast matvec (a warp per
// row, widths a multiple of 32) with q8/q4/q4_1 weights, as the CPU does. The one test for both
// who makes the groups (norm_for, or matvec itself) and who reads them.
static int reads_int8_acts(const EmxCudaWeight *w) {
    return w->cols % 32 == 0 && emx_dtype_wants_q8_acts(w->dtype);
}

// out[n][w.rows] (+)= W in[n][w.cols]; widths that are not a multiple of 32 take the plain matvec.
// quantised: in's int8 groups are made already.
int cuda_matvec(CudaState *s, const EmxCudaWeight *w, const float *in, int n, float *out, int accumulate,
                  int quantised) {
    const int fast = w->cols % 32 == 0;
    EmxCudaActs a = {in, s->xq, s->xd, s->xsum};
    if (reads_int8_acts(w) && !quantised)
        CU(emx_cuda_quantize_acts(in, w->cols, n, s->xq, s->xd, s->xsum, s->stream));
    CU(emx_cuda_matvec(fast ? EMX_MATVEC_FAST : EMX_MATVEC_PLAIN, w, &a, n, out, accumulate, s->stream));
    return 0;
}

// RMSNorm of n rows of x into xb for the matrices that read it (w: the first of them, wq or gate;
// its neighbours share its input and its dtype). On the fast quantised path (not a GEMM chunk) the
// int8 groups of xb come out of the same launch, once for all of them: the matvecs are then called
// with quantised = 1.
int cuda_norm_for(CudaState *s, const float *x, const float *norm_w, int n, const EmxCudaWeight *w, int gemm) {
    const EmxConfig *c = &s->m->cfg;
    if (!gemm && reads_int8_acts(w))
        CU(emx_cuda_rmsnorm_quantize(s->xb, x, norm_w, (int)c->dim, n, c->norm_eps, s->xq, s->xd, s->xsum, s->stream));
    else
        CU(emx_cuda_rmsnorm(s->xb, x, norm_w, (int)c->dim, n, c->norm_eps, s->stream));
    return 0;
}

// q, k, v [n][rows] = Wq, Wk, Wv xb: one launch when the three share a dtype and a width the
// fast matvec takes (emx_cuda_matvec_set: the same bits as three), else three. xb's int8 groups
// come from norm_for.
int cuda_matvec_qkv(CudaState *s, const CudaLayer *L, int n) {
    const EmxCudaWeight *w[3] = {&L->wq, &L->wk, &L->wv};
    if (L->wq.cols % 32 == 0 && L->wk.dtype == L->wq.dtype && L->wv.dtype == L->wq.dtype &&
        L->wk.cols == L->wq.cols && L->wv.cols == L->wq.cols) {
        float *out[3] = {s->q, s->k, s->v};
        EmxCudaActs a = {s->xb, s->xq, s->xd, s->xsum};
        CU(emx_cuda_matvec_set(EMX_MATVEC_FAST, w, out, 3, &a, n, s->stream));
        return 0;
    }
    return cuda_matvec(s, w[0], s->xb, n, s->q, 0, 1) || cuda_matvec(s, w[1], s->xb, n, s->k, 0, 1) ||
           cuda_matvec(s, w[2], s->xb, n, s->v, 0, 1);
}

// out[n][w.rows] (+)= W in[n][w.cols] through the GEMM (n up to gemm_rows), the variant by the
// weight's dtype (gemm_variant); f32 weights are read in place, others dequantised into gemm_ws.
static int gemm(CudaState *s, const EmxCudaWeight *w, const float *in, int n, float *out, int accumulate) {
    CU(emx_cuda_gemm(gemm_variant(w->dtype), s->blas, w, in, n, out, accumulate, s->gemm_ws, s->stream));
    return 0;
}


const StepInput *cuda_input_of(const CudaState *s, const Rows *r) { return r->in ? r->in : s->in_d; }

void cuda_attention_args(const CudaState *s, int l, EmxAttentionArgs *a) {
    const EmxConfig *c = &s->m->cfg;
    memset(a, 0, sizeof *a);
    a->k_cache = cuda_layer_kv(s, s->key, l);
    a->v_cache = cuda_layer_kv(s, s->value, l);
    a->cache_rows = cuda_layer_ring(s, l);
    a->kv_dtype = s->kv_type;
    a->n_heads = (int)c->n_heads;
    a->n_kv_heads = (int)c->n_kv_heads;
    a->head_dim = (int)c->head_dim;
    a->workspace = s->attn_ws;
    a->scale = s->m->ext.attn_scale;  // 0: 1 / sqrt(head_dim)
    a->window = emx_layer_is_local(&s->m->ext, (uint32_t)l) ? (int)s->m->ext.sliding_window : 0;
}

// The last row's score rows and softmax statistics go where the samplers read them.
void cuda_record_scores(const CudaState *s, int l, EmxAttentionArgs *a) {
    const EmxConfig *c = &s->m->cfg;
    a->scores = s->scores + (size_t)l * c->n_heads * s->ctx;
    a->score_stride = s->ctx;
    a->head_stats = s->head_stats + (size_t)l * c->n_heads;
}

// Multi-state rows where the one-launch path does not apply (cuda_multi_attention_fused): one
// single-query launch per row, each over its own state's cache (its own allocation, its own key
// count) and workspace. Row i alone is exactly emx_forward's decode attention.
static int attention_multi(CudaState *s, int l, int n, const Rows *r) {
    EmxAttentionArgs a;
    for (int i = 0; i < n; i++) {
        const CudaState *o = r->multi[i];
        cuda_attention_args(o, l, &a);
        a.q = s->q + (size_t)i * s->q_dim;
        a.out = s->att + (size_t)i * s->q_dim;
        a.n_keys = r->multi_pos[i] + 1;
        cuda_record_scores(o, l, &a);  // every row is its state's last: the entropix metrics read them
        CU(emx_cuda_attention(ATTN_KERNEL, &a, s->stream));
    }
    return 0;
}

int cuda_attention(CudaState *s, int l, int n, int pos, const Rows *r, int record_last) {
    EmxAttentionArgs a;
    if (r->multi) return attention_multi(s, l, n, r);
    // n rows at pos..pos+n-1, causal: one launch (rows on the grid) per CHUNK rows; the
    // workspace, which grows with rows x ctx, is sized for CHUNK (a GEMM chunk takes several)
    for (int r0 = 0; !r->is_branches && r0 < n; r0 += CHUNK) {
        const int rows = n - r0 < CHUNK ? n - r0 : CHUNK;
        cuda_attention_args(s, l, &a);
        a.q = s->q + (size_t)r0 * s->q_dim;
        a.out = s->att + (size_t)r0 * s->q_dim;
        a.n_rows = rows;
        a.n_keys = pos + r0 + rows;
        if (r->device_positions) {  // graph: sized for the whole cache, the real count read on the device
            a.n_keys = s->ctx;
            a.n_keys_dev = &cuda_input_of(s, r)->n_keys;
        }
        if (record_last && r0 + rows == n) cuda_record_scores(s, l, &a);
        CU(emx_cuda_attention(ATTN_KERNEL, &a, s->stream));
    }
    if (!r->is_branches) return 0;
    // Branches (n <= br_max <= CHUNK: the workspace's rows): row i attends the shared prefix in
    // the cache, then its own tail, interleaved with the other branches' (a row of the tail
    // holds one step of every branch, so branch i's starts i rows of kv_dim in). All n rows are
    // one launch (branch rows): per layer two kernels, not two per branch.
    const size_t tail_row = (size_t)s->br_max * s->kv_dim, tail_layer = (size_t)l * s->br_tail * tail_row;
    cuda_attention_args(s, l, &a);
    a.q = s->q;
    a.out = s->att;
    a.n_rows = n;
    a.n_keys = r->prefix + r->step + 1;
    a.tail_k = kv_at(s, s->br_key, tail_layer);
    a.tail_v = kv_at(s, s->br_value, tail_layer);
    a.tail_start = r->prefix;
    a.tail_row_stride = (int)tail_row;
    a.tail_branch_stride = s->kv_dim;
    if (r->device_positions) {  // a lookahead round's graph: the prefix is the round's
        a.n_keys = s->ctx;
        a.n_keys_dev = &cuda_input_of(s, r)->n_keys;
        a.tail_start = 0;
        a.tail_start_dev = &cuda_input_of(s, r)->tail_start;
    }
    CU(emx_cuda_attention(ATTN_KERNEL, &a, s->stream));
    return 0;
}

// The feed-forward block's hb = act(Wg xb) * (Wu xb) for n rows. SwiGLU: one fused matvec, or
// (GEMM chunks) two GEMMs into hb and hb2 and the SwiGLU over them. GeGLU (Gemma): the gate and
// up projections into hb and hb2 (xb's int8 groups, if its dtype reads them, made before), then
// the GeGLU over them.
int cuda_ffn_in(CudaState *s, const CudaLayer *L, int n, const Rows *r) {
    if (s->m->ext.ffn_act == EMX_ACT_GELU_TANH) {
        if (r->gemm ? gemm(s, &L->gate, s->xb, n, s->hb, 0) || gemm(s, &L->up, s->xb, n, s->hb2, 0)
                    : cuda_matvec(s, &L->gate, s->xb, n, s->hb, 0, 1) || cuda_matvec(s, &L->up, s->xb, n, s->hb2, 0, 1))
            return -1;
        CU(emx_cuda_geglu(s->hb, s->hb, s->hb2, n * (int)s->m->cfg.hidden_dim, s->stream));
        return 0;
    }
    if (r->gemm) {
        if (gemm(s, &L->gate, s->xb, n, s->hb, 0) || gemm(s, &L->up, s->xb, n, s->hb2, 0)) return -1;
        CU(emx_cuda_swiglu(s->hb, s->hb, s->hb2, n * (int)s->m->cfg.hidden_dim, s->stream));
    } else if (L->gate.cols % 32 == 0) {  // xb's int8 groups, if its dtype reads them: norm_for's
        EmxCudaActs act = {s->xb, s->xq, s->xd, s->xsum};
        CU(emx_cuda_matvec_swiglu(EMX_MATVEC_FAST, &L->gate, &L->up, &act, n, s->hb, s->stream));
    } else {
        EmxCudaActs act = {s->xb, NULL, NULL, NULL};
        CU(emx_cuda_matvec_swiglu(EMX_MATVEC_PLAIN, &L->gate, &L->up, &act, n, s->hb, s->stream));
    }
    return 0;
}

// The attention block's end: x += Wo att, or with sandwich norms (Gemma 3) x += rmsnorm(Wo att) *
// post_attn_norm (Wo att into tmp first); then the feed-forward block's input xb = rmsnorm(x) *
// ffn_norm, with its int8 groups when the gate reads them (as norm_for).
int cuda_attn_block_out(CudaState *s, const CudaLayer *L, int n, const Rows *r) {
    const EmxConfig *c = &s->m->cfg;
    if (!L->post_attn_norm) {  // both paths accumulate: the residual add is free
        if (r->gemm ? gemm(s, &L->wo, s->att, n, s->x, 1) : cuda_matvec(s, &L->wo, s->att, n, s->x, 1, 0)) return -1;
        return cuda_phase(s, EMX_PHASE_ATTN_OUT) || cuda_norm_for(s, s->x, L->ffn_norm, n, &L->gate, r->gemm);
    }
    if (r->gemm ? gemm(s, &L->wo, s->att, n, s->tmp, 0) : cuda_matvec(s, &L->wo, s->att, n, s->tmp, 0, 0)) return -1;
    CU(emx_cuda_rmsnorm(s->tmp, s->tmp, L->post_attn_norm, (int)c->dim, n, c->norm_eps, s->stream));
    CU(emx_cuda_residual_rmsnorm(s->x, s->tmp, L->ffn_norm, s->xb, (int)c->dim, n, c->norm_eps, s->stream));
    if (!r->gemm && reads_int8_acts(&L->gate))
        CU(emx_cuda_quantize_acts(s->xb, (int)c->dim, n, s->xq, s->xd, s->xsum, s->stream));
    return cuda_phase(s, EMX_PHASE_ATTN_OUT);  // the add and the FFN's norm are one launch here
}

// The feed-forward block's end: x += W_down hb, or with sandwich norms x += rmsnorm(W_down hb) *
// post_ffn_norm (W_down hb into tmp first; the add is the fused add-and-norm's, whose norm
// output in xb is overwritten by the next norm: no add kernel of its own for one model family).
int cuda_ffn_block_out(CudaState *s, const CudaLayer *L, int n, const Rows *r) {
    const EmxConfig *c = &s->m->cfg;
    if (!L->post_ffn_norm)
        return r->gemm ? gemm(s, &L->down, s->hb, n, s->x, 1) : cuda_matvec(s, &L->down, s->hb, n, s->x, 1, 0);
    if (r->gemm ? gemm(s, &L->down, s->hb, n, s->tmp, 0) : cuda_matvec(s, &L->down, s->hb, n, s->tmp, 0, 0)) return -1;
    CU(emx_cuda_rmsnorm(s->tmp, s->tmp, L->post_ffn_norm, (int)c->dim, n, c->norm_eps, s->stream));
    CU(emx_cuda_residual_rmsnorm(s->x, s->tmp, L->post_ffn_norm, s->xb, (int)c->dim, n, c->norm_eps, s->stream));
    return 0;
}

// Multi-state rows in one launch a layer (forward_cuda_pass.h): the fused decode attention over
// the step's row table (rows_d, filled by emx_cuda_state_forward_multi), each row bitwise its
// state's own decode step's attention.
int cuda_multi_attention_fused(const CudaState *s, int n, const Rows *r) {
    const EmxConfig *c = &s->m->cfg;
    if (!s->fused || !emx_cuda_attention_decode_fits((int)c->n_heads, (int)c->n_kv_heads, (int)c->head_dim, 0, s->kv_type))
        return 0;
    for (int i = 0; i < n; i++)
        if (r->multi[i]->kv_type != s->kv_type) return 0;
    return 1;
}

int cuda_multi_attention(CudaState *s, int l, int n, const Rows *r) {
    EmxRopeArgs ra;
    cuda_rope_args(s, l, n, r, &ra);  // what the rows share: the layer's frequencies, norms, biases
    EmxAttnDecodeArgs d;
    memset(&d, 0, sizeof d);
    cuda_attention_args(s, l, &d.attn);  // the shape, scale and window (the cache fields: the rows')
    d.attn.q = s->q;
    d.attn.out = s->att;
    for (int i = 0; i < n; i++)  // the grid's chunks: for the rows' keys, or (a graph) their whole contexts
        if (r->device_positions ? r->multi[i]->ctx > d.attn.n_keys : r->multi_pos[i] + 1 > d.attn.n_keys)
            d.attn.n_keys = r->device_positions ? r->multi[i]->ctx : r->multi_pos[i] + 1;
    cuda_decode_rope_of(&ra, &d);
    d.pos = NULL;  // each row's from the table
    d.pdl = s->pdl_now;
    CU(emx_cuda_attention_decode_rows(&d, s->rows_d, n, l, s->stream));
    return 0;
}

// rope_kv of multi-state rows (where cuda_multi_attention does not apply): row i's k and v into
// states[i]'s cache at its position, one launch of one row each (rope_kv takes one cache a call).
// a: the batch's arguments, adjusted per row.
static int rope_multi(CudaState *s, int l, int n, const Rows *r, const EmxRopeArgs *batch) {
    for (int i = 0; i < n; i++) {
        const CudaState *o = r->multi[i];
        EmxRopeArgs a = *batch;
        a.q = s->q + (size_t)i * s->q_dim;
        a.k = s->k + (size_t)i * s->kv_dim;
        a.v = s->v + (size_t)i * s->kv_dim;
        a.k_cache = cuda_layer_kv(o, o->key, l);
        a.v_cache = cuda_layer_kv(o, o->value, l);
        a.cache_rows = cuda_layer_ring(o, l);
        a.kv_dtype = o->kv_type;
        a.pos = batch->pos + i;
        a.batch = 1;
        CU(emx_cuda_rope_kv(&a, s->stream));
    }
    return 0;
}

void cuda_decode_rope_of(const EmxRopeArgs *a, EmxAttnDecodeArgs *d) {
    d->k = a->k;
    d->v = a->v;
    d->pos = a->pos;
    d->inv_freq = a->inv_freq;
    d->q_norm = a->q_norm;
    d->k_norm = a->k_norm;
    d->bq = a->bq, d->bk = a->bk, d->bv = a->bv;
    d->eps = a->eps;
    d->style = a->style;
}

// rope_kv's arguments for layer l's n rows (r: where they sit and where their k and v go).
void cuda_rope_args(const CudaState *s, int l, int n, const Rows *r, EmxRopeArgs *a) {
    const EmxConfig *c = &s->m->cfg;
    const CudaWeights *w = s->w;
    const CudaLayer *L = &w->layers[l];
    const int *pos_d = r->gemm ? s->gin_d + s->gemm_rows : cuda_input_of(s, r)->pos;
    memset(a, 0, sizeof *a);
    a->q = s->q;
    a->k = s->k;
    a->v = s->v;
    if (r->is_branches) {  // this step's rows of every branch's tail
        const size_t at = ((size_t)l * s->br_tail + r->step) * s->br_max * s->kv_dim;
        a->k_cache = kv_at(s, s->br_key, at);
        a->v_cache = kv_at(s, s->br_value, at);
        a->cache_row = cuda_input_of(s, r)->rows;
    } else {
        a->k_cache = cuda_layer_kv(s, s->key, l);
        a->v_cache = cuda_layer_kv(s, s->value, l);
        a->cache_rows = cuda_layer_ring(s, l);
    }
    a->kv_dtype = s->kv_type;
    a->pos = pos_d;
    a->inv_freq = emx_layer_is_local(&s->m->ext, (uint32_t)l) ? w->inv_freq_local : w->inv_freq;
    a->q_norm = L->q_norm;
    a->k_norm = L->k_norm;
    a->bq = L->bq, a->bk = L->bk, a->bv = L->bv;
    a->eps = c->norm_eps;
    a->batch = n;
    a->n_heads = (int)c->n_heads;
    a->n_kv_heads = (int)c->n_kv_heads;
    a->head_dim = (int)c->head_dim;
    a->style = (int)c->rope_style;
}

// cuda_run_layers (forward_cuda_fused.c) with the separate kernels of each layer: every kind of
// rows (a chunk, a GEMM chunk, branches, several states) and EMX_CUDA_FUSED=0's decode steps.
int cuda_run_layers_separate(CudaState *s, int n, int pos, const Rows *r, int record_last) {
    const EmxConfig *c = &s->m->cfg;
    const CudaWeights *w = s->w;
    const int *tokens_d = r->gemm ? s->gin_d : cuda_input_of(s, r)->tokens;
    CU(emx_cuda_embedding_scaled(&w->emb, tokens_d, n, s->m->ext.embed_scale, s->x, s->stream));
    if (cuda_phase(s, EMX_PHASE_EMBED)) return -1;
    for (int l = 0; l < (int)c->n_layers; l++) {
        const CudaLayer *L = &w->layers[l];
        if (cuda_norm_for(s, s->x, L->attn_norm, n, &L->wq, r->gemm)) return -1;
        if (r->gemm ? gemm(s, &L->wq, s->xb, n, s->q, 0) || gemm(s, &L->wk, s->xb, n, s->k, 0) ||
                          gemm(s, &L->wv, s->xb, n, s->v, 0)
                    : cuda_matvec_qkv(s, L, n))
            return -1;
        if (cuda_phase(s, EMX_PHASE_ATTN_IN)) return -1;
        EmxRopeArgs a;
        cuda_rope_args(s, l, n, r, &a);
        if (r->multi && cuda_multi_attention_fused(s, n, r)) {  // RoPE, KV writes, attention: one launch
            if (cuda_multi_attention(s, l, n, r)) return -1;
        } else {
            if (r->multi) {
                if (rope_multi(s, l, n, r, &a)) return -1;
            } else {
                CU(emx_cuda_rope_kv(&a, s->stream));
            }
            if (cuda_attention(s, l, n, pos, r, record_last)) return -1;
        }
        if (cuda_phase(s, EMX_PHASE_ATTN)) return -1;
        if (cuda_attn_block_out(s, L, n, r) || cuda_ffn_in(s, L, n, r) || cuda_phase(s, EMX_PHASE_FFN_IN) ||
            cuda_ffn_block_out(s, L, n, r) || cuda_phase(s, EMX_PHASE_FFN_OUT))
            return -1;
    }
    return 0;
}

// Output norm and classifier of rows [first, first + n) of x into logits [n][vocab] (device).
int cuda_classify(CudaState *s, int first, int n) {
    const EmxConfig *c = &s->m->cfg;
    if (n <= s->fused && emx_cuda_matvec_fused_fits(s->w->out.dtype, s->w->out.cols, n)) {
        // the fused decode layer's classifier: the output norm in the matvec's prologue
        const EmxFusedInput in = {s->x + (size_t)first * c->dim, s->w->norm, c->norm_eps, s->pdl_now, n};
        const EmxCudaWeight *w[1] = {&s->w->out};
        float *out[1] = {s->logits};
        CU(emx_cuda_matvec_fused(&in, w, out, 1, 0, s->stream));
        return 0;
    }
    if (cuda_norm_for(s, s->x + (size_t)first * c->dim, s->w->norm, n, &s->w->out, 0)) return -1;
    return cuda_matvec(s, &s->w->out, s->xb, n, s->logits, 0, 1);
}
