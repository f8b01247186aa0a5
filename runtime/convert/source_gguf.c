// source_gguf.c — GGUF files of architecture "llama" or "qwen3".
//
// llama.cpp's converter permutes the q/k rows of "llama" models into interleaved RoPE pairs
// (its rope type NORM), so those files are EMX_ROPE_INTERLEAVED and copied as they are; "qwen3"
// uses NEOX (rotate-half) order: EMX_ROPE_HALF. ggml dims: ne[0] is the row length.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/convert/ggml_dequant.h"
#include "base/errmsg.h"
#include "runtime/convert/msg_esc.h"
#include "runtime/convert/source.h"
#include "runtime/convert/tokenizer_gguf.h"

// "{arch}.{suffix}" as an integer; def < 0 means required.
static int key_u32(const GGUFFile *g, const char *arch, const char *suffix, int64_t def, uint32_t *out, char *err,
                   size_t errlen) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int64_t v;
    if (gguf_get_i64(g, key, &v) != 0) {
        // Present but not a whole number in range (a string, an array, 1e30 as a float) is an
        // error even for an optional key: taking the default would convert a different model.
        if (def < 0 || gguf_find(g, key)) {
            emx_seterr(err, errlen, "%s: key %s is %s", g->path, key,
                     gguf_find(g, key) ? "not an integer in range" : "missing (or not a scalar)");
            return -1;
        }
        v = def;
    }
    if (v <= 0 || v > 0xffffffffll) {
        emx_seterr(err, errlen, "%s: key %s = %lld is out of range", g->path, key, (long long)v);
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

static int key_f32(const GGUFFile *g, const char *arch, const char *suffix, double def, float *out, char *err,
                   size_t errlen) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    double v;
    if (gguf_get_f64(g, key, &v) != 0) {
        if (gguf_find(g, key)) {  // present but not a number: not the default's to replace
            emx_seterr(err, errlen, "%s: key %s is not a number", g->path, key);
            return -1;
        }
        v = def;
    }
    // Checked as the loader checks the float it becomes (1e39 is a finite double, an infinite float).
    if (!(v > 0) || !isfinite((float)v) || (float)v == 0) {
        emx_seterr(err, errlen, "%s: key %s = %g is not a positive number that fits a float32", g->path, key, v);
        return -1;
    }
    *out = (float)v;
    return 0;
}

// GGUF tensor name -> ours; 1 if mapped, 0 if not needed, -1 if unknown.
static int map_name(const char *gg, char *ours, size_t cap) {
    static const char *const top[][2] = {
        {"token_embd.weight", "tok_embeddings"}, {"output_norm.weight", "norm"},
        {"output.weight", "output"},             {"rope_freqs.weight", "rope_freq_factors"},
    };
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
        if (strcmp(gg, top[i][0]) == 0) return snprintf(ours, cap, "%s", top[i][1]), 1;
    unsigned layer;
    int used = 0;
    if (sscanf(gg, "blk.%u.%n", &layer, &used) != 1 || used == 0) return -1;
    static const char *const blk[][2] = {
        {"attn_norm.weight", "attn_norm"}, {"attn_q.weight", "wq"},           {"attn_k.weight", "wk"},
        {"attn_v.weight", "wv"},           {"attn_output.weight", "wo"},      {"attn_q_norm.weight", "q_norm"},
        {"attn_k_norm.weight", "k_norm"},  {"ffn_norm.weight", "ffn_norm"},   {"ffn_gate.weight", "w_gate"},
        {"ffn_up.weight", "w_up"},         {"ffn_down.weight", "w_down"},
    };
    for (size_t i = 0; i < sizeof blk / sizeof blk[0]; i++)
        if (strcmp(gg + used, blk[i][0]) == 0) return snprintf(ours, cap, "layers.%u.%s", layer, blk[i][1]), 1;
    if (strcmp(gg + used, "rope_freqs.weight") == 0) return 0;  // some files repeat it per block
    return -1;
}

// The hyperparameters under "{arch}.*" into c, and the checks that they describe a model we run
// (full RoPE, no scaling, whole head groups).
static int read_config(const GGUFFile *g, const char *arch, EmxConfig *c, const char *path, char *err,
                       size_t errlen) {
    if (key_u32(g, arch, "block_count", -1, &c->n_layers, err, errlen) ||
        key_u32(g, arch, "embedding_length", -1, &c->dim, err, errlen) ||
        key_u32(g, arch, "feed_forward_length", -1, &c->hidden_dim, err, errlen) ||
        key_u32(g, arch, "attention.head_count", -1, &c->n_heads, err, errlen) ||
        key_u32(g, arch, "attention.head_count_kv", c->n_heads, &c->n_kv_heads, err, errlen) ||
        key_u32(g, arch, "attention.key_length", c->dim / c->n_heads, &c->head_dim, err, errlen) ||
        key_u32(g, arch, "context_length", 4096, &c->max_seq_len, err, errlen) ||
        key_f32(g, arch, "rope.freq_base", 10000.0, &c->rope_theta, err, errlen) ||
        key_f32(g, arch, "attention.layer_norm_rms_epsilon", arch[0] == 'q' ? 1e-6 : 1e-5, &c->norm_eps, err, errlen))
        return -1;
    uint32_t rot = c->head_dim, vlen = c->head_dim;
    if (key_u32(g, arch, "rope.dimension_count", c->head_dim, &rot, err, errlen) ||
        key_u32(g, arch, "attention.value_length", c->head_dim, &vlen, err, errlen))
        return -1;
    if (rot != c->head_dim || vlen != c->head_dim) {
        emx_seterr(err, errlen, "%s: %s.rope.dimension_count %u / attention.value_length %u differ from key_length %u "
                 "(partial RoPE is not supported)", path, arch, rot, vlen, c->head_dim);
        return -1;
    }
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    size_t stl;
    const char *st = gguf_get_str(g, key, &stl);
    if (st && !(stl == 4 && memcmp(st, "none", 4) == 0)) {
        emx_seterr(err, errlen, "%s: %s = \"%s\" is not supported", path, key, ESCN(st, stl));
        return -1;
    }
    if (c->n_heads % c->n_kv_heads || c->head_dim % 2 || c->n_layers > EMX_MAX_LAYERS) {
        emx_seterr(err, errlen, "%s: head_count %u, head_count_kv %u, key_length %u, block_count %u are inconsistent",
                 path, c->n_heads, c->n_kv_heads, c->head_dim, c->n_layers);
        return -1;
    }
    c->group_size = EMX_GROUP_SIZE;
    return 0;
}

// Every tensor the model needs, named ours, added to s (dims and ggml type checked).
static int add_tensors(ConvSource *s, const char *path, char *err, size_t errlen) {
    const GGUFFile *g = &s->gguf;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const GGUFTensor *t = &g->tensors[i];
        char name[160], ours[EMX_NAME_BYTES];
        snprintf(name, sizeof name, "%.*s", (int)(t->name_len < 159 ? t->name_len : 159), t->name);
        int m = map_name(name, ours, sizeof ours);
        if (m == 0) continue;
        if (m < 0) {
            emx_seterr(err, errlen, "%s: tensor %s is not part of a supported model", path, ESC(name));
            return -1;
        }
        if (t->n_dims > 2 || t->ne[2] != 1 || t->ne[3] != 1) {
            emx_seterr(err, errlen, "%s: tensor %s has %u dimensions (want 1 or 2)", path, ESC(name), t->n_dims);
            return -1;
        }
        if (!ggml_dequant_supported(t->type)) {
            emx_seterr(err, errlen, "%s: tensor %s: ggml type %s is not supported (F32, F16, BF16, Q4_0, Q4_1, Q5_0, "
                     "Q5_1, Q8_0, Q4_K, Q5_K, Q6_K)", path, ESC(name), ggml_type_name(t->type));
            return -1;
        }
        // ggml [ne0, ne1] is row-major [ne1 rows, ne0 cols]; a vector [ne0] is our [n, 1].
        uint64_t rows = t->n_dims == 1 ? t->ne[0] : t->ne[1], cols = t->n_dims == 1 ? 1 : t->ne[0];
        if (src_add(s, ours, name, t->type, t->n_dims, rows, cols, t->data, err, errlen)) return -1;
    }
    return 0;
}

int src_open_gguf(ConvSource *s, const char *path, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    s->ext = emx_config_ext_default();
    s->path = path;
    if (gguf_open(&s->gguf, path, err, errlen)) return -1;
    s->has_gguf = 1;
    src_note_input(s, path);
    const GGUFFile *g = &s->gguf;
    size_t alen;
    const char *a = gguf_get_str(g, "general.architecture", &alen);
    char arch[64];
    snprintf(arch, sizeof arch, "%.*s", a ? (int)(alen < 63 ? alen : 63) : 0, a ? a : "");
    EmxConfig *c = &s->cfg;
    if (strcmp(arch, "llama") == 0) {
        c->arch = EMX_ARCH_LLAMA;
        c->rope_style = EMX_ROPE_INTERLEAVED;
    } else if (strcmp(arch, "qwen3") == 0) {
        c->arch = EMX_ARCH_QWEN3;
        c->rope_style = EMX_ROPE_HALF;
        c->qk_norm = 1;
    } else {
        emx_seterr(err, errlen, "%s: general.architecture = \"%s\" is not supported (llama, qwen3)", path, ESC(arch));
        return -1;
    }
    snprintf(s->kind, sizeof s->kind, "GGUF v%u %s", g->version, arch);
    if (read_config(g, arch, c, path, err, errlen) || add_tensors(s, path, err, errlen)) return -1;
    const SrcTensor *emb = src_find(s, "tok_embeddings");
    if (!emb) {
        emx_seterr(err, errlen, "%s: tensor token_embd.weight is missing", path);
        return -1;
    }
    c->vocab_size = (uint32_t)emb->rows;
    uint32_t kv_vocab;
    if (key_u32(g, arch, "vocab_size", emb->rows, &kv_vocab, err, errlen)) return -1;
    if (kv_vocab != emb->rows) {
        emx_seterr(err, errlen, "%s: %s.vocab_size = %u but token_embd has %llu rows", path, arch, kv_vocab,
                 (unsigned long long)emb->rows);
        return -1;
    }
    c->tied_output = src_find(s, "output") == NULL;
    c->rope_freq_factors = src_find(s, "rope_freq_factors") != NULL;
    size_t ctl;
    const char *ct = gguf_get_str(g, "tokenizer.chat_template", &ctl);
    if (ct && !(s->chat_template = strndup(ct, ctl))) {
        emx_seterr(err, errlen, "out of memory");
        return -1;
    }
    return tokdata_from_gguf(g, c->vocab_size, &s->tok, err, errlen);
}
