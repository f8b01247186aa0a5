// source.h — a model to convert, as read from a HuggingFace directory, a GGUF file or a
// llama2.c checkpoint: its configuration, tokenizer, chat template and tensors, already under
// our tensor names (model_format.h) and pointing into the mmapped source files.
//
// Each reader only translates; conv_plan.h checks that every tensor the configuration needs is
// there with the right shape and picks the output dtypes. The GGUF reader is here, in the
// runtime, because ./run opens GGUF files (gguf_cache.h); the HuggingFace and llama2.c readers
// are the converter's own (tools/convert/source.h).
#ifndef ENTROPIX_RUNTIME_CONVERT_SOURCE_H
#define ENTROPIX_RUNTIME_CONVERT_SOURCE_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/convert/gguf.h"
#include "base/model_format.h"
#include "tokenizer/tokenizer_data.h"

#define SRC_MAX_MAPS 64
#define SRC_MAX_INPUTS (SRC_MAX_MAPS + 8)

typedef struct {
    char name[EMX_NAME_BYTES];  // our name, e.g. "layers.3.wq"
    char src_name[96];          // the source's name escaped (msg_esc.h), for messages ("model.layers.3.self_attn.q_proj.weight")
    uint32_t type;              // enum ggml_type of the data (safetensors/llama2.c use F32/F16/BF16)
    uint32_t ndim;              // 1 or 2
    uint64_t rows, cols;        // as stored: [rows, cols] row-major; vectors [n, 1]
    const void *data;
} SrcTensor;

typedef struct {
    const char *path;           // the source as given on the command line
    char kind[96];              // for the log: "HuggingFace LlamaForCausalLM", "GGUF qwen3", ...
    EmxConfig cfg;              // chat_template left EMX_CHAT_NONE; convert.c sets it
    EmxConfigExt ext;           // version 2's fields (emx_config_ext_default() unless the source needs them)
    TokenizerData tok;
    char *chat_template;        // Jinja template text (heap), or NULL when the source has none
    SrcTensor *t;
    size_t n, cap;
    void *maps[SRC_MAX_MAPS];   // mmapped source files
    size_t map_sizes[SRC_MAX_MAPS];
    int n_maps;
    void *owned[8];             // heap buffers tensors point into (computed rope factors, Gemma's 1 + w norms)
    int n_owned;
    GGUFFile gguf;              // the open GGUF (GGUF sources only)
    int has_gguf;
    struct {                    // every file the reader opened (device, inode): the output
        uint64_t dev, ino;      // may not be one of them
        char *path;
    } in[SRC_MAX_INPUTS];
    int n_in;
} ConvSource;

// Readers (this one and tools/convert/source.h's): fill `s` (zeroed first) or return -1 with a
// one-line reason in err. Whatever they opened is released by src_free, also after an error.
int src_open_gguf(ConvSource *s, const char *path, char *err, size_t errlen);
void src_free(ConvSource *s);

// Shared by the readers.
int src_add(ConvSource *s, const char *name, const char *src_name, uint32_t type, uint32_t ndim, uint64_t rows,
            uint64_t cols, const void *data, char *err, size_t errlen);
const SrcTensor *src_find(const ConvSource *s, const char *name);
// Records `path` (when it exists) as an input of the conversion (src_map_file does it itself).
void src_note_input(ConvSource *s, const char *path);
// mmaps a whole file read-only and keeps it until src_free; returns its bytes or NULL.
const uint8_t *src_map_file(ConvSource *s, const char *path, size_t *size, char *err, size_t errlen);

#endif
