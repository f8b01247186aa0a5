// forward_cuda_fused.c — the fused decode layer: one row of a sequence (a decode step, in its
// CUDA graph or launched directly), or the rows of several sequences in one step
// (emx_forward_multi: a server's busy slots, each row its own sequence's next token), through a
// layer in five launches instead of eleven:
//   1. q, k, v = Wq|Wk|Wv rmsnorm(x)        emx_cuda_matvec_fused: the attention norm and the int8
//                                           groups in every block's prologue
//   2. attention with q/k bias, norm, RoPE  emx_cuda_attention_decode: the new key and value go
//      and the KV write inside              into the cache from the attention's own blocks, and
//                                           the last block of each KV head combines its chunks
//                                           (several sequences: _rows, each row over its own
//                                           state's cache: cuda_multi_attention)
//   3. x += Wo att                          att's int8 groups in the prologue, the add in the epilogue
//   4. hb = swiglu(Wg, Wu, rmsnorm(x))      the FFN norm in the prologue
//   5. x += Wdown hb                        hb's int8 groups in the prologue
// and the classifier with the output norm in its prologue (cuda_classify, forward_cuda_layers.c).
// Gemma 3's sandwich norms normalise wo's and w_down's outputs before the residual add, which
// needs the whole output row: the add and the norm go to the next launch's prologue instead (every
// block recomputes them from L2; its first block writes the residual row), also five launches:
//   1. q, k, v = Wq|Wk|Wv rmsnorm(x)        x = h + rmsnorm(tmp) * post_ffn_norm of the layer
//                                           before (h from xb, into x), then the attention norm
//   2. the attention                        as above
//   3. tmp = Wo att                         att's int8 groups in the prologue
//   4. hb = geglu(Wg, Wu, rmsnorm(h))       h = x + rmsnorm(tmp) * post_attn_norm (into xb), the
//                                           FFN norm; GeGLU's tanh GELU in the pair's epilogue
//   5. tmp = Wdown hb                       hb's int8 groups in the prologue
// and after the last such layer (or before a layer that cannot take it) x = h + rmsnorm(tmp) *
// post_ffn_norm alone (emx_cuda_fused_residual, one block). x and xb alternate so that no launch
// writes a row that its other blocks read.
// With several sequences' rows every fused matvec takes them all (EmxFusedInput.rows: each row
// normed and quantised on its own, each weight row read once for all), so a step of n rows is
// the five launches a layer that one row's is, each a programmatic launch (PDL) on sm_90, up to
// EMX_FUSED_MAX_ROWS rows (EMX_CUDA_FUSED in the environment lowers it: 1, single rows only).
// Bitwise the separate kernels' results (the same arithmetic in the same order:
// kernels/matvec_fused.cu, kernels/attention_decode.cu), which stay the path of GEMM chunks,
// branches, more rows than that, and of EMX_CUDA_FUSED=0.
// What a model's shapes or dtypes keep separate: a q/k/v set of mixed dtypes or widths, a width
// that is not a multiple of 32 or whose input does not fit in shared memory for the step's rows
// (emx_cuda_matvec_fused_fits), attention groups of more than 8 heads or too large a head
// (emx_cuda_attention_decode_fits); a sandwich-normed layer where one of its matvecs does not fit
// keeps the separate kernels from wo to w_down.
#include <stddef.h>
#include <string.h>

#include "kernels/attention_decode.h"
#include "kernels/embedding.h"
#include "kernels/matvec_fused.h"
#include "kernels/rope.h"
#include "runtime/cuda/forward_cuda_pass.h"
#include "runtime/cuda/forward_cuda_state.h"

// One row of a sequence, or the rows of several whose attention is one launch
// (cuda_multi_attention_fused: the rows' caches of one type), as many as the state's
// EMX_CUDA_FUSED takes (s->fused).
static int fused_applies(const CudaState *s, int n, const Rows *r) {
    if (n > s->fused || r->is_branches || r->gemm) return 0;
    return r->multi ? cuda_multi_attention_fused(s, n, r) : n == 1;
}

// out[i] (+)= W_i input for nw matrices, input = the n rows of x (normed by norm_w when not NULL).
static int fused_matvec(CudaState *s, int n, const float *x, const float *norm_w, const EmxCudaWeight *const *w,
                        float *const *out, int nw, int accumulate) {
    const EmxFusedInput in = {x, norm_w, s->m->cfg.norm_eps, s->pdl_now, n};
    CU(emx_cuda_matvec_fused(&in, w, out, nw, accumulate, s->stream));
    return 0;
}

static int fits(const EmxCudaWeight *w, int n) { return emx_cuda_matvec_fused_fits(w->dtype, w->cols, n); }

static int qkv_fits(const CudaLayer *L, int n) {
    return fits(&L->wq, n) && L->wk.dtype == L->wq.dtype && L->wv.dtype == L->wq.dtype && L->wk.cols == L->wq.cols &&
           L->wv.cols == L->wq.cols;
}

// Whether layer L's sandwich norms (Gemma 3) go into the prologues (the top) for n rows: its four
// matvec launches all fused, the pair GeGLU.
static int sandwich_fused(const CudaState *s, const CudaLayer *L, int n) {
    return L->post_attn_norm && L->post_ffn_norm && s->m->ext.ffn_act == EMX_ACT_GELU_TANH && qkv_fits(L, n) &&
           emx_cuda_matvec_fused_residual_fits(L->wq.dtype, L->wq.cols, n) && fits(&L->wo, n) &&
           emx_cuda_matvec_fused_residual_fits(L->gate.dtype, L->gate.cols, n) && L->up.dtype == L->gate.dtype &&
           fits(&L->down, n);
}

// The residual add a sandwich layer leaves to the next launch: x = xb + rmsnorm(tmp) * post_w
// (post_w: *pending, the layer's post_ffn_norm; NULL: x is complete), n rows. As the sandwich
// matvec's input when norm_w is given, else alone.
static int pending_add(CudaState *s, int n, const float **pending, const float *norm_w, const EmxCudaWeight *const *w,
                       float *const *out, int nw) {
    const EmxFusedInput in = {s->xb, norm_w, s->m->cfg.norm_eps, s->pdl_now, n};
    const EmxFusedResidual res = {s->tmp, *pending, s->x};
    *pending = NULL;
    if (norm_w)
        CU(emx_cuda_matvec_fused_residual(&in, &res, w, out, nw, s->stream));
    else
        CU(emx_cuda_fused_residual(&in, &res, (int)s->m->cfg.dim, s->stream));
    return 0;
}

// q, k, v from x: one launch with the attention norm inside (and the residual add pending from a
// sandwich layer before), else the norm and matvec_qkv.
static int qkv(CudaState *s, const CudaLayer *L, int n, const float **pending) {
    if (qkv_fits(L, n)) {
        const EmxCudaWeight *w[3] = {&L->wq, &L->wk, &L->wv};
        float *out[3] = {s->q, s->k, s->v};
        if (*pending) return pending_add(s, n, pending, L->attn_norm, w, out, 3);
        return fused_matvec(s, n, s->x, L->attn_norm, w, out, 3, 0);
    }
    return cuda_norm_for(s, s->x, L->attn_norm, n, &L->wq, 0) || cuda_matvec_qkv(s, L, n);
}

// RoPE, the KV write, the attention and its combine: in one kernel where the shape allows,
// else rope_kv and the attention as cuda_run_layers_separate launches them. Several sequences'
// rows: one launch over their states' caches (fused_applies made sure it applies).
static int attend(CudaState *s, int l, int n, int pos, const Rows *r, int record_last) {
    const EmxConfig *c = &s->m->cfg;
    if (r->multi) return cuda_multi_attention(s, l, n, r);
    EmxRopeArgs ra;
    cuda_rope_args(s, l, 1, r, &ra);
    if (!emx_cuda_attention_decode_fits((int)c->n_heads, (int)c->n_kv_heads, (int)c->head_dim, 0, s->kv_type)) {
        CU(emx_cuda_rope_kv(&ra, s->stream));
        return cuda_attention(s, l, 1, pos, r, record_last);
    }
    EmxAttnDecodeArgs d;
    memset(&d, 0, sizeof d);
    cuda_attention_args(s, l, &d.attn);
    d.attn.q = s->q;
    d.attn.out = s->att;
    d.attn.n_keys = pos + 1;
    if (r->device_positions) {  // graph: sized for the whole cache, the real count read on the device
        d.attn.n_keys = s->ctx;
        d.attn.n_keys_dev = &cuda_input_of(s, r)->n_keys;
    }
    if (record_last) cuda_record_scores(s, l, &d.attn);
    cuda_decode_rope_of(&ra, &d);
    d.arrivals = s->attn_arrivals;
    d.pdl = s->pdl_now;
    CU(emx_cuda_attention_decode(&d, s->stream));
    return 0;
}

// From att to the end of the layer: x += Wo att, hb = swiglu(rmsnorm(x)), x += Wdown hb, each a
// fused launch where it fits; the separate kernels otherwise (a sandwich layer that sandwich_fused
// refuses, GeGLU, other shapes).
static int block_outs(CudaState *s, const CudaLayer *L, int n, const Rows *r) {
    int ffn_normed = 0;  // xb holds the FFN's input (and its int8 groups) already
    if (L->post_attn_norm) {
        if (cuda_attn_block_out(s, L, n, r)) return -1;
        ffn_normed = 1;
    } else if (fits(&L->wo, n)) {
        const EmxCudaWeight *w[1] = {&L->wo};
        float *out[1] = {s->x};
        if (fused_matvec(s, n, s->att, NULL, w, out, 1, 1)) return -1;
    } else if (cuda_matvec(s, &L->wo, s->att, n, s->x, 1, 0)) {
        return -1;
    }
    if (!ffn_normed && cuda_phase(s, EMX_PHASE_ATTN_OUT)) return -1;  // (cuda_attn_block_out closed it)
    if (!ffn_normed && s->m->ext.ffn_act != EMX_ACT_GELU_TANH && fits(&L->gate, n) && L->up.dtype == L->gate.dtype) {
        const EmxFusedInput in = {s->x, L->ffn_norm, s->m->cfg.norm_eps, s->pdl_now, n};
        CU(emx_cuda_matvec_fused_swiglu(&in, &L->gate, &L->up, s->hb, s->stream));
    } else if ((!ffn_normed && cuda_norm_for(s, s->x, L->ffn_norm, n, &L->gate, 0)) || cuda_ffn_in(s, L, n, r)) {
        return -1;
    }
    if (cuda_phase(s, EMX_PHASE_FFN_IN)) return -1;
    if (L->post_ffn_norm || !fits(&L->down, n))
        return cuda_ffn_block_out(s, L, n, r) || cuda_phase(s, EMX_PHASE_FFN_OUT);
    const EmxCudaWeight *w[1] = {&L->down};
    float *out[1] = {s->x};
    return fused_matvec(s, n, s->hb, NULL, w, out, 1, 1) || cuda_phase(s, EMX_PHASE_FFN_OUT);
}

// A sandwich layer's end (the top's 3 to 5): tmp = Wo att; hb = geglu(rmsnorm(h)) with h = x +
// rmsnorm(tmp) * post_attn_norm into xb; tmp = Wdown hb; x = h + rmsnorm(tmp) * post_ffn_norm left
// pending for the next layer's q/k/v (after the last layer: alone).
static int sandwich_outs(CudaState *s, const CudaLayer *L, int n, int last, const float **pending) {
    const EmxCudaWeight *wo[1] = {&L->wo}, *down[1] = {&L->down};
    float *tmp[1] = {s->tmp};
    if (fused_matvec(s, n, s->att, NULL, wo, tmp, 1, 0) || cuda_phase(s, EMX_PHASE_ATTN_OUT)) return -1;
    const EmxFusedInput in = {s->x, L->ffn_norm, s->m->cfg.norm_eps, s->pdl_now, n};
    const EmxFusedResidual res = {s->tmp, L->post_attn_norm, s->xb};
    CU(emx_cuda_matvec_fused_geglu(&in, &res, &L->gate, &L->up, s->hb, s->stream));
    if (cuda_phase(s, EMX_PHASE_FFN_IN) || fused_matvec(s, n, s->hb, NULL, down, tmp, 1, 0)) return -1;
    *pending = L->post_ffn_norm;
    if (last && pending_add(s, n, pending, NULL, NULL, NULL, 0)) return -1;
    return cuda_phase(s, EMX_PHASE_FFN_OUT);
}

// pending: the residual add a sandwich layer before left (sandwich_outs), done here in the q/k/v
// launch, or alone first where this layer cannot take it.
static int fused_layer(CudaState *s, int l, int n, int pos, const Rows *r, int record_last, const float **pending) {
    const CudaLayer *L = &s->w->layers[l];
    const int sandwich = sandwich_fused(s, L, n), last = l + 1 == (int)s->m->cfg.n_layers;
    if (*pending && !sandwich && pending_add(s, n, pending, NULL, NULL, NULL, 0)) return -1;
    if (qkv(s, L, n, pending) || cuda_phase(s, EMX_PHASE_ATTN_IN) || attend(s, l, n, pos, r, record_last) ||
        cuda_phase(s, EMX_PHASE_ATTN))
        return -1;
    return sandwich ? sandwich_outs(s, L, n, last, pending) : block_outs(s, L, n, r);
}

int cuda_run_layers(CudaState *s, int n, int pos, const Rows *r, int record_last) {
    if (!fused_applies(s, n, r)) return cuda_run_layers_separate(s, n, pos, r, record_last);
    CU(emx_cuda_embedding_scaled(&s->w->emb, cuda_input_of(s, r)->tokens, n, s->m->ext.embed_scale, s->x, s->stream));
    if (cuda_phase(s, EMX_PHASE_EMBED)) return -1;
    const float *pending = NULL;  // a sandwich layer's residual add, left to the next launch
    for (int l = 0; l < (int)s->m->cfg.n_layers; l++)
        if (fused_layer(s, l, n, pos, r, record_last, &pending)) return -1;
    return 0;
}
