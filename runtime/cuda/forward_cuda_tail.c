// forward_cuda_tail.c — the end of a CUDA step on the device (forward_cuda_pass.h's
// cuda_step_tail): the logits to the host, emx_forward_decide's choice, the agents' proposals and a
// lookahead round's branch passes (forward_cuda_agents.c's entry points), emx_forward_pair's two
// logits.
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
#include "runtime/cuda/forward_cuda_pass.h"
#include "runtime/cuda/forward_cuda_state.h"

// The choice of the next token from logits row 0 (emx_forward_decide), on the device, and the
// copy of its result to out_h. valid_len: keys of the last position (graph: read from in_d).
static int decide_kernels(CudaState *s, int valid_len, int graph) {
    const EmxConfig *c = &s->m->cfg;
    const EmxDecideSpec *sp = &s->spec;
    DecideOut *o = s->out_d;
    const uint64_t step = s->in_h->rng_step;
    const uint64_t *step_dev = graph ? &s->in_d->rng_step : NULL;
    const int *valid_dev = graph ? &s->in_d->n_keys : NULL;
    const int layer = cuda_decide_attn_layer(sp), metrics = cuda_decide_attn_metrics(sp);
    const int made = s->metrics_in_step;  // by the persistent kernel, in the step's launch
    if (!made && (metrics || sp->kind == EMX_DECIDE_GREEDY))
        CU(emx_cuda_logits_metrics(s->logits, s->vocab, &o->metrics, sp->kind == EMX_DECIDE_GREEDY ? &o->token : NULL,
                                   NULL, s->lm_ws, s->stream, s->pdl_now));
    EmxCudaAttnWindow win;  // the local layers' rows from their first visible key
    win.window = (int)s->m->ext.sliding_window;
    memcpy(win.local_layers, s->m->ext.local_layers, sizeof win.local_layers);
    if (!made && metrics)
        CU(emx_cuda_attn_metrics_window(s->scores, s->head_stats, (int)c->n_layers, (int)c->n_heads, s->ctx,
                                        graph ? s->ctx : valid_len, valid_dev, &win, layer, &o->metrics, s->am_ws,
                                        s->stream, s->pdl_now));
    if (sp->kind == EMX_DECIDE_SAMPLE && !s->decision_in_step)  // (else drawn by the persistent kernel)
        CU(emx_cuda_sample(s->logits, s->vocab, &sp->params, sp->seed, step, step_dev, 0, &o->token, s->sample_ws,
                           s->stream, s->pdl_now));
    if (sp->kind == EMX_DECIDE_ENTROPIX && !s->decision_in_step)  // (else made by the persistent kernel)
        CU(emx_cuda_entropix_step(s->logits, s->vocab, &o->metrics, &sp->profile, s->estate_d, sp->pause_token,
                                  sp->seed, step, step_dev, &o->token, &o->decision, &o->score, s->sample_ws,
                                  s->stream, s->pdl_now));
    const size_t bytes = sp->want_metrics ? sizeof(DecideOut) : offsetof(DecideOut, metrics);
    CU(cudaMemcpyAsync(s->out_h + s->out_slot, s->out_d, bytes, cudaMemcpyDeviceToHost, s->stream));
    return 0;
}

// The agents' proposals from logits row 0 (emx_forward_propose, forward_cuda_agents.c): the ban, then the pool's
// step (kernels/sampling/agent_pool.cu) into props_d. The step's input (in_d) holds the ban and the RNG
// step; graph: the kernel reads the step there at each replay.
static int propose_kernels(CudaState *s, int graph) {
    CU(emx_cuda_ban_token(s->logits, s->vocab, &s->in_d->ban, s->stream, s->pdl_now));
    CU(emx_cuda_agents_step(s->logits, s->vocab, s->agents_d, s->round_agents, s->round_seed, s->in_h->rng_step,
                            graph ? &s->in_d->rng_step : NULL, s->round_lane, s->pick_d, s->pick_d + 1, s->props_d,
                            s->agents_ws, s->stream, s->pdl_now));
    return 0;
}

// A lookahead round after its step 0 (emx_forward_lookahead_propose): steps 1..round_steps-1,
// each a branch pass of the round's agents whose tokens are fed on the device from the previous
// step's proposals (emx_cuda_agents_feed), at the positions the host wrote to bin_h (copied
// first: in a graph that copy is a node, so each replay reads the round's values), with the
// agents proposing from their rows into props_d's row j. No host trip between steps.
// PDL (pdl): the proposals after each classifier, and the feed of steps 2.. after the proposals;
// not the first feed, which follows the copy, nor the branch passes' layers (plain launches, as a
// prefill's: s->pdl_now is 0 while they are queued).
static int lookahead_kernels(CudaState *s, int pdl) {
    const int n = s->round_agents;
    CU(cudaMemcpyAsync(s->bin_d, s->bin_h, (size_t)(s->round_steps - 1) * sizeof(StepInput), cudaMemcpyHostToDevice,
                       s->stream));
    for (int j = 1; j < s->round_steps; j++) {
        StepInput *in = s->bin_d + (j - 1);
        CU(emx_cuda_agents_feed(s->props_d + (size_t)(j - 1) * n, n, j > 1 ? (in - 1)->tokens : NULL, in->tokens,
                                s->stream, j > 1 && pdl));
        const Rows rows = {.is_branches = 1, .step = j - 1, .device_positions = 1, .in = in};
        s->pdl_now = 0;
        const int bad = cuda_run_layers(s, n, 0, &rows, 0) || cuda_classify(s, 0, n);
        s->pdl_now = pdl;
        if (bad) return -1;
        CU(emx_cuda_agents_rows_step(s->logits, (size_t)s->vocab, s->vocab, s->agents_d, n, s->round_seed,
                                     s->bin_h[j - 1].rng_step, &in->rng_step, s->round_lane,
                                     s->props_d + (size_t)j * n, s->agents_ws, s->stream, pdl));
    }
    return 0;
}

// The end of a step (tail: TAIL_*): the logits to the host, the choice or the proposals.
static int tail_launches(CudaState *s, int tail, int valid_len, int graph) {
    if (tail == TAIL_DECIDE) return decide_kernels(s, valid_len, graph);
    if (tail == TAIL_PROPOSE || tail == TAIL_LOOKAHEAD) {
        const int steps = tail == TAIL_LOOKAHEAD ? s->round_steps : 1;
        if (propose_kernels(s, graph) || (steps > 1 && lookahead_kernels(s, s->pdl_now))) return -1;
        CU(cudaMemcpyAsync(s->props_h, s->props_d, (size_t)steps * s->round_agents * sizeof(EmxProposal),
                           cudaMemcpyDeviceToHost, s->stream));
        return 0;
    }
    if (tail == TAIL_PAIR) {  // emx_forward_pair: a few numbers, not the row
        CU(emx_cuda_logit_pair(s->logits, s->vocab, s->pair_ids[0], s->pair_ids[1], s->pair_d, s->stream,
                               s->pdl_now));
        CU(cudaMemcpyAsync(s->pair_h, s->pair_d, sizeof(EmxLogitPair), cudaMemcpyDeviceToHost, s->stream));
        return 0;
    }
    CU(cudaMemcpyAsync(s->logits_h, s->logits, (size_t)s->vocab * sizeof(float), cudaMemcpyDeviceToHost, s->stream));
    return 0;
}

// Every caller queues the tail right after the classifier, a kernel: with PDL (s->pdl) every kernel
// of the choice, the proposals and the pair is a programmatic launch (s->pdl_now while they are
// queued), the first following the classifier, each waiting for the one before it
// (kernels/launch.cuh); a lookahead round's branch passes as lookahead_kernels says.
int cuda_step_tail(CudaState *s, int tail, int valid_len, int graph) {
    s->pdl_now = s->pdl;
    const int bad = tail_launches(s, tail, valid_len, graph);
    s->pdl_now = 0;
    return bad;
}
