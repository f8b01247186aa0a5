// source_llama2c.c — karpathy/llama2.c checkpoints: the legacy "v0" layout (7 x int32 header,
// then float32 weights in run.c's order) and the "ak42" version 1 export (256-byte header,
// float32 weights with the norms first). Weights are in Meta's layout: RoPE on interleaved
// pairs. Version 2 (int8 Q8_0 groups) is not read.
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "tools/convert/source.h"
#include "base/errmsg.h"
#include "tools/convert/tokenizer_build.h"

#define AK42_MAGIC 0x616b3432u

typedef struct {
    ConvSource *s;
    const uint8_t *base;
    uint64_t size, pos;
    char *err;
    size_t errlen;
} Reader;

// Takes the next rows*cols floats for tensor `name` (of layer `layer`, -1 for none).
static int take(Reader *r, const char *name, int layer, uint32_t ndim, uint64_t rows, uint64_t cols) {
    char ours[EMX_NAME_BYTES];
    if (layer >= 0) snprintf(ours, sizeof ours, "layers.%d.%s", layer, name);
    else snprintf(ours, sizeof ours, "%s", name);
    uint64_t bytes = rows * cols * 4;
    if (bytes > r->size - r->pos) {
        snprintf(r->err, r->errlen, "%s: tensor %s at offset %llu needs %llu bytes, the file has %llu left (truncated)",
                 r->s->path, ours, (unsigned long long)r->pos, (unsigned long long)bytes,
                 (unsigned long long)(r->size - r->pos));
        return -1;
    }
    const void *p = r->base + r->pos;
    r->pos += bytes;
    return src_add(r->s, ours, ours, GGML_F32, ndim, rows, cols, p, r->err, r->errlen);
}

static int skip(Reader *r, const char *what, uint64_t bytes) {
    if (bytes > r->size - r->pos) {
        snprintf(r->err, r->errlen, "%s: %s at offset %llu needs %llu bytes, the file has %llu left (truncated)",
                 r->s->path, what, (unsigned long long)r->pos, (unsigned long long)bytes,
                 (unsigned long long)(r->size - r->pos));
        return -1;
    }
    r->pos += bytes;
    return 0;
}

// One matrix per layer, all layers back to back.
static int take_layers(Reader *r, const char *name, uint32_t n_layers, uint32_t ndim, uint64_t rows, uint64_t cols) {
    for (uint32_t l = 0; l < n_layers; l++)
        if (take(r, name, (int)l, ndim, rows, cols)) return -1;
    return 0;
}

// What the header says: layout version (0: legacy 28-byte header, 1: "ak42" 256-byte), the seven
// config ints (vocab_size made positive), whether the classifier is the embedding, and where the
// weights start.
typedef struct {
    int version;
    int32_t p[7];  // dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len
    int shared;
    uint64_t header;
} Header;

static int read_header(const uint8_t *base, size_t size, const char *path, Header *h, char *err, size_t errlen) {
    uint32_t magic;
    memcpy(&magic, base, 4);
    int32_t *p = h->p;
    h->version = 0;
    if (magic == AK42_MAGIC) {
        int32_t v;
        memcpy(&v, base + 4, 4);
        if (v != 1) {
            emx_seterr(err, errlen, "%s: llama2.c export version %d is not supported (only the float32 v0 and v1 layouts)",
                     path, v);
            return -1;
        }
        if (size < 256) {
            emx_seterr(err, errlen, "%s: %zu bytes, too small for a llama2.c v1 header (256)", path, size);
            return -1;
        }
        h->version = 1;
        memcpy(p, base + 8, sizeof h->p);
        h->shared = base[36] != 0;
        h->header = 256;
    } else {
        memcpy(p, base, sizeof h->p);
        h->shared = p[5] > 0;  // v0: a negative vocab_size means a separate classifier follows
        if (p[5] == INT32_MIN) {  // has no positive twin
            emx_seterr(err, errlen, "%s: header vocab_size = %d is not a plausible llama2.c value (not a llama2.c "
                     "checkpoint?)", path, p[5]);
            return -1;
        }
        if (p[5] < 0) p[5] = -p[5];
        h->header = 28;
    }
    const char *field[7] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"};
    for (int i = 0; i < 7; i++)
        if (p[i] <= 0 || p[i] > (1 << 24)) {
            emx_seterr(err, errlen, "%s: header %s = %d is not a plausible llama2.c value (not a llama2.c checkpoint?)",
                     path, field[i], p[i]);
            return -1;
        }
    if (p[0] % p[3] || (p[0] / p[3]) % 2 || p[3] % p[4] || p[2] > (int)EMX_MAX_LAYERS) {
        emx_seterr(err, errlen, "%s: header dim %d, n_heads %d, n_kv_heads %d, n_layers %d are inconsistent", path,
                 p[0], p[3], p[4], p[2]);
        return -1;
    }
    return 0;
}

// The weights in the file's order (v0 and v1 differ), checked against the config's shapes.
static int take_weights(Reader *r, const EmxConfig *c, int version) {
    uint64_t dim = c->dim, hid = c->hidden_dim, hd = c->head_dim;
    uint64_t q = c->n_heads * hd, kv = c->n_kv_heads * hd;
    if (version == 0) {
        if (take(r, "tok_embeddings", -1, 2, c->vocab_size, dim) || take_layers(r, "attn_norm", c->n_layers, 1, dim, 1) ||
            take_layers(r, "wq", c->n_layers, 2, q, dim) || take_layers(r, "wk", c->n_layers, 2, kv, dim) ||
            take_layers(r, "wv", c->n_layers, 2, kv, dim) || take_layers(r, "wo", c->n_layers, 2, dim, q) ||
            take_layers(r, "ffn_norm", c->n_layers, 1, dim, 1) || take_layers(r, "w_gate", c->n_layers, 2, hid, dim) ||
            take_layers(r, "w_down", c->n_layers, 2, dim, hid) || take_layers(r, "w_up", c->n_layers, 2, hid, dim) ||
            take(r, "norm", -1, 1, dim, 1) ||
            skip(r, "freq_cis tables", 2 * (uint64_t)c->max_seq_len * (hd / 2) * 4))  // we compute RoPE ourselves
            return -1;
    } else {
        if (take_layers(r, "attn_norm", c->n_layers, 1, dim, 1) || take_layers(r, "ffn_norm", c->n_layers, 1, dim, 1) ||
            take(r, "norm", -1, 1, dim, 1) || take(r, "tok_embeddings", -1, 2, c->vocab_size, dim) ||
            take_layers(r, "wq", c->n_layers, 2, q, dim) || take_layers(r, "wk", c->n_layers, 2, kv, dim) ||
            take_layers(r, "wv", c->n_layers, 2, kv, dim) || take_layers(r, "wo", c->n_layers, 2, dim, q) ||
            take_layers(r, "w_gate", c->n_layers, 2, hid, dim) || take_layers(r, "w_down", c->n_layers, 2, dim, hid) ||
            take_layers(r, "w_up", c->n_layers, 2, hid, dim))
            return -1;
    }
    return 0;
}

int src_open_llama2c(ConvSource *s, const char *path, const char *tokenizer, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    s->ext = emx_config_ext_default();
    s->path = path;
    size_t size;
    const uint8_t *base = src_map_file(s, path, &size, err, errlen);
    if (!base) return -1;
    if (size < 28) {
        emx_seterr(err, errlen, "%s: %zu bytes, too small for a llama2.c header (28)", path, size);
        return -1;
    }
    Header h;
    if (read_header(base, size, path, &h, err, errlen)) return -1;
    const int32_t *p = h.p;
    int version = h.version, shared = h.shared;
    EmxConfig *c = &s->cfg;
    c->arch = EMX_ARCH_LLAMA;
    c->dim = (uint32_t)p[0];
    c->hidden_dim = (uint32_t)p[1];
    c->n_layers = (uint32_t)p[2];
    c->n_heads = (uint32_t)p[3];
    c->n_kv_heads = (uint32_t)p[4];
    c->head_dim = c->dim / c->n_heads;
    c->vocab_size = (uint32_t)p[5];
    c->max_seq_len = (uint32_t)p[6];
    c->norm_eps = 1e-5f;      // llama2.c run.c hard-codes these
    c->rope_theta = 10000.0f;
    c->rope_style = EMX_ROPE_INTERLEAVED;
    c->tied_output = (uint32_t)shared;
    c->group_size = EMX_GROUP_SIZE;
    snprintf(s->kind, sizeof s->kind, "llama2.c checkpoint (v%d)", version);

    Reader r = {s, base, size, h.header, err, errlen};
    if (take_weights(&r, c, version)) return -1;
    if (!shared && take(&r, "output", -1, 2, c->vocab_size, c->dim)) return -1;
    if (r.pos != size) {
        emx_seterr(err, errlen, "%s: %llu bytes past the last tensor (offset %llu): header does not match the weights",
                 path, (unsigned long long)(size - r.pos), (unsigned long long)r.pos);
        return -1;
    }
    if (!tokenizer) {
        emx_seterr(err, errlen, "%s: a llama2.c checkpoint carries no tokenizer: pass --tokenizer tokenizer.bin", path);
        return -1;
    }
    src_note_input(s, tokenizer);
    return tokdata_from_llama2c(tokenizer, c->vocab_size, &s->tok, err, errlen);
}
