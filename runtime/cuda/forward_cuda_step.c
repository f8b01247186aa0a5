// forward_cuda_step.c — the CUDA backend's pass (forward_cuda.c has the header comment: the
// layers, the decode graph, the on-device choice, prefill in chunks): the matvecs (or, for long
// prompts, GEMMs) and attention of one chunk, the decode step's graphs, emx_forward_decide's
// choice and the agents' proposals (with a lookahead round's branch passes) on the device as a
// step's tail, the logits and caches brought to the host, a lookahead branch pass, and several
// states' rows in one step (emx_forward_multi). The agents' and the branches' entry points are
// forward_cuda_agents.c's.
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "base/errmsg.h"
#include "kernels/embedding.h"
#include "kernels/logits_metrics.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "runtime/cpu/cpu_matmul.h"
#include "runtime/cpu/cpu_ops.h"
#include "runtime/cuda/forward_cuda_state.h"

// ---------------------------------------------------------------------------------------------
// The pass

// Whether W's matvec reads its input as int8 groups (xq, xd, xsum): the fast matvec (a warp per
// row, widths a multiple of 32) with q8/q4/q4_1 weights, as the CPU does. The one test for both
// who makes the groups (norm_for, or matvec itself) and who reads them.
static int reads_int8_acts(const EmxCudaWeight *w) {
    return w->cols % 32 == 0 && emx_dtype_wants_q8_acts(w->dtype);
}

// out[n][w.rows] (+)= W in[n][w.cols]; widths that are not a multiple of 32 take the plain matvec.
// quantised: in's int8 groups are made already.
static int matvec(CudaState *s, const EmxCudaWeight *w, const float *in, int n, float *out, int accumulate,
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
static int norm_for(CudaState *s, const float *x, const float *norm_w, int n, const EmxCudaWeight *w, int gemm) {
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
static int matvec_qkv(CudaState *s, const CudaLayer *L, int n) {
    const EmxCudaWeight *w[3] = {&L->wq, &L->wk, &L->wv};
    if (L->wq.cols % 32 == 0 && L->wk.dtype == L->wq.dtype && L->wv.dtype == L->wq.dtype &&
        L->wk.cols == L->wq.cols && L->wv.cols == L->wq.cols) {
        float *out[3] = {s->q, s->k, s->v};
        EmxCudaActs a = {s->xb, s->xq, s->xd, s->xsum};
        CU(emx_cuda_matvec_set(EMX_MATVEC_FAST, w, out, 3, &a, n, s->stream));
        return 0;
    }
    return matvec(s, w[0], s->xb, n, s->q, 0, 1) || matvec(s, w[1], s->xb, n, s->k, 0, 1) ||
           matvec(s, w[2], s->xb, n, s->v, 0, 1);
}

// out[n][w.rows] (+)= W in[n][w.cols] through the GEMM (n up to gemm_rows), the variant by the
// weight's dtype (gemm_variant); f32 weights are read in place, others dequantised into gemm_ws.
static int gemm(CudaState *s, const EmxCudaWeight *w, const float *in, int n, float *out, int accumulate) {
    CU(emx_cuda_gemm(gemm_variant(w->dtype), s->blas, w, in, n, out, accumulate, s->gemm_ws, s->stream));
    return 0;
}

// Where a pass's rows sit (as forward_cpu.c's RowLayout): a sequence's rows at pos.. attend
// keys 0..pos+i; branch rows all sit at prefix+step and attend the prefix, then their tail.
// gemm: a long prompt's chunk (prefill_gemm): projections through GEMMs, tokens and positions
// from gin_d.
// multi: emx_forward_multi's rows, row i states[i]'s token at multi_pos[i] (its k and v go to
// states[i]'s cache, it attends that cache, its score rows go to states[i]).
// in: the rows' input on the device (NULL: in_d); a lookahead round's branch passes have their
// own (bin_d), and with device_positions they read the key count and the tails' start there.
typedef struct {
    int is_branches, prefix, step;
    int device_positions;  // decode graph: the key count is read from in->n_keys
    int gemm;
    CudaState *const *multi;  // NULL: every row is this state's
    const int *multi_pos;     // [n] host copy of the rows' positions
    const StepInput *in;
} Rows;

static const StepInput *input_of(const CudaState *s, const Rows *r) { return r->in ? r->in : s->in_d; }

static void attention_args(const CudaState *s, int l, EmxAttentionArgs *a) {
    const EmxConfig *c = &s->m->cfg;
    const size_t kvl = (size_t)s->ctx * s->kv_dim;
    memset(a, 0, sizeof *a);
    a->k_cache = kv_at(s, s->key, l * kvl);
    a->v_cache = kv_at(s, s->value, l * kvl);
    a->kv_dtype = s->kv_type;
    a->n_heads = (int)c->n_heads;
    a->n_kv_heads = (int)c->n_kv_heads;
    a->head_dim = (int)c->head_dim;
    a->workspace = s->attn_ws;
}

// The last row's score rows and softmax statistics go where the samplers read them.
static void record_scores(const CudaState *s, int l, EmxAttentionArgs *a) {
    const EmxConfig *c = &s->m->cfg;
    a->scores = s->scores + (size_t)l * c->n_heads * s->ctx;
    a->score_stride = s->ctx;
    a->head_stats = s->head_stats + (size_t)l * c->n_heads;
}

// Multi-state rows: one single-query launch per row, each over its own state's cache (its own
// allocation, its own key count) and workspace; the attention reads KV rows, not weights, so
// batching its launches would save launch latency only (a per-row cache pointer table would
// change the kernel for that). Row i alone is exactly emx_forward's decode attention.
static int attention_multi(CudaState *s, int l, int n, const Rows *r) {
    EmxAttentionArgs a;
    for (int i = 0; i < n; i++) {
        const CudaState *o = r->multi[i];
        attention_args(o, l, &a);
        a.q = s->q + (size_t)i * s->q_dim;
        a.out = s->att + (size_t)i * s->q_dim;
        a.n_keys = r->multi_pos[i] + 1;
        record_scores(o, l, &a);  // every row is its state's last: the entropix metrics read them
        CU(emx_cuda_attention(ATTN_KERNEL, &a, s->stream));
    }
    return 0;
}

static int attention(CudaState *s, int l, int n, int pos, const Rows *r, int record_last) {
    EmxAttentionArgs a;
    if (r->multi) return attention_multi(s, l, n, r);
    // n rows at pos..pos+n-1, causal: one launch (rows on the grid) per CHUNK rows; the
    // workspace, which grows with rows x ctx, is sized for CHUNK (a GEMM chunk takes several)
    for (int r0 = 0; !r->is_branches && r0 < n; r0 += CHUNK) {
        const int rows = n - r0 < CHUNK ? n - r0 : CHUNK;
        attention_args(s, l, &a);
        a.q = s->q + (size_t)r0 * s->q_dim;
        a.out = s->att + (size_t)r0 * s->q_dim;
        a.n_rows = rows;
        a.n_keys = pos + r0 + rows;
        if (r->device_positions) {  // graph: sized for the whole cache, the real count read on the device
            a.n_keys = s->ctx;
            a.n_keys_dev = &input_of(s, r)->n_keys;
        }
        if (record_last && r0 + rows == n) record_scores(s, l, &a);
        CU(emx_cuda_attention(ATTN_KERNEL, &a, s->stream));
    }
    if (!r->is_branches) return 0;
    // Branches (n <= br_max <= CHUNK: the workspace's rows): row i attends the shared prefix in
    // the cache, then its own tail, interleaved with the other branches' (a row of the tail
    // holds one step of every branch, so branch i's starts i rows of kv_dim in). All n rows are
    // one launch (branch rows): per layer two kernels, not two per branch.
    const size_t tail_row = (size_t)s->br_max * s->kv_dim, tail_layer = (size_t)l * s->br_tail * tail_row;
    attention_args(s, l, &a);
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
        a.n_keys_dev = &input_of(s, r)->n_keys;
        a.tail_start = 0;
        a.tail_start_dev = &input_of(s, r)->tail_start;
    }
    CU(emx_cuda_attention(ATTN_KERNEL, &a, s->stream));
    return 0;
}

// The feed-forward block's hb = silu(Wg xb) * (Wu xb) for n rows: one fused matvec, or (GEMM
// chunks) two GEMMs into hb and hb2 and the SwiGLU over them.
static int ffn_in(CudaState *s, const CudaLayer *L, int n, const Rows *r) {
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

// rope_kv of multi-state rows: row i's k and v into states[i]'s cache at its position, one
// launch of one row each (the caches are separate allocations; the kernel takes one per call).
// a: the batch's arguments, adjusted per row.
static int rope_multi(CudaState *s, int l, int n, const Rows *r, const EmxRopeArgs *batch) {
    for (int i = 0; i < n; i++) {
        const CudaState *o = r->multi[i];
        EmxRopeArgs a = *batch;
        a.q = s->q + (size_t)i * s->q_dim;
        a.k = s->k + (size_t)i * s->kv_dim;
        a.v = s->v + (size_t)i * s->kv_dim;
        a.k_cache = kv_at(o, o->key, (size_t)l * o->ctx * o->kv_dim);
        a.v_cache = kv_at(o, o->value, (size_t)l * o->ctx * o->kv_dim);
        a.kv_dtype = o->kv_type;
        a.pos = batch->pos + i;
        a.batch = 1;
        CU(emx_cuda_rope_kv(&a, s->stream));
    }
    return 0;
}

// Runs n rows (n <= CHUNK, in_d on the device; r->gemm: n <= gemm_rows, gin_d) through every
// layer; leaves the final hidden states, before the output norm, in x.
static int run_layers(CudaState *s, int n, int pos, const Rows *r, int record_last) {
    const EmxConfig *c = &s->m->cfg;
    const CudaWeights *w = s->w;
    const float eps = c->norm_eps;
    const int *tokens_d = r->gemm ? s->gin_d : input_of(s, r)->tokens;
    const int *pos_d = r->gemm ? s->gin_d + s->gemm_rows : input_of(s, r)->pos;
    CU(emx_cuda_embedding(&w->emb, tokens_d, n, s->x, s->stream));
    for (int l = 0; l < (int)c->n_layers; l++) {
        const CudaLayer *L = &w->layers[l];
        if (norm_for(s, s->x, L->attn_norm, n, &L->wq, r->gemm)) return -1;
        if (r->gemm ? gemm(s, &L->wq, s->xb, n, s->q, 0) || gemm(s, &L->wk, s->xb, n, s->k, 0) ||
                          gemm(s, &L->wv, s->xb, n, s->v, 0)
                    : matvec_qkv(s, L, n))
            return -1;
        EmxRopeArgs a;
        memset(&a, 0, sizeof a);
        a.q = s->q;
        a.k = s->k;
        a.v = s->v;
        if (r->is_branches) {  // this step's rows of every branch's tail
            const size_t at = ((size_t)l * s->br_tail + r->step) * s->br_max * s->kv_dim;
            a.k_cache = kv_at(s, s->br_key, at);
            a.v_cache = kv_at(s, s->br_value, at);
            a.cache_row = input_of(s, r)->rows;
        } else {
            a.k_cache = kv_at(s, s->key, (size_t)l * s->ctx * s->kv_dim);
            a.v_cache = kv_at(s, s->value, (size_t)l * s->ctx * s->kv_dim);
        }
        a.kv_dtype = s->kv_type;
        a.pos = pos_d;
        a.inv_freq = w->inv_freq;
        a.q_norm = L->q_norm;
        a.k_norm = L->k_norm;
        a.bq = L->bq, a.bk = L->bk, a.bv = L->bv;
        a.eps = eps;
        a.batch = n;
        a.n_heads = (int)c->n_heads;
        a.n_kv_heads = (int)c->n_kv_heads;
        a.head_dim = (int)c->head_dim;
        a.style = (int)c->rope_style;
        if (r->multi) {
            if (rope_multi(s, l, n, r, &a)) return -1;
        } else {
            CU(emx_cuda_rope_kv(&a, s->stream));
        }
        if (attention(s, l, n, pos, r, record_last)) return -1;
        // x += Wo att (both paths accumulate: the residual add is free)
        if (r->gemm ? gemm(s, &L->wo, s->att, n, s->x, 1) : matvec(s, &L->wo, s->att, n, s->x, 1, 0)) return -1;
        if (norm_for(s, s->x, L->ffn_norm, n, &L->gate, r->gemm) || ffn_in(s, L, n, r)) return -1;
        if (r->gemm ? gemm(s, &L->down, s->hb, n, s->x, 1) : matvec(s, &L->down, s->hb, n, s->x, 1, 0)) return -1;
    }
    return 0;
}

// Output norm and classifier of rows [first, first + n) of x into logits [n][vocab] (device).
static int classify(CudaState *s, int first, int n) {
    const EmxConfig *c = &s->m->cfg;
    if (norm_for(s, s->x + (size_t)first * c->dim, s->w->norm, n, &s->w->out, 0)) return -1;
    return matvec(s, &s->w->out, s->xb, n, s->logits, 0, 1);
}

static int check_tokens(CudaState *s, const int *tokens, int n) {
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= s->vocab) {
            snprintf(s->err, sizeof s->err, "%s: token id %d out of range [0, %d)", s->device_name, tokens[i], s->vocab);
            return -1;
        }
    return 0;
}

int cuda_step_check(CudaState *s, const int *tokens, int n, int pos) {
    if (n < 1 || pos < 0 || pos > s->ctx - n) {
        snprintf(s->err, sizeof s->err, "%s: positions %d..%d outside the context of %d", s->device_name, pos,
                 pos + n - 1, s->ctx);
        return -1;
    }
    return check_tokens(s, tokens, n);
}

void cuda_fill_rows(StepInput *in, const int *tokens, int n, int pos, int same_pos) {
    for (int i = 0; i < n; i++) {
        in->tokens[i] = tokens[i];
        in->pos[i] = same_pos ? pos : pos + i;
        in->rows[i] = i;
    }
    in->n_keys = pos + n;
}

// Fills the pinned input (cuda_fill_rows into in_h).
static void fill_input(CudaState *s, const int *tokens, int n, int pos, int same_pos) {
    cuda_fill_rows(s->in_h, tokens, n, pos, same_pos);
}

// Fills the pinned input and queues its copy to the device.
static int send_input(CudaState *s, const int *tokens, int n, int pos, int same_pos) {
    fill_input(s, tokens, n, pos, same_pos);
    CU(cudaMemcpyAsync(s->in_d, s->in_h, sizeof(StepInput), cudaMemcpyHostToDevice, s->stream));
    return 0;
}

// The choice of the next token from logits row 0 (emx_forward_decide), on the device, and the
// copy of its result to out_h. valid_len: keys of the last position (graph: read from in_d).
static int decide_kernels(CudaState *s, int valid_len, int graph) {
    const EmxConfig *c = &s->m->cfg;
    const EmxDecideSpec *sp = &s->spec;
    DecideOut *o = s->out_d;
    const uint64_t step = s->in_h->rng_step;
    const uint64_t *step_dev = graph ? &s->in_d->rng_step : NULL;
    const int *valid_dev = graph ? &s->in_d->n_keys : NULL;
    const int layer = sp->kind == EMX_DECIDE_ENTROPIX ? sp->profile.attn_layer : EMX_ATTN_LAYER_LAST;
    const int metrics = sp->kind == EMX_DECIDE_ENTROPIX || sp->want_metrics;
    if (metrics || sp->kind == EMX_DECIDE_GREEDY)
        CU(emx_cuda_logits_metrics(s->logits, s->vocab, &o->metrics, sp->kind == EMX_DECIDE_GREEDY ? &o->token : NULL,
                                   NULL, s->lm_ws, s->stream));
    if (metrics)
        CU(emx_cuda_attn_metrics(s->scores, s->head_stats, (int)c->n_layers, (int)c->n_heads, s->ctx,
                                 graph ? s->ctx : valid_len, valid_dev, layer, &o->metrics, s->am_ws, s->stream));
    if (sp->kind == EMX_DECIDE_SAMPLE)
        CU(emx_cuda_sample(s->logits, s->vocab, &sp->params, sp->seed, step, step_dev, 0, &o->token, s->sample_ws,
                           s->stream));
    if (sp->kind == EMX_DECIDE_ENTROPIX)
        CU(emx_cuda_entropix_step(s->logits, s->vocab, &o->metrics, &sp->profile, s->estate_d, sp->pause_token,
                                  sp->seed, step, step_dev, &o->token, &o->decision, &o->score, s->sample_ws,
                                  s->stream));
    const size_t bytes = sp->want_metrics ? sizeof(DecideOut) : offsetof(DecideOut, metrics);
    CU(cudaMemcpyAsync(s->out_h, s->out_d, bytes, cudaMemcpyDeviceToHost, s->stream));
    return 0;
}

// The agents' proposals from logits row 0 (emx_forward_propose, forward_cuda_agents.c): the ban, then the pool's
// step (kernels/sampling/agent_pool.cu) into props_d. The step's input (in_d) holds the ban and the RNG
// step; graph: the kernel reads the step there at each replay.
static int propose_kernels(CudaState *s, int graph) {
    CU(emx_cuda_ban_token(s->logits, s->vocab, &s->in_d->ban, s->stream));
    CU(emx_cuda_agents_step(s->logits, s->vocab, s->agents_d, s->round_agents, s->round_seed, s->in_h->rng_step,
                            graph ? &s->in_d->rng_step : NULL, s->round_lane, s->pick_d, s->pick_d + 1, s->props_d,
                            s->agents_ws, s->stream));
    return 0;
}

// A lookahead round after its step 0 (emx_forward_lookahead_propose): steps 1..round_steps-1,
// each a branch pass of the round's agents whose tokens are fed on the device from the previous
// step's proposals (emx_cuda_agents_feed), at the positions the host wrote to bin_h (copied
// first: in a graph that copy is a node, so each replay reads the round's values), with the
// agents proposing from their rows into props_d's row j. No host trip between steps.
static int lookahead_kernels(CudaState *s) {
    const int n = s->round_agents;
    CU(cudaMemcpyAsync(s->bin_d, s->bin_h, (size_t)(s->round_steps - 1) * sizeof(StepInput), cudaMemcpyHostToDevice,
                       s->stream));
    for (int j = 1; j < s->round_steps; j++) {
        StepInput *in = s->bin_d + (j - 1);
        CU(emx_cuda_agents_feed(s->props_d + (size_t)(j - 1) * n, n, j > 1 ? (in - 1)->tokens : NULL, in->tokens,
                                s->stream));
        const Rows rows = {.is_branches = 1, .step = j - 1, .device_positions = 1, .in = in};
        if (run_layers(s, n, 0, &rows, 0) || classify(s, 0, n)) return -1;
        CU(emx_cuda_agents_rows_step(s->logits, (size_t)s->vocab, s->vocab, s->agents_d, n, s->round_seed,
                                     s->bin_h[j - 1].rng_step, &in->rng_step, s->round_lane,
                                     s->props_d + (size_t)j * n, s->agents_ws, s->stream));
    }
    return 0;
}

// The end of a step (tail: TAIL_*): the logits to the host, the choice or the proposals.
static int step_tail(CudaState *s, int tail, int valid_len, int graph) {
    if (tail == TAIL_DECIDE) return decide_kernels(s, valid_len, graph);
    if (tail == TAIL_PROPOSE || tail == TAIL_LOOKAHEAD) {
        const int steps = tail == TAIL_LOOKAHEAD ? s->round_steps : 1;
        if (propose_kernels(s, graph) || (steps > 1 && lookahead_kernels(s))) return -1;
        CU(cudaMemcpyAsync(s->props_h, s->props_d, (size_t)steps * s->round_agents * sizeof(EmxProposal),
                           cudaMemcpyDeviceToHost, s->stream));
        return 0;
    }
    if (tail == TAIL_PAIR) {  // emx_forward_pair: a few numbers, not the row
        CU(emx_cuda_logit_pair(s->logits, s->vocab, s->pair_ids[0], s->pair_ids[1], s->pair_d, s->stream));
        CU(cudaMemcpyAsync(s->pair_h, s->pair_d, sizeof(EmxLogitPair), cudaMemcpyDeviceToHost, s->stream));
        return 0;
    }
    CU(cudaMemcpyAsync(s->logits_h, s->logits, (size_t)s->vocab * sizeof(float), cudaMemcpyDeviceToHost, s->stream));
    return 0;
}

int cuda_chunk_pass(CudaState *s, int n, int pos, const StepInput *in, int graph, int tail) {
    const Rows rows = {.device_positions = graph, .in = in};
    if (run_layers(s, n, pos, &rows, tail >= 0)) return -1;
    if (tail < 0) return 0;
    return classify(s, n - 1, 1) || step_tail(s, tail, pos + n, graph) ? -1 : 0;
}

int cuda_capture_end(CudaState *s, int bad, cudaGraphExec_t *exec, int *nodes) {
    cudaGraph_t g = NULL;
    cudaError_t end = cudaStreamEndCapture(s->stream, &g);
    if (bad) {
        if (g) cudaGraphDestroy(g);
        return -1;
    }
    CU(end);
    size_t n = 0;
    cudaError_t e = cudaGraphGetNodes(g, NULL, &n);
    if (e == cudaSuccess) e = cudaGraphInstantiate(exec, g, 0);
    cudaGraphDestroy(g);
    CU(e);
    if (nodes) *nodes = (int)n;
    return 0;
}

// One decode step (in_h filled) with its tail: captured into that tail's graph on the first
// call, replayed after (the input copy is the graph's first node: it reads in_h at replay
// time). no_graphs: the same launches made directly.
static int decode_step(CudaState *s, int pos, int tail) {
    if (s->no_graphs) {
        const Rows direct_rows = {.is_branches = 0};
        CU(cudaMemcpyAsync(s->in_d, s->in_h, sizeof(StepInput), cudaMemcpyHostToDevice, s->stream));
        if (run_layers(s, 1, pos, &direct_rows, 1) || classify(s, 0, 1)) return -1;
        return step_tail(s, tail, pos + 1, 0);
    }
    cudaGraphExec_t *exec = &s->step_graph[tail];
    if (!*exec) {
        const Rows graph_rows = {.device_positions = 1};
        CU(cudaStreamBeginCapture(s->stream, cudaStreamCaptureModeThreadLocal));
        int bad = cu(s, cudaMemcpyAsync(s->in_d, s->in_h, sizeof(StepInput), cudaMemcpyHostToDevice, s->stream),
                     "cudaMemcpyAsync") ||
                  run_layers(s, 1, pos, &graph_rows, 1) || classify(s, 0, 1) || step_tail(s, tail, pos + 1, 1);
        if (cuda_capture_end(s, bad, exec, &s->step_graph_nodes[tail])) return -1;
    }
    CU(cudaGraphLaunch(*exec, s->stream));
    return 0;
}

// A long prompt (n > GEMM_MIN_PROMPT) at pos..: chunks of equal size up to gemm_rows (a 300-row
// prompt is two of 150, not 256 and 44: each chunk dequantises every matrix once, whatever its
// rows), every projection a GEMM, the classifier on the last row only; ends with step_tail.
static int prefill_gemm(CudaState *s, const int *tokens, int n, int pos, int tail) {
    if (!s->blas && cublasCreate(&s->blas) != CUBLAS_STATUS_SUCCESS) {
        s->blas = NULL;
        snprintf(s->err, sizeof s->err, "%s: cublasCreate failed (the prompt's GEMMs need a cuBLAS handle)",
                 s->device_name);
        return -1;
    }
    const Rows rows = {.gemm = 1};
    const int n_chunks = (n + s->gemm_rows - 1) / s->gemm_rows, size = (n + n_chunks - 1) / n_chunks;
    for (int done = 0; done < n;) {
        const int chunk = n - done < size ? n - done : size, last = done + chunk == n;
        // the pinned input is read by the copy when it runs: finish the previous chunk first
        if (done) CU(cudaStreamSynchronize(s->stream));
        for (int i = 0; i < chunk; i++) {  // gin: [0][chunk] token ids, [1][chunk] positions
            s->gin_h[i] = tokens[done + i];
            s->gin_h[s->gemm_rows + i] = pos + done + i;
        }
        CU(cudaMemcpyAsync(s->gin_d, s->gin_h, 2 * (size_t)s->gemm_rows * sizeof(int), cudaMemcpyHostToDevice,
                           s->stream));
        if (run_layers(s, chunk, pos + done, &rows, last)) return -1;
        done += chunk;
        if (last && (classify(s, chunk - 1, 1) || step_tail(s, tail, pos + n, 0))) return -1;
    }
    return 0;
}

int cuda_step_run(CudaState *s, const int *tokens, int n, int pos, int tail) {
    if (cuda_step_check(s, tokens, n, pos)) return -1;
    CU(cudaSetDevice(s->device));
    // emx_forward_propose and emx_forward_lookahead_propose set their own
    if (tail != TAIL_PROPOSE && tail != TAIL_LOOKAHEAD) s->in_h->rng_step = (uint64_t)(pos + n);
    if (n == 1) {
        fill_input(s, tokens, 1, pos, 0);  // decode_step copies it (in the graph: its first node)
        if (decode_step(s, pos, tail)) return -1;
    } else if (n > GEMM_MIN_PROMPT && s->gemm_rows) {
        if (prefill_gemm(s, tokens, n, pos, tail)) return -1;
    } else {
        const Rows rows = {.is_branches = 0};
        for (int done = 0; done < n;) {
            const int chunk = n - done < CHUNK ? n - done : CHUNK, last = done + chunk == n;
            // the pinned input is read by the copy when it runs: finish the previous chunk first
            if (done) CU(cudaStreamSynchronize(s->stream));
            if (send_input(s, tokens + done, chunk, pos + done, 0) || run_layers(s, chunk, pos + done, &rows, last))
                return -1;
            done += chunk;
            if (last && (classify(s, chunk - 1, 1) || step_tail(s, tail, pos + n, 0))) return -1;
        }
    }
    CU(cudaStreamSynchronize(s->stream));
    s->last_pos = pos + n - 1;
    s->logits_fresh = tail == TAIL_LOGITS;  // a proposal round leaves its logits on the device only
    return 0;
}

const float *emx_cuda_state_forward(EmxState *st, const int *tokens, int n, int pos) {
    CudaState *s = (CudaState *)st;
    return cuda_step_run(s, tokens, n, pos, TAIL_LOGITS) ? NULL : s->logits_h;
}

int emx_cuda_state_forward_decide(EmxState *st, const int *tokens, int n, int pos, const EmxDecideSpec *spec,
                                  EmxDecideResult *out) {
    CudaState *s = (CudaState *)st;
    if (!s->have_spec || memcmp(&s->spec, spec, sizeof *spec) != 0) {  // a new sampler: a new graph
        if (s->step_graph[TAIL_DECIDE]) cudaGraphExecDestroy(s->step_graph[TAIL_DECIDE]);
        s->step_graph[TAIL_DECIDE] = NULL;
        s->spec = *spec;
        s->have_spec = 1;
        CU(cudaSetDevice(s->device));
        CU(cudaMemset(s->estate_d, 0, sizeof(EmxEntropixState)));
    }
    if (cuda_step_run(s, tokens, n, pos, TAIL_DECIDE)) return -1;
    memset(out, 0, sizeof *out);
    out->token = s->out_h->token;
    out->score = NAN;
    if (spec->kind == EMX_DECIDE_ENTROPIX) {
        out->decision = s->out_h->decision;
        out->score = s->out_h->score;
    }
    if (spec->want_metrics) out->metrics = s->out_h->metrics;
    if (out->token < 0 || out->token >= s->vocab) {
        snprintf(s->err, sizeof s->err, "%s: the device sampler chose no token (%d)", s->device_name, out->token);
        return -1;
    }
    return 1;
}

int emx_cuda_state_forward_all_logits(EmxState *st, const int *tokens, int n, int pos, float *logits) {
    CudaState *s = (CudaState *)st;
    if (cuda_step_check(s, tokens, n, pos)) return -1;
    CU(cudaSetDevice(s->device));
    s->logits_fresh = 0;
    const Rows rows = {.is_branches = 0};
    for (int done = 0; done < n;) {
        const int chunk = n - done < CHUNK ? n - done : CHUNK;
        if (send_input(s, tokens + done, chunk, pos + done, 0) || run_layers(s, chunk, pos + done, &rows, done + chunk == n) ||
            classify(s, 0, chunk))
            return -1;
        CU(cudaMemcpyAsync(logits + (size_t)done * s->vocab, s->logits, (size_t)chunk * s->vocab * sizeof(float),
                           cudaMemcpyDeviceToHost, s->stream));
        CU(cudaStreamSynchronize(s->stream));
        done += chunk;
    }
    memcpy(s->logits_h, logits + (size_t)(n - 1) * s->vocab, (size_t)s->vocab * sizeof(float));
    s->last_pos = pos + n - 1;
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Several states in one step (emx_forward_multi): states[0]'s scratch runs the n rows through
// every matvec as one batch (each weight read once for all rows, as a prefill chunk); rope_kv
// and attention run per row on each state's own cache (rope_multi, attention_multi). Not
// captured into a graph: a layer costs about a dozen batched launches plus three per row.

// Why states[0..n) cannot run as one step led by s (its err set), or 0 when they can.
static int multi_refused(CudaState *s, EmxState *const *states, const int *tokens, const int *pos, int n) {
    const char *d = s->device_name;
    if (n < 1 || n > CHUNK)
        return snprintf(s->err, sizeof s->err, "%s: forward_multi: %d rows (1..%d a step)", d, n, CHUNK), -1;
    for (int i = 0; i < n; i++) {
        const CudaState *r = (const CudaState *)states[i];
        if (r->base.backend != s->base.backend || r->w != s->w)
            return snprintf(s->err, sizeof s->err, "%s: forward_multi: row %d's state (%s) does not share the first "
                            "state's uploaded weights (another model or device, or made without share_weights)",
                            d, i, r->base.backend == s->base.backend ? r->device_name : "not CUDA"), -1;
        for (int j = 0; j < i; j++)
            if (states[j] == states[i])
                return snprintf(s->err, sizeof s->err, "%s: forward_multi: rows %d and %d are one state", d, j, i), -1;
        if (pos[i] < 0 || pos[i] >= r->ctx)
            return snprintf(s->err, sizeof s->err, "%s: forward_multi: row %d: position %d outside the context of %d",
                            d, i, pos[i], r->ctx), -1;
        if (tokens[i] < 0 || tokens[i] >= s->vocab)
            return snprintf(s->err, sizeof s->err, "%s: forward_multi: row %d: token id %d out of range [0, %d)", d,
                            i, tokens[i], s->vocab), -1;
    }
    return 0;
}

int emx_cuda_state_forward_multi(EmxState *const *states, const int *tokens, const int *pos, int n,
                                 const float **logits) {
    CudaState *s = (CudaState *)states[0];
    if (multi_refused(s, states, tokens, pos, n)) return -1;
    CU(cudaSetDevice(s->device));
    for (int i = 0; i < n; i++) {
        s->in_h->tokens[i] = tokens[i];
        s->in_h->pos[i] = pos[i];
        s->in_h->rows[i] = i;
    }
    CU(cudaMemcpyAsync(s->in_d, s->in_h, sizeof(StepInput), cudaMemcpyHostToDevice, s->stream));
    const Rows rows = {.multi = (CudaState *const *)states, .multi_pos = pos};
    if (run_layers(s, n, 0, &rows, 1) || classify(s, 0, n)) return -1;
    const size_t row_bytes = (size_t)s->vocab * sizeof(float);
    for (int i = 0; i < n; i++) {
        CudaState *r = (CudaState *)states[i];
        const float *mine = s->logits + (size_t)i * s->vocab;
        // into the state's own logits row 0 too: emx_state_propose reads them there
        if (i) CU(cudaMemcpyAsync(r->logits, mine, row_bytes, cudaMemcpyDeviceToDevice, s->stream));
        CU(cudaMemcpyAsync(r->logits_h, mine, row_bytes, cudaMemcpyDeviceToHost, s->stream));
    }
    CU(cudaStreamSynchronize(s->stream));
    for (int i = 0; i < n; i++) {
        CudaState *r = (CudaState *)states[i];
        r->last_pos = pos[i];
        r->logits_fresh = 1;
        logits[i] = r->logits_h;
    }
    return 0;
}

// Score rows are copied to the host only when asked for (the device samplers read them where
// they are). const in forward.h: the copy is a cache of device state, not a change of it.
const float *emx_cuda_state_attention_scores(const EmxState *cst, int *last_pos) {
    CudaState *s = (CudaState *)cst;
    const EmxConfig *c = &s->m->cfg;
    const size_t n = (size_t)c->n_layers * c->n_heads * s->ctx;
    if (last_pos) *last_pos = s->last_pos;
    if (!s->scores_h && !(s->scores_h = malloc(n * sizeof(float)))) return NULL;
    if (cu(s, cudaSetDevice(s->device), "cudaSetDevice") ||
        cu(s, cudaMemcpy(s->scores_h, s->scores, n * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy (scores)"))
        return NULL;
    return s->scores_h;
}

// A host copy of the cache, made now: writes to it do not reach the device. f32 whatever the
// cache's type: an f16 cache comes over as it is and is widened here (exactly).
static int cache_to_host(CudaState *s, float *dst, const void *src, size_t n) {
    if (s->kv_type == EMX_KV_F32)
        return cu(s, cudaMemcpy(dst, src, n * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy (KV cache)");
    uint16_t *h = malloc(n * sizeof(uint16_t));
    int rc = !h || cu(s, cudaMemcpy(h, src, n * sizeof(uint16_t), cudaMemcpyDeviceToHost), "cudaMemcpy (KV cache)");
    if (!rc) emx_dequantize_row(EMX_F16, h, 1, n, 0, dst);
    free(h);
    return rc;
}

void emx_cuda_state_kv_cache(EmxState *st, float **key, float **value, int *kv_dim) {
    CudaState *s = (CudaState *)st;
    const size_t n = (size_t)s->m->cfg.n_layers * s->ctx * s->kv_dim;
    if (!s->key_h) s->key_h = malloc(n * sizeof(float));
    if (!s->value_h) s->value_h = malloc(n * sizeof(float));
    int ok = s->key_h && s->value_h && !cu(s, cudaSetDevice(s->device), "cudaSetDevice") &&
             !cache_to_host(s, s->key_h, s->key, n) && !cache_to_host(s, s->value_h, s->value, n);
    if (key) *key = ok ? s->key_h : NULL;
    if (value) *value = ok ? s->value_h : NULL;
    if (kv_dim) *kv_dim = s->kv_dim;
}

// ---------------------------------------------------------------------------------------------
// Branches (forward.h): the tails on the device, the attention reading the prefix from the
// cache and the rest from the branch's tail (EmxAttentionArgs tail_k/tail_v).

int cuda_branch_pass(CudaState *s, const int *tokens, int n, int prefix, int step) {
    if (n < 1 || n > s->br_max || step < 0 || step >= s->br_tail || prefix < 1 || prefix + step >= s->ctx) {
        snprintf(s->err, sizeof s->err, "%s: branches: bad call (n %d, prefix %d, step %d)", s->device_name, n, prefix,
                 step);
        return -1;
    }
    if (check_tokens(s, tokens, n)) return -1;
    CU(cudaSetDevice(s->device));
    s->logits_fresh = 0;
    const Rows rows = {.is_branches = 1, .prefix = prefix, .step = step};
    if (send_input(s, tokens, n, prefix + step, 1) || run_layers(s, n, prefix + step, &rows, 0) || classify(s, 0, n))
        return -1;
    return 0;
}
