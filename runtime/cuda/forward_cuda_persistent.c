// forward_cuda_persistent.c — the decode step as one persistent kernel
// (kernels/persistent/decode_persistent.h): the embedding, every layer and the classifier in one
// cooperative launch whose blocks wait for each other at a grid barrier between phases, where the
// graph path launches 2 + 5 n_layers kernels. Asked for per state (EmxStateOptions.persistent, or
// EMX_CUDA_PERSISTENT=1 when the state is made); taken where every layer is of one kind the fused
// layer takes (a SwiGLU block without sandwich norms, or Gemma 3's GeGLU between them), every
// matrix of one dtype, widths and attention shapes the fused kernels take, and the kernel's blocks
// fit the device at once. Else the graph path decodes, and the state says why
// (EmxStateInfo.decode_path). A decision's step (emx_forward_decide) makes the statistics the
// decision reads in the same launch (decision_metrics), where the classifier is in it, and the
// choice itself after them, entropix's or a top-k draw's (choice_in_launch): its step is then
// that one launch. The
// results are bitwise the fused graph path's, which stays the reference they are tested against
// (tests/kernels/test_forward_cuda_persistent.cpp).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/persistent/decode_persistent.h"
#include "kernels/embedding.h"
#include "runtime/cuda/forward_cuda_pass.h"
#include "runtime/cuda/forward_cuda_state.h"

// NULL when every layer is one the persistent kernel runs (Llama/Qwen's: SwiGLU, no sandwich
// norms; or Gemma 3's: GeGLU between sandwich norms), else why not.
static const char *layers_refusal(const CudaState *s) {
    if (!s->fused) return "the fused kernels are off (EMX_CUDA_FUSED=0)";
    const int gelu = s->m->ext.ffn_act == EMX_ACT_GELU_TANH;
    const uint32_t dt = s->w->layers[0].wq.dtype;
    for (uint32_t l = 0; l < s->m->cfg.n_layers; l++) {
        const CudaLayer *L = &s->w->layers[l];
        const int sandwich = L->post_attn_norm && L->post_ffn_norm;
        if (!sandwich && (L->post_attn_norm || L->post_ffn_norm)) return "a layer with one of the two sandwich norms";
        if (sandwich != gelu)
            return gelu ? "a GeGLU feed-forward block without sandwich norms" : "sandwich norms around a SwiGLU block";
        const EmxCudaWeight *w[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->gate, &L->up, &L->down};
        for (int i = 0; i < 7; i++)
            if (w[i]->dtype != dt) return "layers whose matrices are of different dtypes";
    }
    return NULL;
}

// Layer l's entry of the kernel's table: its weights, and its cache, ring, window and score rows
// as the fused path's attention takes them (cuda_attention_args, cuda_record_scores), its RoPE
// frequencies as cuda_rope_args picks them.
static EmxDecodeLayer layer_entry(const CudaState *s, int l) {
    const CudaLayer *L = &s->w->layers[l];
    EmxAttentionArgs at;
    cuda_attention_args(s, l, &at);
    cuda_record_scores(s, l, &at);
    EmxDecodeLayer e;
    memset(&e, 0, sizeof e);
    e.wq = L->wq.data, e.wk = L->wk.data, e.wv = L->wv.data, e.wo = L->wo.data;
    e.gate = L->gate.data, e.up = L->up.data, e.down = L->down.data;
    e.attn_norm = L->attn_norm, e.ffn_norm = L->ffn_norm;
    e.post_attn_norm = L->post_attn_norm, e.post_ffn_norm = L->post_ffn_norm;
    e.q_norm = L->q_norm, e.k_norm = L->k_norm;
    e.bq = L->bq, e.bk = L->bk, e.bv = L->bv;
    e.inv_freq = emx_layer_is_local(&s->m->ext, (uint32_t)l) ? s->w->inv_freq_local : s->w->inv_freq;
    e.k_cache = cuda_layer_kv(s, s->key, l), e.v_cache = cuda_layer_kv(s, s->value, l);  // (at's: read-only)
    e.cache_rows = at.cache_rows, e.window = at.window;
    e.scores = at.scores, e.head_stats = at.head_stats;
    return e;
}

// The most bytes the blocks without an attention item warm L2 with while that phase runs
// (EmxDecodeStep.warm_bytes: the next phases' weights): a third of the device's L2, leaving the
// rest to the activations and the keys and values the attention reads; or
// EMX_CUDA_PERSISTENT_WARM_MB (0: none, to measure what the warming saves). None before sm_90,
// which has no bulk prefetch.
static size_t warm_bytes(const CudaState *s) {
    int l2 = 0, cc_major = 0;
    if (cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, s->device) != cudaSuccess ||
        cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, s->device) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    if (cc_major < 9) return 0;
    const char *env = getenv("EMX_CUDA_PERSISTENT_WARM_MB");
    if (env) {
        const long mb = strtol(env, NULL, 10);
        return mb > 0 ? (size_t)mb << 20 : 0;
    }
    return l2 > 0 ? (size_t)l2 / 3 : 0;
}

// The step's arguments (s->step), layers_d not yet filled.
static void step_args(CudaState *s) {
    const EmxConfig *c = &s->m->cfg;
    const CudaWeights *w = s->w;
    EmxDecodeStep *a = &s->step;
    memset(a, 0, sizeof *a);
    a->n_layers = (int)c->n_layers, a->dim = (int)c->dim, a->hidden_dim = (int)c->hidden_dim;
    a->n_heads = (int)c->n_heads, a->n_kv_heads = (int)c->n_kv_heads, a->head_dim = (int)c->head_dim;
    a->vocab = s->vocab, a->ctx = s->ctx;
    a->dtype = w->layers[0].wq.dtype;
    a->kv_dtype = s->kv_type;
    a->eps = c->norm_eps;
    a->attn_scale = s->m->ext.attn_scale;
    a->embed_scale = s->m->ext.embed_scale;
    a->rope_style = (int)c->rope_style;
    a->sandwich = s->m->ext.ffn_act == EMX_ACT_GELU_TANH;  // every layer, as layers_refusal checked
    a->layers = s->step_layers_d;
    // the embedding and the classifier in the launch where it takes their dtype (the layers', or
    // a q4 export's q8); else their own launches before and after it
    a->emb_dtype = w->emb.dtype, a->out_dtype = w->out.dtype;
    a->emb = emx_cuda_decode_persistent_takes(a->dtype, w->emb.dtype) ? w->emb.data : NULL;
    a->out = emx_cuda_decode_persistent_takes(a->dtype, w->out.dtype) && w->out.cols == a->dim ? w->out.data : NULL;
    a->out_norm = w->norm;
    a->x = s->x, a->q = s->q, a->k = s->k, a->v = s->v, a->att = s->att, a->hb = s->hb, a->logits = s->logits;
    a->xb = s->xb, a->tmp = s->tmp;
    a->attn_ws = s->attn_ws;
    a->arrivals = s->attn_arrivals;
    a->warm_bytes = warm_bytes(s);
    a->sync = s->step_sync;
    a->token = &s->in_d->tokens[0];
    a->pos = &s->in_d->pos[0];
}

// The grid: the most blocks resident at once, or fewer (EMX_CUDA_PERSISTENT_BLOCKS, for
// measuring the barrier's cost against the bandwidth more blocks keep busy).
static const char *step_blocks(CudaState *s) {
    int fit = 0;
    if (emx_cuda_decode_persistent_blocks(&s->step, &fit) != cudaSuccess) {
        cudaGetLastError();
        return "the occupancy query failed";
    }
    if (fit < 1) return "not one block of the kernel fits on an SM";
    const char *env = getenv("EMX_CUDA_PERSISTENT_BLOCKS");
    const int want = env ? atoi(env) : 0;
    s->step.blocks = want > 0 && want < fit ? want : fit;
    return NULL;
}

// A timed state's stamps (s->clock: EmxStateOptions.phase_timeline), for the most phases a launch
// stamps (with the metrics).
static int clocks_alloc(CudaState *s) {
    EmxDecodeStep a = s->step;
    EmxMetrics any;  // (host addresses: only counted)
    a.metrics.out = &any;
    a.choice.sample_ws = &any;
    const size_t n = (size_t)(emx_cuda_decode_persistent_phases(&a) + 1) * (size_t)a.blocks * 2;
    if (dev_alloc(s, (void **)&s->step_clocks, n * sizeof(long long), "the persistent kernel's timeline")) return -1;
    if (!(s->step_clocks_h = malloc(n * sizeof(long long)))) {
        snprintf(s->err, sizeof s->err, "%s: out of host memory", s->device_name);
        return -1;
    }
    return 0;
}

int cuda_persistent_init(CudaState *s, int asked) {
    s->persistent = 0;
    if (!asked) {
        snprintf(s->decode_path, sizeof s->decode_path, "graph");
        return 0;
    }
    const char *why = layers_refusal(s);
    if (!why) {
        step_args(s);
        why = emx_cuda_decode_persistent_refusal(&s->step);
    }
    if (!why) why = step_blocks(s);
    if (why) {  // the graph path decodes, and says so
        snprintf(s->decode_path, sizeof s->decode_path, "graph (the persistent kernel does not take it: %s)", why);
        fprintf(stderr, "%s: %s\n", s->device_name, s->decode_path);
        return 0;
    }
    const int L = (int)s->m->cfg.n_layers;
    EmxDecodeLayer *table = malloc((size_t)L * sizeof *table);
    if (!table) {
        snprintf(s->err, sizeof s->err, "%s: out of host memory", s->device_name);
        return -1;
    }
    for (int l = 0; l < L; l++) table[l] = layer_entry(s, l);
    int bad = dev_alloc(s, (void **)&s->step_layers_d, (size_t)L * sizeof *table, "the persistent kernel's table") ||
              dev_alloc(s, (void **)&s->step_sync, 2 * sizeof(unsigned), "the persistent kernel's table");
    bad = bad || cu(s, cudaMemcpy(s->step_layers_d, table, (size_t)L * sizeof *table, cudaMemcpyHostToDevice), "cudaMemcpy") ||
          cu(s, cudaMemset(s->step_sync, 0, 2 * sizeof(unsigned)), "cudaMemset");  // the kernel keeps them zero
    free(table);
    if (bad) return -1;
    s->step.layers = s->step_layers_d;
    s->step.sync = s->step_sync;
    if (s->clock && clocks_alloc(s)) return -1;
    s->persistent = 1;
    const char *apart = !s->step.emb && !s->step.out ? ", the embedding and the classifier apart"
                        : !s->step.emb                ? ", the embedding apart"
                        : !s->step.out                ? ", the classifier apart"
                                                      : "";
    char warm[64] = "";
    if (s->step.warm_bytes > 0)
        snprintf(warm, sizeof warm, ", L2 warmed %.1f MiB", (double)s->step.warm_bytes / (1 << 20));
    snprintf(s->decode_path, sizeof s->decode_path, "persistent kernel, %d block%s%s%s", s->step.blocks,
             s->step.blocks == 1 ? "" : "s", apart, warm);
    return 0;
}

// The statistics the decision (s->spec, decide_kernels in forward_cuda_tail.c) reads, made in the
// launch: the logits' metrics and argmax for greedy, and the attention metrics of the profile's
// layers for entropix or when the metrics are asked for. 0: none to make (a plain draw).
static int decision_metrics(const CudaState *s, EmxDecodeMetrics *m) {
    const EmxDecideSpec *sp = &s->spec;
    const int greedy = sp->kind == EMX_DECIDE_GREEDY, attn = cuda_decide_attn_metrics(sp);
    int first = 0, last = -1;
    if (!greedy && !attn) return 0;
    if (attn && emx_attn_layer_range(cuda_decide_attn_layer(sp), (int)s->m->cfg.n_layers, &first, &last) != 0)
        return 0;  // the tail's kernels refuse it, and say so
    memset(m, 0, sizeof *m);
    m->out = &s->out_d->metrics;
    m->argmax = greedy ? &s->out_d->token : NULL;
    m->logits_ws = s->lm_ws, m->attn_ws = s->am_ws;
    m->attn_first = first, m->attn_layers = attn ? last - first + 1 : 0;
    return 1;
}

// The choice made in the launch after the classifier (and the metrics it reads): its passes over
// the vocabulary (the scan, z, the radix select's levels, the gather:
// kernels/sampling/sampling_mb.cuh), then the last block's choice into out_d, where the
// vocabulary is wide enough to have the passes (from 8192 on): an entropix decision (with the
// attention metrics made in the launch: attn), or a fixed draw with top-k on (top-k off: the
// sampler's wide draw, kernels after the launch). 0: none (greedy, the tail's kernels, or the
// tail's one block does everything). graph: the RNG step read on the device at each replay, as
// the tail's kernels read it.
static int choice_in_launch(const CudaState *s, int graph, int attn, EmxDecodeChoice *c) {
    const EmxDecideSpec *sp = &s->spec;
    const int entropix = sp->kind == EMX_DECIDE_ENTROPIX && attn;
    const int fixed = sp->kind == EMX_DECIDE_SAMPLE && sp->params.temperature > 0.0f && sp->params.top_k > 1;
    if (!(entropix || fixed) || emx_cuda_sample_grid(s->vocab) < 2) return 0;
    memset(c, 0, sizeof *c);
    c->sample_ws = s->sample_ws;
    c->fixed = fixed;
    c->params = sp->params;
    c->state = s->estate_d;
    c->profile = sp->profile;
    c->pause_token = sp->pause_token;
    c->seed = sp->seed, c->step = s->in_h->rng_step, c->step_dev = graph ? &s->in_d->rng_step : NULL;
    c->token = &s->out_d->token;
    if (entropix) c->decision = &s->out_d->decision, c->score = &s->out_d->score;
    return 1;
}

int cuda_persistent_step(CudaState *s, int tail, int graph) {
    EmxDecodeStep a = s->step;
    s->metrics_in_step = a.out && tail == TAIL_DECIDE && decision_metrics(s, &a.metrics);
    s->decision_in_step = a.out && tail == TAIL_DECIDE &&
                          choice_in_launch(s, graph, s->metrics_in_step && a.metrics.attn_layers > 0, &a.choice);
    const int timed = s->clock && s->clock->running;
    a.clocks = timed ? s->step_clocks : NULL;
    if (!a.emb) {  // follows the input copy: an ordinary launch
        CU(emx_cuda_embedding_scaled(&s->w->emb, s->in_d->tokens, 1, s->m->ext.embed_scale, s->x, s->stream));
        if (cuda_phase(s, EMX_PHASE_EMBED)) return -1;
    }
    CU(emx_cuda_decode_persistent(&a, s->stream));
    if (timed) {
        s->step_timed = a;
        if (cuda_phase(s, CUDA_PHASE_SPLIT)) return -1;
    }
    return a.out ? 0 : cuda_classify(s, 0, 1);
}

// Phase k of launch a (EmxDecodeStep.clocks' order) as a timeline's phase.
static EmxPhase phase_of(const EmxDecodeStep *a, int k) {
    static const EmxPhase layer[5] = {EMX_PHASE_ATTN_IN, EMX_PHASE_ATTN, EMX_PHASE_ATTN_OUT, EMX_PHASE_FFN_IN,
                                      EMX_PHASE_FFN_OUT};
    if (a->emb) {
        if (k == 0) return EMX_PHASE_EMBED;
        k--;
    }
    if (k < 5 * a->n_layers) return layer[k % 5];
    k -= 5 * a->n_layers;
    if (!a->out) return EMX_PHASE_FFN_OUT;  // after the last layer's barrier: its residual add, if any
    // the metrics, the passes and the choice (after the classifier's phase): the choice's
    return (a->metrics.out || a->choice.sample_ws) && k >= 1 ? EMX_PHASE_TAIL : EMX_PHASE_CLASSIFIER;
}

// Block b's stamps of slot k (EmxDecodeStep.clocks): [0] arrival, [1] departure.
static const long long *stamps(const long long *c, int k, int blocks, int b) { return c + ((size_t)k * blocks + b) * 2; }

int cuda_persistent_timeline(CudaState *s) {
    const EmxDecodeStep *a = &s->step_timed;
    if (!s->clock || !a->clocks) return 0;
    const int P = emx_cuda_decode_persistent_phases(a), G = a->blocks;
    CU(cudaMemcpy(s->step_clocks_h, a->clocks, (size_t)(P + 1) * G * 2 * sizeof(long long), cudaMemcpyDeviceToHost));
    double share[EMX_PHASES] = {0}, wait[EMX_PHASES] = {0}, total = 0;
    for (int k = 1; k <= P; k++) {  // a phase: the blocks' mean time from the last departure to this
        double mean = 0, work_max = 0;  // one, and the slowest block's work before its arrival
        for (int b = 0; b < G; b++) {
            const long long left = stamps(s->step_clocks_h, k - 1, G, b)[1];
            const long long *now = stamps(s->step_clocks_h, k, G, b);
            mean += (double)(now[1] - left) / G;
            if ((double)(now[0] - left) > work_max) work_max = (double)(now[0] - left);
        }
        if (k == P) mean = work_max;  // no barrier ends the last phase: the launch ends with its
                                      // slowest block (the one that merges or decides)
        const EmxPhase p = phase_of(a, k - 1);
        share[p] += mean;
        wait[p] += mean > work_max ? mean - work_max : 0;
        total += mean;
    }
    s->step_timed.clocks = NULL;
    if (!(total > 0)) {
        snprintf(s->err, sizeof s->err, "%s: the persistent kernel's timeline: its blocks' clocks did not advance",
                 s->device_name);
        return -1;
    }
    for (int p = 0; p < EMX_PHASES; p++) share[p] /= total, wait[p] /= total;
    cuda_phase_split(s->clock, share, wait);
    return 0;
}
