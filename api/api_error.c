// api_error.c — the per-thread error message, status names, the version, entropix_free.
//
// The message is a thread-local buffer (libgit2's git_error_last): the one piece of state the
// library keeps outside its handles, since a failed open has no handle to hold its message, and
// a thread's failures must not overwrite another thread's message.
#include "api/api_internal.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "base/errmsg.h"

static _Thread_local char api_last_error[API_ERRLEN];

char *api_errbuf(void) { return api_last_error; }

int api_fail(int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    emx_vseterr(api_last_error, sizeof api_last_error, fmt, ap);
    va_end(ap);
    return status;
}

int api_check_size(const char *fn, const char *name, const char *type, size_t size, size_t need) {
    if (size >= need) return ENTROPIX_OK;
    return api_fail(ENTROPIX_ERR_ARGUMENT, "%s: %s->size %zu is too small for %s (at least %zu)", fn, name, size, type,
                    need);
}

ENTROPIX_API const char *entropix_error_last(void) { return api_last_error; }

ENTROPIX_API const char *entropix_status_name(int status) {
    switch (status) {
    case ENTROPIX_OK: return "ok";
    case ENTROPIX_ERR_ARGUMENT: return "argument";
    case ENTROPIX_ERR_FILE: return "file";
    case ENTROPIX_ERR_DEVICE: return "device";
    case ENTROPIX_ERR_MEMORY: return "memory";
    case ENTROPIX_ERR_BUFFER: return "buffer";
    case ENTROPIX_ERR_RUNTIME: return "runtime";
    default: return "unknown";
    }
}

#define API_STR2(x) #x
#define API_STR(x) API_STR2(x)
ENTROPIX_API const char *entropix_version(void) {
    return API_STR(ENTROPIX_VERSION_MAJOR) "." API_STR(ENTROPIX_VERSION_MINOR) "." API_STR(ENTROPIX_VERSION_PATCH);
}

ENTROPIX_API void entropix_free(void *p) { free(p); }

void api_fill_metrics(const EmxMetrics *in, entropix_metrics *out) {
    const size_t size = out->size;
    entropix_metrics m = {
        .size = size,
        .logits_entropy = in->logits_entropy_bits,
        .logits_varentropy = in->logits_varentropy_bits2,
        .attn_entropy = in->attn_entropy_bits,
        .attn_varentropy = in->attn_varentropy_heads_bits2,
        .attn_agreement = in->attn_agreement,
        .attn_interaction_strength = in->attn_interaction_strength,
    };
    // A caller built against an older, shorter struct gets the fields it knows.
    memcpy(out, &m, size < sizeof m ? size : sizeof m);
}
