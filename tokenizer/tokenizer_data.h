// tokenizer_data.h — the tokenizer as stored in a model file: the contract between the
// converter (which builds it from tokenizer.json, GGUF metadata or a llama2.c tokenizer.bin)
// and the runtime tokenizer (which builds its lookup tables from it at load time).
//
// Serialized form (the model file's tokenizer section), little-endian, every array starting
// at an 8-byte aligned offset from the start of the section so a loader can point into an
// mmapped file without copying:
//   "EMXTOK01"                                  8 bytes
//   u32 kind, pre, flags, n_vocab, n_merges, n_stop, max_piece_len, reserved
//   i32 bos_id, eos_id, pad_id, unk_id
//   i32 stop_ids[EMX_TOK_MAX_STOP]
//   u32 piece_offsets[n_vocab + 1]              (pad to 8)
//   u8  piece_bytes[piece_offsets[n_vocab]]     (pad to 8)
//   f32 scores[n_vocab]                         (pad to 8)
//   u8  types[n_vocab]                          (pad to 8)
//   i32 merges[n_merges][2]
// tokdata_view() validates all of it (offsets monotone and in range, ids in range).
#ifndef ENTROPIX_TOKENIZER_DATA_H
#define ENTROPIX_TOKENIZER_DATA_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define EMX_TOK_MAGIC "EMXTOK01"
#define EMX_TOK_MAX_STOP 8

enum emx_tok_kind {
    EMX_TOK_BPE_BYTELEVEL = 1,  // GPT-2 byte mapping + merges by rank (Qwen, Llama 3, SmolLM2)
    EMX_TOK_SPM = 2,            // SentencePiece-style BPE by score (Llama 2) or by merge rank
                                // (Gemma: EMX_TOKF_MERGE_BY_RANK) + <0xNN> byte fallback
};

// Pre-tokeniser (the split regex applied before BPE).
enum emx_tok_pre {
    EMX_PRE_NONE = 0,    // SPM: no split, spaces become U+2581
    EMX_PRE_GPT2 = 1,    // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
    EMX_PRE_LLAMA3 = 2,  // Llama 3: case-insensitive contractions, \p{N}{1,3}
    EMX_PRE_QWEN2 = 3,   // Qwen2/Qwen3: like Llama 3 but single digits
    EMX_PRE_SMOLLM = 4,  // SmolLM / StarCoder: digits split one by one, then the GPT-2 rules
};

enum emx_tok_flags {
    EMX_TOKF_NFC = 1u << 0,              // NFC-normalise text before splitting (Qwen)
    EMX_TOKF_ADD_BOS = 1u << 1,          // encode() of a prompt starts with bos_id (Llama 2/3)
    EMX_TOKF_ADD_SPACE_PREFIX = 1u << 2, // SPM: prepend a space (llama2.c "dummy prefix")
    EMX_TOKF_IGNORE_MERGES = 1u << 3,    // BPE: a word that is itself a token is emitted whole (Llama 3)
    EMX_TOKF_MERGE_BY_RANK = 1u << 4,    // SPM: pairs merge by the rank of `merges` (HF BPE with
                                         // byte_fallback: Gemma), not by the merged piece's score
};

// Token types, same numbers as GGUF's tokenizer.ggml.token_type.
enum emx_tok_type {
    EMX_TOKT_NORMAL = 1,
    EMX_TOKT_UNKNOWN = 2,
    EMX_TOKT_CONTROL = 3,       // special: matched in prompts as one token, never printed by default
    EMX_TOKT_USER_DEFINED = 4,  // added token that is text (<think>, <tool_call>): matched whole
    EMX_TOKT_UNUSED = 5,        // padding rows of the embedding with no string
    EMX_TOKT_BYTE = 6,          // <0xNN> byte-fallback pieces (SPM)
};

typedef struct {
    uint32_t kind;           // enum emx_tok_kind
    uint32_t pre;            // enum emx_tok_pre
    uint32_t flags;          // enum emx_tok_flags
    uint32_t n_vocab;        // = model vocab_size (padding rows included, type UNUSED, empty piece)
    uint32_t n_merges;       // BPE merges, in rank order
    uint32_t n_stop;         // ids that end generation (<|im_end|>, <|eot_id|>, ...)
    uint32_t max_piece_len;  // longest piece in bytes
    int32_t bos_id, eos_id, pad_id, unk_id;  // -1 when absent
    int32_t stop_ids[EMX_TOK_MAX_STOP];
    const uint32_t *piece_offsets; // [n_vocab + 1] into piece_bytes
    const char *piece_bytes;       // pieces as the vocabulary spells them: byte-level BPE in the
                                   // GPT-2 byte alphabet ("Ġthe"), SPM with U+2581 ("▁the"),
                                   // added tokens as their UTF-8 text ("<|im_start|>")
    const float *scores;           // [n_vocab] SPM merge scores; 0 for BPE
    const uint8_t *types;          // [n_vocab] enum emx_tok_type
    const int32_t *merges;         // [n_merges][2] token ids (left, right) in rank order
    void *owned;                   // non-NULL when the arrays are heap memory to free
} TokenizerData;

// Writes the serialized form; returns bytes written or 0 on a write error.
uint64_t tokdata_write(const TokenizerData *t, FILE *f);
// Points `out` into `blob` (no copy) after validating it; returns 0, or -1 with a one-line
// reason in err ("tokenizer section: piece_offsets[17] = 9000 past piece bytes (812)").
int tokdata_view(const void *blob, uint64_t nbytes, TokenizerData *out, char *err, size_t errlen);
void tokdata_free(TokenizerData *t);  // frees `owned` (no-op for views)

// Serializes `src` (arrays anywhere, e.g. a builder's temporaries) into one heap blob,
// validates it with tokdata_view and points `out` into it (out->owned = the blob).
int tokdata_pack(const TokenizerData *src, TokenizerData *out, char *err, size_t errlen);

#endif
