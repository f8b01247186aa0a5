// model_writer.h — writes an entropix.c model file (base/model_format.h) from source tensors.
//
// Collect the tensors first (name, output dtype, shape, a pointer to the source data and its
// ggml element type), then write once: header, tokenizer section, directory and EMX_ALIGN-
// aligned data go to a temporary file beside <out>, ".<name of out>.XXXXXX.tmp" (unique: two
// converts to one output never share it), tensor by tensor in chunks of rows (a 1B model
// converts in tens of MB). The header gets the integrity record (model_verify.h); the file is
// fsynced, opened as the runtime would open it, and only then renamed over <out> (and the
// directory fsynced). On any error, or SIGINT/SIGTERM/SIGHUP, the temporary file is removed and
// an existing <out> is left as it was; a kill -9 can leave the hidden .tmp file behind.
#ifndef ENTROPIX_MODEL_WRITER_H
#define ENTROPIX_MODEL_WRITER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/model_format.h"
#include "tokenizer/tokenizer_data.h"

typedef struct {
    char name[EMX_NAME_BYTES];
    uint32_t dtype;        // enum emx_dtype written
    uint32_t ndim;         // 1 or 2
    uint64_t rows, cols;   // 1-D tensors: [n, 1]
    uint32_t src_type;     // enum ggml_type of the source data (F32/F16/BF16 or a block type)
    const void *src;       // source data, row-major [rows][cols], not owned
} MwTensor;

typedef struct {
    MwTensor *t;
    size_t n, cap;
} ModelWriter;

void mw_init(ModelWriter *w);
void mw_free(ModelWriter *w);

// Adds a tensor (in file order). Fails if the name is too long or duplicated, the source type
// cannot be decoded, or `dtype` cannot hold `cols` (quantised types need cols % 32 == 0).
int mw_add(ModelWriter *w, const char *name, uint32_t dtype, uint32_t ndim, uint64_t rows, uint64_t cols,
           uint32_t src_type, const void *src, char *err, size_t errlen);

// Writes the file. `log` (may be NULL) gets one line per tensor: name, source type -> dtype,
// shape, and for lossy conversions the RMS error relative to the weights' RMS and the max
// absolute error. Returns 0, or -1 with a one-line reason in err (no file left behind, <out>
// untouched). `ext` (may be NULL: the defaults) is version 2's configuration: a file whose ext
// is all defaults is written as version 1.
int mw_write(const ModelWriter *w, const char *out_path, const EmxConfig *cfg, const EmxConfigExt *ext,
             const TokenizerData *tok, FILE *log, char *err, size_t errlen);

#endif
