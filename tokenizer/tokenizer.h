// tokenizer.h — the runtime tokenizer: text -> token ids (encode) and ids -> bytes (decode),
// built once from a TokenizerData (usually a view into the mmapped model file).
//
// Two kinds (tokenizer_data.h):
//   byte-level BPE (Qwen2/3, Llama 3, GPT-2, SmolLM2): added/special tokens are matched first
//     (longest exact, case-sensitive match anywhere in the text, with EMX_ENC_SPECIAL); the rest
//     is NFC-normalised if the tokenizer wants it, split by the model's pre-tokeniser regex
//     (HuggingFace semantics, run with PCRE2 in UTF+UCP mode), and each piece is merged by rank
//     with a heap (O(n log n) in the piece length) — same results as HF `tokenizers`.
//   SPM (llama2.c, Llama 2): spaces become U+2581, a dummy prefix space is added when the
//     tokenizer says so, each code point becomes its piece or its <0xNN> byte pieces, then the
//     adjacent pair whose concatenation has the best score is merged (leftmost on ties) until
//     none is left — llama2.c run.c's algorithm, with a heap instead of its quadratic scan.
//
// Invalid UTF-8 in encode input: each maximal invalid subpart (as Python's
// bytes.decode("utf-8", "replace") and WHATWG TextDecoder define it) becomes U+FFFD before
// anything else, i.e. the ids are those HF tokenizers gives for the Python-decoded string.
// UTF-8-encoded surrogates (ED A0 80) are invalid: three U+FFFD. NUL bytes are ordinary
// characters (the length is explicit). An empty text gives no ids (plus BOS if asked).
//
// The tokenizer is immutable after emx_tokenizer_new: one tokenizer may be used from several
// threads at once (each call uses its own scratch memory).
#ifndef ENTROPIX_TOKENIZER_H
#define ENTROPIX_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer_data.h"

typedef struct EmxTokenizer EmxTokenizer;

// Builds the lookup tables (hash maps over pieces and merges). `t` must be valid (from
// tokdata_view or a builder) and outlive the tokenizer (its arrays are used in place).
// Returns NULL with a one-line reason in err.
EmxTokenizer *emx_tokenizer_new(const TokenizerData *t, char *err, size_t errlen);
void emx_tokenizer_free(EmxTokenizer *tk);

enum {
    EMX_ENC_BOS = 1,      // prepend bos_id if the tokenizer's flags ask for it (EMX_TOKF_ADD_BOS),
                          // unless the text's first token already is BOS (chat templates that
                          // spell <|begin_of_text|> get exactly one)
    EMX_ENC_SPECIAL = 2,  // match added/special token texts in the input as single tokens
};

// Encodes UTF-8 text (len bytes, NULs allowed). *ids is malloc'd (caller frees; non-NULL even
// when *n_ids is 0). Returns 0, or -1 with err (out of memory only).
int emx_encode(const EmxTokenizer *tk, const char *text, size_t len, int flags, int **ids,
               size_t *n_ids, char *err, size_t errlen);

// Input bytes an encode left out because the vocabulary has no token for them: a byte-level
// vocabulary without that byte (SmolLM2's has none for 0x16, for one), an SPM vocabulary with
// neither its <0xNN> piece nor <unk>. HF tokenizers leaves them out the same way; the ids match
// it, and a caller that wants to tell its user passes an EmxEncodeDrops (the library prints
// nothing). Offsets are into the text as encoded: the input itself unless invalid UTF-8 before
// the byte became U+FFFD or NFC normalisation changed the text before it.
typedef struct {
    size_t n_dropped;     // bytes left out (0: none)
    size_t first_offset;  // offset of the first one
    uint8_t first_byte;   // its value
} EmxEncodeDrops;

// emx_encode, and *drops (if non-NULL) says which input bytes had no token.
int emx_encode_ex(const EmxTokenizer *tk, const char *text, size_t len, int flags, int **ids,
                  size_t *n_ids, EmxEncodeDrops *drops, char *err, size_t errlen);

// The raw bytes token `id` stands for: byte-level alphabet undone ("Ġthe" -> " the"),
// <0xNN> -> that byte, SPM U+2581 -> space, added tokens -> their text, padding rows -> "".
// Copies min(len, cap) bytes to buf and returns len (0 for an id out of range).
size_t emx_token_bytes(const EmxTokenizer *tk, int id, char *buf, size_t cap);
// Pointer to the same bytes (not NUL-terminated) and their length; NULL for an id out of range.
const char *emx_token_bytes_ref(const EmxTokenizer *tk, int id, size_t *len);

int emx_is_stop(const EmxTokenizer *tk, int id);     // ends generation (eos, <|im_end|>, ...)
int emx_is_control(const EmxTokenizer *tk, int id);  // CONTROL/UNUSED: not printed by default
int emx_tokenizer_bos(const EmxTokenizer *tk);       // -1 if none
int emx_tokenizer_n_vocab(const EmxTokenizer *tk);
const TokenizerData *emx_tokenizer_data(const EmxTokenizer *tk);
// Id of an exact token text: an added token ("<|im_start|>", "<think>") or a vocabulary piece
// as spelled in the vocabulary ("Ġthe", "▁the"); -1 if none.
int emx_token_find(const EmxTokenizer *tk, const char *piece_text);

// Streaming detokeniser. Emits only complete, valid UTF-8: a token whose bytes end in an
// incomplete sequence is held back until the following token completes it; bytes that cannot
// be part of a valid sequence become U+FFFD, one per maximal invalid subpart (Python's
// errors="replace"), so the concatenated output of push()... flush() equals
// bytes.decode("utf-8", "replace") of the concatenated token bytes. With skip_control,
// CONTROL and UNUSED tokens produce nothing (HF skip_special_tokens). SPM: the leading space
// of a piece right after BOS is dropped, as llama2.c run.c does.
typedef struct {
    const EmxTokenizer *tk;
    int skip_control;
    int prev_id;              // last pushed id (-1 at start)
    unsigned char pend[4];    // bytes of an incomplete UTF-8 sequence held back
    int n_pend;
} EmxDecoder;

void emx_decoder_init(EmxDecoder *d, const EmxTokenizer *tk, int skip_control);
// Output bytes needed by one push/flush at most: 3 * (max_piece_len + 4) (every byte may
// become a 3-byte U+FFFD). A smaller cap truncates the output (never overflows).
size_t emx_decoder_max_out(const EmxTokenizer *tk);
// Returns the number of bytes written to out (not NUL-terminated).
size_t emx_decoder_push(EmxDecoder *d, int id, char *out, size_t cap);
// Emits what is held back (an incomplete sequence at the end becomes U+FFFD).
size_t emx_decoder_flush(EmxDecoder *d, char *out, size_t cap);
// The whole text of ids[0..n), as a decoder's pushes and its flush give it: malloc'd and
// NUL-terminated, *len bytes. NULL: out of memory.
char *emx_decode_ids(const EmxTokenizer *tk, const int *ids, int n, int skip_control, size_t *len);

#endif
