// pool_generate.c — the agent pool's generation loop (pool_generate.h): SPMD workers, one
// round per choice, a critic on rank 0, rollback on every replica. Rank 0's output (text, log,
// --metrics, events) is in pool_output.c.
#include "runtime/pool/pool_generate.h"

#include <errno.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/errmsg.h"
#include "runtime/pool/comm.h"
#include "runtime/pool/comm_nccl_weak.h"
#include "runtime/forward.h"
#include "runtime/forward_backend.h"  // emx_cuda_state_new: weak, NULL without the CUDA backend
#include "runtime/generate.h"
#include "sampler/metrics.h"
#include "runtime/pool/pool_internal.h"
#include "runtime/token_log.h"
#include "runtime/pool/pool_forward.h"

// A stop token ends a branch and the generation, unless a benchmark asked for exactly n tokens.
static int is_stop(const Pool *p, int id) { return !p->opt->ignore_stop && emx_is_stop(p->tk, id); }

// A branch is still growing at step j if it got a token at every step so far and the last one
// did not end it.
static int branch_alive(const Pool *p, const Branch *br, int j) { return br->len == j && !is_stop(p, br->tokens[j - 1]); }

static int fail(Worker *w, const char *what) {
    snprintf(w->err, sizeof w->err, "%s", what);
    w->failed = 1;
    return -1;
}

// ---------------------------------------------------------------------------------------------
// A round: proposals, the choice, the commit

// Step j of branch br gets proposal pr, made from `logits` (--metrics logs their entropy).
static void record(const Worker *w, Branch *br, const EmxProposal *pr, const float *logits, int j) {
    const Pool *p = w->pool;
    br->tokens[j] = pr->token;
    br->entropy[j] = pr->entropy_bits;
    br->logits_entropy[j] = br->logits_varentropy[j] = NAN;
    if (p->n_lp > 0) {
        emx_logprobs_compute(logits, p->vocab, p->n_lp, &br->lp[j]);
        br->lp[j].chosen = emx_logprob_of(&br->lp[j], logits, pr->token);
    }
    if (p->opt->metrics || p->opt->on_event) {
        EmxMetrics mm;
        emx_logits_metrics(logits, p->vocab, &mm);
        br->logits_entropy[j] = mm.logits_entropy_bits;
        br->logits_varentropy[j] = mm.logits_varentropy_bits2;
    }
    br->len = j + 1;
}

// RNG counter of step j of a round at pos: the token's position and the rollback epoch.
static uint64_t counter_of(const Worker *w, int pos, int j) { return (uint64_t)(pos + j) | ((uint64_t)w->epoch << 32); }

static void propose(Worker *w, Branch *br, EmxCandidate *work, const float *logits, int pos, int j) {
    const EmxPoolOptions *o = w->pool->opt;
    EmxProposal pr;
    if (emx_agent_propose(logits, w->pool->vocab, &o->agents[br->agent], o->seed, counter_of(w, pos, j),
                          (uint32_t)br->agent, work, &pr) != 0)
        return;  // the branch ends here (len stays j)
    record(w, br, &pr, logits, j);
}

// The token a rollback banned at pos (the rejected one, at its own position), or -1.
static int ban_at(const Worker *w, int pos) { return w->ban_token >= 0 && w->ban_pos == pos ? w->ban_token : -1; }

// Runs the pending token (the round's first call, run_worker deferred it) and makes the step-0
// proposals from its logits in one call where the backend can (a GPU: its decode step and
// kernels/sampling/agent_pool.cu in one graph, only the proposals come back). 1: proposals made, 0:
// w->logits hold the next-token logits (the host proposes), -1: failed.
static int run_pending(Worker *w, int pos, int ban, EmxProposal *pr) {
    const Pool *p = w->pool;
    const EmxPoolOptions *o = p->opt;
    if (!w->pending) return 0;
    w->pending = 0;
    if (w->rank == 0) p->stats->n_forward_tokens++;
    if (!p->host_logits && w->n_mine) {
        const int rc = emx_forward_propose(w->st, w->seq[pos - 1], pos - 1, &o->agents[w->a0], w->n_mine, o->seed,
                                           counter_of(w, pos, 0), (uint32_t)w->a0, ban, pr);
        if (rc < 0) return fail(w, emx_state_error(w->st));
        if (rc == 1) {
            if (w->rank == 0) p->stats->n_fused_rounds++;
            return 1;
        }
    }
    w->logits = emx_forward(w->st, &w->seq[pos - 1], 1, pos - 1);
    return w->logits ? 0 : fail(w, "the forward pass refused a token");
}

// Step 0: every agent of this worker proposes from the same logits (the latest forward's, with
// the banned token removed). Where the backend can (a GPU: kernels/sampling/agent_pool.cu) the
// proposals are made beside the logits and only they come back; else here, a thread per agent.
static int propose_first(Worker *w, int pos) {
    const Pool *p = w->pool;
    const EmxPoolOptions *o = p->opt;
    EmxProposal pr[EMX_POOL_MAX_AGENTS];
    const int ban = ban_at(w, pos);
    int rc = run_pending(w, pos, ban, pr);
    if (rc == 0 && w->n_mine)
        rc = emx_state_propose(w->st, &o->agents[w->a0], w->n_mine, o->seed, counter_of(w, pos, 0), (uint32_t)w->a0,
                               ban, pr);
    if (rc < 0) return w->failed ? -1 : fail(w, emx_state_error(w->st));
    if (rc == 1) {
        for (int b = 0; b < w->n_mine; b++)
            if (pr[b].token >= 0) record(w, &w->mine[b], &pr[b], w->logits, 0);
        return 0;
    }
    const float *l0 = w->logits;
    if (ban >= 0) {
        memcpy(w->masked, l0, (size_t)p->vocab * sizeof(float));
        w->masked[ban] = -INFINITY;
        l0 = w->masked;
    }
    // At a large vocabulary a proposal (temperature, top-k selection, entropy) costs about as
    // much as a small model's forward pass, so this is where L = 1 spends its extra time.
#pragma omp parallel for num_threads(w->n_threads) schedule(dynamic, 1)
    for (int b = 0; b < w->n_mine; b++) propose(w, &w->mine[b], w->work + (size_t)b * p->vocab, l0, pos, 0);
    return 0;
}

// Step j's branch pass (each branch fed its latest token, w->btok): where the backend can, the
// proposals are made beside the logits (a GPU: kernels/sampling/agent_pool.cu, one row per agent) and
// recorded here (1); else the logits are in w->blogits for the host to propose from (0).
static int branch_pass(Worker *w, int pos, int j) {
    Pool *p = w->pool;
    const EmxPoolOptions *o = p->opt;
    if (w->rank == 0) p->stats->n_branch_passes++;
    if (!p->host_logits) {
        EmxProposal pr[EMX_POOL_MAX_AGENTS];
        const int rc = emx_forward_branches_propose(w->st, w->btok, w->n_mine, pos, j - 1, &o->agents[w->a0], o->seed,
                                                     counter_of(w, pos, j), (uint32_t)w->a0, pr);
        if (rc < 0) return fail(w, emx_state_error(w->st));
        if (rc == 1) {
            if (w->rank == 0) p->stats->n_device_branch_passes++;
            for (int b = 0; b < w->n_mine; b++)  // an ended branch's row was run, its proposal is dropped
                if (branch_alive(p, &w->mine[b], j) && pr[b].token >= 0) record(w, &w->mine[b], &pr[b], NULL, j);
            return 1;
        }
    }
    return emx_forward_branches(w->st, w->btok, w->n_mine, pos, j - 1, w->blogits) == 0 ? 0
                                                                                       : fail(w, "branch pass refused");
}

// The whole round in one device call where the backend can (a GPU: the decode step, the
// proposals and every branch pass fed on the device, one captured graph): the records of every
// step come back, and the branches take them by the host loop's rule (a branch ended by a stop
// token or a failed proposal drops what its row proposed after). 1: done, 0: not here, -1: failed.
static int lookahead_on_device(Worker *w, int pos, int n_steps) {
    Pool *p = w->pool;
    const EmxPoolOptions *o = p->opt;
    if (p->host_logits || !w->pending || !w->n_mine || n_steps < 2) return 0;
    const int n = w->n_mine, ban = ban_at(w, pos);
    const int rc = emx_forward_lookahead_propose(w->st, w->seq[pos - 1], pos - 1, &o->agents[w->a0], n, o->seed,
                                                 counter_of(w, pos, 0), (uint32_t)w->a0, ban, n_steps, w->props);
    if (rc <= 0) return rc < 0 ? fail(w, emx_state_error(w->st)) : 0;
    w->pending = 0;
    if (w->rank == 0) {
        p->stats->n_forward_tokens++;
        p->stats->n_fused_rounds++;
        p->stats->n_branch_passes += n_steps - 1;
        p->stats->n_device_branch_passes += n_steps - 1;
        p->stats->n_graph_branch_passes += n_steps - 1;
    }
    for (int b = 0; b < n; b++)
        if (w->props[b].token >= 0) record(w, &w->mine[b], &w->props[b], NULL, 0);
    for (int j = 1; j < n_steps; j++)
        for (int b = 0; b < n; b++) {
            const EmxProposal *pr = &w->props[(size_t)j * n + b];
            if (branch_alive(p, &w->mine[b], j) && pr->token >= 0) record(w, &w->mine[b], pr, NULL, j);
        }
    return 1;
}

// Each of this worker's agents builds a branch of up to n_steps tokens after position pos.
static int propose_round(Worker *w, int pos, int n_steps) {
    Pool *p = w->pool;
    for (int b = 0; b < p->per_rank; b++) {
        memset(&w->mine[b], 0, sizeof w->mine[b]);
        w->mine[b].agent = b < w->n_mine ? w->a0 + b : -1;
    }
    const int fused = lookahead_on_device(w, pos, n_steps);
    if (fused < 0) return -1;
    // The agents sample independently (each its own scratch and RNG lane).
    if (!fused && propose_first(w, pos) != 0) return -1;
    for (int j = 1; !fused && j < n_steps; j++) {
        int alive = 0;
        for (int b = 0; b < w->n_mine; b++) {
            const Branch *br = &w->mine[b];
            // an ended branch still takes its row (fed its last token): rows are independent,
            // so it changes nothing for the others and keeps every branch at its tail row
            w->btok[b] = br->len > 0 ? br->tokens[br->len - 1] : 0;
            alive += branch_alive(p, br, j);
        }
        if (!alive) break;
        const int rc = branch_pass(w, pos, j);
        if (rc < 0) return -1;
        if (rc == 1) continue;  // proposed where the logits are
#pragma omp parallel for num_threads(w->n_threads) schedule(dynamic, 1)
        for (int b = 0; b < w->n_mine; b++) {
            Branch *br = &w->mine[b];
            if (branch_alive(p, br, j))
                propose(w, br, w->work + (size_t)b * p->vocab, w->blogits + (size_t)b * p->vocab, pos, j);
        }
    }
    for (int b = 0; b < w->n_mine; b++) {
        Branch *br = &w->mine[b];
        double sum = 0;
        for (int j = 0; j < br->len; j++) sum += br->entropy[j];
        br->score = br->len ? sum / br->len : NAN;
    }
    return 0;
}

// Lowest mean entropy; records are in agent order, so a strict < keeps the lower index on ties.
static int choose_branch(const Branch *all, int n) {
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (all[i].agent < 0 || all[i].len < 1) continue;
        if (best < 0 || all[i].score < all[best].score) best = i;
    }
    return best;
}

// Appends the winner's tokens to every replica: its KV rows (all but the last token's) come
// from the worker that ran the branch; the last token is fed later by a normal forward.
static int commit(Worker *w, const Branch *br, int owner, int local, int pos) {
    const int m = br->len;
    if (m > 1) {
        if (w->rank == owner && emx_branch_commit(w->st, local, m - 1, pos) != 0) return fail(w, "branch commit refused");
        if (w->comm->size > 1) {
            if (w->rank == owner) emx_state_kv_rows_read(w->st, pos, m - 1, w->kvbuf);
            if (w->comm->broadcast(w->comm, w->kvbuf, emx_state_kv_rows_bytes(w->st, m - 1), owner) != 0) return -1;
            if (w->rank != owner) emx_state_kv_rows_write(w->st, pos, m - 1, w->kvbuf);
        }
    }
    for (int j = 0; j < m; j++) w->seq[pos + j] = br->tokens[j];
    w->n_seq = pos + m;
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Rank 0: the critic

// After a round on rank 0: what happens next (critic verdict, rollback, stop).
static int decide(Worker *w, int n_before, int ended, Control *ctl) {
    Pool *p = w->pool;
    const EmxPoolOptions *o = p->opt;
    EmxPoolStats *st = p->stats;
    *ctl = (Control){.stop = 0, .keep = -1, .ban = -1};
    const int gen = w->n_seq - p->n_prompt, K = o->check_every;
    if (o->critic && K > 0 && gen / K > (n_before - p->n_prompt) / K) {
        size_t len = 0;
        int from = w->n_seq - o->critic_window > p->n_prompt ? w->n_seq - o->critic_window : p->n_prompt;
        char *text = pool_decode_text(p, w->seq, from, w->n_seq, &len);
        if (!text) return fail(w, "critic: out of memory");
        EmxVerdict v;
        char why[200];
        double t0 = emx_now_s();
        int rc = emx_critic_judge(o->critic, text, len, &v, why, sizeof why);
        st->critic_s += emx_now_s() - t0;
        free(text);
        if (rc != 0) {
            snprintf(w->err, sizeof w->err, "critic: %s", why);
            w->failed = 1;
            return -1;
        }
        st->n_checks++;
        FILE *f = o->log;
        if (f) fprintf(f, "Evaluator after step %d: %s", gen, v.bad ? "BAD" : "GOOD");
        int accept = !v.bad;
        if (v.bad) {
            st->n_bad++;
            p->bad_count++;
            int keep = w->n_seq - o->rollback;
            if (keep < p->final_len) keep = p->final_len;  // never below accepted text
            if (p->bad_count > o->max_rollbacks || keep >= w->n_seq) {
                accept = 1;
                st->n_bad_accepted++;
                if (f) fprintf(f, " → accepted (%d rollbacks since the last accepted text)", p->bad_count - 1);
                p->bad_count = 0;
            } else {
                ctl->keep = keep;
                ctl->ban = w->seq[keep];
                st->n_rollbacks++;
                st->n_rolled_back_tokens += w->n_seq - keep;
                if (f) fprintf(f, " → rolling back %d tokens", w->n_seq - keep);
            }
        }
        if (f) {
            fprintf(f, " (log p GOOD=%.3f BAD=%.3f)\n", v.logp_good, v.logp_bad);
            pool_flush_checked(f, &p->log_errno);
        }
        pool_notify(p, (EmxPoolEvent){.kind = EMX_POOL_EVENT_VERDICT, .pos = w->n_seq, .bad = v.bad, .accepted = accept,
                                 .logp_good = v.logp_good, .logp_bad = v.logp_bad});
        if (ctl->keep >= 0)
            pool_notify(p, (EmxPoolEvent){.kind = EMX_POOL_EVENT_ROLLBACK, .pos = ctl->keep,
                                     .n_dropped = w->n_seq - ctl->keep, .ban = ctl->ban});
        if (accept) {
            p->final_len = w->n_seq;
            p->bad_count = 0;
        }
    } else if (!o->critic || K <= 0) {
        p->final_len = w->n_seq;
    }
    if (ctl->keep < 0 && ended) ctl->stop = 1;
    if (o->interrupted && *o->interrupted) ctl->stop = p->interrupted = 1;
    pool_emit_final(p, w->seq, p->final_len);
    if (p->out_errno || p->log_errno || p->metrics_errno) ctl->stop = 1;  // emx_pool_generate says which
    return 0;
}

// ---------------------------------------------------------------------------------------------
// The worker loop

static int run_worker(Worker *w) {
    Pool *p = w->pool;
    const EmxPoolOptions *o = p->opt;
    const int L = o->lookahead;
    double t0 = emx_now_s();
    memcpy(w->seq, p->prompt, (size_t)p->n_prompt * sizeof(int));
    w->n_seq = p->n_prompt;
    w->logits = emx_forward(w->st, p->prompt, p->n_prompt, 0);
    w->pending = 0;
    if (!w->logits) return fail(w, "the forward pass refused the prompt");
    if (w->rank == 0) p->stats->prefill_s = emx_now_s() - t0;
    t0 = emx_now_s();
    for (;;) {
        const int pos = w->n_seq, gen = pos - p->n_prompt;
        int n_steps = L < p->budget - gen ? L : p->budget - gen;
        if (n_steps > p->ctx - pos) n_steps = p->ctx - pos;
        if (propose_round(w, pos, n_steps) != 0) return -1;
        if (w->comm->all_gather(w->comm, w->mine, w->all, (size_t)p->per_rank * sizeof(Branch)) != 0) return -1;
        const int n_all = p->per_rank * w->comm->size, win = choose_branch(w->all, n_all);
        if (win < 0) return fail(w, "no agent could propose a token (every logit is -inf or NaN)");
        if (commit(w, &w->all[win], win / p->per_rank, win % p->per_rank, pos) != 0) return -1;
        const int last = w->seq[w->n_seq - 1];
        const int ended = is_stop(p, last) || w->n_seq - p->n_prompt >= p->budget || w->n_seq >= p->ctx;

        Control ctl = {0, -1, -1, 0};
        if (w->rank == 0) {
            p->n_rounds++;
            for (int j = 0; j < w->all[win].len; j++)
                p->info[pos + j] = (TokenInfo){w->all[win].agent, w->all[win].entropy[j], w->all[win].score,
                                               w->all[win].logits_entropy[j], w->all[win].logits_varentropy[j],
                                               w->all[win].lp[j]};
            pool_log_round(p, w->all, n_all, win, pos);
            pool_notify_round(p, w->all, n_all, win, pos);
            if (decide(w, pos, ended, &ctl) != 0) ctl.stop = 1;  // a failed critic ends the run on every rank
        }
        if (w->comm->broadcast(w->comm, &ctl, sizeof ctl, 0) != 0) return -1;  // a no-op for one worker
        if (ctl.keep >= 0) {  // roll back: the kept text's last token is fed again at its position
            w->n_seq = ctl.keep;
            w->epoch++;
            w->ban_pos = ctl.keep;
            w->ban_token = ctl.ban;
        }
        if (ctl.stop) break;
        w->pending = 1;  // the next round runs seq[n_seq - 1] first (run_pending)
    }
    if (w->rank == 0) {
        EmxPoolStats *st = p->stats;
        st->decode_s = emx_now_s() - t0;
        st->n_rounds = p->n_rounds;
        st->n_generated = w->n_seq - p->n_prompt;
        const int last = w->n_seq > p->n_prompt ? w->seq[w->n_seq - 1] : -1;
        const int interrupted = p->interrupted;
        st->stop = interrupted ? EMX_STOP_INTERRUPTED
                   : last >= 0 && is_stop(p, last) ? EMX_STOP_TOKEN
                   : w->n_seq >= p->ctx ? EMX_STOP_CONTEXT : EMX_STOP_N_PREDICT;
        if (!w->failed) pool_write_final(p, w, interrupted);
    }
    return w->failed ? -1 : 0;
}

static void worker_free(Worker *w) {
    emx_state_free(w->st);
    free(w->seq);
    free(w->masked);
    free(w->blogits);
    free(w->work);
    free(w->mine);
    free(w->all);
    free(w->btok);
    free(w->props);
    free(w->kvbuf);
}

// Worker `rank`'s replica and buffers, made on the worker's own thread (a GPU state's CUDA
// calls come from the thread that drives it). w->pool, rank and comm are set.
static int worker_init(Worker *w, int n_workers, int n_threads, char *err, size_t errlen) {
    Pool *p = w->pool;
    const EmxPoolOptions *o = p->opt;
    const int rank = w->rank;
    w->ban_token = w->ban_pos = -1;
    // agents split as evenly as possible, in order: worker r owns a contiguous run
    const int base = o->n_agents / n_workers, extra = o->n_agents % n_workers;
    w->n_mine = base + (rank < extra);
    w->a0 = rank * base + (rank < extra ? rank : extra);
    char device[24] = "cpu";
    if (o->cuda_devices) snprintf(device, sizeof device, "cuda:%d", o->cuda_devices[rank]);
    EmxStateOptions so = {.n_threads = n_threads, .ctx = p->ctx, .device = device,
                          .share_weights = rank == 0 ? p->share0 : NULL, .cache_type = o->cache_type};
    w->st = emx_state_new(p->m, &so, err, errlen);
    if (!w->st || emx_pool_require(w->st, "the agent pool", err, errlen) != 0) return -1;
    if (o->lookahead > 1 && emx_state_branches_reserve(w->st, w->n_mine, o->lookahead - 1, err, errlen) != 0) return -1;
    const size_t V = (size_t)p->vocab;
    w->seq = malloc((size_t)p->ctx * sizeof(int));
    w->masked = malloc(V * sizeof(float));
    w->blogits = malloc((size_t)w->n_mine * V * sizeof(float));
    w->work = malloc((size_t)w->n_mine * V * sizeof(EmxCandidate));
    w->n_threads = n_threads;
    w->mine = calloc((size_t)p->per_rank, sizeof(Branch));
    w->all = calloc((size_t)p->per_rank * n_workers, sizeof(Branch));
    w->btok = calloc((size_t)w->n_mine, sizeof(int));
    w->props = malloc((size_t)o->lookahead * (w->n_mine ? w->n_mine : 1) * sizeof(EmxProposal));
    w->kvbuf = malloc(emx_state_kv_rows_bytes(w->st, o->lookahead > 1 ? o->lookahead - 1 : 1));
    if (!w->seq || !w->masked || !w->blogits || !w->work || !w->mine || !w->all || !w->btok || !w->props || !w->kvbuf) {
        emx_seterr(err, errlen, "agents: out of memory");
        return -1;
    }
    return 0;
}

// A worker's thread (rank 0: the caller's): its replica, then — once every worker has said
// whether it has one (a collective every rank reaches, so a failed one holds nobody up) — the
// generation.
static void *worker_thread(void *arg) {
    Worker *w = arg;
    Pool *p = w->pool;
    int32_t ok = worker_init(w, w->comm->size, p->n_threads, w->err, sizeof w->err) == 0, all_ok[EMX_POOL_MAX_AGENTS];
    if (!ok) w->failed = w->init_failed = 1;
    if (w->comm->all_gather(w->comm, &ok, all_ok, sizeof ok) != 0) return NULL;
    for (int r = 0; r < w->comm->size; r++)
        if (!all_ok[r]) return NULL;  // the worker that failed says why
    if (run_worker(w) != 0) w->comm->abort(w->comm);
    return NULL;
}

static int check_options(const EmxPoolOptions *o, int n_prompt, int ctx, char *err, size_t errlen) {
    if (o->n_agents < 1 || o->n_agents > EMX_POOL_MAX_AGENTS) {
        emx_seterr(err, errlen, "agents: %d agents (1 .. %d)", o->n_agents, EMX_POOL_MAX_AGENTS);
        return -1;
    }
    if (o->lookahead < 1 || o->lookahead > EMX_POOL_MAX_LOOKAHEAD) {
        emx_seterr(err, errlen, "agents: --lookahead %d (1 .. %d)", o->lookahead, EMX_POOL_MAX_LOOKAHEAD);
        return -1;
    }
    if (o->n_workers < 1 || o->n_workers > o->n_agents) {
        emx_seterr(err, errlen, "agents: %d workers for %d agents (1 .. agents)", o->n_workers, o->n_agents);
        return -1;
    }
    if (o->critic && o->check_every > 0 && (o->rollback < 1 || o->critic_window < 1 || o->max_rollbacks < 0)) {
        emx_seterr(err, errlen, "agents: --rollback %d, --critic-window %d, --max-rollbacks %d (need >= 1, >= 1, >= 0)",
                 o->rollback, o->critic_window, o->max_rollbacks);
        return -1;
    }
    if (n_prompt < 1 || n_prompt >= ctx) {
        emx_seterr(err, errlen, "agents: prompt of %d tokens leaves no room in a context of %d", n_prompt, ctx);
        return -1;
    }
    for (int i = 0; i < o->n_agents; i++)
        if (!(o->agents[i].temperature >= 0) || o->agents[i].top_k < 0) {
            emx_seterr(err, errlen, "agents: agent %d has temperature %g, top-k %d", i, (double)o->agents[i].temperature,
                     o->agents[i].top_k);
            return -1;
        }
    return 0;
}

// Rank 0 runs on this thread, the others on threads of their own; -1 (err set) when a thread
// could not start (the others are aborted and joined).
static int run_workers(Worker *workers, int W, char *err, size_t errlen) {
    pthread_t th[EMX_POOL_MAX_AGENTS];
    int started = 0;
    for (int r = 1; r < W; r++, started++)
        if (pthread_create(&th[r], NULL, worker_thread, &workers[r]) != 0) {
            workers[0].comm->abort(workers[0].comm);
            emx_seterr(err, errlen, "agents: cannot start worker thread %d", r);
            break;
        }
    if (started == W - 1) worker_thread(&workers[0]);
    for (int r = 1; r <= started; r++) pthread_join(th[r], NULL);
    return started < W - 1 ? -1 : 0;
}

// The run's outcome after the workers are done: the first failed worker's message, a failed
// collective, or a failed write (which stopped the run); the write errors go to stats too.
static int run_status(const Pool *p, const Worker *workers, int W, EmxCommNccl *nccl, char *err, size_t errlen) {
    EmxPoolStats *stats = p->stats;
    int rc = 0;
    for (int r = 0; r < W; r++)
        if (workers[r].failed) {
            if (workers[r].init_failed) emx_seterr(err, errlen, "%s", workers[r].err);
            else emx_seterr(err, errlen, "agents: worker %d: %s", r, workers[r].err);
            rc = -1;
            break;
        }
    if (rc == 0 && nccl && *emx_comm_nccl_error(nccl)) {  // a worker unwound after a failed collective
        emx_seterr(err, errlen, "agents: %s", emx_comm_nccl_error(nccl));
        rc = -1;
    }
    // A failed write stopped the run: the text or a log is incomplete, which is an error.
    stats->out_errno = p->out_errno, stats->log_errno = p->log_errno, stats->metrics_errno = p->metrics_errno;
    if (rc == 0 && (p->out_errno || p->log_errno || p->metrics_errno)) {
        const int e = p->out_errno ? p->out_errno : p->log_errno ? p->log_errno : p->metrics_errno;
        emx_seterr(err, errlen, "writing the %s: %s", p->out_errno ? "generated text" : p->log_errno ? "log" : "metrics",
                 strerror(e));
        rc = -1;
    }
    return rc;
}

int emx_pool_generate(const EmxModel *m, const EmxTokenizer *tk, const int *prompt, int n_prompt,
                      const EmxPoolOptions *opt, EmxPoolStats *stats, int **ids_out, int *n_ids_out, char *err,
                      size_t errlen) {
    EmxPoolStats local_stats;
    if (!stats) stats = &local_stats;
    memset(stats, 0, sizeof *stats);
    stats->n_prompt = n_prompt;
    if (ids_out) *ids_out = NULL;
    if (n_ids_out) *n_ids_out = 0;
    const EmxConfig *c = &m->cfg;
    int ctx = opt->ctx > 0 ? opt->ctx : (int)(c->max_seq_len < 4096 ? c->max_seq_len : 4096);
    if (check_options(opt, n_prompt, ctx, err, errlen) != 0) return -1;

    Pool p = {.m = m, .tk = tk, .opt = opt, .prompt = prompt, .n_prompt = n_prompt, .ctx = ctx,
              .vocab = (int)c->vocab_size, .stats = stats, .final_len = n_prompt, .printed = n_prompt};
    const int W = opt->n_workers;
    p.per_rank = (opt->n_agents + W - 1) / W;
    p.budget = opt->n_predict < 0 || opt->n_predict > ctx - n_prompt ? ctx - n_prompt : opt->n_predict;
    p.info = calloc((size_t)ctx, sizeof(TokenInfo));
    p.n_lp = opt->want_logprobs ? opt->n_logprobs : 0;
    if (opt->on_event && p.n_lp < EMX_POOL_EVENT_TOP) p.n_lp = EMX_POOL_EVENT_TOP;
    p.host_logits = p.n_lp > 0 || opt->metrics || opt->on_event;  // record() reads the logits
    p.decbuf = malloc(emx_decoder_max_out(tk));
    emx_decoder_init(&p.dec, tk, 1);
    Worker *workers = calloc((size_t)W, sizeof(Worker));
    EmxCommThreads *group = NULL;  // CPU workers
    EmxCommNccl *nccl = NULL;      // GPU workers
    int rc = -1;
    if (opt->cuda_devices) {
        if (emx_pool_gpu_count() < 0) {
            emx_seterr(err, errlen, "agents: cuda devices: this build has no CUDA backend (make builds it in when nvcc is found)");
            goto out;
        }
        nccl = emx_comm_nccl_new(opt->cuda_devices, W, err, errlen);
        // A critic over this model on worker 0's GPU has uploaded the weights already.
        const EmxState *cs = opt->critic ? emx_critic_state(opt->critic) : NULL;
        char dev0[24];
        snprintf(dev0, sizeof dev0, "cuda:%d", opt->cuda_devices[0]);
        if (cs && emx_critic_model(opt->critic) == m && strcmp(emx_state_device(cs), dev0) == 0) p.share0 = cs;
    } else {
        group = emx_comm_threads_new(W, err, errlen);
    }
    if (!p.info || !p.decbuf || !workers || (!group && !nccl)) {
        if (group || nccl) emx_seterr(err, errlen, "agents: out of memory");
        goto out;
    }
    p.n_threads = opt->n_threads > 0 ? opt->n_threads : omp_get_num_procs() / W;
    if (p.n_threads < 1) p.n_threads = 1;
    if (p.budget <= 0) {
        emx_seterr(err, errlen, "agents: no room to generate (-n %d)", opt->n_predict);
        goto out;
    }
    for (int r = 0; r < W; r++) {
        workers[r].pool = &p;
        workers[r].rank = r;
        workers[r].comm = nccl ? emx_comm_nccl_host_rank(nccl, r) : emx_comm_threads_rank(group, r);
    }

    if (run_workers(workers, W, err, errlen) != 0) goto out;
    rc = run_status(&p, workers, W, nccl, err, errlen);
    if (rc == 0 && ids_out) {
        const int n = workers[0].n_seq - n_prompt;
        *ids_out = malloc((size_t)(n > 0 ? n : 1) * sizeof(int));
        if (*ids_out) {
            memcpy(*ids_out, workers[0].seq + n_prompt, (size_t)n * sizeof(int));
            if (n_ids_out) *n_ids_out = n;
        }
    }
out:
    if (workers)
        for (int r = 0; r < W; r++) worker_free(&workers[r]);
    free(workers);
    emx_comm_threads_free(group);
    if (nccl) emx_comm_nccl_free(nccl);
    free(p.info);
    free(p.decbuf);
    return rc;
}

int emx_pool_gpu_count(void) {
    if (!emx_comm_nccl_new || !emx_comm_nccl_host_rank || !emx_comm_nccl_error || !emx_comm_nccl_free ||
        !emx_cuda_state_new || !emx_cuda_device_count)
        return -1;
    return emx_cuda_device_count();
}
