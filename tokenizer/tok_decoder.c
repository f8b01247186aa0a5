// tok_decoder.c — streaming detokeniser: token bytes in, complete UTF-8 out.
//
// A token's bytes can end in the middle of a character (byte-level BPE splits UTF-8 freely,
// SPM emits <0xNN> pieces one byte at a time). Up to 3 bytes of an unfinished character are
// held in the decoder; everything else is emitted at once, invalid bytes as U+FFFD with the
// maximal-subpart rule, so the stream equals bytes.decode("utf-8", "replace") of the whole.
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_utf8.h"
#include "tokenizer/tokenizer_internal.h"

void emx_decoder_init(EmxDecoder *d, const EmxTokenizer *tk, int skip_control) {
    memset(d, 0, sizeof *d);
    d->tk = tk;
    d->skip_control = skip_control;
    d->prev_id = -1;
}

size_t emx_decoder_max_out(const EmxTokenizer *tk) { return 3 * ((size_t)tk->max_raw_len + 4); }

typedef struct {
    char *p;
    size_t n, cap;
} Out;

static void emit(Out *o, const void *s, size_t len) {
    size_t k = o->cap - o->n < len ? o->cap - o->n : len;
    if (k == 0) return;
    memcpy(o->p + o->n, s, k);
    o->n += k;
}

#define REPLACEMENT "\xEF\xBF\xBD"

// Emits the complete characters of s[0..n); returns how many trailing bytes form an
// unfinished character (not emitted).
static size_t emit_valid(Out *o, const uint8_t *s, size_t n) {
    size_t i = 0, run = 0;  // s[run..i) is valid text not yet copied
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        int r = tok_utf8_next(s + i, n - i, &cp);
        if (r > 0) {
            i += (size_t)r;
            continue;
        }
        emit(o, s + run, i - run);
        if (r == 0) return n - i;  // unfinished at the end: hold back
        emit(o, REPLACEMENT, 3);
        i += (size_t)-r;
        run = i;
    }
    emit(o, s + run, i - run);
    return 0;
}

size_t emx_decoder_push(EmxDecoder *d, int id, char *out, size_t cap) {
    const EmxTokenizer *tk = d->tk;
    Out o = {out, 0, out ? cap : 0};
    int prev = d->prev_id;
    d->prev_id = id;
    size_t len;
    const uint8_t *b = (const uint8_t *)emx_token_bytes_ref(tk, id, &len);
    if (!b || (d->skip_control && emx_is_control(tk, id))) return 0;
    // llama2.c: the piece right after BOS loses its leading space (the dummy prefix); a
    // tokenizer that adds none (Gemma: HF's decoder has no Strip) keeps it.
    if (tk->td.kind == EMX_TOK_SPM && (tk->td.flags & EMX_TOKF_ADD_SPACE_PREFIX) && prev >= 0 &&
        prev == tk->td.bos_id && len && b[0] == ' ')
        b++, len--;
    if (len == 0) return 0;
    size_t i = 0;
    if (d->n_pend) {
        // Finish (or reject) the held-back character with the first bytes of this token.
        uint8_t tmp[8];
        size_t np = (size_t)d->n_pend, nb = len < 4 ? len : 4, tl = np + nb;
        memcpy(tmp, d->pend, np);
        memcpy(tmp + np, b, nb);
        size_t pos = 0;
        d->n_pend = 0;
        while (pos < np) {  // characters that start in the held-back bytes
            uint32_t cp;
            int r = tok_utf8_next(tmp + pos, tl - pos, &cp);
            if (r > 0) {
                emit(&o, tmp + pos, (size_t)r);
                pos += (size_t)r;
            } else if (r < 0) {
                emit(&o, REPLACEMENT, 3);
                pos += (size_t)-r;
            } else {  // still unfinished: this token was too short to complete it
                memcpy(d->pend, tmp + pos, tl - pos);
                d->n_pend = (int)(tl - pos);
                return o.n;
            }
        }
        i = pos - np;  // bytes of this token already used
    }
    size_t hold = emit_valid(&o, b + i, len - i);
    memcpy(d->pend, b + len - hold, hold);
    d->n_pend = (int)hold;
    return o.n;
}

char *emx_decode_ids(const EmxTokenizer *tk, const int *ids, int n, int skip_control, size_t *len) {
    const size_t step = emx_decoder_max_out(tk);
    char *text = malloc((size_t)(n > 0 ? n + 1 : 1) * step + 1);
    if (!text) return NULL;
    EmxDecoder d;
    emx_decoder_init(&d, tk, skip_control);
    size_t k = 0;
    for (int i = 0; i < n; i++) k += emx_decoder_push(&d, ids[i], text + k, step);
    k += emx_decoder_flush(&d, text + k, step);
    text[k] = 0;
    *len = k;
    return text;
}

size_t emx_decoder_flush(EmxDecoder *d, char *out, size_t cap) {
    Out o = {out, 0, out ? cap : 0};
    if (d->n_pend) emit(&o, REPLACEMENT, 3);  // an unfinished character is one invalid subpart
    d->n_pend = 0;
    return o.n;
}
