// forward_cpu_branches.c — the CPU backend's table for the agent pool and the branching decoder
// (runtime/pool/pool_backend.h): lookahead branches over one shared prefix, each with KV tails of
// its own, their commit into the cache, and KV rows copied out of and into the cache. A branch
// pass is forward_cpu.c's pass over a RowLayout of branches (is_branches): its rows' k and v go
// to the tails, and each row attends to the prefix, then to its own tail. The CPU makes no
// proposals on its side (the pool proposes from the logits), so those entries are NULL.
#include <stdlib.h>
#include <string.h>

#include "base/errmsg.h"
#include "runtime/cpu/forward_cpu_state.h"
#include "runtime/pool/pool_backend.h"

static void cpu_state_branches_release(EmxState *st) {
    CpuState *s = (CpuState *)st;
    free(s->br_key), free(s->br_value);
    s->br_key = s->br_value = NULL, s->br_max = s->br_tail = 0;
}

static int cpu_state_branches_reserve(EmxState *st, int max_branches, int tail_cap, char *err, size_t errlen) {
    CpuState *s = (CpuState *)st;
    if (max_branches < 1 || max_branches > s->batch_cap || tail_cap < 1 || tail_cap > s->ctx)
        return emx_seterr(err, errlen, "branches: %d branches of %d positions do not fit (at most %d branches, ctx %d)",
                          max_branches, tail_cap, s->batch_cap, s->ctx);
    if (max_branches <= s->br_max && tail_cap <= s->br_tail) return 0;
    const size_t n = (size_t)s->m->cfg.n_layers * tail_cap * max_branches * s->kv_dim;
    void *k = malloc(n * s->esz), *v = malloc(n * s->esz);
    if (!k || !v) {
        free(k), free(v);
        return emx_seterr(err, errlen, "branches: out of memory (%zu MiB of KV tails)", 2 * n * s->esz >> 20);
    }
    cpu_state_branches_release(st);
    s->br_key = k, s->br_value = v, s->br_max = max_branches, s->br_tail = tail_cap;
    return 0;
}

static int cpu_forward_branches(EmxState *st, const int *tokens, int n, int prefix, int step, float *logits) {
    CpuState *s = (CpuState *)st;
    if (n < 1 || n > s->br_max || step < 0 || step >= s->br_tail || prefix < 1 || prefix + step >= s->ctx)
        return -1;
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= s->m->cfg.vocab_size) return -1;
    if ((s->why = emx_kv_ring_refusal(&s->ring, prefix + step))) return -1;
    const RowLayout rows = {prefix, step, 1, NULL, NULL};
    s->nonfinite_at = NONFINITE_NONE;
    cpu_run_layers(s, tokens, n, prefix + step, &rows, 0);
    cpu_classify(s, 0, n, logits);
    return 0;
}

static int cpu_branch_commit(EmxState *st, int branch, int n_steps, int prefix) {
    CpuState *s = (CpuState *)st;
    if (branch < 0 || branch >= s->br_max || n_steps < 0 || n_steps > s->br_tail || prefix < 0 ||
        prefix + n_steps > s->ctx)
        return -1;
    const size_t kv = (size_t)s->kv_dim;
    for (int l = 0; l < (int)s->m->cfg.n_layers; l++)
        for (int j = 0; j < n_steps; j++) {
            const size_t from = (((size_t)l * s->br_tail + j) * s->br_max + branch) * kv;
            const size_t to = cache_at(s, l, prefix + j);
            memcpy(kv_at(s, s->key_cache, to), kv_at(s, s->br_key, from), kv * s->esz);
            memcpy(kv_at(s, s->value_cache, to), kv_at(s, s->br_value, from), kv * s->esz);
        }
    if (n_steps) emx_kv_ring_wrote(&s->ring, prefix + n_steps - 1);
    return 0;
}

static size_t cpu_state_kv_rows_bytes(const EmxState *st, int n) {
    const CpuState *s = (const CpuState *)st;
    return 2 * (size_t)s->m->cfg.n_layers * n * s->kv_dim * sizeof(float);
}

static int cpu_state_kv_rows_read(EmxState *st, int pos, int n, void *buf) {
    CpuState *s = (CpuState *)st;
    return cpu_kv_rows_copy(s, pos, n, buf, 0);
}
static int cpu_state_kv_rows_write(EmxState *st, int pos, int n, const void *buf) {
    CpuState *s = (CpuState *)st;
    return cpu_kv_rows_copy(s, pos, n, (float *)buf, 1);
}

const EmxPoolBackend emx_cpu_pool_backend = {
    .branches_reserve = cpu_state_branches_reserve,
    .branches_release = cpu_state_branches_release,
    .forward_branches = cpu_forward_branches,
    .branch_commit = cpu_branch_commit,
    .kv_rows_bytes = cpu_state_kv_rows_bytes,
    .kv_rows_read = cpu_state_kv_rows_read,
    .kv_rows_write = cpu_state_kv_rows_write,
};
