// model.c — open a model file: mmap it, validate every field against the file and the
// configuration, and point EmxModel's tensors into the mapping (see model_format.h and
// docs/model-format.md for the layout and the rules checked here).
#include "runtime/model.h"
#include "runtime/model_verify.h"
#include "base/mem_available.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/dtype.h"
#include "base/errmsg.h"
#include "base/out_file.h"

// One-line error "<path>: <message>".
static int fail(char *err, size_t errlen, const char *path, const char *fmt, ...) {
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (err && errlen) emx_seterr(err, errlen, "%s: %s", path, msg);
    return -1;
}

static int check_config(const EmxConfig *c, const char *path, char *err, size_t errlen) {
    // Every size the forward pass turns into an int (and products of them: q_dim, kv_dim) must
    // fit one; the bounds are far above any real model and below what overflows. A field past
    // its bound is reported alone, before anything derived from it can contradict it.
    const struct { const char *name; uint32_t v, max; } range[] = {
        {"dim", c->dim, 1u << 20},          {"hidden_dim", c->hidden_dim, 1u << 22},
        {"n_layers", c->n_layers, EMX_MAX_LAYERS},
        {"n_heads", c->n_heads, 1u << 16},  {"n_kv_heads", c->n_kv_heads, 1u << 16},
        {"head_dim", c->head_dim, 1u << 16},{"vocab_size", c->vocab_size, 1u << 30},
        {"max_seq_len", c->max_seq_len, 1u << 30},  // positions are ints: pos + n must not wrap
    };
    for (size_t i = 0; i < sizeof range / sizeof range[0]; i++)
        if (range[i].v == 0 || range[i].v > range[i].max)
            return fail(err, errlen, path, "config.%s = %u is out of range [1, %u]", range[i].name, range[i].v,
                        range[i].max);
    if ((uint64_t)c->n_heads * c->head_dim > (1u << 24))
        return fail(err, errlen, path, "config.n_heads = %u times head_dim = %u exceeds %u", c->n_heads,
                    c->head_dim, 1u << 24);
    if (c->arch < EMX_ARCH_LLAMA || c->arch > EMX_ARCH_GEMMA3)
        return fail(err, errlen, path, "config.arch = %u is not a known architecture", c->arch);
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
    if (c->chat_template > EMX_CHAT_GEMMA3)
        return fail(err, errlen, path, "config.chat_template = %u is not known", c->chat_template);
    return 0;
}

// Version 2's fields (a version-1 file's are the defaults, always sane).
static int check_ext(const EmxConfigExt *e, const EmxConfig *c, const char *path, char *err, size_t errlen) {
    const struct { const char *name; uint32_t v; } flags[] = {
        {"qkv_bias", e->qkv_bias}, {"sandwich_norms", e->sandwich_norms},
    };
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (flags[i].v > 1) return fail(err, errlen, path, "config.%s = %u is not 0 or 1", flags[i].name, flags[i].v);
    if (e->ffn_act > EMX_ACT_GELU_TANH)
        return fail(err, errlen, path, "config.ffn_act = %u is not known", e->ffn_act);
    if (!(e->embed_scale > 0 && isfinite(e->embed_scale)))
        return fail(err, errlen, path, "config.embed_scale = %g is not a positive number", (double)e->embed_scale);
    if (!(e->attn_scale >= 0 && isfinite(e->attn_scale)))
        return fail(err, errlen, path, "config.attn_scale = %g is not 0 or a positive number", (double)e->attn_scale);
    if (!(e->rope_theta_local >= 0 && isfinite(e->rope_theta_local)))
        return fail(err, errlen, path, "config.rope_theta_local = %g is not 0 or a positive number",
                    (double)e->rope_theta_local);
    if (!(e->rope_linear_global >= 1 && isfinite(e->rope_linear_global)))
        return fail(err, errlen, path, "config.rope_linear_global = %g is not a number >= 1", (double)e->rope_linear_global);
    if (e->sliding_window > c->max_seq_len)
        return fail(err, errlen, path, "config.sliding_window = %u exceeds max_seq_len = %u", e->sliding_window,
                    c->max_seq_len);
    for (uint32_t l = c->n_layers; l < EMX_MAX_LAYERS; l++)
        if (e->local_layers[l / 32] >> (l % 32) & 1u)
            return fail(err, errlen, path, "config.local_layers marks layer %u, past n_layers = %u", l, c->n_layers);
    for (size_t i = 0; i < sizeof e->reserved / sizeof e->reserved[0]; i++)
        if (e->reserved[i]) return fail(err, errlen, path, "config.ext.reserved[%zu] = %u is not zero", i, e->reserved[i]);
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
    const int bias = (int)m->ext.qkv_bias, sandwich = (int)m->ext.sandwich_norms;
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
            {"bq", &L->bq, q, 1, 1, bias},
            {"bk", &L->bk, kv, 1, 1, bias},
            {"bv", &L->bv, kv, 1, 1, bias},
            {"post_attn_norm", &L->post_attn_norm, c->dim, 1, 1, sandwich},
            {"post_ffn_norm", &L->post_ffn_norm, c->dim, 1, 1, sandwich},
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
            {"w_down", &L->w_down, 1}, {"bq", &L->bq, (int)m->ext.qkv_bias}, {"bk", &L->bk, (int)m->ext.qkv_bias},
            {"bv", &L->bv, (int)m->ext.qkv_bias}, {"post_attn_norm", &L->post_attn_norm, (int)m->ext.sandwich_norms},
            {"post_ffn_norm", &L->post_ffn_norm, (int)m->ext.sandwich_norms},
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
    char shown[4 * EMX_NAME_BYTES + 1];  // the name as messages show it: control bytes escaped
    emx_escape(name, EMX_NAME_BYTES, shown, sizeof shown);
    const uint8_t *base = m->map;
    uint64_t size = m->map_size;
    if (te->dtype >= EMX_DTYPE_COUNT)
        return fail(err, errlen, path, "tensor %s: dtype = %u is not known", shown, te->dtype);
    Expected e;
    if (expected_for(m, name, &e) != 0)
        return fail(err, errlen, path, "tensor %s: name not expected for this config", shown);
    if (e.slot->data) return fail(err, errlen, path, "tensor %s: appears twice", shown);
    if (te->ndim != (e.is_vector ? 1u : 2u))
        return fail(err, errlen, path, "tensor %s: ndim = %u but expected %u", shown, te->ndim, e.is_vector ? 1 : 2);
    if (te->shape[0] != e.rows || te->shape[1] != e.cols) {
        if (e.is_vector)
            return fail(err, errlen, path, "tensor %s: shape [%llu, %llu] but config implies [%llu]", shown,
                        (unsigned long long)te->shape[0], (unsigned long long)te->shape[1], (unsigned long long)e.rows);
        return fail(err, errlen, path, "tensor %s: shape [%llu, %llu] but config implies [%llu, %llu]", shown,
                    (unsigned long long)te->shape[0], (unsigned long long)te->shape[1],
                    (unsigned long long)e.rows, (unsigned long long)e.cols);
    }
    if (e.is_vector && te->dtype != EMX_F32)
        return fail(err, errlen, path, "tensor %s: dtype = %s but norms and rope factors must be f32", shown,
                    emx_dtype_name(te->dtype));
    uint64_t want = emx_tensor_bytes(te->dtype, te->shape[0], te->shape[1]);
    if (want == 0)
        return fail(err, errlen, path, "tensor %s: dtype %s cannot hold %llu columns", shown,
                    emx_dtype_name(te->dtype), (unsigned long long)te->shape[1]);
    if (te->nbytes != want)
        return fail(err, errlen, path, "tensor %s: nbytes = %llu but %s [%llu, %llu] needs %llu", shown,
                    (unsigned long long)te->nbytes, emx_dtype_name(te->dtype), (unsigned long long)te->shape[0],
                    (unsigned long long)te->shape[1], (unsigned long long)want);
    if (te->offset % EMX_ALIGN)
        return fail(err, errlen, path, "tensor %s: offset = %llu is not a multiple of %u", shown,
                    (unsigned long long)te->offset, EMX_ALIGN);
    if (te->offset > size || te->nbytes > size - te->offset)
        return fail(err, errlen, path, "tensor %s: data [%llu, %llu) past the end of the file (%llu bytes)", shown,
                    (unsigned long long)te->offset, (unsigned long long)(te->offset + te->nbytes),
                    (unsigned long long)size);
    *e.slot = (EmxTensor){te->dtype, te->shape[0], te->shape[1], base + te->offset};
    return 0;
}

// A byte range of the file that one part of it owns.
typedef struct {
    uint64_t off, len;
    char what[4 * EMX_NAME_BYTES + 16];  // "tensor layers.0.wq", "tokenizer section"
} Section;

static int section_cmp(const void *a, const void *b) {
    const Section *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off ? 1 : 0;
}

// No two parts of the file (header, tokenizer section, tensor directory, each tensor's data)
// share a byte: a crafted file could otherwise make one tensor's weights another's, or the
// tokenizer's pieces weights. Each part is already known to lie inside the file. Sorted by
// offset, a part overlaps an earlier one exactly when it starts before the furthest end so far.
static int check_sections(const EmxModel *m, const EmxFileHeader *h, const char *path, char *err, size_t errlen) {
    const uint8_t *base = m->map;
    size_t n = 0;
    Section *s = malloc(((size_t)h->n_tensors + 3) * sizeof *s);
    if (!s) return fail(err, errlen, path, "out of memory checking %u tensors", h->n_tensors);
    s[n++] = (Section){0, h->header_bytes, "header"};
    s[n++] = (Section){h->tokenizer_offset, h->tokenizer_bytes, "tokenizer section"};
    s[n++] = (Section){h->tensor_dir_offset, (uint64_t)h->n_tensors * sizeof(EmxTensorEntry), "tensor directory"};
    for (uint32_t i = 0; i < h->n_tensors; i++) {
        EmxTensorEntry te;
        memcpy(&te, base + h->tensor_dir_offset + (uint64_t)i * sizeof te, sizeof te);
        Section *t = &s[n++];
        t->off = te.offset, t->len = te.nbytes;
        memcpy(t->what, "tensor ", 7);
        emx_escape(te.name, EMX_NAME_BYTES, t->what + 7, sizeof t->what - 7);
    }
    qsort(s, n, sizeof *s, section_cmp);
    size_t far = 0;  // the part that ends furthest among those seen
    int rc = 0;
    for (size_t i = 1; i < n && rc == 0; i++) {
        if (s[i].len == 0) continue;
        if (s[i].off < s[far].off + s[far].len)
            rc = fail(err, errlen, path, "%s [%llu, %llu) overlaps %s [%llu, %llu)", s[i].what,
                      (unsigned long long)s[i].off, (unsigned long long)(s[i].off + s[i].len), s[far].what,
                      (unsigned long long)s[far].off, (unsigned long long)(s[far].off + s[far].len));
        if (s[i].off + s[i].len > s[far].off + s[far].len) far = i;
    }
    free(s);
    return rc;
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
    if (h.version != EMX_VERSION_1 && h.version != EMX_VERSION)
        return fail(err, errlen, path, "version = %u (this build reads versions 1 and %u)", h.version, EMX_VERSION);
    const uint32_t want_header = h.version == EMX_VERSION_1 ? EMX_HEADER_V1_BYTES : EMX_HEADER_V2_BYTES;
    if (h.header_bytes != want_header)
        return fail(err, errlen, path, "header_bytes = %u, expected %u for version %u", h.header_bytes, want_header,
                    h.version);
    if (size < want_header)
        return fail(err, errlen, path, "file is %llu bytes, shorter than the %u-byte header (truncated)",
                    (unsigned long long)size, want_header);
    m->version = h.version;
    m->ext = emx_config_ext_default();
    if (h.version != EMX_VERSION_1) memcpy(&m->ext, base + sizeof h, sizeof m->ext);
    if (h.file_bytes != size)
        return fail(err, errlen, path, "file_bytes = %llu but the file has %llu bytes (%s)",
                    (unsigned long long)h.file_bytes, (unsigned long long)size,
                    size < h.file_bytes ? "truncated" : "trailing data");
    m->cfg = h.config;
    if (check_config(&m->cfg, path, err, errlen) || check_ext(&m->ext, &m->cfg, path, err, errlen)) return -1;

    if (h.tokenizer_offset % 8 || h.tokenizer_offset < want_header)
        return fail(err, errlen, path, "tokenizer_offset = %llu is %s", (unsigned long long)h.tokenizer_offset,
                    h.tokenizer_offset < want_header ? "inside the header" : "not a multiple of 8");
    if (h.tokenizer_offset > size || h.tokenizer_bytes > size - h.tokenizer_offset)
        return fail(err, errlen, path,
                    "tokenizer section [offset %llu, tokenizer_bytes = %llu] is outside the file (%llu bytes)",
                    (unsigned long long)h.tokenizer_offset, (unsigned long long)h.tokenizer_bytes,
                    (unsigned long long)size);
    char tok_err[320];
    if (tokdata_view(base + h.tokenizer_offset, h.tokenizer_bytes, &m->tok, tok_err, sizeof tok_err))
        return fail(err, errlen, path, "%s", tok_err);
    if (m->tok.n_vocab != m->cfg.vocab_size)
        return fail(err, errlen, path, "tokenizer section: n_vocab = %u but config.vocab_size = %u", m->tok.n_vocab,
                    m->cfg.vocab_size);

    uint64_t dir_bytes = (uint64_t)h.n_tensors * sizeof(EmxTensorEntry);
    if (h.tensor_dir_offset % 8 || h.tensor_dir_offset < want_header)
        return fail(err, errlen, path, "tensor_dir_offset = %llu is %s", (unsigned long long)h.tensor_dir_offset,
                    h.tensor_dir_offset < want_header ? "inside the header" : "not a multiple of 8");
    if (h.tensor_dir_offset > size || dir_bytes > size - h.tensor_dir_offset)
        return fail(err, errlen, path,
                    "tensor directory [tensor_dir_offset = %llu, n_tensors = %u] is outside the file (%llu bytes)",
                    (unsigned long long)h.tensor_dir_offset, h.n_tensors, (unsigned long long)size);

    m->layers = calloc(m->cfg.n_layers, sizeof *m->layers);
    if (!m->layers) return fail(err, errlen, path, "out of memory for %u layers", m->cfg.n_layers);
    for (uint32_t i = 0; i < h.n_tensors; i++) {
        EmxTensorEntry te;
        memcpy(&te, base + h.tensor_dir_offset + (uint64_t)i * sizeof te, sizeof te);
        char name[EMX_NAME_BYTES + 1];
        memcpy(name, te.name, EMX_NAME_BYTES);
        name[EMX_NAME_BYTES] = 0;
        if (memchr(te.name, 0, EMX_NAME_BYTES) == NULL || name[0] == 0) {
            char shown[4 * EMX_NAME_BYTES + 1];
            return fail(err, errlen, path, "tensor directory entry %u: name \"%s\" is empty or not NUL-terminated", i,
                        emx_escape(name, EMX_NAME_BYTES, shown, sizeof shown));
        }
        if (check_tensor(m, &te, name, path, err, errlen)) return -1;
    }
    if (check_sections(m, &h, path, err, errlen)) return -1;
    char buf[64];
    const char *missing = first_missing(m, buf, sizeof buf);
    if (missing) return fail(err, errlen, path, "tensor %s: missing", missing);
    // Last, the structure being sound: the recorded checksums of the header, directory and
    // tokenizer, so a changed byte there (a tensor's offset, a vocabulary entry) is told from a
    // sound file on every load (0.4 ms for SmolLM2-135M). The tensor data's is checked on request
    // (./run --verify; the server at startup): model_verify.h.
    char why[512];
    if (emx_verify_image(base, size, 0, path, why, sizeof why) < 0) return emx_seterr(err, errlen, "%s", why);
    if (m->cfg.tied_output) m->output = m->tok_embeddings;
    return 0;
}

// A copy of the weights in 2 MiB pages: a decode step streams every weight once, and with 4 KiB
// pages each step also walks the page tables for every 4 KiB of weights (in a VM, two levels of
// them). SmolLM2-135M q8 decode, -t 2, 2-core Xeon VM, alternated: 101-106 tok/s mapped, 122-124
// in huge pages.
#define HUGE_PAGE ((size_t)2 << 20)
#define EMX_LOAD_AUTO_MIN ((size_t)64 << 20)  // smaller files: too few pages to matter

// Whether the kernel grants huge pages on request (transparent_hugepage not "[never]").
static int thp_available(void) {
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (!f) return 0;
    char line[128] = {0};
    const int ok = fgets(line, sizeof line, f) && !strstr(line, "[never]");
    fclose(f);
    return ok;
}

// Whether a copy of `bytes` leaves the memory the states need: at most half of what is available
// (unknown: yes).
static int roomy_for_copy(size_t bytes) {
    const uint64_t avail = emx_mem_available();
    return avail == 0 || bytes <= avail / 2;
}

// Anonymous memory of `bytes` at a 2 MiB boundary, huge pages asked for (*len: what to unmap);
// NULL if none.
static void *huge_alloc(size_t bytes, size_t *len) {
    const size_t want = (bytes + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1), span = want + HUGE_PAGE;
    uint8_t *p = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    uint8_t *a = (uint8_t *)(((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (a > p) munmap(p, (size_t)(a - p));                 // the unaligned head
    if (a + want < p + span) munmap(a + want, (size_t)(p + span - (a + want)));  // and tail
#ifdef MADV_HUGEPAGE
    madvise(a, want, MADV_HUGEPAGE);  // advice only: where refused, 4 KiB pages, same bytes
#endif
    *len = want;
    return a;
}

int emx_model_open_load(EmxModel *m, const char *path, EmxLoad load, char *err, size_t errlen) {
    memset(m, 0, sizeof *m);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return fail(err, errlen, path, "cannot open: %s", strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return fail(err, errlen, path, "cannot stat: %s", strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) {  // a directory maps as "No such device", /dev/zero as 0 bytes
        close(fd);
        return fail(err, errlen, path, "is %s, not a model file", emx_out_kind_name((unsigned)st.st_mode));
    }
    if (st.st_size < (off_t)sizeof(EmxFileHeader)) {
        close(fd);
        return fail(err, errlen, path, "file is %lld bytes, shorter than the %zu-byte header (truncated)",
                    (long long)st.st_size, sizeof(EmxFileHeader));
    }
    m->map_size = m->map_len = (size_t)st.st_size;
    m->map = mmap(NULL, m->map_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m->map == MAP_FAILED) {
        m->map = NULL;
        return fail(err, errlen, path, "mmap failed: %s", strerror(errno));
    }
    const int copy = load == EMX_LOAD_COPY || (load == EMX_LOAD_AUTO && m->map_size >= EMX_LOAD_AUTO_MIN &&
                                               roomy_for_copy(m->map_size) && thp_available());
    size_t len = 0;
    void *a = copy ? huge_alloc(m->map_size, &len) : NULL;
    if (a) {  // validated below as copied: what is checked is what runs (without memory: mapped)
        memcpy(a, m->map, m->map_size);
        munmap(m->map, m->map_size);
        mprotect(a, len, PROT_READ);
        m->map = a, m->map_len = len, m->copied = 1;
    }
    if (validate(m, path, err, errlen)) {
        emx_model_close(m);
        return -1;
    }
    return 0;
}

int emx_model_open(EmxModel *m, const char *path, char *err, size_t errlen) {
    return emx_model_open_load(m, path, EMX_LOAD_AUTO, err, errlen);
}

const char *emx_model_memory_text(const EmxModel *m, char *buf, size_t cap) {
    if (m->copied)
        snprintf(buf, cap, "a copy in memory, %.0f of %.0f MiB in 2 MiB pages",
                 (double)emx_model_huge_bytes(m) / (1 << 20), (double)m->map_size / (1 << 20));
    else snprintf(buf, cap, "the file mapped (4 KiB pages)");
    return buf;
}

uint64_t emx_model_huge_bytes(const EmxModel *m) {
    FILE *f = m->copied ? fopen("/proc/self/smaps", "r") : NULL;
    if (!f) return 0;
    char line[512];
    int in = 0;
    uint64_t kb = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) in = lo == (uintptr_t)m->map;  // a mapping's first line
        else if (in && sscanf(line, "AnonHugePages: %" SCNu64 " kB", &kb) == 1) break;
    }
    fclose(f);
    return kb * 1024;
}

void emx_model_close(EmxModel *m) {
    free(m->layers);
    if (m->map) munmap(m->map, m->map_len);
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
                                &L->k_norm, &L->ffn_norm, &L->w_gate, &L->w_up, &L->w_down, &L->bq,
                                &L->bk, &L->bv, &L->post_attn_norm, &L->post_ffn_norm};
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
            if (t[i]->data) total += emx_tensor_bytes(t[i]->dtype, t[i]->rows, t[i]->cols);
    }
    return total;
}

int emx_model_verify(const char *path, char *msg, size_t msglen) {
    EmxModel m;
    if (emx_model_open_load(&m, path, EMX_LOAD_MMAP, msg, msglen)) return -1;
    const int rc = emx_verify_image(m.map, m.map_size, 1, path, msg, msglen);
    emx_model_close(&m);
    return rc;
}
