// tokenizer_internal.h — the runtime tokenizer's tables, shared by tokenizer.c (construction,
// lookups, encode's dispatch), tok_bpe.c, tok_spm.c (the two encoders, declared below; the merge
// loop they share is tok_merge.c), tok_nfc.c and tok_decoder.c.
#ifndef ENTROPIX_TOKENIZER_INTERNAL_H
#define ENTROPIX_TOKENIZER_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tok_hash.h"
#include "tokenizer/tok_merge.h"
#include "tokenizer/tokenizer.h"

struct EmxTokenizer {
    TokenizerData td;          // copy of the header; arrays point into the caller's data
    uint32_t n_vocab;
    // Raw bytes of every token (what it decodes to), [n_vocab + 1] offsets into raw.
    uint32_t *raw_off;
    char *raw;
    // BPE: raw bytes -> id of the model-vocabulary tokens (NORMAL/BYTE); SPM: spelled piece
    // ("▁the") -> id of NORMAL/USER_DEFINED pieces.
    StrMap vocab;
    // Added tokens (CONTROL/USER_DEFINED with text) -> id, matched in text with EMX_ENC_SPECIAL.
    StrMap special;
    uint8_t special_first[256];  // 1 if some added token starts with this byte
    uint32_t special_lens[64];   // distinct added-token lengths, longest first
    int n_special_lens;
    PairMap pairs;               // BPE: (left, right) -> (rank, merged)
    int32_t byte_id[256];        // BPE: token of the single raw byte; SPM: its <0xNN> piece
    uint32_t max_raw_len;
    uint8_t *nfc_safe;           // [0x10000 / 8] NFC tokenizers: BMP code points that NFC
                                 // leaves alone in any context (see tok_nfc.c)
    pcre2_code *re;              // BPE pre-tokeniser split regex
    int re_jit;                  // JIT compiled
    pcre2_match_context *mctx;   // no match/depth limits: long whitespace runs backtrack
                                 // linearly, and must not hit PCRE2's default 10M limit
};

// NFC (tok_nfc.c): tok_nfc_init builds tk->nfc_safe.
int tok_nfc_init(EmxTokenizer *tk);
// NFC of text[0..n): *out = NULL when the text is already NFC, else a malloc'd copy. -1 on
// out of memory.
int tok_nfc_normalize(const EmxTokenizer *tk, const char *text, size_t n, char **out,
                      size_t *out_len);

// Splits one text segment (valid UTF-8, already normalised) with the pre-tokeniser and BPEs
// each piece. Returns -1 on out of memory / regex failure (with err).
int bpe_encode_segment(const EmxTokenizer *tk, EncScratch *s, const char *text, size_t n,
                       IdVec *out, char *err, size_t errlen);
// The merge rule of BPE (an EncPairFn for enc_merge_symbols): the pair at pos and its right
// neighbour go on the heap when the merge table has them, their merge rank the priority. Also the
// rule of SentencePiece-style vocabularies that merge by rank (EMX_TOKF_MERGE_BY_RANK: Gemma).
int bpe_push_pair_by_rank(const EmxTokenizer *tk, EncScratch *s, int32_t pos, int initial);
// SentencePiece-style encode of one segment (valid UTF-8): spaces -> U+2581, optional
// dummy prefix, code point pieces or byte fallback, best-score merges.
int spm_encode_segment(const EmxTokenizer *tk, EncScratch *s, const char *text, size_t n,
                       int add_prefix, IdVec *out);

#endif
