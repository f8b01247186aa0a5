// forward_cuda_ahead.c — emx_forward_decide on the CUDA backend, and its steps queued ahead
// (emx_forward_decide_ahead, runtime/forward.h): the token a step chooses is fed to the next
// step on the device, so the host queues step N+1 before it reads step N's token and the GPU
// never waits for the host between two steps.
//
//   host:    queue N | queue N+1 | wait N, read N | print N, stop rules | queue N+2 | wait N+1 ...
//   device:  [ step N ][ step N+1 (feeds N's token) ][ step N+2 ] ...
//
// The step queued ahead is a graph of its own (fed_graph): where the decode graph's first node
// copies the host's input, its first node is emx_cuda_feed_choice, which writes the step's input
// from the step before's result (token, position, key count, RNG step) and keeps the entropix
// state as it finds it. Its result is copied to a pinned slot of its own ([1] and [2] in turn,
// so the copy of N+1's result never lands where the host is reading N's), each followed by an
// event the host waits on instead of the stream (which would wait for N+1 too).
//
// The queued step is the next call's when that call feeds the token it was queued with at its
// position (the caller's loop going on); anything else settles it (cuda_settle): waits for it,
// puts the entropix state back and forgets it. Its other effects need no undoing: the KV row it
// wrote is past the sequence's end (no later step reads a row before writing it), and the logits
// and score rows are any step's until the next.
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "kernels/sampling/sampling.h"
#include "runtime/cuda/forward_cuda_state.h"

// A new sampler: new graphs (the decide graph and the steps queued ahead bake the spec in) and
// the entropix insert-once state restarted.
static int new_spec(CudaState *s, const EmxDecideSpec *spec) {
    if (s->step_graph[TAIL_DECIDE]) cudaGraphExecDestroy(s->step_graph[TAIL_DECIDE]);
    s->step_graph[TAIL_DECIDE] = NULL;
    for (int i = 0; i < 2; i++) {
        if (s->fed_graph[i]) cudaGraphExecDestroy(s->fed_graph[i]);
        s->fed_graph[i] = NULL;
    }
    s->spec = *spec;
    s->have_spec = 1;
    CU(cudaSetDevice(s->device));
    CU(cudaMemset(s->estate_d, 0, sizeof(EmxEntropixState)));
    return 0;
}

// Queues the step that feeds the token the step before chose at pos, its result into slot (1
// or 2): captured into fed_graph[slot - 1] on its first use, replayed after. Every position and
// count it reads is on the device (emx_cuda_feed_choice writes them), so one graph serves all.
static int queue_fed(CudaState *s, int pos, int slot) {
    if (cuda_ring_check(s, pos)) return -1;
    emx_kv_ring_wrote(&s->ring, pos);
    cudaGraphExec_t *exec = &s->fed_graph[slot - 1];
    if (!*exec) {
        StepInput *in = s->in_d;
        CU(cudaStreamBeginCapture(s->stream, cudaStreamCaptureModeThreadLocal));
        s->out_slot = slot;
        int bad = cu(s,
                     emx_cuda_feed_choice(&s->out_d->token, s->vocab, &in->rng_step, &in->tokens[0], &in->pos[0],
                                          &in->rows[0], &in->n_keys, s->estate_d, s->estate_saved_d, s->stream),
                     "emx_cuda_feed_choice") ||
                  cuda_decode_launches(s, pos, TAIL_DECIDE, 1);
        s->out_slot = 0;
        if (cuda_capture_end(s, bad, exec, NULL)) return -1;
    }
    CU(cudaGraphLaunch(*exec, s->stream));
    CU(cudaEventRecord(s->out_ready[slot], s->stream));
    s->ahead = (CudaAhead){.queued = 1, .token = -1, .pos = pos, .slot = slot};
    return 0;
}

// The result in slot into out (the fields spec asks for). 1, or -1 when the device chose no token.
static int read_result(CudaState *s, int slot, const EmxDecideSpec *spec, EmxDecideResult *out) {
    const DecideOut *r = s->out_h + slot;
    memset(out, 0, sizeof *out);
    out->token = r->token;
    out->score = NAN;
    if (spec->kind == EMX_DECIDE_ENTROPIX) {
        out->decision = r->decision;
        out->score = r->score;
    }
    if (spec->want_metrics) out->metrics = r->metrics;
    if (out->token < 0 || out->token >= s->vocab) {
        snprintf(s->err, sizeof s->err, "%s: the device sampler chose no token (%d)", s->device_name, out->token);
        return -1;
    }
    return 1;
}

int emx_cuda_state_forward_decide(EmxState *st, const int *tokens, int n, int pos, const EmxDecideSpec *spec,
                                  int ahead, EmxDecideResult *out) {
    CudaState *s = (CudaState *)st;
    const int same_spec = s->have_spec && memcmp(&s->spec, spec, sizeof *spec) == 0;
    const int take = s->ahead.queued && same_spec && n == 1 && tokens[0] == s->ahead.token && pos == s->ahead.pos;
    if (!take && (cuda_settle(s) || (!same_spec && new_spec(s, spec)))) return -1;
    // the next step too, unless the graphs are off (direct launches read host positions) or it
    // would not fit the context (the token chosen now is then the last)
    const int next = ahead && !s->no_graphs && pos + n < s->ctx;
    if (!take && !next) {  // one step, run to its end
        if (cuda_step_run(s, tokens, n, pos, TAIL_DECIDE)) return -1;
        return read_result(s, 0, spec, out);
    }
    int slot = 0;
    CU(cudaSetDevice(s->device));
    if (take) {
        slot = s->ahead.slot;
        s->ahead.queued = 0;
    } else {
        if (cuda_step_queue(s, tokens, n, pos, TAIL_DECIDE)) return -1;
        // the fed step reads the chosen token's position from in_d: a prompt's GEMM chunks do
        // not copy the input there (cuda_step_queue set in_h's RNG step: pos + n)
        if (n > 1)
            CU(cudaMemcpyAsync(&s->in_d->rng_step, &s->in_h->rng_step, sizeof s->in_h->rng_step,
                               cudaMemcpyHostToDevice, s->stream));
        CU(cudaEventRecord(s->out_ready[0], s->stream));
    }
    if (next && queue_fed(s, pos + n, slot == 1 ? 2 : 1)) return -1;
    CU(cudaEventSynchronize(s->out_ready[slot]));
    s->last_pos = pos + n - 1;
    s->logits_fresh = 0;
    const int rc = read_result(s, slot, spec, out);
    if (rc < 0) {  // the step queued after it fed token 0: drop it
        char why[sizeof s->err];
        memcpy(why, s->err, sizeof why);
        if (cuda_settle(s) == 0) memcpy(s->err, why, sizeof why);
        return -1;
    }
    if (s->ahead.queued) s->ahead.token = out->token;
    return rc;
}
