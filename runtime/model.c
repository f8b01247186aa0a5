// model.c — open a model file: mmap it, validate every field against the file and the
// configuration, and point EmxModel's tensors into the mapping (see model_format.h and
// docs/model-format.md for the layout and the rules checked here).
#include "model.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dtype.h"

// One-line error "<path>: <message>".
static int fail(char *err, size_t errlen, const char *path, const char *fmt, ...) {
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (err && errlen) snprintf(err, errlen, "%s: %s", path, msg);
    return -1;
}

static int check_config(const EmxConfig *c, const char *path, char *err, size_t errlen) {
    const struct { const char *name; uint32_t v; } nonzero[] = {
        {"dim", c->dim}, {"hidden_dim", c->hidden_dim}, {"n_layers", c->n_layers},
        {"n_heads", c->n_heads}, {"n_kv_heads", c->n_kv_heads}, {"head_dim", c->head_dim},
        {"vocab_size", c->vocab_size}, {"max_seq_len", c->max_seq_len},
    };
    for (size_t i = 0; i < sizeof nonzero / sizeof nonzero[0]; i++)
        if (nonzero[i].v == 0) return fail(err, errlen, path, "config.%s = 0", nonzero[i].name);
    if (c->arch != EMX_ARCH_LLAMA && c->arch != EMX_ARCH_QWEN3)
        return fail(err, errlen, path, "config.arch = %u is not a known architecture", c->arch);
    if (c->n_layers > EMX_MAX_LAYERS)
        return fail(err, errlen, path, "config.n_layers = %u exceeds %u", c->n_layers, EMX_MAX_LAYERS);
    if (c->n_heads % c->n_kv_heads)
        return fail(err, errlen, path, "config.n_heads = %u is not a multiple of n_kv_heads = %u",
                    c->n_heads, c->n_kv_heads);
    if (c->head_dim % 2)
        return fail(err, errlen, path, "config.head_dim = %u is odd (RoPE rotates pairs)", c->head_dim);
    if (c->rope_style != EMX_ROPE_INTERLEAVED && c->rope_style != EMX_ROPE_HALF)
        return fail(err, errlen, path, "config.rope_style = %u is not known", c->rope_style);
    if (!(c->norm_eps > 0 && isfinite(c->norm_eps)))
        return fail(err, errlen, path, "config.norm_eps = %g is not a positive number", (double)c->norm_eps);
    if (!(c->rope_theta > 0 && isfinite(c->rope_theta)))
        return fail(err, errlen, path, "config.rope_theta = %g is not a positive number", (double)c->rope_theta);
    const struct { const char *name; uint32_t v; } flags[] = {
        {"rope_freq_factors", c->rope_freq_factors}, {"qk_norm", c->qk_norm}, {"tied_output", c->tied_output},
    };
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (flags[i].v > 1) return fail(err, errlen, path, "config.%s = %u is not 0 or 1", flags[i].name, flags[i].v);
    if (c->group_size != EMX_GROUP_SIZE)
        return fail(err, errlen, path, "config.group_size = %u (only %u is supported)", c->group_size, EMX_GROUP_SIZE);
    if (c->chat_template > EMX_CHAT_CHATML)
        return fail(err, errlen, path, "config.chat_template = %u is not known", c->chat_template);
    return 0;
}

// Where a tensor name goes in the model and the shape the configuration implies for it.
typedef struct {
    EmxTensor *slot;
    uint64_t rows, cols;
    int is_vector;  // 1-D, stored f32: norms and rope factors
} Expected;

// Fills *e for `name`, or returns -1 if the name is not one this configuration has.
static int expected_for(EmxModel *m, const char *name, Expected *e) {
    const EmxConfig *c = &m->cfg;
    uint64_t q = (uint64_t)c->n_heads * c->head_dim, kv = (uint64_t)c->n_kv_heads * c->head_dim;
    memset(e, 0, sizeof *e);
    if (strncmp(name, "layers.", 7) == 0) {
        const char *p = name + 7;
        char *end;
        if (*p < '0' || *p > '9') return -1;
        errno = 0;
        unsigned long l = strtoul(p, &end, 10);
        if (errno || *end != '.' || l >= c->n_layers || (end - p > 1 && *p == '0')) return -1;
        EmxLayer *L = &m->layers[l];
        const char *s = end + 1;
        struct { const char *suffix; EmxTensor *slot; uint64_t rows, cols; int vec, present; } t[] = {
            {"attn_norm", &L->attn_norm, c->dim, 1, 1, 1},
            {"wq", &L->wq, q, c->dim, 0, 1},
            {"wk", &L->wk, kv, c->dim, 0, 1},
            {"wv", &L->wv, kv, c->dim, 0, 1},
            {"wo", &L->wo, c->dim, q, 0, 1},
            {"q_norm", &L->q_norm, c->head_dim, 1, 1, (int)c->qk_norm},
            {"k_norm", &L->k_norm, c->head_dim, 1, 1, (int)c->qk_norm},
            {"ffn_norm", &L->ffn_norm, c->dim, 1, 1, 1},
            {"w_gate", &L->w_gate, c->hidden_dim, c->dim, 0, 1},
            {"w_up", &L->w_up, c->hidden_dim, c->dim, 0, 1},
            {"w_down", &L->w_down, c->dim, c->hidden_dim, 0, 1},
        };
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
            if (strcmp(s, t[i].suffix) != 0) continue;
            if (!t[i].present) return -1;
            *e = (Expected){t[i].slot, t[i].rows, t[i].cols, t[i].vec};
            return 0;
        }
        return -1;
    }
    if (strcmp(name, "tok_embeddings") == 0) *e = (Expected){&m->tok_embeddings, c->vocab_size, c->dim, 0};
    else if (strcmp(name, "norm") == 0) *e = (Expected){&m->norm, c->dim, 1, 1};
    else if (strcmp(name, "output") == 0 && !c->tied_output) *e = (Expected){&m->output, c->vocab_size, c->dim, 0};
    else if (strcmp(name, "rope_freq_factors") == 0 && c->rope_freq_factors)
        *e = (Expected){&m->rope_freq_factors, c->head_dim / 2, 1, 1};
    else return -1;
    return 0;
}

// The first tensor the configuration requires that the directory did not have, or NULL.
static const char *first_missing(const EmxModel *m, char *buf, size_t cap) {
    const EmxConfig *c = &m->cfg;
    if (!m->tok_embeddings.data) return "tok_embeddings";
    if (!m->norm.data) return "norm";
    if (!c->tied_output && !m->output.data) return "output";
    if (c->rope_freq_factors && !m->rope_freq_factors.data) return "rope_freq_factors";
    for (uint32_t l = 0; l < c->n_layers; l++) {
        const EmxLayer *L = &m->layers[l];
        const struct { const char *n; const EmxTensor *t; int need; } t[] = {
            {"attn_norm", &L->attn_norm, 1}, {"wq", &L->wq, 1}, {"wk", &L->wk, 1}, {"wv", &L->wv, 1},
            {"wo", &L->wo, 1}, {"q_norm", &L->q_norm, (int)c->qk_norm}, {"k_norm", &L->k_norm, (int)c->qk_norm},
            {"ffn_norm", &L->ffn_norm, 1}, {"w_gate", &L->w_gate, 1}, {"w_up", &L->w_up, 1},
            {"w_down", &L->w_down, 1},
        };
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
            if (t[i].need && !t[i].t->data) {
                snprintf(buf, cap, "layers.%u.%s", l, t[i].n);
                return buf;
            }
    }
    return NULL;
}

static int check_tensor(EmxModel *m, const EmxTensorEntry *te, const char *name, const char *path,
                        char *err, size_t errlen) {
    const uint8_t *base = m->map;
    uint64_t size = m->map_size;
    if (te->dtype >= EMX_DTYPE_COUNT)
        return fail(err, errlen, path, "tensor %s: dtype = %u is not known", name, te->dtype);
    Expected e;
    if (expected_for(m, name, &e) != 0)
        return fail(err, errlen, path, "tensor %s: name not expected for this config", name);
    if (e.slot->data) return fail(err, errlen, path, "tensor %s: appears twice", name);
    if (te->ndim != (e.is_vector ? 1u : 2u))
        return fail(err, errlen, path, "tensor %s: ndim = %u but expected %u", name, te->ndim, e.is_vector ? 1 : 2);
    if (te->shape[0] != e.rows || te->shape[1] != e.cols) {
        if (e.is_vector)
            return fail(err, errlen, path, "tensor %s: shape [%llu, %llu] but config implies [%llu]", name,
                        (unsigned long long)te->shape[0], (unsigned long long)te->shape[1], (unsigned long long)e.rows);
        return fail(err, errlen, path, "tensor %s: shape [%llu, %llu] but config implies [%llu, %llu]", name,
                    (unsigned long long)te->shape[0], (unsigned long long)te->shape[1],
                    (unsigned long long)e.rows, (unsigned long long)e.cols);
    }
    if (e.is_vector && te->dtype != EMX_F32)
        return fail(err, errlen, path, "tensor %s: dtype = %s but norms and rope factors must be f32", name,
                    emx_dtype_name(te->dtype));
    uint64_t want = emx_tensor_bytes(te->dtype, te->shape[0], te->shape[1]);
    if (want == 0)
        return fail(err, errlen, path, "tensor %s: dtype %s cannot hold %llu columns", name,
                    emx_dtype_name(te->dtype), (unsigned long long)te->shape[1]);
    if (te->nbytes != want)
        return fail(err, errlen, path, "tensor %s: nbytes = %llu but %s [%llu, %llu] needs %llu", name,
                    (unsigned long long)te->nbytes, emx_dtype_name(te->dtype), (unsigned long long)te->shape[0],
                    (unsigned long long)te->shape[1], (unsigned long long)want);
    if (te->offset % EMX_ALIGN)
        return fail(err, errlen, path, "tensor %s: offset = %llu is not a multiple of %u", name,
                    (unsigned long long)te->offset, EMX_ALIGN);
    if (te->offset > size || te->nbytes > size - te->offset)
        return fail(err, errlen, path, "tensor %s: data [%llu, %llu) past the end of the file (%llu bytes)", name,
                    (unsigned long long)te->offset, (unsigned long long)(te->offset + te->nbytes),
                    (unsigned long long)size);
    *e.slot = (EmxTensor){te->dtype, te->shape[0], te->shape[1], base + te->offset};
    return 0;
}

static int validate(EmxModel *m, const char *path, char *err, size_t errlen) {
    const uint8_t *base = m->map;
    uint64_t size = m->map_size;
    EmxFileHeader h;
    if (size < sizeof h)
        return fail(err, errlen, path, "file is %llu bytes, shorter than the %zu-byte header (truncated)",
                    (unsigned long long)size, sizeof h);
    memcpy(&h, base, sizeof h);
    if (memcmp(h.magic, EMX_MAGIC, 8) != 0) return fail(err, errlen, path, "magic is not \"" EMX_MAGIC "\"");
    if (h.version != EMX_VERSION)
        return fail(err, errlen, path, "version = %u (this build reads version %u)", h.version, EMX_VERSION);
    if (h.header_bytes != sizeof h)
        return fail(err, errlen, path, "header_bytes = %u, expected %zu", h.header_bytes, sizeof h);
    if (h.file_bytes != size)
        return fail(err, errlen, path, "file_bytes = %llu but the file has %llu bytes (%s)",
                    (unsigned long long)h.file_bytes, (unsigned long long)size,
                    size < h.file_bytes ? "truncated" : "trailing data");
    m->cfg = h.config;
    if (check_config(&m->cfg, path, err, errlen)) return -1;

    if (h.tokenizer_offset % 8 || h.tokenizer_offset < sizeof h || h.tokenizer_offset > size ||
        h.tokenizer_bytes > size - h.tokenizer_offset)
        return fail(err, errlen, path, "tokenizer section [offset %llu, %llu bytes] is misaligned or outside the file",
                    (unsigned long long)h.tokenizer_offset, (unsigned long long)h.tokenizer_bytes);
    char tok_err[320];
    if (tokdata_view(base + h.tokenizer_offset, h.tokenizer_bytes, &m->tok, tok_err, sizeof tok_err))
        return fail(err, errlen, path, "%s", tok_err);
    if (m->tok.n_vocab != m->cfg.vocab_size)
        return fail(err, errlen, path, "tokenizer section: n_vocab = %u but config.vocab_size = %u", m->tok.n_vocab,
                    m->cfg.vocab_size);

    uint64_t dir_bytes = (uint64_t)h.n_tensors * sizeof(EmxTensorEntry);
    if (h.tensor_dir_offset % 8 || h.tensor_dir_offset < sizeof h || h.tensor_dir_offset > size ||
        dir_bytes > size - h.tensor_dir_offset)
        return fail(err, errlen, path, "tensor directory [offset %llu, %u entries] is misaligned or outside the file",
                    (unsigned long long)h.tensor_dir_offset, h.n_tensors);

    m->layers = calloc(m->cfg.n_layers, sizeof *m->layers);
    if (!m->layers) return fail(err, errlen, path, "out of memory for %u layers", m->cfg.n_layers);
    for (uint32_t i = 0; i < h.n_tensors; i++) {
        EmxTensorEntry te;
        memcpy(&te, base + h.tensor_dir_offset + (uint64_t)i * sizeof te, sizeof te);
        char name[EMX_NAME_BYTES + 1];
        memcpy(name, te.name, EMX_NAME_BYTES);
        name[EMX_NAME_BYTES] = 0;
        if (memchr(te.name, 0, EMX_NAME_BYTES) == NULL || name[0] == 0)
            return fail(err, errlen, path, "tensor directory entry %u: name is empty or not NUL-terminated", i);
        if (check_tensor(m, &te, name, path, err, errlen)) return -1;
    }
    char buf[64];
    const char *missing = first_missing(m, buf, sizeof buf);
    if (missing) return fail(err, errlen, path, "tensor %s: missing", missing);
    if (m->cfg.tied_output) m->output = m->tok_embeddings;
    return 0;
}

int emx_model_open(EmxModel *m, const char *path, char *err, size_t errlen) {
    memset(m, 0, sizeof *m);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return fail(err, errlen, path, "cannot open: %s", strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return fail(err, errlen, path, "cannot stat: %s", strerror(errno));
    }
    if (st.st_size < (off_t)sizeof(EmxFileHeader)) {
        close(fd);
        return fail(err, errlen, path, "file is %lld bytes, shorter than the %zu-byte header (truncated)",
                    (long long)st.st_size, sizeof(EmxFileHeader));
    }
    m->map_size = (size_t)st.st_size;
    m->map = mmap(NULL, m->map_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m->map == MAP_FAILED) {
        m->map = NULL;
        return fail(err, errlen, path, "mmap failed: %s", strerror(errno));
    }
    if (validate(m, path, err, errlen)) {
        emx_model_close(m);
        return -1;
    }
    return 0;
}

void emx_model_close(EmxModel *m) {
    free(m->layers);
    if (m->map) munmap(m->map, m->map_size);
    memset(m, 0, sizeof *m);
}

uint64_t emx_model_weight_bytes_per_token(const EmxModel *m) {
    const EmxTensor *e = &m->tok_embeddings;
    uint64_t total = emx_tensor_bytes(e->dtype, e->rows, e->cols) / (e->rows ? e->rows : 1);  // one embedding row
    total += emx_tensor_bytes(m->norm.dtype, m->norm.rows, m->norm.cols);
    total += emx_tensor_bytes(m->output.dtype, m->output.rows, m->output.cols);
    for (uint32_t l = 0; l < m->cfg.n_layers; l++) {
        const EmxLayer *L = &m->layers[l];
        const EmxTensor *t[] = {&L->attn_norm, &L->wq, &L->wk, &L->wv, &L->wo, &L->q_norm,
                                &L->k_norm, &L->ffn_norm, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
            if (t[i]->data) total += emx_tensor_bytes(t[i]->dtype, t[i]->rows, t[i]->cols);
    }
    return total;
}
