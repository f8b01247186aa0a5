// kv_type.c — the KV cache types' names (kv_type.h).
#include "base/kv_type.h"

#include <string.h>

const char *emx_kv_type_name(EmxKvType t) { return t == EMX_KV_F32 ? "f32" : t == EMX_KV_F16 ? "f16" : "auto"; }

int emx_kv_type_parse(const char *text, EmxKvType *out) {
    static const EmxKvType all[] = {EMX_KV_AUTO, EMX_KV_F32, EMX_KV_F16};
    for (size_t i = 0; text && i < sizeof all / sizeof all[0]; i++)
        if (!strcmp(text, emx_kv_type_name(all[i]))) {
            *out = all[i];
            return 0;
        }
    return -1;
}
