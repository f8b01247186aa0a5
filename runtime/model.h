// model.h — a model file opened for use: configuration, tokenizer and tensor views into the
// file's bytes (mapped, or copied once into huge pages: EmxLoad). Nothing here is mutable after
// emx_model_open returns, so any number of states (sequences, agents, threads) can share one
// EmxModel.
#ifndef ENTROPIX_MODEL_H
#define ENTROPIX_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "base/model_format.h"
#include "tokenizer/tokenizer_data.h"

typedef struct {
    uint32_t dtype;     // enum emx_dtype
    uint64_t rows, cols;// [rows, cols] row-major; weight matrices are [out, in]
    const void *data;   // q8/q4: quants [rows][...] followed by f16 scales [rows][cols/32]
} EmxTensor;

typedef struct {
    EmxTensor attn_norm;       // [dim] f32
    EmxTensor wq;              // [n_heads*head_dim, dim]
    EmxTensor wk, wv;          // [n_kv_heads*head_dim, dim]
    EmxTensor wo;              // [dim, n_heads*head_dim]
    EmxTensor q_norm, k_norm;  // [head_dim] f32 (cfg.qk_norm), else data == NULL
    EmxTensor ffn_norm;        // [dim] f32
    EmxTensor w_gate, w_up;    // [hidden_dim, dim]
    EmxTensor w_down;          // [dim, hidden_dim]
    EmxTensor bq, bk, bv;      // [q_dim], [kv_dim], [kv_dim] f32 (ext.qkv_bias), else data == NULL
    EmxTensor post_attn_norm, post_ffn_norm;  // [dim] f32 (ext.sandwich_norms), else data == NULL
} EmxLayer;

typedef struct {
    EmxConfig cfg;
    EmxConfigExt ext;            // version 2's fields; a version-1 file: emx_config_ext_default()
    uint32_t version;            // the file's format version (1 or 2)
    TokenizerData tok;           // views into the file
    EmxTensor tok_embeddings;    // [vocab, dim]
    EmxTensor norm;              // [dim] f32
    EmxTensor output;            // [vocab, dim]; equals tok_embeddings when cfg.tied_output
    EmxTensor rope_freq_factors; // [head_dim/2] f32 when cfg.rope_freq_factors, else data == NULL
    EmxLayer *layers;            // [n_layers]
    void *map;                   // the file's bytes: mapped, or a private copy (copied)
    size_t map_size;             // the file's size
    size_t map_len;              // the bytes mapped at map (a copy: rounded up to its pages)
    int copied;                  // 1: a copy in anonymous memory (huge pages where granted)
} EmxModel;

// Where the weights live once opened (the same bytes, the same results either way).
typedef enum {
    EMX_LOAD_AUTO,  // files >= 64 MiB copied into 2 MiB pages where the kernel grants them
                    // (transparent huge pages not off) and the file is at most half the memory
                    // available (emx_mem_available), else mapped; mapped if the copy's allocation fails
    EMX_LOAD_MMAP,  // the file mapped: pages shared with other processes, read as first touched
    EMX_LOAD_COPY,  // copied whatever the size (mapped if memory runs short)
} EmxLoad;

// Opens and validates a model file (header, config, every tensor's name, dtype, shape, offset
// and size, the tokenizer section). Returns 0, or -1 with a one-line reason naming the file,
// the field and the value in err. emx_model_open loads as EMX_LOAD_AUTO.
int emx_model_open(EmxModel *m, const char *path, char *err, size_t errlen);
int emx_model_open_load(EmxModel *m, const char *path, EmxLoad load, char *err, size_t errlen);
// Bytes of a copied model's weights that the kernel placed in huge pages (Linux; 0 if mapped or
// unknown).
uint64_t emx_model_huge_bytes(const EmxModel *m);
// Where the weights are, in words ("a copy in memory, 138 of 138 MiB in 2 MiB pages"); returns buf.
const char *emx_model_memory_text(const EmxModel *m, char *buf, size_t cap);
void emx_model_close(EmxModel *m);

// Checks the file at path (runtime/model_verify.h: the integrity record): opens it as the runtime does (every structural check), then, when
// it carries a record, recomputes the hashes. Returns 0 when they match ("checksum <hex>" in
// msg), 1 when the file is sound but has no record (msg says so), -1 with a one-line reason
// naming the file and the first section that differs (or the loader's error) in msg.
int emx_model_verify(const char *path, char *msg, size_t msglen);

// Bytes of weights a single-token decode step reads (every matrix once, the classifier once).
uint64_t emx_model_weight_bytes_per_token(const EmxModel *m);

#endif
