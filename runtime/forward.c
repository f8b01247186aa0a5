// forward.c — forward.h's functions: choose a backend when a state is made, then forward every
// call to the state's table (forward_backend.h).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/errmsg.h"
#include "runtime/forward.h"
#include "runtime/forward_backend.h"
#include "runtime/forward_group.h"

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

int emx_device_check(const char *device, char *err, size_t errlen) {
    const char *d = device ? device : "";
    if (!*d || !strcmp(d, "cpu") || !strcmp(d, "auto") || parse_cuda_device(d) >= 0) return 0;
    return emx_seterr(err, errlen, "device '%s': expected cpu, cuda:N or auto", d);
}

int emx_device_is_cpu(const char *device) {
    const char *d = resolve_device(device);
    return !*d || !strcmp(d, "cpu");
}

EmxLoad emx_load_for_device(const char *device, int mmap) {
    return mmap || !emx_device_is_cpu(device) ? EMX_LOAD_MMAP : EMX_LOAD_AUTO;
}

static EmxState *state_new(const EmxModel *m, const EmxStateOptions *opt, char *err, size_t errlen) {
    const char *d = resolve_device(opt ? opt->device : NULL);
    if (emx_device_is_cpu(d)) return emx_cpu_state_new(m, opt, err, errlen);
    const int dev = parse_cuda_device(d);
    if (dev < 0) {
        emx_device_check(d, err, errlen);
        return NULL;
    }
    if (!emx_cuda_state_new) {
        emx_seterr(err, errlen, "device %s: this build has no CUDA backend (make builds it in when nvcc is found, "
                                "unless CUDA=0)", d);
        return NULL;
    }
    return emx_cuda_state_new(m, opt, dev, err, errlen);
}

EmxState *emx_state_new(const EmxModel *m, const EmxStateOptions *opt, char *err, size_t errlen) {
    EmxState *s = state_new(m, opt, err, errlen);
    if (s) s->model = m;
    return s;
}

int emx_attention_first_key(const EmxState *s, int layer, int last_pos) {
    const EmxConfigExt *e = s->model ? &s->model->ext : NULL;
    if (!e || layer < 0 || !emx_layer_is_local(e, (uint32_t)layer) || last_pos < (int)e->sliding_window) return 0;
    return last_pos - (int)e->sliding_window + 1;
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

const char *emx_phase_name(EmxPhase p) {
    static const char *const names[EMX_PHASES] = {
        "input + embedding",          "attention input (norm, q/k/v)", "attention (rope, KV write)",
        "attention output (+ residual)", "FFN input (norm, gate/up, act)", "FFN output (down + residual)",
        "final norm + classifier",    "step end (logits out / choice)",
    };
    return (unsigned)p < EMX_PHASES ? names[p] : "?";
}
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
static int decide(EmxState *s, const int *tokens, int n, int pos, const EmxDecideSpec *spec, int ahead,
                  EmxDecideResult *out) {
    // a member of a forward group must step through emx_forward (the group's batched step, which
    // waits for every member's row): deciding on its own would leave the others waiting for good
    if (s->group) return 0;
    return s->backend->forward_decide ? s->backend->forward_decide(s, tokens, n, pos, spec, ahead, out) : 0;
}
int emx_forward_decide(EmxState *s, const int *tokens, int n, int pos, const EmxDecideSpec *spec,
                       EmxDecideResult *out) {
    return decide(s, tokens, n, pos, spec, 0, out);
}
int emx_forward_decide_ahead(EmxState *s, const int *tokens, int n, int pos, const EmxDecideSpec *spec,
                             EmxDecideResult *out) {
    return decide(s, tokens, n, pos, spec, 1, out);
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

