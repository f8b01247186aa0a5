// engine_branch.c — a request with sampler "branch": the branching decoder (runtime/branch/
// branch_decode.h) on the slot's own state, as ./run --sampler branch runs it, so the same prompt
// and keys give ./run's text. It runs alone (its forks are batched passes of their own, no row
// of the slots' shared step). Its text arrives through a hook as it becomes final (main-line
// tokens as chosen, a fork's winner at once when decided) and goes the single stream's way
// (engine_output.h: stop strings, streaming); a client gone or the drain's cut stops it before
// its next forward pass. Afterwards the slot's prompt cache keeps the prompt and the output's
// first n_valid tokens: the rows past them hold a branch's, an answer's or stale ones.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/branch/branch_decode.h"
#include "runtime/cpu/cpu_state_size.h"
#include "runtime/pool/pool_forward.h"
#include "tools/server/engine_internal.h"
#include "tools/server/engine_output.h"

// The decoder's hooks: its text into the stream; stop when the client is gone, the drain cut it,
// a stop string matched, or the emit failed.
static int on_text(void *user, const char *text, size_t len) { return srv_add_text(user, text, len, 0); }

static int should_stop(void *user) {
    const Gen *g = user;
    return *g->cancel || g->stopped || g->emit_failed || g->oom;
}

// The request's budget, as the single stream computes it (-1 with e: max_tokens past the context).
static int branch_budget(const SrvModel *sm, const SrvRequest *r, int n_ids, SrvError *e) {
    const int room = sm->ctx - n_ids + 1;  // every chosen token but the last is fed back
    if (r->max_tokens > room)
        return srv_fail(e, 400, "max_tokens", "context_length_exceeded",
                        "max_tokens is %d; the context of %d has room for %d after the prompt's %d tokens", r->max_tokens,
                        sm->ctx, room, n_ids);
    const int n = sm->defaults.n_predict;
    return r->max_tokens > 0 ? r->max_tokens : (n < 0 || n > room ? room : n);
}

int srv_branch_check(const SrvModel *sm, const SrvRequest *r, int n_ids, int on_cpu, uint64_t *bytes, SrvError *e) {
    *bytes = 0;
    char err[320];
    int room = 0;
    if (emx_branch_check(sm->tk, &r->branch, n_ids, sm->ctx, &room, err, sizeof err) != 0) {
        const int no_room = !strncmp(err, "no room", 7);
        const char *param = !strncmp(err, "--answer-alphabet", 17) ? "entropix.alphabet"
                            : !strncmp(err, "--answer-cue", 12)    ? "entropix.cue"
                            : no_room                              ? (r->kind == SRV_CHAT ? "messages" : "prompt")
                                                                   : "entropix";
        return srv_fail(e, 400, param, no_room ? "context_length_exceeded" : NULL, "%s: %s",
                        strncmp(param, "entropix", 8) ? "entropix" : param, err);
    }
    const int budget = branch_budget(sm, r, n_ids, e);
    if (budget < 0) return -1;
    if (!on_cpu) return 0;  // a GPU's tails are in its own memory: its allocation says when they do not fit
    // The most the run holds beside the slot's state: k tails of the budget (a fork reserves what
    // the budget leaves), the answers' tails (16 entries of at most 16 tokens), and a pass's logits.
    uint64_t row = 0;
    emx_cpu_state_bytes(&sm->model.cfg, 1, 1, sm->defaults.cache_type, &row);
    const int answer_rows = r->branch.n_alphabet ? EMX_BRANCH_MAX_K * EMX_BRANCH_MAX_ENTRY_TOKENS : 0;
    *bytes = row * ((uint64_t)r->branch.k * (uint64_t)budget + (uint64_t)answer_rows) +
             (uint64_t)EMX_BRANCH_MAX_K * sm->model.cfg.vocab_size * sizeof(float);
    return 0;
}

static cJSON *number_or_null(double v) { return isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull(); }

// One path as the response's entropix.paths shows it.
static cJSON *path_json(const EmxBranchParams *bp, const EmxBranchPath *p) {
    static const char *const ends[] = {"?", "stop", "budget", "cut"};
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "fork", p->fork);
    cJSON_AddNumberToObject(o, "branch", p->branch);
    cJSON_AddNumberToObject(o, "start", p->start);
    cJSON_AddNumberToObject(o, "tokens", p->n_tokens);
    cJSON_AddStringToObject(o, "end", ends[p->end >= 1 && p->end <= 3 ? p->end : 0]);
    cJSON_AddBoolToObject(o, "output", p->output);
    cJSON_AddItemToObject(o, "prob", number_or_null(p->prob));
    cJSON_AddItemToObject(o, "score", number_or_null(p->score));
    if (p->answer >= 0) {
        cJSON_AddItemToObject(o, "answer", srv_text_json(bp->alphabet[p->answer], strlen(bp->alphabet[p->answer])));
        cJSON_AddItemToObject(o, "answer_p", number_or_null(p->answer_p[p->answer]));
    }
    cJSON_AddItemToObject(o, "text", srv_text_json(p->text, strlen(p->text)));
    return o;
}

// The response's top-level entropix fields of a run: what ./run's summary line says, and every path.
static cJSON *result_json(const EmxBranchParams *bp, const EmxBranchResult *br) {
    cJSON *o = cJSON_CreateObject(), *paths = cJSON_CreateArray();
    if (!o || !paths) return cJSON_Delete(o), cJSON_Delete(paths), NULL;
    cJSON_AddNumberToObject(o, "n_forks", br->n_forks);
    cJSON_AddNumberToObject(o, "n_branches", br->n_branches);
    cJSON_AddNumberToObject(o, "branch_passes", br->n_branch_passes);
    cJSON_AddNumberToObject(o, "answer_passes", br->n_answer_passes);
    if (bp->n_alphabet && br->answer >= 0) {
        cJSON_AddItemToObject(o, "answer", srv_text_json(bp->alphabet[br->answer], strlen(bp->alphabet[br->answer])));
        cJSON_AddItemToObject(o, "answer_score", number_or_null(br->answer_score));
    } else if (bp->n_alphabet) {
        cJSON_AddNullToObject(o, "answer");  // stopped before its commitment
    }
    for (int i = 0; i < br->n_paths; i++) cJSON_AddItemToArray(paths, path_json(bp, &br->paths[i]));
    cJSON_AddItemToObject(o, "paths", paths);
    return o;
}

// What a finished (or stopped) run reports, and the rows the slot's cache may keep.
static void finish(const SrvModel *sm, const Gen *g, SrvCache *cache, const EmxBranchResult *br,
                   const EmxGenerateStats *stats, int n_ids, SrvGenResult *res) {
    memcpy(cache->ids + n_ids, br->tokens, (size_t)br->n_valid * sizeof *cache->ids);
    cache->n = n_ids + br->n_valid;
    const int last_stop = br->n_tokens > 0 && emx_is_stop(sm->tk, br->tokens[br->n_tokens - 1]);
    res->n_prompt = n_ids;
    res->n_completion = br->n_tokens - last_stop;  // a final stop token not counted
    res->finish_reason = g->stopped || br->stop == EMX_STOP_TOKEN ? "stop" : "length";
    res->decode_s = stats->decode_s;
    res->branch = result_json(&g->r->branch, br);
}

int srv_generate_branch(const SrvModel *sm, EmxState *st, SrvCache *cache, int n_cached, const SrvRequest *r,
                        const int *ids, int n_ids, atomic_int *cancel, SrvEmit emit, void *emit_user, SrvGenResult *res,
                        SrvError *e) {
    const int n_predict = branch_budget(sm, r, n_ids, e);
    if (n_predict < 0) return -1;
    res->sampler = emx_sampler_kind_name(EMX_SAMPLER_BRANCH);
    Gen g = {.sm = sm, .r = r, .sampler_name = res->sampler, .cancel = cancel, .emit = emit, .emit_user = emit_user};
    res->n_cached = n_cached;
    // Rows past the common prefix are overwritten from here on: until the run says which rows
    // hold its sequence, only the prefix is known (and stays so if it fails).
    cache->n = n_cached;
    memcpy(cache->ids + n_cached, ids + n_cached, (size_t)(n_ids - n_cached) * sizeof *ids);
    EmxGenerateOptions go = {.n_predict = n_predict, .out_name = "the response", .n_cached = n_cached};
    EmxBranchHooks hooks = {.on_text = on_text, .should_stop = should_stop, .user = &g};
    EmxBranchResult br;
    EmxGenerateStats stats;
    char err[320] = {0};
    const int rc = emx_branch_decode_hooked(st, sm->tk, ids, n_ids, &r->branch, &go, &hooks, &br, &stats, err, sizeof err);
    emx_state_branches_release(st);  // the slot keeps its own cache only: the next request may be another's
    if (rc != 0) {
        srv_gen_free(&g);
        return g.oom ? srv_fail(e, 500, NULL, NULL, "out of memory") : srv_fail(e, 500, NULL, NULL, "generation failed: %s", err);
    }
    if (!g.stopped && !g.emit_failed && !*cancel) srv_add_text(&g, "", 0, 1);  // the text held back for a stop string
    finish(sm, &g, cache, &br, &stats, n_ids, res);
    emx_branch_result_free(&br);
    srv_gen_free(&g);
    return g.oom || !res->branch ? srv_fail(e, 500, NULL, NULL, "out of memory") : 0;
}
