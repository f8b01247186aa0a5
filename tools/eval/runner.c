// runner.c — eval's generations through ./run's code paths (runner.h).
#include "tools/eval/runner.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/errmsg.h"
#include "runtime/cli/run_branch.h"
#include "runtime/cli/run_pool.h"
#include "runtime/cli/run_report.h"
#include "runtime/cli/run_setup.h"
#include "runtime/generate.h"
#include "runtime/pool/pool_generate.h"
#include "tools/eval/pages.h"

int eval_runner_init(EvalRunner *r, const EmxModel *m, const EmxTokenizer *tk, const char *device, int threads,
                     char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    r->m = m;
    r->tk = tk;
    r->device = device;
    r->threads = threads;
    EmxStateOptions so = {.n_threads = threads, .ctx = 0, .device = device};  // ./run's default -c
    r->st = emx_state_new(m, &so, err, errlen);
    return r->st ? 0 : -1;
}

void eval_runner_free(EvalRunner *r) {
    free(r->cached);
    emx_critic_free(r->critic);
    if (r->st) emx_state_free(r->st);
    memset(r, 0, sizeof *r);
}

int eval_prompt_ids(const EvalRunner *r, const EvalItem *it, const EvalConfig *c, int **ids, int *n_ids, char *err,
                    size_t errlen) {
    EmxPromptSpec ps = {.text = it->prompt, .len = it->prompt ? strlen(it->prompt) : 0, .chat = it->chat,
                        .system = it->chat ? it->system : NULL, .enable_thinking = !c->args.no_think};
    return emx_prompt_ids(r->m, r->tk, &ps, ids, n_ids, err, errlen);
}

int eval_runner_ctx(const EvalRunner *r, const EvalConfig *c) {
    const unsigned max = r->m->cfg.max_seq_len;
    if (c->args.sampler == EMX_SAMPLER_AGENTS) return (int)(max < 4096 ? max : 4096);  // ./run's agents default
    return emx_state_ctx(r->st);
}

typedef struct {
    FILE *out;
    EvalRunner *r;
    const EvalConfig *c;
    const EvalItem *it;
    uint64_t seed;
    EmxRunSampler *rs;
    const EmxLogprobTap *lpt;  // --report-dir: the step's top logprobs
    EmxReport *rep;            // --report-dir, or NULL
    EvalTrace *trace;          // which bytes each token released
} Sink;

// emx_generate's per-token callback: the text to the buffer, the record to the page (--report-dir).
static int on_token(void *user, int index, int id, int pos, const char *text, size_t len, int is_stop) {
    Sink *s = user;
    if (len && fwrite(text, 1, len, s->out) != len) return -1;
    eval_trace_text(s->trace, index, len, is_stop);
    if (!s->rep) return 0;
    EmxTokenRecord rec = emx_run_sampler_record(s->rs, s->r->tk, emx_sampler_kind_name(s->c->args.sampler), index,
                                                id, pos, is_stop);
    if (s->lpt) rec.logprobs = &s->lpt->last, rec.tk = s->r->tk;
    if (s->rep) emx_report_add_token(s->rep, &rec);  // out of memory: the page says it is incomplete
    return 0;
}

// Puts the rows of ids[0..n_ids-1) into the state's cache, running only what is not there yet:
// the positions past the longest common prefix with what the cache holds. So the generations of
// one item (every config and seed: same prompt) prefill once, and items that share a start (a
// chat template, a system message) share its rows too. Exact: a row's result does not depend on
// the batch it is run in (runtime/cpu/cpu_matmul.h), so these rows are those a full prefill
// writes. Returns the positions now cached (n_ids - 1), or -1.
static int cache_prefix(EvalRunner *r, const int *ids, int n_ids, char *err, size_t errlen) {
    const int want = n_ids - 1;
    int k = 0;
    while (k < r->n_cached && k < want && r->cached[k] == ids[k]) k++;
    if (k == want) return r->n_cached = want;  // rows past `want` are stale; they are not read
    if (want > r->cap_cached) {
        int *c = realloc(r->cached, (size_t)want * sizeof *c);
        if (!c) return emx_seterr(err, errlen, "out of memory");
        r->cached = c, r->cap_cached = want;
    }
    r->n_cached = k;  // what stays valid if the forward fails
    if (!emx_forward(r->st, ids + k, want - k, k))
        return emx_seterr(err, errlen, "forward pass failed on the prompt (%d tokens): %s", n_ids,
                          emx_state_error(r->st));
    memcpy(r->cached + k, ids + k, (size_t)(want - k) * sizeof *ids);
    return r->n_cached = want;
}

// The report page of a generation, as ./run --report makes it (NULL with err: out of memory).
static EmxReport *report_new(const EvalRunner *r, const EvalConfig *c, const char *page, const int *ids, int n_ids,
                             uint64_t seed, const EmxAgentParams *agents, int n_agents, char *err, size_t errlen) {
    if (access(r->report_dir, W_OK | X_OK) != 0) {  // said here, as eval says it (./run's helper would too)
        emx_seterr(err, errlen, "--report-dir %s: %s", r->report_dir, strerror(errno));
        return NULL;
    }
    EmxCliArgs a = c->args;
    a.report_path = page;
    const EmxProfile *prof = a.sampler == EMX_SAMPLER_ENTROPIX ? &c->profile : NULL;
    EmxReport *rep = emx_run_report_new(&a, prof, r->tk, ids, n_ids, seed, agents, n_agents);
    if (!rep) emx_seterr(err, errlen, "--report-dir %s: out of memory", r->report_dir);
    return rep;
}

static int gen_single(EvalRunner *r, const EvalConfig *c, const EvalItem *it, uint64_t seed, const int *ids,
                      int n_ids, FILE *out, const char *page, EmxReport **rep, EvalGen *g, char *err, size_t errlen) {
    const int ctx = emx_state_ctx(r->st);
    const int n_cached = cache_prefix(r, ids, n_ids, err, errlen);
    if (n_cached < 0) return -1;
    EmxRunSampler rs = {0};
    const int want_metrics = page != NULL;
    if (emx_run_sampler_init(&rs, &c->args, &c->profile, r->m, r->tk, ctx, seed, want_metrics, err, errlen) != 0)
        return -1;
    emx_run_sampler_prompt(&rs, ids, n_ids);
    const int room = ctx - n_ids + 1;  // every chosen token but the last is fed back
    Sink sink = {.out = out, .r = r, .c = c, .it = it, .seed = seed, .rs = &rs, .trace = &g->trace};
    EvalTap tap;  // reads each step's logits; the choice stays the config's sampler's
    eval_tap_init(&tap, rs.sampler, &g->trace);
    EmxSampler *sampler = &tap.base;
    EmxLogprobTap lpt;
    if (page) {  // as ./run --report: the logprob tap outermost, the page's alternatives
        if (!(*rep = sink.rep = report_new(r, c, page, ids, n_ids, seed, NULL, 0, err, errlen))) {
            emx_run_sampler_free(&rs);
            return -1;
        }
        emx_logprob_tap_init(&lpt, sampler, EMX_REPORT_TOP);
        sampler = &lpt.base, sink.lpt = &lpt;
    }
    EmxGenerateOptions go = {.n_predict = it->max_tokens < room ? it->max_tokens : room, .out = out,
                             .out_name = "the text buffer", .on_token = on_token, .on_token_user = &sink,
                             .n_cached = n_cached};  // only the last prompt token runs
    EmxGenerateStats stats;
    int rc = emx_generate(r->st, r->tk, ids, n_ids, sampler, &go, &stats, err, errlen);
    if (rc == 0) {
        g->n_tokens = stats.n_generated;
        if (rs.entropix) {
            memcpy(g->cases, rs.es.case_counts, sizeof g->cases);
            g->n_inserted = rs.es.n_inserted;
        }
    }
    emx_run_sampler_free(&rs);
    return rc;
}

// The branching decoder from the config's flags, by ./run's code (runtime/cli/run_branch.h); with
// commit=1 the item's answer alphabet and cue (the config's alphabet and cue where it has none).
// g->paths: every path's text.
static int gen_branch(EvalRunner *r, const EvalConfig *c, const EvalItem *it, const int *ids, int n_ids, FILE *out,
                      EvalGen *g, char *err, size_t errlen) {
    const int ctx = emx_state_ctx(r->st);
    const int n_cached = cache_prefix(r, ids, n_ids, err, errlen);
    if (n_cached < 0) return -1;
    EmxBranchParams bp;
    if (emx_run_branch_params(&c->args, &bp, err, errlen) != 0) return -1;
    char **own = bp.alphabet;  // the config's, freed below
    const int n_own = bp.n_alphabet;
    if (c->commit_item && it->n_answer_alphabet > 0) bp.alphabet = it->answer_alphabet, bp.n_alphabet = it->n_answer_alphabet;
    if (c->commit_item && it->answer_cue) bp.cue = it->answer_cue;
    int rc = c->commit_item && bp.n_alphabet == 0 ? emx_seterr(err, errlen, "commit=1: the item has no answer_alphabet") : 0;
    const int room = ctx - n_ids + 1;  // every chosen token but the last is fed back
    EmxGenerateOptions go = {.n_predict = it->max_tokens < room ? it->max_tokens : room, .out = out,
                             .out_name = "the text buffer", .n_cached = n_cached};  // only the last prompt token runs
    EmxBranchResult res;
    EmxGenerateStats stats;
    if (rc == 0) rc = emx_branch_decode(r->st, r->tk, ids, n_ids, &bp, &go, &res, &stats, err, errlen);
    if (rc == 0) {
        g->n_tokens = stats.n_generated;
        g->paths = calloc((size_t)res.n_paths, sizeof *g->paths);
        for (int i = 0; g->paths && i < res.n_paths; i++) {
            g->paths[i] = res.paths[i].text;  // taken over
            res.paths[i].text = NULL;
        }
        g->n_paths = g->paths ? res.n_paths : 0;
        if (!g->paths) rc = emx_seterr(err, errlen, "out of memory");
        emx_branch_result_free(&res);
    }
    emx_branch_alphabet_free(own, n_own);
    return rc;
}

// The pool from the config's flags, by ./run's code (runtime/cli/run_pool.h).
static int gen_pool(EvalRunner *r, const EvalConfig *c, uint64_t seed, const int *ids, int n_ids, int ctx,
                    const EvalItem *it, FILE *out, const char *page, EmxReport **rep, EvalGen *g, char *err,
                    size_t errlen) {
    const EmxCliArgs *a = &c->args;
    EmxRunPoolSetup ps;
    if (emx_run_pool_setup(a, &ps, err, errlen) != 0) return -1;
    if (a->check_every > 0 && r->critic_for != c) {  // one critic per config, kept across its items
        emx_critic_free(r->critic);
        r->critic_for = NULL;
        if (!(r->critic = emx_run_pool_critic(a, &ps, r->m, r->tk, r->threads, err, errlen))) return -1;
        r->critic_for = c;
    }
    const int room = ctx - n_ids;
    EmxPoolOptions po = emx_run_pool_options(a, &ps, r->threads, ctx, seed,
                                             it->max_tokens < room ? it->max_tokens : room, r->critic);
    po.out = out;
    if (page) {  // the pool's rounds, verdicts and rollbacks fill it
        if (!(*rep = report_new(r, c, page, ids, n_ids, seed, ps.agents, ps.n_agents, err, errlen))) return -1;
        po.on_event = emx_report_pool_event, po.on_event_user = *rep;
    }
    EmxPoolStats stats;
    int *out_ids = NULL, n_out = 0;
    int rc = emx_pool_generate(r->m, r->tk, ids, n_ids, &po, &stats, &out_ids, &n_out, err, errlen);
    if (rc == 0 && stats.out_errno) rc = emx_seterr(err, errlen, "writing the text buffer failed");
    if (rc == 0) g->n_tokens = stats.n_generated;
    // the pool's final ids, for the open-ended metrics (its logits are not kept: no confidence)
    for (int i = 0; rc == 0 && i < n_out; i++)
        if (eval_trace_push_id(&g->trace, out_ids[i]) != 0) break;
    g->trace.ends_with_stop = n_out > 0 && emx_is_stop(r->tk, out_ids[n_out - 1]);
    free(out_ids);
    return rc;
}

int eval_generate(EvalRunner *r, const EvalConfig *c, const EvalItem *it, uint64_t seed, EvalGen *g, char *err,
                  size_t errlen) {
    memset(g, 0, sizeof *g);
    int *ids = NULL, n_ids = 0;
    if (eval_prompt_ids(r, it, c, &ids, &n_ids, err, errlen) != 0) return -1;
    const int ctx = eval_runner_ctx(r, c);
    const int agents = c->args.sampler == EMX_SAMPLER_AGENTS;
    if (agents ? n_ids >= ctx : n_ids > ctx) {
        free(ids);
        return emx_seterr(err, errlen, "prompt is %d tokens, context is %d", n_ids, ctx);
    }
    size_t len = 0;
    char *buf = NULL;
    FILE *out = open_memstream(&buf, &len);
    if (!out) {
        free(ids);
        return emx_seterr(err, errlen, "out of memory");
    }
    char path[4096] = "";
    if (r->report_dir && eval_report_path(path, sizeof path, r->report_dir, it, c, seed) != 0) {
        fclose(out), free(buf), free(ids);
        return emx_seterr(err, errlen, "--report-dir %s: the page's name is too long", r->report_dir);
    }
    EmxReport *rep = NULL;
    const double t0 = emx_now_s();
    const char *page = r->report_dir ? path : NULL;
    int rc = agents ? gen_pool(r, c, seed, ids, n_ids, ctx, it, out, page, &rep, g, err, errlen)
             : c->args.sampler == EMX_SAMPLER_BRANCH ? gen_branch(r, c, it, ids, n_ids, out, g, err, errlen)
                                                     : gen_single(r, c, it, seed, ids, n_ids, out, page, &rep, g, err, errlen);
    g->time_s = emx_now_s() - t0;
    if (fclose(out) != 0 && rc == 0) rc = emx_seterr(err, errlen, "out of memory");
    free(ids);
    char why[512];
    if (rep && rc == 0 && emx_report_write(rep, path, why, sizeof why) != 0)
        rc = emx_seterr(err, errlen, "--report-dir: %s", why);
    emx_report_free(rep);
    if (rc != 0) {
        free(buf);
        eval_gen_free(g);
        return -1;
    }
    g->text = buf;
    return 0;
}

void eval_gen_free(EvalGen *g) {
    free(g->text);
    eval_trace_free(&g->trace);
    for (int i = 0; i < g->n_paths; i++) free(g->paths[i]);
    free(g->paths);
    memset(g, 0, sizeof *g);
}
