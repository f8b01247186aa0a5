// forward_backend.h — what a backend of forward.h provides. Every backend's state begins with
// an EmxState, whose only member is the backend's table of functions; runtime/forward.c makes
// states and calls through the table, so callers never know which backend they run on.
// The semantics of each entry are those of the forward.h function of the same name.
#ifndef ENTROPIX_FORWARD_BACKEND_H
#define ENTROPIX_FORWARD_BACKEND_H

#include "runtime/forward.h"

typedef struct EmxBackend EmxBackend;

struct EmxForwardGroup;

struct EmxState {
    const EmxBackend *backend;
    // The forward group this state decodes in (runtime/forward_group.h; NULL: none). Set by
    // emx_forward_group_join / _leave, read by emx_forward; a backend zeroes it (calloc).
    struct EmxForwardGroup *group;
};

struct EmxBackend {
    const char *name;  // "cpu", "cuda"
    void (*free)(EmxState *s);
    int (*ctx)(const EmxState *s);
    const char *(*device)(const EmxState *s);  // NULL: the name
    void (*set_threads)(EmxState *s, int n_threads);
    const char *(*error)(const EmxState *s);
    void (*info)(const EmxState *s, EmxStateInfo *info);
    const char *(*nonfinite)(const EmxState *s);  // NULL: the backend does not check
    const float *(*forward)(EmxState *s, const int *tokens, int n, int pos);
    // NULL: the backend does not decide (emx_forward_decide returns 0)
    int (*forward_decide)(EmxState *s, const int *tokens, int n, int pos, const EmxDecideSpec *spec,
                          EmxDecideResult *out);
    int (*propose)(EmxState *s, const EmxAgentParams *agents, int n_agents, uint64_t seed, uint64_t step,
                   uint32_t first_lane, int ban, EmxProposal *proposals);  // NULL: 0
    int (*forward_propose)(EmxState *s, int token, int pos, const EmxAgentParams *agents, int n_agents,
                           uint64_t seed, uint64_t step, uint32_t first_lane, int ban,
                           EmxProposal *proposals);  // NULL: 0
    // NULL: emx_forward_multi runs the rows one by one through forward
    int (*forward_multi)(EmxState *const *states, const int *tokens, const int *pos, int n, const float **logits);
    // NULL: emx_forward_pair is forward then emx_logit_pair on the host row
    int (*forward_pair)(EmxState *s, const int *tokens, int n, int pos, int id_a, int id_b, EmxLogitPair *out);
    int (*forward_all_logits)(EmxState *s, const int *tokens, int n, int pos, float *logits);
    const float *(*attention_scores)(const EmxState *s, int *last_pos);
    void (*kv_cache)(EmxState *s, float **key, float **value, int *kv_dim);
    int (*branches_reserve)(EmxState *s, int max_branches, int tail_cap, char *err, size_t errlen);
    void (*branches_release)(EmxState *s);  // NULL: the tails stay
    int (*forward_branches)(EmxState *s, const int *tokens, int n, int prefix, int step, float *logits);
    int (*forward_branches_propose)(EmxState *s, const int *tokens, int n, int prefix, int step,
                                    const EmxAgentParams *agents, uint64_t seed, uint64_t rng_step,
                                    uint32_t first_lane, EmxProposal *proposals);  // NULL: 0
    int (*forward_lookahead_propose)(EmxState *s, int token, int pos, const EmxAgentParams *agents, int n_agents,
                                     uint64_t seed, uint64_t step, uint32_t first_lane, int ban, int n_steps,
                                     EmxProposal *proposals);  // NULL: 0
    int (*branch_commit)(EmxState *s, int branch, int n_steps, int prefix);
    size_t (*kv_rows_bytes)(const EmxState *s, int n);
    int (*kv_rows_read)(EmxState *s, int pos, int n, void *buf);
    int (*kv_rows_write)(EmxState *s, int pos, int n, const void *buf);
};

// The context a state gets from its options (opt->ctx, or min(max_seq_len, 4096)), after the
// checks every backend shares (heads the attention can run, ctx within max_seq_len). Returns
// the context, or -1 with a one-line reason.
int emx_state_resolve_ctx(const EmxModel *m, const EmxStateOptions *opt, char *err, size_t errlen);

EmxState *emx_cpu_state_new(const EmxModel *m, const EmxStateOptions *opt, char *err, size_t errlen);

// The CUDA backend (runtime/cuda/forward_cuda.c). Weak: a build without it links, and forward.c
// finds these NULL and says "this build has no CUDA backend".
EmxState *emx_cuda_state_new(const EmxModel *m, const EmxStateOptions *opt, int device, char *err,
                             size_t errlen) __attribute__((weak));
int emx_cuda_device_count(void) __attribute__((weak));
// "cuda sm_80 sm_90": the backend and the architectures of its kernels (emx_backend_names).
const char *emx_cuda_backend_name(void) __attribute__((weak));

#endif
