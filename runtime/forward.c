// forward.c — forward.h's functions: choose a backend when a state is made, then forward every
// call to the state's table (forward_backend.h).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/errmsg.h"
#include "runtime/forward.h"
#include "runtime/forward_backend.h"
#include "runtime/forward_group.h"

int emx_state_resolve_ctx(const EmxModel *m, const EmxStateOptions *opt, char *err, size_t errlen) {
    const EmxConfig *c = &m->cfg;
    if (c->n_kv_heads == 0 || c->n_heads % c->n_kv_heads != 0 || c->head_dim == 0 || c->head_dim % 2)
        return emx_seterr(err, errlen, "state: unsupported heads (n_heads %u, n_kv_heads %u, head_dim %u)",
                          c->n_heads, c->n_kv_heads, c->head_dim);
    int ctx = opt && opt->ctx > 0 ? opt->ctx : (int)(c->max_seq_len < 4096 ? c->max_seq_len : 4096);
    if (ctx > (int)c->max_seq_len || ctx < 1)
        return emx_seterr(err, errlen, "state: ctx %d exceeds the model's max_seq_len %u", ctx, c->max_seq_len);
    return ctx;
}

const char *emx_cache_type_name(EmxCacheType t) {
    return t == EMX_CACHE_F32 ? "f32" : t == EMX_CACHE_F16 ? "f16" : "auto";
}

int emx_cache_type_parse(const char *text, EmxCacheType *out) {
    static const EmxCacheType all[] = {EMX_CACHE_AUTO, EMX_CACHE_F32, EMX_CACHE_F16};
    for (size_t i = 0; text && i < sizeof all / sizeof all[0]; i++)
        if (!strcmp(text, emx_cache_type_name(all[i]))) {
            *out = all[i];
            return 0;
        }
    return -1;
}

EmxCacheType emx_cache_type_resolve(EmxCacheType t, const EmxModel *m, int on_gpu) {
    if (t != EMX_CACHE_AUTO) return t;
    // the matrices' element type (every layer's is the same: the converter writes one dtype)
    const int f32_weights = m->layers[0].wq.dtype == EMX_F32;
    return on_gpu && !f32_weights ? EMX_CACHE_F16 : EMX_CACHE_F32;
}

int emx_cuda_available(void) { return emx_cuda_device_count && emx_cuda_device_count() > 0; }

const char *emx_backend_names(void) {
    static char names[128];  // set once, before any thread: --version runs first
    if (!emx_cuda_backend_name) return "cpu";
    snprintf(names, sizeof names, "cpu, %s", emx_cuda_backend_name());
    return names;
}

// "cuda:N" -> N; -1 if the text is not of that form.
static int parse_cuda_device(const char *d) {
    if (strncmp(d, "cuda:", 5) != 0 || d[5] < '0' || d[5] > '9') return -1;
    char *end;
    long n = strtol(d + 5, &end, 10);
    return *end || n > 1024 ? -1 : (int)n;
}

// The device a state asked for on `device` gets: "auto" resolved; NULL or "" is the CPU's "".
static const char *resolve_device(const char *device) {
    const char *d = device ? device : "";
    return !strcmp(d, "auto") ? (emx_cuda_available() ? "cuda:0" : "cpu") : d;
}

int emx_device_is_cpu(const char *device) {
    const char *d = resolve_device(device);
    return !*d || !strcmp(d, "cpu");
}

EmxLoad emx_load_for_device(const char *device, int mmap) {
    return mmap || !emx_device_is_cpu(device) ? EMX_LOAD_MMAP : EMX_LOAD_AUTO;
}

EmxState *emx_state_new(const EmxModel *m, const EmxStateOptions *opt, char *err, size_t errlen) {
    const char *d = resolve_device(opt ? opt->device : NULL);
    if (emx_device_is_cpu(d)) return emx_cpu_state_new(m, opt, err, errlen);
    const int dev = parse_cuda_device(d);
    if (dev < 0) {
        emx_seterr(err, errlen, "device '%s': expected cpu, cuda:N or auto", d);
        return NULL;
    }
    if (!emx_cuda_state_new) {
        emx_seterr(err, errlen, "device %s: this build has no CUDA backend (make builds it in when nvcc is found, "
                                "unless CUDA=0)", d);
        return NULL;
    }
    return emx_cuda_state_new(m, opt, dev, err, errlen);
}

void emx_state_free(EmxState *s) {
    if (!s) return;
    emx_forward_group_leave(s);  // the group must not keep a freed member (nothing when in none)
    s->backend->free(s);
}
int emx_state_ctx(const EmxState *s) { return s->backend->ctx(s); }
const char *emx_state_device(const EmxState *s) {
    return s->backend->device ? s->backend->device(s) : s->backend->name;
}
const char *emx_state_error(const EmxState *s) { return s->backend->error(s); }
void emx_state_info(const EmxState *s, EmxStateInfo *info) { s->backend->info(s, info); }
const char *emx_state_nonfinite(const EmxState *s) {
    return s->backend->nonfinite ? s->backend->nonfinite(s) : NULL;
}
void emx_forward_set_threads(EmxState *s, int n_threads) { s->backend->set_threads(s, n_threads); }

const float *emx_forward(EmxState *s, const int *tokens, int n, int pos) {
    // a member of a forward group decodes in the group's batched step (forward_group.h)
    if (s->group) return emx_forward_group_forward(s, tokens, n, pos);
    return s->backend->forward(s, tokens, n, pos);
}

int emx_forward_multi(EmxState *const *states, const int *tokens, const int *pos, int n, const float **logits) {
    if (n < 1 || !states || !states[0]) return -1;
    const EmxBackend *b = states[0]->backend;
    for (int i = 1; i < n; i++)
        if (!states[i] || states[i]->backend != b) return -1;
    if (b->forward_multi) return b->forward_multi(states, tokens, pos, n, logits);
    for (int i = 0; i < n; i++)  // no batched step: the rows in turn (same results)
        if (!(logits[i] = b->forward(states[i], &tokens[i], 1, pos[i]))) return -1;
    return 0;
}
int emx_forward_multi_batched(const EmxState *s) { return s->backend->forward_multi != NULL; }
int emx_forward_decide(EmxState *s, const int *tokens, int n, int pos, const EmxDecideSpec *spec,
                       EmxDecideResult *out) {
    // a member of a forward group must step through emx_forward (the group's batched step, which
    // waits for every member's row): deciding on its own would leave the others waiting for good
    if (s->group) return 0;
    return s->backend->forward_decide ? s->backend->forward_decide(s, tokens, n, pos, spec, out) : 0;
}
int emx_state_propose(EmxState *s, const EmxAgentParams *agents, int n_agents, uint64_t seed, uint64_t step,
                      uint32_t first_lane, int ban, EmxProposal *proposals) {
    return s->backend->propose ? s->backend->propose(s, agents, n_agents, seed, step, first_lane, ban, proposals) : 0;
}
int emx_forward_propose(EmxState *s, int token, int pos, const EmxAgentParams *agents, int n_agents,
                        uint64_t seed, uint64_t step, uint32_t first_lane, int ban, EmxProposal *proposals) {
    if (s->group) return 0;  // a group member steps through emx_forward (see emx_forward_decide)
    return s->backend->forward_propose
               ? s->backend->forward_propose(s, token, pos, agents, n_agents, seed, step, first_lane, ban, proposals)
               : 0;
}
int emx_forward_pair(EmxState *s, const int *tokens, int n, int pos, int id_a, int id_b, EmxLogitPair *out) {
    if (!s->group && s->backend->forward_pair) return s->backend->forward_pair(s, tokens, n, pos, id_a, id_b, out);
    EmxStateInfo info;
    emx_state_info(s, &info);
    if (id_a < 0 || id_a >= info.vocab || id_b < 0 || id_b >= info.vocab) return -1;
    const float *logits = emx_forward(s, tokens, n, pos);
    return logits ? emx_logit_pair(logits, info.vocab, id_a, id_b, out) : -1;
}
int emx_forward_all_logits(EmxState *s, const int *tokens, int n, int pos, float *logits) {
    return s->backend->forward_all_logits(s, tokens, n, pos, logits);
}
const float *emx_attention_scores(const EmxState *s, int *last_pos) {
    return s->backend->attention_scores(s, last_pos);
}
void emx_state_kv_cache(EmxState *s, float **key, float **value, int *kv_dim) {
    s->backend->kv_cache(s, key, value, kv_dim);
}

int emx_state_branches_reserve(EmxState *s, int max_branches, int tail_cap, char *err, size_t errlen) {
    return s->backend->branches_reserve(s, max_branches, tail_cap, err, errlen);
}
int emx_forward_branches(EmxState *s, const int *tokens, int n, int prefix, int step, float *logits) {
    return s->backend->forward_branches(s, tokens, n, prefix, step, logits);
}
int emx_forward_branches_propose(EmxState *s, const int *tokens, int n, int prefix, int step,
                                 const EmxAgentParams *agents, uint64_t seed, uint64_t rng_step, uint32_t first_lane,
                                 EmxProposal *proposals) {
    return s->backend->forward_branches_propose ? s->backend->forward_branches_propose(s, tokens, n, prefix, step, agents,
                                                                                       seed, rng_step, first_lane,
                                                                                       proposals)
                                                : 0;
}
int emx_forward_lookahead_propose(EmxState *s, int token, int pos, const EmxAgentParams *agents, int n_agents,
                                  uint64_t seed, uint64_t step, uint32_t first_lane, int ban, int n_steps,
                                  EmxProposal *proposals) {
    if (s->group) return 0;  // a group member steps through emx_forward (see emx_forward_decide)
    return s->backend->forward_lookahead_propose
               ? s->backend->forward_lookahead_propose(s, token, pos, agents, n_agents, seed, step, first_lane, ban,
                                                       n_steps, proposals)
               : 0;
}
int emx_branch_commit(EmxState *s, int branch, int n_steps, int prefix) {
    return s->backend->branch_commit(s, branch, n_steps, prefix);
}
void emx_state_branches_release(EmxState *s) {
    if (s->backend->branches_release) s->backend->branches_release(s);
}
size_t emx_state_kv_rows_bytes(const EmxState *s, int n) { return s->backend->kv_rows_bytes(s, n); }
int emx_state_kv_rows_read(EmxState *s, int pos, int n, void *buf) {
    return s->backend->kv_rows_read(s, pos, n, buf);
}
int emx_state_kv_rows_write(EmxState *s, int pos, int n, const void *buf) {
    return s->backend->kv_rows_write(s, pos, n, buf);
}
