// tok_spm.c — SentencePiece-style BPE as llama2.c run.c's encode() does it: spaces become
// U+2581 ("▁"), an optional dummy prefix "▁", every code point becomes its piece (or, when the
// vocabulary lacks it, one <0xNN> piece per byte), then the adjacent pair whose concatenated
// piece exists with the highest score is merged (leftmost on ties), until no pair merges.
// With EMX_TOKF_MERGE_BY_RANK the pair with the lowest merge rank merges instead: HF
// tokenizers' BPE with byte_fallback (Gemma), whose text between added tokens is one word.
// run.c rescans all pairs after every merge (quadratic); a heap gives the same merges in
// O(n log n).
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_utf8.h"
#include "tokenizer/tokenizer_internal.h"

// Orders floats so that a HIGHER score gives a LOWER prio (the heap is a min-heap).
static uint32_t score_prio(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);  // ascending with f
    return ~u;
}

static const char *piece_of(const EmxTokenizer *tk, int32_t id, uint32_t *len) {
    *len = tk->td.piece_offsets[id + 1] - tk->td.piece_offsets[id];
    return tk->td.piece_bytes + tk->td.piece_offsets[id];
}

static int push_pair(const EmxTokenizer *tk, EncScratch *s, int32_t pos, int initial) {
    int32_t nx = s->sym_next[pos];
    if (nx < 0) return 0;
    int32_t a = s->sym_id[pos], b = s->sym_id[nx];
    if (a < 0 || b < 0) return 0;
    uint32_t la, lb;
    const char *pa = piece_of(tk, a, &la), *pb = piece_of(tk, b, &lb);
    memcpy(s->cat, pa, la);
    memcpy(s->cat + la, pb, lb);
    int32_t m = strmap_get(&tk->vocab, s->cat, la + lb);
    if (m < 0) return 0;
    MergeCand c = merge_cand(score_prio(tk->td.scores[m]), pos, a, b, m);
    return initial ? enc_heap_append(s, c) : enc_heap_push(s, c);
}

int spm_encode_segment(const EmxTokenizer *tk, EncScratch *s, const char *text, size_t n,
                       int add_prefix, IdVec *out) {
    if (n == 0) return 0;
    if (!s->cat) {
        s->cat = malloc(2 * (size_t)tk->td.max_piece_len + 8);
        if (!s->cat) return -1;
    }
    // Upper bound of symbols: one per byte, plus the prefix.
    if (n + 1 > INT32_MAX / 2 || enc_scratch_reserve(s, n + 1) != 0) return -1;
    size_t ns = 0;
    const char *space = "\xE2\x96\x81";
    int32_t space_id = strmap_get(&tk->vocab, space, 3);
    if (add_prefix) {
        // A "▁" missing from the vocabulary falls back to its bytes like any other character.
        if (space_id >= 0) s->sym_id[ns++] = space_id;
        else for (int k = 0; k < 3; k++) s->sym_id[ns++] = tk->byte_id[(uint8_t)space[k]];
    }
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int l = tok_utf8_next((const uint8_t *)text + i, n - i, &cp);
        if (l <= 0) l = 1;  // cannot happen on sanitised text
        int32_t id = text[i] == ' ' ? space_id : strmap_get(&tk->vocab, text + i, (size_t)l);
        if (id >= 0) {
            s->sym_id[ns++] = id;
        } else {
            const char *bytes = text[i] == ' ' ? space : text + i;
            int nb = text[i] == ' ' ? 3 : l;
            if (ns + (size_t)nb > s->cap && enc_scratch_reserve(s, ns + (size_t)nb + n - i) != 0)
                return -1;
            for (int k = 0; k < nb; k++) {
                s->sym_id[ns] = tk->byte_id[(uint8_t)bytes[k]];  // -1: no <0xNN> piece and no <unk>
                if (s->sym_id[ns++] < 0) enc_note_drop(s, text + i + (text[i] == ' ' ? 0 : k));
            }
        }
        i += (size_t)l;
    }
    // HF BPE with byte_fallback (Gemma) merges by rank, lowest first, as byte-level BPE does
    EncPairFn rule = (tk->td.flags & EMX_TOKF_MERGE_BY_RANK) ? bpe_push_pair_by_rank : push_pair;
    if (enc_merge_symbols(tk, s, ns, rule) != 0) return -1;
    for (int32_t i = ns ? 0 : -1; i >= 0; i = s->sym_next[i])
        if (s->sym_id[i] >= 0 && idvec_push(out, s->sym_id[i]) != 0) return -1;
    return 0;
}
