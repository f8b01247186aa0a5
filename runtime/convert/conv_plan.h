// conv_plan.h — from an opened source (source.h) to a ModelWriter's list: every tensor the
// configuration needs, in file order, checked against the shape the configuration implies, each
// with the dtype it is written in. Shared by build/tools/convert and by ./run opening a GGUF
// (gguf_cache.h).
#ifndef ENTROPIX_CONV_PLAN_H
#define ENTROPIX_CONV_PLAN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "runtime/convert/model_writer.h"
#include "runtime/convert/source.h"

// --dtype keep: each matrix in the type that holds its source type (conv_keep_dtype).
#define CONV_DTYPE_KEEP (-2)

typedef struct {
    int dtype;        // enum emx_dtype for every matrix, or CONV_DTYPE_KEEP
    int keep_emb_q8;  // q4/q4_1: tok_embeddings and output stay q8
    FILE *log;        // notes on matrices kept f32 (NULL: none)
} ConvPlanOptions;

// The dtype a matrix of ggml type `src_type` is kept in: F32, F16, BF16 as they are; Q8_0 q8,
// Q4_0 q4, Q4_1 q4_1, Q4_K q4_1f (their blocks copied: exact, tensor_encode.h); every other
// block type q8 (its values are requantised: model_writer.h reports the error that adds).
uint32_t conv_keep_dtype(uint32_t src_type);

// Sets s->cfg.chat_template: `choice` (enum emx_chat_template) when >= 0, else detected from
// the source's template text (none without one).
void conv_set_chat_template(ConvSource *s, int choice);

// Adds every tensor the configuration needs to w; fails (one line in err) on a tensor missing,
// of the wrong shape, or present in the source without belonging to the configuration.
int conv_collect(const ConvSource *s, const ConvPlanOptions *o, ModelWriter *w, char *err, size_t errlen);

#endif
