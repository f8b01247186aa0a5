// tokenizer_build.h — builders of a TokenizerData from the formats the converter reads:
// a HuggingFace model directory (tokenizer.json), GGUF metadata (tokenizer.ggml.*, in
// runtime/convert/tokenizer_gguf.h: the runtime opens GGUF files too), and a llama2.c
// tokenizer.bin. Each returns a heap-owned TokenizerData (free it with tokdata_free)
// whose n_vocab equals the model's embedding rows: ids past the tokenizer's last string are
// padding rows (type EMX_TOKT_UNUSED, empty piece).
//
// All return 0, or -1 with a one-line reason in err naming the file and the field
// ("tokenizer.json: model.type = \"WordPiece\" is not supported"). On error *out is left empty
// (safe to tokdata_free).
#ifndef ENTROPIX_TOKENIZER_BUILD_H
#define ENTROPIX_TOKENIZER_BUILD_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/convert/tokenizer_gguf.h"
#include "tokenizer/tokenizer_data.h"

// dir/tokenizer.json (required), dir/tokenizer_config.json and dir/config.json (optional:
// bos/eos ids, add_bos_token; config.json eos_token_id may be an int or an array: all become
// stop ids). n_vocab = embedding rows; 0 means "as many as the tokenizer has".
int tokdata_from_hf_dir(const char *dir, uint32_t n_vocab, TokenizerData *out, char *err,
                        size_t errlen);

// A git checkout without symlink support stores a link as a small text file holding its
// target. The n bytes of `text` are such a "link stub" only when all of them (a trailing
// newline aside) are a relative path of at most TOKDATA_STUB_MAX bytes, without control bytes,
// whose last component is `name`, the stub's own file name ("../../x/tokenizer.json" for
// tokenizer.json). Returns 1 with the path in target (cap bytes), else 0: the file is read as
// JSON, never followed to an absolute path or to a file of another name.
#define TOKDATA_STUB_MAX 255
int tokdata_link_stub(const char *text, size_t n, const char *name, char *target, size_t cap);


// llama2.c tokenizer.bin (i32 max_token_length, then per token: f32 score, i32 len, bytes).
// SPM kind, <unk> 0, <s> 1 (bos), </s> 2 (eos), <0xNN> byte pieces; adds BOS and the dummy
// prefix space as llama2.c run.c does; stop ids are </s> and <s> (run.c's generate() stops
// when the model emits BOS). The file does not record its token count: n_vocab must be the
// model's vocab_size (> 0); a file with fewer tokens is an error.
int tokdata_from_llama2c(const char *tokenizer_bin, uint32_t n_vocab, TokenizerData *out,
                         char *err, size_t errlen);

// tokdata_pack (tokenizer/tokenizer_data.h) packs a builder's output into one owned blob.

#endif
