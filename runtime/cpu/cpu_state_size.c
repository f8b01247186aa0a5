// cpu_state_size.c — the sizes of a CPU state's buffers (cpu_state_size.h).
#include "runtime/cpu/cpu_state_size.h"
#include "runtime/kv_ring.h"

#include <string.h>

void emx_cpu_state_sizes(const EmxConfig *c, int ctx, int n_threads, EmxKvType cache, EmxCpuStateSizes *z) {
    memset(z, 0, sizeof *z);
    const size_t T = ctx > 0 ? (size_t)ctx : 1, th = n_threads > 0 ? (size_t)n_threads : 1;
    z->batch_cap = (int)(T < EMX_CPU_MAX_BATCH ? T : EMX_CPU_MAX_BATCH);
    z->q_dim = (int)(c->n_heads * c->head_dim);
    z->kv_dim = (int)(c->n_kv_heads * c->head_dim);
    z->esz = emx_kv_type_size(cache);  // 2 for F16; 4 for F32 and for AUTO (f32 on the CPU)
    const size_t B = (size_t)z->batch_cap, dim = c->dim, hid = c->hidden_dim, half = c->head_dim / 2;
    size_t widest = dim > (size_t)z->q_dim ? dim : (size_t)z->q_dim;
    widest = widest > hid ? widest : hid;
    // A cache row of an even number of cache lines puts a head's slice of every position into a
    // fraction of the cache sets (sets are a power of two): Qwen3-0.6B's 4 KiB rows (8 KV heads x
    // 128 x 4 B) all land in the same 1/64 of L1's and L2's sets, so a head's keys and values
    // evict each other before a prefill's next queries read them again. Rows of 4 lines or more
    // get one line of padding, an odd number of lines, which reaches every set. Never read.
    const size_t row_lines = ((size_t)z->kv_dim * z->esz + 63) / 64;
    z->kv_row = z->kv_dim + (row_lines >= 4 && row_lines % 2 == 0 ? (int)(64 / z->esz) : 0);
    z->x = B * dim * sizeof(float);
    z->q = B * (size_t)z->q_dim * sizeof(float);
    z->hb = B * hid * sizeof(float);
    z->xq = B * widest;
    z->xd = B * (widest / 32 + 1) * sizeof(float);
    z->rope = B * half * sizeof(float);
    z->inv_freq = half * sizeof(double);
    z->att_tmp = th * EMX_CPU_ATTN_PASS * T * sizeof(float);
    z->kv_cache = (size_t)c->n_layers * T * (size_t)z->kv_row * z->esz;
    z->kv_tmp = 2 * B * (size_t)z->kv_dim * sizeof(float);
    z->att_scores = (size_t)c->n_layers * c->n_heads * T * sizeof(float);
    z->logits = (size_t)c->vocab_size * sizeof(float);
}

int emx_cpu_layer_rows(const EmxConfigExt *e, uint32_t layer, int ctx) {
    return emx_kv_layer_rows(e, layer, ctx, EMX_CPU_MAX_BATCH);
}

uint64_t emx_cpu_kv_cache_bytes(const EmxModel *m, int ctx, EmxKvType cache) {
    EmxCpuStateSizes z;
    emx_cpu_state_sizes(&m->cfg, ctx, 1, cache, &z);
    uint64_t rows = 0;
    for (uint32_t l = 0; l < m->cfg.n_layers; l++) rows += (uint64_t)emx_cpu_layer_rows(&m->ext, l, ctx);
    return 2 * rows * (uint64_t)z.kv_row * z.esz;
}

uint64_t emx_cpu_state_bytes(const EmxConfig *c, int ctx, int n_threads, EmxKvType cache, uint64_t *kv_bytes) {
    EmxCpuStateSizes z;
    emx_cpu_state_sizes(c, ctx, n_threads, cache, &z);
    const uint64_t kv = 2 * (uint64_t)z.kv_cache;
    const uint64_t act = 2 * (uint64_t)z.x + 2 * (uint64_t)z.q + 2 * (uint64_t)z.hb + z.xq + 2 * (uint64_t)z.xd +
                         2 * (uint64_t)z.rope + z.inv_freq + z.att_tmp + z.kv_tmp + z.att_scores + z.logits;
    if (kv_bytes) *kv_bytes = kv;
    return kv + act;
}
