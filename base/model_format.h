// model_format.h — the on-disk layout of an entropix.c model file (.bin), version 1.
//
// One file runs a model: header, configuration, tokenizer and a tensor directory over data
// aligned for mmap. Everything is little-endian with fixed-width fields; readers copy the
// header out with memcpy (never cast the mapping to a struct pointer) and check every offset
// and size against the file length before touching the data. Full description: docs/model-format.md.
//
//   offset 0                      FileHeader            (EMX_HEADER_BYTES bytes)
//   header.tokenizer_offset       tokenizer section     (tokenizer/tokenizer_data.h, 8-aligned)
//   header.tensor_dir_offset      TensorEntry[n_tensors]
//   each entry.offset             tensor data           (EMX_ALIGN-aligned)
#ifndef ENTROPIX_MODEL_FORMAT_H
#define ENTROPIX_MODEL_FORMAT_H

#include <stdint.h>

#define EMX_MAGIC "EMXMODEL"        // 8 bytes, no terminator stored
#define EMX_VERSION 1u
#define EMX_ALIGN 64u               // tensor data alignment: a cache line and an AVX-512 load
#define EMX_GROUP_SIZE 32u          // weights per quantisation group (one f16 scale each)
#define EMX_NAME_BYTES 48u
#define EMX_MAX_LAYERS 1024u

enum emx_arch { EMX_ARCH_LLAMA = 1, EMX_ARCH_QWEN3 = 2 };

// Which dimensions RoPE rotates together inside a head of size hd.
enum emx_rope_style {
    EMX_ROPE_INTERLEAVED = 0,  // pairs (2i, 2i+1): Meta/llama2.c checkpoints, GGUF "llama"
    EMX_ROPE_HALF = 1,         // pairs (i, i+hd/2): HF checkpoints, GGUF "qwen3" (NEOX)
};

enum emx_chat_template {
    EMX_CHAT_NONE = 0,          // base model: prompt goes in as is
    EMX_CHAT_QWEN3 = 1,         // ChatML with <think> handling
    EMX_CHAT_LLAMA3 = 2,        // <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>
    EMX_CHAT_SMOLLM2 = 3,       // ChatML with SmolLM2's default system prompt
    EMX_CHAT_CHATML = 4,        // plain ChatML
};

// Element types of tensors. Bytes per weight in brackets.
enum emx_dtype {
    EMX_F32 = 0,   // [4]
    EMX_F16 = 1,   // [2]   IEEE half
    EMX_BF16 = 2,  // [2]   top 16 bits of an f32
    EMX_Q8 = 3,    // [34/32] int8 q[rows][cols], then f16 d[rows][cols/32]; w = q*d
    EMX_Q4 = 4,    // [18/32] u8 nib[rows][cols/2], then f16 d[rows][cols/32]; in each group of
                   //         32 weights byte j holds w[j] (low nibble) and w[j+16] (high);
                   //         w = (nibble - 8) * d
    EMX_Q4_1 = 5,  // [20/32] u8 nib[rows][cols/2] packed as EMX_Q4, then f16 d[rows][cols/32], then
                   //         f16 m[rows][cols/32]; w = nibble * d + m (asymmetric: llama.cpp's Q4_1)
    EMX_Q4_1F = 6, // [24/32] u8 nib[rows][cols/2] packed as EMX_Q4, then f32 d[rows][cols/32], then
                   //         f32 m[rows][cols/32]; w = nibble * d + m: q4_1 with f32 scale and min, which
                   //         holds llama.cpp's Q4_K exactly (a 32-weight sub-block's d*sc and -dmin*m
                   //         are f16 x 6-bit products: exact in f32, not in f16)
    EMX_DTYPE_COUNT
};

// Configuration of the network. Everything the forward pass needs besides tensors.
typedef struct {
    uint32_t arch;            // enum emx_arch
    uint32_t dim;             // residual stream width
    uint32_t hidden_dim;      // FFN inner width
    uint32_t n_layers;
    uint32_t n_heads;         // query heads
    uint32_t n_kv_heads;      // key/value heads (GQA: n_heads % n_kv_heads == 0)
    uint32_t head_dim;        // independent of dim/n_heads (Qwen3: 128 with dim 1024, 16 heads)
    uint32_t vocab_size;      // rows of the embedding and the classifier
    uint32_t max_seq_len;     // context the model was trained for
    float norm_eps;           // RMSNorm epsilon
    float rope_theta;
    uint32_t rope_style;      // enum emx_rope_style
    uint32_t rope_freq_factors; // 1: tensor "rope_freq_factors" [head_dim/2] divides each
                              //    frequency (Llama 3.x "llama3" scaling, as GGUF rope_freqs)
    uint32_t qk_norm;         // 1: per-head RMSNorm of q and k before RoPE (Qwen3)
    uint32_t tied_output;     // 1: the classifier is the embedding ("output" tensor absent)
    uint32_t group_size;      // EMX_GROUP_SIZE for quantised tensors
    uint32_t chat_template;   // enum emx_chat_template
    uint32_t reserved[8];     // zero; room for later fields without a version bump, except
                              // the integrity record convert writes (EMX_CHECK_*): readers
                              // that do not know it ignore it
} EmxConfig;

// Integrity record in config.reserved (runtime/model_verify.h, docs/model-format.md): [0] is
// EMX_CHECK_MAGIC when present; then three 64-bit hashes (emx_hash64), low word first: [1..2]
// the header (with reserved[1..6] zero) followed by the tensor directory, [3..4] the tokenizer
// section, [5..6] the tensor data (from the end of the directory to file_bytes). A file whose
// reserved[0] is 0 has no record and is not checked.
#define EMX_CHECK_MAGIC 0x31534b43u  // "CKS1"
#define EMX_CHECK_WORDS 7u           // reserved[0..6]

typedef struct {
    char magic[8];            // EMX_MAGIC
    uint32_t version;         // EMX_VERSION
    uint32_t header_bytes;    // sizeof(FileHeader) as written
    EmxConfig config;
    uint64_t tokenizer_offset;
    uint64_t tokenizer_bytes;
    uint64_t tensor_dir_offset;
    uint32_t n_tensors;
    uint32_t reserved0;
    uint64_t file_bytes;      // total length: a shorter file is truncated
} EmxFileHeader;

typedef struct {
    char name[EMX_NAME_BYTES]; // NUL-padded, e.g. "layers.3.wq"
    uint32_t dtype;           // enum emx_dtype
    uint32_t ndim;            // 1 or 2
    uint64_t shape[2];        // [rows, cols] row-major, weight matrices are [out, in]; 1-D: [n, 1]
    uint64_t offset;          // from the start of the file, multiple of EMX_ALIGN
    uint64_t nbytes;          // exactly emx_tensor_bytes(dtype, rows, cols)
} EmxTensorEntry;

// Tensor names (per layer with the prefix "layers.N."):
//   tok_embeddings [vocab, dim]   norm [dim]   output [vocab, dim] (untied only)
//   rope_freq_factors [head_dim/2] (f32, when config.rope_freq_factors)
//   attn_norm [dim]  wq [n_heads*head_dim, dim]  wk, wv [n_kv_heads*head_dim, dim]
//   wo [dim, n_heads*head_dim]  q_norm, k_norm [head_dim] (qk_norm)  ffn_norm [dim]
//   w_gate, w_up [hidden_dim, dim]  w_down [dim, hidden_dim]
// Norm weights and rope factors are always f32; matrices may be any dtype.

#endif
