// forward_backend.h — what a backend of forward.h provides. Every backend's state begins with
// an EmxState, which points to the backend's table of functions; runtime/forward.c makes states
// and calls through the table, so callers never know which backend they run on. The semantics
// of each entry are those of the forward.h function of the same name. One entry, `pool`, points
// to the backend's second table, for the agent pool and the branching decoder
// (runtime/pool/pool_backend.h), or is NULL.
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
    // The model the state runs (set by emx_state_new; NULL for a state made by a backend directly):
    // which layers are local, for emx_attention_first_key.
    const EmxModel *model;
};

// The extension for the agent pool and the branching decoder (runtime/pool/pool_backend.h).
struct EmxPoolBackend;

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
    int (*forward_all_logits)(EmxState *s, const int *tokens, int n, int pos, float *logits);
    // NULL: emx_forward_multi runs the rows one by one through forward
    int (*forward_multi)(EmxState *const *states, const int *tokens, const int *pos, int n, const float **logits);
    // NULL: the backend does not decide (emx_forward_decide returns 0)
    int (*forward_decide)(EmxState *s, const int *tokens, int n, int pos, const EmxDecideSpec *spec, int ahead,
                          EmxDecideResult *out);
    const float *(*attention_scores)(const EmxState *s, int *last_pos);
    void (*kv_cache)(EmxState *s, float **key, float **value, int *kv_dim);
    const struct EmxPoolBackend *pool;  // NULL: none (the agent pool and branching decoder refuse)
};

// The backends' constructors, which emx_state_new calls. What they share with each other (the
// context a state gets, ...) is runtime/forward_common.h, below forward.c.
EmxState *emx_cpu_state_new(const EmxModel *m, const EmxStateOptions *opt, char *err, size_t errlen);

// The CUDA backend (runtime/cuda/forward_cuda.c). Weak: a build without it links, and forward.c
// finds these NULL and says "this build has no CUDA backend".
EmxState *emx_cuda_state_new(const EmxModel *m, const EmxStateOptions *opt, int device, char *err,
                             size_t errlen) __attribute__((weak));
int emx_cuda_device_count(void) __attribute__((weak));
// "cuda sm_80 sm_90": the backend and the architectures of its kernels (emx_backend_names).
const char *emx_cuda_backend_name(void) __attribute__((weak));

#endif
