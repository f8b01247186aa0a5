// tokenizer_gguf.h — the TokenizerData of a GGUF file, from its tokenizer.ggml.* metadata (the
// HuggingFace and llama2.c builders, which only the converter uses, are in
// tools/convert/tokenizer_build.h). Returns a heap-owned TokenizerData (free it with
// tokdata_free) whose n_vocab equals the model's embedding rows: ids past the tokenizer's last
// string are padding rows (type EMX_TOKT_UNUSED, empty piece).
#ifndef ENTROPIX_TOKENIZER_GGUF_H
#define ENTROPIX_TOKENIZER_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/convert/gguf.h"
#include "tokenizer/tokenizer_data.h"

// tokenizer.ggml.* keys of an opened GGUF: model "gpt2" (byte-level BPE) or "llama" (SPM).
// The GGUF carries no normalizer: pre "qwen2" implies Qwen's NFC normalizer, and pre
// "llama-bpe"/"llama3" implies Llama 3's ignore_merges (both as the HF tokenizer.json has them).
// n_vocab 0 = the GGUF token count. Returns 0, or -1 with a one-line reason in err naming the
// field; on error *out is left empty (safe to tokdata_free).
int tokdata_from_gguf(const GGUFFile *g, uint32_t n_vocab, TokenizerData *out, char *err,
                      size_t errlen);

#endif
