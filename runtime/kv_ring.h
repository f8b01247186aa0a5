// kv_ring.h — the KV cache's layout by layer for a sliding-window model, and what a local layer's
// ring still holds. Both backends lay their states out with it (runtime/cpu, runtime/cuda), so a
// state holds the same positions whichever runs it, and refuses the same calls.
//
// A global layer keeps ctx rows. A local layer (EmxConfigExt: emx_layer_is_local) keeps a ring of
// window + batch_cap - 1 rows (at most ctx), position p in row p % rows (base/kv_type.h's
// EmxKvLayer): a query sees its last `window` keys, and a pass writes up to batch_cap rows' keys
// before its first row reads the oldest of its window, so the ring holds both. Once a ring has
// wrapped, the positions it held before are gone: a later call that needs them (a rollback further
// back than the ring, KV rows read back) is refused with a message that says so.
#ifndef EMX_KV_RING_H
#define EMX_KV_RING_H

#include <stdint.h>

#include "base/kv_type.h"
#include "base/model_format.h"

// The rows of layer l in a state of ctx positions whose passes write at most batch_cap rows.
int emx_kv_layer_rows(const EmxConfigExt *e, uint32_t layer, int ctx, int batch_cap);

// What a state's rings hold: rows, the rings' length (0: no layer is a ring); hi, the highest
// position written since the state was made (-1: none), so a ring holds hi - rows + 1 .. hi.
// window: the model's sliding window. why: the latest refusal's message.
typedef struct {
    int rows, hi, window;
    char why[192];
} EmxKvRing;

// A new state's layout: fills layers[n_layers] (each layer's rows after the one before) and its
// rings' record (nothing written yet; no ring when every layer keeps ctx rows), and returns the
// rows of the whole cache (keys or values).
int64_t emx_kv_layout(const EmxConfigExt *e, uint32_t n_layers, int ctx, int batch_cap, EmxKvLayer *layers,
                      EmxKvRing *ring);

// After rows up to position last were written.
static inline void emx_kv_ring_wrote(EmxKvRing *r, int last) { r->hi = last > r->hi ? last : r->hi; }
// 1 when position pos is still in the rings (or there are none).
static inline int emx_kv_ring_holds(const EmxKvRing *r, int pos) { return !r->rows || pos > r->hi - r->rows; }
// 1 when position pos was written and is still in the rings: what a ring layer's row holds.
static inline int emx_kv_ring_has(const EmxKvRing *r, int pos) { return pos <= r->hi && emx_kv_ring_holds(r, pos); }
// Why a pass whose first query is at position pos cannot run (the oldest key its window needs was
// overwritten: a rollback further back than the rings hold), or NULL.
const char *emx_kv_ring_refusal(EmxKvRing *r, int pos);
// Why rows pos..pos+n-1 cannot be read back (the rings no longer hold the first), or NULL.
const char *emx_kv_ring_read_refusal(EmxKvRing *r, int pos, int n);

#endif
