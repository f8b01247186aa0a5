// forward_common.h — what the backends of forward.h share, below both them and the dispatcher
// (runtime/forward.c calls the backends; the backends call this, never forward.c).
#ifndef ENTROPIX_FORWARD_COMMON_H
#define ENTROPIX_FORWARD_COMMON_H

#include <stddef.h>

#include "runtime/forward.h"

// The context a state gets from its options (opt->ctx, or min(max_seq_len, 4096)), after the
// checks every backend shares (heads the attention can run, ctx within max_seq_len). Returns
// the context, or -1 with a one-line reason.
int emx_state_resolve_ctx(const EmxModel *m, const EmxStateOptions *opt, char *err, size_t errlen);

#endif
