// tokenizer_build_llama2c.c — TokenizerData from a llama2.c tokenizer.bin:
//   i32 max_token_length, then n_vocab x (f32 score, i32 len, len bytes).
// llama2.c's exporter wrote pieces with spaces (not U+2581) and BOS/EOS as "\n<s>\n" /
// "\n</s>\n"; we store the SentencePiece spelling ("▁", "<s>", "</s>") so that every SPM
// tokenizer looks the same to the runtime.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/convert/tok_builder.h"
#include "tools/convert/tokenizer_build.h"
#include "base/errmsg.h"


static int is_byte_piece(const char *s, size_t len) {
    static const char hex[] = "0123456789ABCDEF";
    return len == 6 && memcmp(s, "<0x", 3) == 0 && strchr(hex, s[3]) && strchr(hex, s[4]) &&
           s[3] && s[4] && s[5] == '>';
}

int tokdata_from_llama2c(const char *path, uint32_t n_vocab, TokenizerData *out, char *err,
                         size_t errlen) {
    memset(out, 0, sizeof *out);
    if (n_vocab == 0 || n_vocab >= (1u << 30)) {
        emx_seterr(err, errlen, "%s: n_vocab = %u is not a valid vocabulary size", path, n_vocab);
        return -1;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        emx_seterr(err, errlen, "%s: cannot open", path);
        return -1;
    }
    TokBuilder b;
    if (tb_init(&b, n_vocab) != 0) {
        fclose(f);
        emx_seterr(err, errlen, "tokenizer: out of memory");
        return -1;
    }
    int32_t max_len;
    char *buf = NULL;
    if (fread(&max_len, 4, 1, f) != 1 || max_len <= 0 || max_len > (1 << 20)) {
        emx_seterr(err, errlen, "%s: offset 0: max_token_length missing or invalid", path);
        goto fail;
    }
    // A piece may be longer than max_token_length by the bytes of "▁" per space; allow 3x.
    buf = malloc(3 * (size_t)max_len + 8);
    if (!buf) goto oom;
    long off = 4;
    for (uint32_t i = 0; i < n_vocab; i++) {
        float score;
        int32_t len;
        if (fread(&score, 4, 1, f) != 1 || fread(&len, 4, 1, f) != 1) {
            emx_seterr(err, errlen, "%s: offset %ld: truncated at token %u of %u", path, off, i, n_vocab);
            goto fail;
        }
        if (len < 0 || len > max_len) {
            emx_seterr(err, errlen, "%s: offset %ld: token %u length %d outside 0..max_token_length %d",
                   path, off + 4, i, len, max_len);
            goto fail;
        }
        if (fread(buf, 1, (size_t)len, f) != (size_t)len) {
            emx_seterr(err, errlen, "%s: offset %ld: token %u truncated", path, off + 8, i);
            goto fail;
        }
        off += 8 + len;
        uint8_t type = EMX_TOKT_NORMAL;
        char piece[3 * 64 + 8];
        const char *p = buf;
        size_t plen = (size_t)len;
        if (i == 0) type = EMX_TOKT_UNKNOWN;
        else if (i == 1 || i == 2) {
            type = EMX_TOKT_CONTROL;
            p = i == 1 ? "<s>" : "</s>", plen = strlen(p);
        } else if (is_byte_piece(buf, plen)) {
            type = EMX_TOKT_BYTE;
        }
        if (type == EMX_TOKT_NORMAL) {
            // Spaces back to U+2581 (E2 96 81).
            char *q = (size_t)len * 3 < sizeof piece ? piece : malloc(3 * (size_t)len + 1);
            if (!q) goto oom;
            size_t o = 0;
            for (int32_t k = 0; k < len; k++) {
                if (buf[k] == ' ') q[o++] = (char)0xE2, q[o++] = (char)0x96, q[o++] = (char)0x81;
                else q[o++] = buf[k];
            }
            int rc = tb_set_piece(&b, i, q, o, type, score);
            if (q != piece) free(q);
            if (rc != 0) goto oom;
        } else if (tb_set_piece(&b, i, p, plen, type, score) != 0) {
            goto oom;
        }
    }
    fclose(f);
    f = NULL;
    free(buf);
    buf = NULL;
    b.meta.kind = EMX_TOK_SPM;
    b.meta.pre = EMX_PRE_NONE;
    b.meta.flags = EMX_TOKF_ADD_BOS | EMX_TOKF_ADD_SPACE_PREFIX;
    b.meta.unk_id = 0;
    b.meta.bos_id = n_vocab > 1 ? 1 : -1;
    b.meta.eos_id = n_vocab > 2 ? 2 : -1;
    // run.c's generate() stops when the model emits BOS (it delimits stories); EOS too.
    tb_add_stop(&b, b.meta.eos_id);
    tb_add_stop(&b, b.meta.bos_id);
    int rc = tb_finish(&b, out, err, errlen);
    tb_free(&b);
    return rc;
oom:
    emx_seterr(err, errlen, "tokenizer: out of memory");
fail:
    if (f) fclose(f);
    free(buf);
    tb_free(&b);
    return -1;
}
