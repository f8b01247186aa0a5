// kv_type.h — the KV cache's element type, one enum for every layer that stores or reads a cache:
// the options and the states of runtime/ (EmxStateOptions.cache_type, EmxStateInfo.cache_type),
// the CPU's cache and branch tails (runtime/cpu), and the CUDA kernels that write and read it
// (kernels/rope.h, kernels/attention.h: their kv_dtype fields hold these values).
//
// f16 halves the bytes the attention reads per key and the cache's memory; keys and values are
// rounded to f16 (round to nearest even) as they are written, and read back exactly, so the only
// change is that one rounding. Everything else stays f32.
#ifndef ENTROPIX_KV_TYPE_H
#define ENTROPIX_KV_TYPE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    EMX_KV_AUTO = 0,  // options only: the backend's choice for the model (emx_kv_type_resolve,
                      // runtime/forward.h); zero, so that zeroed options ask for it
    EMX_KV_F32 = 1,   // float
    EMX_KV_F16 = 2,   // IEEE half (uint16_t on the host, __half on the device)
} EmxKvType;

// "auto", "f32", "f16"
const char *emx_kv_type_name(EmxKvType t);
// Parses one of those names; 0, or -1 for anything else.
int emx_kv_type_parse(const char *text, EmxKvType *out);
// Bytes of one element of a cache of type t (F32 or F16): 4 or 2.
static inline unsigned emx_kv_type_size(EmxKvType t) { return t == EMX_KV_F16 ? 2u : 4u; }

// Where one layer's rows lie in a state's KV cache (its keys and its values alike: two arrays of
// rows of the same layout). row0: the index of the layer's first row in the cache; rows: how many
// it has: the context, or for a local layer of a sliding-window model a ring shorter than it,
// position p then in row p % rows (runtime/kv_ring.h says how long and what it still holds). The
// CPU's states and the CUDA kernels that write or read a state's rows (kernels/rope.h,
// kernels/attention_decode.h) use this one description.
typedef struct {
    int64_t row0;
    int32_t rows;
    int32_t unused;  // (8-byte size on every ABI the device shares)
} EmxKvLayer;

// The cache row of position pos in layer l (pos >= 0).
static inline int64_t emx_kv_row(EmxKvLayer l, int pos) { return l.row0 + pos % l.rows; }

#ifdef __cplusplus
}
#endif

#endif
