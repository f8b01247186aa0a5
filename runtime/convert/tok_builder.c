// tok_builder.c — see tok_builder.h.
#include "runtime/convert/tok_builder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/errmsg.h"
#include "tokenizer/tokenizer_data.h"

int tb_init(TokBuilder *b, uint32_t n_vocab) {
    memset(b, 0, sizeof *b);
    b->n_vocab = n_vocab;
    b->meta.bos_id = b->meta.eos_id = b->meta.pad_id = b->meta.unk_id = -1;
    b->piece_off = calloc(n_vocab ? n_vocab : 1, sizeof *b->piece_off);
    b->piece_len = calloc(n_vocab ? n_vocab : 1, sizeof *b->piece_len);
    b->has_piece = calloc(n_vocab ? n_vocab : 1, 1);
    b->scores = calloc(n_vocab ? n_vocab : 1, sizeof *b->scores);
    b->types = calloc(n_vocab ? n_vocab : 1, 1);
    if (!b->piece_off || !b->piece_len || !b->has_piece || !b->scores || !b->types) {
        tb_free(b);
        return -1;
    }
    return 0;
}

void tb_free(TokBuilder *b) {
    free(b->arena);
    free(b->piece_off);
    free(b->piece_len);
    free(b->has_piece);
    free(b->scores);
    free(b->types);
    free(b->merges);
    strmap_free(&b->by_text);
    memset(b, 0, sizeof *b);
}

int tb_set_piece(TokBuilder *b, uint32_t id, const char *s, size_t len, uint8_t type,
                 float score) {
    if (id >= b->n_vocab) return -1;
    if (b->arena_len + len > b->arena_cap) {
        uint64_t cap = b->arena_cap ? b->arena_cap * 2 : 1 << 16;
        while (cap < b->arena_len + len) cap *= 2;
        char *a = realloc(b->arena, cap);
        if (!a) return -1;
        b->arena = a, b->arena_cap = cap;
    }
    if (len) memcpy(b->arena + b->arena_len, s, len);
    b->piece_off[id] = b->arena_len;
    b->piece_len[id] = (uint32_t)len;
    b->arena_len += len;
    b->has_piece[id] = 1;
    b->types[id] = type;
    b->scores[id] = score;
    return 0;
}

const char *tb_piece(const TokBuilder *b, int32_t id, uint32_t *len) {
    *len = b->piece_len[id];
    return b->arena + b->piece_off[id];
}

static const char *tb_key(const void *ctx, int32_t id, uint32_t *len) {
    return tb_piece(ctx, id, len);
}

int tb_index(TokBuilder *b) {
    strmap_free(&b->by_text);
    if (strmap_init(&b->by_text, b->n_vocab, tb_key, b) != 0) return -1;
    for (uint32_t i = 0; i < b->n_vocab; i++)
        if (b->has_piece[i] && b->types[i] != EMX_TOKT_UNUSED) strmap_put(&b->by_text, (int32_t)i);
    return 0;
}

int32_t tb_find(const TokBuilder *b, const char *s, size_t len) {
    return strmap_get(&b->by_text, s, len);
}

int tb_add_merge(TokBuilder *b, int32_t left, int32_t right) {
    if (b->n_merges == b->cap_merges) {
        uint32_t cap = b->cap_merges ? b->cap_merges * 2 : 4096;
        int32_t *m = realloc(b->merges, (size_t)cap * 2 * sizeof *m);
        if (!m) return -1;
        b->merges = m, b->cap_merges = cap;
    }
    b->merges[2 * b->n_merges] = left;
    b->merges[2 * b->n_merges + 1] = right;
    b->n_merges++;
    return 0;
}

void tb_add_stop(TokBuilder *b, int32_t id) {
    if (id < 0 || (uint32_t)id >= b->n_vocab) return;
    for (uint32_t i = 0; i < b->meta.n_stop; i++)
        if (b->meta.stop_ids[i] == id) return;
    if (b->meta.n_stop < EMX_TOK_MAX_STOP) b->meta.stop_ids[b->meta.n_stop++] = id;
}

void tb_add_known_stops(TokBuilder *b) {
    static const char *const names[] = {"<|im_end|>", "<|eot_id|>", "<|end_of_text|>",
                                        "<|endoftext|>", "<|eom_id|>", "<end_of_turn>"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        int32_t id = tb_find(b, names[k], strlen(names[k]));
        if (id >= 0 && b->types[id] == EMX_TOKT_CONTROL) tb_add_stop(b, id);
    }
}

int tb_finish(TokBuilder *b, TokenizerData *out, char *err, size_t errlen) {
    uint32_t n = b->n_vocab;
    TokenizerData t = b->meta;
    t.n_vocab = n;
    t.n_merges = b->n_merges;
    uint32_t *off = malloc(((size_t)n + 1) * sizeof *off);
    char *bytes = malloc(b->arena_len ? b->arena_len : 1);
    if (!off || !bytes) {
        free(off);
        free(bytes);
        emx_seterr(err, errlen, "tokenizer: out of memory");
        return -1;
    }
    if (b->arena_len > UINT32_MAX) {
        free(off);
        free(bytes);
        emx_seterr(err, errlen, "tokenizer: %llu bytes of pieces, more than 4 GiB",
                 (unsigned long long)b->arena_len);
        return -1;
    }
    // Pieces in id order (the arena holds them in the order they were set).
    uint32_t pos = 0, maxlen = 0;
    for (uint32_t i = 0; i < n; i++) {
        off[i] = pos;
        if (!b->has_piece[i]) {
            b->types[i] = EMX_TOKT_UNUSED;
            b->scores[i] = 0;
            continue;
        }
        uint32_t len = b->piece_len[i];
        memcpy(bytes + pos, b->arena + b->piece_off[i], len);
        pos += len;
        if (len > maxlen) maxlen = len;
    }
    off[n] = pos;
    t.piece_offsets = off;
    t.piece_bytes = bytes;
    t.scores = b->scores;
    t.types = b->types;
    t.merges = b->merges;
    t.max_piece_len = maxlen;
    int rc = tokdata_pack(&t, out, err, errlen);
    free(off);
    free(bytes);
    return rc;
}
