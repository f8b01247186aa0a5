// tok_bpe.c — byte-level BPE: the pre-tokeniser split (PCRE2) and the merges by rank (the merge
// loop itself, shared with SentencePiece, is tok_merge.c).
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer/tok_utf8.h"
#include "base/errmsg.h"
#include "tokenizer/tokenizer_internal.h"

int bpe_push_pair_by_rank(const EmxTokenizer *tk, EncScratch *s, int32_t pos, int initial) {
    int32_t nx = s->sym_next[pos];
    if (nx < 0) return 0;
    int32_t a = s->sym_id[pos], b = s->sym_id[nx];
    if (a < 0 || b < 0) return 0;
    uint32_t rank;
    int32_t merged;
    if (!pairmap_get(&tk->pairs, a, b, &rank, &merged)) return 0;
    MergeCand c = merge_cand(rank, pos, a, b, merged);
    return initial ? enc_heap_append(s, c) : enc_heap_push(s, c);
}

// Byte-level BPE of one pre-tokenised word (raw bytes). Returns -1 on out of memory.
static int bpe_encode_word(const EmxTokenizer *tk, EncScratch *s, const uint8_t *w, size_t n,
                           IdVec *out) {
    if (n == 0) return 0;
    if (n == 1) {
        if (tk->byte_id[w[0]] >= 0) return idvec_push(out, tk->byte_id[w[0]]);
        enc_note_drop(s, (const char *)w);
        return 0;
    }
    // Words seen before in this text (the cache is small and hot, the vocabulary is not).
    uint32_t h = tok_hash_bytes(w, n);
    size_t first = out->n;
    if (n <= WORDCACHE_MAX_WORD) {
        size_t nc;
        const int32_t *cached = wordcache_get(&s->cache, w, n, h, &nc);
        if (cached) {
            for (size_t i = 0; i < nc; i++)
                if (idvec_push(out, cached[i]) != 0) return -1;
            return 0;
        }
    }
    // Llama 3 (ignore_merges): a word that is itself a token is emitted whole.
    if (tk->td.flags & EMX_TOKF_IGNORE_MERGES) {
        int32_t id = strmap_get_h(&tk->vocab, (const char *)w, n, h);
        if (id >= 0) {
            if (n <= WORDCACHE_MAX_WORD) wordcache_put(&s->cache, w, n, h, &id, 1);
            return idvec_push(out, id);
        }
    }
    if (n > INT32_MAX / 2 || enc_scratch_reserve(s, n) != 0) return -1;
    // A byte the vocabulary lacks gets -1: no pair with it merges, and it is left out of the
    // ids (HF tokenizers' BPE without unk_token does the same), but noted for the caller.
    const size_t dropped_before = s->n_dropped;
    for (size_t i = 0; i < n; i++) {
        s->sym_id[i] = tk->byte_id[w[i]];
        if (s->sym_id[i] < 0) enc_note_drop(s, (const char *)w + i);
    }
    if (enc_merge_symbols(tk, s, n, bpe_push_pair_by_rank) != 0) return -1;
    for (int32_t i = 0; i >= 0; i = s->sym_next[i])
        if (s->sym_id[i] >= 0 && idvec_push(out, s->sym_id[i]) != 0) return -1;
    // Words with dropped bytes are not cached: each occurrence must be noted (and out->v may
    // still be NULL when nothing was pushed).
    if (n <= WORDCACHE_MAX_WORD && s->n_dropped == dropped_before)
        wordcache_put(&s->cache, w, n, h, out->v + first, out->n - first);
    return 0;
}

// Splits text[0..n) with the pre-tokeniser regex; each match (and any unmatched gap, which
// these regexes never leave) is one word.
static int split_and_encode(const EmxTokenizer *tk, EncScratch *s, const char *text, size_t n,
                            IdVec *out, char *err, size_t errlen) {
    if (!s->md) {
        s->md = pcre2_match_data_create_from_pattern(tk->re, NULL);
        if (!s->md) return -1;
    }
    size_t off = 0;
    while (off < n) {
        int rc = -1;
        if (tk->re_jit)
            rc = pcre2_jit_match(tk->re, (PCRE2_SPTR)text, n, off, PCRE2_NO_UTF_CHECK, s->md, tk->mctx);
        if (!tk->re_jit || rc == PCRE2_ERROR_JIT_STACKLIMIT)
            rc = pcre2_match(tk->re, (PCRE2_SPTR)text, n, off, PCRE2_NO_UTF_CHECK, s->md, tk->mctx);
        size_t start = n, end = n;
        if (rc >= 0) {
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
            start = ov[0], end = ov[1];
        } else if (rc != PCRE2_ERROR_NOMATCH) {
            emx_seterr(err, errlen, "tokenizer: split regex failed at byte %zu (pcre2 error %d)", off, rc);
            return -2;
        }
        if (start > off &&
            bpe_encode_word(tk, s, (const uint8_t *)text + off, start - off, out) != 0)
            return -1;
        if (end == start && start < n) {  // empty match: take one character
            uint32_t cp;
            int l = tok_utf8_next((const uint8_t *)text + start, n - start, &cp);
            end = start + (size_t)(l > 0 ? l : 1);
        }
        if (end > start && bpe_encode_word(tk, s, (const uint8_t *)text + start, end - start, out))
            return -1;
        off = end;
    }
    return 0;
}

static int is_number_cp(uint32_t cp) {
    if (cp < 0x80) return cp >= '0' && cp <= '9';
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

int bpe_encode_segment(const EmxTokenizer *tk, EncScratch *s, const char *text, size_t n,
                       IdVec *out, char *err, size_t errlen) {
    int rc;
    if (tk->td.pre != EMX_PRE_SMOLLM) {
        rc = split_and_encode(tk, s, text, n, out, err, errlen);
    } else {
        // SmolLM: Digits(individual_digits) first — every numeric character is its own word —
        // then the GPT-2 regex on each stretch between them (its lookahead ends there).
        rc = 0;
        size_t run = 0, i = 0;
        while (i < n && rc == 0) {
            uint32_t cp;
            int l = tok_utf8_next((const uint8_t *)text + i, n - i, &cp);
            if (l <= 0) l = 1, cp = 0xFFFD;
            if (is_number_cp(cp)) {
                if (i > run) rc = split_and_encode(tk, s, text + run, i - run, out, err, errlen);
                if (rc == 0) rc = bpe_encode_word(tk, s, (const uint8_t *)text + i, (size_t)l, out);
                run = i + (size_t)l;
            }
            i += (size_t)l;
        }
        if (rc == 0 && n > run) rc = split_and_encode(tk, s, text + run, n - run, out, err, errlen);
    }
    if (rc == -1) emx_seterr(err, errlen, "tokenizer: out of memory");
    return rc ? -1 : 0;
}
