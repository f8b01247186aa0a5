// tok_builder.h — scratch state shared by the three TokenizerData builders (HF, GGUF,
// llama2.c): pieces set by id in any order, merges appended in rank order, then packed into
// one owned TokenizerData.
#ifndef ENTROPIX_TOK_BUILDER_H
#define ENTROPIX_TOK_BUILDER_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tok_hash.h"
#include "tokenizer/tokenizer_data.h"

typedef struct {
    TokenizerData meta;      // kind, pre, flags, special ids, stop ids (arrays unused)
    uint32_t n_vocab;
    char *arena;             // piece bytes, in the order they were set
    uint64_t arena_len, arena_cap;
    uint64_t *piece_off;     // [n_vocab] into arena
    uint32_t *piece_len;     // [n_vocab]
    uint8_t *has_piece;      // [n_vocab]
    float *scores;           // [n_vocab]
    uint8_t *types;          // [n_vocab]
    int32_t *merges;         // [n_merges][2]
    uint32_t n_merges, cap_merges;
    StrMap by_text;          // piece text -> id (built by tb_index)
} TokBuilder;

int tb_init(TokBuilder *b, uint32_t n_vocab);
void tb_free(TokBuilder *b);
// Sets piece `id` (copied). Returns -1 on out of memory.
int tb_set_piece(TokBuilder *b, uint32_t id, const char *s, size_t len, uint8_t type, float score);
const char *tb_piece(const TokBuilder *b, int32_t id, uint32_t *len);
// Index of all pieces set so far by text (first id wins on duplicates). -1 on out of memory.
int tb_index(TokBuilder *b);
int32_t tb_find(const TokBuilder *b, const char *s, size_t len);
int tb_add_merge(TokBuilder *b, int32_t left, int32_t right);
void tb_add_stop(TokBuilder *b, int32_t id);  // ignores -1, duplicates and overflow past 8
// Adds as stop ids the CONTROL tokens whose text ends a turn or a document (<|im_end|>,
// <|eot_id|>, <|end_of_text|>, <|endoftext|>, <|eom_id|>, Gemma's <end_of_turn>).
void tb_add_known_stops(TokBuilder *b);
// Pieces never set become UNUSED rows with an empty piece; packs into `out`.
int tb_finish(TokBuilder *b, TokenizerData *out, char *err, size_t errlen);

#endif
