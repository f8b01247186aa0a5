// kv_ring.c — the KV cache's layout by layer and the rings' record (kv_ring.h).
#include "runtime/kv_ring.h"

#include <stdio.h>

int emx_kv_layer_rows(const EmxConfigExt *e, uint32_t layer, int ctx, int batch_cap) {
    const int T = ctx > 0 ? ctx : 1, cap = batch_cap < 1 ? 1 : batch_cap < T ? batch_cap : T;
    if (!emx_layer_is_local(e, layer)) return T;
    const int64_t ring = (int64_t)e->sliding_window + cap - 1;
    return ring < T ? (int)ring : T;
}

int64_t emx_kv_layout(const EmxConfigExt *e, uint32_t n_layers, int ctx, int batch_cap, EmxKvLayer *layers,
                      EmxKvRing *ring) {
    *ring = (EmxKvRing){.rows = 0, .hi = -1, .window = (int)e->sliding_window};
    int64_t rows = 0;
    for (uint32_t l = 0; l < n_layers; l++) {
        layers[l].row0 = rows;
        layers[l].rows = emx_kv_layer_rows(e, l, ctx, batch_cap);
        layers[l].unused = 0;
        rows += layers[l].rows;
        if (layers[l].rows < ctx) ring->rows = layers[l].rows;
    }
    return rows;
}

const char *emx_kv_ring_refusal(EmxKvRing *r, int pos) {
    const int oldest = pos - r->window + 1;  // of the first query's window
    if (!r->rows || oldest <= 0 || oldest > r->hi || emx_kv_ring_holds(r, oldest)) return NULL;
    snprintf(r->why, sizeof r->why,
             "position %d: the local layers' rings (%d rows) no longer hold key %d (written up to %d): a rollback "
             "further back than the sliding window's ring", pos, r->rows, oldest, r->hi);
    return r->why;
}

const char *emx_kv_ring_read_refusal(EmxKvRing *r, int pos, int n) {
    if (!n || emx_kv_ring_holds(r, pos) || pos > r->hi) return NULL;
    snprintf(r->why, sizeof r->why, "KV rows %d..%d: the local layers' rings (%d rows) hold positions %d..%d only",
             pos, pos + n - 1, r->rows, r->hi - r->rows + 1, r->hi);
    return r->why;
}
