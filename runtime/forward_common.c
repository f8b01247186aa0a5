// forward_common.c — what the backends share (forward_common.h) and emx_kv_type_resolve
// (forward.h), which they and the tools call.
#include "runtime/forward_common.h"

#include "base/errmsg.h"

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

EmxKvType emx_kv_type_resolve(EmxKvType t, const EmxModel *m, int on_gpu) {
    if (t != EMX_KV_AUTO) return t;
    // the matrices' element type (every layer's is the same: the converter writes one dtype)
    const int f32_weights = m->layers[0].wq.dtype == EMX_F32;
    return on_gpu && !f32_weights ? EMX_KV_F16 : EMX_KV_F32;
}
