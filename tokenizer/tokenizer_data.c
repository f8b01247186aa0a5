// tokenizer_data.c — the tokenizer section of a model file: writing it, validating and viewing
// it in place (no copy), and packing builder output into one owned blob.
#include "tokenizer/tokenizer_data.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "base/errmsg.h"

// Fixed part: magic, 8 u32, 4 i32, stop ids.
#define TOK_HEADER_BYTES (8 + 8 * 4 + 4 * 4 + EMX_TOK_MAX_STOP * 4)


static uint64_t align8(uint64_t x) { return (x + 7) & ~(uint64_t)7; }

// Offsets of each array inside the section, computed from the counts alone (so writer and
// reader cannot disagree). All in u64 so hostile counts cannot wrap.
typedef struct {
    uint64_t offsets, bytes, scores, types, merges, end;
} TokLayout;

static TokLayout tok_layout(uint64_t n_vocab, uint64_t n_piece_bytes, uint64_t n_merges) {
    TokLayout l;
    l.offsets = align8(TOK_HEADER_BYTES);
    l.bytes = align8(l.offsets + (n_vocab + 1) * 4);
    l.scores = align8(l.bytes + n_piece_bytes);
    l.types = align8(l.scores + n_vocab * 4);
    l.merges = align8(l.types + n_vocab);
    l.end = l.merges + n_merges * 8;
    return l;
}

static void put_u32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }  // host is little-endian

// Serializes t into a fresh heap buffer of *n bytes (8-byte aligned arrays, zero padding).
static uint8_t *tok_serialize(const TokenizerData *t, uint64_t *n) {
    uint64_t npb = t->piece_offsets[t->n_vocab];
    TokLayout l = tok_layout(t->n_vocab, npb, t->n_merges);
    uint8_t *b = calloc(1, l.end ? l.end : 1);
    if (!b) return NULL;
    memcpy(b, EMX_TOK_MAGIC, 8);
    uint32_t hdr[8] = {t->kind, t->pre, t->flags, t->n_vocab, t->n_merges, t->n_stop,
                       t->max_piece_len, 0};
    for (int i = 0; i < 8; i++) put_u32(b + 8 + 4 * i, hdr[i]);
    int32_t ids[4] = {t->bos_id, t->eos_id, t->pad_id, t->unk_id};
    memcpy(b + 40, ids, 16);
    int32_t stops[EMX_TOK_MAX_STOP];
    for (int i = 0; i < EMX_TOK_MAX_STOP; i++)
        stops[i] = (uint32_t)i < t->n_stop ? t->stop_ids[i] : -1;
    memcpy(b + 56, stops, sizeof stops);
    memcpy(b + l.offsets, t->piece_offsets, ((uint64_t)t->n_vocab + 1) * 4);
    if (npb) memcpy(b + l.bytes, t->piece_bytes, npb);
    if (t->scores) memcpy(b + l.scores, t->scores, (uint64_t)t->n_vocab * 4);
    memcpy(b + l.types, t->types, t->n_vocab);
    if (t->n_merges) memcpy(b + l.merges, t->merges, (uint64_t)t->n_merges * 8);
    *n = l.end;
    return b;
}

uint64_t tokdata_write(const TokenizerData *t, FILE *f) {
    uint64_t n = 0;
    uint8_t *b = tok_serialize(t, &n);
    if (!b) return 0;
    size_t w = fwrite(b, 1, n, f);
    free(b);
    return w == n ? n : 0;
}

// The fixed header into *t (counts, ids, stop ids), each field checked against its range.
static int read_header(const uint8_t *b, TokenizerData *t, char *err, size_t errlen) {
    uint32_t hdr[8];
    memcpy(hdr, b + 8, sizeof hdr);
    t->kind = hdr[0], t->pre = hdr[1], t->flags = hdr[2], t->n_vocab = hdr[3];
    t->n_merges = hdr[4], t->n_stop = hdr[5], t->max_piece_len = hdr[6];
    int32_t ids[4];
    memcpy(ids, b + 40, 16);
    t->bos_id = ids[0], t->eos_id = ids[1], t->pad_id = ids[2], t->unk_id = ids[3];
    memcpy(t->stop_ids, b + 56, sizeof t->stop_ids);
    if (t->kind != EMX_TOK_BPE_BYTELEVEL && t->kind != EMX_TOK_SPM) {
        emx_seterr(err, errlen, "tokenizer section: kind = %u is not a known tokenizer kind", t->kind);
        return -1;
    }
    if (t->pre > EMX_PRE_SMOLLM) {
        emx_seterr(err, errlen, "tokenizer section: pre = %u is not a known pre-tokeniser", t->pre);
        return -1;
    }
    uint32_t known = EMX_TOKF_NFC | EMX_TOKF_ADD_BOS | EMX_TOKF_ADD_SPACE_PREFIX |
                     EMX_TOKF_IGNORE_MERGES | EMX_TOKF_MERGE_BY_RANK;
    if (t->flags & ~known) {
        emx_seterr(err, errlen, "tokenizer section: flags = 0x%x has unknown bits", t->flags);
        return -1;
    }
    if (t->n_vocab == 0 || t->n_vocab > (1u << 30)) {
        emx_seterr(err, errlen, "tokenizer section: n_vocab = %u out of range", t->n_vocab);
        return -1;
    }
    if (t->n_stop > EMX_TOK_MAX_STOP) {
        emx_seterr(err, errlen, "tokenizer section: n_stop = %u > %d", t->n_stop, EMX_TOK_MAX_STOP);
        return -1;
    }
    const char *idname[4] = {"bos_id", "eos_id", "pad_id", "unk_id"};
    for (int i = 0; i < 4; i++) {
        if (ids[i] < -1 || ids[i] >= (int64_t)t->n_vocab) {
            emx_seterr(err, errlen, "tokenizer section: %s = %d out of range (n_vocab %u)", idname[i],
                   ids[i], t->n_vocab);
            return -1;
        }
    }
    for (uint32_t i = 0; i < t->n_stop; i++) {
        if (t->stop_ids[i] < 0 || t->stop_ids[i] >= (int64_t)t->n_vocab) {
            emx_seterr(err, errlen, "tokenizer section: stop_ids[%u] = %d out of range (n_vocab %u)",
                   i, t->stop_ids[i], t->n_vocab);
            return -1;
        }
    }
    return 0;
}

// piece_offsets: they start at 0, never decrease, stay inside the piece bytes, and the longest
// piece is max_piece_len long; *l gets the whole section's layout, which must fit in nbytes.
static int check_offsets(const uint8_t *b, uint64_t nbytes, const TokenizerData *t, TokLayout *l, char *err,
                         size_t errlen) {
    // Offsets first (their array position depends on n_vocab only), then the rest.
    TokLayout l0 = tok_layout(t->n_vocab, 0, 0);
    if (l0.bytes > nbytes) {
        emx_seterr(err, errlen,
               "tokenizer section: truncated: piece_offsets[%u] end at %llu, section is %llu "
               "bytes",
               t->n_vocab + 1, (unsigned long long)l0.bytes, (unsigned long long)nbytes);
        return -1;
    }
    const uint32_t *off = (const uint32_t *)(b + l0.offsets);
    if (off[0] != 0) {
        emx_seterr(err, errlen, "tokenizer section: piece_offsets[0] = %u, expected 0", off[0]);
        return -1;
    }
    uint64_t npb = off[t->n_vocab];
    *l = tok_layout(t->n_vocab, npb, t->n_merges);
    if (l->end > nbytes) {
        emx_seterr(err, errlen,
               "tokenizer section: truncated or piece_offsets[%u] = %llu too large: needs %llu "
               "bytes, section is %llu",
               t->n_vocab, (unsigned long long)npb, (unsigned long long)l->end,
               (unsigned long long)nbytes);
        return -1;
    }
    uint32_t longest = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        if (off[i + 1] < off[i] || off[i + 1] > npb) {
            emx_seterr(err, errlen,
                   "tokenizer section: piece_offsets[%u] = %u not monotone / past piece bytes "
                   "(%llu)",
                   i + 1, off[i + 1], (unsigned long long)npb);
            return -1;
        }
        if (off[i + 1] - off[i] > off[longest + 1] - off[longest]) longest = i;
    }
    // Buffers are sized by max_piece_len (the decoder's output, SPM's pair buffer, the added-
    // token scan): it must be the longest piece itself, not merely a bound, or a crafted file
    // makes a load allocate gigabytes and every prompt scan that many lengths.
    if (t->max_piece_len != off[longest + 1] - off[longest]) {
        emx_seterr(err, errlen, "tokenizer section: max_piece_len = %u but the longest piece (id %u) is %u bytes",
                   t->max_piece_len, longest, off[longest + 1] - off[longest]);
        return -1;
    }
    return 0;
}

// Every token type known and every merge a pair of ids below n_vocab.
static int check_arrays(const uint8_t *types, const int32_t *merges, const TokenizerData *t, char *err,
                        size_t errlen) {
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        if (types[i] < EMX_TOKT_NORMAL || types[i] > EMX_TOKT_BYTE) {
            emx_seterr(err, errlen, "tokenizer section: types[%u] = %u is not a token type", i,
                   types[i]);
            return -1;
        }
    }
    for (uint64_t i = 0; i < 2 * (uint64_t)t->n_merges; i++) {
        if (merges[i] < 0 || merges[i] >= (int64_t)t->n_vocab) {
            emx_seterr(err, errlen, "tokenizer section: merges[%llu][%d] = %d out of range (n_vocab %u)",
                   (unsigned long long)(i / 2), (int)(i % 2), merges[i], t->n_vocab);
            return -1;
        }
    }
    return 0;
}

int tokdata_view(const void *blob, uint64_t nbytes, TokenizerData *out, char *err,
                 size_t errlen) {
    const uint8_t *b = blob;
    memset(out, 0, sizeof *out);
    if ((uintptr_t)b % 8) {
        emx_seterr(err, errlen, "tokenizer section: not 8-byte aligned in memory");
        return -1;
    }
    if (nbytes < TOK_HEADER_BYTES) {
        emx_seterr(err, errlen, "tokenizer section: %llu bytes, shorter than its %d-byte header",
               (unsigned long long)nbytes, TOK_HEADER_BYTES);
        return -1;
    }
    if (memcmp(b, EMX_TOK_MAGIC, 8) != 0) {
        emx_seterr(err, errlen, "tokenizer section: bad magic (expected \"%s\")", EMX_TOK_MAGIC);
        return -1;
    }
    TokenizerData t = {0};
    TokLayout l;
    if (read_header(b, &t, err, errlen) || check_offsets(b, nbytes, &t, &l, err, errlen)) return -1;
    const uint8_t *types = b + l.types;
    const int32_t *merges = (const int32_t *)(b + l.merges);
    if (check_arrays(types, merges, &t, err, errlen)) return -1;
    t.piece_offsets = (const uint32_t *)(b + l.offsets);
    t.piece_bytes = (const char *)(b + l.bytes);
    t.scores = (const float *)(b + l.scores);
    t.types = types;
    t.merges = merges;
    t.owned = NULL;
    *out = t;
    return 0;
}

void tokdata_free(TokenizerData *t) {
    if (!t) return;
    free(t->owned);
    memset(t, 0, sizeof *t);
}

int tokdata_pack(const TokenizerData *src, TokenizerData *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    uint64_t n = 0;
    uint8_t *b = tok_serialize(src, &n);
    if (!b) {
        emx_seterr(err, errlen, "tokenizer: out of memory packing %u pieces", src->n_vocab);
        return -1;
    }
    if (tokdata_view(b, n, out, err, errlen) != 0) {
        free(b);
        return -1;
    }
    out->owned = b;
    return 0;
}
