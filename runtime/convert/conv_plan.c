// conv_plan.c — the tensors a configuration needs, their shapes and output dtypes.
#include "runtime/convert/conv_plan.h"

#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "base/errmsg.h"
#include "tokenizer/chat_template.h"

// The tensors a configuration needs, in file order.
typedef struct {
    char name[EMX_NAME_BYTES];
    uint64_t rows, cols;
    int is_vector;
} Want;

static size_t plan(const EmxConfig *c, const EmxConfigExt *e, Want *w) {
    size_t n = 0;
    uint64_t q = (uint64_t)c->n_heads * c->head_dim, kv = (uint64_t)c->n_kv_heads * c->head_dim;
#define WANT(nm, r, cl, v) (snprintf(w[n].name, EMX_NAME_BYTES, "%s", nm), w[n].rows = (r), w[n].cols = (cl), w[n].is_vector = (v), n++)
    WANT("tok_embeddings", c->vocab_size, c->dim, 0);
    for (uint32_t l = 0; l < c->n_layers; l++) {
        char p[EMX_NAME_BYTES];
        const struct { const char *s; uint64_t r, cl; int v, need; } t[] = {
            {"attn_norm", c->dim, 1, 1, 1},      {"wq", q, c->dim, 0, 1},
            {"wk", kv, c->dim, 0, 1},            {"wv", kv, c->dim, 0, 1},
            {"wo", c->dim, q, 0, 1},             {"q_norm", c->head_dim, 1, 1, (int)c->qk_norm},
            {"k_norm", c->head_dim, 1, 1, (int)c->qk_norm}, {"ffn_norm", c->dim, 1, 1, 1},
            {"w_gate", c->hidden_dim, c->dim, 0, 1}, {"w_up", c->hidden_dim, c->dim, 0, 1},
            {"w_down", c->dim, c->hidden_dim, 0, 1},
            {"bq", q, 1, 1, (int)e->qkv_bias}, {"bk", kv, 1, 1, (int)e->qkv_bias}, {"bv", kv, 1, 1, (int)e->qkv_bias},
            {"post_attn_norm", c->dim, 1, 1, (int)e->sandwich_norms},
            {"post_ffn_norm", c->dim, 1, 1, (int)e->sandwich_norms},
        };
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
            if (!t[i].need) continue;
            snprintf(p, sizeof p, "layers.%u.%s", l, t[i].s);
            WANT(p, t[i].r, t[i].cl, t[i].v);
        }
    }
    WANT("norm", c->dim, 1, 1);
    if (!c->tied_output) WANT("output", c->vocab_size, c->dim, 0);
    if (c->rope_freq_factors) WANT("rope_freq_factors", c->head_dim / 2, 1, 1);
#undef WANT
    return n;
}

uint32_t conv_keep_dtype(uint32_t src_type) {
    switch (src_type) {
    case GGML_F32: return EMX_F32;
    case GGML_F16: return EMX_F16;
    case GGML_BF16: return EMX_BF16;
    case GGML_Q4_0: return EMX_Q4;
    case GGML_Q4_1: return EMX_Q4_1;
    case GGML_Q4_K: return EMX_Q4_1F;  // exactly: f32 products of its f16 scales and 6-bit factors
    default: return EMX_Q8;  // Q8_0 exactly; Q5_0, Q5_1, Q5_K, Q6_K requantised
    }
}

// Output dtype of one tensor: vectors are f32; a matrix follows --dtype (or its source type),
// except q8/q4/q4_1/q4_1f need rows that split into 32-weight groups, and a 4-bit file keeps its
// embeddings at q8 unless told not to.
static uint32_t pick_dtype(const ConvPlanOptions *o, const Want *w, uint32_t src_type) {
    if (w->is_vector) return EMX_F32;
    if (o->dtype == CONV_DTYPE_KEEP) return conv_keep_dtype(src_type);  // block types split into 32s already
    uint32_t d = (uint32_t)o->dtype;
    const int four_bit = d == EMX_Q4 || d == EMX_Q4_1 || d == EMX_Q4_1F;
    if (four_bit && o->keep_emb_q8 && (!strcmp(w->name, "tok_embeddings") || !strcmp(w->name, "output"))) d = EMX_Q8;
    if ((d == EMX_Q8 || four_bit) && w->cols % EMX_GROUP_SIZE) {
        if (o->log)
            fprintf(o->log, "  %s: %llu columns are not a multiple of %u: kept f32\n", w->name,
                    (unsigned long long)w->cols, EMX_GROUP_SIZE);
        d = EMX_F32;
    }
    return d;
}

void conv_set_chat_template(ConvSource *s, int choice) {
    s->cfg.chat_template = EMX_CHAT_NONE;
    if (choice >= 0) s->cfg.chat_template = (uint32_t)choice;
    else if (s->chat_template) s->cfg.chat_template = emx_chat_template_detect(s->chat_template, strlen(s->chat_template));
}

static int check_shape(const ConvSource *s, const SrcTensor *t, const Want *wt, char *err, size_t errlen) {
    if (t->ndim == (wt->is_vector ? 1u : 2u) && t->rows == wt->rows && t->cols == wt->cols) return 0;
    if (wt->is_vector)
        emx_seterr(err, errlen, "%s: tensor %s: shape [%llu, %llu] but the configuration implies [%llu]", s->path,
                   t->src_name, (unsigned long long)t->rows, (unsigned long long)t->cols, (unsigned long long)wt->rows);
    else
        emx_seterr(err, errlen, "%s: tensor %s: shape [%llu, %llu] but the configuration implies [%llu, %llu]", s->path,
                   t->src_name, (unsigned long long)t->rows, (unsigned long long)t->cols, (unsigned long long)wt->rows,
                   (unsigned long long)wt->cols);
    return -1;
}

int conv_collect(const ConvSource *s, const ConvPlanOptions *o, ModelWriter *w, char *err, size_t errlen) {
    size_t cap = 4 + (size_t)s->cfg.n_layers * 16;  // 16 >= the per-layer entries of plan()
    Want *want = calloc(cap, sizeof *want);
    if (!want) return emx_seterr(err, errlen, "out of memory"), -1;
    size_t n = plan(&s->cfg, &s->ext, want);
    int rc = -1;
    for (size_t i = 0; i < n; i++) {
        const Want *wt = &want[i];
        const SrcTensor *t = src_find(s, wt->name);
        if (!t) {
            emx_seterr(err, errlen, "%s: tensor %s is missing (the configuration needs it)", s->path, wt->name);
            goto out;
        }
        if (check_shape(s, t, wt, err, errlen) ||
            mw_add(w, wt->name, pick_dtype(o, wt, t->type), t->ndim, t->rows, t->cols, t->type, t->data, err, errlen))
            goto out;
    }
    for (size_t i = 0; i < s->n; i++) {
        int used = 0;
        for (size_t k = 0; k < n && !used; k++) used = !strcmp(s->t[i].name, want[k].name);
        if (!used) {
            emx_seterr(err, errlen, "%s: tensor %s does not belong to this configuration", s->path, s->t[i].src_name);
            goto out;
        }
    }
    rc = 0;
out:
    free(want);
    return rc;
}
