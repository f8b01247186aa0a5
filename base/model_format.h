// model_format.h — the on-disk layout of an entropix.c model file (.bin), versions 1 and 2.
//
// One file runs a model: header, configuration, tokenizer and a tensor directory over data
// aligned for mmap. Everything is little-endian with fixed-width fields; readers copy the
// header out with memcpy (never cast the mapping to a struct pointer) and check every offset
// and size against the file length before touching the data. Full description: docs/model-format.md.
//
//   offset 0                      FileHeader            (160 bytes)
//   160                           EmxConfigExt          (version 2 only: 192 bytes)
//   header.tokenizer_offset       tokenizer section     (tokenizer/tokenizer_data.h, 8-aligned)
//   header.tensor_dir_offset      TensorEntry[n_tensors]
//   each entry.offset             tensor data           (EMX_ALIGN-aligned)
#ifndef ENTROPIX_MODEL_FORMAT_H
#define ENTROPIX_MODEL_FORMAT_H

#include <stdint.h>
#include <string.h>

#define EMX_MAGIC "EMXMODEL"        // 8 bytes, no terminator stored
#define EMX_VERSION 2u                // the newest version written; 1 is still read
#define EMX_VERSION_1 1u              // no EmxConfigExt: every field of it at its default
#define EMX_ALIGN 64u               // tensor data alignment: a cache line and an AVX-512 load
#define EMX_GROUP_SIZE 32u          // weights per quantisation group (one f16 scale each)
#define EMX_NAME_BYTES 48u
#define EMX_MAX_LAYERS 1024u

enum emx_arch { EMX_ARCH_LLAMA = 1, EMX_ARCH_QWEN3 = 2, EMX_ARCH_QWEN2 = 3, EMX_ARCH_GEMMA3 = 4 };

// The FFN's gate activation: h = act(W_gate x) * (W_up x).
enum emx_ffn_act {
    EMX_ACT_SILU = 0,       // SwiGLU: silu(z) = z / (1 + e^-z)
    EMX_ACT_GELU_TANH = 1,  // GeGLU (Gemma): 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3)))
};

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
    EMX_CHAT_QWEN25 = 5,        // ChatML with Qwen2.5's default system prompt
    EMX_CHAT_GEMMA3 = 6,        // <bos><start_of_turn>user\n...<end_of_turn>\n, system folded into the first user turn
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

// Host code, and also device code where nvcc compiles a header (the kernels size whole matrices).
#ifdef __CUDACC__
#define EMX_HOST_DEVICE __host__ __device__
#else
#define EMX_HOST_DEVICE
#endif

// Bytes a [rows, cols] tensor of this dtype occupies, in the file and in the CUDA backend's device
// layout alike (kernels/weights.h repacks q4_1's scales but keeps the count); 0 if cols does not
// fit the dtype (quantised types need cols % EMX_GROUP_SIZE == 0), the dtype is unknown, or
// rows * cols overflows.
EMX_HOST_DEVICE static inline uint64_t emx_tensor_bytes(uint32_t dtype, uint64_t rows, uint64_t cols) {
    const uint64_t n = rows * cols;
    if (rows != 0 && n / rows != cols) return 0;  // overflow
    const int grouped = cols % EMX_GROUP_SIZE == 0;
    switch (dtype) {
    case EMX_F32: return n * 4;
    case EMX_F16:
    case EMX_BF16: return n * 2;
    case EMX_Q8: return grouped ? n + n / EMX_GROUP_SIZE * 2 : 0;
    case EMX_Q4: return grouped ? n / 2 + n / EMX_GROUP_SIZE * 2 : 0;
    case EMX_Q4_1: return grouped ? n / 2 + n / EMX_GROUP_SIZE * 4 : 0;            // nibbles, d, m
    case EMX_Q4_1F: return grouped ? n / 2 + n / EMX_GROUP_SIZE * 8 : 0;           // nibbles, f32 d, f32 m
    default: return 0;
    }
}

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
// reserved[0..6] are all 0 has no record and is not checked; any other value of reserved[0]
// with a non-zero word is a damaged record, refused.
#define EMX_CHECK_MAGIC 0x31534b43u  // "CKS1"
#define EMX_CHECK_WORDS 7u           // reserved[0..6]

// Version 2's architecture fields, stored right after the 160-byte header (header_bytes = 352).
// A version-1 file has none of them: emx_config_ext_default's values, which describe every
// version-1 model exactly. The converter writes version 1 whenever every field is at its
// default, so files of the older architectures stay readable by older builds.
typedef struct {
    uint32_t qkv_bias;          // 1: f32 tensors layers.N.bq [q], bk, bv [kv] added after Wq, Wk, Wv (Qwen2)
    uint32_t sandwich_norms;    // 1: layers.N.post_attn_norm, post_ffn_norm [dim] normalise each block's
                                //    output before the residual add (Gemma 3: four norms a layer)
    uint32_t ffn_act;           // enum emx_ffn_act
    float embed_scale;          // embedding rows are multiplied by it (1: none; Gemma: f32(sqrt(dim)))
    float attn_scale;           // scores are q·k * attn_scale; 0: q·k / sqrt(head_dim) (Gemma 3:
                                //    query_pre_attn_scalar^-0.5)
    uint32_t sliding_window;    // 0: none; else a local layer's query at p sees keys p-window+1 .. p
    float rope_theta_local;     // RoPE base of the local layers (0: rope_theta)
    float rope_linear_global;   // linear RoPE scaling of the other (global) layers: positions / factor
                                //    (1: none; Gemma 3 4B+: 8)
    uint32_t local_layers[EMX_MAX_LAYERS / 32];  // bit l % 32 of word l / 32: layer l is local
    uint32_t reserved[8];       // zero
} EmxConfigExt;

#define EMX_HEADER_V1_BYTES 160u
#define EMX_HEADER_V2_BYTES (160u + (unsigned)sizeof(EmxConfigExt))

// The version-1 values of EmxConfigExt: nothing beyond a v1 configuration.
static inline EmxConfigExt emx_config_ext_default(void) {
    EmxConfigExt e;
    memset(&e, 0, sizeof e);  // (not `= {0}`: the CUDA sources include this as C++)
    e.embed_scale = 1.0f;
    e.rope_linear_global = 1.0f;
    return e;
}

// 1 when layer l of a model with this extension attends over a sliding window.
static inline int emx_layer_is_local(const EmxConfigExt *e, uint32_t l) {
    return e->sliding_window > 0 && l < EMX_MAX_LAYERS && (e->local_layers[l / 32] >> (l % 32) & 1u);
}

typedef struct {
    char magic[8];            // EMX_MAGIC
    uint32_t version;         // 1 or 2 (EMX_VERSION)
    uint32_t header_bytes;    // version 1: 160; version 2: 160 + sizeof(EmxConfigExt), which follows
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
//   bq [n_heads*head_dim], bk, bv [n_kv_heads*head_dim] (ext.qkv_bias)
//   post_attn_norm, post_ffn_norm [dim] (ext.sandwich_norms)
// Norm weights and rope factors are always f32; matrices may be any dtype.

#endif
